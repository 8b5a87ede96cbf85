"""Operators' use cases: dead letters (``/v1/admin/dead-letters``) and what ``/readyz`` reports."""

from __future__ import annotations

from typing import Any

from ttsq.api.service.common import Common, ServiceConfig
from ttsq.domain.jobs import Job
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Requeued


class AdminService:
    """The operators' routes (``admin_api``'s dead letters) and the readiness probe."""

    def __init__(self, common: Common, queue: JobQueue, heartbeats: Heartbeats, config: ServiceConfig) -> None:
        self.queue = queue
        self.dead = DeadLetters(queue)
        self.heartbeats = heartbeats
        self.config = config
        self._shared_secret = common.shared_secret

    async def dead_letters(self, limit: int) -> tuple[list[Job], int]:
        """The newest ``limit`` dead letters and how many there are."""
        return await self.dead.newest(limit), await self.dead.count()

    async def dead_letter(self, task_id: str) -> Job | None:
        """One dead letter's final record, or None."""
        return await self.dead.get(task_id)

    async def purge_dead(self, task_id: str) -> bool:
        """Drop one dead letter; False when there was none by that id."""
        return bool(await self.dead.purge(task_id))

    async def requeue_dead(self, task_id: str) -> tuple[Requeued, int]:
        """Requeue a dead letter under its id; its outcome and (when requeued) its queue position."""
        outcome = await self.dead.requeue(task_id)
        position = await self.queue.position(task_id) if outcome is Requeued.REQUEUED else None
        return outcome, position or 0

    async def readiness(self) -> dict[str, Any]:
        """What ``/readyz`` reports; raises when Redis is unreachable, and when its primary has fewer replicas than an
        acknowledging write waits for (:meth:`~ttsq.store.connection.Replication.check`: every submit would be
        refused until one is back) — then the API is not ready."""
        await self.queue.ping()
        replicas = await self.queue.replication.check()
        await self._shared_secret.keep()
        return {
            "redis": "ok",
            **replicas,
            "workers": await self.heartbeats.live_count(),
            "queue_depth": await self.queue.depth(),
            "model": self.config.model,
            "notice": self.config.notice,
        }
