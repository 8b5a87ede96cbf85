"""Signed task ids: forged or random ids are refused without touching Redis.

An id is ``<uuid4>.<tag>`` where the tag is a truncated HMAC-SHA256 of the UUID under a secret
shared by every API replica. Checking it is pure CPU, so a flood of made-up ids (cache
penetration) costs Redis nothing, and — unlike a per-process Bloom filter of issued ids — every
replica accepts every other replica's ids, including ids issued before a restart.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid

_TAG_BYTES = 12


class TaskIdSigner:
    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the task-id secret must be at least 16 bytes")
        self._secret = secret

    def _tag(self, random_part: str) -> str:
        digest = hmac.new(self._secret, random_part.encode(), hashlib.sha256).digest()[:_TAG_BYTES]
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")

    def new(self) -> str:
        """A fresh id: 122 random bits from the OS CSPRNG (uuid4) plus its 96-bit tag."""
        random_part = str(uuid.uuid4())
        return f"{random_part}.{self._tag(random_part)}"

    def verify(self, task_id: str) -> bool:
        random_part, dot, tag = task_id.partition(".")
        if not dot or len(random_part) != 36 or len(tag) != 16:
            return False
        return hmac.compare_digest(tag, self._tag(random_part))
