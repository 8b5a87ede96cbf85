"""Voice draws in Redis: which preview jobs a draw made, so that any API replica can answer for it.

A draw is one JSON record (``{ns}:draw:<id>`` on the home shard) that expires with its preview jobs' results
(``RESULT_TTL_S``): the candidates (seed → preview task) and the existing voices it measures them against (a
stored embedding, or a seed voice's own preview task whose job records the embedding the worker drew).
"""

from __future__ import annotations

import secrets

from pydantic import BaseModel

from ttsq.store.connection import RedisClient
from ttsq.store.keys import Keys

__all__ = ["Draw", "DrawCandidate", "DrawReference", "DrawStore"]


class DrawCandidate(BaseModel):
    seed: int
    task_id: str


class DrawReference(BaseModel):
    """An existing voice: its embedding when it is stored as one, else the task that records its seed's."""

    voice: str
    embedding: str | None = None
    task_id: str | None = None


class Draw(BaseModel):
    id: str
    keep: int
    language: str
    reader: str | None
    candidates: list[DrawCandidate]
    references: list[DrawReference]

    @property
    def task_ids(self) -> list[str]:
        return [c.task_id for c in self.candidates] + [r.task_id for r in self.references if r.task_id is not None]


class DrawStore:
    def __init__(self, redis: RedisClient, keys: Keys, ttl_s: int) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl_s = ttl_s

    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(12)

    async def save(self, draw: Draw) -> None:
        await self.redis.set(self.keys.draw(draw.id), draw.model_dump_json(), ex=self.ttl_s)

    async def get(self, draw_id: str) -> Draw | None:
        if not draw_id.isalnum() or len(draw_id) > 64:
            return None
        raw = await self.redis.get(self.keys.draw(draw_id))
        return None if raw is None else Draw.model_validate_json(raw)
