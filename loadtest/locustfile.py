"""Load tests for ttsq with locust (``FastHttpUser``).

Three user classes, each a kind of client; pick them by name on the command line::

    locust -f loadtest/locustfile.py --headless -u 20 -r 5 -t 60s --host http://127.0.0.1:8000 SubmitPollUser
    locust -f loadtest/locustfile.py --list          # the classes

``SubmitPollUser``  the native API as its clients use it: submit, poll the status every 800 ms, download.
``CacheHeavyUser``  repeated sentences with a fixed voice: after the first time the cache answers.
``OpenAIUser``      ``POST /v1/audio/speech`` with OpenAI's body: one request that returns the audio.

Requests are named so the stats group them (``/v1/tts/tasks/[id]``). Everything is bounded: a job not
done within ``--tts-task-timeout`` seconds fails the poll that sees it, a ``Retry-After`` (429 queue
full, 503 Redis down) is honoured for at most ``--tts-max-backoff`` seconds and counted as a failure.
``--tts-flow-rows`` adds rows of request type ``FLOW``: each job's whole time as its client lives it,
submit to audio downloaded. The ``--tts-*`` options also read ``LOCUST_TTS_*`` environment variables.
Only run this against a service you own.
"""

from __future__ import annotations

import itertools
import json
import random
import re
import time
from dataclasses import dataclass
from typing import Any, ClassVar

from locust import FastHttpUser, between, events, task
from locust.argument_parser import LocustArgumentParser
from locust.contrib.fasthttp import ResponseContextManager

# Short sentences: the service may run the tiny random-weight model or the real one on a CPU.
SENTENCES: tuple[str, ...] = (
    "你好，欢迎使用 ttsq。",
    "今天天气很好。",
    "请稍等，马上就好。",
    "谢谢你的耐心。",
    "Hello from ttsq.",
    "The queue is working.",
    "Good morning, everyone.",
    "This is a short test.",
)
CACHE_SENTENCES: tuple[str, ...] = ("欢迎光临。", "Thank you for calling.", "请按一号键。", "Please hold the line.")
CACHE_VOICE = "zh_female"
OPENAI_VOICES: tuple[str, ...] = ("alloy", "echo", "nova", "onyx")
OPENAI_FORMATS: tuple[str, ...] = ("mp3", "wav")
OPENAI_CONTENT_TYPES = {"mp3": "audio/mpeg", "wav": "audio/wav"}
MAX_SEED = 2**31 - 1

SUBMIT = "/v1/tts/submit"
STATUS = "/v1/tts/tasks/[id]"
RESULT = "/v1/tts/result/[id]"
SPEECH = "/v1/audio/speech"
FLOW = "FLOW"
TASK_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(\.[\w-]+)?")
"""A task id inside an error message: replaced by ``[id]`` so that failures group."""


@dataclass(frozen=True)
class Options:
    """The knobs, from ``--tts-*`` options (or their ``LOCUST_TTS_*`` environment variables)."""

    poll_interval_s: float = 0.8
    task_timeout_s: float = 120.0
    max_backoff_s: float = 30.0
    seed: int | None = None
    flow_rows: bool = False


def _add_options(parser: LocustArgumentParser) -> None:
    parser.add_argument(
        "--tts-poll-interval", type=float, default=0.8, env_var="LOCUST_TTS_POLL_INTERVAL", help="seconds between status polls"
    )
    parser.add_argument(
        "--tts-task-timeout",
        type=float,
        default=120.0,
        env_var="LOCUST_TTS_TASK_TIMEOUT",
        help="a job not done (audio downloaded) this many seconds after its submit is a failure",
    )
    parser.add_argument(
        "--tts-max-backoff",
        type=float,
        default=30.0,
        env_var="LOCUST_TTS_MAX_BACKOFF",
        help="longest wait honoured for a Retry-After header",
    )
    parser.add_argument(
        "--tts-seed",
        type=int,
        default=None,
        env_var="LOCUST_TTS_SEED",
        help="seed of the users' random choices, to replay a run's requests exactly (default: a new one per run)",
    )
    parser.add_argument(
        "--tts-flow-rows",
        action="store_true",
        default=False,
        env_var="LOCUST_TTS_FLOW_ROWS",
        help="add FLOW rows: each job's whole time, submit to audio downloaded (they then count in Aggregated too)",
    )


events.init_command_line_parser.add_listener(_add_options)  # type: ignore[no-untyped-call]

_RUN_SEED = random.SystemRandom().randrange(MAX_SEED)
_user_numbers = itertools.count()


def read_options(parsed: Any) -> Options:
    """The options of this run; defaults when locust runs as a library without them."""
    if parsed is None:
        return Options()
    return Options(
        poll_interval_s=float(getattr(parsed, "tts_poll_interval", 0.8)),
        task_timeout_s=float(getattr(parsed, "tts_task_timeout", 120.0)),
        max_backoff_s=float(getattr(parsed, "tts_max_backoff", 30.0)),
        seed=getattr(parsed, "tts_seed", None),
        flow_rows=bool(getattr(parsed, "tts_flow_rows", False)),
    )


def header(response: ResponseContextManager, name: str) -> str:
    """A response header (case-insensitive), ``""`` when absent."""
    if response.headers is None or name not in response.headers:
        return ""
    value = response.headers[name]
    return value if isinstance(value, str) else ", ".join(value)


def retry_after_s(response: ResponseContextManager, default: float = 1.0) -> float:
    value = header(response, "Retry-After") or None
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


def body_of(response: ResponseContextManager) -> dict[str, Any]:
    """The JSON object of a response, or ``{}`` when it is not one."""
    try:
        body = json.loads(response.content or b"")
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def describe(response: ResponseContextManager) -> str:
    """A short, stable failure message: locust groups failures by their text."""
    if response.status_code == 0:
        return f"connection error: {type(getattr(response, 'error', None)).__name__}"
    body = body_of(response)
    detail = body.get("detail") or body.get("error")
    if isinstance(detail, dict):
        detail = detail.get("message")
    return f"HTTP {response.status_code}" + (f": {TASK_ID.sub('[id]', str(detail))[:120]}" if detail else "")


def fail(response: ResponseContextManager, message: str) -> None:
    """Mark a response failed (locust's ``failure`` has no annotations)."""
    response.failure(message)  # type: ignore[no-untyped-call]


def audio_problem(content: bytes | None, content_type: str, fmt: str) -> str | None:
    """Why these bytes are not the audio that was asked for, or ``None`` when they are."""
    data = content or b""
    expected = OPENAI_CONTENT_TYPES.get(fmt, f"audio/{fmt}")
    if not content_type.startswith(expected):
        return f"content-type {content_type!r}, expected {expected}"
    if fmt == "wav" and not (len(data) > 44 and data[:4] == b"RIFF" and data[8:12] == b"WAVE"):
        return f"not a WAV file ({len(data)} bytes)"
    if fmt == "mp3" and not (len(data) > 4 and (data[:3] == b"ID3" or (data[0] == 0xFF and data[1] & 0xE0 == 0xE0))):
        return f"not an MP3 stream ({len(data)} bytes)"
    return None


class TTSUser(FastHttpUser):
    """What the three clients share: options, a reproducible random stream, bounded waits."""

    abstract = True
    host = "http://127.0.0.1:8000"
    # A request may wait for synthesis (OpenAI's endpoint) or a busy server: fail it, never hang.
    network_timeout = 120.0
    connection_timeout = 10.0

    def on_start(self) -> None:
        self.options = read_options(self.environment.parsed_options)
        worker = int(getattr(self.environment.runner, "worker_index", 0) or 0)
        base = self.options.seed if self.options.seed is not None else _RUN_SEED
        self.rng = random.Random(f"{base}:{worker}:{next(_user_numbers)}")

    # -- helpers ---------------------------------------------------------------------------------

    def backoff(self, response: ResponseContextManager, deadline: float | None = None) -> None:
        """Honour Retry-After, capped by --tts-max-backoff and the job's deadline."""
        wait = min(retry_after_s(response), self.options.max_backoff_s)
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - time.monotonic()))
        time.sleep(wait)  # cooperative: locust runs under gevent's monkey patching

    @staticmethod
    def overloaded(response: ResponseContextManager) -> bool:
        """429 (queue full) and 503 (Redis unreachable) are failures with a clear message."""
        if response.status_code not in (429, 503):
            return False
        what = "queue full" if response.status_code == 429 else "unavailable"
        fail(response, f"{response.status_code} {what} (Retry-After {header(response, 'Retry-After') or 'none'})")
        return True

    def flow(self, name: str, started: float, length: int, error: str | None) -> None:
        """With --tts-flow-rows, one sample of a FLOW row: a whole job, submit to audio in hand."""
        if not self.options.flow_rows:
            return
        self.environment.events.request.fire(
            request_type=FLOW,
            name=name,
            response_time=(time.perf_counter() - started) * 1000,
            response_length=length,
            exception=RuntimeError(error) if error else None,
            context={},
        )

    def submit(self, body: dict[str, Any], hit_names: tuple[str, str] | None = None) -> tuple[str, bool] | None:
        """POST /v1/tts/submit: (task id, already done) or None (the failure is reported, backoff done).

        ``hit_names``: report cache hits and misses under these two names, so the stats show the ratio.
        """
        with self.client.post(SUBMIT, json=body, name=SUBMIT, catch_response=True) as response:
            if self.overloaded(response):
                pass
            elif response.status_code not in (200, 202):
                fail(response, describe(response))
                return None
            else:
                answer = body_of(response)
                task_id, cached = answer.get("task_id"), answer.get("cached") is True
                if hit_names is not None:
                    response.request_meta["name"] = hit_names[0] if cached else hit_names[1]
                if not isinstance(task_id, str):
                    fail(response, "submit answered without a task_id")
                    return None
                if response.status_code == 200 and not (cached and answer.get("status") == "done"):
                    fail(response, f"200 but not a cached, done task: {answer.get('status')!r}")
                    return None
                return task_id, cached
        self.backoff(response)
        return None

    def wait_done(self, task_id: str, deadline: float) -> str | None:
        """Poll the status every --tts-poll-interval until done: None, or why not (failed, gone, timed out).

        A failed job and a job still unfinished at the deadline fail the poll that saw it.
        """
        while True:
            time.sleep(min(self.options.poll_interval_s, max(0.0, deadline - time.monotonic())))
            with self.client.get(f"/v1/tts/tasks/{task_id}", name=STATUS, catch_response=True) as response:
                if self.overloaded(response):
                    problem = describe(response)
                elif response.status_code != 200:
                    problem = describe(response)
                    fail(response, problem)
                    return problem
                else:
                    status, error = body_of(response).get("status"), body_of(response).get("error")
                    if status == "done":
                        return None
                    if status == "failed":
                        problem = f"task failed: {TASK_ID.sub('[id]', str(error))[:120]}"
                        fail(response, problem)
                        return problem
                    if status not in ("queued", "running"):
                        problem = f"unknown status {status!r}"
                        fail(response, problem)
                        return problem
                    if time.monotonic() >= deadline:
                        problem = f"task still {status} after {self.options.task_timeout_s:g}s (--tts-task-timeout)"
                        fail(response, problem)
                        return problem
                    continue
            if time.monotonic() >= deadline:
                return problem
            self.backoff(response, deadline)

    def download(self, task_id: str, fmt: str, deadline: float) -> tuple[int, str | None]:
        """GET the result: (bytes, None) or (0, why not). A 202 is "not ready": wait and retry, bounded."""
        while True:
            with self.client.get(f"/v1/tts/result/{task_id}", name=RESULT, catch_response=True) as response:
                if response.status_code == 200:
                    problem = audio_problem(response.content, header(response, "Content-Type"), fmt)
                    if problem:
                        fail(response, problem)
                        return 0, problem
                    return len(response.content or b""), None
                if response.status_code == 202:
                    fail(response, "202 not ready, although the status said done")
                elif not self.overloaded(response):
                    fail(response, describe(response))
                    return 0, f"result: {describe(response)}"
            if time.monotonic() >= deadline:
                return 0, f"result not ready after {self.options.task_timeout_s:g}s"
            self.backoff(response, deadline)

    def run_job(self, body: dict[str, Any], flow_name: str, hit_names: tuple[str, str] | None = None) -> None:
        """Submit, poll until done (unless the cache answered), download; one FLOW sample per job."""
        started = time.perf_counter()
        deadline = time.monotonic() + self.options.task_timeout_s
        submitted = self.submit(body, hit_names)
        if submitted is None:
            return  # the submit's row has the failure; no job, no flow sample
        task_id, done = submitted
        error = None if done else self.wait_done(task_id, deadline)
        length = 0
        if error is None:
            length, error = self.download(task_id, str(body["format"]), deadline)
        self.flow(flow_name, started, length, error)


class SubmitPollUser(TTSUser):
    """The native API's client: submit a sentence with a seed, poll the status, download the WAV.

    The seed makes each request deterministic (reproducible audio), and drawn from a wide range
    it keeps most requests cache misses, so this user measures the queue and the workers.
    """

    weight = 3
    wait_time = between(0.5, 2.0)

    @task
    def submit_poll_download(self) -> None:
        body = {"text": self.rng.choice(SENTENCES), "seed": self.rng.randrange(MAX_SEED), "format": "wav"}
        self.run_job(body, "submit+poll+result")


class CacheHeavyUser(TTSUser):
    """Repeats a few sentences with one voice: after the first time each is a 200 ``cached: true``.

    Submits are reported as ``/v1/tts/submit (cache hit)`` and ``(cache miss)``, so the stats show the
    hit ratio; a miss (the first time, or after a restart) is polled and downloaded like any job.
    """

    weight = 2
    wait_time = between(0.2, 1.0)
    HIT_NAMES: ClassVar[tuple[str, str]] = (f"{SUBMIT} (cache hit)", f"{SUBMIT} (cache miss)")

    @task
    def cached_submit_download(self) -> None:
        body = {"text": self.rng.choice(CACHE_SENTENCES), "voice": CACHE_VOICE, "format": "wav"}
        self.run_job(body, "cached submit+result", self.HIT_NAMES)


class OpenAIUser(TTSUser):
    """An OpenAI SDK client: ``POST /v1/audio/speech`` answers with the audio itself.

    ``wav`` streams sentence by sentence; ``mp3`` comes when complete. The two are separate rows.
    """

    weight = 1
    wait_time = between(1.0, 3.0)

    @task
    def speech(self) -> None:
        fmt = self.rng.choice(OPENAI_FORMATS)
        body = {
            "model": "tts-1",
            "input": self.rng.choice(SENTENCES),
            "voice": self.rng.choice(OPENAI_VOICES),
            "response_format": fmt,
        }
        with self.client.post(SPEECH, json=body, name=f"{SPEECH} [{fmt}]", catch_response=True) as response:
            if self.overloaded(response):
                pass
            elif response.status_code != 200:
                fail(response, describe(response))
                return
            else:
                problem = audio_problem(response.content, header(response, "Content-Type"), fmt)
                if problem:
                    fail(response, problem)
                return
        self.backoff(response)
