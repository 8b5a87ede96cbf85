"""Request bodies of the dialogue routes: ttsq's own (``POST /v1/tts/dialogue``) and ElevenLabs' ``text-to-dialogue``.

A line's sampling overrides are the one sampling record's fields (:class:`ttsq.domain.sampling.SamplingFields`), each
optional: :data:`SamplingOverrides` is made from the record itself, so a parameter added there (its bounds, its
description) is a line's override too without another edit here. A line may name a ``style`` of its own, and the
dialogue one for every line (docs/prosody.md): a line's own fields over its style's, over the dialogue's.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, create_model, model_validator
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from ttsq.api.schemas import REQUEST_MODEL, Priority
from ttsq.domain.jobs import MAX_SEED, AudioFormat
from ttsq.domain.sampling import SamplingFields, with_the_refinement_rule
from ttsq.domain.styles import STYLE_NAME, StyledSampling

__all__ = [
    "DEFAULT_GAP_MS",
    "DialogueLine",
    "DialogueRequest",
    "ElevenLabsDialogueInput",
    "ElevenLabsDialogueRequest",
    "SamplingOverrides",
    "overrides",
]

DEFAULT_GAP_MS = 250.0
"""The pause between two lines of a dialogue: a turn is a longer pause than a sentence's (120 ms)."""
MAX_GAP_MS = 10_000.0
"""The longest pause between two lines (ten seconds): a job's silence is held in memory like its speech."""


def _optional(info: FieldInfo) -> tuple[Any, FieldInfo]:
    """A sampling field as an override: its type or null, its bounds and description, no default of its own."""
    override = copy.copy(info)
    override.default = None
    annotation: Any = info.annotation
    return annotation | None, override


class _Overrides(BaseModel):
    """What a line's overrides share: a request body's strictness, and the refine rule stated in the schema (a level
    beside ``refine_text: false`` in one line is refused, :func:`ttsq.domain.sampling.overridden`)."""

    model_config = REQUEST_MODEL

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return with_the_refinement_rule(handler(core_schema), handler)


if TYPE_CHECKING:
    SamplingOverrides = BaseModel
else:
    SamplingOverrides = create_model(
        "SamplingOverrides",
        __base__=_Overrides,
        __doc__="A line's own sampling: any field given overrides the dialogue's.",
        **{name: _optional(info) for name, info in SamplingFields.model_fields.items()},
    )


def overrides(line: BaseModel) -> dict[str, Any]:
    """The sampling fields ``line`` gave (a null is not given), by their wire names (``break``, not ``break_``)."""
    given = {}
    for name, info in SamplingFields.model_fields.items():
        value = getattr(line, name, None)
        if value is not None:
            given[info.alias or name] = value
    return given


class DialogueLine(SamplingOverrides):
    """One line: who says it and what, and any sampling of its own (the dialogue's otherwise)."""

    model_config = ConfigDict(**REQUEST_MODEL)

    speaker: str = Field(min_length=1, max_length=64, description="A key of `voices`.", examples=["Alice"])
    text: str = Field(
        description="What the speaker says: checked as `text` on /v1/tts/submit is (prosody tokens allowed), against "
        "MAX_DIALOGUE_CHARS for the whole dialogue.",
        json_schema_extra={"minLength": 1},
    )
    style: str | None = Field(
        None,
        pattern=STYLE_NAME.pattern,
        description="A style (`GET /v1/styles`) for this line: its parameters over the dialogue's, the line's own "
        "fields over its style's (docs/prosody.md).",
        examples=["cheerful"],
    )


class DialogueRequest(StyledSampling):
    """A dialogue: lines (or a script), each in its speaker's voice. The sampling fields (and ``style``, resolved into
    them) are every line's defaults."""

    model_config = ConfigDict(
        **REQUEST_MODEL,
        json_schema_extra={
            "examples": [
                {
                    "lines": [{"speaker": "Alice", "text": "Hi Bob."}, {"speaker": "Bob", "text": "Hello, Alice!", "speed": 6}],
                    "voices": {"Alice": "zh_female", "Bob": "zh_male"},
                    "format": "mp3",
                },
                {"script": "Alice: Hi Bob.\nBob: Hello, Alice!", "voices": {"Alice": "zh_female", "Bob": "zh_male"}},
            ],
            # Exactly one of the two, as JSON Schema says it: a branch holds where its field is present and not null.
            "oneOf": [
                {"title": "lines", "required": ["lines"], "properties": {"lines": {"type": "array"}}},
                {"title": "a script", "required": ["script"], "properties": {"script": {"type": "string"}}},
            ],
        },
    )

    lines: list[DialogueLine] | None = Field(
        None,
        min_length=1,
        description="The lines in order (at least one, at most MAX_DIALOGUE_LINES); exactly one of `lines` and `script`.",
    )
    script: str | None = Field(
        None,
        description="The lines as a script: one `Speaker: text` per line (blank lines skipped); exactly one of `lines` "
        "and `script`.",
        examples=["Alice: Hi Bob.\nBob: Hello, Alice!"],
    )
    voices: dict[str, str] = Field(
        min_length=1,
        description="Each speaker's voice: a registered voice name or a blend (`zh_female*0.7+narrator*0.3`), among "
        "the voices the caller sees. Every speaker of the lines must have one.",
    )
    gap_ms: float = Field(
        DEFAULT_GAP_MS, ge=0, le=MAX_GAP_MS, description="Silence between two lines, exactly (rounded to whole samples)."
    )
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Sampling seed (default 42: a dialogue is deterministic).")
    format: AudioFormat = "wav"
    callback_url: str | None = Field(
        None, max_length=2048, description="An http(s) URL to POST the outcome to when the task ends, as on /v1/tts/submit."
    )
    priority: Priority | None = Field(None, description="The task's lane in the fair queue, as on /v1/tts/submit.")
    consistent_voice: bool | None = Field(
        None, description="Keep each line's voice across its sentences, as on /v1/tts/submit. Default: `CONSISTENT_VOICE`."
    )
    listen: bool = Field(
        False,
        description="You will hear the task as it is made (its stream followed from the start), as on /v1/tts/submit: "
        "each chunk decoded in pieces while it is generated; without it each is decoded whole when it ends (less CPU).",
    )

    @model_validator(mode="after")
    def _lines_or_script(self) -> DialogueRequest:
        if (self.lines is None) == (self.script is None):
            raise ValueError("give exactly one of `lines` and `script`")
        return self


# ---- ElevenLabs' text-to-dialogue ----------------------------------------------------------------------------------


class ElevenLabsDialogueInput(BaseModel):
    """One of ElevenLabs' dialogue inputs: a text and the voice that says it."""

    model_config = ConfigDict(strict=True, extra="allow")

    text: str = Field(json_schema_extra={"minLength": 1})
    voice_id: str = Field(min_length=1, description="A ttsq voice the caller sees (or a blend).")


class ElevenLabsDialogueRequest(BaseModel):
    """ElevenLabs' ``text-to-dialogue`` body. ``model_id``, ``settings``, ``language_code``, ``previous_text`` and the
    other fields its SDK may send are accepted and ignored, named in the answer's ``X-TTSQ-Ignored-Fields``."""

    model_config = ConfigDict(strict=True, extra="allow")

    inputs: list[ElevenLabsDialogueInput] = Field(min_length=1)
    seed: int | None = Field(None, ge=0, le=4_294_967_295, description="ElevenLabs' seed range; ttsq samples from it modulo 2^31.")
