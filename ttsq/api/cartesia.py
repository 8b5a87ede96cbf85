"""Cartesia's text-to-speech protocol in ttsq's terms: one generation's options (what ``POST /tts/bytes`` takes as
its body, and what every message of Cartesia's WebSocket repeats), read into what ttsq synthesises with.

Cartesia's clients (its SDK, LiveKit's and Pipecat's Cartesia services) send the options Cartesia's API has; ttsq takes
each one of them, and each either maps onto something ttsq does or is named in :data:`IGNORED_OPTIONS` (and in
docs/protocols/cartesia.md, which a test holds to it) — never silently read as something else:

* ``voice`` (``{"mode": "id", "id": ...}``, or the id alone, as the SDK sends it): the id names a ttsq voice as the
  OpenAI route's ``voice`` does (a built-in or tenant voice, an OpenAI name, a blend:
  :meth:`ttsq.api.service.VoiceService.resolve_any`). Cartesia's own voice ids mean nothing here and are refused with
  the names that would do; ``mode: "embedding"`` (Cartesia's speaker vectors) is refused too.
* speed: ``generation_config.speed`` (a factor, 0.6-1.5) by the factor rule every protocol shares
  (:func:`ttsq.domain.sampling.speed_level`); the SDK's ``speed`` and the older ``voice.__experimental_controls.speed``
  by name (:data:`NAMED_SPEEDS`) or, for the latter, as a number from -1 (slowest) to 1 (fastest).
* ``output_format``: what ttsq converts its audio into (:func:`ttsq.domain.output_formats.parse_cartesia`).
* ``Cartesia-Version`` (header) or ``cartesia_version`` (query): accepted and ignored; ttsq answers every version the
  same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from ttsq.api.service import DEFAULT_SAMPLING, MAX_SPEED, MIN_SPEED, OPENAI_MAX_INPUT_CHARS, InvalidInput, speed_level
from ttsq.domain.output_formats import OutputFormat, UnsupportedFormat, parse_cartesia

__all__ = [
    "IGNORED_OPTIONS",
    "NAMED_SPEEDS",
    "CartesiaBytesRequest",
    "CartesiaOptions",
    "Generation",
    "generation",
]

NAMED_SPEEDS: dict[str, int] = {"slowest": 1, "slow": 3, "normal": 5, "fast": 7, "fastest": 9}
"""Cartesia's named speeds as ChatTTS's levels: the same as the factors 0.25, 0.5, 1, 2 and 4 by the factor rule."""

IGNORED_OPTIONS: dict[str, str] = {
    "model_id": "ttsq has one model, ChatTTS",
    "language": "ChatTTS reads Chinese and English as they are written; it takes no language",
    "locale": "ChatTTS reads Chinese and English as they are written; it takes no locale",
    "normalization": "ttsq normalises text by its own rule (NORMALIZE_TEXT)",
    "pronunciation_dict_id": "Cartesia's dictionaries are not ttsq's; ttsq's own dictionary applies to every request",
    "save": "nothing is kept for the client to fetch later (no Cartesia-File-ID)",
    "add_timestamps": "ChatTTS gives no word timings: no timestamps are sent",
    "add_phoneme_timestamps": "ChatTTS gives no phoneme timings: none are sent",
    "use_normalized_timestamps": "no timestamps are sent",
    "max_buffer_delay_ms": "ttsq cuts streamed text at sentence ends by its own rule (docs/realtime.md)",
    "generation_config.emotion": "ChatTTS takes no emotion control (prosody tokens such as [laugh] in the text do)",
    "generation_config.volume": "the audio is not rescaled",
    "voice.__experimental_controls.emotion": "ChatTTS takes no emotion control",
}
"""Every option Cartesia's API defines that ttsq accepts and does nothing with, and why. Fields Cartesia does not define
are accepted too (its clients add new ones) and named, with these, in the answer's ``X-TTSQ-Ignored-Fields``."""

Rate = Literal[8000, 16000, 22050, 24000, 44100, 48000]


class CartesiaOutputFormat(BaseModel):
    """Cartesia's ``output_format``: ``raw`` or ``wav`` with an ``encoding``, or ``mp3`` with a ``bit_rate``."""

    model_config = ConfigDict(strict=True, extra="forbid")

    container: Literal["raw", "wav", "mp3"]
    encoding: Literal["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw"] | None = None
    sample_rate: Rate
    bit_rate: Literal[32000, 64000, 96000, 128000, 192000] | None = None


class ExperimentalControls(BaseModel):
    """``voice.__experimental_controls``, where Cartesia's older API versions (and LiveKit, asked for one) put speed."""

    model_config = ConfigDict(strict=True, extra="allow")

    speed: Literal["slowest", "slow", "normal", "fast", "fastest"] | Annotated[float, Field(ge=-1.0, le=1.0)] | None = Field(
        None, description="A name, or a number from -1 (slowest) to 1 (fastest)."
    )
    emotion: list[str] | None = None


class CartesiaVoice(BaseModel):
    """Cartesia's voice specifier; ``id`` names a ttsq voice."""

    model_config = ConfigDict(strict=True, extra="allow", populate_by_name=True)

    mode: Literal["id", "embedding"] = "id"
    id: str | None = Field(None, min_length=1, max_length=1000, examples=["alloy"])
    embedding: list[float] | None = None
    experimental_controls: ExperimentalControls | None = Field(None, alias="__experimental_controls")


class GenerationConfig(BaseModel):
    """Cartesia's ``generation_config`` (its sonic-3 controls)."""

    model_config = ConfigDict(strict=True, extra="allow")

    speed: float | None = Field(None, ge=0.6, le=1.5, description="A factor, mapped onto ChatTTS's speed 1-9 (1.0 → 5).")
    emotion: str | None = None
    volume: float | None = Field(None, ge=0.5, le=2.0)


class CartesiaOptions(BaseModel):
    """The options of one Cartesia generation, which its clients send whole with every request and every WebSocket
    message. Unknown fields are accepted (Cartesia adds options and its clients send them) and named as ignored."""

    model_config = ConfigDict(strict=True, extra="allow")

    model_id: str | None = Field(None, examples=["sonic-3"])
    voice: CartesiaVoice | Annotated[str, Field(min_length=1, max_length=1000)] = Field(
        description='A ttsq voice: `{"mode": "id", "id": "alloy"}`, or the id alone.'
    )
    output_format: CartesiaOutputFormat
    language: str | None = None
    locale: str | None = None
    generation_config: GenerationConfig | None = None
    speed: Literal["slow", "normal", "fast"] | None = None
    normalization: str | None = None
    pronunciation_dict_id: str | None = None
    save: bool | None = None
    add_timestamps: bool | None = None
    add_phoneme_timestamps: bool | None = None
    use_normalized_timestamps: bool | None = None
    max_buffer_delay_ms: int | None = None


class CartesiaBytesRequest(CartesiaOptions):
    """``POST /tts/bytes``: a whole transcript, answered with its audio as it is synthesised."""

    transcript: str = Field(
        description="The text to speak, checked as `text` on /v1/tts/submit, against `OPENAI_MAX_INPUT_CHARS` "
        f"({OPENAI_MAX_INPUT_CHARS} by default; `maxLength`): the limit of every route that answers a whole text's audio.",
        examples=["Hello from ttsq."],
        json_schema_extra={"minLength": 1},
    )


@dataclass(frozen=True)
class Generation:
    """A Cartesia generation's options as ttsq takes them: the voice to resolve, ChatTTS's speed, the format to answer
    in, and what was sent and ignored."""

    voice: str
    speed: int
    output: OutputFormat
    ignored: tuple[str, ...]


def generation(options: CartesiaOptions) -> Generation:
    """Read ``options``; :class:`InvalidInput` naming the field for what ttsq cannot do (an embedding, a format it
    does not make)."""
    try:
        output = parse_cartesia(options.output_format.model_dump(exclude_none=True))
    except UnsupportedFormat as exc:
        said = str(exc).removeprefix("output_format: ")  # the error names the field itself
        raise InvalidInput("output_format", said, options.output_format.model_dump(exclude_none=True)) from None
    return Generation(_voice_id(options.voice), _speed(options), output, tuple(_ignored(options)))


def _voice_id(voice: CartesiaVoice | str) -> str:
    if isinstance(voice, str):  # never empty: the schema says so
        return voice
    if voice.mode == "embedding":
        raise InvalidInput(
            "voice.mode", "Cartesia's voice embeddings are not ttsq's: name a ttsq voice with mode 'id'", "embedding"
        )
    if voice.id is None:
        raise InvalidInput("voice.id", "mode 'id' needs an id: name a ttsq voice")
    return voice.id


def _speed(options: CartesiaOptions) -> int:
    """ChatTTS's speed: ``generation_config.speed`` (a factor), else the SDK's ``speed``, else the older
    ``voice.__experimental_controls.speed``, else the default."""
    if options.generation_config is not None and options.generation_config.speed is not None:
        return speed_level(options.generation_config.speed)
    if options.speed is not None:
        return NAMED_SPEEDS[options.speed]
    controls = options.voice.experimental_controls if isinstance(options.voice, CartesiaVoice) else None
    if controls is None or controls.speed is None:
        return DEFAULT_SAMPLING.speed
    if isinstance(controls.speed, str):
        return NAMED_SPEEDS[controls.speed]
    half = (MAX_SPEED - MIN_SPEED) / 2
    return round(DEFAULT_SAMPLING.speed + half * controls.speed)


def _extras(prefix: str, model: BaseModel | None) -> list[str]:
    return [f"{prefix}{name}" for name in (model.model_extra or {})] if model is not None else []


def _ignored(options: CartesiaOptions) -> list[str]:
    """Every option ``options`` carries that ttsq does nothing with: those of :data:`IGNORED_OPTIONS` that were sent,
    and every field Cartesia's shape here does not define."""
    sent = [name for name in IGNORED_OPTIONS if "." not in name and name in options.model_fields_set]
    sent += _extras("", options)
    config = options.generation_config
    if config is not None:
        sent += [f"generation_config.{name}" for name in ("emotion", "volume") if name in config.model_fields_set]
        sent += _extras("generation_config.", config)
    if isinstance(options.voice, CartesiaVoice):
        sent += _extras("voice.", options.voice)
        controls = options.voice.experimental_controls
        if controls is not None:
            sent += ["voice.__experimental_controls.emotion"] if "emotion" in controls.model_fields_set else []
            sent += _extras("voice.__experimental_controls.", controls)
    return sent
