"""Processes whose host clocks disagree share one clock, Redis's, tested with real processes.

``FAULT_CLOCK_SKEW_S`` runs a whole process's wall clock off (:mod:`ttsq.runtime.clock_skew`), as on a
host whose clock drifted. Two API replicas two seconds apart once let a 1/s, burst-5 limit pass 40 of
40 requests; a worker whose clock runs ahead once judged other workers' live leases lapsed and
requeued their jobs. Every deadline and bucket now runs on Redis's ``TIME``, so neither happens.
"""

from __future__ import annotations

import sys
from typing import Any

import httpx
import pytest
import redis

from tests.support.service import Service, wait_for
from ttsq.runtime.launch import free_port

pytestmark = pytest.mark.e2e

LIMITS = {"RATE_LIMIT_PER_S": "1", "RATE_LIMIT_BURST": "5", "MAX_QUEUED_PER_KEY": "1000"}


def redis_now(service: Service) -> float:
    with redis.Redis(port=service.redis.port) as client:
        seconds, micros = client.time()
    return float(seconds) + float(micros) / 1e6


def test_two_api_replicas_two_seconds_apart_keep_one_rate_limit(service: Service) -> None:
    on_time = service.start_api("api-on-time", **LIMITS)
    ahead = service.start_api("api-ahead", FAULT_CLOCK_SKEW_S="2", **LIMITS)
    began = redis_now(service)
    codes = []
    with httpx.Client(timeout=30) as http:
        for n in range(40):
            url = on_time if n % 2 == 0 else ahead
            codes.append(http.post(f"{url}/v1/tts/submit", json={"text": f"request {n}", "seed": n + 1}).status_code)
    elapsed = redis_now(service) - began
    accepted = codes.count(202)
    assert set(codes) <= {202, 429}, codes
    assert codes[:5] == [202] * 5, "the burst passes"
    assert accepted <= 5 + int(elapsed) + 1, f"{accepted} of 40 passed in {elapsed:.1f}s: the replicas' clocks decided the bucket"
    assert "this process's clock runs +2.0s off" in (service.tmp / "api-ahead.log").read_text()


def start_stand_in_worker(service: Service, name: str, **env: str) -> str:
    """The real worker process (``worker.main``) on the fixed-cost stand-in engine: no model to load, each call 2.5 s."""
    port = free_port()
    command = [sys.executable, "-m", "bench.fixed_worker"]
    settings = {"WORKER_ID": name, "WORKER_HEALTH_PORT": str(port), "BENCH_ENGINE": "fixed", "MAX_BATCH": "1"}
    service.spawn(name, command, **settings, FIXED_COST_CALL_MS="2500", FIXED_COST_ITEM_MS="0", **env)
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: httpx.get(f"{url}/readyz", timeout=2).status_code == 200, 120, f"worker {name} to be ready")
    return url


def test_a_worker_whose_clock_runs_ahead_never_takes_another_workers_live_jobs(service: Service) -> None:
    """LEASE_S=3 and a sweep every half second; one worker's clock runs 30 s ahead. By host clocks its sweeps
    found every lease of the other worker lapsed and requeued the job (which then ran twice, its first
    completion refused); by Redis's clock every job runs once, at its first attempt."""
    start_stand_in_worker(service, "on-time")
    start_stand_in_worker(service, "ahead", FAULT_CLOCK_SKEW_S="30")
    ids = [service.submit(text=f"job {n}", seed=n + 1) for n in range(6)]
    for task_id in ids:
        service.wait_status(task_id, {"done", "failed"}, timeout_s=120)
    statuses: list[dict[str, Any]] = [service.status(task_id) for task_id in ids]
    assert [status["status"] for status in statuses] == ["done"] * len(ids)
    assert [status["attempts"] for status in statuses] == [1] * len(ids), "no job was taken from its live worker"
    logs = {name: (service.tmp / f"{name}.log").read_text() for name in ("on-time", "ahead")}
    assert "this process's clock runs +30.0s off" in logs["ahead"]
    for name, text in logs.items():
        assert "sweep requeued" not in text and "refused" not in text and "was lost" not in text, f"{name}: {text[-2000:]}"
    done_by = {name: text.count("✓") for name, text in logs.items()}
    assert all(done_by.values()), f"both workers ran jobs, so each had leases the other swept past: {done_by}"
