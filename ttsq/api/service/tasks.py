"""Tasks: submit a text, look a task up (as its caller may see it), wait for its end, fetch its result, cancel it.

The long-polls (``GET /v1/tts/status|result?wait=``) live here beside the lookups they repeat; the event and audio
streams that follow a task as it runs are :mod:`.listening`'s.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ttsq.api.auth import Principal, Unauthorized
from ttsq.api.metrics import SubmitOutcome
from ttsq.api.schemas import SubmitRequest, SubmitResponse, TaskStatus, WebhookStatus
from ttsq.api.service.common import (
    Common,
    InvalidInput,
    ServiceConfig,
    TaskNotFound,
    as_seen_by,
    detached,
    ends_for_reader,
    log,
    readable,
)
from ttsq.api.service.dictionary import DictionaryService
from ttsq.api.service.ssml import SsmlService
from ttsq.api.service.styles import StyleService
from ttsq.api.service.voices import VoiceService
from ttsq.api.stream_admission import WorkerWatch, refuse_without_stream_room
from ttsq.api.stream_slots import when_over
from ttsq.domain import context
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.cache_key import cache_key
from ttsq.domain.documents import document_segments, read_document
from ttsq.domain.jobs import DEFAULT_SAMPLING_SEED, Job, Priority, Status, StreamPlace, TTSParams, draw_seed
from ttsq.domain.output_formats import TTSQ_NAMES
from ttsq.domain.segments import NOTHING_TO_READ, speakable
from ttsq.domain.ssrf import RefusedUrl, SsrfGuard, UnresolvableUrl
from ttsq.domain.text import TextError, validate_text
from ttsq.domain.voices import Voice
from ttsq.store.api_keys import ApiKey
from ttsq.store.cache import ResultCache
from ttsq.store.connection import STORE_ERRORS
from ttsq.store.deliveries import DeliveryQueue, DeliverySummary
from ttsq.store.heartbeats import Heartbeats
from ttsq.store.listener import JobListener
from ttsq.store.queue import JobQueue
from ttsq.store.rate_limit import RateDecision
from ttsq.store.replies import Cancelled
from ttsq.store.streams import AudioStreams

_Piece = TypeVar("_Piece", bytes, str)
"""A streamed body's piece: audio bytes, or a server-sent event."""


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
    refine_only: bool = False,
) -> TTSParams:
    """A job's parameters from a request: the voice/seed rule and the checks that need settings.

    A ``voice`` (already resolved from ``body.voice``) fixes the speaker; a ``seed`` seeds
    sampling and, without a voice, also draws the speaker. With neither, a fresh seed is drawn
    here (and reported) — the only random case. ``scope`` is the caller's sharing scope, part of the
    cache key (:func:`ttsq.domain.cache_key.cache_key`). ``refine_only``: a refine job (its answer is the refined text).
    """
    try:
        text = validate_text(body.text, max_text_chars)
    except TextError as exc:
        raise InvalidInput("text", str(exc), body.text[:200]) from exc
    if not speakable(text):  # a worker would fail it: punctuation alone is no engine request
        raise InvalidInput("text", NOTHING_TO_READ, body.text[:200])
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
        refine_only=refine_only,
        listened=body.listen and not refine_only,
        **dict(body.sampling),
    )
    params.cache_key = cache_key(params, model_identity, scope)
    return params


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


class TaskService:
    """Submit, look up, wait for, fetch and cancel tasks: what ``submit_api`` and ``query_api`` (and the OpenAI and
    realtime routes) ask of a task, each lookup as its caller may see it."""

    def __init__(
        self,
        common: Common,
        queue: JobQueue,
        cache: ResultCache,
        voicing: VoiceService,
        dictionary: DictionaryService,
        config: ServiceConfig,
        listener: JobListener,
        streams: AudioStreams,
        heartbeats: Heartbeats,
        workers: WorkerWatch,
        key_still_valid: Callable[[ApiKey], Awaitable[bool]],
        on_submit: Callable[[SubmitOutcome], None] | None = None,
        webhooks: Webhooks | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        styling: StyleService | None = None,
    ) -> None:
        self.queue = queue
        self.cache = cache
        """Finished results by cache key: a submit is answered from it before anything is queued."""
        self.voicing: VoiceService = voicing
        """Where a request's ``voice`` is resolved, among the voices its caller sees."""
        self.dictionary = dictionary
        """Rewrites a submit's text by the caller's pronunciation entries before its cache key is made."""
        self.ssml = SsmlService(voicing, dictionary, config)
        """Reads a submit's ``ssml`` into the spans its job's segments say."""
        self.styling = styling
        """Where a request's ``style`` is resolved, among the styles its caller sees, into its sampling parameters."""
        self._on_submit = on_submit or (lambda outcome: None)
        self.config = config
        self.listener = listener
        """The process's one follower of job streams, which a long-poll waits on."""
        self.streams = streams
        """Each task's audio stream, whose published pieces are the progress a status reports."""
        self.webhooks = webhooks
        self.heartbeats = heartbeats
        """The workers' heartbeats, which say whether one has room for another real-time stream (``refuse``)."""
        self.workers = workers
        """Whether any worker is alive (``NO_WORKER_S``): asked by every wait on a job, long-polls and streams alike."""
        self.key_still_valid = key_still_valid
        """Whether a key that authenticated a request is still neither revoked nor expired (a long wait asks again)."""
        self._abandoning: set[asyncio.Task[None]] = set()
        """Cancels of abandoned tasks under way (:meth:`cancelled_when_abandoned`), held until they end."""
        self.monotonic = monotonic
        """The clock a long-poll's deadline is kept on (a test sets its own)."""
        # The shared pieces (:class:`Common`), by the names the use cases call them.
        self.signer = common.signer
        self._pay = common.pay
        self.rate_limiter = common.rate_limiter
        self._shared_secret = common.shared_secret

    # ---- submit ----------------------------------------------------------------------------

    async def submit(
        self,
        body: SubmitRequest,
        caller: Principal,
        voice: Voice | None = None,
        *,
        max_text_chars: int | None = None,
        first_chunk: int = 0,
        refine_only: bool = False,
        stream: StreamPlace | None = None,
    ) -> Submitted:
        """Answer from the cache, join an identical job in flight, or queue a new one.

        ``voice`` is ``body.voice`` already resolved (the OpenAI route maps its own names first); ``max_text_chars``
        replaces ``MAX_TEXT_CHARS`` (the OpenAI route's own limit); ``first_chunk`` places the text in a longer one
        (a realtime session's later sentence: :class:`ttsq.domain.jobs.TTSParams`). ``body.style`` is resolved first,
        its parameters under the body's own (:class:`StyleService`), so the job carries the parameters alone.
        ``refine_only`` queues a refine job (``POST /v1/tts/refine``): its answer is the caller's own words with the
        prosody tokens ChatTTS would add, so no pronunciation entry rewrites them (they do when that text is submitted),
        and it calls no webhook and holds no real-time stream (``STREAM_ADMISSION`` does not refuse it). ``stream``: its
        place in a live listener's stream (a realtime session's chunk: :attr:`TTSParams.stream`).
        The task is readable by ``caller``'s key (and admins). The cache and single-flight look only within
        ``caller``'s sharing scope (:meth:`sharing_scope`), so an answer never says whether another scope asked
        for the same audio, and never names another scope's task; a cache hit is a task of its own. A valid
        submit pays one token of ``caller``'s bucket — inside the script that queues the job, so paying
        costs no round trip of its own (a cache hit pays on its own; a text that runs a regex entry of the dictionary
        pays before it runs, :meth:`pronounced`) — and raises
        :class:`~ttsq.store.rate_limit.RateLimitExceeded` when the bucket is empty.
        """
        if body.style is not None:
            if self.styling is None:
                raise InvalidInput("style", "styles are not served here", body.style)
            body = await self.styling.applied(body, caller, body.style)
        if voice is None and body.voice is not None:
            voice = await self.voicing.resolve_voice(body.voice, caller)
        if body.document or body.text_format == "markdown":
            return await self._submit_document(body, caller, voice, max_text_chars)
        paid = None
        document = await self.ssml.read(body, caller) if body.ssml is not None else None
        if document is not None:  # its text is the document's, already rewritten and checked span by span
            body, paid = document.body, document.paid
        elif not refine_only:
            body, paid = await self.dictionary.pronounced(body, caller, max_text_chars or self.config.max_text_chars)
        scope = self.sharing_scope(caller)
        params = self.build_params(body, voice, scope, max_text_chars, first_chunk, refine_only)
        params.stream = stream
        if document is not None:
            params = document.with_segments(params, self.config.model_identity, scope)
        return await self.submit_params(params, caller, callback_url=body.callback_url, priority=body.priority, paid=paid)

    async def _submit_document(
        self, body: SubmitRequest, caller: Principal, voice: Voice | None, max_text_chars: int | None
    ) -> Submitted:
        """A document (``document: true``, up to ``MAX_DOCUMENT_CHARS``) or a Markdown text: read into blocks and cut
        into parts (:mod:`ttsq.domain.documents`), each one of the job's segments in the request's voice. A document
        pays a token per ``MAX_TEXT_CHARS`` of it, has no cache entry (its audio is its stream's), and is streamed in a
        format ttsq encodes piece by piece."""
        if body.ssml is not None:
            field = "document" if body.document else "text_format"
            raise InvalidInput(field, f"`{field}` applies to a `text`; an `ssml` document is sent without it", None)
        if body.document and body.format not in TTSQ_NAMES:
            names = ", ".join(TTSQ_NAMES)
            raise InvalidInput("format", f"a document is streamed as it is made: `format` is one of {names}", body.format)
        config = self.config
        limit = config.max_document_chars if body.document else (max_text_chars or config.max_text_chars)
        reading = functools.partial(read_document, code=config.document_code, emoji=config.document_emoji)
        try:  # in a thread: reading a long document is CPU work the event loop must not wait on
            blocks = await asyncio.to_thread(reading, body.text, body.text_format, limit)
        except TextError as exc:
            raise InvalidInput("text", str(exc), body.text[:200]) from exc
        spoken = body.model_copy(update={"text": "\n".join(block.text for block in blocks)})
        paid = await self._pay(caller, math.ceil(len(body.text) / config.max_text_chars)) if body.document else None
        scope = self.sharing_scope(caller)
        params = self.build_params(spoken, voice, scope, limit)
        params.segments = document_segments(blocks, config.document_part_chars, params)
        params.document = body.document
        params.cache_key = None if body.document else cache_key(params, config.model_identity, scope)
        return await self.submit_params(params, caller, callback_url=body.callback_url, priority=body.priority, paid=paid)

    async def submit_params(
        self,
        params: TTSParams,
        caller: Principal,
        *,
        callback_url: str | None = None,
        priority: Priority | None = None,
        paid: RateDecision | None = None,
    ) -> Submitted:
        """:meth:`submit` once a request is a job's parameters (its cache key made; a dialogue's too: its use case
        builds them, :mod:`.dialogue`): the cache, single-flight, the queue, the caller's token (``paid``: taken
        already). A refine job (``params.refine_only``) takes no key's default webhook and no stream admission; nor does a
        continuation of a stream already playing (``params.stream``)."""
        if not params.refine_only:
            callback_url = callback_url or (caller.key.callback_url if caller.key is not None else None)
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
        continues = params.stream is not None and params.stream.continues  # a stream already playing: no new one
        if self.config.stream_admission == "refuse" and not params.refine_only and not continues:
            await refuse_without_stream_room(self.heartbeats)
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
            priority=caller.priority(priority),
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
        refine_only: bool = False,
    ) -> TTSParams:
        if body.consistent_voice is None and self.config.consistent_voice and not refine_only:
            body = body.model_copy(update={"consistent_voice": True})
        limit = self.config.max_text_chars if max_text_chars is None else max_text_chars
        return build_params(
            body,
            voice,
            max_text_chars=limit,
            model_identity=self.config.model_identity,
            scope=scope,
            first_chunk=first_chunk,
            refine_only=refine_only,
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

    async def status(self, job: Job) -> TaskStatus:
        position = await self.queue.position(job.id) if job.status is Status.QUEUED else None
        if job.params.document:  # its parts, across attempts: a document's next attempt goes on after them
            parts, published = await self.streams.document_progress(job.id) or (0, 0)
            total = len(job.params.segments or ())
            status = TaskStatus.of(job, position, (total if job.status is Status.DONE else parts, total), published / SAMPLE_RATE)
        else:
            progress = await self.streams.progress(job.id) if job.status is not Status.QUEUED else None
            status = TaskStatus.of(job, position, progress)
        if job.params.callback_url is not None and self.webhooks is not None:
            summary = DeliverySummary.of(await self.webhooks.deliveries.log(job.id))
            status.webhook = WebhookStatus.model_validate(summary, from_attributes=True)  # the body is the summary, field for field
        return status

    async def download(self, task_id: str, caller: Principal, wait_s: float = 0.0) -> Download:
        """The audio of a finished task; otherwise its status (pending, failed or cancelled), once it has
        ended or after ``wait_s`` (:meth:`wait_for_end`: its refusals too)."""
        job = await self.wait_for_end(await self.job(task_id, caller), caller, wait_s)
        if job.status is Status.DONE:
            audio = await self.queue.result(task_id)
            if audio is None:
                raise TaskNotFound(f"the result of task {task_id!r} has expired")
            return Download(job, audio, None)
        return Download(job, None, await self.status(job))

    async def finished(self, task_id: str, caller: Principal) -> Download:
        """The task once it has ended, however long that takes (long-polls of ``MAX_WAIT_S`` each): what a route
        that answers with a whole file (a WAV, a JSON body) waits for. No worker alive, or the caller's key revoked,
        ends the wait as :meth:`wait_for_end` does."""
        while True:
            download = await self.download(task_id, caller, wait_s=self.config.max_wait_s)
            if download.audio is not None or download.job.status.is_final:
                return download

    async def wait_for_end(self, job: Job, caller: Principal, wait_s: float) -> Job:
        """``job`` as ``caller`` sees it once it has ended, or after ``wait_s`` seconds (at most ``MAX_WAIT_S``) as it is then.

        No polling and no Redis connection of its own: the wait is a subscription to the process's listener
        (:mod:`ttsq.store.listener`), which follows the job's stream, where every ending is marked in the step that
        ends the job (``finish.lua``), as is a caller detaching itself (``cancel.lua``). The subscription starts
        before the job is read again, so an end written between the two is still seen. Cost per waiter: one
        ``XREVRANGE`` and one ``GET`` to start, one ``GET`` when its job ends; nothing while it waits. The deadline is
        kept on :attr:`monotonic`, read at least every ``BLOCK_S``.

        A wait is for a job something will run, by a caller still allowed to see it: with no worker alive it is
        :class:`~ttsq.api.stream_admission.NoWorker` (before the wait, and as soon as the last worker is gone), and a
        caller's key is asked again every ``STREAM_KEY_RECHECK_S`` — one revoked or expired meanwhile ends the wait
        with :class:`~ttsq.api.auth.Unauthorized`, not with the audio it would have waited for.
        """
        deadline = self.monotonic() + min(wait_s, self.config.max_wait_s)
        if job.status.is_final or self.monotonic() >= deadline:
            return job
        await self.workers.require()
        key = caller.key
        recheck_s = self.config.stream_key_recheck_s
        key_due = self.monotonic() + recheck_s
        step_s = min(self.config.block_s, self.workers.refresh_s) if self.workers.on else self.config.block_s
        async with self.listener.follow(job.id, None) as subscription:
            current = await self.job(job.id, caller)
            while not current.status.is_final:
                now = self.monotonic()
                if key is not None and now >= key_due:
                    key_due = now + recheck_s
                    if not await self.key_still_valid(key):
                        raise Unauthorized("the API key was revoked or has expired")
                remaining = deadline - now
                if remaining <= 0:
                    break
                update = await subscription.next(min(remaining, step_s))
                if update.gone or any(ends_for_reader(fields) for _, fields in update.entries):
                    current = await self.job(job.id, caller)
                if not current.status.is_final:
                    await self.workers.require()
        return current
