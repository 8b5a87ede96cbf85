"""Refining a text: ChatTTS's refine pass alone, so that an author sees the prosody tokens it would insert.

A refine is a job like any other (:meth:`TaskService.submit` with ``refine_only``): queued with the caller's token
paid, cached and shared in flight like a submit, claimed by a worker, ended with a result — the refined text
(:mod:`ttsq.domain.refine`) instead of audio. The API runs no inference.

The answer is a long-poll with a bounded wait: the route waits for the job's end (the process's stream listener, no
polling) up to ``REFINE_WAIT_S``, and answers the text; a refine still queued or running then is answered with its
task, which :meth:`answer` (``GET /v1/tts/refine/{task_id}``) serves the same way. Waiting first because a refine is one
short pass (a few hundred text tokens at most, sharing decode steps with the audio rows) and an author at an editor
wants the text in one round trip; bounded, because a deep queue must not hold connections open without end.
"""

from __future__ import annotations

from dataclasses import dataclass

from ttsq.api.auth import Principal
from ttsq.api.schemas import SubmitRequest, TaskStatus
from ttsq.api.service.common import TaskNotFound
from ttsq.api.service.tasks import Submitted, TaskService
from ttsq.domain.jobs import Job
from ttsq.domain.refine import stored_text
from ttsq.store.rate_limit import RateDecision

__all__ = ["RefineService", "Refined"]


@dataclass(frozen=True)
class Refined:
    """Where a refine stands: its refined ``text`` once done, else its ``status`` (queued, running, failed, cancelled)."""

    job: Job
    text: str | None
    status: TaskStatus | None
    rate: RateDecision | None = None
    """The caller's token bucket after paying for the refine (a refine's first answer only)."""


class RefineService:
    """``POST /v1/tts/refine`` and ``GET /v1/tts/refine/{task_id}`` (``prosody_api``)."""

    def __init__(self, tasks: TaskService, wait_s: float) -> None:
        self.tasks = tasks
        self.wait_s = wait_s
        """How long a refine's first answer waits for its text (``REFINE_WAIT_S``; at most ``MAX_WAIT_S``)."""

    async def refine(self, body: SubmitRequest, caller: Principal) -> Refined:
        """Queue ``body`` as a refine job (its ``style`` and levels resolved as a submit's) and wait for its text."""
        submitted: Submitted = await self.tasks.submit(body, caller, refine_only=True)
        answered = await self.answer(submitted.answer.task_id, caller, self.wait_s)
        return Refined(answered.job, answered.text, answered.status, submitted.rate)

    async def answer(self, task_id: str, caller: Principal, wait_s: float) -> Refined:
        """A refine task's text once it has ended, or after ``wait_s`` its status; a task that is not a refine is
        :class:`TaskNotFound` here (its result is audio: ``GET /v1/tts/result``)."""
        job = await self.tasks.job(task_id, caller)
        if not job.params.refine_only:
            raise TaskNotFound(f"task {task_id!r} is not a refine: fetch its audio from /v1/tts/result/{task_id}")
        download = await self.tasks.download(task_id, caller, wait_s)
        text = stored_text(download.audio) if download.audio is not None else None
        return Refined(download.job, text, download.status)
