"""ttsq: a production queue and worker pool around the ChatTTS text-to-speech model.

The package is the reusable library. It never reads the environment: the processes at the
repository root (``app.py``, ``worker.py``) build :class:`settings.Settings` and hand the
library the plain config objects it needs.
"""

SAMPLE_RATE = 24_000
"""ChatTTS always produces 24 kHz mono float32 audio."""
