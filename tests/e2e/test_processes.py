"""End to end with real processes: redis-server, ``uvicorn app:app`` and ``python worker.py``.

These are the chaos tests: a worker killed with SIGKILL mid-job, a worker stopped with SIGTERM
mid-job, a hung inference, and a Redis outage. Each asserts that an acknowledged job is finished
and never lost.
"""

from __future__ import annotations

import io
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.support.service import ROOT, Service, wait_for
from ttsq.runtime.launch import CONFIG_ERROR_EXIT

pytestmark = pytest.mark.e2e


def test_submit_poll_download(service: Service) -> None:
    service.start_worker("w1", NORMALIZE_TEXT="true")  # the date is read aloud, as in production
    task_id = service.submit(text="End to end. 今天是2026年11月30日。", seed=3, format="flac")
    body = service.wait_status(task_id, {"done", "failed"})
    assert body["status"] == "done", service.logs()
    response = httpx.get(f"{service.api_url}/v1/tts/result/{task_id}")
    assert response.status_code == 200 and response.headers["content-type"] == "audio/flac"
    samples, rate = sf.read(io.BytesIO(response.content))
    assert rate == 24000 and len(samples) > 0
    assert httpx.get(f"{service.api_url}/readyz").json()["workers"] == 1


def test_job_survives_kill_9_of_its_worker(service: Service) -> None:
    """The first worker hangs inside inference (fault injection) and is SIGKILLed mid-job."""
    doomed = service.start_worker("doomed", FAULT_MODE="hang", FAULT_MATCH="SLOW")
    task_id = service.submit(text="A SLOW job that outlives its worker.", seed=4)
    assert service.wait_status(task_id, {"running"})["status"] == "running"
    doomed.process.send_signal(signal.SIGKILL)
    doomed.process.wait()
    service.start_worker("rescuer")
    body = service.wait_status(task_id, {"done", "failed"})
    assert body["status"] == "done", service.logs()
    assert body["attempts"] == 2


def test_sigterm_mid_job_finishes_it_within_the_grace_period(service: Service) -> None:
    """The inference is held for 3 s (a bounded "hang" fault), so SIGTERM surely lands mid-job."""
    worker = service.start_worker("graceful", SHUTDOWN_GRACE_S="60", FAULT_MODE="hang", FAULT_MATCH="LONG", FAULT_HANG_S="3")
    task_id = service.submit(text="A LONG job that is running when SIGTERM arrives.", seed=5)
    service.wait_status(task_id, {"running"})
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(60) == 0
    body = service.status(task_id)
    assert body["status"] == "done" and body["attempts"] == 1, service.logs()


def test_sigterm_past_the_grace_period_leaves_the_job_to_the_reaper(service: Service) -> None:
    stuck = service.start_worker("stuck", FAULT_MODE="hang", FAULT_MATCH="STUCK", SHUTDOWN_GRACE_S="0.5")
    task_id = service.submit(text="A STUCK job.", seed=6)
    service.wait_status(task_id, {"running"})
    stuck.process.send_signal(signal.SIGTERM)
    assert stuck.process.wait(30) == 0
    assert service.status(task_id)["status"] == "running", "the job stays leased until the lease lapses"
    service.start_worker("next")
    body = service.wait_status(task_id, {"done", "failed"})
    assert body["status"] == "done" and body["attempts"] == 2, service.logs()


def test_hung_inference_fails_worker_liveness(service: Service) -> None:
    worker = service.start_worker("hung", FAULT_MODE="hang", JOB_TIMEOUT_S="1")
    assert worker.get("/healthz").status_code == 200
    service.submit(text="This inference never returns.", seed=7)
    wait_for(lambda: worker.get("/healthz").status_code == 503, 30, "liveness to fail")
    assert "hung" in worker.get("/healthz").json()["reason"]


def test_redis_outage_keeps_worker_alive_and_it_resumes(service: Service) -> None:
    worker = service.start_worker("patient")
    service.redis.stop()
    wait_for(lambda: worker.get("/healthz").json()["redis"] == "unreachable", 30, "the outage to be noticed")
    assert worker.get("/healthz").status_code == 200, "a Redis outage must not fail liveness"
    outage = httpx.post(f"{service.api_url}/v1/tts/submit", json={"text": "hi", "seed": 1})
    assert outage.status_code == 503 and "retry-after" in outage.headers
    service.redis.restart()
    wait_for(lambda: worker.get("/healthz").json()["redis"] == "ok", 30, "the worker to reconnect")
    task_id = service.submit(text="After the outage.", seed=8)
    assert service.wait_status(task_id, {"done", "failed"})["status"] == "done", service.logs()


def test_worker_configuration_errors_stop_it_with_a_clear_message_and_their_own_exit_code(
    service: Service, tmp_path: Path
) -> None:
    """Exit code CONFIG_ERROR_EXIT, which a supervisor does not restart (a crash exits otherwise)."""
    no_weights = service.spawn("noweights", [sys.executable, "worker.py"], MODEL=str(tmp_path / "missing"))
    bad_setting = service.spawn("badsetting", [sys.executable, "worker.py"], MAX_BATCH="many")
    assert no_weights.wait(120) == CONFIG_ERROR_EXIT
    log = (service.tmp / "noweights.log").read_text()
    assert "configuration error: cannot load the model" in log and "does not exist" in log
    assert bad_setting.wait(120) == CONFIG_ERROR_EXIT
    log = (service.tmp / "badsetting.log").read_text()
    assert "configuration error: invalid settings" in log and "max_batch" in log.lower(), log


def test_make_up_refuses_a_directory_without_weights(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "scripts/up.py", "--model", str(tmp_path)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "no asset/ folder" in result.stderr and "MODEL=tiny" in result.stderr


def test_concurrent_identical_submits_run_one_inference_then_hit_the_cache(service: Service) -> None:
    worker = service.start_worker("single-flight", FAULT_MODE="hang", FAULT_MATCH="Shared", FAULT_HANG_S="5")
    request = {"text": "Shared sentence for everyone.", "voice": "zh_male", "format": "wav"}

    def submit() -> dict[str, Any]:
        response = httpx.post(f"{service.api_url}/v1/tts/submit", json=request, timeout=30)
        assert response.status_code == 202, response.text
        body: dict[str, Any] = response.json()
        return body

    with ThreadPoolExecutor(max_workers=24) as pool:
        bodies = list(pool.map(lambda _: submit(), range(24)))
    task_ids = {body["task_id"] for body in bodies}
    assert len(task_ids) == 1, "identical requests must share one task"
    task_id = task_ids.pop()
    assert service.wait_status(task_id, {"done", "failed"})["status"] == "done", service.logs()
    assert worker.get("/healthz").json()["jobs_done"] == 1, "exactly one inference ran"
    audio = httpx.get(f"{service.api_url}/v1/tts/result/{task_id}").content

    again = httpx.post(f"{service.api_url}/v1/tts/submit", json=request)
    assert again.status_code == 200 and again.json()["cached"] is True
    cached = httpx.get(f"{service.api_url}/v1/tts/result/{again.json()['task_id']}")
    assert cached.status_code == 200 and cached.content == audio
    assert worker.get("/healthz").json()["jobs_done"] == 1


def test_a_crash_mid_batch_loses_none_of_its_jobs(service: Service) -> None:
    """Four compatible jobs are claimed as one batch that hangs inside inference; SIGKILL; all four finish."""
    task_ids = [service.submit(text=f"BATCH job number {n}.", voice="zh_female", seed=n) for n in range(4)]
    doomed = service.start_worker("batch-doomed", FAULT_MODE="hang", FAULT_MATCH="BATCH", BATCH_WAIT_MS="200")
    for task_id in task_ids:
        assert service.wait_status(task_id, {"running"})["status"] == "running"
    # Claimed ("running") comes a moment before the engine's first step names them in the liveness record.
    wait_for(lambda: (doomed.get("/healthz").json()["current_job"] or {}).get("batch_size") == 4, 30, "the four to share a step")
    doomed.process.send_signal(signal.SIGKILL)
    doomed.process.wait()
    service.start_worker("batch-rescuer")
    for task_id in task_ids:
        body = service.wait_status(task_id, {"done", "failed"})
        assert body["status"] == "done" and body["attempts"] == 2, service.logs()


def test_two_workers_share_the_queue_and_never_run_a_job_twice(service: Service) -> None:
    workers = service.start_workers(["pool-0", "pool-1"], MAX_BATCH="2")
    task_ids = [service.submit(text=f"Pool job {n}.", seed=n) for n in range(12)]
    for task_id in task_ids:
        body = service.wait_status(task_id, {"done", "failed"})
        assert body["status"] == "done" and body["attempts"] == 1, service.logs()
    done = [worker.get("/healthz").json()["jobs_done"] for worker in workers]
    assert sum(done) == len(task_ids), done
    assert httpx.get(f"{service.api_url}/readyz").json()["workers"] == 2


def test_a_named_voice_sounds_the_same_in_every_worker_process(service: Service) -> None:
    """Same voice, same text, two different worker processes (one after the other): same samples."""
    created = httpx.post(f"{service.api_url}/v1/voices", json={"name": "narrator", "seed": 4242})
    assert created.status_code == 201
    request = {"text": "The same voice everywhere.", "voice": "narrator"}
    audio = []
    for name, fmt in (("first", "wav"), ("second", "flac")):  # another format: not a cache hit
        worker = service.start_worker(name, MAX_BATCH="1")
        task_id = service.submit(**request, format=fmt)
        assert service.wait_status(task_id, {"done", "failed"})["status"] == "done", service.logs()
        samples, _ = sf.read(io.BytesIO(httpx.get(f"{service.api_url}/v1/tts/result/{task_id}").content), dtype="int16")
        audio.append(samples)
        worker.process.send_signal(signal.SIGTERM)
        assert worker.process.wait(60) == 0
    # libsndfile scales float → PCM16 by one LSB differently for WAV and FLAC
    assert len(audio[0]) == len(audio[1]) > 0
    assert int(np.abs(audio[0].astype(np.int32) - audio[1]).max()) <= 1


def test_a_killed_worker_s_job_is_taken_back_by_its_heartbeat_not_its_lease(service: Service) -> None:
    """``LEASE_S=600``: only the heartbeat can bring the job back in time. The first worker hangs inside inference and
    is SIGKILLed with a second worker already up; the second's sweep finds the first's heartbeat lapsed and requeues the
    job, which it then runs."""
    from tests.integration.api.test_metrics import samples, value

    doomed = service.start_worker("doomed", FAULT_MODE="hang", FAULT_MATCH="SLOW", LEASE_S="600")
    task_id = service.submit(text="A SLOW job whose worker dies.", seed=4)
    assert service.wait_status(task_id, {"running"})["status"] == "running"
    rescuer = service.start_worker("rescuer", LEASE_S="600")
    doomed.process.send_signal(signal.SIGKILL)
    doomed.process.wait()
    body = service.wait_status(task_id, {"done", "failed"})
    assert body["status"] == "done" and body["attempts"] == 2, service.logs()
    scrape = samples(rescuer.get("/metrics").text)
    assert value(scrape, "ttsq_sweep_requeued_total", reason="heartbeat") == 1
    assert value(scrape, "ttsq_sweep_requeued_total", reason="lease") == 0
