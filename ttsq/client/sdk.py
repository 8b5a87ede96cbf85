"""A Python client for the ttsq HTTP API: :class:`AsyncTTSClient`, and :class:`TTSClient` for blocking code.

The async client holds all the logic; the sync one runs it on a private event loop. Neither reads
the environment: the caller passes the service's URL.

>>> with TTSClient("http://127.0.0.1:8000") as tts:
...     audio = tts.synthesize("你好", voice="zh_female", format="mp3")

Errors form one hierarchy under :class:`TTSError` (:mod:`ttsq.client.errors`, re-exported here).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, fields
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Concatenate, Literal, ParamSpec, Self, TypedDict, TypeVar, Unpack
from urllib.parse import quote

import httpx

from ttsq.client import errors
from ttsq.client.errors import *  # noqa: F403 - the SDK's errors are the client's (__all__ += errors.__all__)
from ttsq.client.errors import (
    ConnectionFailed,
    NotReady,
    ServiceBusy,
    TaskFailed,
    TaskNotFound,
    TTSError,
    VoiceNotFound,
    raise_for_status,
    response_json,
    retry_after_s,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

__all__ = ["AsyncTTSClient", "Submitted", "SynthesisOptions", "TTSClient", "TaskStatus", "Voice"]
__all__ += errors.__all__

StatusName = Literal["queued", "running", "done", "failed"]
AudioFormat = Literal["wav", "mp3", "ogg", "flac", "opus", "pcm"]
Priority = Literal["interactive", "batch"]
StreamFormat = Literal["wav", "pcm"]
LONG_POLL_S = 25.0
"""How long one status request of :meth:`AsyncTTSClient.wait` may wait for the task to end (the server caps it at
its ``MAX_WAIT_S``, 30 s by default, and answers earlier when the task ends)."""
ProgressCallback = Callable[["TaskStatus"], object]
"""Called with every polled status; it may be a plain function or a coroutine function."""

_T = TypeVar("_T")
_P = ParamSpec("_P")
_D = TypeVar("_D", bound="DataclassInstance")


# --- results -----------------------------------------------------------------------------------


class SynthesisOptions(TypedDict, total=False):
    """Keyword options of ``submit`` and ``synthesize``; omitted ones take the server's defaults."""

    voice: str | None
    """A registered voice name, or a blend (``"zh_female*0.7+narrator*0.3"``); fixes the speaker."""
    seed: int | None
    """Sampling seed; without a voice it also picks the speaker."""
    speed: int
    """1 (slow) to 9 (fast); default 5."""
    format: AudioFormat
    """Output format; default "wav"."""
    temperature: float | None
    top_p: float | None
    top_k: int | None
    refine_text: bool
    """Let ChatTTS insert oral prosody tokens first (slower); default False. Any of the levels below turns it on."""
    oral: int | None
    """ChatTTS's refine prompt ``[oral_N]``, 0-9."""
    laugh: int | None
    """ChatTTS's refine prompt ``[laugh_N]``, 0-2."""
    break_: int | None
    """ChatTTS's refine prompt ``[break_N]``, 0-7 (sent as ``break``)."""
    style: str | None
    """A named style (``GET /v1/styles``); the options given here override its own."""
    priority: Priority | None
    """"interactive" (served first) or "batch" (a bounded share while interactive work waits); default: the API key's."""
    consistent_voice: bool | None
    """Condition every chunk after the first on the first chunk's audio (one voice across a long text); default: the
    server's ``CONSISTENT_VOICE``."""
    ssml: str | None
    """An SSML document (``<speak>…</speak>``) spoken in place of a text: pass ``None`` as the text (docs/ssml.md)."""
    document: bool | None
    """A whole document, up to the server's ``MAX_DOCUMENT_CHARS`` (docs/documents.md): spoken part by part, its
    progress in parts, a worker's death costing only the parts it had in hand."""
    text_format: Literal["plain", "markdown"] | None
    """``"markdown"``: the text is Markdown, read as a person reads it aloud (docs/markdown.md)."""
    listen: bool | None
    """You will follow the task's stream from the start (:meth:`AsyncTTSClient.stream_to_file`): its audio is made in
    pieces within each chunk, so the first comes sooner; without it each chunk is decoded whole (less CPU), and a
    stream followed anyway gets it chunk by chunk."""


@dataclass(frozen=True)
class Submitted:
    """The answer to a submit: a queued (or joined) task, or a cache hit that is already done."""

    task_id: str
    status: StatusName
    seed: int
    queue_position: int | None = None
    estimate_s: float = 0.0
    cached: bool = False
    joined: bool = False
    notice: str | None = None


@dataclass(frozen=True)
class TaskStatus:
    """A task as ``GET /v1/tts/tasks/{id}`` reports it. Timestamps are Unix seconds."""

    task_id: str
    status: StatusName
    attempts: int
    max_attempts: int
    created_at: float
    format: str
    seed: int
    queue_position: int | None = None
    error: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    retry_at: float | None = None
    audio_duration_s: float | None = None
    content_type: str | None = None
    result_bytes: int | None = None
    voice: str | None = None
    chunks_done: int | None = None
    chunks_total: int | None = None
    audio_s: float | None = None
    """Of a document: seconds of audio its parts published whole make."""

    @property
    def is_final(self) -> bool:
        return self.status in ("done", "failed")


@dataclass(frozen=True)
class Voice:
    """A named voice. Listings leave ``embedding`` out; ``create_voice`` returns it."""

    name: str
    kind: Literal["builtin", "seed", "embedding"]
    seed: int | None = None
    builtin: bool = False
    embedding: str | None = None
    created_at: float | None = None
    owner: str | None = None
    """Whose voice it is (``tenant:NAME`` or ``key:ID``); None: global, every tenant's."""


# --- response parsing, shared by every method ----------------------------------------------------


def _parse(cls: type[_D], data: object) -> _D:
    """A result dataclass from a JSON object, ignoring fields this client does not know."""
    if not isinstance(data, dict):
        raise TTSError(f"unexpected response: {data!r}")
    names = {field.name for field in fields(cls)}
    try:
        return cls(**{key: value for key, value in data.items() if key in names})
    except TypeError as exc:
        raise TTSError(f"unexpected response for {cls.__name__}: {data!r}") from exc


def _submit_body(text: str | None, options: SynthesisOptions) -> dict[str, Any]:
    """The submit's body: ``text`` (none where an ``ssml`` document is sent in its place) and the options given, by
    their names on the wire (``break_`` is ``break``)."""
    body = {key.rstrip("_"): value for key, value in options.items() if value is not None}
    return body if text is None else {"text": text, **body}


def _busy_delay_s(exc: ServiceBusy, attempt: int, cap_s: float) -> float:
    wanted = exc.retry_after_s if exc.retry_after_s is not None else 2.0**attempt
    return min(wanted, cap_s)


def _finalize_wav(path: Path) -> int:
    """Write the real RIFF and data sizes over a streamed header's placeholders; return the audio bytes."""
    with path.open("r+b") as file:
        size = os.fstat(file.fileno()).st_size
        header = file.read(12)
        if len(header) < 12 or header[:4] != b"RIFF" or header[8:12] != b"WAVE":
            raise TTSError(f"the stream written to {path} is not a WAV file")
        offset = 12
        while True:
            file.seek(offset)
            chunk = file.read(8)
            if len(chunk) < 8:
                raise TTSError(f"the stream written to {path} has no data chunk")
            if chunk[:4] == b"data":
                audio_bytes = size - (offset + 8)
                file.seek(offset + 4)
                file.write(min(audio_bytes, 0xFFFFFFFF).to_bytes(4, "little"))
                file.seek(4)
                file.write(min(size - 8, 0xFFFFFFFF).to_bytes(4, "little"))
                return audio_bytes
            chunk_size = int.from_bytes(chunk[4:], "little")
            offset += 8 + chunk_size + (chunk_size & 1)


def _task_path(task_id: str) -> str:
    return quote(task_id, safe="")


# --- the clients ----------------------------------------------------------------------------------


class AsyncTTSClient:
    """The ttsq API from asyncio code. Use it as ``async with AsyncTTSClient(url) as tts: ...``.

    ``retries``: how many times ``submit`` retries a 429/503 answer (the server guarantees that such
    a request was not queued), sleeping the server's ``Retry-After``, at most ``max_retry_wait_s``.
    ``api_key``: sent as ``Authorization: Bearer`` on every request (a deployment that requires keys answers 401
    without one). The client never reads the environment: the command line takes it from ``$TTSQ_API_KEY``.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 2,
        max_retry_wait_s: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.retries = retries
        self.max_retry_wait_s = max_retry_wait_s
        self._timeout = timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._http = httpx.AsyncClient(base_url=self.base_url, timeout=timeout, transport=transport, headers=headers)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return await self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"cannot reach the ttsq service at {self.base_url}: {exc or type(exc).__name__}") from exc

    # --- tasks --------------------------------------------------------------------------------

    async def submit(self, text: str | None, **options: Unpack[SynthesisOptions]) -> Submitted:
        """Queue a text (or, ``text`` None, the ``ssml`` option's document); answers at once. A cache hit comes back
        with ``status == "done"``."""
        body = _submit_body(text, options)
        attempt = 0
        while True:
            response = await self._send("POST", "/v1/tts/submit", json=body)
            try:
                raise_for_status(response)
            except ServiceBusy as exc:
                if attempt >= self.retries:
                    raise
                await asyncio.sleep(_busy_delay_s(exc, attempt, self.max_retry_wait_s))
                attempt += 1
                continue
            return _parse(Submitted, response_json(response))

    async def status(self, task_id: str, *, wait_s: float | None = None) -> TaskStatus:
        """The task's status; with ``wait_s``, once it ends or after that many seconds (the server's long-poll,
        capped by its ``MAX_WAIT_S``)."""
        params, timeout = ({}, self._timeout) if not wait_s else ({"wait": wait_s}, self._timeout + wait_s)
        response = await self._send("GET", f"/v1/tts/tasks/{_task_path(task_id)}", params=params, timeout=timeout)
        raise_for_status(response, TaskNotFound)
        return _parse(TaskStatus, response_json(response))

    async def wait(
        self,
        task_id: str,
        *,
        poll_s: float = 0.8,
        timeout_s: float | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> TaskStatus:
        """Wait until the task is done (returned) or failed (:class:`TaskFailed`), with long-polls: each request
        returns as soon as the task ends, so nothing sleeps between them. Each waits at most ``LONG_POLL_S``, or
        ``poll_s`` with ``on_progress`` (which is then called that often with the progress).

        A 503/429 is waited out (the job is safe in the store); ``timeout_s`` bounds
        the whole wait with :class:`TimeoutError`.
        """
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        window = poll_s if on_progress is not None else LONG_POLL_S
        while True:
            wait_s = window if deadline is None else max(0.0, min(window, deadline - time.monotonic()))
            delay = 0.0
            try:
                status = await self.status(task_id, wait_s=wait_s)
            except ServiceBusy as exc:
                delay = max(poll_s, _busy_delay_s(exc, 0, self.max_retry_wait_s))
            else:
                if on_progress is not None:
                    outcome = on_progress(status)
                    if inspect.isawaitable(outcome):
                        await outcome
                if status.status == "done":
                    return status
                if status.status == "failed":
                    raise TaskFailed(task_id, status.error, status)
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"task {task_id} did not finish within {timeout_s} s")
                delay = min(delay, remaining)
            if delay:
                await asyncio.sleep(delay)

    async def result(self, task_id: str) -> bytes:
        """The audio of a finished task; :class:`NotReady` while it is queued or running."""
        response = await self._send("GET", f"/v1/tts/result/{_task_path(task_id)}")
        if response.status_code == 200:
            return response.content
        if response.status_code == 202:
            body = response_json(response)
            raise NotReady(task_id, retry_after_s(response), _parse(TaskStatus, body) if isinstance(body, dict) else None)
        if response.status_code == 409:
            status = _parse(TaskStatus, response_json(response))
            raise TaskFailed(task_id, status.error, status)
        raise_for_status(response, TaskNotFound)
        raise TTSError(f"unexpected HTTP {response.status_code} for the result of {task_id}", status_code=response.status_code)

    async def refine(
        self,
        text: str,
        *,
        oral: int | None = None,
        laugh: int | None = None,
        break_: int | None = None,
        seed: int | None = None,
        style: str | None = None,
        timeout_s: float | None = None,
    ) -> str:
        """The text with the prosody tokens ChatTTS's refine pass inserts (``POST /v1/tts/refine``), to edit and submit.
        The server waits a while for it; past that this polls the refine task (long-polls) until it is ready,
        :class:`TaskFailed` when it fails, :class:`TimeoutError` past ``timeout_s``."""
        fields = {"text": text, "oral": oral, "laugh": laugh, "break": break_, "seed": seed, "style": style}
        body = {key: value for key, value in fields.items() if value is not None}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        response = await self._send("POST", "/v1/tts/refine", json=body, timeout=self._timeout + LONG_POLL_S)
        while response.status_code == 202:
            pending = response_json(response)
            task_id = pending.get("task_id") if isinstance(pending, dict) else None
            wait_s = LONG_POLL_S if deadline is None else min(LONG_POLL_S, deadline - time.monotonic())
            if wait_s <= 0:
                raise TimeoutError(f"the refine {task_id} did not finish within {timeout_s} s")
            path = f"/v1/tts/refine/{_task_path(str(task_id))}"
            response = await self._send("GET", path, params={"wait": wait_s}, timeout=self._timeout + wait_s)
        if response.status_code == 409:
            status = _parse(TaskStatus, response_json(response))
            raise TaskFailed(status.task_id, status.error, status)
        raise_for_status(response, TaskNotFound)
        answer = response_json(response)
        refined = answer.get("text") if isinstance(answer, dict) else None
        if not isinstance(refined, str):
            raise TTSError(f"unexpected response for a refine: {response.text[:200]!r}")
        return refined

    async def synthesize(
        self,
        text: str | None,
        *,
        on_progress: ProgressCallback | None = None,
        poll_s: float = 0.8,
        timeout_s: float | None = None,
        **options: Unpack[SynthesisOptions],
    ) -> bytes:
        """Submit, wait, download: the audio bytes in the requested format (``text`` None: the ``ssml`` option's)."""
        submitted = await self.submit(text, **options)
        if submitted.status != "done":
            await self.wait(submitted.task_id, poll_s=poll_s, timeout_s=timeout_s, on_progress=on_progress)
        return await self.result(submitted.task_id)

    async def stream_to_file(
        self,
        task_id: str,
        path: str | os.PathLike[str],
        *,
        format: StreamFormat = "wav",
        on_data: Callable[[int], object] | None = None,
    ) -> int:
        """Write the task's audio to ``path`` as it is produced; return the number of audio bytes.

        ``format="wav"``: once the stream ends the header's size fields are fixed, so the file is a
        valid WAV; ``"pcm"``: raw PCM16 mono 24 kHz. ``on_data(n)`` is called with each chunk's size.
        There is no read timeout: the stream may stay silent while the task waits in the queue.
        """
        target = Path(path)
        url = f"/v1/tts/stream/{_task_path(task_id)}"
        timeout = httpx.Timeout(self._timeout, read=None)
        try:
            async with self._http.stream("GET", url, params={"format": format}, timeout=timeout) as response:
                if response.status_code != 200:
                    await response.aread()
                    if response.status_code == 409 and isinstance(body := response_json(response), dict) and "status" in body:
                        status = _parse(TaskStatus, body)
                        raise TaskFailed(task_id, status.error, status)
                    raise_for_status(response, TaskNotFound)
                    raise TTSError(f"unexpected HTTP {response.status_code} for the stream of {task_id}")
                file: IO[bytes] = await asyncio.to_thread(target.open, "wb")
                try:
                    async for chunk in response.aiter_bytes():
                        await asyncio.to_thread(file.write, chunk)
                        if on_data is not None:
                            on_data(len(chunk))
                    written = file.tell()
                finally:
                    await asyncio.to_thread(file.close)
        except httpx.TransportError as exc:
            raise ConnectionFailed(f"the stream of task {task_id} broke off: {exc or type(exc).__name__}") from exc
        if format == "wav":
            written = await asyncio.to_thread(_finalize_wav, target)
        status = await self.status(task_id)
        if status.status == "failed":
            raise TaskFailed(task_id, status.error, status)
        return written

    # --- voices -------------------------------------------------------------------------------

    async def voices(self) -> list[Voice]:
        response = await self._send("GET", "/v1/voices")
        raise_for_status(response)
        body = response_json(response)
        items = body.get("voices") if isinstance(body, dict) else None
        if not isinstance(items, list):
            raise TTSError(f"unexpected response for voices: {body!r}")
        return [_parse(Voice, item) for item in items]

    async def create_voice(
        self, name: str, *, seed: int | None = None, embedding: str | None = None, shared: bool = False
    ) -> Voice:
        """Register a voice from a speaker seed or a speaker embedding; :class:`Conflict` if the name is taken. The
        voice is the key's tenant's, or global (every tenant's) when ``shared`` (docs/voices.md#tenants)."""
        body: dict[str, Any] = {"name": name}
        if shared:
            body["shared"] = True
        if seed is not None:
            body["seed"] = seed
        if embedding is not None:
            body["embedding"] = embedding
        response = await self._send("POST", "/v1/voices", json=body)
        raise_for_status(response, VoiceNotFound)
        return _parse(Voice, response_json(response))

    async def delete_voice(self, name: str) -> None:
        """:class:`VoiceNotFound` if there is no such voice, :class:`Conflict` for a built-in one."""
        response = await self._send("DELETE", f"/v1/voices/{quote(name, safe='')}")
        raise_for_status(response, VoiceNotFound)


AsyncMethod = Callable[Concatenate["AsyncTTSClient", _P], Coroutine[Any, Any, _T]]


def _blocking(method: AsyncMethod[_P, _T]) -> Callable[Concatenate[TTSClient, _P], _T]:
    """The blocking twin of an :class:`AsyncTTSClient` method: same signature and docs, run on the client's loop."""

    def run(self: TTSClient, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self._runner.run(method(self._client, *args, **kwargs))

    functools.update_wrapper(run, method)
    return run


class TTSClient:
    """The blocking twin of :class:`AsyncTTSClient`: each method runs the async one on a private loop.

    Not for use inside a running event loop (use :class:`AsyncTTSClient` there), nor from several
    threads at once.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 30.0,
        retries: int = 2,
        max_retry_wait_s: float = 30.0,
    ) -> None:
        self._runner = asyncio.Runner()
        self._closed = False
        self._client = AsyncTTSClient(
            base_url, api_key=api_key, timeout=timeout, retries=retries, max_retry_wait_s=max_retry_wait_s
        )
        self.base_url = self._client.base_url

    def __enter__(self) -> Self:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        """Close the connections and the private loop; calling it again does nothing."""
        if self._closed:
            return
        self._closed = True
        try:
            self._runner.run(self._client.aclose())
        finally:
            self._runner.close()

    submit = _blocking(AsyncTTSClient.submit)
    status = _blocking(AsyncTTSClient.status)
    wait = _blocking(AsyncTTSClient.wait)
    result = _blocking(AsyncTTSClient.result)
    refine = _blocking(AsyncTTSClient.refine)
    synthesize = _blocking(AsyncTTSClient.synthesize)
    stream_to_file = _blocking(AsyncTTSClient.stream_to_file)
    voices = _blocking(AsyncTTSClient.voices)
    create_voice = _blocking(AsyncTTSClient.create_voice)
    delete_voice = _blocking(AsyncTTSClient.delete_voice)
