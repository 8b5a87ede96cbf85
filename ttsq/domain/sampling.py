"""The sampling parameters: how ChatTTS draws a request's audio, beyond its text, speaker and seed.

One record, :class:`Sampling`, and the one home of each parameter's default and bounds. Everything
that carries the parameters takes them from here: the request body (``ttsq.api.schemas``) and the
stored job (:class:`ttsq.domain.jobs.TTSParams`) inherit :class:`SamplingFields`, so clients send and
Redis stores the same flat fields as before; the engine request holds a :class:`Sampling`; the batch
key and the cache key take the whole record, so a parameter added here is grouped on and keyed on
without another edit. Each bound is declared once, as a type (:data:`Speed`, :data:`Oral`, ...), which both
the record and a preset that may leave a parameter unsaid (a style: :mod:`ttsq.domain.styles`) use.

Besides speed and the sampler's temperature, top-p and top-k, ChatTTS has a *refine* pass: a text-generation step
that rewrites the text with prosody tokens (``[uv_break]``, ``[laugh]``, ...) before it is spoken, steered by a
prompt of three levels, ``[oral_N][laugh_N][break_N]`` (ChatTTS's ``RefineTextParams.prompt``). The levels are
here too (``oral``, ``laugh``, ``break``), unset by default: a request that sets one asks for the refine pass, so
setting any of them turns ``refine_text`` on (:meth:`SamplingFields._levels_ask_for_refinement`), and only the levels
set are in the prompt (:attr:`SamplingFields.refine_prompt`: none set is ChatTTS's own empty prompt, what
``refine_text`` always meant).

The sampling *seed* is not one of them: it is drawn per request, and requests that differ only in
their seed share a ChatTTS call (see :func:`ttsq.domain.batching.batch_key`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Self

from pydantic import BaseModel, ConfigDict, Field, GetJsonSchemaHandler, ValidationInfo, field_validator, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

__all__ = [
    "DEFAULT_SAMPLING",
    "LEVELS",
    "MAX_SPEED",
    "MIN_SPEED",
    "SAMPLING_FIELDS",
    "BreakLevel",
    "LaughLevel",
    "OralLevel",
    "Sampling",
    "SamplingFields",
    "SamplingPreset",
    "Speed",
    "Temperature",
    "TopK",
    "TopP",
    "overridden",
    "speed_level",
    "with_the_refinement_rule",
]

# ChatTTS's ``[speed_N]`` prompt, as the API offers it: 1 (slow) to 9 (fast).
MIN_SPEED = 1
MAX_SPEED = 9

Speed = Annotated[int, Field(ge=MIN_SPEED, le=MAX_SPEED, description=f"ChatTTS speed {MIN_SPEED} (slow) to {MAX_SPEED} (fast).")]
Temperature = Annotated[float, Field(ge=0.01, le=1.0)]
TopP = Annotated[float, Field(ge=0.1, le=1.0)]
TopK = Annotated[int, Field(ge=1, le=100)]
OralLevel = Annotated[int, Field(ge=0, le=9)]
LaughLevel = Annotated[int, Field(ge=0, le=2)]
BreakLevel = Annotated[int, Field(ge=0, le=7)]

LEVELS: tuple[str, ...] = ("oral", "laugh", "break")
"""The refine prompt's levels, by the names clients send and jobs store, in the prompt's order."""

_REFINES_WITH_LEVELS = "setting oral, laugh or break turns refine_text on"

NO_LEVEL_WITHOUT_REFINEMENT: dict[str, Any] = {
    "not": {
        "required": ["refine_text"],
        "properties": {"refine_text": {"const": False}},
        "anyOf": [{"required": [name], "properties": {name: {"type": "integer"}}} for name in ("oral", "laugh", "break")],
    }
}
"""What the validators refuse, as JSON Schema says it: ``refine_text: false`` beside a level (so that a fuzzer, or a
client generated from the schema, knows it)."""


def with_the_refinement_rule(schema: JsonSchemaValue, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
    """``schema`` (a body's) with :data:`NO_LEVEL_WITHOUT_REFINEMENT` among its ``allOf`` (beside any other rule)."""
    target = handler.resolve_ref_schema(schema)
    rules = target.get("allOf", [])
    if NO_LEVEL_WITHOUT_REFINEMENT not in rules:
        target["allOf"] = [*rules, NO_LEVEL_WITHOUT_REFINEMENT]
    return schema


class SamplingFields(BaseModel):
    """The sampling parameters as fields, with their defaults and bounds: inherited by the models that
    carry them flat (the submit body, the stored job), so that each is declared once and the wire and
    stored shapes stay what they have always been. ``.sampling`` is the record alone.

    ``break`` is a Python keyword, so its attribute is ``break_``; on the wire and in Redis it is ``break`` (its
    alias, also when dumped), and iterating the model — ``dict(record)`` — names it so too, so a record's fields
    are always the body a client would send."""

    model_config = ConfigDict(serialize_by_alias=True)

    speed: Speed = 5
    temperature: Temperature = 0.3
    top_p: TopP = 0.7
    top_k: TopK = 20
    refine_text: bool = Field(
        False, description=f"Let ChatTTS add oral prosody tokens first (slower); {_REFINES_WITH_LEVELS} (docs/prosody.md)."
    )
    oral: OralLevel | None = Field(
        None, description="The refine prompt's `[oral_N]`: 0 (plain) to 9 (most fillers and interjections); turns refine_text on."
    )
    laugh: LaughLevel | None = Field(
        None, description="The refine prompt's `[laugh_N]`: 0 (no laughter) to 2 (most); turns refine_text on."
    )
    break_: BreakLevel | None = Field(
        None, alias="break", description="The refine prompt's `[break_N]`: 0 (fewest pauses) to 7 (most); turns refine_text on."
    )

    @model_validator(mode="before")
    @classmethod
    def _levels_ask_for_refinement(cls, data: Any) -> Any:
        """A level set where ``refine_text`` is not said turns it on: the levels only steer the refine pass.

        One said ``false`` beside a level is refused by :meth:`_level_needs_refinement` (naming the level): the
        body contradicts itself, and neither reading is safe to guess. (``null`` is not a boolean: refused as such.)"""
        return _refinement_asked(data, absent=("refine_text" not in data) if isinstance(data, dict) else False)

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return with_the_refinement_rule(handler(core_schema), handler)

    @field_validator("oral", "laugh", "break_", mode="after")
    @classmethod
    def _level_needs_refinement(cls, value: int | None, info: ValidationInfo) -> int | None:
        return _level_checked(value, info)

    def __iter__(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        """``(name, value)`` pairs by the names clients send and jobs store (``break``, not ``break_``)."""
        for name, value in super().__iter__():
            yield (_WIRE_NAMES.get(name, name), value)

    @property
    def sampling(self) -> Sampling:
        """These parameters alone, as one value (what a batch shares, what the engine is handed).

        The values were validated when this model was (or come from the API, which validated them), so
        they are not validated again.
        """
        return Sampling.model_construct(**{name: getattr(self, name) for name in _ATTRIBUTES})

    @property
    def refine_prompt(self) -> str:
        """ChatTTS's refine prompt (``RefineTextParams.prompt``): ``[oral_N][laugh_N][break_N]`` of the levels that are
        set, in that order; empty when none is (ChatTTS's default, and what ``refine_text`` alone has always sent)."""
        levels = (("oral", self.oral), ("laugh", self.laugh), ("break", self.break_))
        return "".join(f"[{name}_{value}]" for name, value in levels if value is not None)

    def said(self) -> dict[str, Any]:
        """The parameters this body sets itself (a level turning ``refine_text`` on counts as setting it), by their wire
        names: what overrides a style's (:meth:`SamplingPreset.under`)."""
        said = self.model_fields_set
        return {name: value for name, value in self if name in SAMPLING_FIELDS and _ATTRIBUTE_OF.get(name, name) in said}

    def with_sampling(self, fields: Mapping[str, Any]) -> Self:
        """A copy with these parameters (by their wire names) in place of its own, not validated again: for values
        validated already (a style's, merged by :meth:`SamplingPreset.under`)."""
        return self.model_copy(update={_ATTRIBUTE_OF.get(name, name): value for name, value in fields.items()})

    def key_material(self) -> dict[str, object]:
        """Every parameter by its name, for a key (the cache's): a level left unset is left out, so the key of a
        request that sets none is the key it had before the levels existed."""
        return {name: value for name, value in self if not (name in LEVELS and value is None)}


class Sampling(SamplingFields):
    """How ChatTTS samples one request: speed, temperature, top-p, top-k, whether it refines the text first, and the
    refine prompt's levels.

    A frozen pydantic model rather than a dataclass: the bounds must reach the OpenAPI document and be
    enforced on every body that carries them, which pydantic's ``Field`` constraints do and a dataclass's
    fields cannot; the request body and the stored job are pydantic models that inherit the declarations
    (:class:`SamplingFields`) so that neither shape changes; and frozen makes it a hashable value, which
    is what a batch key needs. It costs the domain no new dependency (the job record is pydantic already).
    """

    model_config = ConfigDict(frozen=True)

    @property
    def sampling(self) -> Sampling:
        return self


class SamplingPreset(BaseModel):
    """The sampling parameters as a preset sets them (a style: :mod:`ttsq.domain.styles`): each one optional, None
    leaving it to the request (else to its default); the bounds are the record's own types. A level set where
    ``refine_text`` is not said turns it on, as in a request; ``refine_text: false`` beside a level is refused."""

    model_config = ConfigDict(serialize_by_alias=True)

    speed: Speed | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    refine_text: bool | None = Field(None, description=f"Whether ChatTTS refines the text first; {_REFINES_WITH_LEVELS}.")
    oral: OralLevel | None = Field(None, description="The refine prompt's `[oral_N]`, 0-9.")
    laugh: LaughLevel | None = Field(None, description="The refine prompt's `[laugh_N]`, 0-2.")
    break_: BreakLevel | None = Field(None, alias="break", description="The refine prompt's `[break_N]`, 0-7.")

    @model_validator(mode="before")
    @classmethod
    def _levels_ask_for_refinement(cls, data: Any) -> Any:
        return _refinement_asked(data, absent=isinstance(data, dict) and data.get("refine_text") is None)

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return with_the_refinement_rule(handler(core_schema), handler)

    @field_validator("oral", "laugh", "break_", mode="after")
    @classmethod
    def _level_needs_refinement(cls, value: int | None, info: ValidationInfo) -> int | None:
        return _level_checked(value, info)

    def __iter__(self) -> Iterator[tuple[str, Any]]:  # type: ignore[override]
        """``(name, value)`` pairs by their wire names, as :class:`SamplingFields` gives them."""
        for name, value in super().__iter__():
            yield (_WIRE_NAMES.get(name, name), value)

    def settings(self) -> dict[str, Any]:
        """The parameters this preset sets, by their wire names."""
        return {name: value for name, value in self if name in SAMPLING_FIELDS and value is not None}

    def under(self, request: SamplingFields) -> dict[str, Any]:
        """The parameters of ``request`` made with this preset: the preset's, overridden by what the request says
        itself (:meth:`SamplingFields.said`); what neither says keeps its default (:meth:`beneath`)."""
        return self.beneath(request.said())

    def beneath(self, said: Mapping[str, Any]) -> dict[str, Any]:
        """The preset's parameters overridden by ``said`` (by their wire names; a dialogue line's own fields, a
        request's). ``said`` turning refinement off (``refine_text: false``) drops the preset's levels with it: they
        only steer the refine pass."""
        return _over(self.settings(), said)


def overridden(record: SamplingFields, said: Mapping[str, Any]) -> Sampling:
    """``record``'s parameters overridden by ``said`` (by their wire names: a dialogue line's own fields over the
    dialogue's), validated again as one record, so whatever ties the fields together holds for the mix too. The rules
    are a request's over its style (:meth:`SamplingPreset.beneath`): a level in ``said`` turns refinement on where
    ``said`` leaves ``refine_text`` out, and ``refine_text: false`` in ``said`` drops ``record``'s levels with it (one
    beside a level of ``said``'s own is refused, as in a body)."""
    merged = _over(dict(record), said)
    return Sampling.model_validate(_refinement_asked(merged, absent="refine_text" not in said))


def _over(fields: Mapping[str, Any], said: Mapping[str, Any]) -> dict[str, Any]:
    """``fields`` overridden by ``said``; ``said``'s ``refine_text: false`` takes ``fields``' levels out."""
    if said.get("refine_text") is False:
        fields = {name: (None if name in LEVELS else value) for name, value in fields.items()}
    return {**fields, **said}


def _refinement_asked(data: Any, *, absent: bool) -> Any:
    """A body's fields with ``refine_text`` turned on where it is not said (``absent``: left out, or null in a preset,
    where null means unsaid) and a level is set."""
    if absent and isinstance(data, dict) and any(data.get(name) is not None for name in LEVELS):
        return {**data, "refine_text": True}
    return data


def _level_checked(value: int | None, info: ValidationInfo) -> int | None:
    """A level beside ``refine_text: false`` (said so in the same body) is refused, naming the level."""
    if value is not None and info.data.get("refine_text") is False:
        raise ValueError(
            "a prosody level steers ChatTTS's refine pass, and this body turns it off (refine_text: false); "
            "drop refine_text, or the level"
        )
    return value


_ATTRIBUTES: tuple[str, ...] = tuple(SamplingFields.model_fields)
_WIRE_NAMES: dict[str, str] = {name: field.alias for name, field in SamplingFields.model_fields.items() if field.alias is not None}

_ATTRIBUTE_OF: dict[str, str] = {alias: name for name, alias in _WIRE_NAMES.items()}

SAMPLING_FIELDS: tuple[str, ...] = tuple(_WIRE_NAMES.get(name, name) for name in _ATTRIBUTES)
"""The parameters' names, as clients send them and jobs store them."""

DEFAULT_SAMPLING = Sampling()
"""What a request that names no sampling parameter gets."""


def speed_level(factor: float) -> int:
    """A speed *factor* (1.0 the normal pace, 2.0 twice as fast: OpenAI's ``speed``, Cartesia's
    ``generation_config.speed``, Google's ``speakingRate``) as ChatTTS's ``[speed_N]``: each doubling is two steps from
    the default, clamped to the levels there are (0.25 → 1, 0.5 → 3, 1 → 5, 2 → 7, 4 → 9). One rule for every protocol
    that speaks in factors, so the same factor is the same speed whichever route it came by."""
    return max(MIN_SPEED, min(MAX_SPEED, round(DEFAULT_SAMPLING.speed + 2 * math.log2(factor))))
