"""Every knob of ttsq, read from the environment (or a ``.env`` file) and validated at start-up.

The service's processes read their settings here and nowhere else, and a setting's default is
written only here: the library (``ttsq/``) never reads the environment, the client's command line
reads only its own ``TTSQ_URL``, and ``make up`` (``scripts/up.py``) passes its environment on to
the processes it starts, looking only at ``REDIS_URL`` (unset: it starts an embedded Redis). The
processes (``app.py``, ``worker.py``) build one :class:`Settings` and hand the library the plain
config objects it needs (:meth:`Settings.queue_config`, ...), so the library can be used and tested
without any environment at all. Each config is built from the settings it mirrors (by field name
where the names agree: :meth:`Settings._project`), and its fields carry no defaults of their own,
but one: ``EngineConfig.warmup_text``, the text a worker speaks once before its first job, which no
setting drives (``tests/project/test_settings.py`` holds every config built here to that). Fixed values that
are not settings stay with the code they shape, defaults included, for example the supervisor's
restart backoff (:class:`ttsq.runtime.supervise.Policy`, which ``make up`` uses as it is), the
automatic batch limit on a CPU (``CPU_AUTO_BATCH`` in :mod:`ttsq.runtime.replica`), and a request's
sampling defaults (:mod:`ttsq.domain.sampling`, part of the API).

Variable names are the field names in upper case (``REDIS_URL``, ``MAX_TEXT_CHARS``, ``MODEL``).
The configuration table in ``docs/configuration.md`` and ``.env.example`` are generated from the
fields below (``python scripts/settings_docs.py --write``; a test keeps them in step).
"""

from __future__ import annotations

import difflib
import os
import socket
from collections.abc import Iterable, Mapping
from dataclasses import fields, is_dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from dotenv import dotenv_values
from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ttsq.domain.text import OPENAI_MAX_INPUT_CHARS
from ttsq.store.cache import CacheConfig
from ttsq.store.connection import RedisConfig
from ttsq.store.deliveries import DeliveryConfig
from ttsq.store.listener import ListenerConfig
from ttsq.store.queue import QueueConfig

if TYPE_CHECKING:  # each process imports only the configs it uses
    from ttsq.api.service import DrawConfig, ServiceConfig
    from ttsq.api.sessions.events import RealtimeConfig
    from ttsq.domain.pronunciation import DictionaryLimits
    from ttsq.inference.engines.chattts import EngineConfig
    from ttsq.inference.engines.factory import BackendConfig
    from ttsq.inference.engines.faults import FaultConfig
    from ttsq.runtime.deliverer import WebhookConfig
    from ttsq.runtime.worker_config import WorkerConfig

REPO_ROOT = Path(__file__).resolve().parent
ENV_FILE = ".env"
C = TypeVar("C")

NOT_SETTINGS = frozenset({"TTSQ_URL"})
MAX_BATCH_CEILING = 256
"""The most jobs one ChatTTS call ever takes (and the cap of ``MAX_BATCH=auto``)."""
"""``TTSQ_``-prefixed variables that belong to something else (the command line's service URL)."""


def _group(name: str, **extra: Any) -> dict[str, Any]:
    return {"group": name, **extra}


class Settings(BaseSettings):
    # SECRETS_DIR: a directory of files named like settings (a Kubernetes secret volume, Docker secrets),
    # read by pydantic-settings, so a secret need never sit in the process's environment.
    model_config = SettingsConfigDict(env_file=ENV_FILE, extra="ignore", frozen=True, secrets_dir=os.environ.get("SECRETS_DIR"))

    # --- Redis -------------------------------------------------------------------------------
    redis_url: str = Field(
        "redis://127.0.0.1:6379/0",
        description="The queue's Redis (`rediss://` for TLS; `redis+cluster://host:port,host:port` for a Redis Cluster, "
        "`rediss+cluster://` over TLS; `redis+sentinel://sentinel:26379,sentinel2:26379/service[/db]` for a "
        "Sentinel-managed primary, `rediss+sentinel://` with TLS to the servers; see docs/scale-out.md); `make up` "
        "starts an embedded one when unset.",
        json_schema_extra=_group("Redis"),
    )
    redis_namespace: str = Field(
        "ttsq",
        description="Hash tag of every key (`{ttsq}:…`): each script's keys share one Redis Cluster slot.",
        json_schema_extra=_group("Redis"),
    )
    redis_socket_timeout_s: float = Field(5.0, gt=0, description="Bound on every Redis command.", json_schema_extra=_group("Redis"))
    redis_connect_timeout_s: float = Field(
        2.0, gt=0, description="Bound on opening a connection.", json_schema_extra=_group("Redis")
    )
    redis_max_connections: int = Field(
        64,
        ge=2,
        description="Connection pool size, per process (on one server, a command that finds them all busy waits for one).",
        json_schema_extra=_group("Redis"),
    )
    redis_retries: int = Field(
        2,
        ge=0,
        description="Quick retries of a Redis command after a connection error or timeout (backoff of at most 0.5 s), "
        "before the error surfaces (the API answers 503, a worker backs off).",
        json_schema_extra=_group("Redis"),
    )
    require_noeviction: bool = Field(
        False,
        description="Refuse to start (instead of warning) when Redis's `maxmemory-policy` may evict job keys.",
        json_schema_extra=_group("Redis"),
    )

    # --- queue -------------------------------------------------------------------------------
    lease_s: float = Field(
        30.0,
        gt=0,
        description="A claimed job returns to the queue this long after its worker stops renewing (renewed every third of it).",
        json_schema_extra=_group("Queue"),
    )
    max_attempts: int = Field(
        3, ge=1, le=20, description="Claims per job before it is dead-lettered.", json_schema_extra=_group("Queue")
    )
    retry_base_s: float = Field(
        2.0,
        ge=1.0,
        description="A failed attempt n is retried after `RETRY_BASE_S ** n` seconds.",
        json_schema_extra=_group("Queue"),
    )
    result_ttl_s: int = Field(
        600, ge=10, description="Results and final statuses expire after this.", json_schema_extra=_group("Queue")
    )
    max_result_bytes: int = Field(
        50 * 1024 * 1024, ge=1024, description="A larger result fails its job.", json_schema_extra=_group("Queue")
    )
    max_queue_depth: int = Field(10_000, ge=1, description="Submit answers 429 at this depth.", json_schema_extra=_group("Queue"))
    queue_shards: int = Field(
        1,
        ge=1,
        le=64,
        description="Queue shards (`{ttsq}`, `{ttsq:<n>}`, …): N queues a Redis Cluster spreads over its masters; jobs are "
        "placed by cache key, workers claim from every shard in turn (docs/scale-out.md). Change it only on a drained queue.",
        json_schema_extra=_group("Queue"),
    )
    submit_wait_replicas: int | Literal["auto"] = Field(
        "auto",
        description="Replicas that must have a task before it is acknowledged — a submit, a cache hit, a single-flight join, a "
        "realtime session's chunk (`WAIT`, up to `SUBMIT_WAIT_TIMEOUT_MS`; not acknowledged in time: 503 + Retry-After). "
        "`auto`: every replica the primary has been seen with (so while one is away, its submits are refused), none on "
        "a lone Redis or a Redis Cluster; 0 = never wait: a primary failed over right after answering may lose the task "
        "(docs/scale-out.md). A number is not taken with a Redis Cluster.",
        json_schema_extra=_group("Queue"),
    )
    submit_wait_timeout_ms: int = Field(
        100,
        ge=1,
        description="Longest `WAIT` for `SUBMIT_WAIT_REPLICAS`; a task not on that many replicas by then is answered 503 "
        "(it is queued all the same: a client that retries may have it run twice).",
        json_schema_extra=_group("Queue"),
    )
    submit_wait_replicas_check_s: float = Field(
        5.0,
        gt=0,
        description="With `SUBMIT_WAIT_REPLICAS=auto`, while no replica has been seen (a lone Redis): how often each "
        "process looks again (`INFO replication`) whether its primary has one now.",
        json_schema_extra=_group("Queue"),
    )
    interactive_burst: int = Field(
        9,
        ge=1,
        le=1000,
        description="Fair queuing's priority lanes: interactive claims in a row while batch jobs wait, before one batch claim, "
        "so a batch backlog gets at least 1 claim in INTERACTIVE_BURST + 1 (docs/fairness.md).",
        json_schema_extra=_group("Queue"),
    )
    block_s: float = Field(
        2.0,
        gt=0,
        description="Longest blocking claim; must stay below `REDIS_SOCKET_TIMEOUT_S`.",
        json_schema_extra=_group("Queue"),
    )
    dead_letter_max: int = Field(10_000, ge=1, description="Dead-letter list cap (newest kept).", json_schema_extra=_group("Queue"))
    retry_after_s: int = Field(5, ge=1, description="`Retry-After` sent with 429 and 503.", json_schema_extra=_group("Queue"))

    # --- API ---------------------------------------------------------------------------------
    max_text_chars: int = Field(
        500,
        ge=1,
        le=100_000,
        description="Longest text, after removing invisible and control characters.",
        json_schema_extra=_group("API"),
    )
    max_ssml_chars: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="Longest `ssml` document on `POST /v1/tts/submit`, markup included, as sent (checked before it is "
        "parsed); what it says is held to `MAX_TEXT_CHARS` like a `text` (docs/ssml.md).",
        json_schema_extra=_group("API"),
    )
    max_ssml_depth: int = Field(
        32,
        ge=2,
        le=1_000,
        description="Deepest nesting of elements in an `ssml` document (`<speak>` is 1): the reader stops at the first "
        "element past it.",
        json_schema_extra=_group("API"),
    )
    max_ssml_elements: int = Field(
        200,
        ge=1,
        le=100_000,
        description="Most elements in an `ssml` document: the reader stops at the first past it (each break, voice or "
        "prosody change is a run of speech the engine is asked for on its own).",
        json_schema_extra=_group("API"),
    )
    openai_max_input_chars: int = Field(
        OPENAI_MAX_INPUT_CHARS,
        ge=1,
        le=100_000,
        description="Longest `input` on `/v1/audio/speech` (OpenAI's own limit by default); `MAX_TEXT_CHARS` bounds "
        "`/v1/tts/submit`. Either is synthesised in sentence chunks of `MAX_CHUNK_CHARS`.",
        json_schema_extra=_group("API"),
    )
    max_dialogue_lines: int = Field(
        200,
        ge=1,
        le=10_000,
        description="Most lines in one dialogue (`/v1/tts/dialogue`, `/v1/text-to-dialogue`); each line is its own "
        "segment, in its speaker's voice. A JSON body holds at most 1,000 values, about 330 lines as a `lines` list; a "
        "`script` has no such bound.",
        json_schema_extra=_group("API"),
    )
    max_dialogue_chars: int = Field(
        5_000,
        ge=1,
        le=200_000,
        description="Longest dialogue: its lines' texts together, counted as `MAX_TEXT_CHARS` counts one text (after "
        "removing invisible and control characters, digits as they are read aloud).",
        json_schema_extra=_group("API"),
    )
    max_document_chars: int = Field(
        200_000,
        ge=1,
        le=2_000_000,
        description='Longest `text` of a submit that says `"document": true` (a whole document: docs/documents.md), '
        "counted as `MAX_TEXT_CHARS` counts one text. It pays one rate-limit token per `MAX_TEXT_CHARS` characters.",
        json_schema_extra=_group("API"),
    )
    document_part_chars: int = Field(
        500,
        ge=20,
        le=10_000,
        description="A document is cut into parts of at most this many characters, at sentence ends (its paragraphs, "
        "headings and list items first): each part is prepared and synthesised on its own, its progress counted in parts, "
        "and a worker that dies costs only the parts it had in hand.",
        json_schema_extra=_group("API"),
    )
    document_code: Literal["phrase", "skip"] = Field(
        "phrase",
        description="A Markdown document's code blocks and tables: `phrase` says that one is skipped (docs/markdown.md), "
        "`skip` leaves them out silently.",
        json_schema_extra=_group("API"),
    )
    document_emoji: Literal["remove", "name"] = Field(
        "remove",
        description='Emoji in a document: `remove` drops them, `name` reads their names ("party popper").',
        json_schema_extra=_group("API"),
    )
    listen_block_s: float | None = Field(
        None,
        gt=0,
        description="Longest blocking read of the API's one stream listener (which follows every event stream, audio "
        "stream and long-poll of the process); must stay below `REDIS_SOCKET_TIMEOUT_S`; unset = 0.8 x it. Idle, the "
        "listener sends one command per LISTEN_BLOCK_S whatever the number of clients.",
        json_schema_extra=_group("API", shown="unset"),
    )
    gc_full_collection_s: float = Field(
        60.0,
        ge=0,
        le=86400,
        description="The API process's full garbage collections run on this timer instead of whenever the heap grew by a "
        "quarter (which a storm of new streams triggers again and again, each walk holding the event loop); the start-up "
        "heap is frozen out of them. 0 = CPython's own policy.",
        json_schema_extra=_group("API"),
    )
    listen_retry_s: float = Field(
        0.5,
        gt=0,
        le=60,
        description="Pause of the stream listener before reading again after Redis could not be reached.",
        json_schema_extra=_group("API"),
    )
    listen_outage_s: float = Field(
        10.0,
        gt=0,
        description="How long Redis may stay unreachable while clients wait on the stream listener: a restart or failover "
        "shorter than this is ridden out (each client resumes where it was, no piece lost or repeated); past it, event "
        "streams end with an `error` event and audio streams end. A realtime session keeps trying its submits, "
        "abandons and key rechecks for as long (then code 1013).",
        json_schema_extra=_group("API"),
    )
    max_wait_s: float = Field(
        30.0,
        ge=0,
        le=3600,
        description="Longest long-poll (`?wait=S` on a task's status and result): a longer wait is served as this one.",
        json_schema_extra=_group("API"),
    )
    refine_wait_s: float = Field(
        10.0,
        ge=0,
        le=3600,
        description="How long `POST /v1/tts/refine` waits for its refined text before it answers 202 with the task to poll "
        "(`GET /v1/tts/refine/{id}`); at most `MAX_WAIT_S` (docs/prosody.md).",
        json_schema_extra=_group("API"),
    )
    task_id_secret: SecretStr | None = Field(
        None,
        description=(
            "HMAC secret (≥ 16 bytes) that signs task ids; unset = one random secret created in Redis and shared by every replica."
        ),
        json_schema_extra=_group("API", shown="unset"),
    )

    realtime_idle_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="A realtime connection (`/v1/tts/realtime`, whatever its contexts) with no message from its client "
        "for this long, and none of its audio pending, is closed (code 4408, the text not yet spoken in the error's "
        "`unspoken`): the default, and the most a client's own inactivity timeout (`idle_s`) may ask for. A client "
        "keeps a pause alive with `keepalive` messages.",
        json_schema_extra=_group("API"),
    )
    realtime_start_s: float = Field(
        5.0,
        gt=0,
        le=60,
        description="A realtime connection whose `session.start` does not come within this long is closed (code 4408); "
        "nothing else it sends is read before it.",
        json_schema_extra=_group("API"),
    )
    realtime_inbox_messages: int = Field(
        32,
        ge=1,
        le=10_000,
        description="Messages a realtime session holds before it has handled them; while that many wait, its socket is "
        "not read (TCP holds the client back), so a client flooding messages costs at most this many "
        "`REALTIME_MAX_MESSAGE_BYTES`, whether it reads its answers or not.",
        json_schema_extra=_group("API"),
    )
    realtime_max_s: float = Field(
        600.0,
        gt=0,
        le=86400,
        description="The longest a realtime session lasts, however busy (then code 4408; its unsent chunks are cancelled).",
        json_schema_extra=_group("API"),
    )
    realtime_max_chars: int = Field(
        20_000,
        ge=1,
        description="The most text one realtime session may send (then code 4413); each of its chunks is also one submit "
        "of the key's rate limit.",
        json_schema_extra=_group("API"),
    )
    realtime_clause_wait_s: float = Field(
        0.6,
        gt=0,
        le=60,
        description="How long text in a realtime session waits for its sentence to end before it is spoken up to its last "
        "clause mark (comma, colon, 、).",
        json_schema_extra=_group("API"),
    )
    realtime_ahead: int = Field(
        1,
        ge=1,
        le=1000,
        description="Chunks a realtime session keeps queued beyond the one whose audio is streaming: the next is queued "
        "when a chunk's first audio goes out, so later sentences do not slow the first one's decode while the listener "
        "waits (docs/realtime.md). Raise it where a chunk takes longer to synthesise than the one before it lasts.",
        json_schema_extra=_group("API"),
    )
    realtime_max_contexts: int = Field(
        8,
        ge=1,
        le=1000,
        description="The most contexts one realtime connection holds open at once (ttsq's `context.start`, and the "
        "contexts of the protocols built on the same engine); one more gets an error (`too_many_contexts`) and the "
        "connection goes on. Each open context may hold `REALTIME_AHEAD` chunks queued.",
        json_schema_extra=_group("API"),
    )
    realtime_max_message_bytes: int = Field(
        65_536,
        ge=1024,
        le=16 * 1024 * 1024,
        description="The largest message a realtime session's client may send (then code 1009).",
        json_schema_extra=_group("API"),
    )

    # --- security and fair use ---------------------------------------------------------------
    auth: Literal["auto", "on", "off"] = Field(
        "auto",
        description=(
            "API keys: `auto` requires them once the API listens on a non-loopback address, `on` always, "
            "`off` never (a loud start-up warning)."
        ),
        json_schema_extra=_group("Security and fair use"),
    )
    rate_limit_per_s: float = Field(
        10.0,
        gt=0,
        description="Submits per second each key (or anonymous client address) may sustain.",
        json_schema_extra=_group("Security and fair use"),
    )
    rate_limit_burst: int = Field(
        50,
        ge=1,
        description="Submits a key may make at once before the rate applies (the bucket's size).",
        json_schema_extra=_group("Security and fair use"),
    )
    max_queued_per_key: int = Field(
        1_000,
        ge=1,
        description="Jobs one key (or anonymous client) may have queued or running at once, so no one fills the shared queue.",
        json_schema_extra=_group("Security and fair use"),
    )
    max_streams: int = Field(
        32,
        ge=1,
        description="Event and audio streams (and OpenAI speech requests, which wait for their audio) one API process serves "
        "at once; past it, 503 with Retry-After. A stream holds no Redis connection of its own: the process's one stream "
        "listener follows them all.",
        json_schema_extra=_group("Security and fair use"),
    )
    max_streams_per_key: int = Field(
        8,
        ge=1,
        description="Of those, how many one key (or anonymous client address) may hold; past it, 429 with Retry-After.",
        json_schema_extra=_group("Security and fair use"),
    )
    max_streams_per_tenant: int | None = Field(
        None,
        ge=1,
        description="Of those, how many one tenant may hold, over all its keys (a key's tenant: docs/fairness.md; callers "
        "without a key are one tenant); past it, 429 with Retry-After (4429 on a realtime session); unset = half of "
        "`MAX_STREAMS` (at least `MAX_STREAMS_PER_KEY`), so one tenant never takes the whole process.",
        json_schema_extra=_group("Security and fair use", shown="unset"),
    )
    stream_key_recheck_s: float = Field(
        5.0,
        gt=0,
        le=3600,
        description="How often a stream (events, audio, OpenAI speech), a long-poll (`?wait=`) or a realtime session "
        "(before and after its `close`) opened with a key asks whether that key is still valid: one revoked or expired "
        "meanwhile ends it (401, 4401) within about this long.",
        json_schema_extra=_group("Security and fair use"),
    )
    no_worker_s: int = Field(
        5,
        ge=0,
        le=3600,
        description="A stream, long-poll or realtime session waiting on a job while no worker has written a heartbeat "
        "for this long is answered `no_worker` (503 with Retry-After before a response starts, an `error` event or an "
        "aborted body after; close 1013) instead of waiting for nothing. 0 = never: for a pool scaled to zero, whose "
        "first job waits for a worker to start.",
        json_schema_extra=_group("API"),
    )
    http_header_timeout_s: float = Field(
        10.0,
        gt=0,
        le=600,
        description="How long a connection may take to send a request's headers whole, from its opening (or the "
        "request's first byte on a kept-alive connection); past it, it is closed. A connection that sends nothing, or "
        "trickles its headers, holds a file descriptor until then (docs/security.md).",
        json_schema_extra=_group("Security and fair use"),
    )
    max_connections: int | Literal["auto"] = Field(
        "auto",
        description="Open connections the API process keeps; a new one past it closes the connection idle longest "
        "(none of its requests under way: not a stream or a session). `auto` = the process's open-file limit less "
        "room for its Redis pools and files (docs/security.md).",
        json_schema_extra=_group("Security and fair use"),
    )
    max_body_bytes: int = Field(
        65_536,
        ge=1024,
        description="Largest request body; a larger one is refused with 413 before it is read (Content-Length or streamed).",
        json_schema_extra=_group("Security and fair use"),
    )
    max_voice_body_bytes: int = Field(
        8 * 1024 * 1024,
        ge=65_536,
        description="Largest body of `POST /v1/voices` (a reference recording, base64 in JSON); other routes keep "
        "`MAX_BODY_BYTES`.",
        json_schema_extra=_group("Security and fair use"),
    )
    body_read_timeout_s: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="How long a request body may take to arrive whole, from the route's first read of it; past it, "
        "408 and the connection is closed (a client that declares more than it sends cannot hold one).",
        json_schema_extra=_group("Security and fair use"),
    )
    consistent_voice: bool = Field(
        False,
        description="Keep one voice across a long text by default: the first chunk's audio becomes the speaker prompt "
        "of the later chunks, as ChatTTS's `split_text` does; a request's `consistent_voice` overrides it. Off by "
        "default: the later chunks wait for the first one and their prompts are longer (docs/voices.md, BENCHMARKS.md).",
        json_schema_extra=_group("API"),
    )
    voice_encode_timeout_s: float = Field(
        60.0,
        gt=0,
        description="How long `POST /v1/voices` with a recording waits for a worker to encode it; past it, 503 and "
        "nothing is stored.",
        json_schema_extra=_group("API"),
    )
    api_docs: Literal["auto", "public", "off"] = Field(
        "auto",
        description="`/docs`, `/redoc` and `/openapi.json`: `auto` = to anyone where keys are optional, only to a valid key "
        "where they are required; `public` = to anyone (publish the schema); `off` = not served.",
        json_schema_extra=_group("Security and fair use"),
    )
    cors_origins: str = Field(
        "",
        description="Comma-separated origins allowed by CORS (`*` for any, then without credentials); empty = CORS off.",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_secret: SecretStr | None = Field(
        None,
        description="HMAC secret (≥ 16 bytes) that signs completion webhooks; unset = `callback_url` is refused.",
        json_schema_extra=_group("Security and fair use", shown="unset"),
    )
    webhook_allow: str = Field(
        "",
        description="Comma-separated networks (CIDR), addresses or host names webhooks may reach although private or "
        "loopback, each on ports 80 and 443 only unless it names its port (`hooks.internal:8080`, `[fd00::/8]:8443`) "
        "or every port (`10.20.0.0/16:*`).",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_timeout_s: float = Field(
        10.0,
        gt=0,
        description="Bound on one whole webhook attempt: resolving, connecting, sending, the answer.",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_max_age_s: float = Field(
        86_400.0,
        gt=0,
        description="How long after the task ends a webhook is retried (exponential backoff, jitter) before it is given up.",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_connect_timeout_s: float = Field(
        3.0,
        gt=0,
        description="Bound on connecting to a webhook receiver, within `WEBHOOK_TIMEOUT_S`.",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_resolve_timeout_s: float = Field(
        5.0,
        gt=0,
        description="Bound on resolving a `callback_url`'s host, at submit and at every delivery.",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_retry_base_s: float = Field(
        10.0,
        gt=0,
        description="Ceiling of the first webhook retry's delay; it doubles with each failure (full jitter beneath it).",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_retry_cap_s: float = Field(
        3600.0, gt=0, description="Largest ceiling of a webhook retry's delay.", json_schema_extra=_group("Security and fair use")
    )
    webhook_max_response_bytes: int = Field(
        4096,
        ge=1,
        description="Most bytes of a webhook receiver's answer that are read; the rest never is.",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_concurrency: int = Field(
        8,
        ge=1,
        description="Webhook deliveries in flight at once, per API process.",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_lease_s: float = Field(
        60.0,
        gt=0,
        description="A claimed webhook delivery returns to the queue this long after its deliverer stops renewing "
        "(renewed every third of it).",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_sweep_interval_s: float = Field(
        5.0,
        gt=0,
        description="How often each API process sweeps the webhook queue (requeue lapsed leases, release due retries).",
        json_schema_extra=_group("Security and fair use"),
    )
    webhook_drain_s: float = Field(
        5.0,
        ge=0,
        description="On shutdown, how long webhook deliveries in flight may finish; the rest are redelivered after their lease.",
        json_schema_extra=_group("Security and fair use"),
    )
    public_url: str | None = Field(
        None,
        description="The API's external base URL (`https://tts.example.com`), for webhooks' `result_url`; needed by them.",
        json_schema_extra=_group("Security and fair use", shown="unset"),
    )

    # --- pronunciation dictionary and voice draw ---------------------------------------------
    pronunciation_max_entries: int = Field(
        1_000,
        ge=1,
        le=100_000,
        description="Pronunciation-dictionary entries one scope (global, a key, a tenant) may hold (docs/dictionary.md).",
        json_schema_extra=_group("Pronunciation dictionary and voice draw"),
    )
    pronunciation_max_pattern_chars: int = Field(
        200,
        ge=1,
        le=10_000,
        description="Longest word or regex pattern of a dictionary entry.",
        json_schema_extra=_group("Pronunciation dictionary and voice draw"),
    )
    pronunciation_max_replacement_chars: int = Field(
        500,
        ge=1,
        le=10_000,
        description="Longest replacement of a dictionary entry.",
        json_schema_extra=_group("Pronunciation dictionary and voice draw"),
    )
    pronunciation_regex_timeout_s: float = Field(
        0.05,
        gt=0,
        le=5,
        description="Time limit of one regex entry on one text; past it the submit is refused naming the entry "
        "(catastrophic backtracking never holds the API).",
        json_schema_extra=_group("Pronunciation dictionary and voice draw"),
    )
    pronunciation_refresh_s: float = Field(
        2.0,
        ge=0,
        description="How often an API process asks Redis whether the dictionary changed (one GET of its version); a "
        "change through another replica applies within this.",
        json_schema_extra=_group("Pronunciation dictionary and voice draw"),
    )

    draw_max_n: int = Field(
        10,
        ge=1,
        le=100,
        description="The most voices one draw (`POST /v1/voices/draw`) returns.",
        json_schema_extra=_group("Pronunciation dictionary and voice draw"),
    )
    draw_oversample: int = Field(
        2,
        ge=1,
        le=10,
        description="Seeds a draw speaks per voice it returns: it keeps the `n` of `n × DRAW_OVERSAMPLE` farthest from the "
        "existing voices (each a short preview job).",
        json_schema_extra=_group("Pronunciation dictionary and voice draw"),
    )
    draw_preview_text_zh: str = Field(
        "你好，这是我的声音。",
        min_length=1,
        max_length=200,
        description="What a drawn voice says in its preview (`language: zh`).",
        json_schema_extra=_group("Pronunciation dictionary and voice draw"),
    )
    draw_preview_text_en: str = Field(
        "Hello, this is my voice.",
        min_length=1,
        max_length=200,
        description="What a drawn voice says in its preview (`language: en`).",
        json_schema_extra=_group("Pronunciation dictionary and voice draw"),
    )

    # --- result cache ------------------------------------------------------------------------
    cache_enabled: bool = Field(
        True, description="Serve repeated deterministic requests from the result cache.", json_schema_extra=_group("Result cache")
    )
    single_flight: bool = Field(
        True,
        description="Identical deterministic requests queued or running share one job.",
        json_schema_extra=_group("Result cache"),
    )
    cache_scope: Literal["tenant", "global"] = Field(
        "tenant",
        description="Who shares cached results and jobs in flight: `tenant` = each key with itself, or with the keys an admin "
        "grouped into its tenant, and callers without a key with each other; `global` = every caller (one tenant only: "
        "any key could test whether a text was synthesised for another).",
        json_schema_extra=_group("Result cache"),
    )
    cache_redis_url: str | None = Field(
        None,
        description="A separate Redis for L2 (an LRU eviction policy is right there); unset = the queue's Redis.",
        json_schema_extra=_group("Result cache", shown="unset"),
    )
    cache_ttl_s: int = Field(24 * 3600, ge=1, description="L2 entry lifetime.", json_schema_extra=_group("Result cache"))
    cache_l1_max_bytes: int = Field(
        64 * 1024 * 1024, ge=0, description="In-process LRU bound, in bytes, per process.", json_schema_extra=_group("Result cache")
    )
    cache_l2_max_entry_bytes: int = Field(
        8 * 1024 * 1024, ge=1024, description="Larger results skip L2.", json_schema_extra=_group("Result cache")
    )
    cache_dir: Path | None = Field(
        REPO_ROOT / "var" / "cache",
        description="L3 directory (content-addressed files); empty disables L3.",
        json_schema_extra=_group("Result cache", shown="var/cache"),
    )
    cache_dir_max_bytes: int = Field(
        1024 * 1024 * 1024, ge=1024 * 1024, description="L3 total size bound.", json_schema_extra=_group("Result cache")
    )
    model_id: str | None = Field(
        None,
        description="The weights' identity in cache keys; unset = derived from `MODEL`. Change it whenever the weights change.",
        json_schema_extra=_group("Result cache", shown="from MODEL"),
    )

    # --- model / engine ----------------------------------------------------------------------
    model: str = Field(
        "hub",
        description=(
            "`hub` (2Noise/ChatTTS from the model hub), `tiny` (generated random weights: speaks noise), or a directory of weights."
        ),
        json_schema_extra=_group("Model"),
    )
    tiny_checkpoint_dir: Path = Field(
        REPO_ROOT / "var" / "tiny-checkpoint",
        description="Where `MODEL=tiny` builds its checkpoint.",
        json_schema_extra=_group("Model", shown="var/tiny-checkpoint"),
    )
    device: str | None = Field(
        None,
        description="`cpu`, `cuda`, `cuda:N`; unset picks CUDA when available.",
        json_schema_extra=_group("Model", shown="unset"),
    )
    speaker_dim: int | None = Field(
        None,
        ge=1,
        description="Speaker-embedding size for embedding voices; unset = known for `hub` (768), `tiny` (64).",
        json_schema_extra=_group("Model", shown="from MODEL"),
    )
    cpu_threads: int = Field(
        1,
        ge=1,
        description="torch threads on CPU (1 is fastest on small machines; scale with processes).",
        json_schema_extra=_group("Model"),
    )
    engine_backend: Literal["auto", "ttsq", "chattts"] = Field(
        "auto",
        description="`ttsq`: ttsq's own decoder (any mix of voices, parameters and seeds in one batch, each result "
        "independent of its batch-mates, slots refilled as rows end). `chattts`: ChatTTS's own `Chat.infer`, the "
        "reference (batches only requests that share voice and parameters). `auto`: `ttsq` on a CPU, where it is "
        "proven; `chattts` on CUDA until a GPU run has confirmed the decoder there (docs/decoder.md).",
        json_schema_extra=_group("Model"),
    )
    cuda_graphs: bool = Field(
        True,
        description="With `ENGINE_BACKEND=ttsq` on CUDA: capture each batch bucket's decode step as a CUDA graph at start.",
        json_schema_extra=_group("Model"),
    )
    first_chunk_slots: int = Field(
        1,
        ge=0,
        le=8,
        description="With `ENGINE_BACKEND=ttsq`: slots of the batch limit that requests' later chunks (a realtime "
        "session's next jobs included) leave free for first chunks, so a new request starts at the next step even when "
        "long requests have chunks to spare (a limit of 1 keeps none).",
        json_schema_extra=_group("Model"),
    )
    first_chunk_head_start: bool | Literal["auto"] = Field(
        "auto",
        description="With `ENGINE_BACKEND=ttsq`: a request's later chunks take no slot until its first chunk's codes are "
        "decoded (they are prefilled meanwhile; other requests' rows fill the free slots). Where a step costs more as the "
        "batch grows, the first audio comes sooner at the price of a lone long request's total time "
        '(BENCHMARKS.md, "Streamed formats"). `auto`: on a CPU, not on CUDA.',
        json_schema_extra=_group("Model"),
    )
    overlap_prefill_and_audio: bool = Field(
        True,
        description="With `ENGINE_BACKEND=ttsq` on a CPU: build and prefill the next rows' prompts, and decode finished "
        "rows' audio, in two threads beside the decode loop (the work of one row each; the loop only steps). On CUDA "
        "they stay in the loop until a GPU run has measured them.",
        json_schema_extra=_group("Model"),
    )
    piece_tokens: int = Field(
        32,
        ge=0,
        le=1024,
        description="With `ENGINE_BACKEND=ttsq`: a chunk's audio is decoded while its codes are generated, this many "
        "tokens (512 samples each) at a time, and streamed as it comes: the first audio after `PIECE_TOKENS + "
        "PIECE_LOOKAHEAD` decode steps whatever the sentence's length. `0`: a chunk's audio is decoded once its last "
        'code is out (docs/decoder.md, "Audio within a chunk").',
        json_schema_extra=_group("Model"),
    )
    piece_lookahead: int = Field(
        8,
        ge=1,
        le=64,
        description="With `PIECE_TOKENS`: the tokens after a chunk's first piece that its decode waits for. Every later "
        "sample is decoded exactly as it is streamed; the first piece is exact where the look-ahead covers the decoder's "
        "field (52 tokens on ChatTTS's layers, 9 on the tiny checkpoint; 8 already on random weights), approximate in its "
        'last tokens below it and cross-faded into the exact samples (docs/decoder.md, "Audio within a chunk").',
        json_schema_extra=_group("Model"),
    )
    batch_invariant: bool = Field(
        False,
        description="With `ENGINE_BACKEND=ttsq`: every decode step computes every slot over the whole cache, so a "
        "request's audio is bit-identical in any batch, in float32 too (on workers with the same `MAX_BATCH`); a lone "
        "request then costs a full batch's step (docs/decoder.md).",
        json_schema_extra=_group("Model"),
    )
    cpu_packed_weights: bool = Field(
        True,
        description="With `ENGINE_BACKEND=ttsq` on a CPU and `GPT_DTYPE=float32`: the GPT's projections and heads are "
        "reordered once at load into oneDNN's blocked layout and multiplied through oneDNN instead of MKL (a decode step "
        'at batch 8 in under half the time, the same tokens; BENCHMARKS.md, "CPU matmul"). `false`: torch\'s plain '
        "`F.linear`.",
        json_schema_extra=_group("Model"),
    )
    precision: Literal["fp32", "bf16", "int8"] = Field(
        "fp32",
        description="With `ENGINE_BACKEND=ttsq` on a CPU and `GPT_DTYPE=float32`: what the GPT's matmuls compute in. "
        "`fp32`: float32 (the codes ChatTTS's own loop samples). `bf16`: bfloat16 weights and inputs (oneDNN, float32 "
        "accumulation). `int8`: dynamic quantisation (int8 weights per channel; each step quantises its input with one "
        "scale over the whole batch, so a request's audio depends on what shares its steps: it breaks batch independence "
        "and `BATCH_INVARIANT`). Both are faster and change the audio; agreement and speed in BENCHMARKS.md, "
        '"CPU matmul". Part of the cache key.',
        json_schema_extra=_group("Model"),
    )
    compile: bool = Field(
        False,
        description="`torch.compile` the GPT (CUDA only, `ENGINE_BACKEND=chattts`); batches are padded to powers of two "
        "and each is compiled before serving.",
        json_schema_extra=_group("Model"),
    )
    gpt_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32",
        description="Weights of the GPT (the decode loop); half precision needs CUDA for float16.",
        json_schema_extra=_group("Model"),
    )
    decoder_dtype: Literal["float32", "bfloat16", "float16"] = Field(
        "float32", description="Weights of the decoder, DVAE and vocoder.", json_schema_extra=_group("Model")
    )
    max_chunk_chars: int = Field(
        120,
        ge=8,
        description="Long text is synthesised in sentence chunks of at most this many characters.",
        json_schema_extra=_group("Model"),
    )
    document_parts_in_flight: int = Field(
        4,
        ge=1,
        le=256,
        description="Parts of one document a worker has in its engine at once (docs/documents.md): the next part enters "
        "as one ends, so a document's text is prepared part by part, and a worker that dies costs at most these.",
        json_schema_extra=_group("Model"),
    )
    max_new_token: int = Field(2048, ge=1, description="Most audio tokens per chunk.", json_schema_extra=_group("Model"))
    max_reference_s: float = Field(
        30.0,
        ge=3.0,
        le=30.0,
        description="Longest reference recording a voice is made from (docs/voices.md). The API refuses longer ones; "
        "ttsq's decoder keeps room in every slot for its prompt (~47 positions per second plus its transcript), so a "
        "lower value spends less memory (and, with CUDA graphs, less attention per step).",
        json_schema_extra=_group("Model"),
    )
    min_new_token: int = Field(
        0,
        ge=0,
        description="Fewest audio tokens per chunk (benchmarks set it equal to the maximum).",
        json_schema_extra=_group("Model"),
    )
    refine_max_new_token: int = Field(
        384,
        ge=1,
        description="Cap for `refine_text` and `POST /v1/tts/refine`: text tokens per chunk.",
        json_schema_extra=_group("Model"),
    )
    normalize_text: bool = Field(
        True,
        description="Speak numbers, dates and amounts (WeTextProcessing, zh and en). A worker runs the normaliser in a "
        "child process of its own (about 100 MB with both languages' graphs), beside its decode steps.",
        json_schema_extra=_group("Model"),
    )
    cuda_alloc_conf: str = Field(
        "expandable_segments:True",
        description="CUDA allocator settings, exported as `PYTORCH_ALLOC_CONF` (`PYTORCH_CUDA_ALLOC_CONF` before torch 2.9).",
        json_schema_extra=_group("Model"),
    )

    # --- worker ------------------------------------------------------------------------------
    worker_id: str = Field(
        default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}",
        description="The worker's name in logs and its health record; in the queue (claims, heartbeats) each process "
        "adds a random suffix (`WORKER_ID~3fa2c1`), so a restarted worker never vouches for its predecessor's jobs.",
        json_schema_extra=_group("Worker", shown="hostname-pid"),
    )
    worker_health_host: str = Field(
        "127.0.0.1", description="The worker's probe server address (`0.0.0.0` in a pod).", json_schema_extra=_group("Worker")
    )
    worker_health_port: int = Field(
        8001, ge=0, le=65535, description="The worker's probe server port.", json_schema_extra=_group("Worker")
    )
    heartbeat_interval_s: float = Field(
        0.25,
        gt=0,
        description="How often a worker writes its heartbeat (one small script per queue shard, from its event loop).",
        json_schema_extra=_group("Worker"),
    )
    heartbeat_ttl_s: float = Field(
        1.5,
        gt=0,
        description="A worker whose last heartbeat is older is dead: not counted as live, and the next sweep puts the jobs "
        "it claimed back at the front of their queue (a dead worker's jobs run again within `HEARTBEAT_TTL_S` + "
        "`SWEEP_INTERVAL_S`, not a lease later).",
        json_schema_extra=_group("Worker"),
    )
    sweep_interval_s: float = Field(
        0.5,
        gt=0,
        description="How often the pool sweeps the queue (requeue the jobs of workers whose heartbeat lapsed and lapsed "
        "leases, release retries); one worker sweeps each time.",
        json_schema_extra=_group("Worker"),
    )
    job_timeout_s: float = Field(
        300.0,
        gt=0,
        description="An inference running longer is hung: worker `/healthz` turns 503.",
        json_schema_extra=_group("Worker"),
    )
    max_batch: int | Literal["auto"] = Field(
        "auto",
        description=(
            "The engine's slots: most sentence chunks in one decode step (ttsq's decoder), or most requests in one call "
            "(ChatTTS's loop); `1` turns cross-request batching off. Or `auto`: on CUDA the worker measures "
            "memory and decode speed at start and picks the largest batch that fits and keeps streams ahead of playback "
            f"(at most {MAX_BATCH_CEILING}); on a CPU `auto` is 8."
        ),
        json_schema_extra=_group("Worker"),
    )
    batch_memory_headroom: float = Field(
        0.15,
        ge=0,
        lt=1,
        description="With `MAX_BATCH=auto`: the share of free GPU memory left unused.",
        json_schema_extra=_group("Worker"),
    )
    stream_rtf_target: float = Field(
        0.8,
        gt=0,
        description="With `MAX_BATCH=auto`: the highest real-time factor a stream in a batch may have (< 1: ahead of playback); "
        "with `STREAM_ADMISSION`: the share of a token's 21.3 ms of audio a decode step may take (or the engine's own bound "
        "on a stream's start where tighter, measured at start-up: docs/realtime.md).",
        json_schema_extra=_group("Worker"),
    )
    stream_scheduling: Literal["playback", "arrival"] = Field(
        "playback",
        description="With `ENGINE_BACKEND=ttsq`: `playback` ranks waiting rows by when their audio is due (a request's "
        "first chunk at its arrival, a later one when a listener playing it from its first audio runs out, less "
        "`PLAYBACK_MARGIN_S`); `arrival`: first chunks first, then by arrival (docs/realtime.md).",
        json_schema_extra=_group("Worker"),
    )
    playback_margin_s: float = Field(
        0.5,
        ge=0,
        description="With `STREAM_SCHEDULING=playback`: how long before a listener's audio runs out its next chunk is due.",
        json_schema_extra=_group("Worker"),
    )
    stream_admission: Literal["off", "wait", "refuse"] = Field(
        "off",
        description="`wait`: the worker claims no new job while the rows it holds already fill what a decode step keeps "
        "ahead of real time (`STREAM_RTF_TARGET`, from the steps' measured cost), nor while a stream it started is short of "
        "its margin (`STREAM_ADMISSION_SLACK`): streams it runs never run dry, new ones wait in the queue with a "
        "position. One job is always taken when none is in hand. `refuse`: the same, and the API "
        "answers a submit with 429 + `Retry-After` while the live workers' heartbeats report no room. For "
        "`ENGINE_BACKEND=ttsq`, whose steps are decode steps (docs/realtime.md). `off`: claim up to the batch's room.",
        json_schema_extra=_group("Worker"),
    )
    stream_admission_slack: bool = Field(
        True,
        description="With `STREAM_ADMISSION` on: also hold new streams while any stream the worker has started playing "
        "is short — its listener's audio left is under `PLAYBACK_MARGIN_S`, or its audio has come slower than it plays — "
        "whatever the fitted step cost says (the stream room is 0 until it recovers, then held under the rows the "
        "shortage came with), and start no more streams at once than half those heard playing (a slow start). `false`: the "
        "fitted step cost alone (docs/realtime.md).",
        json_schema_extra=_group("Worker"),
    )
    release_memory_above: float = Field(
        0.9,
        gt=0,
        le=1,
        description="Return cached GPU memory after a batch when the allocator holds over this share of the GPU, or after OOM.",
        json_schema_extra=_group("Worker"),
    )
    release_memory_idle_s: float = Field(
        60.0,
        gt=0,
        description="Return cached GPU memory once the worker has been idle this long.",
        json_schema_extra=_group("Worker"),
    )
    notify_socket: str | None = Field(
        None,
        description="Set by systemd in a `Type=notify` unit (never by hand): the worker reports ready and pings "
        "`WatchdogSec` while live.",
        json_schema_extra=_group("Worker", shown="unset"),
    )
    batch_wait_ms: float = Field(
        20.0, ge=0, le=5000, description="How long a claim waits for more jobs to fill a batch.", json_schema_extra=_group("Worker")
    )
    oom_recover_s: float = Field(
        300.0,
        ge=0,
        description="After a CUDA out-of-memory split, how long the smaller batch size holds.",
        json_schema_extra=_group("Worker"),
    )
    shutdown_grace_s: float = Field(
        25.0,
        ge=0,
        description="On SIGTERM the current batch may finish within this; otherwise the sweep requeues its jobs.",
        json_schema_extra=_group("Worker"),
    )

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="Log level of every process.", json_schema_extra=_group("Logs and metrics")
    )
    log_format: Literal["text", "json"] = Field(
        "text",
        description="`text` (one readable line per event) or `json` (one JSON object per line, for a log pipeline).",
        json_schema_extra=_group("Logs and metrics"),
    )
    metrics_scrape_timeout_s: float = Field(
        0.5,
        gt=0,
        description="How long `/metrics` waits for Redis before answering with `ttsq_redis_up 0`.",
        json_schema_extra=_group("Logs and metrics"),
    )

    # --- fault injection (tests only; off unless set explicitly) -----------------------------
    fault_mode: Literal["none", "hang", "raise", "oom", "crash"] = Field(
        "none",
        description="Test only: make matching inferences `hang`, `raise` or run out of memory (`oom`).",
        json_schema_extra=_group("Fault injection (tests only)"),
    )
    fault_match: str = Field(
        "",
        description='Test only: texts containing this fault (`""` = every text).',
        json_schema_extra=_group("Fault injection (tests only)"),
    )
    fault_oom_above_batch: int = Field(
        0,
        ge=0,
        description="Test only: with `oom`, only batches larger than this fail.",
        json_schema_extra=_group("Fault injection (tests only)"),
    )
    fault_hang_s: float = Field(
        3600.0,
        gt=0,
        description="Test only: how long a `hang` lasts before inference goes on.",
        json_schema_extra=_group("Fault injection (tests only)"),
    )
    fault_clock_skew_s: float = Field(
        0.0,
        description="Test only: run this process's wall clock this many seconds off, as on a host whose clock drifted.",
        json_schema_extra=_group("Fault injection (tests only)"),
    )

    @field_validator("cache_dir", mode="before")
    @classmethod
    def _empty_disables(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("max_batch")
    @classmethod
    def _batch_in_range(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 1 <= value <= MAX_BATCH_CEILING:
            raise ValueError(f"MAX_BATCH must be auto or between 1 and {MAX_BATCH_CEILING}, got {value}")
        return value

    @field_validator("submit_wait_replicas")
    @classmethod
    def _replicas_not_negative(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value < 0:
            raise ValueError(f"SUBMIT_WAIT_REPLICAS must be auto or a number of replicas (0 or more), got {value}")
        return value

    @field_validator("log_level", mode="before")
    @classmethod
    def _upper(cls, value: object) -> object:
        return value.upper() if isinstance(value, str) else value

    @field_validator("task_id_secret", "webhook_secret")
    @classmethod
    def _secret_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().encode()) < 16:
            raise ValueError("secrets (TASK_ID_SECRET, WEBHOOK_SECRET) must be at least 16 bytes")
        return value

    @model_validator(mode="after")
    def _check_relations(self) -> Settings:
        if self.webhook_secret is not None and not (self.public_url or "").startswith(("http://", "https://")):
            raise ValueError(
                "WEBHOOK_SECRET is set but PUBLIC_URL is not an http(s) URL: a webhook carries the result's URL, "
                "and the deliverer has no request to take the API's address from (e.g. PUBLIC_URL=https://tts.example.com)"
            )
        if self.listen_block_s is not None and self.listen_block_s >= self.redis_socket_timeout_s:
            raise ValueError(
                f"LISTEN_BLOCK_S ({self.listen_block_s}) must be below REDIS_SOCKET_TIMEOUT_S ({self.redis_socket_timeout_s}): "
                "a blocking read longer than the socket timeout fails with a timeout error"
            )
        if self.block_s >= self.redis_socket_timeout_s:
            raise ValueError(
                f"BLOCK_S ({self.block_s}) must be below REDIS_SOCKET_TIMEOUT_S ({self.redis_socket_timeout_s}): "
                "a blocking read longer than the socket timeout fails with a timeout error"
            )
        for name, lease_s in (("LEASE_S", self.lease_s), ("WEBHOOK_LEASE_S", self.webhook_lease_s)):
            if lease_s <= 1.5 * self.redis_socket_timeout_s:
                raise ValueError(
                    f"{name} ({lease_s}) must exceed 1.5 x REDIS_SOCKET_TIMEOUT_S ({self.redis_socket_timeout_s}): "
                    f"leases are renewed every {name}/3, and a renewal that waits a whole socket timeout must still land "
                    "before the lease runs out"
                )
        if self.heartbeat_ttl_s <= 2 * self.heartbeat_interval_s:
            raise ValueError(
                f"HEARTBEAT_TTL_S ({self.heartbeat_ttl_s}) must exceed 2 x HEARTBEAT_INTERVAL_S ({self.heartbeat_interval_s}), "
                "or a live worker that misses one heartbeat looks dead (and the sweep takes its jobs back)"
            )
        if self.sweep_interval_s > self.heartbeat_ttl_s:
            raise ValueError(
                f"SWEEP_INTERVAL_S ({self.sweep_interval_s}) must not exceed HEARTBEAT_TTL_S ({self.heartbeat_ttl_s}): a dead "
                "worker's jobs wait up to HEARTBEAT_TTL_S + SWEEP_INTERVAL_S before they run again, so a slower sweep "
                "would outweigh the heartbeat it acts on"
            )
        waits = self.submit_wait_replicas != "auto" and self.submit_wait_replicas > 0
        if waits and self.redis_url.split("://", 1)[0].endswith("+cluster"):
            raise ValueError(
                "SUBMIT_WAIT_REPLICAS is not supported with a Redis Cluster (redis+cluster://): a WAIT must follow the "
                "job's write on the same connection to its slot's master, which the cluster client does not offer "
                "(leave it auto: no WAIT on a cluster)"
            )
        if self.max_streams_per_key > self.max_streams:
            raise ValueError(f"MAX_STREAMS_PER_KEY ({self.max_streams_per_key}) must not exceed MAX_STREAMS ({self.max_streams})")
        if self.max_streams_per_tenant is not None and self.max_streams_per_tenant > self.max_streams:
            raise ValueError(
                f"MAX_STREAMS_PER_TENANT ({self.max_streams_per_tenant}) must not exceed MAX_STREAMS ({self.max_streams})"
            )
        if 0 < self.no_worker_s <= 2 * self.heartbeat_interval_s:
            raise ValueError(
                f"NO_WORKER_S ({self.no_worker_s}) must exceed 2 x HEARTBEAT_INTERVAL_S ({self.heartbeat_interval_s}) "
                "(or be 0, off), or a live worker that misses one heartbeat reads as none"
            )
        if isinstance(self.max_connections, int) and self.max_connections < 1:
            raise ValueError(f"MAX_CONNECTIONS must be auto or at least 1, got {self.max_connections}")
        if self.min_new_token > self.max_new_token:
            raise ValueError(f"MIN_NEW_TOKEN ({self.min_new_token}) must not exceed MAX_NEW_TOKEN ({self.max_new_token})")
        if self.refine_wait_s > self.max_wait_s:
            raise ValueError(
                f"REFINE_WAIT_S ({self.refine_wait_s}) must not exceed MAX_WAIT_S ({self.max_wait_s}), the longest wait on a task"
            )
        if self.precision != "fp32":
            if self.engine_backend == "chattts" or self.gpt_dtype != "float32" or (self.device or "").startswith("cuda"):
                raise ValueError(
                    f"PRECISION={self.precision} is for ttsq's decoder on a CPU with GPT_DTYPE=float32 "
                    f"(got ENGINE_BACKEND={self.engine_backend}, GPT_DTYPE={self.gpt_dtype}, DEVICE={self.device or 'unset'})"
                )
            if self.batch_invariant and self.precision == "int8":
                raise ValueError(
                    "PRECISION=int8 and BATCH_INVARIANT=true contradict: int8 quantises each step's input with one scale "
                    "over the whole batch, so a request's audio depends on its batch-mates"
                )
        return self

    # ---- derived values ---------------------------------------------------------------------

    def model_dir(self) -> str:
        """The engine's model source: 'hub' or a directory ('tiny' resolves to the generated checkpoint)."""
        if self.model == "tiny":
            return str(self.tiny_checkpoint_dir)
        return self.model

    def expected_speaker_dim(self) -> int | None:
        """Speaker-embedding size that voices must have: SPEAKER_DIM, else known for hub and tiny."""
        return self.speaker_dim or {"hub": 768, "tiny": 64}.get(self.model)

    def model_identity(self) -> str:
        """What cache keys say about the model: its weights plus the settings that shape its audio."""
        weights = self.model_id or {"hub": "2Noise/ChatTTS", "tiny": "tiny-random"}.get(self.model, self.model)
        return (
            f"{weights}|chunk={self.max_chunk_chars}|new={self.min_new_token}-{self.max_new_token}"
            f"|refine={self.refine_max_new_token}|norm={int(self.normalize_text)}|engine={self.engine_backend}"
            # Only when not the default, so that every key made before the knob existed stays the same.
            + (f"|precision={self.precision}" if self.precision != "fp32" else "")
        )

    def model_notice(self) -> str | None:
        """Said loudly when the configured model has random weights (its audio is noise)."""
        if self.model == "tiny":
            return "MODEL=tiny: random-weight test checkpoint, the audio is noise (for testing only)"
        return None

    # ---- the library's configs --------------------------------------------------------------

    def _project(self, cls: type[C], prefix: str = "", **given: Any) -> C:
        """``cls`` built from the settings named like its fields (after ``prefix``); ``given`` supplies the others."""
        assert is_dataclass(cls)
        known = type(self).model_fields
        values = {f.name: getattr(self, prefix + f.name) for f in fields(cls) if f.name not in given and prefix + f.name in known}
        return cls(**values, **given)

    def redis_config(self) -> RedisConfig:
        return self._redis(self.redis_url)

    def cache_redis_config(self) -> RedisConfig | None:
        """A separate Redis for the cache, or None to share the queue's client."""
        if not self.cache_redis_url or self.cache_redis_url == self.redis_url:
            return None
        return self._redis(self.cache_redis_url)

    def _redis(self, url: str) -> RedisConfig:
        return RedisConfig(
            url=url,
            socket_timeout_s=self.redis_socket_timeout_s,
            connect_timeout_s=self.redis_connect_timeout_s,
            max_connections=self.redis_max_connections,
            retries=self.redis_retries,
        )

    def queue_config(self) -> QueueConfig:
        return self._project(QueueConfig, namespace=self.redis_namespace, shards=self.queue_shards)

    def cache_config(self) -> CacheConfig:
        return CacheConfig(
            enabled=self.cache_enabled,
            namespace=self.redis_namespace,
            shards=self.queue_shards,
            l1_max_bytes=self.cache_l1_max_bytes,
            l2_ttl_s=self.cache_ttl_s,
            l2_max_entry_bytes=self.cache_l2_max_entry_bytes,
            l3_dir=self.cache_dir,
            l3_max_bytes=self.cache_dir_max_bytes,
        )

    def service_config(self) -> ServiceConfig:
        from ttsq.api.service import ServiceConfig

        return self._project(
            ServiceConfig,
            model_identity=self.model_identity(),
            notice=self.model_notice(),
            max_streams_per_tenant=self.streams_per_tenant(),
        )

    def streams_per_tenant(self) -> int:
        """``MAX_STREAMS_PER_TENANT``, or when unset half of ``MAX_STREAMS`` — but never below ``MAX_STREAMS_PER_KEY``
        (a key alone is its own tenant: its share would otherwise shrink)."""
        if self.max_streams_per_tenant is not None:
            return self.max_streams_per_tenant
        return max(self.max_streams // 2, self.max_streams_per_key)

    def realtime_config(self) -> RealtimeConfig:
        """The realtime sessions' limits (``REALTIME_*``), with the chunk size the workers cut text at."""
        from ttsq.api.sessions.events import RealtimeConfig

        return self._project(
            RealtimeConfig,
            "realtime_",
            max_chunk_chars=self.max_chunk_chars,
            max_session_s=self.realtime_max_s,
            key_recheck_s=self.stream_key_recheck_s,
            outage_s=self.listen_outage_s,
            retry_after_s=self.retry_after_s,
        )

    def draw_config(self) -> DrawConfig:
        from ttsq.api.service import DrawConfig

        return self._project(DrawConfig, "draw_")

    def pronunciation_limits(self) -> DictionaryLimits:
        from ttsq.domain.pronunciation import DictionaryLimits

        return self._project(DictionaryLimits, "pronunciation_")

    def listener_config(self) -> ListenerConfig:
        """The API's stream listener's (``LISTEN_*``)."""
        block_s = self.listen_block_s if self.listen_block_s is not None else 0.8 * self.redis_socket_timeout_s
        return self._project(ListenerConfig, prefix="listen_", block_s=block_s)

    def webhook_config(self) -> WebhookConfig | None:
        """The deliverer's config (the ``WEBHOOK_*`` settings), or None when webhooks are off (no ``WEBHOOK_SECRET``)."""
        from ttsq.runtime.deliverer import WebhookConfig

        if self.webhook_secret is None or self.public_url is None:
            return None
        return self._project(
            WebhookConfig,
            prefix="webhook_",
            public_url=self.public_url,
            block_s=self.block_s,  # a blocking claim must stay under the Redis socket timeout, as the worker's does
        )

    def delivery_config(self) -> DeliveryConfig:
        """The webhook delivery queue's: its lease (``WEBHOOK_LEASE_S``) and the expiry of its logs (``RESULT_TTL_S``)."""
        return DeliveryConfig(
            namespace=self.redis_namespace, shards=self.queue_shards, lease_s=self.webhook_lease_s, result_ttl_s=self.result_ttl_s
        )

    def webhook_allow_list(self) -> list[str]:
        return [entry.strip() for entry in self.webhook_allow.split(",") if entry.strip()]

    def engine_config(self) -> EngineConfig:
        from ttsq.inference.engines.chattts import EngineConfig

        return self._project(EngineConfig, model_source=self.model_dir())

    def backend_config(self) -> BackendConfig:
        """Which engine backend the worker serves with, and how ttsq's decoder runs (``ENGINE_BACKEND`` and its kin)."""
        from ttsq.inference.engines.factory import BackendConfig

        playback = self.stream_scheduling == "playback"
        return self._project(BackendConfig, playback_margin_s=self.playback_margin_s if playback else None)

    def worker_config(self) -> WorkerConfig:
        from ttsq.runtime.worker_config import WorkerConfig

        auto = self.max_batch == "auto"
        return self._project(
            WorkerConfig,
            health_host=self.worker_health_host,
            health_port=self.worker_health_port,
            max_batch=MAX_BATCH_CEILING if auto else self.max_batch,
            auto_batch=auto,
        )

    def fault_config(self) -> FaultConfig:
        from ttsq.inference.engines.faults import FaultConfig

        return FaultConfig(
            mode=self.fault_mode, match=self.fault_match, oom_above_batch=self.fault_oom_above_batch, hang_s=self.fault_hang_s
        )


def unknown_setting_warnings(environ: Mapping[str, str], env_file_keys: Iterable[str]) -> list[str]:
    """A warning for every ``TTSQ_``-prefixed variable and every ``.env`` key that is not a setting.

    pydantic-settings ignores unknown variables, so a typo (``MAX_BATCHES=64``) would silently
    leave the default in force; the warning names the closest real setting.
    """
    known = sorted(name.upper() for name in Settings.model_fields)
    suspects = {key for key in environ if key.upper().startswith("TTSQ_") and key.upper() not in NOT_SETTINGS}
    suspects |= {key for key in env_file_keys if key.upper() not in known}
    warnings = []
    for key in sorted(suspects):
        bare = key.upper().removeprefix("TTSQ_")
        close = difflib.get_close_matches(bare, known, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else ""
        if bare in known:
            hint = f"; settings have no prefix: use {bare}"
        warnings.append(f"unknown setting {key} is ignored{hint}")
    return warnings


def startup_warnings() -> list[str]:
    """:func:`unknown_setting_warnings` for this process's environment and ``.env`` file."""
    env_keys = dotenv_values(ENV_FILE).keys() if Path(ENV_FILE).is_file() else []
    return unknown_setting_warnings(os.environ, env_keys)


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
