"""The arq side of the queue-overhead benchmark. Runs in its own venv, never in ttsq's.

arq 0.28 requires ``redis<6`` while ttsq runs redis-py 8, so installing arq into the project's
venv would downgrade the service's Redis client. :mod:`bench.service.throughput` therefore creates
``var/bench-arq-venv`` (arq and the redis-py it declares) and runs this module with that venv's
Python. It imports nothing from ttsq, only arq and the standard library.

    python -m bench.service.arq_jobs enqueue REDIS_URL N        # N no-op jobs
    python -m bench.service.arq_jobs work REDIS_URL MAX_JOBS POLL_DELAY_S   # a burst-mode worker
    python -m bench.service.arq_jobs collect REDIS_URL          # JSON: jobs, first start, last finish
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any, ClassVar

from arq import create_pool
from arq.connections import RedisSettings
from arq.worker import run_worker


async def noop(ctx: dict[str, Any]) -> None:
    """The job: nothing, so that only arq's own work is measured."""


class WorkerSettings:
    functions: ClassVar[list[Any]] = [noop]


async def enqueue(url: str, count: int) -> None:
    pool = await create_pool(RedisSettings.from_dsn(url))
    try:
        for start in range(0, count, 200):
            await asyncio.gather(*(pool.enqueue_job("noop") for _ in range(start, min(count, start + 200))))
    finally:
        await pool.aclose()


async def collect(url: str) -> dict[str, Any]:
    """Every stored result's start and finish (arq keeps them, in ms), summarised."""
    pool = await create_pool(RedisSettings.from_dsn(url))
    try:
        results = await pool.all_job_results()
    finally:
        await pool.aclose()
    return {
        "jobs": len(results),
        "succeeded": sum(1 for result in results if result.success),
        "first_start": min(result.start_time.timestamp() for result in results) if results else None,
        "last_finish": max(result.finish_time.timestamp() for result in results) if results else None,
    }


def main() -> None:
    import arq

    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("version")
    for name in ("enqueue", "work", "collect"):
        command = sub.add_parser(name)
        command.add_argument("url")
        if name == "enqueue":
            command.add_argument("count", type=int)
        if name == "work":
            command.add_argument("max_jobs", type=int)
            command.add_argument("poll_delay_s", type=float)
    args = parser.parse_args()
    if args.command == "version":
        print(arq.VERSION)
    elif args.command == "enqueue":
        asyncio.run(enqueue(args.url, args.count))
    elif args.command == "work":
        run_worker(
            WorkerSettings,  # type: ignore[arg-type,unused-ignore]
            redis_settings=RedisSettings.from_dsn(args.url),
            burst=True,
            max_jobs=args.max_jobs,
            poll_delay=args.poll_delay_s,
            handle_signals=False,
        )
    else:
        print(json.dumps(asyncio.run(collect(args.url))))


if __name__ == "__main__":
    main()
