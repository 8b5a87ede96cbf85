"""The hostile suite's witness, in a process of its own so that the attackers' event loop never delays it: every
``--interval-s`` it asks ``/healthz`` on a new connection (as a kubelet probe does) and reads the API process's
resident memory and open files, one JSON line per sample, until it is stopped (SIGTERM).

    python -m tests.hostile.probe --url http://127.0.0.1:8000 --pid 1234 --out samples.jsonl
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from pathlib import Path
from types import FrameType

import httpx
import psutil


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--pid", type=int, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--interval-s", type=float, default=0.1)
    parser.add_argument("--timeout-s", type=float, default=10.0)
    args = parser.parse_args()
    stopping = False

    def stop(_signum: int, _frame: FrameType | None) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    api = psutil.Process(args.pid)
    with args.out.open("a") as out:
        while not stopping:
            started = time.perf_counter()
            try:
                status: int | str = httpx.get(f"{args.url}/healthz", timeout=args.timeout_s).status_code
            except httpx.HTTPError as exc:
                status = type(exc).__name__
            latency_s = time.perf_counter() - started
            try:
                memory, files = api.memory_info().rss, api.num_fds()
            except psutil.Error:
                memory, files = None, None
            # "t" is when the probe was answered (and the memory read): a slow probe counts where it ended.
            sample = {"t": time.time(), "status": status, "latency_s": round(latency_s, 4), "rss": memory, "fds": files}
            out.write(json.dumps(sample) + "\n")
            out.flush()
            time.sleep(max(0.0, args.interval_s - (time.perf_counter() - started)))


if __name__ == "__main__":
    main()
