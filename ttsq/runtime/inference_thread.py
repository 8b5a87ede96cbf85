"""The one thread that touches the model: it loads it, then steps the engine's batcher for as long as
there is work and sleeps when there is none.

ChatTTS is not thread-safe and a decode step must not wait on the event loop, so the worker hands
this thread commands (add a request, cancel one, run a chore such as releasing memory) through a
queue and hears back through a callback that it calls with each step's events. Between two steps
the thread takes every command waiting, so a request claimed while others decode joins them at
the next step boundary. A request is built (its voice drawn) and its text prepared (normalised and cut into chunks:
tens of milliseconds a sentence, most of it under the GIL) in a second thread, the preparation thread, so that a new
request never stalls the steps of those already playing; it joins the batcher once prepared, in the order added. While
rows are in flight, :attr:`HeartbeatRecord.current_job` names the
latest step with a deadline, so a hung device shows in the liveness probe; when the engine is
idle nothing is current.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any, TypeVar

from ttsq.domain import context
from ttsq.inference.base import Batcher, BatchEvent, RequestFailed, SynthesisRequest, TransientError
from ttsq.runtime.health import CurrentJob, HeartbeatRecord

__all__ = ["InferenceThread", "StepReport"]

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass(frozen=True)
class StepReport:
    """What one step did, for the worker's metrics and events."""

    events: list[BatchEvent]
    rows: int
    """Rows that ran in the step (0 when only commands were handled)."""
    seconds: float
    broken: BaseException | None = None
    """The batcher itself failed (a bug, not a request's failure): every request in it is lost."""
    beside_s: float = 0.0
    """CPU seconds the batcher's threads beside its loop (audio, prefill) used since the step before
    (:attr:`~ttsq.inference.base.BatcherStats.beside_cpu_s`)."""

    @property
    def cost_s(self) -> float:
        """What the step cost the worker's cores: its own time and the time the threads beside it took meanwhile.
        Their work is the rows' (each row's audio, each new row's prompt), and they compete for the same cores; on a
        machine whose other core is taken too they run in the step's stead. So the stream room is fitted on this
        (:class:`~ttsq.inference.playback.StepCost`), not on the step's time alone."""
        return self.seconds + self.beside_s


@dataclass(frozen=True)
class _Add:
    key: str
    request: Future[SynthesisRequest]
    """Being built and prepared in the preparation thread."""
    alone: bool


@dataclass(frozen=True)
class _Adds:
    """Requests added together (:meth:`InferenceThread.together`): the batcher takes them at one step boundary."""

    adds: list[_Add]


class _Wake:
    """A request's preparation ended: the thread, asleep when idle, takes it."""


@dataclass(frozen=True)
class _Cancel:
    key: str


@dataclass(frozen=True)
class _Call:
    fn: Callable[[], Any]
    done: Future[Any]


class _Stop:
    pass


_Command = _Add | _Adds | _Cancel | _Call | _Stop | _Wake


class InferenceThread:
    """Runs ``setup`` (load, warm, size: it returns the batcher) and then the batcher, in one daemon thread.

    ``report`` is called from this thread after every step, and after commands that produced events or left the
    batcher idle by cancelling (the worker passes a function that hands the report to its event loop, which claims
    again on every report: a cancel that emptied the engine without one would leave a worker that found no room while
    the cancelled rows still waited asleep for good). ``job_timeout_s`` bounds one step: past it the
    liveness record reports the inference hung.
    """

    def __init__(self, report: Callable[[StepReport], None], record: HeartbeatRecord, job_timeout_s: float) -> None:
        self._report = report
        self._record = record
        self._job_timeout_s = job_timeout_s
        self._inbox: queue.SimpleQueue[_Command] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.batcher: Batcher | None = None
        self._freed = False
        """A cancel dropped rows since the last report (read and written in this thread only)."""
        self._prepare = ThreadPoolExecutor(1, thread_name_prefix="ttsq-prepare")
        self._preparing: list[_Add] = []
        """Requests added and not yet in the batcher, in the order added (this thread's own)."""
        self._held: list[_Add] | None = None
        """Requests added inside :meth:`together`, sent as one command at its end (the event loop's own)."""

    def start(self, setup: Callable[[], Batcher]) -> Future[Batcher]:
        """Start the thread; the future completes when ``setup`` has returned the batcher (or failed)."""
        ready: Future[Batcher] = Future()
        self._thread = threading.Thread(target=self._run, args=(setup, ready), name="ttsq-infer", daemon=True)
        self._thread.start()
        return ready

    def add(self, key: str, build: Callable[[], SynthesisRequest], *, alone: bool = False) -> None:
        """Queue a request: ``build`` (which may draw a voice with the model's code) and the batcher's preparation of
        its text run in the preparation thread; the request joins the batcher at a step boundary once both are done."""
        try:
            request = self._prepare.submit(self._built, key, build)
        except RuntimeError:  # stopping: the preparation thread takes no more
            request = Future()
            request.set_exception(TransientError("the worker is stopping"))
        if self._held is not None:
            self._held.append(_Add(key, request, alone))
        else:
            self._inbox.put(_Add(key, request, alone))
        request.add_done_callback(lambda _: self._inbox.put(_Wake()))

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """The requests added (:meth:`add`) inside reach this thread as one command (their preparation starts at once): a
        claim's jobs are then taken at one step boundary, and start in one step, however fast each is prepared."""
        self._held = []
        try:
            yield
        finally:
            held, self._held = self._held, None
            if held:
                self._inbox.put(_Adds(held))

    def _built(self, key: str, build: Callable[[], SynthesisRequest]) -> SynthesisRequest:
        """In the preparation thread: the request, its text prepared by the batcher (:meth:`Batcher.prepared`)."""
        with context.working_on(key):
            request = build()
            return self.batcher.prepared(request) if self.batcher is not None else request

    def cancel(self, key: str) -> None:
        self._inbox.put(_Cancel(key))

    def call(self, fn: Callable[[], T]) -> Future[T]:
        """Run ``fn`` in this thread between two steps."""
        done: Future[T] = Future()
        self._inbox.put(_Call(fn, done))
        return done

    def stop(self) -> None:
        """Let the thread end after its current step; it is a daemon, so a hung step does not hold the process."""
        self._prepare.shutdown(wait=False, cancel_futures=True)
        self._inbox.put(_Stop())

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the thread to end; whether it did."""
        if self._thread is None:
            return True
        self._thread.join(timeout)
        return not self._thread.is_alive()

    # ---- the thread ---------------------------------------------------------------------------

    def _run(self, setup: Callable[[], Batcher], ready: Future[Batcher]) -> None:
        try:
            self.batcher = batcher = setup()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting event loop
            ready.set_exception(exc)
            return
        ready.set_result(batcher)
        while True:
            events: list[BatchEvent] = []
            if not self._take_commands(batcher, events, block=not batcher.busy):
                return
            if not batcher.busy:
                if events or self._freed:
                    self._freed = False
                    self._report(StepReport(events, rows=0, seconds=0.0))
                continue
            before, beside = batcher.stats.row_steps, batcher.stats.beside_cpu_s
            started = time.time()
            self._name_step(batcher.requests(), started)
            broken: BaseException | None = None
            try:
                events += batcher.step()
            except Exception as exc:
                log.exception("the batcher failed outside any request's rows")
                broken = exc
            finally:
                if not batcher.busy:  # while rows remain, the next step names itself at once
                    self._record.current_job = None
            self._freed = False
            rows, seconds = batcher.stats.row_steps - before, time.time() - started
            self._report(StepReport(events, rows, seconds, broken, beside_s=batcher.stats.beside_cpu_s - beside))

    def _name_step(self, keys: list[str], started: float) -> None:
        """A step starts with these requests in the engine: name it, with its deadline, in the liveness record."""
        shown = ", ".join(keys[:3]) + (", …" if len(keys) > 3 else "")
        name = keys[0] if len(keys) == 1 else f"a step of {len(keys)} requests ({shown})"
        self._record.current_job = CurrentJob(name, started, started + self._job_timeout_s, max(1, len(keys)))

    def _take_commands(self, batcher: Batcher, events: list[BatchEvent], *, block: bool) -> bool:
        """Apply every waiting command (waiting for one when idle); False when told to stop."""
        while True:
            try:
                command = self._inbox.get(block=block)
            except queue.Empty:
                if not batcher.busy and not all(add.request.done() for add in self._preparing):
                    # An idle batcher has no rows to stall: it waits for what is being prepared, and takes what came
                    # meanwhile (a claim's other jobs), so that requests claimed together share their first steps.
                    wait([add.request for add in self._preparing])
                    block = False
                    continue
                self._add_prepared(batcher, events)
                return True
            block = False
            if isinstance(command, _Stop):
                return False
            if isinstance(command, _Add):
                self._preparing.append(command)
            elif isinstance(command, _Adds):
                self._preparing += command.adds
            elif isinstance(command, _Cancel):
                # One still being prepared never joins the batcher (its preparation ends unheard).
                self._preparing = [add for add in self._preparing if add.key != command.key]
                batcher.cancel(command.key)
                self._freed = True
            elif isinstance(command, _Wake):
                continue
            else:
                try:
                    command.done.set_result(command.fn())
                except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the call
                    command.done.set_exception(exc)

    def _add_prepared(self, batcher: Batcher, events: list[BatchEvent]) -> None:
        """The requests prepared, into the batcher in the order they were added (one still being prepared holds back
        those added after it); one whose building or preparation failed fails."""
        while self._preparing and self._preparing[0].request.done():
            add = self._preparing.pop(0)
            with context.working_on(add.key):
                try:
                    request = add.request.result()
                except Exception as exc:  # noqa: BLE001 - the request's own failure
                    events.append(RequestFailed(add.key, exc))
                    continue
                events += batcher.add(add.key, request, alone=add.alone)
