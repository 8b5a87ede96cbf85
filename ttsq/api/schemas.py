"""HTTP request and response bodies of the v1 API (the OpenAPI schema is generated from these)."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from ttsq.domain.jobs import MAX_SEED, AudioFormat, Job, Status
from ttsq.domain.jobs import Priority as Priority
from ttsq.domain.styles import StyledSampling

REQUEST_MODEL = ConfigDict(extra="forbid", strict=True)
"""Request bodies: unknown fields are refused so that a typo is not silently ignored, and types are
strict (an integer is a JSON integer, never ``"5"`` or ``5.0``; a boolean is ``true`` or ``false``,
never ``0``), so what the schema declares is exactly what is accepted."""

TEXT_FIELD = "text"
"""The submit body's text field; its ``maxLength`` is a setting, put in each deployment's schema by
:func:`deployment_openapi` (and enforced, on the text as sent, by :func:`ttsq.domain.text.validate_text`)."""
SSML_FIELD = "ssml"
"""The submit body's SSML document, sent in place of ``text``; its ``maxLength`` is ``MAX_SSML_CHARS`` (enforced by
:func:`ttsq.domain.ssml.read_ssml`)."""


def _required_without_default(schema: dict[str, Any]) -> None:
    """``text``'s schema: a non-empty string, with no default to show (the body's ``oneOf`` says it is required
    unless ``ssml`` is sent; its Python default only lets an SSML request leave it out)."""
    schema.pop("default", None)
    schema["minLength"] = 1  # "" is refused by the text check, with its own message


class SubmitRequest(StyledSampling):
    """A text to speak."""

    # The sampling parameters (speed, temperature, top_p, top_k, refine_text, oral, laugh, break) and a style are
    # inherited: declared, with their defaults and bounds, once in ttsq.domain.sampling, and sent flat as they always were.

    model_config = ConfigDict(
        **REQUEST_MODEL,
        json_schema_extra={
            "examples": [{"text": "你好，欢迎使用 ttsq。[uv_break]", "voice": "zh_female", "format": "mp3"}],
            "oneOf": [{"required": [TEXT_FIELD]}, {"required": [SSML_FIELD]}],
        },
    )

    text: str = Field(
        "",
        description="Text to speak, at most MAX_TEXT_CHARS characters (`maxLength`) as sent and after removing invisible and "
        "control characters; it must keep something to speak once they are removed. Prosody tokens [uv_break], [laugh], "
        "[lbreak], [break_N], [laugh_N], [oral_N] are allowed; any other ChatTTS control token is refused. "
        "Exactly one of `text` and `ssml` is sent.",
        examples=["Hello from ttsq."],
        json_schema_extra=_required_without_default,
    )
    ssml: str | None = Field(
        None,
        description="An SSML document (`<speak>…</speak>`) to speak in place of `text`: breaks as exact silence, "
        "`prosody` rate and volume, `voice` switches, `say-as`, `sub`, `mark` (docs/ssml.md has the conformance "
        "table). At most MAX_SSML_CHARS characters (`maxLength`), markup included; what it says is held to "
        "MAX_TEXT_CHARS. An unsupported element or attribute, or XML that is not well-formed, is a 422 with its line "
        "and column.",
        examples=['<speak>Hello <break time="700ms"/> <prosody rate="slow">world</prosody>.</speak>'],
        json_schema_extra={"minLength": 1},
    )
    document: bool = Field(
        False,
        description="A whole document (docs/documents.md): `text` may then hold up to MAX_DOCUMENT_CHARS characters; it "
        "is spoken part by part, its status reports the parts done and the audio so far, its audio is streamed as it is "
        "made and served from that stream, and a worker's death costs only the parts it had in hand. It pays one "
        "rate-limit token per MAX_TEXT_CHARS characters, and its `format` is one ttsq streams (not `ogg`).",
    )
    text_format: Literal["plain", "markdown"] = Field(
        "plain",
        description="`markdown`: `text` is Markdown, read as a person reads it aloud (headings with a pause, lists item by "
        "item, links by their text, code blocks and tables skipped: docs/markdown.md). With `text` only.",
    )
    voice: str | None = Field(
        None, description="A registered voice name, or a blend of 2-8 of them (`zh_female*0.7+narrator*0.3`); fixes the speaker."
    )
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Sampling seed; without a voice it also picks the speaker.")
    format: AudioFormat = "wav"
    callback_url: str | None = Field(
        None,
        max_length=2048,
        description="An http(s) URL to POST the outcome to when the task ends (a signed webhook; see README). "
        "Private, loopback and link-local addresses are refused unless allow-listed.",
    )
    priority: Priority | None = Field(
        None,
        description="The task's lane in the fair queue: `interactive` is served first, `batch` (bulk work) gets a bounded "
        "share while interactive work waits (docs/fairness.md). Default: the API key's priority, else interactive.",
    )
    consistent_voice: bool | None = Field(
        None,
        description="Keep one voice across a long text: every chunk after the first is conditioned on the first chunk's "
        "audio, as ChatTTS's `split_text` does (docs/voices.md). Default: `CONSISTENT_VOICE`. No effect with a voice made "
        "from a recording (already conditioned on it).",
    )
    listen: bool = Field(
        False,
        description="You will hear the task as it is made (its `/stream` or `/events` followed from the start): each "
        "chunk's audio is then decoded in pieces while it is generated, so its first audio comes a few dozen decode steps "
        "in. Without it each chunk is decoded whole when it ends, which costs less CPU; its audio is the same to float "
        "rounding (docs/decoder.md), and a stream followed anyway still gets every sample, chunk by chunk. The routes "
        "that stream their own answer (OpenAI's, ElevenLabs' and Cartesia's streamed speech, the realtime WebSockets) "
        "set it themselves.",
    )

    @model_validator(mode="after")
    def _text_or_ssml(self) -> SubmitRequest:
        """Exactly one of ``text`` and ``ssml``, refused naming the field to fix (``ssml`` when both are sent)."""
        given = {TEXT_FIELD, SSML_FIELD} & self.model_fields_set
        if len(given) != 1:
            message = "send `text` or `ssml`, not both" if given else "send `text` (or `ssml`): one of them is required"
            error = PydanticCustomError("text_or_ssml", message)
            field = SSML_FIELD if given else TEXT_FIELD
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(type=error, loc=(field,), input=None)])
        return self


class SubmitResponse(BaseModel):
    task_id: str
    status: Status
    queue_position: int | None = Field(
        description="About how many claims come before this one on its shard (0 = next): an estimate in the fair queue's "
        "order, with nobody else arriving (docs/fairness.md)."
    )
    estimate_s: float = Field(description="Rough seconds until the result is ready.")
    seed: int = Field(description="The sampling seed used; resubmit it to keep a randomly drawn voice.")
    deterministic: bool = Field(description="True when the request names a voice or a seed.")
    cached: bool = Field(False, description="Served from the result cache: the audio is ready now.")
    joined: bool = Field(False, description="An identical request was already queued or running; this is its task.")
    notice: str | None = Field(None, description="A warning about the model, e.g. random weights.")


class WebhookStatus(BaseModel):
    """Where a task's completion webhook stands (tasks submitted with a ``callback_url``)."""

    state: Literal["pending", "retrying", "delivered", "gave_up"] = Field(
        description="pending: due or being sent; retrying: an attempt failed, another is scheduled; "
        "delivered: the receiver answered 2xx; gave_up: retried for WEBHOOK_MAX_AGE_S, or refused by the SSRF guard."
    )
    attempts: int
    last_status_code: int | None = None
    last_error: str | None = None
    last_attempt_at: float | None = None
    next_attempt_at: float | None = None


class TaskStatus(BaseModel):
    task_id: str
    status: Status
    queue_position: int | None = None
    attempts: int
    max_attempts: int
    error: str | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    retry_at: float | None = Field(None, description="When a failed attempt will be retried.")
    audio_duration_s: float | None = None
    format: AudioFormat
    content_type: str | None = None
    result_bytes: int | None = None
    seed: int
    voice: str | None = None
    chunks_done: int | None = Field(
        None,
        description="Sentence chunks synthesised so far (current attempt); of a document, its parts published whole so far "
        "(across attempts: a document's next attempt goes on after them).",
    )
    chunks_total: int | None = Field(None, description="The chunks known so far; of a document, all its parts.")
    audio_s: float | None = Field(
        None, description="Of a document: seconds of audio its parts published whole make (only grows, across attempts)."
    )
    webhook: WebhookStatus | None = Field(None, description="The completion webhook's deliveries, when one was asked for.")

    @classmethod
    def of(
        cls, job: Job, position: int | None, progress: tuple[int, int] | None = None, audio_s: float | None = None
    ) -> TaskStatus:
        return cls(
            task_id=job.id,
            status=job.status,
            queue_position=position,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            error=job.error,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            retry_at=job.not_before,
            audio_duration_s=job.duration_s,
            format=job.params.format,
            content_type=job.content_type,
            result_bytes=job.result_bytes,
            seed=job.params.seed,
            voice=job.params.voice,
            chunks_done=progress[0] if progress else None,
            chunks_total=progress[1] if progress else None,
            audio_s=audio_s,
        )


class CancelResponse(BaseModel):
    task_id: str
    status: Literal["cancelled", "cancelling"] = Field(
        description="`cancelled`: it will not run (or not for you); `cancelling`: it is running, its result will be dropped."
    )


class ErrorBody(BaseModel):
    """Every non-422 error: a sentence a person can act on."""

    detail: str
    code: str | None = Field(
        None, description="Where a client may branch on the error: `no_worker` (no worker is alive to run the task)."
    )


class ValidationErrorBody(BaseModel):
    detail: list[dict[str, Any]]


class OpenAIError(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    """Errors on the OpenAI-compatible routes, in OpenAI's shape."""

    error: OpenAIError


class ElevenLabsError(BaseModel):
    status: str = Field(
        description="What went wrong, for a program: `voice_not_found`, `invalid_api_key`, `no_worker`, `too_many_requests`, ..."
    )
    message: str


class ElevenLabsErrorBody(BaseModel):
    """Errors on ElevenLabs' text-to-speech routes, in ElevenLabs' shape (but a 422, which is FastAPI's list, as
    ElevenLabs' is)."""

    detail: ElevenLabsError


IGNORED_FIELDS = "X-TTSQ-Ignored-Fields"
"""The header that names what a request sent and ttsq did not use (the routes of other vendors' protocols)."""
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def field_names(names: Iterable[str]) -> str:
    """The fields a request sent and ttsq ignored, for :data:`IGNORED_FIELDS`: each name as sent when it is a plain
    identifier (ASCII letters, digits, ``_.-``, at most 64), else ``(unnamed)``; each once (a field of every line of a
    list is named once); at most 20, then how many more."""
    shown = sorted({name if _PLAIN_NAME.fullmatch(name) else "(unnamed)" for name in names})
    more = f", and {len(shown) - 20} more" if len(shown) > 20 else ""
    return ", ".join(shown[:20]) + more


class CartesiaErrorBody(BaseModel):
    """Errors on Cartesia's routes (``/tts/...``), in Cartesia's HTTP error shape (its ``Cartesia-Version`` 2026-03-01
    and later), so its SDK and the frameworks' Cartesia plugins read them as they read Cartesia's own."""

    error_code: str | None = Field(description="A machine-readable code (`invalid_request`, `unauthorized`, `no_worker`, …).")
    title: str
    message: str
    request_id: str
    param: str | None = Field(None, description="ttsq's own: the request field at fault, where one is (`voice.id`).")


class GoogleFieldViolation(BaseModel):
    field: str
    description: str


class GoogleErrorDetail(BaseModel):
    type: str = Field(alias="@type", description="`type.googleapis.com/google.rpc.BadRequest`.")
    fieldViolations: list[GoogleFieldViolation]


class GoogleError(BaseModel):
    code: int
    message: str
    status: str = Field(description="The google.rpc.Code name: `INVALID_ARGUMENT`, `UNAUTHENTICATED`, `UNAVAILABLE`, …")
    details: list[GoogleErrorDetail] | None = None


class GoogleErrorBody(BaseModel):
    """Errors on Google Cloud's route (``/v1/text:synthesize``), in Google's shape (``google.rpc.Status`` as JSON)."""

    error: GoogleError


class DeadLetter(BaseModel):
    """A job that failed for good: why, after how many attempts, and what it was asked to say."""

    task_id: str
    error: str | None
    attempts: int
    max_attempts: int
    created_at: float
    finished_at: float | None
    owner: str | None = Field(None, description="Who submitted it: `key:<id>` or `addr:<client address>`.")
    text: str = Field(description="The text to synthesise (shortened to 200 characters in lists).")
    voice: str | None
    seed: int
    format: AudioFormat
    requeues: int = Field(description="Times it was requeued from the dead letters before.")

    @classmethod
    def of(cls, job: Job, *, preview: bool) -> DeadLetter:
        text = job.params.text
        return cls(
            task_id=job.id,
            error=job.error,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            created_at=job.created_at,
            finished_at=job.finished_at,
            owner=job.owner,
            text=text[:199] + "…" if preview and len(text) > 200 else text,
            voice=job.params.voice,
            seed=job.params.seed,
            format=job.params.format,
            requeues=job.requeues,
        )


class DeadLetterList(BaseModel):
    total: int = Field(description="Dead letters held (the list is capped at DEAD_LETTER_MAX).")
    dead_letters: list[DeadLetter]


class RequeueResponse(BaseModel):
    task_id: str
    status: Literal["queued"]
    queue_position: int


class TaskEvent(BaseModel):
    """The JSON ``data`` of one ``status`` event on ``GET /v1/tts/events/{id}``."""

    task_id: str
    status: Status
    queue_position: int | None
    error: str | None
    chunks_done: int | None
    chunks_total: int | None
    audio_s: float | None = None


class TimingEvent(BaseModel):
    """The JSON ``data`` of one ``timing`` event on ``GET /v1/tts/events/{id}``: one chunk's caption cue, sent as its
    audio is published (the same cue as ``GET /v1/tts/result/{id}?format=json`` lists once the task is done)."""

    index: int
    start: int
    """Where the chunk's speech starts in the joined audio, in samples (24 kHz)."""
    end: int
    start_s: float
    end_s: float
    text: str
    """The chunk's text as spoken (after normalisation)."""


def sse_schema(data: dict[str, Any], event: str | None = None) -> dict[str, Any]:
    """The OpenAPI schema of one server-sent event whose ``data`` is JSON matching ``data`` (``event``: its name)."""
    properties: dict[str, Any] = {"data": {"type": "string", "contentMediaType": "application/json", "contentSchema": data}}
    if event is not None:
        properties["event"] = {"const": event}
    return {"type": "object", "required": sorted(properties), "properties": properties}


def component_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema with its references pointing into the OpenAPI document's components
    (every model it refers to must be in them through some route)."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    schema.pop("$defs", None)
    return schema


def task_links(task_id: str) -> dict[str, Any]:
    """OpenAPI links from an answer that names a task (``task_id``: where, e.g. ``$response.body#/task_id``) to what a
    client does next with it; fuzzers follow them from a submit to the task's routes."""
    return {
        name: {"operationId": operation, "parameters": {"task_id": task_id}, "description": description}
        for name, operation, description in (
            ("status", "task_status", "Where the task stands."),
            ("result", "task_result", "Its audio, once done."),
            ("stream", "task_stream", "Its audio as it is synthesised."),
            ("events", "task_events", "Its status changes as server-sent events."),
            ("cancel", "cancel_task", "Cancel it."),
        )
    }


LIMITED_TEXT_FIELDS = (
    ("SubmitRequest", TEXT_FIELD, "max_document_chars"),
    ("SubmitRequest", SSML_FIELD, "max_ssml_chars"),
    ("SpeechRequest", "input", "openai_max_input_chars"),
    ("RefineRequest", TEXT_FIELD, "max_text_chars"),
    ("CartesiaBytesRequest", "transcript", "openai_max_input_chars"),
    ("GoogleSynthesisInput", "text", "openai_max_input_chars"),
)
"""The request fields whose ``maxLength`` is a setting: ``MAX_TEXT_CHARS`` (native submit, refine; a submit's ``text`` is
``MAX_DOCUMENT_CHARS`` long with ``document: true`` and ``MAX_TEXT_CHARS`` without, :func:`deployment_openapi`), ``MAX_SSML_CHARS``
(the submit's SSML), ``OPENAI_MAX_INPUT_CHARS`` (every route that answers a whole text's audio: OpenAI's speech,
Cartesia's bytes, Google's synthesize)."""


WEBHOOK_FIELDS = (("SubmitRequest", "callback_url"),)
"""The request fields that exist only where completion webhooks are configured."""

NO_NUL = {"pattern": "^[^\\u0000]*$"}
"""A string without NUL, as JSON Schema says it: the request bodies' strings and keys (``ttsq.api.bodies``)."""

JSON_WITHOUT_NUL = "JsonWithoutNul"
JSON_WITHOUT_NUL_REF = {"$ref": f"#/components/schemas/{JSON_WITHOUT_NUL}"}
JSON_WITHOUT_NUL_SCHEMA: dict[str, Any] = {
    "title": JSON_WITHOUT_NUL,
    "description": "Any JSON value whose strings and keys hold no NUL (what a body's fields that are taken and ignored may be).",
    "anyOf": [
        {"type": "string", **NO_NUL},
        {"type": ["number", "boolean", "null"]},
        {"type": "array", "items": JSON_WITHOUT_NUL_REF},
        {"type": "object", "propertyNames": NO_NUL, "additionalProperties": JSON_WITHOUT_NUL_REF},
    ],
}
"""The value of a field a request body may carry beyond its own (OpenAI's, which are ignored)."""


def _request_bodies(schema: dict[str, Any]) -> set[str]:
    """The components that are some operation's JSON request body, or part of one (an object nested in it by
    reference: Google's ``voice``, Cartesia's ``output_format``)."""
    pending = []
    for operations in schema.get("paths", {}).values():
        for operation in operations.values():
            body = operation.get("requestBody", {}) if isinstance(operation, dict) else {}
            pending.append(body.get("content", {}).get("application/json", {}).get("schema", {}))
    components = schema.get("components", {}).get("schemas", {})
    names: set[str] = set()
    while pending:
        for ref in _refs(pending.pop()):
            name = ref.rsplit("/", 1)[1]
            if ref.startswith("#/components/schemas/") and name not in names:
                names.add(name)
                pending.append(components.get(name, {}))
    return names


def _refs(node: Any) -> list[str]:
    """Every ``$ref`` in ``node``, however deep."""
    if isinstance(node, list):
        return [ref for item in node for ref in _refs(item)]
    if not isinstance(node, dict):
        return []
    own = [node["$ref"]] if isinstance(node.get("$ref"), str) else []
    return own + [ref for key, value in node.items() if key != "$ref" for ref in _refs(value)]


def _refuse_nul(node: Any) -> None:
    """Say, in ``node`` (a request body's schema, changed in place), that its strings and keys hold no NUL: a string
    without a pattern or a fixed set of values gets :data:`NO_NUL`, an object open to other keys a ``propertyNames``."""
    if isinstance(node, list):
        for item in node:
            _refuse_nul(item)
        return
    if not isinstance(node, dict):
        return
    if node.get("type") == "string" and not {"pattern", "enum", "const"} & set(node):
        node.update(NO_NUL)
    if node.get("type") == "object" and node.get("additionalProperties") is not False:
        node.setdefault("propertyNames", dict(NO_NUL))
        if node.get("additionalProperties", True) in (True, {}):
            node["additionalProperties"] = dict(JSON_WITHOUT_NUL_REF)
    for key in ("properties", "anyOf", "oneOf", "allOf", "items", "additionalProperties"):
        child = node.get(key)
        _refuse_nul(list(child.values()) if key == "properties" and isinstance(child, dict) else child)


def deployment_openapi(
    base: dict[str, Any],
    *,
    max_text_chars: int,
    openai_max_input_chars: int,
    anonymous_allowed: bool,
    webhooks: bool,
    max_ssml_chars: int,
    max_document_chars: int | None = None,
) -> dict[str, Any]:
    """The OpenAPI document of this deployment: ``base`` (generated from the routes) with what settings decide.

    * ``maxLength`` of the texts is ``MAX_TEXT_CHARS`` (``OPENAI_MAX_INPUT_CHARS`` on OpenAI's speech, ``MAX_SSML_CHARS``
      on the submit's ``ssml``); a submit's ``text`` may be ``MAX_DOCUMENT_CHARS`` long where it says ``document: true``;
    * where callers may come without a key (``AUTH=off``, or ``auto`` on loopback), every operation's
      security lists the empty requirement ``{}`` as well: the key is optional, as OpenAPI says it;
    * without webhooks (no ``WEBHOOK_SECRET`` or ``PUBLIC_URL``) there is no ``callback_url``: it is refused,
      so the schema does not offer it;
    * no string of a request body, and no key of one, may hold NUL (:mod:`ttsq.api.bodies` refuses it).
    """
    schema = copy.deepcopy(base)
    components = schema.get("components", {}).get("schemas", {})
    for name in _request_bodies(schema):
        _refuse_nul(components.get(name, {}))
    if any(node.get("additionalProperties") == JSON_WITHOUT_NUL_REF for node in components.values()):
        components[JSON_WITHOUT_NUL] = copy.deepcopy(JSON_WITHOUT_NUL_SCHEMA)
    documents = max(max_text_chars, max_document_chars or max_text_chars)
    limits = {
        "max_text_chars": max_text_chars,
        "openai_max_input_chars": openai_max_input_chars,
        "max_ssml_chars": max_ssml_chars,
        "max_document_chars": documents,
    }
    for model, field, setting in LIMITED_TEXT_FIELDS:
        prop = components.get(model, {}).get("properties", {}).get(field)
        if prop is not None:
            prop["maxLength"] = limits[setting]
    submit = components.get("SubmitRequest")
    if submit is not None:  # a document, and Markdown, are texts: neither goes with `ssml`
        submit["allOf"] = [  # beside the rules the model states already (a prosody level needs refinement)
            *submit.get("allOf", []),
            {"not": {"required": [SSML_FIELD, "document"], "properties": {"document": {"const": True}}}},
            {"not": {"required": [SSML_FIELD, "text_format"], "properties": {"text_format": {"const": "markdown"}}}},
        ]
    if submit is not None and documents > max_text_chars:  # a longer text is a document's only
        submit["anyOf"] = [
            {"properties": {TEXT_FIELD: {"maxLength": max_text_chars}}},
            {"properties": {"document": {"const": True}}, "required": ["document"]},
        ]
    if not webhooks:
        for model, field in WEBHOOK_FIELDS:
            components.get(model, {}).get("properties", {}).pop(field, None)
    if anonymous_allowed:
        for operations in schema.get("paths", {}).values():
            for operation in operations.values():
                security = operation.get("security") if isinstance(operation, dict) else None
                if security and {} not in security:
                    security.append({})
    return schema
