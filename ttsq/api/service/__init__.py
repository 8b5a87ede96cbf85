"""The API's use cases, one service each: tasks (submit, status, result, cancel), listening (events, audio streams,
captions), dialogues (lines in several voices as one task), voices (stored, blends, reference), styles, refining a
text, the pronunciation dictionary, voice draws, and the operators' (dead letters, readiness). Each has its own small
constructor (:mod:`.tasks`, :mod:`.listening`, :mod:`.dialogue`, :mod:`.voices`, :mod:`.styles`, :mod:`.refine`,
:mod:`.dictionary`, :mod:`.draws`, :mod:`.admin`); what they share (the caller checks, the task-id signer, the callers'
token buckets, the settings and refusals) is :mod:`.common`. :class:`TTSService` builds them all on one set of stores,
as ``app.py`` does once per process; each router family reaches its own service through ``deps.py``.

Nothing here knows about HTTP, and routers import nothing below ``ttsq.api``: what they name of the layers beneath (a
job's status, a cancel's outcome, a voice, a stream's format) is re-exported here, in ``__all__``
(``tests/project/test_architecture.py`` holds them to it).

Failures are the service's own exceptions (:class:`InvalidInput`, :class:`TaskNotFound`,
:class:`ttsq.domain.voices.VoiceError`), the store's refusals (:class:`ttsq.store.queue.QueueFullError`,
:class:`ttsq.store.rate_limit.RateLimitExceeded`) and redis-py's errors for an outage
(:data:`StoreUnavailable`), raised as they come: :mod:`ttsq.api.errors` turns each into its HTTP
answer once, in the shape each route family promises.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ttsq.api.dialogue_schemas import DialogueLine, DialogueRequest, ElevenLabsDialogueRequest
from ttsq.api.metrics import SubmitOutcome
from ttsq.api.service.admin import AdminService
from ttsq.api.service.common import Common, InvalidInput, ServiceConfig, StoreUnavailable, TaskNotFound, readable, viewed_owner
from ttsq.api.service.dialogue import DialogueService
from ttsq.api.service.dictionary import DictionaryService
from ttsq.api.service.draws import DrawConfig, DrawLanguage, DrawnVoice, DrawOutcome, DrawService, VoiceDraws
from ttsq.api.service.listening import CAPTION_CONTENT_TYPES, CaptionFormat, ListeningService, ServerEvent
from ttsq.api.service.refine import Refined, RefineService
from ttsq.api.service.styles import StyleService
from ttsq.api.service.tasks import Download, Submitted, TaskService, Webhooks, build_params
from ttsq.api.service.voices import UnknownVoice, VoiceService
from ttsq.api.stream_admission import NoWorker, WorkerWatch, beating_within
from ttsq.api.stream_slots import ROUTE_KINDS, KeyRevoked, StreamAborted, StreamSlots
from ttsq.domain.audio import CONTENT_TYPES
from ttsq.domain.blends import MAX_BLEND_COMPONENTS, is_blend
from ttsq.domain.jobs import MAX_SEED, Job, Status
from ttsq.domain.output_formats import (
    COMMON_RATES,
    ELEVENLABS_DEFAULT,
    TTSQ_NAMES,
    OutputFormat,
    TtsqName,
    UnsupportedFormat,
    parse_elevenlabs,
    parse_ttsq,
    stored_format,
)
from ttsq.domain.pronunciation import SCOPE_PATTERN, EntryKind, EntryLanguage, PronunciationEntry
from ttsq.domain.sampling import (
    DEFAULT_SAMPLING,
    LEVELS,
    MAX_SPEED,
    MIN_SPEED,
    BreakLevel,
    LaughLevel,
    OralLevel,
    SamplingPreset,
    speed_level,
)
from ttsq.domain.styles import STYLE_NAME, Style, StyleConflict, validate_style_name
from ttsq.domain.text import OPENAI_MAX_INPUT_CHARS
from ttsq.domain.voices import OPENAI_VOICES, VOICE_NAME, Voice, validate_voice_name
from ttsq.store.api_keys import ApiKeyStore
from ttsq.store.cache import ResultCache
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.listener import JobListener, ListenerConfig
from ttsq.store.pronunciation import EntryConflict, PronunciationStore
from ttsq.store.queue import JobQueue
from ttsq.store.rate_limit import RateLimiter
from ttsq.store.replies import Cancelled, Requeued
from ttsq.store.streams import AudioStreams, StreamFailed
from ttsq.store.styles import StyleRegistry
from ttsq.store.task_ids import TaskIdSigner
from ttsq.store.voice_encodings import VoiceEncodings
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
    "Voice",
    "validate_voice_name",
]
__all__ += ["MAX_BLEND_COMPONENTS", "is_blend", "speed_level"]
__all__ += ["COMMON_RATES", "TTSQ_NAMES", "OutputFormat", "TtsqName", "UnsupportedFormat", "parse_ttsq", "stored_format"]
__all__ += ["ROUTE_KINDS", "KeyRevoked", "NoWorker", "StreamAborted"]
__all__ += ["LEVELS", "STYLE_NAME", "BreakLevel", "LaughLevel", "OralLevel", "SamplingPreset", "Style", "StyleConflict"]
__all__ += ["validate_style_name"]
__all__ += ["RefineService", "Refined", "StyleService"]
__all__ += ["UnknownVoice"]
__all__ += ["ELEVENLABS_DEFAULT", "DialogueLine", "DialogueRequest", "DialogueService", "ElevenLabsDialogueRequest"]
__all__ += ["parse_elevenlabs"]

__all__ += [
    "AdminService",
    "Common",
    "DictionaryService",
    "DrawService",
    "ListeningService",
    "TaskService",
    "VoiceService",
    "viewed_owner",
]


class TTSService:
    """Every use case's service, built on one set of stores: what the app keeps (``app.state.service``) and what a test
    builds in-process. It only wires; each use case is its own service's."""

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
        self.common = Common(queue, signer, rate_limiter)
        # What lives beside the jobs, on the queue's connection, names and clock:
        streams = AudioStreams(queue.redis, queue.shards, queue.config.result_ttl_s)
        self.listener = listener or JobListener(
            queue.redis, queue.shards, ListenerConfig(block_s=config.block_s, retry_s=0.5, outage_s=10.0)
        )
        """The process's one follower of job streams: every event stream, audio stream and long-poll waits on it
        (the app's lifespan runs it)."""
        self.voicing = VoiceService(voices, VoiceEncodings(queue.redis, queue.keys, config.block_s), config)
        self.dictionary = DictionaryService(self.common, pronunciation)
        self.styling = StyleService(StyleRegistry(queue.redis, queue.keys))
        heartbeats = Heartbeats(queue.redis, queue.shards, queue.config.heartbeat_ttl_s, queue.clock)
        workers = WorkerWatch(beating_within(heartbeats, config.no_worker_s), config.no_worker_s)
        self.tasks = TaskService(
            self.common,
            queue,
            cache,
            self.voicing,
            self.dictionary,
            config,
            self.listener,
            streams,
            heartbeats,
            workers,
            ApiKeyStore(queue.redis, queue.keys).still_valid,
            on_submit=on_submit,
            webhooks=webhooks,
            monotonic=monotonic,
            styling=self.styling,
        )
        self.refining = RefineService(self.tasks, config.refine_wait_s)
        slots = StreamSlots(config.max_streams, config.max_streams_per_key, config.max_streams_per_tenant)
        self.listening = ListeningService(self.tasks, slots)
        self.dialogue = DialogueService(self.tasks, config)
        self.drawing = DrawService(self.common, self.tasks, voices, draws)
        self.admin = AdminService(self.common, queue, heartbeats, config)
