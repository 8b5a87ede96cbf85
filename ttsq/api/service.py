"""The API's use cases: submit a text, look a task up, stream its audio, manage voices.

Every router (native, OpenAI-compatible, voices, admin) calls this one service; routers never
import each other, and nothing here knows about HTTP. Routers import nothing below ``ttsq.api``:
what they name of the layers beneath (a job's status, a cancel's outcome, a voice, a stream's
format) is re-exported here, in ``__all__`` (``tests/test_architecture.py`` holds them to it).

Failures are the service's own exceptions (:class:`InvalidInput`, :class:`TaskNotFound`,
:class:`ttsq.domain.voices.VoiceError`), the store's refusals (:class:`ttsq.store.queue.QueueFullError`,
:class:`ttsq.store.rate_limit.RateLimitExceeded`) and redis-py's errors for an outage
(:data:`StoreUnavailable`), raised as they come: :mod:`ttsq.api.errors` turns each into its HTTP
answer once, in the shape each route family promises.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from ttsq.api.auth import Forbidden, Principal
from ttsq.api.metrics import SubmitOutcome
from ttsq.api.schemas import SubmitRequest, SubmitResponse, TaskStatus, WebhookStatus
from ttsq.api.stream_slots import StreamSlots, hold, when_over
from ttsq.domain import context
from ttsq.domain.audio import CONTENT_TYPES, SAMPLE_RATE
from ttsq.domain.blends import MAX_BLEND_COMPONENTS, BlendError, BlendPart, blend_parts, is_blend, parse_blend
from ttsq.domain.cache_key import cache_key
from ttsq.domain.captions import srt, vtt
from ttsq.domain.draw import rank
from ttsq.domain.encoders import STREAM_CONTENT_TYPES, StreamFormat, encoded
from ttsq.domain.jobs import DEFAULT_SAMPLING_SEED, MAX_SEED, Job, Status, TTSParams, draw_seed
from ttsq.domain.pronunciation import (
    SCOPE_PATTERN,
    DictionaryError,
    DictionaryTimeout,
    EntryKind,
    EntryLanguage,
    PronunciationEntry,
    caller_scopes,
    check_scope,
)
from ttsq.domain.reference_audio import ReferenceAudioError, check_reference, check_transcript, decode_reference
from ttsq.domain.sampling import DEFAULT_SAMPLING, MAX_SPEED, MIN_SPEED
from ttsq.domain.ssrf import RefusedUrl, SsrfGuard, UnresolvableUrl
from ttsq.domain.text import OPENAI_MAX_INPUT_CHARS, TextError, canonical_text, validate_text
from ttsq.domain.voices import OPENAI_VOICES, VOICE_NAME, Voice, VoiceError, validate_voice_name
from ttsq.store.api_keys import TENANT
from ttsq.store.cache import ResultCache
from ttsq.store.connection import STORE_ERRORS
from ttsq.store.deliveries import DeliveryQueue, DeliverySummary
from ttsq.store.draws import Draw, DrawCandidate, DrawReference, DrawStore
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.listener import JobListener, ListenerConfig
from ttsq.store.pronunciation import EntryConflict, PronunciationStore
from ttsq.store.queue import JobQueue
from ttsq.store.rate_limit import RateDecision, RateLimiter, RateLimitExceeded
from ttsq.store.replies import Cancelled, Requeued
from ttsq.store.streams import AudioStreams, StreamFailed, chunks_done, pcm_pieces
from ttsq.store.task_ids import SharedTaskIdSecret, TaskIdSigner
from ttsq.store.voice_encodings import EncodeFailed, EncodeTimedOut, VoiceEncodings
from ttsq.store.voices import VoiceRegistry

__all__ = [
    "Download",
    "DrawConfig",
    "DrawOutcome",
    "DrawnVoice",
    "InvalidInput",
    "ServerEvent",
    "ServiceConfig",
    "Submitted",
    "TTSService",
    "TaskNotFound",
    "VoiceDraws",
    "Webhooks",
    "build_params",
    "readable",
]
# What the routers name of the layers beneath, re-exported: they import nothing below ttsq.api.
__all__ += [
    "CAPTION_CONTENT_TYPES",
    "CONTENT_TYPES",
    "DEFAULT_SAMPLING",
    "MAX_SEED",
    "MAX_SPEED",
    "MIN_SPEED",
    "OPENAI_MAX_INPUT_CHARS",
    "OPENAI_VOICES",
    "SCOPE_PATTERN",
    "STREAM_CONTENT_TYPES",
    "VOICE_NAME",
    "Cancelled",
    "CaptionFormat",
    "DrawLanguage",
    "EntryConflict",
    "EntryKind",
    "EntryLanguage",
    "Job",
    "PronunciationEntry",
    "Requeued",
    "Status",
    "StoreUnavailable",
    "StreamFailed",
    "StreamFormat",
    "Voice",
    "validate_voice_name",
]
__all__ += ["MAX_BLEND_COMPONENTS", "is_blend"]

log = logging.getLogger("ttsq.api")

StoreUnavailable = STORE_ERRORS
"""The job store (Redis) cannot be reached: redis-py's own errors (its cluster client's included), named for
what they mean to a router (one that has started a stream ends it with an error event; anywhere else it is a 503)."""

CaptionFormat = Literal["srt", "vtt", "json"]
CAPTION_CONTENT_TYPES: dict[str, str] = {
    "srt": "application/x-subrip; charset=utf-8",
    "vtt": "text/vtt; charset=utf-8",
    "json": "application/json",
}

STATUS_EVENT_FIELDS = {"task_id", "status", "queue_position", "chunks_done", "chunks_total", "error"}
"""What a ``status`` event says of a task (:class:`ttsq.api.schemas.TaskEvent`)."""
_ENTRY_ID = re.compile(r"[0-9]{1,20}(-[0-9]{1,20})?")


@dataclass(frozen=True)
class ServerEvent:
    """One server-sent event of a task's event stream: its ``id`` (the id of the task's stream entry it reflects, so
    that ``Last-Event-ID`` resumes right after it), its name and its JSON data."""

    id: str
    kind: Literal["status", "timing"]
    data: dict[str, Any]


@dataclass(frozen=True)
class ServiceConfig:
    """What the use cases need from settings. Built by ``app.py``."""

    max_text_chars: int
    openai_max_input_chars: int
    """The longest ``input`` on ``/v1/audio/speech`` (``OPENAI_MAX_INPUT_CHARS``), in place of ``max_text_chars``."""
    model_identity: str
    """What cache keys say about the model (weights plus the settings that shape its audio)."""
    single_flight: bool
    model: str
    notice: str | None
    """A warning about the model that every submit answer carries (random weights)."""
    max_queued_per_key: int
    cache_scope: Literal["tenant", "global"]
    """Who shares cached results and jobs in flight: each key's tenant (its own, unless an admin grouped it),
    or every caller (``CACHE_SCOPE``; see :meth:`TTSService.sharing_scope`)."""
    max_streams: int
    """Event and audio streams this process serves at once (:mod:`ttsq.api.stream_slots`)."""
    max_streams_per_key: int
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


_Piece = TypeVar("_Piece", bytes, str)
"""A streamed body's piece: audio bytes, or a server-sent event."""


class InvalidInput(Exception):
    """A request field that cannot be served, named so the client can fix it."""

    def __init__(self, field: str, message: str, value: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.value = value


class TaskNotFound(Exception):
    """No such task: never issued, forged, or its result has expired."""


@dataclass(frozen=True)
class Download:
    """What ``GET /v1/tts/result/{id}`` has to say: the audio, or where the task stands."""

    job: Job
    audio: bytes | None
    status: TaskStatus | None


def build_params(
    body: SubmitRequest,
    voice: Voice | None,
    *,
    max_text_chars: int,
    model_identity: str,
    scope: str | None = None,
    first_chunk: int = 0,
) -> TTSParams:
    """A job's parameters from a request: the voice/seed rule and the checks that need settings.

    A ``voice`` (already resolved from ``body.voice``) fixes the speaker; a ``seed`` seeds
    sampling and, without a voice, also draws the speaker. With neither, a fresh seed is drawn
    here (and reported) — the only random case. ``scope`` is the caller's sharing scope, part of the
    cache key (:func:`ttsq.domain.cache_key.cache_key`).
    """
    try:
        text = validate_text(body.text, max_text_chars)
    except TextError as exc:
        raise InvalidInput("text", str(exc), body.text[:200]) from exc
    deterministic = voice is not None or body.seed is not None
    speaker_embedding = None
    if voice is not None:
        seed = DEFAULT_SAMPLING_SEED if body.seed is None else body.seed
        speaker_seed, speaker_embedding = voice.seed, voice.embedding
    else:
        seed = draw_seed() if body.seed is None else body.seed
        speaker_seed = seed
    # Every value below is validated already (the request model, validate_text): construct without re-validating.
    params = TTSParams.model_construct(
        text=text,
        voice=voice.name if voice is not None else None,
        voice_owner=voice.owner if voice is not None else None,
        speaker_seed=speaker_seed,
        speaker_embedding=speaker_embedding,
        speaker_prompt=voice.prompt if voice is not None else None,
        prompt_text=voice.transcript if voice is not None else None,
        speaker_blend=voice.components if voice is not None else None,
        # A reference voice is anchored by its own prompt already (upstream's split_text keeps a given spk_smp too).
        consistent_voice=bool(body.consistent_voice) and (voice is None or voice.prompt is None),
        seed=seed,
        format=body.format,
        deterministic=deterministic,
        first_chunk=first_chunk,
        **dict(body.sampling),
    )
    params.cache_key = cache_key(params, model_identity, scope)
    return params


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


@dataclass(frozen=True)
class Webhooks:
    """Completion webhooks, when configured: the SSRF guard a submit checks ``callback_url`` with, and
    the delivery log a task's status reports from. The deliverer itself runs beside the routes (``app.py``)."""

    guard: SsrfGuard
    deliveries: DeliveryQueue


@dataclass(frozen=True)
class Submitted:
    """A submit's answer, and the caller's token bucket after paying for it (``RateLimit-*`` headers)."""

    answer: SubmitResponse
    rate: RateDecision | None


class TTSService:
    def __init__(
        self,
        queue: JobQueue,
        cache: ResultCache,
        voices: VoiceRegistry,
        config: ServiceConfig,
        signer: TaskIdSigner | None = None,
        on_submit: Callable[[SubmitOutcome], None] | None = None,
        webhooks: Webhooks | None = None,
        rate_limiter: RateLimiter | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        pronunciation: PronunciationStore | None = None,
        draws: VoiceDraws | None = None,
        listener: JobListener | None = None,
    ) -> None:
        self.queue = queue
        # What lives beside the jobs, on the queue's connection, names and clock:
        self.streams = AudioStreams(queue.redis, queue.shards, queue.config.result_ttl_s)
        self.listener = listener or JobListener(
            queue.redis, queue.shards, ListenerConfig(block_s=config.block_s, retry_s=0.5, outage_s=10.0)
        )
        """The process's one follower of job streams: every event stream, audio stream and long-poll waits on it
        (the app's lifespan runs it)."""
        self._positions: dict[str, asyncio.Future[int | None]] = {}
        self.heartbeats = Heartbeats(queue.redis, queue.shards, queue.config.heartbeat_ttl_s, queue.clock)
        # The put-back is throttled on this host's clock (a local rate, no deadline shared with anyone),
        # or on the queue's clock where a test pins it.
        throttle = queue.clock.pinned or time.monotonic
        self._shared_secret = SharedTaskIdSecret(queue.redis, queue.keys, throttle)
        self.rate_limiter = rate_limiter
        self.cache = cache
        self.voices = voices
        self.config = config
        self._signer = signer
        self._on_submit = on_submit or (lambda outcome: None)
        self.webhooks = webhooks
        self.stream_slots = StreamSlots(config.max_streams, config.max_streams_per_key)
        self.monotonic = monotonic
        """The clock a long-poll's deadline is kept on (a test sets its own)."""
        self.encodings = VoiceEncodings(queue.redis, queue.keys, config.block_s)
        """Reference recordings → speaker prompts, by a worker (:meth:`create_reference_voice`)."""
        self.pronunciation = pronunciation
        """The pronunciation dictionary (docs/dictionary.md); None: texts go to the model as sent."""
        self.draws = draws
        """Voice draws (``POST /v1/voices/draw``); None: not offered."""
        self._abandoning: set[asyncio.Task[None]] = set()
        """Cancels of abandoned tasks under way (:meth:`cancelled_when_abandoned`), held until they end."""

    async def signer(self) -> TaskIdSigner:
        """The task-id signer; without a configured secret, the one shared in Redis is fetched once."""
        if self._signer is None:
            self._signer = TaskIdSigner(await self._shared_secret.fetch())
        return self._signer

    # ---- submit ----------------------------------------------------------------------------

    async def submit(
        self,
        body: SubmitRequest,
        caller: Principal,
        voice: Voice | None = None,
        *,
        max_text_chars: int | None = None,
        first_chunk: int = 0,
    ) -> Submitted:
        """Answer from the cache, join an identical job in flight, or queue a new one.

        ``voice`` is ``body.voice`` already resolved (the OpenAI route maps its own names first); ``max_text_chars``
        replaces ``MAX_TEXT_CHARS`` (the OpenAI route's own limit); ``first_chunk`` places the text in a longer one
        (a realtime session's later sentence: :class:`ttsq.domain.jobs.TTSParams`).
        The task is readable by ``caller``'s key (and admins). The cache and single-flight look only within
        ``caller``'s sharing scope (:meth:`sharing_scope`), so an answer never says whether another scope asked
        for the same audio, and never names another scope's task; a cache hit is a task of its own. A valid
        submit pays one token of ``caller``'s bucket — inside the script that queues the job, so paying
        costs no round trip of its own (a cache hit pays on its own; a text that runs a regex entry of the dictionary
        pays before it runs, :meth:`pronounced`) — and raises
        :class:`~ttsq.store.rate_limit.RateLimitExceeded` when the bucket is empty.
        """
        if voice is None and body.voice is not None:
            voice = await self.resolve_voice(body.voice, caller)
        body, paid = await self.pronounced(body, caller, max_text_chars or self.config.max_text_chars)
        params = self.build_params(body, voice, self.sharing_scope(caller), max_text_chars, first_chunk)
        callback_url = body.callback_url or (caller.key.callback_url if caller.key is not None else None)
        if callback_url is not None:
            params.callback_url = await self.check_callback_url(callback_url)
        signer = await self.signer()
        # The job's shard, by its cache key (identical requests meet on one shard: single-flight, the cache); its id names it.
        shard = self.queue.shards.place(params.cache_key).label
        if params.cache_key is not None:
            hit = await self.cache.find(params.cache_key)
            if hit is not None:
                rate = paid or await self._pay(caller)
                entry = hit.entry
                job = await self.queue.record_done(
                    signer.new(shard),
                    params,
                    entry.audio,
                    entry.content_type,
                    entry.duration_s,
                    reader=caller.reader,
                    captions=entry.captions,
                )
                self._on_submit(f"cache_hit_{hit.level}")  # type: ignore[arg-type]
                context.task_id.set(job.id)
                log.info("task %s done from the cache (%s)", job.id, hit.level)
                answer = SubmitResponse.model_construct(
                    task_id=job.id,
                    status=Status.DONE,
                    queue_position=None,
                    estimate_s=0.0,
                    seed=params.seed,
                    deterministic=True,
                    cached=True,
                    notice=self.config.notice,
                )
                return Submitted(answer, rate)
        await self._shared_secret.keep()  # put back after a Redis data loss (see SharedTaskIdSecret)
        result = await self.queue.enqueue(
            signer.new(shard),
            params,
            # A joiner would never be called back: the job in flight carries the first submitter's callback.
            single_flight=self.config.single_flight and params.callback_url is None,
            owner=caller.subject,
            reader=caller.reader,
            max_per_owner=self.config.max_queued_per_key,
            charge=self.rate_limiter.charge(caller.subject) if self.rate_limiter is not None and paid is None else None,
            tenant=caller.tenant,
            priority=caller.priority(body.priority),
            weight=caller.weight,
        )
        self._on_submit("joined" if result.joined else "queued")
        context.task_id.set(result.job.id)
        log.info(
            "task %s %s at position %s (%d chars, %s)",
            result.job.id,
            "joined in flight" if result.joined else "queued",
            result.position,
            len(params.text),
            params.format,
        )
        answer = SubmitResponse.model_construct(
            task_id=result.job.id,
            status=result.job.status,
            queue_position=result.position,
            estimate_s=result.estimate_s,
            seed=params.seed,
            deterministic=params.deterministic,
            joined=result.joined,
            notice=self.config.notice,
        )
        return Submitted(answer, result.rate or paid)

    async def _pay(self, caller: Principal, cost: int = 1) -> RateDecision | None:
        """``cost`` tokens (one unless told) of ``caller``'s bucket, for work that is not paid by queuing it."""
        if self.rate_limiter is None:
            return None
        decision = await self.rate_limiter.take(caller.subject, cost)
        if not decision.allowed:
            raise RateLimitExceeded(decision)
        return decision

    async def check_callback_url(self, url: str) -> str:
        """Refuse a webhook target the SSRF guard would refuse, at submit rather than at delivery.

        A name that does not resolve now is accepted (the receiver may not be up yet); every
        delivery resolves and checks again, and connects only to the addresses it approved.
        """
        if self.webhooks is None:
            raise InvalidInput("callback_url", "webhooks are not configured on this service (WEBHOOK_SECRET)", url)
        try:
            await self.webhooks.guard.check(url)
        except RefusedUrl as exc:
            raise InvalidInput("callback_url", str(exc), url[:200]) from exc
        except UnresolvableUrl:
            pass
        return url

    async def resolve_voice(self, name: str, caller: Principal, field: str = "voice") -> Voice:
        """The named voice (or blend: :meth:`resolve_blend`) among those ``caller`` sees (:func:`voice_owner`), or
        :class:`InvalidInput` naming the field and the voices it sees — never another tenant's."""
        if is_blend(name):
            return await self.resolve_blend(name, caller, field)
        owner = voice_owner(caller)
        voice = await self.voices.get(name, owner)
        if voice is None:
            raise InvalidInput(field, f"unknown voice {name!r}; available: {await self._visible_names(owner)}", name)
        return voice

    async def resolve_named_voice(self, name: str, caller: Principal) -> Voice | None:
        """The voice ``name`` means to ``caller``, whole (to synthesise with: a reference voice's prompt included), or
        None when it sees none by that name."""
        return await self.voices.get(name, voice_owner(caller))

    async def _visible_names(self, owner: str | None) -> str:
        return ", ".join(v.name for v in await self.voices.list(owner))

    async def pronounced(
        self, body: SubmitRequest, caller: Principal, max_text_chars: int
    ) -> tuple[SubmitRequest, RateDecision | None]:
        """``body`` with its text rewritten by the caller's pronunciation dictionary, before the text is cleaned,
        normalised and split (so the job's text and its cache key are the rewritten text's); and the submit's token,
        when it was taken here.

        A text already too long as sent is left to :func:`build_params` to refuse; one the dictionary made too long
        is refused here, saying so (``max_text_chars``: the route's limit). Regex entries may each run up to their
        time limit, so when the caller's entries include one, the submit's token is taken first (a caller with an
        empty bucket gets its 429 before any regex runs, and a submit refused by a regex's time limit has paid like
        any other) and the entries run in a thread, the ``regex`` module releasing the GIL, off the event loop. A
        regex entry past its time limit refuses the submit naming the entry.
        """
        if self.pronunciation is None or len(body.text) > max_text_chars:
            return body, None
        dictionary = await self.pronunciation.dictionary()
        key = caller.key
        scopes = caller_scopes(key.id if key else None, key.tenant if key else None)
        paid = None
        try:
            if dictionary.runs_regexes(body.text, scopes):
                paid = await self._pay(caller)
                text = await asyncio.to_thread(dictionary.apply, body.text, scopes)
            else:
                text = dictionary.apply(body.text, scopes)
        except DictionaryTimeout as exc:
            raise InvalidInput("text", str(exc), body.text[:200]) from exc
        if text == body.text:
            return body, paid
        if len(text) > max_text_chars:
            raise InvalidInput(
                "text",
                f"text is {len(text)} characters long once the pronunciation dictionary is applied; "
                f"the limit is {max_text_chars}",
                body.text[:200],
            )
        return body.model_copy(update={"text": text}), paid

    async def resolve_blend(
        self, expression: str, caller: Principal, field: str = "voice", aliases: Mapping[str, str] | None = None
    ) -> Voice:
        """A blend written in a request (``"zh_female*0.7+narrator*0.3"``) as a voice of kind ``blend``: each name
        looked up among the voices ``caller`` sees (through ``aliases``: OpenAI's names on the OpenAI route), resolved
        to its seed or embedding and weighed (:func:`ttsq.domain.blends.blend_parts`); any problem is a 422 naming
        ``field``. A blend of any of the caller's own voices is its tenant's (``owner``), as its cache key must say."""
        try:
            terms = parse_blend(expression)
        except BlendError as exc:
            raise InvalidInput(field, str(exc), expression[:200]) from exc
        names = [(name if aliases is None else aliases.get(name, name), w) for name, w in terms]
        parts, owned = await self._blend_parts(names, voice_owner(caller), field)
        return Voice(name=expression, kind="blend", components=parts, owner=voice_owner(caller) if owned else None)

    async def _blend_parts(self, terms: Sequence[tuple[str, float]], owner: str | None, field: str) -> tuple[list[BlendPart], bool]:
        """The blend's parts among the voices ``owner`` sees, and whether any of them is ``owner``'s own."""
        voices: list[tuple[Voice, float]] = []
        for name, weight in terms:
            voice = await self.voices.get(name, owner)
            if voice is None:
                raise InvalidInput(
                    field, f"unknown voice {name!r} in the blend; available: {await self._visible_names(owner)}", name
                )
            voices.append((voice, weight))
        try:
            return blend_parts(voices), any(voice.owner is not None for voice, _ in voices)
        except BlendError as exc:
            raise InvalidInput(field, str(exc)) from exc

    def sharing_scope(self, caller: Principal) -> str | None:
        """Whom ``caller`` shares cached results and jobs in flight with (part of the cache key).

        ``CACHE_SCOPE=tenant``: a key, its tenant's keys (itself alone unless an admin grouped it); callers without a
        key, each other (they can read any task whose id they hold anyway). ``CACHE_SCOPE=global``: everyone.
        """
        if self.config.cache_scope == "global" or caller.key is None:
            return None
        return caller.key.sharing_scope

    def build_params(
        self,
        body: SubmitRequest,
        voice: Voice | None,
        scope: str | None = None,
        max_text_chars: int | None = None,
        first_chunk: int = 0,
    ) -> TTSParams:
        if body.consistent_voice is None and self.config.consistent_voice:
            body = body.model_copy(update={"consistent_voice": True})
        limit = self.config.max_text_chars if max_text_chars is None else max_text_chars
        return build_params(
            body, voice, max_text_chars=limit, model_identity=self.config.model_identity, scope=scope, first_chunk=first_chunk
        )

    # ---- look up ---------------------------------------------------------------------------

    async def job(self, task_id: str, caller: Principal) -> Job:
        """The job, or :class:`TaskNotFound`. A forged, random or malformed id costs no Redis command.

        Another key's task is "not found" too, exactly like a task that never existed: the answer
        never tells a caller that an id it guessed or saw belongs to someone else. A task the caller
        detached itself from is ``cancelled`` to it (:func:`as_seen_by`).
        """
        return as_seen_by(await self._readable_job(task_id, caller), caller)

    async def _readable_job(self, task_id: str, caller: Principal) -> Job:
        job = await self.queue.get(task_id) if (await self.signer()).verify(task_id) else None
        if job is None or not readable(job, caller):
            raise TaskNotFound(f"no task {task_id!r}: it never existed or its result has expired")
        context.task_id.set(job.id)
        return job

    async def cancel(self, task_id: str, caller: Principal) -> Cancelled:
        """Cancel the caller's interest in a task (see :class:`ttsq.store.replies.Cancelled`); idempotent.

        A caller that detached itself already is answered ``cancelled`` again and changes nothing: the job
        is the others' now.
        """
        job = await self._readable_job(task_id, caller)
        if detached(job, caller):
            return Cancelled.DETACHED
        outcome = await self.queue.cancel(job, caller.reader, caller.subject)
        log.info("task %s cancel by %s: %s", job.id, caller.subject, outcome)
        return outcome

    def cancelled_when_abandoned(
        self, pieces: AsyncIterator[_Piece], task_id: str, caller: Principal, request_state: Any
    ) -> AsyncIterator[_Piece]:
        """``pieces``, as the body of a request that queued ``task_id`` and is the only one listening to it (the OpenAI
        route: its answer is the audio). When the response is over before the body ended — its client went away, before
        or after the first audio — the task is abandoned (:meth:`abandon`) in an asyncio task of its own (what is over
        may have been cancelled), once :func:`~ttsq.api.stream_slots.releasing` says so: it runs whatever happened."""
        ended = False

        async def body() -> AsyncIterator[_Piece]:
            nonlocal ended
            async for piece in pieces:
                yield piece
            ended = True

        def over() -> None:
            if not ended:
                task = asyncio.get_running_loop().create_task(self._abandon_quietly(task_id, caller))
                self._abandoning.add(task)
                task.add_done_callback(self._abandoning.discard)

        when_over(request_state, over)
        return body()

    async def _abandon_quietly(self, task_id: str, caller: Principal) -> None:
        try:
            await self.abandon(task_id, caller)
        except STORE_ERRORS as exc:  # nobody is left to answer; the job then runs to its end, as before
            log.warning("task %s: its listener went away, and Redis could not be told: %s", task_id, exc)

    async def abandon(self, task_id: str, caller: Principal) -> Cancelled | None:
        """``caller`` queued this task for one request that streams its audio, and that request's client went away
        before the audio ended: cancel it — unless anyone else still wants it, and then change nothing.

        Wanting it: a webhook waits for its outcome (``callback_url``), or a submit joined it in flight, the same
        caller's included (``Job.joins``, checked inside the cancel script: :meth:`JobQueue.cancel` with ``sole``).
        A running job is stopped by its worker at its next lease renewal, its rows leave the engine, and it ends
        ``cancelled`` (docs/api.md). None when there was nothing to cancel (no such job, or it is a webhook's)."""
        try:
            job = await self._readable_job(task_id, caller)
        except TaskNotFound:
            return None
        if job.params.callback_url is not None or job.status.is_final:
            return None
        outcome = await self.queue.cancel(job, caller.reader, caller.subject, sole=True)
        log.info("task %s: its only listener went away: %s", job.id, outcome)
        return outcome

    # ---- operators ------------------------------------------------------------------------

    async def dead_letters(self, limit: int) -> tuple[list[Job], int]:
        """The newest ``limit`` dead letters and how many there are."""
        return await self.queue.dead_letters(limit), await self.queue.dead_letter_count()

    async def dead_letter(self, task_id: str) -> Job | None:
        """One dead letter's final record, or None."""
        return await self.queue.dead_letter(task_id)

    async def purge_dead(self, task_id: str) -> bool:
        """Drop one dead letter; False when there was none by that id."""
        return bool(await self.queue.purge_dead(task_id))

    async def requeue_dead(self, task_id: str) -> tuple[Requeued, int]:
        """Requeue a dead letter under its id; its outcome and (when requeued) its queue position."""
        outcome = await self.queue.requeue_dead(task_id)
        position = await self.queue.position(task_id) if outcome is Requeued.REQUEUED else None
        return outcome, position or 0

    async def status(self, job: Job) -> TaskStatus:
        position = await self.queue.position(job.id) if job.status is Status.QUEUED else None
        progress = await self.streams.progress(job.id) if job.status is not Status.QUEUED else None
        status = TaskStatus.of(job, position, progress)
        if job.params.callback_url is not None and self.webhooks is not None:
            summary = DeliverySummary.of(await self.webhooks.deliveries.log(job.id))
            status.webhook = WebhookStatus.model_validate(summary, from_attributes=True)  # the body is the summary, field for field
        return status

    async def download(self, task_id: str, caller: Principal, wait_s: float = 0.0) -> Download:
        """The audio of a finished task; otherwise its status (pending, failed or cancelled), once it has
        ended or after ``wait_s`` (:meth:`wait_for_end`)."""
        job = await self.wait_for_end(await self.job(task_id, caller), caller, wait_s)
        if job.status is Status.DONE:
            audio = await self.queue.result(task_id)
            if audio is None:
                raise TaskNotFound(f"the result of task {task_id!r} has expired")
            return Download(job, audio, None)
        return Download(job, None, await self.status(job))

    async def wait_for_end(self, job: Job, caller: Principal, wait_s: float) -> Job:
        """``job`` as ``caller`` sees it once it has ended, or after ``wait_s`` seconds (at most ``MAX_WAIT_S``) as it is then.

        No polling and no Redis connection of its own: the wait is a subscription to the process's listener
        (:mod:`ttsq.store.listener`), which follows the job's stream, where every ending is marked in the step that
        ends the job (``finish.lua``), as is a caller detaching itself (``cancel.lua``). The subscription starts
        before the job is read again, so an end written between the two is still seen. Cost per waiter: one
        ``XREVRANGE`` and one ``GET`` to start, one ``GET`` when its job ends; nothing while it waits. The deadline is
        kept on :attr:`monotonic`, read at least every ``BLOCK_S``.
        """
        deadline = self.monotonic() + min(wait_s, self.config.max_wait_s)
        if job.status.is_final or self.monotonic() >= deadline:
            return job
        async with self.listener.follow(job.id, None) as subscription:
            current = await self.job(job.id, caller)
            while not current.status.is_final:
                remaining = deadline - self.monotonic()
                if remaining <= 0:
                    break
                update = await subscription.next(min(remaining, self.config.block_s))
                if update.gone or any(_ends_for_reader(fields) for _, fields in update.entries):
                    current = await self.job(job.id, caller)
        return current

    @staticmethod
    def captions(job: Job, fmt: CaptionFormat) -> str | None:
        """A finished job's cues as SubRip, WebVTT or a JSON list (:mod:`ttsq.domain.captions`); None when its
        worker recorded none (a result stored before captions were recorded)."""
        if job.captions is None:
            return None
        if fmt == "srt":
            return srt(job.captions, SAMPLE_RATE)
        if fmt == "vtt":
            return vtt(job.captions, SAMPLE_RATE)
        return json.dumps([cue.as_json(SAMPLE_RATE) for cue in job.captions], ensure_ascii=False)

    async def events(
        self, job: Job, caller: Principal, last_event_id: str | None = None
    ) -> AsyncGenerator[list[ServerEvent]]:
        """The task's ``status``, as ``caller`` sees it, each time it changes, and a ``timing`` event (a live caption
        cue) as each chunk's audio is published, until the task ends.

        Pushed, not polled: the events come from the task's stream through the process's listener, which marks an
        attempt starting or waiting, each piece, a detached caller and the end. A queued task's position is read
        again only when jobs left its shard's queue (``claim.lua``/``cancel.lua`` note it), once per task however
        many clients follow it. Each event's id is the stream entry it reflects: with ``last_event_id`` (SSE's
        ``Last-Event-ID``) the stream resumes after it, repeating no ``timing`` event and missing none (a ``status``
        event, which states where the task stands, is sent again first).

        Yielded in batches: the events that one read of the stream gives (a piece's ``timing`` and ``status``), so that
        the route writes them at once. With a thousand clients on one process each write is a system call (about a
        third of the API's time from a piece's publication to its clients' first byte, ``bench.listeners``), and one
        write per client per piece is half the calls of two.
        """
        after = last_event_id if last_event_id is not None and _ENTRY_ID.fullmatch(last_event_id) else "0"
        cued = -1  # a re-run attempt republishes its cues from the first (an attempt is deterministic): each is sent once

        def add_cue(batch: list[ServerEvent], entry_id: str, fields: dict[str, bytes]) -> None:
            """The entry's ``timing`` event, unless it is no piece or its cue was sent already."""
            nonlocal cued
            cue = _timing(fields)
            if cue is not None and cue["index"] > cued:
                cued = cue["index"]
                batch.append(ServerEvent(entry_id, "timing", cue))

        async with self.listener.follow(job.id, after) as subscription:
            batch: list[ServerEvent] = []
            for entry_id, fields in subscription.backlog:
                add_cue(batch, entry_id, fields)
            position = subscription.seen
            current = await self.job(job.id, caller)
            last = await self._status_event(current)
            yield [*batch, ServerEvent(position, "status", last)]
            while not current.status.is_final:
                update = await subscription.next()
                if update.gone:
                    return
                batch = []
                for entry_id, fields in update.entries:
                    add_cue(batch, entry_id, fields)
                    if _ends_for_reader(fields):
                        current = await self.job(job.id, caller)
                        event = await self._status_event(current)
                    else:
                        event = await self._follow(job.id, last, fields)
                    if event != last:
                        batch.append(ServerEvent(entry_id, "status", event))
                        last = event
                    if current.status.is_final:
                        break
                if update.moved and last["status"] == Status.QUEUED.value and not current.status.is_final:
                    seen = subscription.seen
                    moved_to = await self._position(job.id)
                    # None: the task itself left the queue; its own stream says how (an attempt starts, or it ended).
                    if moved_to is not None and moved_to != last["queue_position"]:
                        last = {**last, "queue_position": moved_to}
                        batch.append(ServerEvent(seen, "status", last))
                if batch:
                    yield batch
            if current.status is Status.DONE and current.captions is not None and await self.streams.progress(job.id) is None:
                # A job whose stream holds no piece (one chunk, a cache hit, an attempt that could not publish) has its
                # cues only in its record: those not sent yet are sent from there.
                cues = [
                    ServerEvent(position, "timing", _cue_event(caption.index, caption.start, caption.end, caption.text))
                    for caption in current.captions[cued + 1 :]
                ]
                if cues:
                    yield cues

    async def _status_event(self, job: Job) -> dict[str, Any]:
        return (await self.status(job)).model_dump(mode="json", include=STATUS_EVENT_FIELDS)

    async def _follow(self, job_id: str, last: dict[str, Any], fields: dict[str, bytes]) -> dict[str, Any]:
        """The status event after one stream entry that does not end the task."""
        if "pcm" in fields:
            done, total = chunks_done(fields), int(fields["total"])
            return {**last, "status": Status.RUNNING.value, "queue_position": None, "chunks_done": done, "chunks_total": total}
        if fields.get("status") == b"running":
            return {**last, "status": Status.RUNNING.value, "queue_position": None, "chunks_done": None, "chunks_total": None}
        if fields.get("status") == b"queued":  # a retry waits out its backoff: not in line, no position
            return {**last, "status": Status.QUEUED.value, "queue_position": await self._position(job_id), "chunks_done": None}
        return last

    async def _position(self, job_id: str) -> int | None:
        """The task's queue position, read once for every client of this process that asks at the same moment."""
        pending = self._positions.get(job_id)
        if pending is None:
            pending = self._positions[job_id] = asyncio.ensure_future(self.queue.position(job_id))
            pending.add_done_callback(lambda _: self._positions.pop(job_id, None))
        return await asyncio.shield(pending)

    def open_stream(self, caller: Principal, request_state: Any) -> None:
        """Take one of this process's stream slots for ``caller`` (kept in ``request_state`` until the response is over),
        or raise :class:`ttsq.api.stream_slots.TooManyStreams`: a stream holds memory and a subscription to the listener for
        as long as its task lasts, so this process serves ``MAX_STREAMS`` at once, ``MAX_STREAMS_PER_KEY`` of them to one
        caller."""
        hold(self.stream_slots, caller.subject, request_state)

    async def audio(self, task_id: str, fmt: StreamFormat, pcm: AsyncIterator[bytes] | None = None) -> AsyncIterator[bytes]:
        """The task's audio in ``fmt`` as it is produced (:meth:`encoded`), for a raw body: a failure ends it
        quietly (the status code is sent already; the task's status says why)."""
        try:
            async for piece in self.encoded(task_id, fmt, pcm):
                yield piece
        except StreamFailed:
            return

    def encoded(self, task_id: str, fmt: StreamFormat, pcm: AsyncIterator[bytes] | None = None) -> AsyncIterator[bytes]:
        """The task's audio in ``fmt`` as it is produced: its PCM16 pieces (``pcm``, else :meth:`pcm`) through an
        incremental encoder (:mod:`ttsq.domain.encoders`), so that everything yielded, joined, is one file;
        :class:`StreamFailed` if the task fails."""
        return encoded(self.pcm(task_id) if pcm is None else pcm, fmt, SAMPLE_RATE)

    async def started(self, task_id: str) -> AsyncIterator[bytes]:
        """The task's PCM16 pieces (:meth:`pcm`) once the first one is there: a task that fails before any audio
        raises :class:`StreamFailed` here, while an answer can still say so in its status code."""
        pieces = self.pcm(task_id)
        first = await anext(pieces, None)
        return _after(first, pieces)

    def pcm(self, task_id: str) -> AsyncIterator[bytes]:
        """The task's PCM16 pieces as they are produced; :class:`StreamFailed` if it fails."""
        return pcm_pieces(self.streams, self.listener, self.queue, task_id)

    # ---- voices ----------------------------------------------------------------------------

    async def list_voices(self, caller: Principal, tenant: str | None = None) -> list[Voice]:
        """The voices ``caller`` sees (:func:`voice_owner`; an admin may look as ``tenant`` does: :func:`viewed_owner`),
        as it may see them (:func:`shown`)."""
        return [shown(voice, caller) for voice in await self.voices.list(viewed_owner(caller, tenant))]

    async def get_voice(self, name: str, caller: Principal, tenant: str | None = None) -> Voice | None:
        """The voice ``name`` means to ``caller`` (or, for an admin, to ``tenant``), as it may see it; None when it sees
        none by that name — another tenant's voice is as absent as one that never existed."""
        voice = await self.voices.get(name, viewed_owner(caller, tenant))
        return None if voice is None else shown(voice, caller)

    async def create_voice(
        self,
        name: str,
        caller: Principal,
        *,
        seed: int | None,
        embedding: str | None,
        shared: bool = False,
        tenant: str | None = None,
    ) -> Voice:
        return await self.voices.create(name, new_voice_owner(caller, shared, tenant), seed=seed, embedding=embedding)

    async def create_blend_voice(
        self,
        name: str,
        components: Sequence[tuple[str, float]],
        caller: Principal,
        *,
        shared: bool = False,
        tenant: str | None = None,
    ) -> Voice:
        """A stored blend: its recipe, resolved now (seeds and embeddings with normalised weights) among the voices its
        owner sees, so it does not change when a component voice is deleted or re-created; the worker computes its
        embedding (docs/voices.md)."""
        owner = new_voice_owner(caller, shared, tenant)
        await self.voices.check_free(name, owner)
        parts, _ = await self._blend_parts(components, owner, "components")
        return await self.voices.create_blend(name, owner, parts)

    async def delete_voice(self, name: str, caller: Principal, tenant: str | None = None) -> bool:
        return await self.voices.delete(name, viewed_owner(caller, tenant))

    async def create_reference_voice(
        self, name: str, audio: bytes, transcript: str, caller: Principal, *, shared: bool = False, tenant: str | None = None
    ) -> Voice:
        """A voice from a recording and its transcript: checked here, encoded by a worker, stored only once encoded.

        The recording is decoded and resampled to 24 kHz mono in a thread (PyAV; no torch here), within bounds on its
        rate, length and decoding time read before and while it is decoded, refused with a 422
        naming ``audio`` or ``transcript`` (:mod:`ttsq.domain.reference_audio`), then handed to a worker's DVAE encoder
        (:mod:`ttsq.store.voice_encodings`). What is stored is ChatTTS's speaker prompt and the transcript; the
        recording is not kept anywhere (its samples expire from Redis once encoded or given up on).
        """
        owner = new_voice_owner(caller, shared, tenant)
        await self.voices.check_free(name, owner)
        try:
            samples = await asyncio.to_thread(decode_reference, audio, self.config.max_reference_s)
            duration = check_reference(samples, self.config.max_reference_s)
        except ReferenceAudioError as exc:
            raise InvalidInput("audio", str(exc)) from exc
        try:
            text = check_transcript(transcript, duration)
        except ReferenceAudioError as exc:
            raise InvalidInput("transcript", str(exc), transcript[:200]) from exc
        try:
            prompt = await self.encodings.encode(samples, self.config.voice_encode_timeout_s)
        except EncodeTimedOut as exc:
            raise VoiceError(f"{exc}; nothing was stored (are workers running?)", 503) from exc
        except EncodeFailed as exc:
            raise VoiceError(f"the recording could not be encoded: {exc}; nothing was stored", 422) from exc
        log.info("voice %s made from %.1f s of recording", name, duration)
        return await self.voices.create_reference(name, owner, prompt=prompt, transcript=text)

    # ---- pronunciation dictionary ---------------------------------------------------------------

    def _dictionary(self) -> PronunciationStore:
        if self.pronunciation is None:
            raise InvalidInput("scope", "the pronunciation dictionary is not configured on this service")
        return self.pronunciation

    async def pronunciation_entries(self, scope: str | None) -> list[PronunciationEntry]:
        """The dictionary's entries, oldest first (of one scope when given)."""
        if scope is not None:
            self._checked_scope(scope)
        return await self._dictionary().list(scope)

    async def add_pronunciation(
        self, *, kind: EntryKind, match: str, replacement: str, language: EntryLanguage, scope: str, case_sensitive: bool
    ) -> PronunciationEntry:
        """Store an entry: :class:`InvalidInput` naming the field when it cannot apply, :class:`EntryConflict` when
        its scope is full or already has it."""
        try:
            return await self._dictionary().create(
                kind=kind, match=match, replacement=replacement, language=language, scope=scope, case_sensitive=case_sensitive
            )
        except EntryConflict:
            raise
        except DictionaryError as exc:
            raise InvalidInput(exc.field, str(exc), None) from exc

    async def delete_pronunciation(self, entry_id: str) -> bool:
        return await self._dictionary().delete(entry_id)

    @staticmethod
    def _checked_scope(scope: str) -> str:
        try:
            return check_scope(scope)
        except DictionaryError as exc:
            raise InvalidInput("scope", str(exc), scope) from exc

    # ---- voice draws ---------------------------------------------------------------------------

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
        deadline = self.monotonic() + min(wait_s, self.config.max_wait_s)
        jobs: dict[str, Job] = {}
        for task_id in draw.task_ids:
            jobs[task_id] = await self.wait_for_end(await self.job(task_id, caller), caller, max(0.0, deadline - self.monotonic()))
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

    # ---- readiness -------------------------------------------------------------------------

    async def readiness(self) -> dict[str, Any]:
        """What ``/readyz`` reports; raises when Redis is unreachable (then the API is not ready)."""
        await self.queue.ping()
        await self._shared_secret.keep()
        return {
            "redis": "ok",
            "workers": await self.heartbeats.live_count(),
            "queue_depth": await self.queue.depth(),
            "model": self.config.model,
            "notice": self.config.notice,
        }


async def _after(first: bytes | None, rest: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """``first`` (when there is one), then ``rest``: a stream whose first piece was taken to look at it."""
    if first is not None:
        yield first
    async for piece in rest:
        yield piece


def _ends_for_reader(fields: dict[str, bytes]) -> bool:
    """A stream entry after which a reader must read the job again: its end, or a caller detaching itself."""
    return "end" in fields or "detached" in fields


def _cue_event(index: int, start: int, end: int, spoken: str) -> dict[str, Any]:
    return {
        "index": index,
        "start": start,
        "end": end,
        "start_s": start / SAMPLE_RATE,
        "end_s": end / SAMPLE_RATE,
        "text": spoken,
    }


def _timing(fields: dict[str, bytes]) -> dict[str, Any] | None:
    """A piece's ``timing`` event: where its chunk's speech lies in the joined audio, and its text (None for entries
    that are not pieces, and for pieces published without their timing)."""
    if "pcm" not in fields or int(fields.get("start", b"-1")) < 0:
        return None
    return _cue_event(int(fields["index"]), int(fields["start"]), int(fields["end_at"]), fields["text"].decode())
