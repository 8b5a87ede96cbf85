"""What one submit costs the API process, counted in instructions: ttsq's ``POST /v1/tts/submit`` beside
the bare FastAPI + one ``LPUSH`` endpoint that ``bench.service.throughput``'s submit section measures in requests/s.

    python -m bench.service.submit_cost [--requests 300] [--out bench/results/submit_cost]

Requests/s on these shared 2-core machines move by a third between two runs a minute apart; an
instruction count does not. Each variant's app is driven in-process by :mod:`bench.service.asgi_driver`
(no HTTP server: uvicorn's parsing costs both endpoints the same) under ``valgrind --tool=callgrind``
twice — 0 requests and ``--requests`` requests after the same start-up — and the difference over the
count is the instructions of one request: middlewares, routing, dependencies, validation, the
handler and the Redis client, not the Redis server (another process). Both runs of a variant run at
once, one per core. Then one cProfile of ttsq's requests says where its instructions go (shares of
profiled time, by the parts named in :data:`PARTS`).

The settings of ``bench.service.throughput`` (:func:`bench.stacks.service_env`: result cache and
single-flight off, fair-use limits lifted, a fixed ``TASK_ID_SECRET``), and ``PYTHONHASHSEED=0`` so
that both runs of a variant hash alike.
Needs valgrind (Debian's package; installed when missing and running as root).
"""

from __future__ import annotations

import argparse
import functools
import json
import pstats
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.interrupt import interruptible
from bench.machine import ensure_debian_tool, machine
from bench.service.throughput import SUBMIT_BODY
from bench.stacks import ROOT, service_env, utc_now
from ttsq.store.local_redis import start_redis_server

DEFAULT_OUT = ROOT / "bench" / "results" / "submit_cost"
BODY = json.dumps(SUBMIT_BODY, ensure_ascii=False)
VARIANTS = {
    "ttsq POST /v1/tts/submit": ("app", "/v1/tts/submit"),
    "bare FastAPI + one LPUSH": ("bench.service.lpush_app", "/submit"),
}
PARTS = {
    "FastAPI solving the route's parameters (the body's validation, the service, the caller)": (
        "fastapi/dependencies/utils.py:*(solve_dependencies)"
    ),
    "the enqueue script call (redis-py packing 23 arguments, the wait for Redis, the reply)": "ttsq/store/queue.py:*(enqueue)",
    "building the job's parameters (text validation and canonicalisation, the cache key)": "ttsq/api/service/tasks.py:*(build_params)",  # noqa: E501
    "the task id (uuid4 + HMAC)": "ttsq/store/task_ids.py:*(new)",
    "the caller (key lookup where one is sent, the key policy)": "deps.py:*(__call__)",
    "pydantic models built without validation (the job, its parameters, the answer)": "pydantic/main.py:*(model_construct)",
}
"""Where a submit's time goes, as cProfile names the functions (file suffix : line (function)); cumulative wall
time, so the enqueue includes the wait for the Redis server, which the instruction counts leave out."""


def instructions(valgrind: str, module: str, path: str, count: int, env: dict[str, str]) -> int:
    """Instructions of a whole driver run (start-up, 20 warm-up requests, ``count`` requests)."""
    command = [valgrind, "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable, "-m", "bench.service.asgi_driver"]
    command += [module, path, str(count), BODY]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise SystemExit(f"{module} {path} x{count} failed under valgrind:\n{result.stdout[-2000:]}{result.stderr[-3000:]}")
    found = re.findall(r"Collected : (\d+)", result.stderr)
    if not found:
        raise SystemExit(f"no instruction count in valgrind's output:\n{result.stderr[-3000:]}")
    return int(found[-1])


def breakdown(env: dict[str, str], count: int, tmp: Path) -> dict[str, Any]:
    """cProfile of ttsq's ``count`` submits: each part's share of the profiled time."""
    profile = tmp / "submit.prof"
    module, path = VARIANTS["ttsq POST /v1/tts/submit"]
    command = [sys.executable, "-m", "bench.service.asgi_driver", module, path, str(count), BODY, "--profile", str(profile)]
    subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, timeout=600)
    stats: dict[tuple[str, int, str], Any] = pstats.Stats(str(profile)).stats  # type: ignore[attr-defined]
    total = max(cumulative for (file, _, function), (_, _, _, cumulative, _) in stats.items() if function == "post")
    shares: dict[str, float] = {}
    for name, pattern in PARTS.items():
        file_glob, function = pattern.rsplit(":*(", 1)
        function = function.rstrip(")")
        regex = re.compile(re.escape(file_glob).replace(r"\*", "[^/]*") + "$")
        shares[name] = (
            sum(cumulative for (file, _, fn), (_, _, _, cumulative, _) in stats.items() if fn == function and regex.search(file))
            / total
        )
    return {"requests": count, "profiled_s": round(total, 3), "shares": shares}


def render(results: dict[str, Any]) -> str:
    ttsq, bare = (results["variants"][name] for name in VARIANTS)
    lines = [
        "# Submit cost in instructions (`bench.service.submit_cost`)",
        "",
        f"Command: `{results['command']}`. Date: {results['date']}. Machine: {results['machine']['cpu']}, "
        f"{results['machine']['cores']} cores, {results['machine']['memory_gib']} GiB, {results['machine']['platform']}.",
        f"Body: `{json.dumps(results['body'], ensure_ascii=False)}`; {results['requests']} counted requests per variant, "
        "in-process (no HTTP server), under `valgrind --tool=callgrind`; instructions per request = "
        "(run with N requests − run with none) / N.",
        "",
        "| variant | instructions, no requests | with N requests | per request |",
        "|---|---:|---:|---:|",
    ]
    for name, row in results["variants"].items():
        lines.append(f"| {name} | {row['baseline']:,} | {row['loaded']:,} | {row['per_request']:,.0f} |")
    lines += [
        "",
        f"**bare / ttsq = {results['ratio']:.2f}** (ttsq's submit takes {ttsq['per_request'] / bare['per_request']:.2f}× "
        "the instructions of the bare endpoint; the requests/s ratio of `bench.service.throughput`'s submit section also "
        "carries uvicorn's HTTP work, the same for both, which brings it closer to 1).",
        "",
        f"Where ttsq's submit goes (cProfile of {results['breakdown']['requests']} requests; shares of the profiled "
        "time, cumulative; they overlap where one part calls another):",
        "",
        "| part | share |",
        "|---|---:|",
    ]
    for name, share in results["breakdown"]["shares"].items():
        lines.append(f"| {name} | {share:.0%} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=300, help="counted requests per variant (default 300)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="PREFIX: writes PREFIX.md and PREFIX.json")
    args = parser.parse_args(argv)
    valgrind = ensure_debian_tool("valgrind")
    command = "python -m bench.service.submit_cost " + shlex.join(argv if argv is not None else sys.argv[1:])
    tmp = Path(tempfile.mkdtemp(prefix="ttsq-submit-cost-"))
    started = time.monotonic()
    with interruptible():
        redis = start_redis_server(tmp / "redis")
        try:
            env = service_env(redis.url, PYTHONHASHSEED="0")
            variants: dict[str, dict[str, Any]] = {}
            with ThreadPoolExecutor(max_workers=2) as pool:
                for name, (module, path) in VARIANTS.items():
                    print(f"[{time.strftime('%H:%M:%S')}] {name}: 0 and {args.requests} requests under callgrind", flush=True)
                    count = functools.partial(instructions, valgrind, module, path, env=env)
                    baseline, loaded = pool.map(count, (0, args.requests))
                    variants[name] = {"baseline": baseline, "loaded": loaded, "per_request": (loaded - baseline) / args.requests}
            shares = breakdown(env, 3000, tmp)
        finally:
            redis.stop()
            shutil.rmtree(tmp, ignore_errors=True)
    ttsq, bare = (variants[name] for name in VARIANTS)
    results = {
        "command": command.strip(),
        "date": utc_now(),
        "machine": machine(),
        "body": SUBMIT_BODY,
        "requests": args.requests,
        "variants": variants,
        "ratio": bare["per_request"] / ttsq["per_request"],
        "breakdown": shares,
        "elapsed_s": round(time.monotonic() - started, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    report = render(results)
    args.out.with_suffix(".md").write_text(report)
    print(report, flush=True)


if __name__ == "__main__":
    main()
