"""Inside locust: latency per request name per time bucket, and the rounding and percentile rule shared with the
harness.

This file is handed to locust as a second locustfile (``-f loadtest/locustfile.py,loadtest/soak/buckets.py``), so it
imports nothing but the standard library and locust; it defines no users and does nothing unless the harness set
``TTSQ_SOAK_BUCKETS``. locust's own history CSV has percentiles over a sliding 10 s window, which cannot be merged into
per-minute ones.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

BUCKETS_ENV = "TTSQ_SOAK_BUCKETS"
"""Set by the harness in locust's environment: where the per-bucket latency goes (JSON)."""
BUCKET_S_ENV = "TTSQ_SOAK_BUCKET_S"


# ---- shared by the harness and the locust listener ---------------------------------------------


def locust_round(ms: float) -> int:
    """Round a response time as locust's histogram does (two significant digits above 100 ms)."""
    if ms < 100:
        return round(ms)
    if ms < 1000:
        return int(round(ms, -1))
    if ms < 10_000:
        return int(round(ms, -2))
    return int(round(ms, -3))


def percentile(histogram: Mapping[int, int], fraction: float) -> int:
    """locust's own rule (``stats.calculate_response_time_percentile``) on a ``{ms: count}`` histogram."""
    total = sum(histogram.values())
    rank, seen = int(total * fraction), 0
    for ms in sorted(histogram, reverse=True):
        seen += histogram[ms]
        if total - seen <= rank:
            return ms
    return 0


# ---- inside locust: latency per request name per bucket ----------------------------------------


class BucketRecorder:
    """One response-time histogram, failure count and status count per (type, name, bucket), in locust's process.

    Buckets are counted from locust's ``test_start``; a request falls in the bucket in which it ended.
    Only percentiles are written (small files), at ``test_stop`` and again at ``quitting``.
    """

    def __init__(self, path: Path, bucket_s: float) -> None:
        self.path = path
        self.bucket_s = bucket_s
        self.started: float | None = None
        self.histograms: dict[tuple[str, str, int], Counter[int]] = defaultdict(Counter)
        self.failures: dict[tuple[str, str, int], Counter[str]] = defaultdict(Counter)
        self.statuses: dict[tuple[str, str, int], Counter[str]] = defaultdict(Counter)

    def on_test_start(self, **_: Any) -> None:
        self.started = time.time()

    def on_request(self, request_type: str, name: str, response_time: float, exception: Any = None, **kwargs: Any) -> None:
        now = time.time()
        if self.started is None:
            self.started = now
        key = (request_type, name, int((now - self.started) // self.bucket_s))
        self.histograms[key][locust_round(response_time or 0.0)] += 1
        status = getattr(kwargs.get("response"), "status_code", None)
        if status is not None:
            self.statuses[key][str(status)] += 1
        if exception is not None:
            self.failures[key][str(exception)[:160]] += 1

    def write(self, **_: Any) -> None:
        rows = []
        for (request_type, name, bucket), histogram in sorted(self.histograms.items()):
            key = (request_type, name, bucket)
            rows.append(
                {
                    "type": request_type,
                    "name": name,
                    "bucket": bucket,
                    "count": sum(histogram.values()),
                    "failures": sum(self.failures[key].values()),
                    "p50": percentile(histogram, 0.5),
                    "p95": percentile(histogram, 0.95),
                    "p99": percentile(histogram, 0.99),
                    "max": max(histogram),
                    "statuses": dict(self.statuses[key]),
                    "failure_messages": dict(self.failures[key]),
                }
            )
        body = {"started": self.started, "bucket_s": self.bucket_s, "rows": rows}
        self.path.write_text(json.dumps(body, indent=0))


def _install_bucket_recorder(path: Path, bucket_s: float) -> None:
    from locust import events

    recorder = BucketRecorder(path, bucket_s)
    events.test_start.add_listener(recorder.on_test_start)  # type: ignore[no-untyped-call]
    events.request.add_listener(recorder.on_request)  # type: ignore[no-untyped-call]
    events.test_stop.add_listener(recorder.write)  # type: ignore[no-untyped-call]
    events.quitting.add_listener(recorder.write)  # type: ignore[no-untyped-call]


if __name__ != "__main__" and "locust" in sys.modules and os.environ.get(BUCKETS_ENV):
    # Loaded by locust as a second locustfile: record latency per bucket, nothing else.
    _install_bucket_recorder(Path(os.environ[BUCKETS_ENV]), float(os.environ.get(BUCKET_S_ENV, "60")))
