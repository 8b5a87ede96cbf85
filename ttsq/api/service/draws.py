"""Voice draws (``POST /v1/voices/draw``): many fresh seeds spoken as ordinary preview tasks, the most different kept."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ttsq.api.auth import Principal
from ttsq.api.service.common import Common, InvalidInput, TaskNotFound, log, voice_owner
from ttsq.api.service.tasks import TaskService
from ttsq.domain.draw import rank
from ttsq.domain.jobs import DEFAULT_SAMPLING_SEED, Job, Status, TTSParams, draw_seed
from ttsq.domain.text import canonical_text
from ttsq.store.draws import Draw, DrawCandidate, DrawReference, DrawStore
from ttsq.store.voices import VoiceRegistry

DrawLanguage = Literal["zh", "en"]


@dataclass(frozen=True)
class DrawConfig:
    """What a voice draw needs from settings (``DRAW_*``)."""

    max_n: int
    """The most candidates one draw returns."""
    oversample: int
    """Seeds drawn per candidate returned: ``n × oversample`` are spoken, the ``n`` most different kept."""
    preview_text_zh: str
    preview_text_en: str


@dataclass(frozen=True)
class VoiceDraws:
    """Voice draws, when configured: where they are kept and their settings."""

    store: DrawStore
    config: DrawConfig


@dataclass(frozen=True)
class DrawnVoice:
    """One kept candidate: its seed (save it with ``POST /v1/voices``), its preview task, the existing voice
    nearest to it and the Euclidean distance between their speaker embeddings (None when unmeasured)."""

    seed: int
    task_id: str
    nearest_voice: str | None
    distance: float | None


@dataclass(frozen=True)
class DrawOutcome:
    """Where a draw stands: its previews spoken so far, and once all have ended, the kept candidates in order."""

    draw: Draw
    previews_done: int
    previews_total: int
    candidates: list[DrawnVoice] | None
    """None while previews are still running."""


class DrawService:
    """Voice draws for ``draw_api``: its previews are ordinary tasks (:class:`TaskService`), read as their caller's."""

    def __init__(self, common: Common, tasks: TaskService, voices: VoiceRegistry, draws: VoiceDraws | None = None) -> None:
        self.tasks = tasks
        self.queue = tasks.queue
        self.config = tasks.config
        self.voices = voices
        self.draws = draws
        """Voice draws; None: not offered."""
        self.signer = common.signer
        self._pay = common.pay

    def _voice_draws(self) -> VoiceDraws:
        if self.draws is None:
            raise InvalidInput("n", "voice draws are not configured on this service")
        return self.draws

    async def draw_voices(self, n: int, language: DrawLanguage, caller: Principal) -> Draw:
        """Queue a draw of ``n`` voices (at most ``DRAW_MAX_N``): ``n × oversample`` fresh seeds, each spoken once
        (a preview job that records the speaker embedding its worker drew), and a preview of every seed voice to
        measure against; the draw pays one token of the caller's bucket per job it queues (at most the whole bucket),
        before queuing any: one token once queued 24 jobs. Its previews are ordinary jobs: they batch with every other
        request and are readable by the caller like its own tasks."""
        draws = self._voice_draws()
        n = min(n, draws.config.max_n)  # as a long-poll's wait is capped by MAX_WAIT_S
        visible = await self.voices.list(voice_owner(caller))
        measured = [voice for voice in visible if voice.embedding is not None or voice.seed is not None]
        await self._pay(caller, n * draws.config.oversample + sum(1 for voice in measured if voice.embedding is None))
        text = canonical_text(draws.config.preview_text_zh if language == "zh" else draws.config.preview_text_en)
        seeds: list[int] = []
        while len(seeds) < n * draws.config.oversample:
            seed = draw_seed()
            if seed not in seeds:
                seeds.append(seed)
        candidates = [DrawCandidate(seed=seed, task_id=await self._preview(text, seed, caller)) for seed in seeds]
        references = [
            DrawReference(voice=voice.name, embedding=voice.embedding)
            if voice.embedding is not None
            else DrawReference(voice=voice.name, task_id=await self._preview(text, voice.seed or 0, caller))
            for voice in measured
        ]
        draw = Draw(
            id=draws.store.new_id(), keep=n, language=language, reader=caller.reader, candidates=candidates, references=references
        )
        await draws.store.save(draw)
        log.info("voice draw %s: %d candidates for %d, against %d voices", draw.id, len(candidates), n, len(references))
        return draw

    async def _preview(self, text: str, speaker_seed: int, caller: Principal) -> str:
        """Queue one preview of the speaker ``speaker_seed`` draws: the voice as a saved seed voice speaks (the
        default sampling seed), never cached (its point is the worker's recorded embedding)."""
        params = TTSParams(
            text=text, speaker_seed=speaker_seed, seed=DEFAULT_SAMPLING_SEED, format="wav", record_speaker=True, cache_key=None
        )
        signer = await self.signer()
        result = await self.queue.enqueue(
            signer.new(self.queue.shards.place(None).label),
            params,
            single_flight=False,
            owner=caller.subject,
            reader=caller.reader,
            max_per_owner=self.config.max_queued_per_key,
            tenant=caller.tenant,
            priority=caller.priority(None),
            weight=caller.weight,
        )
        return result.job.id

    async def draw_outcome(self, draw_id: str, caller: Principal, wait_s: float = 0.0) -> DrawOutcome:
        """The draw as it stands once all its previews have ended, or after ``wait_s`` (at most ``MAX_WAIT_S``).

        Once every preview has ended, the candidates are ranked by the Euclidean distance from each one's speaker
        embedding to the nearest existing voice's (:func:`ttsq.domain.draw.rank`); a preview that failed leaves its
        candidate (or voice) out. Another caller's draw is "not found", like another caller's task.
        """
        draw = await self._voice_draws().store.get(draw_id)
        if draw is None or not (draw.reader is None or caller.is_admin or caller.reader == draw.reader):
            raise TaskNotFound(f"no voice draw {draw_id!r}: it never existed or has expired")
        deadline = self.tasks.monotonic() + min(wait_s, self.config.max_wait_s)
        jobs: dict[str, Job] = {}
        for task_id in draw.task_ids:
            job = await self.tasks.job(task_id, caller)
            jobs[task_id] = await self.tasks.wait_for_end(job, caller, max(0.0, deadline - self.tasks.monotonic()))
        done = sum(1 for job in jobs.values() if job.status.is_final)
        if done < len(jobs):
            return DrawOutcome(draw, done, len(jobs), None)

        def speaker(task_id: str | None) -> str | None:
            job = jobs.get(task_id) if task_id is not None else None
            return job.speaker if job is not None and job.status is Status.DONE else None

        existing = {ref.voice: found for ref in draw.references if (found := ref.embedding or speaker(ref.task_id)) is not None}
        measured = [c for c in draw.candidates if speaker(c.task_id) is not None]
        ranked = rank([speaker(c.task_id) for c in measured], existing, draw.keep)
        kept = [DrawnVoice(measured[r.index].seed, measured[r.index].task_id, r.nearest, r.distance) for r in ranked]
        return DrawOutcome(draw, done, len(jobs), kept)
