"""What the chaos client asked for, what it was promised, and whether the promise was kept.

:class:`Client` submits jobs through the HTTP API and records every acknowledged task id (202, or
200 from the cache) together with the exact request, and every refusal with its status and
``Retry-After``. At the end of a scenario :func:`settle` waits (on Redis, cheaply, then through the
API, as a client would see it) until every acknowledged job is final, and :func:`judge` checks
the invariant for each one:

* done, with audio that decodes and is bit-identical to what the clean :class:`Reference`
  deployment gives for the same request, and the same bytes every time it is read; or
* failed with a reason, when and only when the scenario meant it to fail;
* never lost (404), never left queued or running, and the dead-letter list grows by exactly the
  jobs the scenario meant to kill;

and that there were enough of them: a scenario states how many jobs it acknowledges and completes at
the least (:class:`Expect`), so one whose every submit was refused fails instead of passing empty.

Every request is deterministic (an explicit seed, so a speaker of its own, or a voice and a seed).
Every worker, the reference's included, runs ttsq's decoder batch-invariant with one slot count
(:data:`tests.chaos.harness.ENGINE_ENV`): a job's audio is then the same bits whatever shared its
steps, so a done job must be bit-identical to the reference run's.
"""

from __future__ import annotations

import io
import json
import random
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import redis
import soundfile as sf

from tests.chaos.harness import Deployment, WorkerSlot
from tests.support.service import wait_for
from ttsq.store.keys import Keys

# fmt: off
WORDS = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet", "kilo", "lima", "mike",
    "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu",
]
# fmt: on
FINAL = {"done", "failed", "cancelled"}
Identity = tuple[str, int, str | None]


@dataclass(frozen=True)
class Request:
    """One deterministic TTS request: the text, the seed and (optionally) a voice; the format is how it is delivered."""

    text: str
    seed: int
    voice: str | None = None
    format: str = "wav"

    @property
    def identity(self) -> Identity:
        """What fixes the audio: text, seed and voice (not the container format)."""
        return (self.text, self.seed, self.voice)

    def body(self, fmt: str | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"text": self.text, "seed": self.seed, "format": fmt or self.format}
        if self.voice is not None:
            body["voice"] = self.voice
        return body


class Requests:
    """Unique requests drawn from a seeded RNG: every text and seed is new, so none is a cache hit or joins another."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self._texts: set[str] = set()
        self._seeds: set[int] = set()
        self._lock = threading.Lock()

    def new(self, tag: str, *, marker: str = "", voice: str | None = None, two_chunks: bool | None = None) -> Request:
        """A fresh request; a quarter have two sentences (two chunks: streamed pieces, a second engine call)."""
        with self._lock:
            two = self.rng.random() < 0.25 if two_chunks is None else two_chunks
            while True:
                words = self.rng.sample(WORDS, 5)
                head = " ".join(part for part in (tag, marker, *words[:2]) if part)  # the tag and marker keep their case
                text = f"{head}. {words[2].capitalize()} {words[3]} {words[4]}." if two else f"{head} {words[2]}."
                if text not in self._texts:
                    break
            while (seed := self.rng.randrange(1, 2**31 - 1)) in self._seeds:
                pass
            self._texts.add(text)
            self._seeds.add(seed)
            return Request(text, seed, voice)


@dataclass(frozen=True)
class Ack:
    task_id: str
    request: Request
    at: float
    """Unix time of the acknowledgement (the API's answer arrived)."""
    code: int


@dataclass(frozen=True)
class Refusal:
    code: int
    retry_after: str | None
    detail: str
    at: float


class Client:
    """A chaos client of one API: submits, records every acknowledgement and every other answer.

    ``problems`` collects what the API must never do: a 5xx other than 503, a 503 or 429 without
    ``Retry-After``, no answer within ``timeout_s`` (a hang), a refused connection. Thread-safe, so
    load threads can share it.
    """

    def __init__(
        self,
        url: str,
        scenario: str,
        *,
        timeout_s: float = 30.0,
        on_ack: Callable[[Request], None] | None = None,
        tenants: Sequence[str] = (),
    ) -> None:
        self.url = url
        self.tenants = tuple(tenants)
        """API keys, each its own tenant of the fair queue: a request is submitted (and read) with one of them, chosen
        by its seed, and every fourth in the batch lane, so a scenario's jobs are spread over several tenants and both
        lanes (docs/fairness.md). Empty: anonymous, one tenant."""
        self.scenario = scenario
        self.timeout_s = timeout_s
        self.on_ack = on_ack
        self.acks: dict[str, Ack] = {}
        self.refusals: list[Refusal] = []
        self.problems: list[str] = []
        self.max_latency_s = 0.0
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=timeout_s)

    def submit(self, request: Request) -> Ack | None:
        started = time.monotonic()
        try:
            body = request.body()
            if self.tenants and request.seed % 4 == 0:
                body["priority"] = "batch"
            response = self._http.post(f"{self.url}/v1/tts/submit", json=body, headers=self._as(request))
        except httpx.TimeoutException:
            self._problem(f"submit got no answer within {self.timeout_s:.0f}s (a hang)")
            return None
        except httpx.HTTPError as exc:
            self._problem(f"submit failed at the transport level: {type(exc).__name__}: {exc}")
            return None
        latency = time.monotonic() - started
        with self._lock:
            self.max_latency_s = max(self.max_latency_s, latency)
        if response.status_code in (200, 202):
            body = response.json()
            ack = Ack(str(body["task_id"]), request, time.time(), response.status_code)
            with self._lock:
                self.acks.setdefault(ack.task_id, ack)
            if self.on_ack is not None:
                self.on_ack(request)
            return ack
        retry_after = response.headers.get("retry-after")
        refusal = Refusal(response.status_code, retry_after, response.text[:200], time.time())
        with self._lock:
            self.refusals.append(refusal)
        if response.status_code >= 500 and response.status_code != 503:
            self._problem(f"submit answered {response.status_code}: {response.text[:300]}")
        elif response.status_code in (429, 503) and not retry_after:
            self._problem(f"submit answered {response.status_code} without Retry-After")
        elif response.status_code not in (429, 503):
            self._problem(f"submit answered {response.status_code}: {response.text[:300]}")
        return None

    def _as(self, request: Request) -> dict[str, str]:
        """The headers of the tenant ``request`` is submitted as (none when anonymous)."""
        return {"X-API-Key": self.tenants[request.seed % len(self.tenants)]} if self.tenants else {}

    def _as_task(self, task_id: str) -> dict[str, str]:
        """A task is read with the key that submitted it (another key's task is 404)."""
        with self._lock:
            ack = self.acks.get(task_id)
        return self._as(ack.request) if ack is not None else {}

    def _problem(self, text: str) -> None:
        with self._lock:
            self.problems.append(f"{self.scenario}: {text}")

    def refused(self, code: int) -> int:
        with self._lock:
            return sum(1 for refusal in self.refusals if refusal.code == code)

    def status(self, task_id: str) -> dict[str, Any] | None:
        """The task's status as the API reports it; None for 404 (lost). Retries through 503s."""
        for _ in range(60):
            response = self._http.get(f"{self.url}/v1/tts/tasks/{task_id}", headers=self._as_task(task_id))
            if response.status_code == 404:
                return None
            if response.status_code == 200:
                body: dict[str, Any] = response.json()
                return body
            if response.status_code != 503:
                self._problem(f"status of {task_id} answered {response.status_code}: {response.text[:200]}")
                return {"status": f"http {response.status_code}", "attempts": 0}
            time.sleep(0.5)
        raise AssertionError(f"the API kept answering 503 for the status of {task_id}")

    def result(self, task_id: str) -> bytes | None:
        """The stored audio, exactly as a client downloads it; None when the API has none (not 200)."""
        response = self._http.get(f"{self.url}/v1/tts/result/{task_id}", headers=self._as_task(task_id))
        return response.content if response.status_code == 200 else None

    def close(self) -> None:
        self._http.close()


def samples(audio: bytes, fmt: str) -> bytes | None:
    """The PCM16 samples of a result (WAV decoded, PCM taken as is); None when it does not decode or is empty."""
    if fmt == "pcm":
        return audio if audio and len(audio) % 2 == 0 else None
    try:
        data, rate = sf.read(io.BytesIO(audio), dtype="int16")
    except (RuntimeError, sf.LibsndfileError):
        return None
    if rate != 24000 or data.size == 0:
        return None
    return bytes(np.ascontiguousarray(data).tobytes())


def audio_difference(got: bytes, want: bytes) -> str:
    """How two PCM16 results differ, for a violation's message."""
    if len(got) != len(want):
        return f"{len(got) // 2} vs {len(want) // 2} samples"
    a, b = np.frombuffer(got, dtype="<i2").astype(np.int32), np.frombuffer(want, dtype="<i2").astype(np.int32)
    return f"{int((a != b).sum())} of {len(a)} samples differ, by up to {int(np.abs(a - b).max(initial=0))} steps"


def job_records(deployment: Deployment, namespace: str, ids: Iterable[str]) -> dict[str, dict[str, Any] | None]:
    """The job records of ``ids`` straight from Redis, in one pipeline (None: no such key)."""
    keys = Keys(namespace)
    wanted = list(ids)
    with deployment.client() as client, client.pipeline(transaction=False) as pipe:
        for task_id in wanted:
            pipe.get(keys.job(task_id))
        raw = pipe.execute()
    return {task_id: (json.loads(value) if value is not None else None) for task_id, value in zip(wanted, raw, strict=True)}


@dataclass
class Outcome:
    task_id: str
    request: Request
    status: str
    """done, failed, cancelled, lost (the API answers 404), or the status it was stuck in."""
    attempts: int = 0
    error: str | None = None
    audio: bytes | None = None
    """The result as downloaded at the end."""
    first_audio: bytes | None = None
    """The result as downloaded when the job was first seen done."""


def settle(deployment: Deployment, client: Client, namespace: str, timeout_s: float) -> dict[str, Outcome]:
    """Wait until every acknowledged job is final (or ``timeout_s`` passes), then read each one through the API.

    Progress is watched on Redis (one pipeline per round, no load on the API); a job's result is
    downloaded the moment it is first seen done, and again at the end, so a result that changes
    shows up. Redis errors while it is being restarted count as "not yet".
    """
    pending = set(client.acks)
    first: dict[str, bytes | None] = {}
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        try:
            records = job_records(deployment, namespace, pending)
        except redis.RedisError:
            time.sleep(0.5)
            continue
        for task_id, record in records.items():
            if record is None or record.get("status") in FINAL:
                pending.discard(task_id)
                if record is not None and record.get("status") == "done":
                    first[task_id] = client.result(task_id)
        if pending:
            time.sleep(0.3)
    return _outcomes(client, first)


def settle_through_api(client: Client, timeout_s: float) -> dict[str, Outcome]:
    """:func:`settle` for a deployment whose Redis the test does not read directly (a Redis Cluster): every
    acknowledged job's status polled through the API until it is final (or ``timeout_s`` passes), then read once
    more, its result downloaded twice (a result that changes shows up)."""
    pending = set(client.acks)
    first: dict[str, bytes | None] = {}
    deadline = time.monotonic() + timeout_s
    while pending and time.monotonic() < deadline:
        for task_id in list(pending):
            body = client.status(task_id)
            if body is None or body.get("status") in FINAL:
                pending.discard(task_id)
                if body is not None and body.get("status") == "done":
                    first[task_id] = client.result(task_id)
        if pending:
            time.sleep(0.3)
    return _outcomes(client, first)


def _outcomes(client: Client, first: dict[str, bytes | None]) -> dict[str, Outcome]:
    """Every acknowledged job read once more through the API, its result downloaded again (``first``: the
    download made when it was first seen final, so a result that changes shows up)."""
    outcomes: dict[str, Outcome] = {}
    for task_id, ack in client.acks.items():
        body = client.status(task_id)
        if body is None:
            outcomes[task_id] = Outcome(task_id, ack.request, "lost")
            continue
        outcome = Outcome(task_id, ack.request, str(body["status"]), int(body.get("attempts") or 0), body.get("error"))
        if outcome.status == "done":
            outcome.audio = client.result(task_id)
            outcome.first_audio = first.get(task_id, outcome.audio)
        outcomes[task_id] = outcome
    return outcomes


def completions_in(logs: Iterable[Path]) -> Counter[str]:
    """How many times each task id was completed (a "✓" log line) in ``logs``."""
    done: Counter[str] = Counter()
    pattern = re.compile(r"✓ (\S+) attempt \d+")
    for path in logs:
        if path.exists():
            done.update(pattern.findall(path.read_text(errors="replace")))
    return done


def completions(slots: Iterable[WorkerSlot]) -> Counter[str]:
    """How many times each task id was completed (a "✓" log line) across every incarnation of ``slots``.

    A job finished twice (its lease lapsed while its first worker was still alive) is not an error —
    the queue keeps the first result and refuses the second — but it is counted.
    """
    return completions_in(path for slot in slots for path in slot.all_logs())


class Reference:
    """A clean ttsq next to the chaos one — its own redis-server, API and one worker that runs every job alone
    (``MAX_BATCH=1``) and is never faulted — computing what each chaos request must sound like.

    Requests are sent to it as they are acknowledged by the chaos API (in PCM, the same samples as
    the WAV data), so the reference is ready by the time a scenario settles.
    """

    def __init__(self, root: Path, checkpoint: Path, say: Callable[[str], None]) -> None:
        self.deployment = Deployment(root, checkpoint, say)
        self.slot = self.deployment.add_worker("reference-worker")
        self.api = self.deployment.start_api("reference-api")
        self.client = Client(self.api.url, "reference")
        self._tasks: dict[Identity, str] = {}
        self._audio: dict[Identity, bytes | None] = {}
        self._lock = threading.Lock()

    def want(self, request: Request) -> None:
        with self._lock:
            if request.identity in self._tasks:
                return
            self._tasks[request.identity] = ""
        ack = self.client.submit(Request(*request.identity))
        with self._lock:
            if ack is None:
                del self._tasks[request.identity]
            else:
                self._tasks[request.identity] = ack.task_id

    def samples(self, requests: Iterable[Request], timeout_s: float) -> dict[Identity, bytes | None]:
        """The reference samples of ``requests`` (None where the clean run itself did not produce audio)."""
        wanted = {request.identity: request for request in requests}
        for request in wanted.values():
            self.want(request)
        missing = [identity for identity in wanted if identity not in self._audio]
        unsent = [identity for identity in missing if not self._tasks.get(identity)]
        if unsent:
            raise AssertionError(f"the reference deployment refused {len(unsent)} request(s): {self.client.problems[-3:]}")

        def ready() -> bool:
            records = job_records(self.deployment, "ttsq", [self._tasks[identity] for identity in missing])
            return all(record is not None and record.get("status") in FINAL for record in records.values())

        if missing:
            wait_for(ready, timeout_s, f"the reference deployment to finish {len(missing)} job(s)")
        for identity in missing:
            audio = self.client.result(self._tasks[identity])
            self._audio[identity] = samples(audio, "wav") if audio is not None else None
        return {identity: self._audio[identity] for identity in wanted}

    def close(self) -> None:
        self.client.close()
        self.deployment.close()


@dataclass
class Figures:
    """One scenario's figures: the line it prints, a row of the markdown table, and what went wrong."""

    key: str
    title: str
    acked: int = 0
    done: int = 0
    failed: int = 0
    lost: int = 0
    duplicated: int = 0
    """Ids whose result was read with two different contents (must be 0)."""
    reruns: int = 0
    """Acknowledged jobs that needed more than one attempt."""
    twice: int = 0
    """Jobs completed by two workers (the queue kept the first result)."""
    recovery: str = "-"
    faults: str = ""
    notes: list[str] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    began: float = field(default_factory=time.monotonic)

    def line(self) -> str:
        verdict = "ok" if not self.violations else f"{len(self.violations)} VIOLATION(S)"
        return (
            f"[chaos] {self.key} {self.title}: acknowledged={self.acked} done={self.done} failed={self.failed} "
            f"lost={self.lost} duplicated={self.duplicated} reruns={self.reruns} completed_twice={self.twice} "
            f"recovery={self.recovery} | {self.faults} | {'; '.join(self.notes)} | {self.wall_s:.0f}s | {verdict}"
        )

    def row(self) -> str:
        cells = [
            f"{self.key} {self.title}",
            str(self.acked),
            str(self.done),
            str(self.failed),
            str(self.lost),
            str(self.duplicated),
            str(self.reruns),
            str(self.twice),
            self.recovery,
            self.faults,
            "; ".join(self.notes),
            "ok" if not self.violations else f"**{len(self.violations)} violation(s)**",
        ]
        return "| " + " | ".join(cell.replace("|", "/") for cell in cells) + " |"


TABLE_HEADER = (
    "| scenario | acknowledged | done | failed | lost | duplicated | re-run | completed twice | recovery "
    "| faults injected | notes | verdict |\n"
    "|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|---|"
)


@dataclass
class Expect:
    """What a scenario means to happen besides "every acknowledged job ends done"."""

    acked: int
    """The fewest jobs the API must have acknowledged: what the scenario submits that nothing it does may refuse
    (each scenario derives it from its own steps, not from timing). Without it a run whose every submit was
    answered 503 would pass: no job acknowledged, so no promise broken."""
    done: int
    """The fewest of them that must end done (with audio): the scenario exercised the workers, not only the API."""
    failed: dict[str, str] = field(default_factory=dict)
    """Task id → a phrase its failure reason must contain: these, and only these, may fail."""
    dead: set[str] = field(default_factory=set)
    """Ids that must be (the only new) entries of the dead-letter list."""
    lost: set[str] = field(default_factory=set)
    """Ids that may vanish (a Redis restart without persistence); every other id must survive."""


def judge(
    figures: Figures,
    outcomes: dict[str, Outcome],
    reference: dict[Identity, bytes | None],
    expect: Expect,
    new_dead: set[str],
    client: Client,
) -> None:
    """Check the invariant for every acknowledged id, and that the scenario had enough of them to mean something;
    fill ``figures`` (counts and violations)."""
    figures.acked = len(outcomes)
    figures.violations += client.problems
    if figures.acked < expect.acked:
        refused = Counter(refusal.code for refusal in client.refusals)
        answers = ", ".join(f"{n} × {code}" for code, n in sorted(refused.items())) or "none"
        figures.violations.append(
            f"only {figures.acked} job(s) acknowledged, fewer than the {expect.acked} this scenario submits when it runs "
            f"as meant (refused: {answers})"
        )
    for outcome in outcomes.values():
        where = f"{outcome.task_id} ({outcome.request.text!r}, seed {outcome.request.seed})"
        if outcome.attempts > 1:
            figures.reruns += 1
        if outcome.status == "lost":
            figures.lost += 1
            if outcome.task_id not in expect.lost:
                figures.violations.append(f"LOST: acknowledged job {where} no longer exists")
            continue
        if outcome.status == "failed":
            figures.failed += 1
            wanted = expect.failed.get(outcome.task_id)
            if wanted is None:
                figures.violations.append(f"job {where} failed although nothing meant it to: {outcome.error}")
            elif not outcome.error or wanted not in outcome.error:
                figures.violations.append(f"job {where} failed without the expected reason ({wanted!r}): {outcome.error!r}")
            continue
        if outcome.status != "done":
            figures.violations.append(f"job {where} ended {outcome.status!r}, neither done nor failed")
            continue
        figures.done += 1
        if outcome.task_id in expect.failed:
            figures.violations.append(f"job {where} was meant to fail but is done")
        got = samples(outcome.audio, outcome.request.format) if outcome.audio is not None else None
        if got is None:
            figures.violations.append(f"job {where} is done but its audio does not download or decode")
            continue
        if outcome.first_audio is not None and outcome.first_audio != outcome.audio:
            figures.duplicated += 1
            figures.violations.append(f"job {where} returned two different results")
        want = reference.get(outcome.request.identity)
        if want is None:
            figures.violations.append(f"the clean reference run produced no audio for {where}")
        elif got != want:
            figures.violations.append(f"job {where}: audio differs from the clean run's ({audio_difference(got, want)})")
    if figures.done < expect.done:
        figures.violations.append(f"only {figures.done} job(s) done, fewer than the {expect.done} this scenario needs")
    for task_id in expect.failed:
        if task_id not in outcomes:
            figures.violations.append(f"job {task_id} was meant to fail but was never acknowledged")
    if new_dead != expect.dead:
        unexpected, missing = sorted(new_dead - expect.dead), sorted(expect.dead - new_dead)
        figures.violations.append(f"dead-letter list: unexpected {unexpected}, missing {missing}")
