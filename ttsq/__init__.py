"""ttsq: a production queue and worker pool around the ChatTTS text-to-speech model.

The package is the reusable library, in layers whose imports point one way (checked by
``make lint``, see ``pyproject.toml``'s ``[tool.importlinter]``)::

    ttsq.api  ttsq.runtime       HTTP use cases and schemas | the worker loop, probes, launching
        ttsq.store  ttsq.inference   Redis (queue, cache, voices, streams) | ChatTTS and its text
            ttsq.domain              jobs, text, cache keys, voices, audio: no I/O, no imports of ours

``ttsq.client`` (the HTTP client and command line) stands apart and imports none of them.
The library never reads the environment: the processes at the repository root (``app.py``,
``worker.py``) build :class:`settings.Settings` and hand the library plain config objects.
"""
