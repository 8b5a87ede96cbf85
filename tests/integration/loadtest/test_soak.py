"""The soak harness (``loadtest/soak/``) end to end, for a few seconds, on the fixed-cost stand-in engine.

Why: the real soak runs for 20+ minutes and only by hand (``make soak``), so a harness that broke
(a renamed metric, a locust upgrade, a changed locustfile) would only show then. This runs the same
one command for ~25 s — a real redis-server, ``uvicorn app:app``, the real worker process with the
fixed-cost engine, the locust mix, the sampler, the per-bucket latency listener inside locust — and
checks what the harness promises: the files it writes, every figure of its summary, and zero errors.
It never asserts a timing or a threshold (RSS ratios, Redis growth and latencies are reported, not
judged): on this shared 2-core machine those belong to the full run's report, not to a test.

The harness runs as a child process, as a user runs it: it starts locust, which monkey-patches the
standard library with gevent, and it handles SIGTERM itself.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.service import ROOT

SUBMIT_POLL_ROWS = (("POST", "/v1/tts/submit"), ("GET", "/v1/tts/tasks/[id]"), ("FLOW", "submit+poll+result"))


def child_env() -> dict[str, str]:
    """This environment without LOCUST_* settings, so that a developer's shell cannot change the run."""
    return {key: value for key, value in os.environ.items() if not key.startswith("LOCUST_")}


@pytest.mark.e2e
@pytest.mark.timeout(300)
def test_soak_harness_runs_the_mix_and_reports_every_figure(tmp_path: Path) -> None:
    out = tmp_path / "soak"
    # 6 users (3 of them SubmitPollUser) so that every latency bucket has whole jobs in it; the capacity
    # is still measured (--calibrate), only the user count is fixed. 25 s is the shortest run in which Redis's
    # first steady window (after ramp-up + the 10 s minimum TTL) ends before the last window begins. Two latency
    # buckets of 12.5 s: each holds several whole jobs even on a loaded machine (5 s ones could hold none).
    command = [
        sys.executable, "-m", "loadtest.soak", "--duration", "25s", "--engines", "fixed",
        "--users", "6", "--calibrate", "4s", "--bucket", "12.5s", "--out", str(out),
    ]  # fmt: skip
    run = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=280)
    output = f"{run.stdout[-6000:]}\n{run.stderr[-6000:]}"
    assert run.returncode == 0, output  # 1 would mean unexpected errors, 2 that it could not run

    report: dict[str, Any] = json.loads((out / "summary.json").read_text())
    assert report["command"].endswith("-m loadtest.soak " + " ".join(command[3:]))
    assert report["date"] and len(report["machine"]["load_average_start"]) == 3 and len(report["machine"]["load_average_end"]) == 3
    [engine] = report["engines"]
    assert engine["engine"] == "fixed" and engine["stand_in"] is True and "NOT ChatTTS" in engine["label"], engine.get("label")
    assert "error" not in engine, engine.get("error")

    # Zero errors: locust's failures, failed jobs, the service's own counters and logs.
    assert engine["requests"] > 0 and engine["flow_jobs"] > 0
    assert engine["failures"] == 0 and engine["flow_failures"] == 0, engine["failure_messages"]
    server = engine["server"]
    assert server["jobs_done"] > 0
    assert server["api_5xx"] == server["jobs_retried"] == server["jobs_failed"] == server["jobs_dead_lettered"] == 0, server
    assert all(f["errors"] == 0 and f["tracebacks"] == 0 for f in engine["log_findings"].values()), engine["log_findings"]
    assert engine["locust_exit"] == 0 and engine["locust_tracebacks"] == 0
    assert set(engine["status_codes"]) <= {"200", "202"}, engine["status_codes"]

    # Every figure of the summary is there (a number; its value is not judged).
    assert engine["calibration"]["capacity_jobs_s"] > 0 and engine["users"] == 6
    assert engine["user_split"] == {"SubmitPollUser": 3, "CacheHeavyUser": 2, "OpenAIUser": 1}
    for name in ("api", "worker", "locust"):
        rss = engine["rss"][name]
        assert rss["start_mib"] > 0 and rss["warm_mib"] > 0 and rss["end_mib"] > 0 and rss["ratio"] > 0, (name, rss)
    for name in ("api", "worker"):
        assert engine["rss"][name]["l1_end_mib"] is not None and engine["rss"][name]["l1_evictions"] is not None, name
    redis = engine["redis"]
    assert not redis["overlap"], redis
    for window in ("first", "last"):
        assert redis[window]["redis_used_memory_mib"] > 0 and redis[window]["redis_keys"] > 0, redis
    assert redis["used_memory_ratio"] > 0
    assert engine["achieved"]["jobs_s"] > 0 and engine["achieved"]["queue_depth_max"] is not None
    rows = {(row["type"], row["name"]): row for row in engine["latency"]}
    for key in SUBMIT_POLL_ROWS:
        row = rows[key]
        assert row["requests"] > 0 and row["p99"] > 0, row
        assert row["first"] and row["last"] and row["first"]["p99"] > 0 and row["last"]["p99"] > 0, row
    assert len(engine["timeline"]) == engine["n_buckets"] >= 2
    assert all(row["redis_used_memory_mib"] for row in engine["timeline"]), engine["timeline"]  # Redis memory over time

    # One verdict per criterion; only "errors" is judged here (it must pass), the others only have to be given.
    verdicts = {c["criterion"]: c for c in engine["criteria"]}
    assert list(verdicts) == ["errors", "RSS ±10 %", "Redis flat", "p99 stable"]
    assert verdicts["errors"]["verdict"] == "PASS", verdicts["errors"]
    assert all(c["verdict"] in {"PASS", "FAIL", "n/a"} and c["target"] and c["measured"] for c in verdicts.values())
    assert verdicts["RSS ±10 %"]["verdict"] != "n/a" and verdicts["p99 stable"]["verdict"] != "n/a", verdicts

    # The files: the markdown summary (labelled, dated, with the command) and the small raw files.
    markdown = (out / "summary.md").read_text()
    for text in ("# Soak test", report["date"], report["command"], "STAND-IN", "NOT ChatTTS", "load average", "shared"):
        assert text in markdown, text
    for text in ("## Verdicts", "RATE_LIMIT_PER_S", "RATE_LIMIT_BURST", "MAX_QUEUED_PER_KEY", "CACHE_L1_MAX_BYTES", "RSS at start"):
        assert text in markdown, text  # the criteria; the deployment's changed settings; RSS start/warm/end
    assert "Redis MiB" in markdown  # Redis used_memory over time (the timeline)
    for criterion in verdicts:
        assert f"| {criterion} |" in markdown, criterion
    assert "tiny" not in {e["engine"] for e in report["engines"]}
    for name in ("fixed-samples.csv", "fixed-buckets.json", "fixed-locust.json", "fixed-stats.csv", "summary.json", "summary.md"):
        assert (out / name).is_file(), name
    with (out / "fixed-samples.csv").open(newline="") as handle:
        samples = list(csv.DictReader(handle))
    assert len(samples) >= 10
    for column in ("t", "api_rss_mib", "worker_rss_mib", "redis_used_memory_mib", "redis_keys", "queue_depth"):
        assert samples[-1][column] != "", column
    buckets = json.loads((out / "fixed-buckets.json").read_text())
    assert buckets["started"] and {(r["type"], r["name"]) for r in buckets["rows"]} >= set(SUBMIT_POLL_ROWS)
    assert sum(p.stat().st_size for p in out.iterdir()) < 1_000_000
