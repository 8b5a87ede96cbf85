"""Continuous batching: requests in, chunks of audio out, one decode step at a time.

A step is three named parts: :meth:`Scheduler._schedule` (who takes a free slot), then for each decoder with rows
:meth:`Scheduler._run_gpt` (every row one token) and :meth:`Scheduler._hand_out` (what ended goes on: a refined text
to its code row, codes to audio, a row's new states to its pieces).

A request is split into sentence chunks; each chunk is a *row*. Rows wait in one queue and are
admitted into the decoder's free slots at every step boundary, whatever their voice, parameters
or request; a row leaves the moment it ends and its slot takes the next waiting row (with none
waiting, the rows above the free slot move down into it, so a step covers only its rows). Waiting rows
are served in :mod:`~ttsq.inference.sched.waiting`'s order. A row asking for ``refine_text`` first runs as a text row
on the same GPT (its own slots), its prompt carrying the request's refine levels, then comes back as an audio row with
the refined text; a refine-only request's rows end there, each chunk's refined text handed out without audio.

With ``overlap`` (two single-thread executors, ranked like the waiting rows), the work that is one
row's alone runs beside the decode loop instead of inside it: the next rows' prompts are built and
prefilled ahead of their admission, and a finished row's audio is decoded while the loop goes on. The loop itself only
places prefilled rows into slots, steps, and hands finished rows on. Every one of those pieces is
the same pure function of the row as inline, so a row's result does not change.

With ``pieces`` (:class:`~ttsq.inference.audio.handoff.HandOff`), a code row's audio does not wait for its end: every few
steps its new GPT states go to its own piece decoder (in the audio thread, in order, where there is one) and the
samples that are ready come out as :class:`PieceReady` events; the row's :class:`ChunkReady` then carries the whole
chunk, which begins with exactly those pieces. A row that runs again from its prompt (out of memory, a suspect
step) skips the samples it already handed on.

Failures stay with their row wherever the code can tell whose they are (a prompt, a prefill, an
audio decode). A failure inside a shared decode step cannot be pinned on one row, so every row of
that step is put back as a *suspect* that then runs alone: the guilty one fails alone, and the
others, restarted, produce exactly the audio they would have produced (a row's tokens depend
only on its own inputs and seed). Running out of memory halves the number of slots in use for a
while and puts the most recently admitted rows back in the queue.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.batching import AdaptiveBatchLimit
from ttsq.domain.text import detect_language
from ttsq.inference.audio.handoff import HandOff
from ttsq.inference.base import (
    BatcherStats,
    BatchEvent,
    ChunkReady,
    OutOfMemory,
    PermanentError,
    RequestFailed,
    StepHook,
    SynthesisRequest,
    TransientError,
    typed,
)
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.gpt.slot_decoder import Finished, Prefilled, SlotDecoder, inference
from ttsq.inference.sched.audio_work import AudioWork
from ttsq.inference.sched.background import RankedExecutor
from ttsq.inference.sched.decoders import Decoders
from ttsq.inference.sched.output import StepOutput
from ttsq.inference.sched.requests import (
    DecodeLimits,
    RequestState,
    RowState,
    chunk_audio,
    code_params,
    log_first_audio,
    refine_params,
)
from ttsq.inference.sched.waiting import Waiting, WaitingRows
from ttsq.inference.stream_listeners import StreamListeners

__all__ = ["DecodeLimits", "Scheduler"]

log = logging.getLogger(__name__)

_BACKGROUND_WAIT_S = 0.05
"""The longest a step with nothing to decode waits for a prefill or an audio decode (the inference
thread then takes new commands again)."""


class Scheduler:
    """Feeds rows of many requests through one code decoder (and one text decoder for refine_text).

    Blocking and single-threaded: the worker's inference thread calls :meth:`add`, :meth:`cancel`
    and :meth:`step`. ``prepare`` turns a request into its chunk texts (the engine's normalisation
    and sentence split); it may raise :class:`PermanentError` for an unusable text.
    """

    def __init__(
        self,
        rows: ChatTTSRows,
        code: SlotDecoder,
        text: Callable[[], SlotDecoder] | None,
        prepare: Callable[[SynthesisRequest, Literal["zh", "en"]], list[str]],
        limits: DecodeLimits,
        *,
        oom_recover_s: float,
        first_chunk_slots: int = 0,
        head_start: bool = False,
        overlap: tuple[RankedExecutor, RankedExecutor] | None = None,
        pieces: HandOff | None = None,
        clock: Callable[[], float] = time.monotonic,
        playback_margin_s: float | None = None,
        build_text_now: bool = False,
    ) -> None:
        self.rows = rows
        self.code = code
        self.decoders = Decoders(code, text)
        """The code decoder and the refine-text one (built now with ``build_text_now``, else at the first row that
        needs it: :mod:`ttsq.inference.sched.decoders`)."""
        self.prepare = prepare
        self.limits = limits
        self.clock = clock
        self.hook: StepHook | None = None
        self.keep_ahead: float | None = None if pieces is None else pieces.keep_ahead
        self.stats = BatcherStats()
        if first_chunk_slots < 0:
            raise ValueError(f"first_chunk_slots must not be negative, got {first_chunk_slots}")
        self.first_chunk_slots = first_chunk_slots
        """Slots of the limit kept for requests' first chunks: later chunks leave them free (always one
        slot at least for later chunks, so a limit of 1 keeps nothing back)."""
        self.head_start = head_start
        """A request's later chunks take no slot until its first chunk's codes are decoded (they are prefilled
        meanwhile). Where a step costs more as the batch grows (a CPU), the first chunk then runs in a smaller batch
        and its audio comes sooner; other requests' rows still fill the free slots."""
        self.playback_margin_s = playback_margin_s
        """Playback-aware order (None: off): waiting rows go by when their audio is due — a request's first chunk at
        its arrival, a later one when a listener playing the request from its first audio runs out, less this margin
        (:mod:`ttsq.inference.playback`) — re-ranked at every step, as the listeners' buffers change."""
        self._limit = AdaptiveBatchLimit(code.shape.slots, oom_recover_s)
        self._waiting = WaitingRows()
        self._active: dict[tuple[SlotDecoder, int], RowState] = {}
        """Rows in a slot, by (decoder, slot)."""
        self._requests: dict[str, RequestState] = {}
        self.streams = StreamListeners(seed=True)
        """The listeners of the streams its requests belong to (a session's chunks, each a request): a continuation is
        due when its stream's listener runs out (:mod:`ttsq.inference.stream_listeners`)."""
        self._arrivals = itertools.count()
        self._orders = itertools.count()
        """The order rows took their slots (out of memory sends the latest back first)."""
        self._exclusive: str | None = None
        self._overlap = overlap
        self._beside_from = _beside_cpu_s(self._overlap)
        self._prefill_pool: RankedExecutor | None = overlap[0] if overlap is not None else None
        self.audio = AudioWork(
            rows,
            limits,
            overlap[1] if overlap is not None else None,
            pieces,
            clock,
            alive=lambda request: self._requests.get(request.key) is request,
            chunk_ready=self._chunk_ready,
            fail=self._fail,
        )
        """Each row's audio, whole at its end or in pieces, in the audio thread beside the loop (``overlap``)."""
        if build_text_now:
            self.decoders.build_text()

    # ---- what the worker sees ----------------------------------------------------------------

    @property
    def text(self) -> SlotDecoder | None:
        """The refine-text decoder, once built."""
        return self.decoders.text

    @property
    def slots(self) -> int:
        return self.code.shape.slots

    @property
    def slot_limit(self) -> int:
        """Slots in use at most now: all of them, or fewer for a while after running out of memory."""
        return self._limit.current(self.clock())

    @property
    def waiting_rows(self) -> int:
        return len(self._waiting)

    @property
    def active_rows(self) -> int:
        return len(self._active)

    @property
    def busy(self) -> bool:
        return bool(self._waiting or self._active or self.audio.pending)

    def requests(self) -> list[str]:
        return list(self._requests)

    def add(self, key: str, request: SynthesisRequest, *, alone: bool = False) -> list[BatchEvent]:
        """Queue ``request``'s chunks (``alone``: none of them shares a step with another request's
        rows). An unusable request fails at once: its failure is returned."""
        if key in self._requests:
            raise ValueError(f"request {key!r} is already in the scheduler")
        lang = detect_language(request.text)
        try:
            if not 0 <= request.sampling.speed <= 9:
                raise PermanentError(f"speed must be between 0 and 9, got {request.sampling.speed}")
            chunks = list(self.prepared(request).chunks or ())
        except Exception as exc:  # noqa: BLE001 - the request fails, the scheduler carries on
            return [RequestFailed(key, exc)]
        refines = request.sampling.refine_text or request.refine_only
        if refines and self.decoders.wants_text():
            self.decoders.build_text()
        state = RequestState(key, request, lang, total=len(chunks), arrival=next(self._arrivals), alone=alone)
        state.arrived_at, state.margin_s = self.clock(), self.playback_margin_s
        if request.stream is not None:  # one listener across the stream's jobs
            state.listener = self.streams.listener(request.stream, state.arrived_at)
        state.anchored = request.consistent and len(chunks) > 1 and request.speaker_prompt is None
        self._requests[key] = state
        phase: Literal["refine", "code"] = "refine" if refines else "code"
        for index, chunk in enumerate(chunks):
            row = RowState(state, index, phase, chunk)
            if not state.wait_for_anchor(row):
                self._waiting.push(row)
        return []

    def prepared(self, request: SynthesisRequest) -> SynthesisRequest:
        """:meth:`Batcher.prepared <ttsq.inference.base.Batcher.prepared>`: its chunks cut and normalised now (the
        engine's ``prepare`` and ChatTTS's own normalisation hold no state of the scheduler's)."""
        if request.chunks is not None:
            return request
        lang = detect_language(request.text)
        return replace(request, chunks=tuple(self.rows.normalize(text, lang) for text in self.prepare(request, lang)))

    def cancel(self, key: str) -> None:
        """Drop a request: its waiting rows and its slots (at once; the slots refill at the next step), and its audio
        being decoded."""
        self._requests.pop(key, None)
        for row in [row for row in self._active.values() if row.request.key == key]:
            self._evict(row)
        self._waiting.drop(key)
        self.audio.drop(lambda entry: entry.row.request.key == key)

    def step(self) -> list[BatchEvent]:
        """Admit waiting rows into free slots, advance every occupied slot one token, report what ended.

        With ``overlap``, also start prefilling the next rows and collect audio decoded meanwhile; a
        step with nothing to decode waits (briefly) for that background work instead of spinning."""
        events: list[BatchEvent] = []
        with inference():
            self._schedule(events)
            stepped = False
            for decoder in self.decoders.live():
                if decoder.occupied:
                    stepped = True
                    output = self._run_gpt(decoder, events)
                    if output is not None:
                        self._hand_out(output, events)
            self.audio.collect(events)
        if not stepped and not events:
            _wait_for_any([*self.audio.futures(), *self._waiting.prefills()])
        self.stats.beside_cpu_s = _beside_cpu_s(self._overlap) - self._beside_from
        return events

    # ---- schedule: who takes a slot ----------------------------------------------------------

    def _schedule(self, events: list[BatchEvent]) -> None:
        """Audio decoded meanwhile handed on, the waiting rows ranked (afresh, where the order follows playback),
        prefilled ahead and admitted into the free slots."""
        self.audio.collect(events)
        if self.playback_margin_s is not None and self._waiting:
            self._waiting.rerank()
        if self._prefill_pool is None:
            self._prefill_ahead()  # inline: the rows about to be admitted, together
        self._admit(events)
        if self._prefill_pool is not None:
            self._prefill_ahead()  # in the prefill thread: the next steps' rows

    def _admit(self, events: list[BatchEvent]) -> None:
        """Fill free slots in priority order. Later chunks (:attr:`RowState.later`, a session's continuations included)
        leave :attr:`first_chunk_slots` of the limit free, so a new request starts at the next step even when long
        requests or playing streams have chunks to spare.
        A row that must run alone waits for the slots to drain (nothing is admitted past it
        meanwhile), and while it runs only its own kind joins it."""
        limit = self.slot_limit
        later_limit = max(1, limit - self.first_chunk_slots)
        decoders = self.decoders.live()
        held: list[Waiting] = []
        while self._waiting and any(d.free_slots and d.occupied < limit for d in decoders):
            if self._exclusive is not None and not self._active:
                self._exclusive = None
            entry = self._waiting.pop()
            row = entry.row
            token = row.exclusive
            if self._exclusive is not None and token != self._exclusive:
                held.append(entry)
                continue
            if token is not None and self._exclusive is None and self._active:
                held.append(entry)
                break
            try:
                decoder = self.decoders.of(row)
            except PermanentError as exc:
                self._fail(row.request.key, exc, events)
                continue
            if not decoder.free_slots or decoder.occupied >= (later_limit if row.later else limit):
                held.append(entry)
                continue
            if self.head_start and row.index > 0 and not row.request.lead_decoded:
                held.append(entry)  # its request's first chunk is still decoding, in a batch kept smaller for it
                continue
            if self._prefill_pool is not None and (row.prefill is None or not row.prefill.done()):
                held.append(entry)  # its prompt is still being prefilled; a ready row behind it may go first
                continue
            if token is not None:
                self._exclusive = token
            self._admit_row(decoder, row, events)
            if self.slot_limit < limit:  # out of memory admitting it: no more rows this pass
                break
        for entry in held:
            # Not a row whose request failed in this pass (a later chunk's prefill, say): cancelling it removed its
            # waiting rows, but not these, set aside meanwhile; put back, one would decode to its end for nobody.
            if self._requests.get(entry.row.request.key) is entry.row.request:
                self._waiting.restore(entry)

    def _prefilled(self, decoder: SlotDecoder, rows: list[RowState]) -> list[Prefilled]:
        """Build rows' prompts and run them through the GPT, together (:meth:`SlotDecoder.prefill_many`: inline, or one
        row in the prefill thread)."""
        prompts = []
        for row in rows:
            request = row.request.request
            if row.phase == "code":
                spoken, said = row.request.anchor if row.index > 0 and row.request.anchor is not None else (None, None)
                prompt = self.rows.code_prompt(
                    row.text, request.sampling.speed, request.speaker, spoken or request.speaker_prompt, said or request.prompt_text
                )
            else:
                prompt = self.rows.text_prompt(row.text, request.sampling.refine_prompt)
            prompts.append(prompt.embeddings)
        return decoder.prefill_many(prompts)

    def _prefill_ahead(self) -> None:
        """Prefill the next rows before their admission. In the prefill thread (``overlap``): as many as there are free
        slots, and a few more, each alone, beside the loop. Inline (CUDA, where there is no such thread): the rows about
        to take the free slots, together, so a burst of admissions costs one pass of the GPT per decoder rather than one
        per row. A row whose batch fails (its prompt, memory) is prefilled alone at its admission, where a failure is
        its own."""
        pool = self._prefill_pool
        if not self._waiting:
            return
        free = sum(decoder.free_slots for decoder in self.decoders.live())
        if pool is None:
            batches: dict[SlotDecoder, list[RowState]] = {}
            for entry in self._waiting.first(min(free, self.slot_limit)):
                try:
                    decoder = self.decoders.of(entry.row)
                except PermanentError:
                    continue  # admission fails it, with its reason
                if entry.row.prefill is None:
                    batches.setdefault(decoder, []).append(entry.row)
            for decoder, rows in batches.items():
                if len(rows) < 2:
                    continue  # alone, at its admission, as it always was
                try:
                    made = self._prefilled(decoder, rows)
                except Exception as exc:  # noqa: BLE001 - whose it was is found row by row at admission
                    log.info("prefilling %d rows together failed (%s): each is prefilled alone", len(rows), typed(exc))
                    continue
                for row, prefilled in zip(rows, made, strict=True):
                    row.prefill = Future()
                    row.prefill.set_result(prefilled)
            return
        wanted = free + max(2, self.slot_limit // 2)
        started = 0
        for entry in self._waiting.first(wanted):
            row = entry.row
            if row.prefill is not None:
                started += 1
                continue
            if started >= wanted:
                break
            try:
                decoder = self.decoders.of(row)
            except PermanentError:
                continue  # admission fails it, with its reason
            row.prefill = pool.submit(row.priority(), lambda decoder=decoder, row=row: self._prefilled(decoder, [row])[0])
            started += 1

    def _admit_row(self, decoder: SlotDecoder, row: RowState, events: list[BatchEvent]) -> None:
        """Place one row (prefilled ahead, or now, alone) and sample its first token; a failure here is that row's alone."""
        try:
            params = code_params(row, self.limits) if row.phase == "code" else refine_params(row, self.limits)
            prefilled = row.prefill.result() if row.prefill is not None else self._prefilled(decoder, [row])[0]
            row.prefill = None
            slot, ended = decoder.place(prefilled, params)
        except Exception as exc:  # noqa: BLE001 - typed below; the loop carries on
            row.prefill = None
            error = typed(exc)
            if isinstance(error, OutOfMemory) and self._active:
                self._out_of_memory(events, admitting=row)
                return
            self._fail(row.request.key, error, events)
            return
        row.slot = slot
        row.order = next(self._orders)
        self.audio.placed(row)
        self._active[decoder, slot] = row
        self.stats.rows_admitted += 1
        if ended is not None:
            self._finish(decoder, ended, events)

    # ---- run the GPT step, hand out what it made -----------------------------------------------

    def _run_gpt(self, decoder: SlotDecoder, events: list[BatchEvent]) -> StepOutput | None:
        """One token for every row of ``decoder``, its rows compacted into its lowest slots first (a step covers as
        many slots as there are rows). A failed step is settled here (out of memory, a lone row's failure, suspects run
        again alone) and gives nothing to hand out."""
        for source, target in decoder.compact():
            moved = self._active[decoder, target] = self._active.pop((decoder, source))
            moved.slot = target
        rows = [row for (owner, _slot), row in self._active.items() if owner is decoder]
        try:
            if self.hook is not None:
                self.hook([row.request.request for row in rows])
            finished = decoder.step()
        except Exception as exc:  # noqa: BLE001 - whose fault it was is decided below
            error = typed(exc)
            if isinstance(error, OutOfMemory):
                self._out_of_memory(events)
            elif len(rows) == 1 or all(row.exclusive is not None and row.exclusive == rows[0].exclusive for row in rows):
                for key in {row.request.key for row in rows}:
                    self._fail(key, error, events)
            else:
                log.warning("a step of %d rows failed (%s): each of them runs again alone", len(rows), error)
                self.stats.suspects += len(rows)
                for row in rows:
                    self._evict(row)
                    row.suspect = True
                    self._waiting.push(row)
            return None
        self.stats.steps += 1
        self.stats.row_steps += len(rows)
        self.stats.slot_steps += decoder.computed
        return StepOutput(decoder, rows, finished)

    def _hand_out(self, output: StepOutput, events: list[BatchEvent]) -> None:
        """What the step made goes on: each row that ended (:meth:`_finish`), and the code rows still in their slots hand
        their new state to their pieces."""
        for ended in output.finished:
            self._finish(output.decoder, ended, events)
        if output.decoder is self.code:
            in_slots = [row for row in output.rows if row.slot is not None and self._active.get((self.code, row.slot)) is row]
            self.audio.hand_on(in_slots, self.code.hiddens, events)

    def _finish(self, decoder: SlotDecoder, ended: Finished, events: list[BatchEvent]) -> None:
        """A row ended: a refine row's text goes back to the queue as its code row, a code row's states to its audio."""
        row = self._active.pop((decoder, ended.slot))
        self.stats.rows_finished += 1
        request = row.request
        if row.phase == "refine":
            try:
                row.text = self.rows.refined_text(ended.tokens)
            except Exception as exc:  # noqa: BLE001 - this row's own failure
                self._fail(request.key, typed(exc), events)
                return
            if request.request.refine_only:
                self._text_ready(row, events)
                return
            row.phase = "code"
            row.suspect = False
            if not request.wait_for_anchor(row):
                self._waiting.push(row)
            return
        if row.index == 0:
            request.lead_decoded = True
        if ended.hit_limit:
            log.debug("chunk %d of %s hit max_new_token", row.index, request.key)
        if ended.hiddens is None:
            self._fail(request.key, TransientError("an audio row ended without its states"), events)
            return
        self.audio.ended(row, ended.hiddens, events)

    def _chunk_ready(self, row: RowState, samples: npt.NDArray[np.float32], events: list[BatchEvent], steps: int) -> None:
        """A row's whole chunk is decoded (its audio work's end): its request's listener hears it, rows held for its
        anchor queue, and the request is done with its last chunk."""
        request = row.request
        if self._requests.get(request.key) is not request:
            return  # cancelled or failed while its audio was decoded
        row.audio = None
        log_first_audio(row, steps)
        if request.anchor is not None and request.held:
            held, request.held = request.held, []
            for later in held:
                self._waiting.push(later)
        request.done += 1
        fresh = samples.size - sum(piece.size for piece in row.sent)  # what the pieces did not already bring
        request.played(self.clock(), row.index, fresh / SAMPLE_RATE)
        events.append(ChunkReady(request.key, chunk_audio(row, samples)))
        if request.done == request.total:
            del self._requests[request.key]

    def _text_ready(self, row: RowState, events: list[BatchEvent]) -> None:
        """A refine-only request's row is refined: its chunk is that text, without audio; the request is done with its
        last chunk."""
        request = row.request
        request.done += 1
        events.append(ChunkReady(request.key, chunk_audio(row, np.zeros(0, dtype=np.float32))))
        if request.done == request.total:
            del self._requests[request.key]

    # ---- failures ------------------------------------------------------------------------------

    def _out_of_memory(self, events: list[BatchEvent], *, admitting: RowState | None = None) -> None:
        """Out of memory. Admitting ``admitting`` (its prefill, or its place): the rows in flight keep their slots and go
        on (the KV cache is preallocated, so evicting them would free nothing and throw their work away); no new row is
        admitted beyond them for ``OOM_RECOVER_S``, and the row waits for a slot again. In a step: halve the slots in
        use for a while; the most recently admitted rows go back to the queue (a step's own memory grows with its rows;
        the KV cache does not shrink)."""
        self.stats.out_of_memory += 1
        if admitting is not None:
            keep = self._limit.hold(len(self._active), self.clock())
            log.warning("out of memory admitting a row beside %d others: at most %d slots for a while", len(self._active), keep)
            self._waiting.push(admitting)
            return
        active = sorted(self._active.values(), key=lambda row: row.order)
        keep = self._limit.shrink(max(1, len(active)), self.clock())
        log.warning("out of memory with %d rows: at most %d slots for a while", len(active), keep)
        for row in active[keep:]:
            self._evict(row)
            self._waiting.push(row)
        if len(active) <= 1:
            for row in active:
                self._evict(row)
                self._fail(row.request.key, OutOfMemory("out of memory with a single row"), events)

    def _evict(self, row: RowState) -> None:
        """Take a row out of its slot; it restarts from its prompt if it runs again, as a new run: its pieces being
        decoded are dropped, and the samples it already handed on are skipped when the new run makes them again."""
        for key, active in list(self._active.items()):
            if active is row:
                del self._active[key]
                decoder, slot = key
                decoder.release(slot)
        row.slot = None
        self.audio.evicted(row)

    def _fail(self, key: str, error: BaseException, events: list[BatchEvent]) -> None:
        if key not in self._requests:
            return
        self.cancel(key)
        events.append(RequestFailed(key, error))


def _wait_for_any(pending: list[Future[Any]]) -> None:
    """Nothing to decode this step: wait a little for a prefill or an audio decode to finish."""
    if pending:
        wait(pending, timeout=_BACKGROUND_WAIT_S, return_when=FIRST_COMPLETED)


def _beside_cpu_s(overlap: tuple[RankedExecutor, RankedExecutor] | None) -> float:
    """CPU seconds of the prefill and audio threads so far (an engine's, which its schedulers share)."""
    return 0.0 if overlap is None else sum(pool.cpu_s() for pool in overlap)
