"""A worker killed mid-session: the longest silence its listener hears, and whether the audio is still the text's.

    python -m bench.listening.worker_kill_gap [--runs 5] [--tokens 192]

One redis-server, one API and two workers (``kill-a``, ``kill-b``) on the tiny checkpoint with ``BATCH_INVARIANT=true``
and the shipped liveness settings (``HEARTBEAT_INTERVAL_S``, ``HEARTBEAT_TTL_S``, ``SWEEP_INTERVAL_S``, ``LEASE_S`` are
left at their defaults). Each run opens a realtime session (``/v1/tts/realtime``), sends a six-sentence text word by
word and ``close``, and reads every frame with its arrival time. Once the first sentence's audio is out, at the first
frame that finds a later sentence's task running, the worker holding it (``worker`` on its job record,
``WORKER_ID~suffix``) is killed with SIGKILL; the other worker is already up. The session goes on to its end; the
killed worker is started again before the next run.

Per run: the time from the kill to the killed task's next claim (the heartbeat TTL and the sweep's share), the longest
gap between two audio frames the later of which came after the kill (the silence the kill made, which a lease alone
once stretched to the lease), the longest gap before the kill (the session's own rhythm), the longest playback
stall (a listener playing from the first byte at real time: how long it waited with nothing to play), whether the
session's audio equals the same text submitted whole (``POST /v1/tts/submit``, PCM, sample for sample), how the
killed task's job was requeued (the surviving worker's ``ttsq_sweep_requeued_total``) and its attempts. Chunks
decode faster than real time on the tiny checkpoint, so the playback buffer hides part of a gap: both figures are
given.

The machine is small and shared; this is a measurement, not a test (the test is
``tests/e2e/test_processes.py::test_a_killed_worker_s_job_is_taken_back_by_its_heartbeat_not_its_lease``). Writes
``bench/results/worker-kill-gap.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import redis
from prometheus_client.parser import text_string_to_metric_families
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from bench.machine import machine
from bench.stacks import RESULTS, Stack, record, service_env, utc_now
from settings import Settings
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.runtime.launch import worker_command
from ttsq.store.keys import Shards
from ttsq.store.local_redis import start_redis_server

SENTENCES = (
    "The morning train was late again today.",
    "Everyone waited on the cold platform.",
    "A small dog sat beside the old bench.",
    "The doors finally opened with a sigh.",
    "Please remember your umbrella tomorrow.",
    "The meeting moved to the room upstairs.",
)
"""Each over half of ``MAX_CHUNK_CHARS`` (40) and under it: the session and the whole-text submit cut at every sentence,
so their audio can be compared sample for sample."""
TEXT = " ".join(SENTENCES)
BYTES_PER_S = 2 * SAMPLE_RATE
WORKERS = ("kill-a", "kill-b")
LIVENESS_SETTINGS = ("heartbeat_interval_s", "heartbeat_ttl_s", "sweep_interval_s", "lease_s")
"""Left at their defaults in every process; the report names the values this checkout ships."""


@dataclass
class Run:
    killed: str
    """The worker killed (its ``WORKER_ID``)."""
    killed_at_audio_s: float
    """Seconds of audio the listener had received when the kill came."""
    gap_after_kill_s: float
    """Longest time between two audio frames the later of which came after the kill."""
    reclaimed_after_s: float
    """From the kill to the killed task's second claim (its ``started_at``, Redis's clock on this same host): what the
    heartbeat TTL and the sweep decide; the rest of the gap is the survivor's (its rows in flight drain before the task,
    which runs alone, starts; then it decodes up to where the listener is)."""
    longest_gap_before_kill_s: float
    """The same before the kill (the session's own rhythm: a chunk is queued when the one before has audio out)."""
    longest_stall_s: float
    """Longest wait of a listener playing from the first byte at real time."""
    audio_s: float
    bit_equal: bool
    attempts: int
    requeued_by: dict[str, float]
    """The surviving worker's ``ttsq_sweep_requeued_total`` by reason."""
    close_code: int | None


def requeued(url: str) -> dict[str, float]:
    scrape = httpx.get(f"{url}/metrics", timeout=10).text
    return {
        sample.labels["reason"]: sample.value
        for family in text_string_to_metric_families(scrape)
        for sample in family.samples
        if sample.name == "ttsq_sweep_requeued_total"
    }


def job_record(client: redis.Redis, task_id: str) -> dict[str, Any]:
    raw = client.get(Shards("ttsq", 1).of(task_id).job(task_id))
    return json.loads(raw) if raw else {}


def whole_text_pcm(api: str) -> bytes:
    task = httpx.post(
        f"{api}/v1/tts/submit", json={"text": TEXT, "format": "pcm", "voice": "zh_female", "seed": 7, "listen": True}, timeout=30
    )
    task.raise_for_status()
    task_id = task.json()["task_id"]
    deadline = time.monotonic() + 300
    while httpx.get(f"{api}/v1/tts/tasks/{task_id}", timeout=30).json()["status"] != "done":
        if time.monotonic() > deadline:
            raise RuntimeError("the whole-text submit did not finish")
        time.sleep(0.2)
    return httpx.get(f"{api}/v1/tts/result/{task_id}", timeout=30).content


Session = tuple[bytes, list[float], list[int], tuple[float, float] | None, str, str, int | None]


def session(api: str, client: redis.Redis, stack: Stack) -> Session:
    """One session; once the first sentence's audio is out, kills the worker of the first later sentence's task found
    running when a frame arrives. Returns the audio, each audio
    frame's arrival time and size, when the kill came (None if it never did), whom it killed, the killed task, the
    close code."""
    audio = bytearray()
    arrivals: list[float] = []
    sizes: list[int] = []
    tasks: dict[int, str] = {}
    done: set[int] = set()
    killed_at: tuple[float, float] | None = None
    killed, killed_task = "", ""
    with connect(api.replace("http://", "ws://") + "/v1/tts/realtime", open_timeout=30, max_size=None) as ws:
        ws.send(json.dumps({"type": "session.start", "voice": "zh_female", "seed": 7}))
        assert json.loads(ws.recv(timeout=30))["type"] == "session.started"
        for word in TEXT.split(" "):
            ws.send(json.dumps({"type": "text", "text": word + " "}))
        ws.send(json.dumps({"type": "close"}))
        try:
            while True:
                message = ws.recv(timeout=300)
                now = time.monotonic()
                if isinstance(message, bytes):
                    audio += message
                    arrivals.append(now)
                    sizes.append(len(message))
                    if killed_at is None and 0 in done:
                        for index in sorted(set(tasks) - done - {0}):
                            killed, killed_task = kill_holder(client, stack, tasks[index])
                            if killed:
                                killed_at = (time.monotonic(), time.time())
                                break
                    continue
                event = json.loads(message)
                if event["type"] == "segment.queued":
                    tasks[event["index"]] = event["task_id"]
                elif event["type"] == "segment.done":
                    done.add(event["index"])
        except ConnectionClosed:
            pass
        code = ws.close_code
    return bytes(audio), arrivals, sizes, killed_at, killed, killed_task, code


def kill_holder(client: redis.Redis, stack: Stack, task_id: str) -> tuple[str, str]:
    """SIGKILL the worker running ``task_id`` now (none if it is not running)."""
    record_ = job_record(client, task_id)
    if record_.get("status") != "running" or not record_.get("worker"):
        return "", ""
    name = str(record_["worker"]).split("~", 1)[0]
    process = stack.processes.pop(name)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return name, task_id


def longest_stall(arrivals: list[float], sizes: list[int]) -> float:
    """A listener playing from the first byte at real time: the longest it waited with nothing to play."""
    if not arrivals:
        return 0.0
    played_until = arrivals[0]
    stall = 0.0
    for at, size in zip(arrivals, sizes, strict=True):
        if at > played_until:
            stall = max(stall, at - played_until)
            played_until = at
        played_until += size / BYTES_PER_S
    return stall


def measure(runs: int, tokens: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="kill-gap-") as tmp:
        server = start_redis_server(Path(tmp) / "redis")
        env = service_env(
            server.url,
            MODEL="tiny",
            ENGINE_BACKEND="ttsq",
            BATCH_INVARIANT="true",
            MAX_BATCH="8",
            MAX_CHUNK_CHARS="40",
            MIN_NEW_TOKEN=str(tokens),
            MAX_NEW_TOKEN=str(tokens),
            NORMALIZE_TEXT="false",
            MAX_STREAMS="64",
            MAX_STREAMS_PER_KEY="64",
        )
        stack = Stack(Path(tmp))
        client = redis.Redis.from_url(server.url)
        urls: dict[str, str] = {}
        results: list[Run] = []
        try:
            api = stack.start_api("api", env)
            for name in WORKERS:
                urls[name] = stack.start_worker(name, worker_command(), env, timeout_s=300)
            reference = whole_text_pcm(api)
            for number in range(runs):
                audio, arrivals, sizes, kill, killed, task, code = session(api, client, stack)
                if kill is None:
                    print(f"run {number + 1}: no later sentence's task was found running; not counted")
                    continue
                killed_at, killed_wall = kill
                job = job_record(client, task)
                pairs = list(itertools.pairwise(arrivals))
                after = [b - a for a, b in pairs if b > killed_at]
                before = [b - a for a, b in pairs if b <= killed_at]
                survivor = next(name for name in WORKERS if name != killed)
                run = Run(
                    killed=killed,
                    killed_at_audio_s=sum(size for at, size in zip(arrivals, sizes, strict=True) if at <= killed_at) / BYTES_PER_S,
                    gap_after_kill_s=max(after, default=float("nan")),
                    reclaimed_after_s=float(job.get("started_at") or "nan") - killed_wall,
                    longest_gap_before_kill_s=max(before, default=0.0),
                    longest_stall_s=longest_stall(arrivals, sizes),
                    audio_s=len(audio) / BYTES_PER_S,
                    bit_equal=audio == reference,
                    attempts=int(job.get("attempts", 0)),
                    requeued_by=requeued(urls[survivor]),
                    close_code=code,
                )
                results.append(run)
                print(f"run {number + 1}: {json.dumps(asdict(run))}", flush=True)
                urls[killed] = stack.start_worker(killed, worker_command(), env, timeout_s=300)
        finally:
            stack.close()
            client.close()
            server.stop()
    defaults = {name: Settings.model_fields[name].default for name in LIVENESS_SETTINGS}
    return {
        "runs": [asdict(run) for run in results],
        "tokens": tokens,
        "reference_audio_s": len(reference) / BYTES_PER_S,
        "defaults": defaults,
        "machine": machine(),
    }


def report(data: dict[str, Any], command: str) -> str:
    runs = data["runs"]
    lines = [
        "# A worker killed mid-session (realtime), the liveness settings at their defaults",
        "",
        f"{utc_now()}, `{command}`; tiny checkpoint, `BATCH_INVARIANT=true`, `MIN_NEW_TOKEN=MAX_NEW_TOKEN={data['tokens']}`, "
        "`MAX_CHUNK_CHARS=40`, two workers up, `HEARTBEAT_INTERVAL_S`/`HEARTBEAT_TTL_S`/`SWEEP_INTERVAL_S`/`LEASE_S` at "
        f"their defaults ({' / '.join(str(data['defaults'][name]) for name in LIVENESS_SETTINGS)}). "
        f"Machine: {json.dumps(data['machine'])}",
        "",
        "| run | killed | audio received at the kill (s) | kill → task claimed again (s) | longest gap between frames "
        "after the kill (s) | (before the kill) | longest playback stall (s) | session audio (s) | equals the whole-text "
        "submit | attempts | surviving worker's requeues by reason | close |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for n, run in enumerate(runs, 1):
        lines.append(
            f"| {n} | {run['killed']} | {run['killed_at_audio_s']:.2f} | {run['reclaimed_after_s']:.2f} | "
            f"{run['gap_after_kill_s']:.2f} | "
            f"{run['longest_gap_before_kill_s']:.2f} | {run['longest_stall_s']:.2f} | "
            f"{run['audio_s']:.2f} | {'yes' if run['bit_equal'] else 'NO'} | {run['attempts']} | "
            f"{', '.join(f'{k} {v:.0f}' for k, v in sorted(run['requeued_by'].items()))} | {run['close_code']} |"
        )
    if runs:
        lines += [
            "",
            f"Longest gap between audio frames after a kill, over {len(runs)} runs: "
            f"{max(r['gap_after_kill_s'] for r in runs):.2f} s "
            f"(median {statistics.median(r['gap_after_kill_s'] for r in runs):.2f}); "
            f"kill → claimed again: at most {max(r['reclaimed_after_s'] for r in runs):.2f} s; "
            f"longest playback stall: {max(r['longest_stall_s'] for r in runs):.2f} s; "
            f"bit-equal: {sum(r['bit_equal'] for r in runs)} of {len(runs)}.",
        ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=192, help="MIN_NEW_TOKEN = MAX_NEW_TOKEN: each sentence's length")
    parser.add_argument("--out", default="worker-kill-gap", help="the report's name in bench/results (a run of another commit)")
    args = parser.parse_args()
    data = measure(args.runs, args.tokens)
    command = f"python -m bench.listening.worker_kill_gap --runs {args.runs} --tokens {args.tokens}"
    command += f" --out {args.out}" if args.out != "worker-kill-gap" else ""
    record(RESULTS / f"{args.out}.md", report(data, command), data)


if __name__ == "__main__":
    main()
