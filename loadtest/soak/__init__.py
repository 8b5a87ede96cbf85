"""Soak test: the locust mix for minutes against a real deployment, with memory, Redis and latency sampled as it runs.

    python -m loadtest.soak [--duration 10m] [--engines fixed,tiny] [--users N] [--out DIR]

Why: a load test of a minute shows speed; leaks, unbounded key growth and latency that creeps up
only show after minutes of steady traffic. For each engine this starts a fresh deployment exactly as
``make up`` does (a real ``redis-server`` from :mod:`ttsq.store.local_redis`, ``uvicorn app:app``, one
worker process), measures its capacity, sizes the user count to ~70 % of it, runs every user class of
``loadtest/locustfile.py`` headless for ``--duration``, and every few seconds samples:

* RSS and CPU of the API, the worker and locust (psutil), and the worker's and API's L1 cache bytes;
* Redis ``used_memory``, key count and keys without a TTL (``INFO``), keys by kind (``SCAN``), queue depth;
* the worker's job counters (done, failed) from its ``/metrics``.

Latency per request name per time bucket (a minute in a long run) comes from locust itself: :mod:`loadtest.soak.buckets`
is handed to locust as a second locustfile (``-f loadtest/locustfile.py,loadtest/soak/buckets.py``),
where it only adds a request listener keeping one response-time histogram per name per bucket
(locust's own history CSV has percentiles over a sliding 10 s window, which cannot be merged into
per-minute ones). It defines no users, and does nothing unless the harness set ``TTSQ_SOAK_BUCKETS``.

Engines run one after the other, each on its own deployment:

* ``fixed``: the fixed-cost model of GPU time (NOT ChatTTS; ``bench/fixed_worker.py``), a STAND-IN
  that sleeps 300 ms per call + 20 ms per item and returns silence. Labelled as such in every output.
* ``tiny``: ``MODEL=tiny``, the genuine ChatTTS code path on random weights (48 audio tokens per chunk).

Results and cache entries expire after a short ``RESULT_TTL_S`` / ``CACHE_TTL_S`` (``--ttl``, 60 s in a
long run), so expiry reaches a steady state within the run; the fair-use limits are lifted, because
every simulated client comes from one loopback address (``RATE_LIMIT_PER_S``, ``RATE_LIMIT_BURST``,
``MAX_QUEUED_PER_KEY``). Writes into ``DIR/``: ``summary.md`` (with the date, the command, the machine's
load average and a verdict per criterion: errors, RSS ±10 %, Redis flat, p99 stable), ``summary.json``
(every figure) and the raw files (samples, per-bucket latency, locust's reports), under 1 MB in all.
Exit status: 0 when every engine ran without an unexpected error, 1 when one had errors, 2 when it could
not run. The other criteria are measured figures with a verdict for the reader, never the exit status:
on a shared machine, other work moves latency.

The package, one module a concern (``python -m loadtest.soak`` runs :mod:`loadtest.soak.run`):

* :mod:`loadtest.soak.run`: the command line, capacity calibration, one engine's run and the whole run;
* :mod:`loadtest.soak.mix`: the locust mix read from the locustfile's source, and the jobs/s it asks for;
* :mod:`loadtest.soak.deployment`: the engines, the deployment (a :class:`bench.stacks.Stack`) and its sampler;
* :mod:`loadtest.soak.buckets`: the listener locust loads, latency per request name per bucket;
* :mod:`loadtest.soak.figures`: the samples and buckets turned into figures and verdicts;
* :mod:`loadtest.soak.report`: the figures as ``summary.md``.
"""
