"""``python -m tests.cluster.slot_chaos`` (``make failover-chaos-cluster``): a Redis Cluster's slots moved under live sessions.

Three masters with a replica each (``ttsq.store.local_topology``), ``QUEUE_SHARDS=3`` (each shard's slot on its own
master), an API and model workers (``MODEL=tiny``, ``BATCH_INVARIANT``) on ``redis+cluster://``. Each round opens
``--sessions`` realtime sessions at once (text sent word by word); once every one has its first audio, the slot of
every queue shard is moved to the next master, ``--moves`` times over (``MIGRATING``/``IMPORTING``, a few keys per
``MIGRATE``, as ``redis-cli --cluster reshard`` does — what a managed Redis does when it scales).

Judged: every session — **ended early** (anything but ``session.done`` and 1000; target 0) or hung — and each
complete session's audio against its text submitted whole (bit for bit). Prints the figures and appends them, with
the command and the date, to ``--markdown`` (bench/results/failover-chaos.md).
"""

from __future__ import annotations

import argparse
import datetime
import random
import shlex
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

from redis.crc import key_slot

from tests.chaos.harness import ROOT
from tests.cluster.deployment import Processes
from tests.cluster.sessions import SESSION_DEADLINE_S, Session, run_session, session_text, whole_text_pcm
from tests.support.redis_server import server_binary
from tests.support.service import wait_for
from ttsq.inference.engines.checkpoint import build_tiny_checkpoint
from ttsq.store.keys import Shards
from ttsq.store.local_topology import start_redis_cluster

METHOD = (
    "three masters with a replica each, QUEUE_SHARDS=3; an API and tiny-model workers (BATCH_INVARIANT) on "
    "redis+cluster://; each round, sessions opened together and, once each has audio, every shard's slot moved to the "
    "next master (5 keys per MIGRATE, a pause between) the given number of times; each complete session compared with its text "
    "submitted whole."
)


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.cluster.slot_chaos", description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", type=int, default=5)
    parser.add_argument("--moves", type=int, default=2, help="times every shard's slot is moved, per round")
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--pause-s", type=float, default=0.1, help="pause between MIGRATE batches: a slot half-moved longer")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--label", default="", help="what this run is (e.g. the commit), for the report's title")
    parser.add_argument("--markdown", type=Path, default=ROOT / "bench" / "results" / "failover-chaos.md")
    parser.add_argument("--no-write", action="store_true")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    seed = args.seed if args.seed is not None else random.randrange(2**31)
    rng = random.Random(seed)
    command = "python -m tests.cluster.slot_chaos " + shlex.join(argv)
    started = datetime.datetime.now().astimezone()
    print(f"{command}  (seed {seed})", flush=True)
    checkpoint = build_tiny_checkpoint(ROOT / "var" / "tiny-checkpoint")
    root = Path(tempfile.mkdtemp(prefix="slot-chaos-"))
    cluster = start_redis_cluster(root / "redis", masters=3, replicas=1, binary=server_binary())
    processes = Processes(root, cluster.url(), env={"QUEUE_SHARDS": "3", "MAX_CHUNK_CHARS": "40"})
    slots = [key_slot(keys.queue.encode()) for keys in Shards("ttsq", 3).all]
    sessions: list[Session] = []
    moves: list[float] = []
    equal = differ = unchecked = 0
    try:
        api = processes.api("api")
        processes.model_workers([f"w{n}" for n in range(args.workers)], checkpoint)
        for round_ in range(args.rounds):
            batch = [Session(session_text(rng, args.sentences), rng.randrange(1, 2**31 - 1)) for _ in range(args.sessions)]
            sessions += batch
            threads = [threading.Thread(target=run_session, args=(api, session, 0.1), daemon=True) for session in batch]
            for thread in threads:
                thread.start()
            wait_for(lambda: all(s.first_audio_at or s.ended_at for s in batch), 300, "every session's first audio")  # noqa: B023
            for _ in range(args.moves):
                for slot in slots:
                    masters = sorted(cluster.masters(), key=lambda node: node.port)
                    owner = cluster.slot_owner(slot)
                    target = masters[(masters.index(next(m for m in masters if m.port == owner.port)) + 1) % len(masters)]
                    began = time.monotonic()
                    cluster.migrate_slot(slot, target, batch=5, pause_s=args.pause_s)
                    moves.append(time.monotonic() - began)
            mid = sum(1 for s in batch if not s.ended_at)
            for thread in threads:
                thread.join(SESSION_DEADLINE_S + 60)
            ended = Counter(session.outcome for session in batch)
            print(f"round {round_ + 1}: {len(slots) * args.moves} slot moves after every session's first audio; {mid} of "
                  f"{len(batch)} sessions still live after the last; {dict(ended)}", flush=True)  # fmt: skip
        for session in sessions:
            if session.outcome != "complete":
                continue
            whole = whole_text_pcm(api, session)
            if whole is None:
                unchecked += 1
            elif whole == session.audio:
                equal += 1
            else:
                differ += 1
    finally:
        processes.kill_all()
        cluster.stop()
    ended = Counter(session.outcome for session in sessions)
    errors = Counter(session.error for session in sessions if session.outcome != "complete")
    early = len(sessions) - ended.get("complete", 0)
    fractions = [
        len(session.audio) / 2 for session in sessions if session.outcome == "error"
    ]
    report = [
        f"# Redis Cluster slot moves under live sessions — {started:%Y-%m-%d %H:%M %Z}{' — ' + args.label if args.label else ''}",
        "",
        f"Command: `{command}` (seed {seed}), on this machine (2 cores shared): {METHOD}",
        "",
        f"- slot moves: {len(moves)} (each {min(moves, default=0):.2f}–{max(moves, default=0):.2f} s)",
        f"- sessions: {len(sessions)}: {dict(ended)}; **ended early: {early}**, hung: {ended.get('hung', 0)}",
        f"- complete sessions equal to their whole-text submit: {equal}; different: {differ}; not checked: {unchecked}",
    ]
    report += [f"  - ended with `{error}`: {count}" for error, count in errors.most_common()]
    if fractions:
        report.append(f"  - audio the sessions that ended early had: {', '.join(f'{n / 24000:.1f} s' for n in fractions)}")
    report.append(f"- logs in {root}")
    text = "\n".join(report) + "\n"
    print(text)
    if not args.no_write:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        with args.markdown.open("a") as out:
            out.write(text + "\n")
    return 1 if early or differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
