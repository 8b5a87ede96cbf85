"""``make hostile-realtime``: the API as shipped (keys required, 1,024 open files) against, one after another, keyless
compressed-bomb WebSocket connections, idle or trickling TCP connections, and realtime sessions flooding small
messages (last: what a flood leaves in the heap would count against the phases after it), while a witness process
asks ``/healthz`` on a new connection every 0.1 s and reads the API's resident memory. Targets: the API's memory grows
by at most 100 MB over its idle baseline, and every ``/healthz`` answers 200 within 1 s, throughout.

    python -m tests.hostile.run [--bombs 200] [--sessions 10] [--flood-s 10] [--idle 2000] [--trickle 50] [--hold-s 15]

Writes a summary (``--output``, default ``bench/results/hostile-realtime.md``) and every sample beside it
(``hostile-realtime-samples.jsonl``); exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.hostile.attacks import bombs, flooding_sessions, idle_connections
from tests.hostile.deployment import OPEN_FILES, ROOT, Api, deployment, read_samples, witnessed

RSS_GROWTH_TARGET_MB = 100
HEALTHZ_TARGET_S = 1.0


@dataclass
class Phase:
    name: str
    began: float
    ended: float
    what: str


def raise_open_files(needed: int) -> int:
    """This process's own soft open-file limit, raised (within the hard limit) to hold ``needed`` sockets."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
    if soft < wanted:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


async def attack(api: Api, args: argparse.Namespace) -> list[Phase]:
    phases: list[Phase] = []

    async def phase(name: str, run: Any) -> None:
        began = time.time()
        what = await run
        phases.append(Phase(name, began, time.time(), str(what)))
        await asyncio.sleep(args.settle_s)

    await asyncio.sleep(args.settle_s)
    phases.append(Phase("baseline", time.time() - args.settle_s, time.time(), "nothing"))
    await phase(f"{args.bombs} keyless compressed-bomb connections", bombs(api.port, args.bombs, args.hold_s))
    await phase(
        f"{args.idle} idle + {args.trickle} trickling TCP connections",
        idle_connections(api.port, args.idle, args.hold_s, trickle=args.trickle),
    )
    keys = [api.create_key("tts") for _ in range(args.sessions)]  # one each: a key holds MAX_STREAMS_PER_KEY sessions
    flood = flooding_sessions(api.ws_url, keys, args.flood_s)
    await phase(f"{args.sessions} sessions flooding empty text messages", flood)
    phases.append(Phase("after", time.time() - args.settle_s, time.time(), "nothing"))
    return phases


def summarise(phases: list[Phase], samples: list[dict[str, Any]]) -> tuple[list[str], bool]:
    # The baseline's first second is left out: the API's first few requests still import and allocate.
    baseline = [s["rss"] for s in samples if s["rss"] and phases[0].began + 1.0 <= s["t"] <= phases[0].ended]
    base_rss = statistics.median(baseline) if baseline else min(s["rss"] for s in samples if s["rss"])
    lines = [
        "| phase | what happened | /healthz probes | failed | slowest | p99 | API RSS growth over the baseline, max (MB) "
        "| open files, max |",
        "|---|---|---|---|---|---|---|---|",
    ]
    passed = True
    for phase in phases:
        tail_s = 1.0 if phase.name not in ("baseline", "after") else 0.0  # a probe sent at an attack's end belongs to it
        during = [s for s in samples if phase.began <= s["t"] <= phase.ended + tail_s]
        if not during:
            continue
        latencies = sorted(s["latency_s"] for s in during)
        failed = [s for s in during if s["status"] != 200]
        growth = max((s["rss"] or base_rss) for s in during) - base_rss
        slowest, p99 = latencies[-1], latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
        files = max((s["fds"] or 0) for s in during)
        lines.append(
            f"| {phase.name} | {phase.what} | {len(during)} | {len(failed)} | {slowest * 1000:.0f} ms | {p99 * 1000:.0f} ms "
            f"| {growth / 1e6:.1f} | {files} |"
        )
        passed = passed and not failed and slowest <= HEALTHZ_TARGET_S and growth / 1e6 <= RSS_GROWTH_TARGET_MB
    lines.append("")
    lines.append(
        f"API resident memory at the baseline: {base_rss / 1e6:.1f} MB. CPython rarely hands freed memory back, so what a "
        "phase grew by stays in the later phases' figures (the floods run last for that)."
    )
    return lines, passed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bombs", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--flood-s", type=float, default=10.0)
    parser.add_argument("--idle", type=int, default=2000)
    parser.add_argument("--trickle", type=int, default=50)
    parser.add_argument("--hold-s", type=float, default=15.0, help="how long each hostile connection is held")
    parser.add_argument("--settle-s", type=float, default=3.0)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "hostile-realtime.md")
    args = parser.parse_args()
    own_files = raise_open_files(args.idle + args.trickle + args.bombs + 256)
    started = datetime.datetime.now(datetime.UTC)
    samples_path = args.output.with_name(args.output.stem + "-samples.jsonl")
    samples_path.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="ttsq-hostile-") as tmp, deployment(Path(tmp)) as api:
        with witnessed(api, samples_path):
            phases = asyncio.run(attack(api, args))
        log_tail = api.log.read_text(errors="replace")[-3000:]
        launched = " ".join(Path(part).name if part == sys.executable else part for part in api.command)
    table, passed = summarise(phases, read_samples(samples_path))
    command = "python -m tests.hostile.run " + " ".join(sys.argv[1:])
    report = [
        "# Hostile realtime and connection suite (`make hostile-realtime`)",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC; command: `{command.strip()}`; verdict: {'passed' if passed else 'FAILED'}",
        f"- the API as shipped (`{launched}`: the launch command, under the image check's `--ulimit nofile={OPEN_FILES}`), "
        f"keys required, on a redis-server, no worker; the attacking process's own open-file limit raised to {own_files}",
        f"- targets: API RSS growth ≤ {RSS_GROWTH_TARGET_MB} MB over its baseline, every `/healthz` (a new connection "
        f"each, every 0.1 s, from a process of its own) 200 within {HEALTHZ_TARGET_S:g} s",
        f"- raw samples: `{samples_path.name}` beside this file",
        "",
        *table,
        "",
        "API log, last lines:",
        "",
        "```",
        *log_tail.splitlines()[-25:],
        "```",
    ]
    args.output.write_text("\n".join(report) + "\n")
    print("\n".join(report))
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
