"""What every use case shares: the caller checks (whose tasks and voices a caller sees), the task-id signer, the
caller's token bucket, the service's settings and its refusals.

One place, so that the use cases (:mod:`.tasks`, :mod:`.listening`, :mod:`.voices`, :mod:`.dictionary`,
:mod:`.draws`, :mod:`.admin`) each ask the same questions the same way and none of them imports another to ask.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Literal

from ttsq.api.auth import Forbidden, Principal
from ttsq.domain.jobs import Job, Status
from ttsq.domain.voices import Voice
from ttsq.store.api_keys import TENANT
from ttsq.store.connection import STORE_ERRORS
from ttsq.store.queue import JobQueue
from ttsq.store.rate_limit import RateDecision, RateLimiter, RateLimitExceeded
from ttsq.store.task_ids import SharedTaskIdSecret, TaskIdSigner

log = logging.getLogger("ttsq.api")

StoreUnavailable = STORE_ERRORS
"""The job store (Redis) cannot be reached: redis-py's own errors (its cluster client's included), named for
what they mean to a router (one that has started a stream ends it with an error event; anywhere else it is a 503)."""


@dataclass(frozen=True)
class ServiceConfig:
    """What the use cases need from settings. Built by ``app.py``."""

    max_text_chars: int
    openai_max_input_chars: int
    """The longest ``input`` on ``/v1/audio/speech`` (``OPENAI_MAX_INPUT_CHARS``), in place of ``max_text_chars``."""
    max_ssml_chars: int
    """The longest ``ssml`` document as sent (``MAX_SSML_CHARS``); its depth and element count below."""
    max_ssml_depth: int
    max_ssml_elements: int
    model_identity: str
    """What cache keys say about the model (weights plus the settings that shape its audio)."""
    single_flight: bool
    model: str
    notice: str | None
    """A warning about the model that every submit answer carries (random weights)."""
    max_queued_per_key: int
    cache_scope: Literal["tenant", "global"]
    """Who shares cached results and jobs in flight: each key's tenant (its own, unless an admin grouped it),
    or every caller (``CACHE_SCOPE``; see :meth:`ttsq.api.service.tasks.TaskService.sharing_scope`)."""
    max_streams: int
    """Event and audio streams this process serves at once (:mod:`ttsq.api.stream_slots`)."""
    max_streams_per_key: int
    max_streams_per_tenant: int
    """Of those, what one tenant holds over all its keys (``MAX_STREAMS_PER_TENANT``, resolved)."""
    max_wait_s: float
    """The longest long-poll (``MAX_WAIT_S``): a longer ``wait`` is served as this one."""
    block_s: float
    """How long a long-poll waits for news before it reads its (injectable) clock again (``BLOCK_S``)."""
    max_reference_s: float
    """The longest reference recording a voice is made from (``MAX_REFERENCE_S``)."""
    consistent_voice: bool
    """One voice across a long text for requests that do not say (``CONSISTENT_VOICE``)."""
    voice_encode_timeout_s: float
    """How long a voice made from a recording waits for a worker's encoder (``VOICE_ENCODE_TIMEOUT_S``)."""
    stream_admission: Literal["off", "wait", "refuse"]
    """``refuse``: a submit while no worker has room for another real-time stream is a 429 (:mod:`ttsq.api.stream_admission`)."""
    no_worker_s: int
    """A waiter on a job while no worker has beaten for this long is told ``no_worker`` (``NO_WORKER_S``; 0: never)."""
    stream_key_recheck_s: float
    """How often a long-poll opened with a key asks whether it is still valid (``STREAM_KEY_RECHECK_S``)."""
    refine_wait_s: float
    """How long ``POST /v1/tts/refine`` waits for its refined text before answering with the task to poll (``REFINE_WAIT_S``)."""
    max_dialogue_lines: int
    """Most lines in one dialogue (``MAX_DIALOGUE_LINES``)."""
    max_dialogue_chars: int
    """Longest dialogue, its lines together (``MAX_DIALOGUE_CHARS``)."""
    max_document_chars: int
    """Longest document (``MAX_DOCUMENT_CHARS``): a submit with ``document: true``."""
    document_part_chars: int
    """A document's parts are at most this long (``DOCUMENT_PART_CHARS``)."""
    document_code: Literal["phrase", "skip"]
    document_emoji: Literal["remove", "name"]
    """How a document's code blocks, tables and emoji are read (``DOCUMENT_CODE``, ``DOCUMENT_EMOJI``)."""


class InvalidInput(Exception):
    """A request field that cannot be served, named so the client can fix it."""

    def __init__(self, field: str, message: str, value: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.value = value


class TaskNotFound(Exception):
    """No such task: never issued, forged, or its result has expired."""


_KEY_OWNER = re.compile(r"key:[0-9a-f]{12}")


def voice_owner(caller: Principal) -> str | None:
    """Whose voices ``caller`` sees, uses and makes by default: its key's tenant (:attr:`ApiKey.sharing_scope`: the
    tenant an admin grouped it into, else the key itself). Callers without a key are one tenant, whose voices are the
    global ones (docs/voices.md#tenants), so a deployment without keys works as before."""
    return caller.key.sharing_scope if caller.key is not None else None


def _owner_of(tenant: str) -> str:
    """``tenant`` as it names a voice's owner: a tenant's name (``acme`` → ``tenant:acme``), or ``key:<id>`` for a key
    that is a tenant of its own; :class:`InvalidInput` naming ``tenant`` otherwise."""
    if _KEY_OWNER.fullmatch(tenant):
        return tenant
    if TENANT.fullmatch(tenant):
        return f"tenant:{tenant}"
    raise InvalidInput(
        "tenant", "a tenant is 1-64 letters, digits, '_', '.' or '-' (or key:<id> for a key of its own)", tenant[:100]
    )


def viewed_owner(caller: Principal, tenant: str | None) -> str | None:
    """Whose view of the voices a read or delete acts in: the caller's own (:func:`voice_owner`), or, for an admin
    who names one, ``tenant``'s (:class:`~ttsq.api.auth.Forbidden` for anyone else: a tenant looks at its own)."""
    if tenant is None:
        return voice_owner(caller)
    if not caller.allows("admin"):
        raise Forbidden("admin")
    return _owner_of(tenant)


def new_voice_owner(caller: Principal, shared: bool, tenant: str | None) -> str | None:
    """Whose a new voice is: global when ``shared`` (an admin's catalogue), ``tenant``'s when an admin names one, else
    the caller's own tenant's (:func:`voice_owner`)."""
    if shared and tenant is not None:
        raise InvalidInput("shared", "give shared (a global voice) or tenant (one tenant's voice), not both")
    if shared:
        return None
    return voice_owner(caller) if tenant is None else _owner_of(tenant)


def shown(voice: Voice, caller: Principal) -> Voice:
    """``voice`` as ``caller`` may see it: whole to an admin (and to callers without a key, who act as one), without
    its prompt, transcript and embeddings to a ``tts`` key (:meth:`~ttsq.domain.voices.Voice.for_tts_key`)."""
    return voice if caller.allows("admin") else voice.for_tts_key()


def readable(job: Job, caller: Principal) -> bool:
    """Tasks submitted with a key are its (and admins'); tasks submitted without one, anyone holding the id's."""
    return job.readers is None or caller.is_admin or (caller.reader is not None and caller.reader in job.readers)


def detached(job: Job, caller: Principal) -> bool:
    """``caller`` joined ``job`` (or submitted it and others joined), then cancelled while others still held it.

    Its cancel only detached it (``cancel.lua``): it stays a reader but holds no share. To it the task is
    ``cancelled`` from then on — the answer it was given — while the job goes on for the others. Without a
    key a caller has no identity beyond its address, which anyone holding the id shares, so an anonymous
    caller sees the job as it is.
    """
    return (
        caller.reader is not None
        and job.readers is not None
        and caller.reader in job.readers
        and job.holders is not None
        and caller.subject not in job.holders
    )


def as_seen_by(job: Job, caller: Principal) -> Job:
    """The job as ``caller`` may see it: ``cancelled`` once it detached itself (:func:`detached`)."""
    if job.status is not Status.CANCELLED and detached(job, caller):
        return job.model_copy(update={"status": Status.CANCELLED})
    return job


class Common:
    """The shared pieces with state: the task-id signer (a configured one, else the secret shared in Redis, put back
    after a data loss) and the callers' token buckets. Every use case that signs an id or charges a caller holds this
    one object, so a process fetches the shared secret once."""

    def __init__(self, queue: JobQueue, signer: TaskIdSigner | None = None, rate_limiter: RateLimiter | None = None) -> None:
        # The put-back is throttled on this host's clock (a local rate, no deadline shared with anyone),
        # or on the queue's clock where a test pins it.
        throttle = queue.clock.pinned or time.monotonic
        self.shared_secret = SharedTaskIdSecret(queue.redis, queue.keys, throttle)
        self._signer = signer
        self.rate_limiter = rate_limiter

    async def signer(self) -> TaskIdSigner:
        """The task-id signer; without a configured secret, the one shared in Redis is fetched once."""
        if self._signer is None:
            self._signer = TaskIdSigner(await self.shared_secret.fetch())
        return self._signer

    async def pay(self, caller: Principal, cost: int = 1) -> RateDecision | None:
        """``cost`` tokens (one unless told) of ``caller``'s bucket, for work that is not paid by queuing it."""
        if self.rate_limiter is None:
            return None
        decision = await self.rate_limiter.take(caller.subject, cost)
        if not decision.allowed:
            raise RateLimitExceeded(decision)
        return decision


def ends_for_reader(fields: dict[str, bytes]) -> bool:
    """A stream entry after which a reader must read the job again: its end, or a caller detaching itself."""
    return "end" in fields or "detached" in fields
