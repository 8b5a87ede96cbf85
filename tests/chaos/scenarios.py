"""The chaos scenarios. Each one hurts a running deployment, then checks the invariant for every id it was given.

Every scenario returns its :class:`~tests.chaos.ledger.Figures` (one printed line, one markdown row);
a scenario passes when ``figures.violations`` is empty. Timings are measured and reported as
figures, never asserted: the machine is small and shared, so every wait is on a condition with a
generous timeout, and what is asserted is behaviour (nothing lost, exit codes, who restarted).

:class:`Chaos` is the shared state: one chaos deployment (a pool of plain workers on the default
namespace, ``MAX_ATTEMPTS=20`` so that kills alone never exhaust a job's attempts), the clean
reference deployment, the seeded RNG and the figures so far. Scenarios that need workers with a
fault of their own (poison, crash, hang) run them on a Redis namespace of their own — a separate
queue on the same server, with its own API — so their faults never meet another scenario's jobs.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import signal
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis

from tests.chaos.harness import Api, Deployment, WorkerSlot, background, wait_slowly
from tests.chaos.ledger import (
    FINAL,
    Client,
    Expect,
    Figures,
    Reference,
    Request,
    Requests,
    completions,
    job_records,
    judge,
    samples,
    settle,
)
from tests.support.service import wait_for
from ttsq.domain.audio import decode_to_pcm16
from ttsq.store.keys import Keys

MOMENTS = ("idle", "claiming", "mid-batch", "storing")
"""Where in a worker's loop a SIGKILL is aimed (see :func:`_kill_at`)."""
RAISE_MARK = "Toxicraise"
CRASH_MARK = "Crashmark"
HANG_MARK = "Stallmark"
LATE_MARK = "Latemark"
"""Made-up words that only the poison and hang jobs contain (``FAULT_MATCH``)."""
DISK_FULL_LINE = "No space left on device"
READ_ONLY_LINE = "Read-only file system"


@dataclass(frozen=True)
class Sizes:
    """How hard each scenario pushes. The bounded sizes run in ``make test``; the full ones in ``make chaos``."""

    kills: int
    pool: int
    jobs: int
    """Jobs submitted under each load-driven fault (Redis restart, stall, disks)."""
    outage_s: float
    """How long Redis stays dead before it is restarted."""
    pause_ms: int
    """``CLIENT PAUSE ALL``: longer than LEASE_S (3 s), so leases lapse while Redis is stalled."""
    flood: int
    queue_cap: int
    crash_attempts: int
    settle_s: float
    late_jobs: int
    """Jobs held by the worker that is frozen past its lease (the fault as first reported froze one with eight)."""


BOUNDED = Sizes(
    kills=12, pool=3, jobs=8, outage_s=3.0, pause_ms=5000, flood=150, queue_cap=8, crash_attempts=2, settle_s=300, late_jobs=2
)
FULL = Sizes(
    kills=100, pool=3, jobs=30, outage_s=10.0, pause_ms=8000, flood=1500, queue_cap=20, crash_attempts=3, settle_s=900, late_jobs=8
)
GRACE_S = ("60", "0.2", "60")
"""SHUTDOWN_GRACE_S of the pool's workers: the SIGTERM scenario stops the first (its batch surely finishes
within the grace period) and the second (it surely does not: its jobs are left to the sweep)."""


TENANT_WEIGHTS = (1, 2, 3)
"""The chaos clients' tenants: three API keys with these fair-queuing weights."""


class Chaos:
    """One chaos run's shared state: the deployment, its plain worker pool, the reference, the RNG, the figures."""

    def __init__(self, root: Path, checkpoint: Path, sizes: Sizes, seed: int, say: Callable[[str], None] = print) -> None:
        self.sizes = sizes
        self.seed = seed
        self.say = say
        self.rng = random.Random(seed)
        self.requests = Requests(random.Random(seed + 1))
        self.results: list[Figures] = []
        say(f"[chaos] seed {seed} (replay with CHAOS_SEED={seed} or --seed {seed}); scratch {root}")
        self.deployment = Deployment(root / "chaos", checkpoint, say)
        self.reference = Reference(root / "reference", checkpoint, say)
        self.api = self.deployment.start_api("api", MAX_ATTEMPTS="20")
        self.pool = [self.deployment.add_worker(f"w{n + 1}", SHUTDOWN_GRACE_S=GRACE_S[n % 3]) for n in range(sizes.pool)]
        self._apis: dict[str, Api] = {}
        self._tenant_keys: dict[str, list[str]] = {}
        self.deployment.wait_ready([*self.pool, self.reference.slot])

    def client(self, scenario: str, api: Api | None = None, *, tenants: bool = True) -> Client:
        """A client of ``api`` (the main one by default) whose every acknowledged request is also sent to the reference;
        with ``tenants``, submitting under three API keys weighted 1, 2 and 3 (a quarter of the jobs in the batch lane),
        so the fair queue's round robin and lanes are under every fault too."""
        target = api or self.api
        if not tenants:
            return Client(target.url, scenario, on_ack=self.reference.want)
        if target.namespace not in self._tenant_keys:
            self._tenant_keys[target.namespace] = self.deployment.tenant_keys(target.namespace, TENANT_WEIGHTS)
        return Client(target.url, scenario, on_ack=self.reference.want, tenants=self._tenant_keys[target.namespace])

    def api_for(self, name: str, namespace: str = "ttsq", **env: str) -> Api:
        """An extra API process (its own namespace or limits), started on first use."""
        if name not in self._apis:
            self._apis[name] = self.deployment.start_api(name, namespace, **env)
        return self._apis[name]

    def live_pool(self) -> list[WorkerSlot]:
        return [slot for slot in self.pool if not slot.retired]

    def conclude(
        self,
        figures: Figures,
        client: Client,
        expect: Expect,
        namespace: str = "ttsq",
        dead_before: set[str] | None = None,
        slots: list[WorkerSlot] | None = None,
    ) -> dict[str, Any]:
        """Settle every acknowledged job, judge the invariant, check nothing is left claimed, record the figures."""
        outcomes = settle(self.deployment, client, namespace, self.sizes.settle_s)
        done = [outcome.request for outcome in outcomes.values() if outcome.status == "done"]
        reference = self.reference.samples(done, self.sizes.settle_s)
        new_dead = set(self.deployment.dead_letter_ids(namespace)) - (dead_before or set())
        judge(figures, outcomes, reference, expect, new_dead, client)
        finished = completions(slots if slots is not None else [s for s in self.deployment.slots if s.namespace == namespace])
        figures.twice = sum(1 for task_id in outcomes if finished[task_id] > 1)
        try:
            wait_for(lambda: self.deployment.in_hand(namespace) == (0, 0), 60, "every claim and lease to be released")
        except AssertionError:
            processing, leases = self.deployment.in_hand(namespace)
            figures.violations.append(f"left behind after every job ended: {processing} claimed id(s), {leases} lease(s)")
        client.close()
        return {"outcomes": outcomes, "reference": reference}

    def finish(self, figures: Figures) -> Figures:
        """Record a scenario's figures: its wall time, its printed line (and violations), the table row."""
        figures.wall_s = time.monotonic() - figures.began
        self.say(figures.line())
        for violation in figures.violations:
            self.say(f"[chaos]   ✗ {violation}")
        self.results.append(figures)
        return figures

    def close(self) -> None:
        self.reference.close()
        self.deployment.close()


# ---- helpers -------------------------------------------------------------------------------


def _current_job(slot: WorkerSlot) -> dict[str, Any] | None:
    health = slot.health()
    job = health.get("current_job") if health else None
    return job if isinstance(job, dict) else None


def _wait_idle(slot: WorkerSlot, timeout_s: float = 60) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        health = slot.health()
        if health is not None and health.get("current_job") is None:
            return True
        time.sleep(0.05)
    return False


def _make_busy(chaos: Chaos, client: Client, slot: WorkerSlot, tag: str, burst: int, timeout_s: float = 60) -> bool:
    """Submit ``burst`` jobs, and one more every few seconds, until ``slot`` is running a batch."""
    for _ in range(burst):
        client.submit(chaos.requests.new(tag))
    deadline = time.monotonic() + timeout_s
    next_submit = time.monotonic() + 3
    while time.monotonic() < deadline:
        if not slot.alive():
            return False
        if _current_job(slot) is not None:
            return True
        if time.monotonic() > next_submit:
            client.submit(chaos.requests.new(tag))
            next_submit = time.monotonic() + 3
        time.sleep(0.05)
    return False


@dataclass
class HealthLog:
    """Samples of every worker's /healthz over a scenario, to tell when each one noticed and resumed."""

    slots: list[WorkerSlot]
    samples: dict[str, list[tuple[float, dict[str, Any]]]] = field(default_factory=dict)

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(0.1):
            for slot in self.slots:
                health = slot.health()
                if health is not None:
                    self.samples.setdefault(slot.name, []).append((time.time(), health))

    def jobs_done(self, slot: WorkerSlot, at: float) -> int:
        """The slot's jobs_done as last sampled at or before ``at``."""
        before = [health["jobs_done"] for moment, health in self.samples.get(slot.name, []) if moment <= at]
        return int(before[-1]) if before else 0

    def reconnected_after(self, slot: WorkerSlot, at: float) -> float | None:
        """Seconds after ``at`` when the slot's probe first said Redis is reachable again (after saying it was not)."""
        lost = False
        for moment, health in self.samples.get(slot.name, []):
            lost = lost or health.get("redis") != "ok"
            if moment > at and lost and health.get("redis") == "ok":
                return moment - at
        return None

    def first_completion_after(self, slot: WorkerSlot, at: float) -> float | None:
        """Seconds after ``at`` when the slot was first seen having completed another job."""
        base = self.jobs_done(slot, at)
        for moment, health in self.samples.get(slot.name, []):
            if moment > at and int(health["jobs_done"]) > base:
                return moment - at
        return None


def _steady_load(chaos: Chaos, client: Client, tag: str, interval_s: float) -> Callable[[threading.Event], None]:
    def run(stop: threading.Event) -> None:
        while not stop.wait(interval_s):
            client.submit(chaos.requests.new(tag))

    return run


def _resume(chaos: Chaos, client: Client, slots: list[WorkerSlot], since: float, log: HealthLog, tag: str) -> list[str]:
    """Wait until every slot has completed a job after ``since``, submitting more work while one has not.

    Returns the violation when one never does (its loop did not resume by itself).
    """
    base = {slot.name: log.jobs_done(slot, since) for slot in slots}

    def resumed() -> bool:
        behind = [slot for slot in slots if int((slot.health() or {}).get("jobs_done", -1)) <= base[slot.name]]
        if not behind:
            return True
        client.submit(chaos.requests.new(tag))
        time.sleep(1.0)
        return False

    try:
        wait_for(resumed, chaos.sizes.settle_s, "every worker to complete a job again")
    except AssertionError as exc:
        return [str(exc)]
    return []


def _figure_s(values: list[float]) -> str:
    return "-" if not values else f"{min(values):.1f}–{max(values):.1f}s" if len(values) > 1 else f"{values[0]:.1f}s"


# ---- 1. kill -9 -----------------------------------------------------------------------------


@dataclass(frozen=True)
class KillPlan:
    """One planned SIGKILL, drawn from the seeded RNG up front so a run's plan depends only on the seed."""

    moment: str
    delay_s: float
    burst: int
    pick: int
    """Which of the ready workers (index modulo how many are ready)."""


def kill_plan(rng: random.Random, kills: int) -> list[KillPlan]:
    """``kills`` kills aimed at every moment equally often (one more at the first ones when ``kills`` is not a
    multiple of four), in a seeded random order: even a short run aims at each moment, which random draws
    do not promise."""
    moments = [MOMENTS[n % len(MOMENTS)] for n in range(kills)]
    rng.shuffle(moments)
    return [KillPlan(moment, rng.uniform(0.0, 0.3), rng.randint(1, 3), rng.randrange(1000)) for moment in moments]


def _kill_at(chaos: Chaos, client: Client, slot: WorkerSlot, plan: KillPlan) -> str:
    """SIGKILL ``slot`` at the planned moment; returns where it was observed to be when the signal went out.

    * idle — no batch in hand (it is blocked in BLMOVE), after a random pause;
    * claiming — jobs are submitted to an idle worker and it is killed within ~0–45 ms, as it claims;
    * mid-batch — while it runs a batch (its probe shows a current job), after a random pause;
    * storing — while it writes a batch's outcomes: Redis writes are paused (``CLIENT PAUSE WRITE``)
      while the batch runs, so once inference is done the worker is stuck storing; it is killed
      there, then Redis is unpaused (its unsent writes die with it).
    """
    deployment = chaos.deployment
    if plan.moment in ("idle", "claiming"):
        _wait_idle(slot)
        if plan.moment == "claiming":
            for _ in range(plan.burst):
                client.submit(chaos.requests.new("Kill"))
            time.sleep(plan.delay_s * 0.15)
        else:
            time.sleep(plan.delay_s)
        observed = "busy" if _current_job(slot) is not None else "not running a batch"
        deployment.kill(slot)
        return observed
    busy = _make_busy(chaos, client, slot, "Kill", plan.burst + 1)
    if plan.moment == "mid-batch" or not busy:
        time.sleep(plan.delay_s)
        observed = "busy" if _current_job(slot) is not None else "not running a batch"
        deployment.kill(slot)
        return observed
    health = slot.health() or {}
    batches = int(health.get("batches", 0))
    deployment.pause_redis(2500, "WRITE")
    try:
        storing = False
        deadline = time.monotonic() + 2.2
        while time.monotonic() < deadline:
            health = slot.health() or {}
            if int(health.get("batches", 0)) > batches:
                storing = True
                break
            time.sleep(0.005)
        observed = "storing" if storing else "busy" if _current_job(slot) is not None else "not running a batch"
        deployment.kill(slot)
    finally:
        deployment.unpause_redis()
    return observed


def kill9(chaos: Chaos) -> Figures:
    """Scenario 1: SIGKILL workers again and again at random moments; a supervisor restarts each at once.

    Kills count as attempts, so the main API gives jobs MAX_ATTEMPTS=20: no job may be dead-lettered
    by the kills alone, and every job must end done with the clean run's audio.
    """
    figures = Figures("S1", "kill -9 of workers at random moments")
    pool = chaos.live_pool()
    dead_before = set(chaos.deployment.dead_letter_ids("ttsq"))
    client = chaos.client("S1")
    plan = kill_plan(chaos.rng, chaos.sizes.kills)
    chaos.say(f"[chaos] S1: {len(plan)} kills, seed {chaos.seed}: " + " ".join(f"{p.moment}" for p in plan[:12]) + " …")
    aimed: Counter[str] = Counter()
    observed: Counter[str] = Counter()
    for step in plan:
        wait_slowly(lambda: any(slot.ready() for slot in pool), 600, "a ready worker to kill")
        ready = [slot for slot in pool if slot.ready()]
        slot = ready[step.pick % len(ready)]
        aimed[step.moment] += 1
        observed[_kill_at(chaos, client, slot, step)] += 1
    chaos.deployment.wait_ready(pool, 600)
    restarts = [seconds for slot in pool for seconds in slot.ready_after_s[1:]]
    figures.faults = (
        f"{len(plan)} SIGKILLs aimed at {', '.join(f'{aimed[m]} {m}' for m in MOMENTS)}; "
        f"observed {', '.join(f'{n} {what}' for what, n in observed.most_common())}"
    )
    figures.recovery = f"restart→ready median {statistics.median(restarts):.0f}s" if restarts else "-"
    figures.notes.append(f"seed {chaos.seed}")
    aimed_busy = len(plan) - aimed["idle"]  # every kill but an idle one first submits at least one job of its own
    chaos.conclude(figures, client, Expect(acked=aimed_busy, done=aimed_busy), dead_before=dead_before, slots=pool)
    return chaos.finish(figures)


# ---- 2. SIGTERM mid-batch ---------------------------------------------------------------------


def _held(chaos: Chaos, client: Client, slot: WorkerSlot) -> int:
    """How many of the client's jobs ``slot``'s current process is running (claimed and leased to it)."""
    records = job_records(chaos.deployment, "ttsq", list(client.acks))
    return sum(1 for r in records.values() if r is not None and r.get("status") == "running" and runs_on(r, slot))


HOLD_BURST = 10
"""Jobs :func:`_hold_several` submits at once before it waits for the worker to hold a batch."""


def _hold_several(chaos: Chaos, client: Client, slot: WorkerSlot, timeout_s: float = 120) -> bool:
    """Submit work until ``slot`` is running a batch with more jobs claimed behind it (a batch that takes a while)."""
    for _ in range(HOLD_BURST):
        client.submit(chaos.requests.new("Term"))
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if _current_job(slot) is not None and _held(chaos, client, slot) >= 2:
            return True
        if chaos.deployment.in_hand("ttsq")[0] == 0:
            for _ in range(6):
                client.submit(chaos.requests.new("Term"))
        time.sleep(0.05)
    return False


def sigterm(chaos: Chaos) -> Figures:
    """Scenario 2: SIGTERM two pool workers while each runs a batch (a rolling update).

    The first has a long grace period and should finish its batch; the second has 0.2 s and leaves
    its jobs to the sweep. Either way it must exit 0 and no job may be lost; the third worker
    finishes whatever was requeued.
    """
    figures = Figures("S2", "SIGTERM mid-batch")
    client = chaos.client("S2")
    pool = chaos.live_pool()
    if len(pool) < 2:
        figures.violations.append("the SIGTERM scenario needs two live pool workers and one to remain")
        return chaos.finish(figures)
    stops = []
    for slot in pool[:2]:
        grace = slot.env["SHUTDOWN_GRACE_S"]
        if not _hold_several(chaos, client, slot):
            figures.violations.append(f"worker {slot.name} never took a batch to be stopped in")
        held = _held(chaos, client, slot)
        stop_started = time.monotonic()
        code = chaos.deployment.retire(slot, signal.SIGTERM, timeout_s=float(grace) + 120)
        took = time.monotonic() - stop_started
        log = slot.log_path().read_text(errors="replace")
        left = "grace period over" in log
        outcome = "left it to the sweep" if left else "finished it"
        stops.append(f"{slot.name} (grace {grace}s, {held} jobs in hand): {outcome}, exit {code} in {took:.1f}s")
        if code != 0:
            figures.violations.append(f"worker {slot.name} exited {code} after SIGTERM (expected 0)")
    figures.faults = "; ".join(stops)
    submitted = 2 * HOLD_BURST  # what _hold_several submits first, for each of the two workers
    chaos.conclude(figures, client, Expect(acked=submitted, done=submitted))
    return chaos.finish(figures)


# ---- 3. Redis killed and restarted ------------------------------------------------------------


def redis_restart(chaos: Chaos) -> Figures:
    """Scenario 3: SIGKILL redis-server under load and start it again on its port (append-only file on).

    While it is down the API must answer 503 with Retry-After (never a 500, never a hang); afterwards
    the API and the workers carry on by themselves — the same worker processes, no restart — and every
    acknowledged job completes (the AOF kept them). Recovery times are measured, not asserted.
    """
    figures = Figures("S3", "Redis SIGKILLed and restarted (AOF on)")
    deployment = chaos.deployment
    pool = chaos.live_pool()
    incarnations = {slot.name: slot.incarnation for slot in pool}
    client = chaos.client("S3")
    health = HealthLog(pool)
    interval = max(0.2, 6.0 / chaos.sizes.jobs)
    with background(health.run, "health"):
        with background(_steady_load(chaos, client, "Outage", interval), "load"):
            time.sleep(3)
            killed_at = time.time()
            deployment.kill_redis()
            time.sleep(chaos.sizes.outage_s)
            deployment.restart_redis(persist=True)
            back_at = time.time()
            time.sleep(5)
        figures.violations += _resume(chaos, client, pool, back_at, health, "Outage")
    refused = client.refused(503)
    api_back = [ack.at - back_at for ack in client.acks.values() if ack.at > back_at]
    figures.violations += [f"worker {s.name} was restarted" for s in pool if s.incarnation != incarnations[s.name]]
    workers_back = [seconds for slot in pool if (seconds := health.first_completion_after(slot, back_at)) is not None]
    reconnected = [seconds for slot in pool if (seconds := health.reconnected_after(slot, back_at)) is not None]
    figures.recovery = (
        f"API {min(api_back) if api_back else float('nan'):.1f}s; workers reconnected {_figure_s(reconnected)}, "
        f"first job done {_figure_s(workers_back)} after Redis was back"
    )
    figures.faults = (
        f"down {chaos.sizes.outage_s:.0f}s ({back_at - killed_at:.1f}s with the restart); {refused} submits answered 503"
    )
    figures.notes.append(f"slowest submit answer {client.max_latency_s:.1f}s")
    if refused == 0:
        figures.violations.append("no submit was made while Redis was down: the outage went untested")
    if not any(ack.at < killed_at for ack in client.acks.values()):
        figures.violations.append("no job was acknowledged before Redis was killed: what the AOF keeps went untested")
    # At least that job; the workers each completed one after the restart (_resume), maybe the same one twice.
    chaos.conclude(figures, client, Expect(acked=1, done=1))
    return chaos.finish(figures)


LISTENED_TEXT = " ".join(f"Sentence number {n} is spoken here." for n in range(1, 11))
"""Ten chunks at ``MAX_CHUNK_CHARS=40``: pieces stream before, during and after the outage."""


class _Listener:
    """One client of a task's audio stream (raw PCM) or event stream, read in a thread to its end."""

    def __init__(self, url: str, task_id: str, kind: str) -> None:
        self.task_id, self.kind = task_id, kind
        self.audio = bytearray()
        self.timings: list[int] = []
        self.error: str | None = None
        path = f"/v1/tts/stream/{task_id}?format=pcm" if kind == "audio" else f"/v1/tts/events/{task_id}"
        self.thread = threading.Thread(target=self._read, args=(f"{url}{path}",), daemon=True)
        self.thread.start()

    def _read(self, url: str) -> None:
        try:
            with httpx.stream("GET", url, timeout=60) as response:
                if response.status_code != 200:
                    self.error = f"answered {response.status_code}: {response.read().decode(errors='replace')[:200]}"
                    return
                if self.kind == "audio":
                    for chunk in response.iter_bytes():
                        self.audio += chunk
                    return
                event = ""
                for line in response.iter_lines():
                    if line.startswith("event: "):
                        event = line.removeprefix("event: ")
                    elif line.startswith("data: ") and event == "timing":
                        self.timings.append(int(json.loads(line.removeprefix("data: "))["index"]))
                    elif line.startswith("data: ") and event == "error":
                        self.error = line
        except httpx.HTTPError as exc:
            self.error = f"{type(exc).__name__}: {exc}"


def listeners_through_redis_restart(chaos: Chaos) -> Figures:
    """Scenario 3d: audio and event streams are open on running tasks while redis-server is SIGKILLed and restarted
    (append-only file on), for less than ``LISTEN_OUTAGE_S``.

    The API's one stream listener must ride it out: every listener ends with every piece its task's stream holds,
    exactly once and in order (the audio equals the stream's pieces joined, by index), and every event listener
    has one ``timing`` event per piece, none twice. A piece a worker could not publish while Redis was down is not
    in the stream (streaming is best effort; the stored result has it): what is judged is the listener, against
    the stream as Redis has it at the end.
    """
    figures = Figures("S3d", "listeners through a Redis SIGKILL and restart")
    deployment = chaos.deployment
    client = chaos.client("S3d", tenants=False)
    requests = [Request(LISTENED_TEXT, seed=7_000 + n) for n in range(max(2, chaos.sizes.jobs // 2))]
    pool = chaos.live_pool()
    for slot in pool:  # the jobs wait while every listener subscribes: none may end before Redis goes
        deployment.kill(slot, signal.SIGSTOP)
    try:
        acks = [ack for request in requests if (ack := client.submit(request)) is not None]
        listeners = [_Listener(chaos.api.url, ack.task_id, kind) for ack in acks for kind in ("audio", "events")]
        subscribed = f"ttsq_listener_subscriptions {float(len(listeners))}"
        wait_slowly(
            lambda: subscribed in httpx.get(f"{chaos.api.url}/metrics", timeout=5).text
            or any(listener.error for listener in listeners),
            60,
            "every listener subscribed",
        )
        refused = [f"{listener.kind} listener of {listener.task_id}: {listener.error}" for listener in listeners if listener.error]
        assert not refused, f"listeners could not open: {refused}"
    finally:
        for slot in pool:
            deployment.kill(slot, signal.SIGCONT)
    wait_slowly(lambda: any(listener.audio for listener in listeners), 60, "the first piece heard")
    deployment.kill_redis()
    time.sleep(min(chaos.sizes.outage_s, 5.0))
    deployment.restart_redis(persist=True)
    for listener in listeners:
        listener.thread.join(chaos.sizes.settle_s)
    keys = Keys("ttsq")
    with deployment.client() as redis_client:
        for listener in listeners:
            if listener.thread.is_alive():
                figures.violations.append(f"{listener.kind} listener of {listener.task_id} never ended")
                continue
            if listener.error is not None:
                figures.violations.append(f"{listener.kind} listener of {listener.task_id} ended with {listener.error}")
            entries: Any = redis_client.xrange(keys.stream(listener.task_id))
            pieces: dict[int, bytes] = {}
            for _entry_id, fields in entries:
                if b"pcm" in fields:
                    pieces.setdefault(int(fields[b"index"]), fields[b"pcm"])
            if listener.kind == "audio" and bytes(listener.audio) not in (
                b"".join(pieces[i] for i in sorted(pieces)),  # the stream as Redis has it at the end
                decode_to_pcm16(httpx.get(f"{chaos.api.url}/v1/tts/result/{listener.task_id}", timeout=30).content),
            ):  # or the whole result: an attempt re-run after its lease lapsed leaves only its own pieces in the stream
                figures.violations.append(f"the audio listener of {listener.task_id} lost or repeated a piece")
            if listener.kind == "events" and pieces and listener.timings != sorted(set(listener.timings) | set(pieces)):
                figures.violations.append(f"the event listener of {listener.task_id} had timings {listener.timings}")
    figures.faults = f"{len(listeners)} listeners open on {len(acks)} tasks; Redis down {min(chaos.sizes.outage_s, 5.0):.0f}s"
    chaos.conclude(figures, client, Expect(acked=len(requests), done=len(requests)))
    return chaos.finish(figures)


def _job_snapshot(deployment: Deployment, namespace: str) -> dict[str, str]:
    """Every job in the namespace and its status, read straight from Redis (SCAN)."""
    keys = Keys(namespace)
    snapshot: dict[str, str] = {}
    with deployment.client() as client:
        found = [key.decode() for key in client.scan_iter(match=f"{keys.job_prefix}*", count=1000)]
    ids = [key.removeprefix(keys.job_prefix) for key in found]
    for task_id, record in job_records(deployment, namespace, ids).items():
        if record is not None:
            snapshot[task_id] = str(record.get("status"))
    return snapshot


def redis_restart_without_persistence(chaos: Chaos) -> Figures:
    """Scenario 3b: the same restart with persistence off, to measure exactly what is lost.

    Writes are paused a moment before the kill so the harness can read what Redis holds (reads still
    work): the jobs acknowledged before the restart are exactly those in that snapshot, and the
    invariant of this scenario is that the acknowledged ids that vanish are exactly those — the ones
    not yet finished, plus finished ones whose audio the client had not yet downloaded — while every
    job acknowledged after the restart completes. A client keeps downloading results as they finish.
    """
    figures = Figures("S3b", "Redis restarted without persistence")
    deployment = chaos.deployment
    with deployment.client() as admin:
        admin.config_set("appendonly", "no")
    client = chaos.client("S3b", tenants=False)  # Redis comes back empty: the tenants' keys would be gone
    delivered: dict[str, bytes] = {}

    def download(stop: threading.Event) -> None:
        while not stop.wait(0.2):
            waiting = [task_id for task_id in list(client.acks) if task_id not in delivered]
            with contextlib.suppress(redis.RedisError, OSError):
                for task_id, record in job_records(deployment, "ttsq", waiting).items():
                    if record is not None and record.get("status") == "done":
                        audio = client.result(task_id)
                        if audio is not None:
                            delivered[task_id] = audio

    interval = max(0.2, 6.0 / chaos.sizes.jobs)
    with background(download, "download"), background(_steady_load(chaos, client, "Volatile", interval), "load"):
        time.sleep(4)
        deployment.pause_redis(10_000, "WRITE")
        snapshot = _job_snapshot(deployment, "ttsq")
        delivered_before = set(delivered)
        killed_at = time.time()
        deployment.kill_redis()
        deployment.restart_redis(persist=False)
        time.sleep(5)
    with deployment.client() as admin:
        admin.config_set("appendonly", "yes")
    deployment.redis.persist = True
    before = {task_id for task_id in client.acks if task_id in snapshot}
    unfinished = {task_id for task_id in before if snapshot[task_id] not in FINAL}
    undelivered = {task_id for task_id in before if snapshot[task_id] in FINAL and task_id not in delivered_before}
    unknown = {task_id for task_id, ack in client.acks.items() if ack.at < killed_at and task_id not in snapshot}
    for task_id in sorted(unknown):
        figures.violations.append(f"{task_id} was acknowledged before the kill but Redis did not hold it")
    if not before:
        figures.violations.append("no job was acknowledged before the restart: what it loses went unmeasured")
    if not any(ack.at > killed_at for ack in client.acks.values()):
        figures.violations.append("no job was acknowledged after the restart")
    # One before the restart (it may be lost) and one after it (it must be done).
    result = chaos.conclude(figures, client, Expect(acked=2, done=1, lost=before))
    vanished = {task_id for task_id, outcome in result["outcomes"].items() if outcome.status == "lost"}
    after_lost = vanished - before
    if after_lost:
        figures.violations.append(f"{len(after_lost)} job(s) acknowledged after the restart vanished")
    lost = vanished - delivered_before
    if lost != unfinished | undelivered:
        figures.violations.append(
            f"losses are not exactly the unfinished and undelivered jobs: lost {len(lost)}, "
            f"expected {len(unfinished | undelivered)} (differ by {sorted(lost ^ (unfinished | undelivered))[:5]})"
        )
    for task_id in sorted(delivered_before):
        request = client.acks[task_id].request
        got = samples(delivered[task_id], request.format)
        want = chaos.reference.samples([request], chaos.sizes.settle_s)[request.identity]
        if got is None or got != want:
            figures.violations.append(f"{task_id}: audio downloaded before the restart differs from the clean run's")
    figures.lost = len(lost)
    figures.faults = f"writes paused, snapshot of {len(snapshot)} jobs, SIGKILL, restart with no AOF"
    figures.notes += [
        f"LOST {len(unfinished)} acknowledged but unfinished",
        f"{len(undelivered)} finished but not yet downloaded (results lost)",
        f"{len(delivered_before)} delivered before the restart",
        f"{len(client.acks) - len(before)} acknowledged after it (all must be done)",
    ]
    chaos.say(f"[chaos] S3b: lost={len(lost)} (unfinished {len(unfinished)}, results not yet downloaded {len(undelivered)})")
    return chaos.finish(figures)


def replicas_after_data_loss(chaos: Chaos) -> Figures:
    """Scenario 3c: after Redis lost its data (restarted without persistence), an API replica started afterwards
    must still read the tasks the older replica acknowledges, and the other way round: both sign task ids, and
    with TASK_ID_SECRET unset they share a random secret kept in Redis — which the restart has just lost."""
    figures = Figures("S3c", "API replicas after Redis lost its data")
    deployment = chaos.deployment
    with deployment.client() as admin:
        admin.config_set("appendonly", "no")
    deployment.kill_redis()
    deployment.restart_redis(persist=False)
    with deployment.client() as admin:
        admin.config_set("appendonly", "yes")
    deployment.redis.persist = True
    late = chaos.api_for("api-late-replica")
    client = chaos.client("S3c", tenants=False)  # Redis comes back empty: the tenants' keys would be gone
    late_client = chaos.client("S3c-late", late, tenants=False)
    old_ack = client.submit(chaos.requests.new("Replica"))
    new_ack = late_client.submit(chaos.requests.new("Replica"))
    for ack, reader, writer in ((old_ack, late_client, "older"), (new_ack, client, "later")):
        if ack is None:
            figures.violations.append(f"the {writer} replica refused a submit")
        elif reader.status(ack.task_id) is None:
            figures.violations.append(
                f"task {ack.task_id}, acknowledged by the {writer} replica, is 404 on the other: the replicas sign task ids "
                "with different secrets since Redis lost the shared one"
            )
    figures.faults = "a replica started after the data loss; each reads the other's task"
    chaos.conclude(figures, client, Expect(acked=1, done=1))  # the older replica's job (the later one's is its own client's)
    late_client.close()
    return chaos.finish(figures)


# ---- 4. Redis stalled ----------------------------------------------------------------------------


def redis_stall(chaos: Chaos) -> Figures:
    """Scenario 4: ``CLIENT PAUSE <ms> ALL`` longer than LEASE_S, under load.

    No lease can be renewed while Redis is stalled, so when it resumes the sweep may requeue jobs whose
    workers are still running them: a job may then be computed twice, but it must never end with two
    different results; nothing may be left leased or claimed, and every worker loop must resume by itself.
    """
    figures = Figures("S4", "Redis stalled past the lease (CLIENT PAUSE ALL)")
    pool = chaos.live_pool()
    incarnations = {slot.name: slot.incarnation for slot in pool}
    client = chaos.client("S4")
    health = HealthLog(pool)
    interval = max(0.2, 6.0 / chaos.sizes.jobs)
    with background(health.run, "health"):
        with background(_steady_load(chaos, client, "Stall", interval), "load"):
            time.sleep(3)
            paused_at = time.time()
            chaos.deployment.pause_redis(chaos.sizes.pause_ms, "ALL")
            resumed_at = time.time() + chaos.sizes.pause_ms / 1000
            time.sleep(chaos.sizes.pause_ms / 1000 + 4)
        figures.violations += _resume(chaos, client, pool, resumed_at, health, "Stall")
    figures.violations += [f"worker {s.name} was restarted" for s in pool if s.incarnation != incarnations[s.name]]
    back = [seconds for slot in pool if (seconds := health.first_completion_after(slot, resumed_at)) is not None]
    reconnected = [seconds for slot in pool if (seconds := health.reconnected_after(slot, resumed_at)) is not None]
    figures.recovery = f"workers reconnected {_figure_s(reconnected)}, first job done {_figure_s(back)} after the pause"
    figures.faults = f"CLIENT PAUSE {chaos.sizes.pause_ms} ALL (LEASE_S=3); {client.refused(503)} submits answered 503"
    figures.notes.append(f"slowest submit answer {client.max_latency_s:.1f}s")
    if not any(ack.at < paused_at for ack in client.acks.values()):
        figures.violations.append("no job was acknowledged before Redis stalled: no lease could lapse")
    chaos.conclude(figures, client, Expect(acked=1, done=1))  # as in S3: that job, and the workers' jobs after the pause
    return chaos.finish(figures)


# ---- 5. poison jobs ------------------------------------------------------------------------------


BESIDE, AFTER = 4, 2
"""Jobs submitted right after the poison job, and once it has ended (scenario 5a)."""


def poison_raise(chaos: Chaos) -> Figures:
    """Scenario 5a: a job whose inference always raises is dead-lettered after MAX_ATTEMPTS with its reason;
    the jobs around it finish at their first attempt and the worker keeps serving (no restart)."""
    figures = Figures("S5a", "poison job that always raises")
    namespace = "raise"
    api = chaos.api_for("api-raise", namespace, MAX_ATTEMPTS="3")
    slot = chaos.deployment.add_worker("raise", namespace, FAULT_MODE="raise", FAULT_MATCH=RAISE_MARK, MAX_BATCH="8")
    try:
        chaos.deployment.wait_ready([slot])
        client = chaos.client("S5a", api)
        dead_before = set(chaos.deployment.dead_letter_ids(namespace))
        poison = client.submit(chaos.requests.new("Poison", marker=RAISE_MARK))
        others = [client.submit(chaos.requests.new("Beside")) for _ in range(BESIDE)]
        if poison is None:
            figures.violations.append("the poison job was not acknowledged")
            return chaos.finish(figures)
        wait_for(
            lambda: (client.status(poison.task_id) or {}).get("status") in FINAL, chaos.sizes.settle_s, "the poison job to end"
        )
        after = [client.submit(chaos.requests.new("After")) for _ in range(AFTER)]
        innocent = BESIDE + AFTER
        expect = Expect(acked=1 + innocent, done=innocent, failed={poison.task_id: "injected fault"}, dead={poison.task_id})
        result = chaos.conclude(figures, client, expect, namespace, dead_before, [slot])
        for ack in [*others, *after]:
            outcome = result["outcomes"].get(ack.task_id) if ack is not None else None
            if outcome is not None and outcome.attempts != 1:
                figures.violations.append(f"{ack.task_id if ack else '?'} beside the poison job took {outcome.attempts} attempts")
        if slot.incarnation != 1 or not slot.alive():
            figures.violations.append("the worker did not keep serving: it was restarted or died")
        reason = result["outcomes"][poison.task_id].error
        figures.faults = f"FAULT_MODE=raise on one job, MAX_ATTEMPTS=3; reason: {reason}"
    finally:
        chaos.deployment.retire(slot)
    return chaos.finish(figures)


def poison_crash(chaos: Chaos) -> Figures:
    """Scenario 5b: a job that SIGKILLs its worker every time, inside a batch of 8 — poison isolation.

    Eight compatible jobs (one voice) are queued before the worker starts, so its first claim takes all
    eight as one batch, and the crash takes all eight down. A supervisor restarts the worker each time.
    Jobs that come back from a dead worker must run their last attempt alone, so the seven innocent jobs
    end done (with the audio they have when run alone, or in company before that) and only the poison job
    is dead-lettered, after MAX_ATTEMPTS, with its reason.
    """
    figures = Figures("S5b", "job that crashes its worker, in a batch of 8")
    namespace = "crash"
    attempts = chaos.sizes.crash_attempts
    api = chaos.api_for("api-crash", namespace, MAX_ATTEMPTS=str(attempts))
    client = chaos.client("S5b", api)
    dead_before = set(chaos.deployment.dead_letter_ids(namespace))
    batch = [chaos.requests.new("Batch", voice="zh_female", two_chunks=False) for _ in range(7)]
    poison_request = chaos.requests.new("Batch", marker=CRASH_MARK, voice="zh_female", two_chunks=False)
    batch.insert(chaos.rng.randrange(8), poison_request)
    acks = [client.submit(request) for request in batch]
    poison = next((ack for ack in acks if ack is not None and ack.request == poison_request), None)
    # Prefilled in the loop, not beside it: every row the worker claimed together is admitted before the first step,
    # so the poison's first step holds its batch-mates wherever it stands among them. Prefilled beside the loop, a
    # poison that was first in line could be admitted and stepped alone before the others were ready (one CI run in a
    # few: then the scenario does not test isolation).
    slot = chaos.deployment.add_worker(
        "crash",
        namespace,
        FAULT_MODE="crash",
        FAULT_MATCH=CRASH_MARK,
        MAX_BATCH="8",
        BATCH_WAIT_MS="200",
        OVERLAP_PREFILL_AND_AUDIO="false",
    )
    try:
        if poison is None or any(ack is None for ack in acks):
            figures.violations.append("the batch was not acknowledged")
            return chaos.finish(figures)
        wait_for(
            lambda: (client.status(poison.task_id) or {}).get("status") in FINAL, chaos.sizes.settle_s, "the poison job to end"
        )
        chaos.deployment.wait_ready([slot])
        after = client.submit(chaos.requests.new("After"))
        first_log = slot.log_path(1).read_text(errors="replace")
        # The decoder crashes in the first step the poison is in; all eight are in hand and admitted together, so that
        # step holds two or more of them.
        shared = re.search(r"on a matching batch of (\d+)", first_log)
        if shared is None or int(shared.group(1)) < 2:
            figures.violations.append("the first crash did not share a step with batch-mates: the scenario did not test isolation")
        crashes = sum(1 for exit_ in slot.exits if exit_.returncode == -signal.SIGKILL)
        innocent = len(batch)  # the poison job's seven batch mates, and the job submitted after it ended
        expect = Expect(acked=1 + innocent, done=innocent, failed={poison.task_id: "gave up after"}, dead={poison.task_id})
        result = chaos.conclude(figures, client, expect, namespace, dead_before, [slot])
        if after is None or result["outcomes"][after.task_id].status != "done":
            figures.violations.append("the restarted worker did not keep serving")
        figures.faults = f"FAULT_MODE=crash on 1 of 8 batched jobs, MAX_ATTEMPTS={attempts}; {crashes} crashes, each restarted"
        figures.notes.append(f"reason: {result['outcomes'][poison.task_id].error}")
        figures.notes.append("needs poison isolation (a lost worker's jobs run their last attempt alone)")
    finally:
        chaos.deployment.retire(slot)
    return chaos.finish(figures)


# ---- 6. hung inference ---------------------------------------------------------------------------


def hung_inference(chaos: Chaos) -> Figures:
    """Scenario 6: an inference that never returns. The worker's /healthz must turn 503 once JOB_TIMEOUT_S is
    past; the harness then stops it (SIGTERM, SIGKILL if needed) and starts a new one, as Kubernetes would
    on a failed liveness probe, and the job is recovered from its lapsed lease and finishes."""
    figures = Figures("S6", "hung inference")
    namespace = "hang"
    api = chaos.api_for("api-hang", namespace)
    slot = chaos.deployment.add_worker(
        "hang", namespace, supervised=False, FAULT_MODE="hang", FAULT_MATCH=HANG_MARK, JOB_TIMEOUT_S="2", SHUTDOWN_GRACE_S="1"
    )
    try:
        chaos.deployment.wait_ready([slot])
        client = chaos.client("S6", api)
        hung = client.submit(chaos.requests.new("Hung", marker=HANG_MARK))
        wait_for(lambda: _current_job(slot) is not None, 120, "the hung job to start")
        job = _current_job(slot) or {}
        wait_for(lambda: (slot.health() or {}).get("http_status") == 503, 120, "liveness to fail")
        detected = time.time() - float(job.get("started_at", time.time()))
        reason = str((slot.health() or {}).get("reason", ""))
        if "hung" not in reason:
            figures.violations.append(f"liveness failed without saying the inference is hung: {reason!r}")
        killed_at = time.time()
        code = chaos.deployment.retire(slot, signal.SIGTERM, timeout_s=30)
        chaos.deployment.restart(slot, FAULT_MODE="none")
        chaos.deployment.wait_ready([slot])
        if (slot.health() or {}).get("http_status") != 200:
            figures.violations.append("the new worker is not live")
        after = client.submit(chaos.requests.new("After"))
        result = chaos.conclude(figures, client, Expect(acked=2, done=2), namespace, slots=[slot])  # the hung job, the one after
        if hung is not None:
            outcome = result["outcomes"][hung.task_id]
            figures.recovery = f"liveness 503 {detected:.1f}s into the job (JOB_TIMEOUT_S=2); done at attempt {outcome.attempts}"
        figures.faults = f"FAULT_MODE=hang; stopped with SIGTERM (exit {code}) {time.time() - killed_at:.0f}s before the end"
        if after is None:
            figures.violations.append("the new worker's API refused a job")
    finally:
        chaos.deployment.retire(slot)
    return chaos.finish(figures)


# ---- 9. a late worker ----------------------------------------------------------------------------

_REFUSED = re.compile(r"⊘ (\S+) attempt \d+: (\w+) refused, claim \d+ is stale")
_DROPPED = re.compile(r"⊘ (\S+) had already ended: this attempt's result is dropped")
_TAKEN_BACK = re.compile(r"⊘ (\S+): dropped, claim \d+ was taken back")


def runs_on(record: dict[str, Any], slot: WorkerSlot) -> bool:
    """Whether a job record names ``slot``'s current process as its worker (``WORKER_ID~suffix``: one identity in the
    queue per process)."""
    return str(record.get("worker") or "").split("~", 1)[0] == slot.worker_id


def refusals(slot: WorkerSlot) -> Counter[str]:
    """What the queue refused ``slot`` for a stale claim, by kind (renew, stream, completion, failure), from its logs."""
    refused: Counter[str] = Counter()
    for path in slot.all_logs():
        if path.exists():
            refused.update(kind for _task, kind in _REFUSED.findall(path.read_text(errors="replace")))
    text = "".join(path.read_text(errors="replace") for path in slot.all_logs() if path.exists())
    refused["renew"] += text.count("was lost: it lapsed and the job went back to the queue")
    return refused


def refused_ids(slot: WorkerSlot, kind: str) -> set[str]:
    """The task ids whose ``kind`` of write (renew, stream, completion, failure) the queue refused ``slot`` as stale."""
    text = "".join(path.read_text(errors="replace") for path in slot.all_logs() if path.exists())
    return {task for task, refused in _REFUSED.findall(text) if refused == kind}


def not_applied_ids(slot: WorkerSlot) -> set[str]:
    """The task ids whose completion by ``slot`` the queue did not apply: refused as stale (the job is another's now),
    dropped because the job had ended meanwhile (another worker completed it first), or dropped unfinished because its
    heartbeat told it the sweep had taken the claim back."""
    text = "".join(path.read_text(errors="replace") for path in slot.all_logs() if path.exists())
    return refused_ids(slot, "completion") | set(_DROPPED.findall(text)) | set(_TAKEN_BACK.findall(text))


def late_worker(chaos: Chaos) -> Figures:
    """Scenario 9 (fencing tokens): a worker frozen by SIGSTOP past its lease while it runs jobs. The sweep requeues
    them and a second worker takes them; when the frozen one is woken (SIGCONT) and finishes its inference,
    everything it sends for a job another worker now holds carries a stale fencing token and is refused — its
    renewals, its audio, its completions — so the new owner's leases and results are untouched: every job is
    done exactly once, with the clean run's audio.

    The requeued jobs' last worker was lost, so each runs alone and the second worker holds one at a time; a
    job still queued when the frozen worker wakes may be claimed by it again, and then it is done under that
    new claim (its synthesis in hand goes on, or its stale outcome is refused and it runs afresh) — also once.
    Both workers hold each job in an injected hang (``FAULT_MODE=hang``), so the order is certain rather than
    raced: the frozen worker's hang (8 s) is long over when it wakes, the second's (15 s per job) is not."""
    figures = Figures("S9", "late worker (SIGSTOP past its lease)")
    namespace = "late"
    api = chaos.api_for("api-late", namespace)
    hang = {"FAULT_MODE": "hang", "FAULT_MATCH": LATE_MARK}
    frozen = chaos.deployment.add_worker("late-a", namespace, supervised=False, FAULT_HANG_S="8", **hang)
    taker: WorkerSlot | None = None
    try:
        chaos.deployment.wait_ready([frozen])
        client = chaos.client("S9", api)
        acks = [client.submit(chaos.requests.new("Late", marker=LATE_MARK)) for _ in range(chaos.sizes.late_jobs)]
        ids = [ack.task_id for ack in acks if ack is not None]

        def held_by(slot: WorkerSlot) -> list[str]:
            records = job_records(chaos.deployment, namespace, ids)
            return [i for i, r in records.items() if r and r.get("status") == "running" and runs_on(r, slot)]

        wait_for(lambda: len(held_by(frozen)) == len(ids), 120, "the first worker to run every job")
        chaos.deployment.kill(frozen, signal.SIGSTOP)
        frozen_at = time.monotonic()
        taker = chaos.deployment.add_worker("late-b", namespace, supervised=False, FAULT_HANG_S="15", **hang)
        chaos.deployment.wait_ready([taker])
        wait_for(lambda: bool(held_by(taker)), 120, "the second worker to take a requeued job")
        taken = set(held_by(taker))
        chaos.deployment.kill(frozen, signal.SIGCONT)
        frozen_s = time.monotonic() - frozen_at
        # Refused while the second worker still holds the job, or dropped if it finished first (a loaded machine may
        # stretch the frozen worker's hang past the second's): either way not applied.
        wait_for(lambda: taken <= not_applied_ids(frozen), 120, "the woken worker's completions to be refused")
        late = chaos.sizes.late_jobs
        chaos.conclude(figures, client, Expect(acked=late, done=late), namespace, slots=[frozen, taker])
        refused = refusals(frozen)
        applied = set(completions([frozen])) & taken
        if applied:
            figures.violations.append(f"the woken worker's stale completions were applied: {sorted(applied)}")
        twice = {task: n for task, n in completions([frozen, taker]).items() if n > 1}
        if twice:
            figures.violations.append(f"completed more than once: {twice}")
        lost_by_taker = refusals(taker)
        if sum(lost_by_taker.values()):
            figures.violations.append(f"the second worker lost a lease or a write to the woken one: {dict(lost_by_taker)}")
        again = len(set(completions([frozen])))
        figures.recovery = f"frozen {frozen_s:.0f}s (LEASE_S=3); every job done once ({again} by the woken worker, claimed again)"
        figures.faults = (
            f"SIGSTOP/SIGCONT of a worker holding {len(ids)} job(s); refused from it: "
            + ", ".join(f"{count} {kind}" for kind, count in sorted(refused.items()) if count)
        )
    finally:
        with contextlib.suppress(ProcessLookupError):
            chaos.deployment.kill(frozen, signal.SIGCONT)
        chaos.deployment.retire(frozen)
        if taker is not None:
            chaos.deployment.retire(taker)
    return chaos.finish(figures)


# ---- 7. flood ------------------------------------------------------------------------------------


def flood(chaos: Chaos) -> Figures:
    """Scenario 7: many submits at once against a small MAX_QUEUE_DEPTH, the workers frozen meanwhile.

    Past the cap the API must answer 429 with Retry-After (and say the queue is full); nothing it
    acknowledged may be lost. The API's RSS and Redis's used_memory before and after are figures.
    """
    figures = Figures("S7", "flood past MAX_QUEUE_DEPTH")
    api = chaos.api_for("api-flood", MAX_QUEUE_DEPTH=str(chaos.sizes.queue_cap), MAX_ATTEMPTS="20")
    client = chaos.client("S7", api)
    rss_before, memory_before = api.rss_bytes(), chaos.deployment.used_memory()
    per_thread = chaos.sizes.flood // 4
    requests = [[chaos.requests.new("Flood") for _ in range(per_thread)] for _ in range(4)]

    def submit_all(batch: list[Request]) -> Callable[[threading.Event], None]:
        def run(_: threading.Event) -> None:
            for request in batch:
                client.submit(request)

        return run

    # The workers are frozen while the flood comes, so that the queue fills whatever their speed (a tiny worker drains
    # four submitting threads faster than they submit); they take up what was acknowledged once woken.
    pool = chaos.live_pool()
    for slot in pool:
        chaos.deployment.kill(slot, signal.SIGSTOP)
    try:
        with contextlib.ExitStack() as stack:
            for n, batch in enumerate(requests):
                stack.enter_context(background(submit_all(batch), f"flood-{n}"))
        rss_after, memory_after = api.rss_bytes(), chaos.deployment.used_memory()
    finally:
        for slot in pool:
            chaos.deployment.kill(slot, signal.SIGCONT)
    full = client.refused(429)
    other = [refusal for refusal in client.refusals if refusal.code == 429 and "queue is full" not in refusal.detail]
    if full == 0:
        figures.violations.append("no submit was refused: the queue cap was never reached")
    if other:
        figures.violations.append(f"{len(other)} 429s for another reason than the full queue: {other[0].detail}")
    # A "queue is full" answer means the queue held MAX_QUEUE_DEPTH of this flood's jobs: at least that many were acknowledged.
    chaos.conclude(figures, client, Expect(acked=chaos.sizes.queue_cap, done=chaos.sizes.queue_cap))
    memory_settled = chaos.deployment.used_memory()
    mb = 1024 * 1024
    figures.faults = f"{per_thread * 4} submits from 4 threads, MAX_QUEUE_DEPTH={chaos.sizes.queue_cap}: {full} × 429"
    figures.notes += [
        f"API RSS {rss_before / mb:.0f}→{rss_after / mb:.0f} MB",
        f"Redis used_memory {memory_before / mb:.1f}→{memory_after / mb:.1f}→{memory_settled / mb:.1f} MB (before→flood→settled)",
    ]
    return chaos.finish(figures)


# ---- 8. disk full / read-only ----------------------------------------------------------------------


@contextlib.contextmanager
def _broken_disks(deployment: Deployment, full: Path, read_only: Path) -> Iterator[None]:
    try:
        deployment.mount_tmpfs(full)
        deployment.fill(full)
        deployment.mount_tmpfs(read_only)
        deployment.remount_read_only(read_only)
        yield
    finally:
        deployment.unmount_all()


def can_mount() -> bool:
    """Whether this process may mount a tmpfs (it runs as root): the disk scenario needs it."""
    return os.geteuid() == 0


def disks(chaos: Chaos) -> Figures:
    """Scenario 8: one worker's L3 cache directory is a full 64 KiB tmpfs, another's is read-only.

    The cache is the only file a running worker writes (its logs go to stdout; temporary files are
    written only while torch and ChatTTS are imported at start-up). Requests must not fail: the worker
    turns L3 off with one clear log line and goes on; nothing is lost.
    """
    figures = Figures("S8", "L3 cache disk full / read-only")
    pool = chaos.live_pool()
    full_slot, read_only_slot = pool[0], pool[1]
    client = chaos.client("S8")
    lines: dict[str, str] = {}

    def logged(slot: WorkerSlot, phrase: str) -> bool:
        for line in slot.log_path().read_text(errors="replace").splitlines():
            if "disk cache" in line and "unusable" in line and phrase in line:
                lines[slot.name] = line.split("WARNING", 1)[-1].strip()
                return True
        return False

    with _broken_disks(chaos.deployment, Path(full_slot.env["CACHE_DIR"]), Path(read_only_slot.env["CACHE_DIR"])):

        def both_logged() -> bool:
            if logged(full_slot, DISK_FULL_LINE) and logged(read_only_slot, READ_ONLY_LINE):
                return True
            client.submit(chaos.requests.new("Disk"))
            time.sleep(1.0)
            return False

        for _ in range(chaos.sizes.jobs):
            client.submit(chaos.requests.new("Disk"))
        try:
            wait_for(both_logged, chaos.sizes.settle_s, "both workers to report their broken cache directory")
        except AssertionError as exc:
            figures.violations.append(f"{exc}: {lines}")
        chaos.conclude(figures, client, Expect(acked=chaos.sizes.jobs, done=chaos.sizes.jobs))
    figures.faults = f"{full_slot.name}: CACHE_DIR on a full 64 KiB tmpfs; {read_only_slot.name}: read-only tmpfs"
    figures.notes += [f"{name}: “{line}”" for name, line in sorted(lines.items())]
    return chaos.finish(figures)


SCENARIOS: dict[str, Callable[[Chaos], Figures]] = {
    "S1": kill9,
    "S4": redis_stall,
    "S3": redis_restart,
    "S3d": listeners_through_redis_restart,
    "S8": disks,
    "S7": flood,
    "S5a": poison_raise,
    "S5b": poison_crash,
    "S6": hung_inference,
    "S9": late_worker,
    "S2": sigterm,
    "S3b": redis_restart_without_persistence,
    "S3c": replicas_after_data_loss,
}
"""Every scenario, in the order a run takes them: those that need the whole pool first, the SIGTERM
scenario (which stops two of its workers) late, and the restart without persistence (which wipes
Redis) and its follow-up last."""
