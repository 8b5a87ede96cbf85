"""Voices: list, create (from a seed, a ChatTTS speaker embedding or a reference recording), fetch, delete."""

from __future__ import annotations

import base64
from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, Query, status
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator
from starlette.convertors import Convertor, register_url_convertor

from deps import AdminCaller, TTSCaller, VoicesDep
from ttsq.api.errors import (
    AUTH_RESPONSES,
    BODY_TIMEOUT_RESPONSE,
    BODY_TOO_LARGE_RESPONSE,
    ERROR_RESPONSES,
    UNSUPPORTED_MEDIA_TYPE_RESPONSE,
    invalid_field,
)
from ttsq.api.schemas import NO_NUL, REQUEST_MODEL, ErrorBody
from ttsq.api.service import MAX_BLEND_COMPONENTS, MAX_SEED, VOICE_NAME, Voice, validate_voice_name

router = APIRouter(prefix="/v1/voices", tags=["voices"])


class _VoiceNameConvertor(Convertor[str]):
    """A voice's name in a path, never ``draw``: ``/v1/voices/draw`` is the draw's (``draw_api.py``), and a route
    here that matched it too would answer its other methods (and list them in ``Allow``) as a voice's."""

    regex = "(?!draw(?:/|$))[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("voice_name", _VoiceNameConvertor())

VoiceName = Annotated[str, Path(description="The voice's name.")]
_TENANT_PATTERN = r"^(?:key:[0-9a-f]{12}|[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$"
"""A tenant's name (``keys create --tenant``), or ``key:<id>`` for a key that is a tenant of its own: what
:func:`ttsq.api.service.viewed_owner` takes, in the schema, so a malformed one is a 422 naming the field where it is."""

Tenant = Annotated[
    str | None,
    Query(
        pattern=_TENANT_PATTERN,
        description="Scope admin: act as this tenant sees the voices (a tenant's name, or `key:<id>` for a key that is "
        "a tenant of its own) instead of as the caller's own tenant.",
    ),
]

_NAME_SCHEMA: dict[str, JsonValue] = {"pattern": VOICE_NAME.pattern, "minLength": 1, "maxLength": 64}
"""What :func:`validate_voice_name` accepts, for the schema (the validator keeps its own plain message)."""

_ONE_SPEAKER: list[JsonValue] = [
    {"title": "from a seed", "required": ["seed"], "properties": {"seed": {"type": "integer"}}},
    {"title": "from an embedding", "required": ["embedding"], "properties": {"embedding": {"type": "string"}}},
    {"title": "a blend", "required": ["components"], "properties": {"components": {"type": "array"}}},
    {
        "title": "from a reference recording",
        "required": ["audio", "transcript"],
        "properties": {"audio": {"type": "string"}, "transcript": {"type": "string"}},
    },
]
"""Exactly one of ``seed``, ``embedding``, ``components`` or ``audio`` (with its ``transcript``), as JSON Schema says it."""

_SHARED_AND_TENANT: dict[str, JsonValue] = {
    "required": ["shared", "tenant"],
    "properties": {"shared": {"const": True}, "tenant": {"type": "string"}},
}
"""Not a global voice and one tenant's at once (``shared: true`` beside a ``tenant``), as JSON Schema says it."""


_REFERENCE_FORM: dict[str, JsonValue] = {
    "type": "object",
    "required": ["name", "audio", "transcript"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", **_NAME_SCHEMA},
        "audio": {
            "type": "string",
            "format": "binary",
            "minLength": 1,
            "description": "The recording file (wav, mp3, flac or ogg).",
        },
        "transcript": {"type": "string", "minLength": 1, "maxLength": 2000, **NO_NUL},
    },
}
"""A voice from a recording as a form (``curl -F``): read as the JSON body with the file base64 (:mod:`ttsq.api.uploads`)."""


class BlendComponent(BaseModel):
    """One voice of a stored blend and its weight."""

    model_config = ConfigDict(**REQUEST_MODEL)

    voice: str = Field(description="A seed, embedding or built-in voice's name.", json_schema_extra=_NAME_SCHEMA)
    weight: float = Field(gt=0, allow_inf_nan=False, description="Its weight (any positive scale: normalised to sum 1).")


class VoiceCreate(BaseModel):
    """Exactly one of ``seed`` (keep a voice you drew at random) or ``embedding``."""

    model_config = ConfigDict(
        **REQUEST_MODEL,
        json_schema_extra={"examples": [{"name": "narrator", "seed": 1234}], "oneOf": _ONE_SPEAKER, "not": _SHARED_AND_TENANT},
    )

    name: str = Field(description="1-64 letters, digits, '_' or '-'.", json_schema_extra=_NAME_SCHEMA)
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="A speaker seed; give it or `embedding`, not both.")
    embedding: str | None = Field(
        None, min_length=1, max_length=20_000, description="A ChatTTS speaker-embedding string; give it or `seed`, not both."
    )
    components: list[BlendComponent] | None = Field(
        None,
        min_length=2,
        max_length=MAX_BLEND_COMPONENTS,
        description="A blend: 2-8 voices with weights, stored as its recipe (seeds/embeddings and weights; docs/voices.md).",
    )
    audio: str | None = Field(
        None,
        min_length=1,
        description="A reference recording, base64: 3-30 s (`MAX_REFERENCE_S`) of wav, mp3, flac or ogg speech, with its "
        "`transcript`. Only ChatTTS's speaker prompt made from it is stored, never the recording (docs/voices.md).",
    )
    transcript: str | None = Field(
        None, min_length=1, max_length=2_000, description="What the reference recording says (with `audio`)."
    )
    shared: bool = Field(
        False,
        description="A global voice, seen and used by every tenant (the shared catalogue); otherwise the voice is the "
        "creating key's tenant's alone (docs/voices.md#tenants).",
    )
    tenant: str | None = Field(
        None,
        pattern=_TENANT_PATTERN,
        description="Make the voice this tenant's (its name, or `key:<id>` for a key that is a tenant of its own) "
        "instead of the creating key's tenant's; not with `shared`.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return validate_voice_name(value)


_VOICE_LINKS = {
    "get": {"operationId": "get_voice", "parameters": {"name": "$response.body#/name"}, "description": "Fetch it."},
    "delete": {"operationId": "delete_voice", "parameters": {"name": "$response.body#/name"}, "description": "Delete it."},
}


class VoiceList(BaseModel):
    voices: list[Voice]


def _summary(voice: Voice) -> Voice:
    """Lists leave the (long) embedding and speaker prompt out; fetch one voice to see them."""
    return voice.model_copy(update={"embedding": None, "prompt": None})


@router.get(
    "",
    operation_id="list_voices",
    response_model=VoiceList,
    responses={503: ERROR_RESPONSES[503], **AUTH_RESPONSES},
    summary="List voices",
)
async def list_voices(voices: VoicesDep, caller: TTSCaller, tenant: Tenant = None) -> VoiceList:
    """The built-in voices, the global ones and the caller's tenant's own (never another tenant's)."""
    return VoiceList(voices=[_summary(v) for v in await voices.list_voices(caller, tenant)])


@router.post(
    "",
    operation_id="create_voice",
    status_code=status.HTTP_201_CREATED,
    response_model=Voice,
    responses={
        201: {"description": "The voice, usable by name at once.", "links": _VOICE_LINKS},
        503: {"model": ErrorBody, "description": "Redis is unreachable, or no worker encoded the recording in time."},
        409: {"model": ErrorBody, "description": "The name is taken, or a built-in voice's."},
        408: BODY_TIMEOUT_RESPONSE,
        413: BODY_TOO_LARGE_RESPONSE,
        415: UNSUPPORTED_MEDIA_TYPE_RESPONSE,
        **ERROR_RESPONSES,
        **AUTH_RESPONSES,
    },
    summary="Create a named voice (scope admin)",
    openapi_extra={"requestBody": {"content": {"multipart/form-data": {"schema": _REFERENCE_FORM}}}},
)
async def create_voice(body: VoiceCreate, voices: VoicesDep, caller: AdminCaller) -> Voice:
    if body.audio is not None or body.transcript is not None:
        return await _create_reference_voice(body, voices, caller)
    if body.components is not None:
        if body.seed is not None or body.embedding is not None:
            raise invalid_field("components", "give exactly one of seed, embedding or components")
        components = [(part.voice, part.weight) for part in body.components]
        return await voices.create_blend_voice(body.name, components, caller, shared=body.shared, tenant=body.tenant)
    if (body.seed is None) == (body.embedding is None):
        raise invalid_field("seed", "give exactly one of seed or embedding (or audio with its transcript)", body.seed)
    return await voices.create_voice(
        body.name, caller, seed=body.seed, embedding=body.embedding, shared=body.shared, tenant=body.tenant
    )


async def _create_reference_voice(body: VoiceCreate, voices: VoicesDep, caller: AdminCaller) -> Voice:
    """``audio`` (base64) and ``transcript``, alone: a voice made from a recording (docs/voices.md)."""
    if body.seed is not None or body.embedding is not None or body.components is not None:
        raise invalid_field("audio", "give exactly one of seed or embedding (or audio with its transcript)")
    if body.audio is None or body.transcript is None:
        missing = "audio" if body.audio is None else "transcript"
        raise invalid_field(missing, "a voice from a recording needs both audio (base64) and its transcript")
    try:
        audio = base64.b64decode(body.audio, validate=True)
    except ValueError as exc:  # binascii.Error, or a character outside ASCII (which b64decode refuses with a ValueError)
        raise invalid_field("audio", f"not base64: {exc}") from exc
    return await voices.create_reference_voice(body.name, audio, body.transcript, caller, shared=body.shared, tenant=body.tenant)


@router.get(
    "/{name:voice_name}",
    operation_id="get_voice",
    response_model=Voice,
    responses={
        404: {"model": ErrorBody, "description": "No such voice (or another tenant's)."},
        422: ERROR_RESPONSES[422],
        503: ERROR_RESPONSES[503],
        **AUTH_RESPONSES,
    },
    summary="Fetch a voice",
)
async def get_voice(name: VoiceName, voices: VoicesDep, caller: TTSCaller, tenant: Tenant = None) -> Voice:
    """A voice the caller sees; its speaker prompt, transcript and embeddings only to the ``admin`` scope."""
    voice = await voices.get_voice(name, caller, tenant)
    if voice is None:
        raise HTTPException(404, f"no voice named {name!r}")
    return voice


@router.delete(
    "/{name:voice_name}",
    operation_id="delete_voice",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={
        404: {"model": ErrorBody, "description": "No such voice (or another tenant's)."},
        409: {"model": ErrorBody, "description": "Built-in voices cannot be deleted."},
        422: ERROR_RESPONSES[422],
        503: ERROR_RESPONSES[503],
        **AUTH_RESPONSES,
    },
    summary="Delete a voice (scope admin)",
)
async def delete_voice(name: VoiceName, voices: VoicesDep, caller: AdminCaller, tenant: Tenant = None) -> Response:
    """Deletes the voice the name means to the caller's tenant (or to ``tenant``): its own, else the global one."""
    if not await voices.delete_voice(name, caller, tenant):
        raise HTTPException(404, f"no voice named {name!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
