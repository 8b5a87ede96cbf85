"""A scheduler's audio work: each row's audio, decoded whole when the row ends or in pieces while its states are
generated (:class:`~ttsq.inference.audio.handoff.HandOff`), in the audio thread beside the decode loop (ranked as the
row, in the order asked) or inline, and handed back as :class:`PieceReady` events and, at the row's end, to the
scheduler, whose bookkeeping of the request it is.

It reads and writes the scheduler's row state (a row's run, what its pieces sent, what a re-run skips), so it sits in
the scheduler's wing; how the samples themselves are made is :mod:`ttsq.inference.audio`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLE_RATE
from ttsq.inference.audio.handoff import HandOff, RowAudio
from ttsq.inference.base import BatchEvent, PieceReady, typed
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.sched.background import RankedExecutor
from ttsq.inference.sched.requests import DecodeLimits, RequestState, RowState, chunk_audio, log_first_audio

if TYPE_CHECKING:
    import torch

__all__ = ["AudioWork", "Decoding"]


@dataclass
class Decoding:
    """A row's audio being decoded in the audio thread: a piece (``final`` False) or the rest of its chunk."""

    row: RowState
    future: Future[npt.NDArray[np.float32]]
    run: int
    final: bool
    steps: int
    """The row's states when it was handed on: how many decode steps the audio waited for."""
    rank: Any = None
    """Where it was queued in the audio thread (a later decode of the row is never ranked ahead of it)."""


@dataclass
class _Due:
    """A row's states for its piece decoder, gathered in a step to be decoded with the other rows' due then."""

    row: RowState
    audio: RowAudio
    states: npt.NDArray[np.float32]
    final: bool
    steps: int
    future: Future[npt.NDArray[np.float32]]


ChunkReadyHook = Callable[[RowState, npt.NDArray[np.float32], list[BatchEvent], int], None]
"""The scheduler's end of a row: its whole chunk's audio (the pieces sent, then the rest), and after how many steps."""
FailHook = Callable[[str, BaseException, list[BatchEvent]], None]
"""The scheduler's failure of a request (by key) for one of its rows' audio."""


class AudioWork:
    """A scheduler's audio decoding (see the module docstring)."""

    def __init__(
        self,
        rows: ChatTTSRows,
        limits: DecodeLimits,
        pool: RankedExecutor | None,
        pieces: HandOff | None,
        clock: Callable[[], float],
        *,
        alive: Callable[[RequestState], bool],
        chunk_ready: ChunkReadyHook,
        fail: FailHook,
    ) -> None:
        self.rows = rows
        self.limits = limits
        self.pool = pool
        self.pieces = pieces
        """Audio within a chunk, as it is generated (None: a chunk's audio is decoded at its end)."""
        self.clock = clock
        self.alive = alive
        """Whether a request is still the scheduler's (not cancelled or failed meanwhile)."""
        self.chunk_ready = chunk_ready
        self.fail = fail
        self.pending: list[Decoding] = []
        """Audio being decoded (in the audio thread), in the order it was asked for: finished rows' chunks (first
        chunks first, then by arrival) and pieces."""
        self.due: list[_Due] = []
        """Rows' states handed on in this step, not yet asked for: decoded together once the step's are all in."""

    def futures(self) -> list[Future[npt.NDArray[np.float32]]]:
        return [entry.future for entry in self.pending]

    def placed(self, row: RowState) -> None:
        """``row`` took a slot: with pieces, a code row of a request that wants them gets this run's piece decoder (a
        request nobody listens to live has each chunk decoded whole at its end, :meth:`ended`)."""
        if self.pieces is not None and row.phase == "code" and row.request.request.pieces:
            row.audio = RowAudio(self.pieces.make(), keep_wave=row.index == 0 and row.request.anchored)
            row.tokens, row.handed = 1, 0  # placing a row samples its first token

    def hand_on(self, rows: list[RowState], hiddens: torch.Tensor | None, events: list[BatchEvent]) -> None:
        """Each of ``rows`` (code rows still in their slot after a step) has one more state; a row whose next piece is
        due hands its new states to its piece decoder (copied: the slot's buffer is written again when the slot is
        reused)."""
        pieces = self.pieces
        if pieces is None:
            return
        for row in rows:
            if row.audio is None or row.slot is None:
                continue
            row.tokens += 1
            due = pieces.cadence.first if row.handed == 0 else row.handed + pieces.cadence.piece_tokens
            if row.tokens < due:
                continue
            assert hiddens is not None
            states = hiddens[row.slot, row.handed : row.tokens].to("cpu", dtype=hiddens.dtype, copy=True).numpy()
            row.handed = row.tokens
            self.due.append(_Due(row, row.audio, states, False, row.tokens, Future()))
        self.flush(events)

    def flush(self, events: list[BatchEvent]) -> None:
        """The rows' states handed on since the last flush (this step's pieces and ends) decoded in one task: their
        piece decoders run together (:attr:`HandOff.together`), each row's samples as if it were decoded alone. In
        the audio thread it is ranked as its most urgent row, never ahead of a decode asked before for any of them
        (a row's pieces stay in order); each row's part is a :class:`Decoding` of its own, handed on in order as
        :meth:`collect` hands any. Inline, it runs now."""
        due, self.due = self.due, []
        if not due:
            return
        if self.pool is None:
            self._run_together(due)
            for entry in due:
                try:
                    samples = entry.future.result()
                except Exception as exc:  # noqa: BLE001 - this row's own failure (or the run's it shared)
                    self.fail(entry.row.request.key, typed(exc), events)
                    continue
                self._decoded(entry.row, entry.row.run, entry.final, entry.steps, samples, events)
            return
        rank = self._rank([entry.row for entry in due])
        self.pool.submit(rank, self._run_together, due)
        self.pending += [Decoding(entry.row, entry.future, entry.row.run, entry.final, entry.steps, rank) for entry in due]

    def ended(self, row: RowState, hiddens: torch.Tensor, events: list[BatchEvent]) -> None:
        """``row``'s codes are all out: the rest of its audio (after its pieces), or all of it, is decoded."""
        row.tokens = int(hiddens.shape[0])
        if row.audio is not None:  # decoded with the other rows due in this step (:meth:`flush`)
            rest = hiddens[row.handed :].to("cpu", copy=True).numpy()
            self.due.append(_Due(row, row.audio, rest, True, row.tokens, Future()))
            return
        self._decode(row, self._audio_of, row, hiddens, final=True, events=events)

    def evicted(self, row: RowState) -> None:
        """``row`` left its slot to run again from its prompt, as a new run: its pieces being decoded are dropped,
        and the samples it already handed on are skipped when the new run makes them again."""
        if row.audio is not None:
            row.audio = None
            row.run += 1
            row.tokens = row.handed = 0
            row.skip = sum(piece.size for piece in row.sent)
            self.drop(lambda entry: entry.row is row)

    def drop(self, which: Callable[[Decoding], bool]) -> None:
        """The decodes ``which`` picks are cancelled (one not started yet never runs; a row decoded together with
        others leaves their task, which skips it, or drops its samples if it has begun)."""
        self.pending = _dropping(self.pending, which)
        self.due = [
            entry for entry in self.due if not which(Decoding(entry.row, entry.future, entry.row.run, entry.final, entry.steps))
        ]

    def collect(self, events: list[BatchEvent]) -> None:
        """Hand on the audio that has been decoded, whichever row's it is (the worker puts a request's chunks in
        order; a short request's audio must not wait for a long one's decoded before it). A row's own pieces and its
        end go in the order they were asked for: one not done yet holds back that row's later ones."""
        self.flush(events)
        done: list[Decoding] = []
        pending: list[Decoding] = []
        held: set[int] = set()
        for entry in self.pending:  # one look at each future: one that ends meanwhile waits for the next call
            if id(entry.row) in held or not entry.future.done():
                held.add(id(entry.row))
                pending.append(entry)
            else:
                done.append(entry)
        self.pending = pending
        for entry in done:
            try:
                samples = entry.future.result()
            except Exception as exc:  # noqa: BLE001 - this row's own failure
                self.fail(entry.row.request.key, typed(exc), events)
                continue
            self._decoded(entry.row, entry.run, entry.final, entry.steps, samples, events)

    def _decoded(
        self, row: RowState, run: int, final: bool, steps: int, samples: npt.NDArray[np.float32], events: list[BatchEvent]
    ) -> None:
        if run != row.run:
            return  # an earlier run's piece: the row runs again and hands on from where the pieces stopped
        if row.skip:
            cut = min(row.skip, samples.size)
            row.skip -= cut
            samples = samples[cut:]
        if not final:
            if samples.size and self.alive(row.request):
                row.sent.append(samples)
                row.request.played(self.clock(), row.index, samples.size / SAMPLE_RATE, whole=False)
                log_first_audio(row, steps)
                events.append(PieceReady(row.request.key, chunk_audio(row, samples)))
            return
        if row.sent:
            samples = np.concatenate([*row.sent, samples])
        self.chunk_ready(row, samples, events, steps)

    def _decode(
        self, row: RowState, decode: Callable[..., npt.NDArray[np.float32]], *args: Any, final: bool, events: list[BatchEvent]
    ) -> None:
        """Decode some of a row's audio: in the audio thread (ranked as the row, in the order asked, so that a row's
        pieces stay in order), or inline, its result handed on at once."""
        steps = row.tokens
        if self.pool is not None:
            rank = self._rank([row])
            future = self.pool.submit(rank, decode, *args)
            self.pending.append(Decoding(row, future, row.run, final, steps, rank))
            return
        try:
            samples = decode(*args)
        except Exception as exc:  # noqa: BLE001 - this row's own failure
            self.fail(row.request.key, typed(exc), events)
            return
        self._decoded(row, row.run, final, steps, samples, events)

    def _rank(self, rows: list[RowState]) -> Any:
        """Where a decode of ``rows`` goes in the audio thread: as the most urgent of them, but never ahead of one
        asked before for any of them (the executor runs equal ranks in the order asked), so that each row's decodes
        run in order."""
        rank = min(row.priority() for row in rows)
        ids = {id(row) for row in rows}
        return max([rank, *(entry.rank for entry in self.pending if id(entry.row) in ids and entry.rank is not None)])

    def _run_together(self, due: list[_Due]) -> None:
        """The audio thread's (or the inline) task of :meth:`flush`: the rows not dropped meanwhile, their piece
        decoders together. A failure of the run they share fails each of them (their decoders are all part-way
        through it); a row's own part after it (its lead's seam, its silence, its speaker prompt) fails that row
        only. Every row's future is settled whatever happens: the loop waits on them."""
        live = [entry for entry in due if entry.future.set_running_or_notify_cancel()]
        try:
            together = self.pieces.together if self.pieces is not None else None
            if together is not None and len(live) > 1:
                try:
                    raw = together(
                        [entry.audio.pieces for entry in live], [entry.states for entry in live], [entry.final for entry in live]
                    )
                except Exception as exc:  # noqa: BLE001 - the shared run's failure is each row's
                    for entry in live:
                        entry.future.set_exception(exc)
                    return
                for entry, samples in zip(live, raw, strict=True):
                    _settle(entry, self._after, entry, samples)
                return
            for entry in live:
                _settle(entry, self._alone, entry)
        finally:
            for entry in live:
                if not entry.future.done():
                    entry.future.set_exception(RuntimeError("the audio decode of rows together stopped before this row's"))

    def _alone(self, entry: _Due) -> npt.NDArray[np.float32]:
        """One row's decode, by its own piece decoder."""
        if entry.final:
            return self._rest_of(entry.row, entry.audio, entry.states)
        return entry.audio.add(entry.states)

    def _after(self, entry: _Due, samples: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """One row's part after the run it shared: what its piece decoder returned, handed on as :meth:`_alone`'s."""
        if entry.final:
            return self._anchored(entry.row, *entry.audio.finished(samples))
        return entry.audio.added(samples)

    def _audio_of(self, row: RowState, hiddens: torch.Tensor) -> npt.NDArray[np.float32]:
        """A row's audio; an anchored request's first chunk also becomes the speaker prompt of its later chunks, made
        as upstream's ``split_text`` makes it (:meth:`ChatTTSRows.audio_and_prompt`), with the chunk's text (refined,
        where asked) as ``txt_smp``. Inline, or in the audio thread: the loop reads the anchor once this is done."""
        if row.index > 0 or not row.request.anchored:
            return self.rows.audio(hiddens)
        samples, prompt = self.rows.audio_and_prompt(hiddens, self.limits.max_reference_s)
        row.request.anchor = (prompt, row.text)
        return samples

    def _rest_of(self, row: RowState, audio: RowAudio, states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The rest of a row decoded in pieces; an anchored request's first chunk makes its speaker prompt of the
        whole wave, as :meth:`_audio_of` does."""
        return self._anchored(row, *audio.finish(states))

    def _anchored(
        self, row: RowState, samples: npt.NDArray[np.float32], wave: npt.NDArray[np.float32] | None
    ) -> npt.NDArray[np.float32]:
        """A row's last samples; with its whole ``wave`` kept, its request's speaker prompt made of it."""
        if wave is not None:
            row.request.anchor = (self.rows.speaker_prompt(wave, self.limits.max_reference_s), row.text)
        return samples


def _settle(entry: _Due, decode: Callable[..., npt.NDArray[np.float32]], *args: Any) -> None:
    """``entry``'s future settled with what ``decode(*args)`` returns, or with its failure (this row's own)."""
    try:
        samples = decode(*args)
    except Exception as exc:  # noqa: BLE001 - this row's own failure
        entry.future.set_exception(exc)
    else:
        entry.future.set_result(samples)


def _dropping(entries: list[Decoding], drop: Callable[[Decoding], bool]) -> list[Decoding]:
    """``entries`` without those ``drop`` picks, which are cancelled (a decode not started yet never runs)."""
    kept = []
    for entry in entries:
        if drop(entry):
            entry.future.cancel()
        else:
            kept.append(entry)
    return kept
