"""Voices: list, create (from a seed or a ChatTTS speaker embedding), fetch, delete."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path, status
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field, field_validator

from deps import ServiceDep
from ttsq.api.errors import ERROR_RESPONSES, invalid_field
from ttsq.api.schemas import ErrorBody
from ttsq.domain.jobs import MAX_SEED
from ttsq.domain.voices import Voice, validate_voice_name

router = APIRouter(prefix="/v1/voices", tags=["voices"])

VoiceName = Annotated[str, Path(description="The voice's name.")]


class VoiceCreate(BaseModel):
    """Exactly one of ``seed`` (keep a voice you drew at random) or ``embedding``."""

    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"name": "narrator", "seed": 1234}]})

    name: str = Field(description="1-64 letters, digits, '_' or '-'.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED)
    embedding: str | None = Field(None, min_length=1, max_length=20_000, description="A ChatTTS speaker-embedding string.")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        return validate_voice_name(value)


class VoiceList(BaseModel):
    voices: list[Voice]


def _summary(voice: Voice) -> Voice:
    """Lists leave the (long) embedding out; fetch one voice to see it."""
    return voice.model_copy(update={"embedding": None})


@router.get("", response_model=VoiceList, responses={503: ERROR_RESPONSES[503]}, summary="List voices")
async def list_voices(service: ServiceDep) -> VoiceList:
    return VoiceList(voices=[_summary(v) for v in await service.list_voices()])


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=Voice,
    responses={409: {"model": ErrorBody, "description": "The name is taken."}, **ERROR_RESPONSES},
    summary="Create a named voice",
)
async def create_voice(body: VoiceCreate, service: ServiceDep) -> Voice:
    if (body.seed is None) == (body.embedding is None):
        raise invalid_field("seed", "give exactly one of seed or embedding", body.seed)
    return await service.create_voice(body.name, seed=body.seed, embedding=body.embedding)


@router.get(
    "/{name}",
    response_model=Voice,
    responses={404: {"model": ErrorBody, "description": "No such voice."}, 503: ERROR_RESPONSES[503]},
    summary="Fetch a voice",
)
async def get_voice(name: VoiceName, service: ServiceDep) -> Voice:
    voice = await service.get_voice(name)
    if voice is None:
        raise HTTPException(404, f"no voice named {name!r}")
    return voice


@router.delete(
    "/{name}",
    status_code=status.HTTP_204_NO_CONTENT,
    responses={
        404: {"model": ErrorBody, "description": "No such voice."},
        409: {"model": ErrorBody, "description": "Built-in voices cannot be deleted."},
        503: ERROR_RESPONSES[503],
    },
    summary="Delete a voice",
)
async def delete_voice(name: VoiceName, service: ServiceDep) -> Response:
    if not await service.delete_voice(name):
        raise HTTPException(404, f"no voice named {name!r}")
    return Response(status_code=status.HTTP_204_NO_CONTENT)
