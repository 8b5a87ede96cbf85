"""Soak test: the locust mix for minutes against a real deployment, with memory, Redis and latency sampled as it runs.

The harness (see :mod:`loadtest.soak` for the whole story): the command line, per engine a deployment whose capacity
is measured, locust at ~70 % of it while the deployment is sampled, and the report.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import redis as redis_sync

from bench import ROOT, stacks
from bench.interrupt import Interrupted, interruptible
from bench.machine import machine
from bench.stacks import EngineSpec
from loadtest.soak import buckets
from loadtest.soak.buckets import BUCKET_S_ENV, BUCKETS_ENV
from loadtest.soak.deployment import NAMESPACE, Deployment, Plan, Sampler, engine_specs, metric, scrape
from loadtest.soak.figures import criteria, summarise, verdict
from loadtest.soak.mix import LOCUSTFILE, class_split, demand, literal
from loadtest.soak.report import render

RESULTS_BUDGET_BYTES = 1_000_000


# ---- the harness -------------------------------------------------------------------------------


def progress(message: str) -> None:
    stacks.progress(message, prefix="soak: ")


def parse_duration(text: str) -> float:
    """``90``, ``90s``, ``10m``, ``1h`` → seconds (locust's ``-t`` spelling)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (e.g. 60s, 10m, 1h)")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


# ---- capacity and user count --------------------------------------------------------------------


@dataclass(frozen=True)
class Calibration:
    capacity_jobs_s: float
    measured_s: float
    jobs: int
    mean_batch: float


def calibrate(deployment: Deployment, seconds: float) -> Calibration:
    """The deployment's capacity in jobs/s: keep a full batch (8 jobs) of the SubmitPollUser kind waiting in the queue
    for ``seconds`` after the first completion, count completions, then let the queue drain.

    Measured through the same API and worker that the soak then runs on (they start the soak warm).
    """
    from ttsq.store.keys import Keys

    sentences: tuple[str, ...] = literal("SENTENCES")
    queue_key = Keys(NAMESPACE).queue
    client = redis_sync.Redis.from_url(deployment.redis_url, socket_timeout=5)
    http = httpx.Client(base_url=deployment.api_url, timeout=30.0)
    depth_target, n = 8, 0  # one CPU batch (MAX_BATCH=auto is 8 on a CPU) always waiting

    def counters() -> tuple[float, float, float]:
        rows = scrape(deployment.worker_url)
        return (
            metric(rows, "ttsq_jobs_total", outcome="done"),
            metric(rows, "ttsq_batch_size_sum"),
            metric(rows, "ttsq_batch_size_count"),
        )

    def top_up() -> None:
        nonlocal n
        for _ in range(max(0, depth_target - int(client.llen(queue_key)))):
            n += 1
            body = {"text": sentences[n % len(sentences)], "seed": 1_000_000 + n, "format": "wav"}
            response = http.post("/v1/tts/submit", json=body)
            if response.status_code != 202:
                raise RuntimeError(f"calibration submit answered {response.status_code}: {response.text[:200]}")

    try:
        done0 = counters()[0]
        deadline = time.monotonic() + 300
        while counters()[0] <= done0:  # the first completion: the worker is busy from here on
            top_up()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no job finished within 300 s of calibration:\n{deployment.log_tail('worker')}")
            time.sleep(0.05)
        started, (done1, batch_sum1, batch_count1) = time.monotonic(), counters()
        while time.monotonic() - started < seconds:
            top_up()
            time.sleep(0.05)
        elapsed, (done2, batch_sum2, batch_count2) = time.monotonic() - started, counters()
        deadline = time.monotonic() + 300
        while client.llen(queue_key) or client.llen(Keys(NAMESPACE).processing):
            if time.monotonic() > deadline:
                raise RuntimeError("the calibration's jobs did not drain within 300 s")
            time.sleep(0.2)
    finally:
        http.close()
        client.close()
    batches = batch_count2 - batch_count1
    return Calibration(
        (done2 - done1) / elapsed, elapsed, int(done2 - done1), (batch_sum2 - batch_sum1) / batches if batches else 0.0
    )


# ---- one engine ----------------------------------------------------------------------------------


def _log_findings(path: Path) -> dict[str, Any]:
    """WARNING/ERROR lines and tracebacks in a process log (LOG_LEVEL=WARNING keeps only those)."""
    if not path.exists():
        return {"errors": 0, "warnings": 0, "tracebacks": 0, "examples": []}
    lines = path.read_text(errors="replace").splitlines()
    errors = [line for line in lines if re.search(r"\b(ERROR|CRITICAL)\b", line)]
    warnings = [line for line in lines if re.search(r"\bWARNING\b", line)]
    distinct = list(dict.fromkeys(re.sub(r"[0-9a-f-]{36}|\d+(\.\d+)?", "#", line)[:200] for line in errors + warnings))
    return {
        "errors": len(errors),
        "warnings": len(warnings),
        "tracebacks": sum("Traceback" in line for line in lines),
        "examples": distinct[:5],
    }


def run_engine(spec: EngineSpec, plan: Plan, raw: Path) -> dict[str, Any]:
    """Deploy, calibrate, soak, sample; the engine's figures (also on failure: what was measured)."""
    tmp = Path(tempfile.mkdtemp(prefix=f"ttsq-soak-{spec.key}-"))
    deployment = Deployment(spec, plan, tmp)
    result: dict[str, Any] = {"engine": spec.key, "label": spec.label, "stand_in": spec.stand_in, "logs": str(tmp)}
    sampler: Sampler | None = None
    locust: subprocess.Popen[bytes] | None = None
    try:
        progress(f"{spec.key}: starting redis-server, the API and a worker ({spec.label})")
        deployment.start()
        mix = demand()
        how = ""
        if plan.calibrate_s > 0:
            progress(f"{spec.key}: measuring capacity for {plan.calibrate_s:g} s (a batch always waiting)")
            calibration = calibrate(deployment, plan.calibrate_s)
            result["calibration"] = vars(calibration) | {"target_load": plan.load}
            how = (
                f"capacity measured at {calibration.capacity_jobs_s:.2f} jobs/s ({calibration.jobs} jobs in "
                f"{calibration.measured_s:.0f} s with a full batch always queued, mean batch {calibration.mean_batch:.1f}: "
                "every SubmitPollUser job has its own seed, hence its own voice: with ttsq's decoder they share steps, "
                "with ChatTTS's own loop they share no call); "
            )
        if plan.users is None:
            target = plan.load * result["calibration"]["capacity_jobs_s"]
            users = mix.users_for(target)
            how += f"the target is {plan.load:.0%} of it, {target:.2f} jobs/s; {mix.explain(users)}"
        else:
            users = plan.users
            how += f"the user count was given on the command line (--users); {mix.explain(users)}"
        spawn_rate = max(1.0, round(users / 5, 1))  # ramp-up within ~5 s
        split = class_split(mix.classes, users)
        result |= {"users": users, "spawn_rate": spawn_rate, "how_users": how, "demand_bound_jobs_s": round(mix.jobs_s(users), 3)}
        result["user_split"] = dict(split)
        progress(f"{spec.key}: {how}")

        buckets_file, prefix = tmp / "buckets.json", tmp / "locust"
        command = [
            sys.executable, "-m", "locust", "-f", f"{LOCUSTFILE},{Path(buckets.__file__).resolve()}", "--headless",
            "-u", str(users), "-r", str(spawn_rate), "-t", f"{plan.duration_s:g}s", "--host", deployment.api_url,
            "--csv", str(prefix), "--json-file", str(prefix), "--only-summary",
            "--tts-seed", str(plan.seed), "--tts-flow-rows",
        ]  # fmt: skip
        locust_env = deployment.env() | {BUCKETS_ENV: str(buckets_file), BUCKET_S_ENV: str(plan.bucket_s)}
        sampler = Sampler(deployment)
        result["load_average_start"] = [round(x, 2) for x in os.getloadavg()]
        progress(
            f"{spec.key}: locust mix, {users} users (+{spawn_rate}/s) for {plan.duration_s:g} s; sampling every {plan.sample_s:g} s"
        )
        launched = time.time()
        with (tmp / "locust.log").open("ab") as log:
            locust = subprocess.Popen(
                command, cwd=ROOT, env=locust_env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
        sampler.watch("locust", locust.pid)
        hard_stop = time.monotonic() + plan.duration_s + 180
        next_sample = time.monotonic()
        while locust.poll() is None:
            if time.monotonic() >= next_sample:
                sampler.sample()
                next_sample += plan.sample_s
                if len(sampler.rows) % max(1, round(60 / plan.sample_s)) == 0:
                    row = sampler.rows[-1]
                    progress(
                        f"{spec.key}: t={row['ts'] - launched:.0f}s API {row['api_rss_mib']:.0f} MiB, worker "
                        f"{row['worker_rss_mib']:.0f} MiB, Redis {row.get('redis_used_memory_mib', math.nan):.1f} MiB, "
                        f"queue {row.get('queue_depth', math.nan):.0f}, load {row['load1']:.1f}"
                    )
            if time.monotonic() > hard_stop:
                raise RuntimeError(f"locust still running {plan.duration_s + 180:.0f} s after its start")
            time.sleep(max(0.0, min(0.2, next_sample - time.monotonic())))
        stopped = time.time()
        result["locust_exit"] = locust.returncode
        sampler.sample()  # after the users stopped
        result["keys_without_ttl_at_end"] = sampler.keys_without_ttl()
        result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        result["server"] = _server_side(deployment)
        result |= summarise(spec, plan, sampler.rows, tmp, (launched, stopped), raw, users / spawn_rate)
    except Interrupted:
        raise
    except Exception as exc:  # noqa: BLE001 - the report says what failed, with the logs' place; the next engine still runs
        result["error"] = f"{exc} (process logs kept in {tmp})"[-3000:]
        progress(f"{spec.key}: FAILED: {result['error']}")
    finally:
        if locust is not None and locust.poll() is None:
            os.killpg(locust.pid, signal.SIGKILL)
            locust.wait()
        if sampler is not None:
            sampler.close()
        deployment.close()
        result["log_findings"] = {name: _log_findings(tmp / f"{name}.log") for name in ("api", "worker")}
        locust_log = (tmp / "locust.log").read_text(errors="replace") if (tmp / "locust.log").exists() else ""
        result["locust_cpu_warning"] = "CPU usage above" in locust_log or "CPU usage was too high" in locust_log
        result["locust_tracebacks"] = locust_log.count("Traceback")
        for bulky in ("cache", "redis"):  # the L3 cache and Redis's directory: hundreds of MB after a long run
            shutil.rmtree(tmp / bulky, ignore_errors=True)
    return result


def _server_side(deployment: Deployment) -> dict[str, float]:
    """What the service itself says went wrong: 5xx answers, failed or retried jobs."""
    api, worker = scrape(deployment.api_url), scrape(deployment.worker_url)
    server_errors = sum(v for n, ls, v in api if n == "ttsq_http_requests_total" and ls.get("status", "").startswith("5"))
    outcomes = {
        o: metric(worker, "ttsq_jobs_total", outcome=o) for o in ("done", "retried", "failed", "dead_lettered", "cancelled")
    }
    return {
        "api_5xx": server_errors,
        **{f"jobs_{o}": v for o, v in outcomes.items()},
        "batch_mean": metric(worker, "ttsq_batch_size_sum") / max(1.0, metric(worker, "ttsq_batch_size_count")),
        "engine_slots": metric(worker, "ttsq_engine_slots"),
        "wasted_row_steps": 1
        - metric(worker, "ttsq_engine_row_steps_total") / max(1.0, metric(worker, "ttsq_engine_slot_steps_total")),
        "inference_s": metric(worker, "ttsq_inference_seconds_sum"),
    }


# ---- the run ----------------------------------------------------------------------------------------


def _machine() -> dict[str, Any]:
    return {**machine(), "load_average_start": [round(x, 2) for x in os.getloadavg()]}


def _command(argv: Sequence[str]) -> str:
    python = Path(sys.executable)
    shown = ".venv/bin/python" if python.parent.parent == ROOT / ".venv" else "python"
    return f"{shown} -m loadtest.soak {shlex.join(argv)}".strip()


def build_plan(argv: Sequence[str]) -> Plan:
    parser = argparse.ArgumentParser(prog="python -m loadtest.soak", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--duration", type=parse_duration, default=600.0, help="locust run time per engine: 60s, 10m (default 10m)")
    parser.add_argument("--engines", default="fixed,tiny", help="comma-separated: fixed (STAND-IN), tiny (default both)")
    parser.add_argument(
        "--users",
        type=int,
        help="simulated users (default: chosen from the measured capacity and --load; capacity is still measured)",
    )
    parser.add_argument("--load", type=float, default=0.7, help="target share of the measured capacity (default 0.7)")
    parser.add_argument(
        "--calibrate",
        type=parse_duration,
        default=20.0,
        help="capacity measurement per engine (default 20s; 0 = none, needs --users)",
    )
    parser.add_argument("--warmup", type=parse_duration, help="excluded from the RSS comparison (default 20 %% of --duration)")
    parser.add_argument("--ttl", type=int, help="RESULT_TTL_S and CACHE_TTL_S (default: a quarter of --duration, 10 to 60 s)")
    parser.add_argument("--sample", type=parse_duration, help="seconds between samples (default 5, less for short runs)")
    parser.add_argument("--bucket", type=parse_duration, help="latency bucket (default 60 s; a sixth of --duration under 5 min)")
    parser.add_argument("--seed", type=int, default=1, help="locust's --tts-seed: the users' choices (default 1)")
    parser.add_argument(
        "--out", type=Path, help="results directory (default bench/results/soak for ≥ 10 min, var/soak for shorter runs)"
    )
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    if not engines or set(engines) - set(engine_specs()):
        parser.error(f"--engines: one or more of {', '.join(engine_specs())}")
    if args.duration < 10:
        parser.error("--duration: at least 10s")
    if args.ttl is not None and args.ttl < 10:
        parser.error("--ttl: at least 10 (the service's minimum RESULT_TTL_S)")
    if args.users is not None and args.users < 1:
        parser.error("--users: at least 1")
    if args.users is None and args.calibrate <= 0:
        parser.error("--calibrate 0 needs --users: without a measured capacity there is nothing to size the load by")
    duration = args.duration
    out = args.out or (ROOT / "bench" / "results" / "soak" if duration >= 600 else ROOT / "var" / "soak")
    return Plan(
        duration_s=duration,
        engines=engines,
        users=args.users,
        load=args.load,
        calibrate_s=args.calibrate,
        warmup_s=args.warmup if args.warmup is not None else round(duration * 0.2, 1),
        ttl_s=args.ttl if args.ttl is not None else int(min(60, max(10, duration // 4))),
        sample_s=args.sample if args.sample is not None else float(min(5, max(1, round(duration / 30)))),
        bucket_s=args.bucket if args.bucket is not None else (60.0 if duration >= 300 else float(max(5, round(duration / 6)))),
        seed=args.seed,
        out=out.resolve(),
        command=_command(argv),
    )


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    plan = build_plan(arguments)
    specs = engine_specs()
    raw = plan.out
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": plan.command,
        "machine": _machine(),
        "plan": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(plan).items()},
        "engines": [],
    }
    if raw.exists():
        shutil.rmtree(raw)  # a run replaces the last one's raw files
    raw.mkdir(parents=True)
    progress(f"{plan.command}; results in {raw}/ (summary.md, summary.json, raw files)")
    with interruptible():
        for key in plan.engines:
            result = run_engine(specs[key], plan, raw)
            result["criteria"] = criteria(result)
            report["engines"].append(result)
            progress(f"{key}: unexpected errors: {'; '.join(verdict(result)) or 'none'}")
    report["machine"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    (raw / "summary.json").write_text(json.dumps(report, indent=1, default=str))
    markdown = render(report)
    (raw / "summary.md").write_text(markdown)
    size = sum(p.stat().st_size for p in raw.rglob("*") if p.is_file())
    if size > RESULTS_BUDGET_BYTES:
        progress(f"warning: raw results are {size / 1e6:.2f} MB (budget {RESULTS_BUDGET_BYTES / 1e6:.0f} MB)")
    print(markdown)
    failed = [r for r in report["engines"] if "error" in r]
    if len(failed) == len(report["engines"]):
        return 2
    return 1 if any(verdict(r) for r in report["engines"]) else 0


if __name__ == "__main__":
    sys.exit(main())
