"""``python -m tests.sentinel.failover_chaos`` (``make failover-chaos-sentinel``): planned Sentinel failovers under load.

A primary, two replicas and three sentinels (``ttsq.store.local_topology``, guarded as shipped: ``min-replicas-to-write
1``, ``min-replicas-max-lag 10``; ``--guard 0`` for none), an API and model workers (``MODEL=tiny``, ``BATCH_INVARIANT``) on
``redis+sentinel://``, every setting the failover touches at its default (``SUBMIT_WAIT_REPLICAS=auto``,
``SUBMIT_WAIT_TIMEOUT_MS``, ``REDIS_RETRIES``; leases and sweeps at the chaos suite's short timings). Meanwhile:

* a steady submit load: unique requests, and one in five a request already acknowledged (a cache hit or a
  single-flight join); a refused submit (503, 429) is sent again after its ``Retry-After``, as docs/api.md tells
  clients;
* realtime sessions, back to back, ``--sessions`` at a time, text sent word by word;
* ``SENTINEL FAILOVER`` ``--failovers`` times, each once every replica is back on the last one's new primary.

Judged at the end: every acknowledged task (200/202) read through the API until it is final — **lost** is one the
API answers 404 (target 0), **not final** one still queued or running after the settle time; and every session —
complete, ended with an error, or **hung** (no end within its deadline; target 0). Prints the figures and writes
them, with the command and the date, to ``--markdown`` (bench/results/failover-chaos.md).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import random
import shlex
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from tests.chaos.harness import ROOT, background
from tests.chaos.ledger import Client, Request, Requests, settle_through_api
from tests.cluster.deployment import Processes
from tests.cluster.sessions import SESSION_DEADLINE_S, Session, run_session, session_text
from tests.support.redis_server import server_binary
from tests.support.service import wait_for
from ttsq.inference.engines.checkpoint import build_tiny_checkpoint
from ttsq.store.local_topology import start_redis_sentinel

METHOD = (
    "a primary, {replicas} replicas and three sentinels (min-replicas-to-write {guard}, min-replicas-max-lag 10); "
    "an API and tiny-model workers on redis+sentinel://, SUBMIT_WAIT_REPLICAS at its default (auto), the chaos suite's "
    "short leases; submits retried after Retry-After, one in five an acknowledged request again (cache hit or join); "
    "realtime sessions back to back; SENTINEL FAILOVER, the next once every replica is back on the new primary."
)

API_ENV = {"MAX_CHUNK_CHARS": "40"}
"""Where the workers cut text (ENGINE_ENV), so the API's sessions cut it the same way."""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.sentinel.failover_chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--failovers", type=int, default=10)
    parser.add_argument("--sessions", type=int, default=5, help="sessions live at a time")
    parser.add_argument("--submitters", type=int, default=3, help="submit threads (each waits ~--pause-s between submits)")
    parser.add_argument("--pause-s", type=float, default=0.5)
    parser.add_argument("--between-s", type=float, default=6.0, help="seconds between one failover's end and the next")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--guard", type=int, default=1, help="min-replicas-to-write on every server (0: none; shipped: 1)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--settle-s", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--label", default="", help="what this run is (e.g. the commit), for the report's title")
    parser.add_argument("--markdown", type=Path, default=ROOT / "bench" / "results" / "failover-chaos.md")
    parser.add_argument("--no-write", action="store_true")
    return parser.parse_args(argv)


def submitter(client: Client, requests: Requests, rng: random.Random, pause_s: float) -> Callable[[threading.Event], None]:
    """Submit until stopped: new requests, one in five an acknowledged one again; refusals retried after Retry-After."""
    done: list[Request] = []

    def run(stop: threading.Event) -> None:
        while not stop.is_set():
            request = rng.choice(done) if done and rng.random() < 0.2 else requests.new("Failover")
            while not stop.is_set():
                if client.submit(request) is not None:
                    done.append(request)
                    break
                retry_after = client.refusals[-1].retry_after if client.refusals else None
                stop.wait(float(retry_after or 1))
            stop.wait(pause_s)

    return run


class SessionLoops:
    """``count`` threads, each running sessions back to back until :meth:`stop`; a session in progress then runs to
    its end (or its deadline: hung), however long that takes."""

    def __init__(self, api: str, count: int, rng: random.Random) -> None:
        self.sessions: list[Session] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._threads = [
            threading.Thread(target=self._loop, args=(api, random.Random(rng.random())), name=f"session-{n}", daemon=True)
            for n in range(count)
        ]
        for thread in self._threads:
            thread.start()

    def _loop(self, api: str, rng: random.Random) -> None:
        while not self._stop.is_set():
            session = Session(session_text(rng), rng.randrange(1, 2**31 - 1))
            with self._lock:
                self.sessions.append(session)
            if run_session(api, session).outcome != "complete":
                self._stop.wait(1.0)  # as an agent would, before it opens the next

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(SESSION_DEADLINE_S + 60)


def main(argv: list[str]) -> int:
    args = parse(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    rng = random.Random(seed)
    command = "python -m tests.sentinel.failover_chaos " + shlex.join(argv)
    started = datetime.datetime.now().astimezone()
    print(f"{command}  (seed {seed})", flush=True)
    checkpoint = build_tiny_checkpoint(ROOT / "var" / "tiny-checkpoint")
    root = Path(tempfile.mkdtemp(prefix="failover-chaos-"))
    sentinel = start_redis_sentinel(
        root / "redis", replicas=args.replicas, sentinels=3, binary=server_binary(), guarded=args.guard > 0, guard=args.guard
    )
    processes = Processes(root, sentinel.url(), env=API_ENV)
    failovers: list[str] = []
    loops: SessionLoops | None = None
    try:
        api = processes.api("api")
        processes.model_workers([f"w{n}" for n in range(args.workers)], checkpoint)
        client = Client(api, "sentinel-failover", timeout_s=60)
        requests = Requests(random.Random(rng.random()))
        with contextlib.ExitStack() as load:
            for n in range(args.submitters):
                submits = submitter(client, requests, random.Random(rng.random()), args.pause_s)
                load.enter_context(background(submits, f"submit-{n}"))
            loops = SessionLoops(api, args.sessions, rng)
            wait_for(lambda: len(client.acks) >= 10 and loops is not None and len(loops.sessions) >= args.sessions, 300, "load")
            for n in range(args.failovers):
                time.sleep(args.between_s)
                old = sentinel.primary_port()
                began = time.monotonic()
                promoted = sentinel.failover(timeout_s=120)
                agreed = time.monotonic() - began
                sentinel.wait_whole(120)  # the old primary rejoined: the next failover is a planned one again
                line = (
                    f"failover {n + 1}: {old} -> {promoted.port}, sentinels agreed in {agreed:.1f} s, "
                    f"every replica back in {time.monotonic() - began:.1f} s"
                )
                failovers.append(line)
                print(line, flush=True)
            time.sleep(args.between_s)
        loops.stop()
        acknowledged = len(client.acks)
        print(f"settling {acknowledged} acknowledged tasks", flush=True)
        outcomes = settle_through_api(client, args.settle_s)
    finally:
        if loops is not None:
            loops.stop()
        processes.kill_all()
        sentinel.stop()
    sessions = loops.sessions
    statuses = Counter(outcome.status for outcome in outcomes.values())
    kinds = Counter("cache hit" if ack.code == 200 else "queued/joined" for ack in client.acks.values())
    ended = Counter(session.outcome for session in sessions)
    errors = Counter(session.error for session in sessions if session.outcome == "error")
    lost = [task_id for task_id, outcome in outcomes.items() if outcome.status == "lost"]
    report = [
        f"# Sentinel failovers under load — {started:%Y-%m-%d %H:%M %Z}{' — ' + args.label if args.label else ''}",
        "",
        f"Command: `{command}` (seed {seed}), on this machine (2 cores shared): "
        + METHOD.format(replicas=args.replicas, guard=args.guard or "off"),
        "",
        f"- failovers: {len(failovers)}",
        *(f"  - {line}" for line in failovers),
        f"- acknowledged: {acknowledged} ({dict(kinds)}); refused: 503 × {client.refused(503)}, 429 × {client.refused(429)}",
        f"- outcomes: {dict(statuses)}; **lost: {len(lost)}**" + (f" ({', '.join(lost[:10])})" if lost else ""),
        f"- client problems (5xx other than 503, no Retry-After, hangs): {len(client.problems)}"
        + (f" — {client.problems[:5]}" if client.problems else ""),
        f"- sessions (back to back; one that ended early is followed by the next a second later): {len(sessions)}: "
        f"{dict(ended)}; **hung: {ended.get('hung', 0)}**",
    ]
    report += [f"  - ended with `{error}`: {count}" for error, count in errors.most_common()]
    for task_id in lost[:10]:
        ack = client.acks[task_id]
        report.append(f"  - lost {task_id}: answered {ack.code} at {datetime.datetime.fromtimestamp(ack.at):%H:%M:%S.%f}")
    if len(lost) > 10:
        report.append(f"  - and {len(lost) - 10} more lost")
    for session in sessions:
        if session.outcome == "hung":
            report.append(f"  - hung: started {datetime.datetime.fromtimestamp(session.started_at):%H:%M:%S}, {session.line()}")
    report.append(f"- logs in {root}")
    text = "\n".join(report) + "\n"
    print(text)
    if not args.no_write:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        with args.markdown.open("a") as out:
            out.write(text + "\n")
    return 1 if lost or ended.get("hung", 0) or client.problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
