"""Google Cloud Text-to-Speech's ``text:synthesize`` in ttsq's terms: its request read into what ttsq synthesises with.

The body is Google's ``SynthesizeSpeechRequest`` as JSON (camelCase, as Google's REST reference and its clients write
it; enums by name, or by number as Google's REST client libraries send them). Each field either maps onto something
ttsq does or is named in :data:`IGNORED_OPTIONS` (and in docs/protocols/google.md, which a test holds to it):

* ``input.text``: the text (``input.ssml`` is refused until ttsq reads SSML; so are ``markup``, ``multiSpeakerMarkup``
  and ``prompt``, inputs of Google's newer voices);
* ``voice.name``: a ttsq voice, as the OpenAI route's ``voice`` (:meth:`ttsq.api.service.VoiceService.resolve_any`).
  Required here: Google picks a voice from ``languageCode`` and ``ssmlGender`` when no name is given, and ttsq has no
  such choice to make for the caller. Google's own voice names are refused with the names that would do;
* ``audioConfig.speakingRate``: a factor (0.25-4.0; 0 is 1.0), by the factor rule every protocol shares
  (:func:`ttsq.domain.sampling.speed_level`);
* ``audioConfig.audioEncoding`` and ``sampleRateHertz``: the format of ``audioContent``
  (:func:`ttsq.domain.output_formats.parse_google`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ttsq.api.service import DEFAULT_SAMPLING, OPENAI_MAX_INPUT_CHARS, InvalidInput, speed_level
from ttsq.domain.output_formats import OutputFormat, UnsupportedFormat, parse_google

__all__ = ["IGNORED_OPTIONS", "GoogleSynthesizeRequest", "GoogleSynthesizeResponse", "Synthesis", "synthesis"]

IGNORED_OPTIONS: dict[str, str] = {
    "voice.languageCode": "ChatTTS reads Chinese and English as they are written; the voice is voice.name",
    "voice.ssmlGender": "the voice is voice.name",
    "voice.modelName": "ttsq has one model, ChatTTS",
    "audioConfig.pitch": "ChatTTS takes no pitch control",
    "audioConfig.volumeGainDb": "the audio is not rescaled",
    "audioConfig.effectsProfileId": "no device profile is applied",
    "advancedVoiceOptions": "none of Google's advanced options apply to ChatTTS",
    "enableTimePointing": "ChatTTS gives no timings: no timepoints are answered",
}
"""Every option of Google's request that ttsq accepts and does nothing with, and why. Fields Google's request here does
not define are accepted too and named, with these, in the answer's ``X-TTSQ-Ignored-Fields``."""

_ENCODING_NUMBERS = {
    0: "AUDIO_ENCODING_UNSPECIFIED",
    1: "LINEAR16",
    2: "MP3",
    3: "OGG_OPUS",
    5: "MULAW",
    6: "ALAW",
    7: "PCM",
    8: "M4A",
}
"""``google.cloud.texttospeech.v1.AudioEncoding``'s numbers: Google's REST client libraries send enums as numbers."""
_STRICT = ConfigDict(strict=True, extra="allow")


class GoogleSynthesisInput(BaseModel):
    """``input``: exactly one of its fields. ttsq reads ``text``."""

    model_config = _STRICT

    text: str | None = Field(
        None,
        description="The text to speak, checked as `text` on /v1/tts/submit, against `OPENAI_MAX_INPUT_CHARS` "
        f"({OPENAI_MAX_INPUT_CHARS} by default; `maxLength`): the limit of every route that answers a whole text's audio.",
        examples=["Hello from ttsq."],
    )
    ssml: str | None = Field(None, description="Refused: ttsq does not read SSML here; send `text`.")
    markup: str | None = Field(None, description="Refused: send `text`.")
    multiSpeakerMarkup: dict[str, Any] | None = Field(None, description="Refused: send `text`.")
    prompt: str | None = Field(None, description="Refused: ChatTTS takes no style prompt.")


class GoogleVoice(BaseModel):
    """``voice``: ``name`` is a ttsq voice (Google picks one by language and gender; ttsq needs it named)."""

    model_config = _STRICT

    name: str = Field(min_length=1, max_length=1000, examples=["alloy"])
    languageCode: str | None = None
    ssmlGender: Literal["SSML_VOICE_GENDER_UNSPECIFIED", "MALE", "FEMALE", "NEUTRAL", 0, 1, 2, 3] | None = None
    modelName: str | None = None
    customVoice: dict[str, Any] | None = Field(None, description="Refused: Google's custom voices are not ttsq's.")
    voiceClone: dict[str, Any] | None = Field(None, description="Refused: make a ttsq voice from a recording instead.")


class GoogleAudioConfig(BaseModel):
    """``audioConfig``: the format of ``audioContent`` and the speaking rate."""

    model_config = _STRICT

    audioEncoding: Literal[
        "AUDIO_ENCODING_UNSPECIFIED", "LINEAR16", "MP3", "OGG_OPUS", "MULAW", "ALAW", "PCM", "M4A", 0, 1, 2, 3, 5, 6, 7, 8
    ] = Field(description="By name, or by number as Google's client libraries send it.")
    speakingRate: float | None = Field(None, ge=0.0, le=4.0, description="A factor; 0 is 1.0. Mapped onto ChatTTS's speed 1-9.")
    sampleRateHertz: int | None = Field(None, ge=0, le=192_000, description="0: the encoding's own rate.")
    pitch: float | None = Field(None, ge=-20.0, le=20.0)
    volumeGainDb: float | None = Field(None, ge=-96.0, le=16.0)
    effectsProfileId: list[str] | None = None


class GoogleSynthesizeRequest(BaseModel):
    """Google's ``SynthesizeSpeechRequest``, as JSON."""

    model_config = _STRICT

    input: GoogleSynthesisInput
    voice: GoogleVoice
    audioConfig: GoogleAudioConfig
    advancedVoiceOptions: dict[str, Any] | None = None
    enableTimePointing: list[Any] | None = None


class GoogleSynthesizeResponse(BaseModel):
    audioContent: str = Field(
        description="The audio, base64 (plain, not a data: URI); LINEAR16, MULAW and ALAW carry a WAV header.",
        json_schema_extra={"contentEncoding": "base64"},
    )


@dataclass(frozen=True)
class Synthesis:
    """A Google request as ttsq takes it: its text, the voice to resolve, ChatTTS's speed, the format of the answer,
    and what was sent and ignored."""

    text: str
    voice: str
    speed: int
    output: OutputFormat
    ignored: tuple[str, ...]


def synthesis(body: GoogleSynthesizeRequest) -> Synthesis:
    """Read ``body``; :class:`InvalidInput` naming the field for what ttsq cannot do."""
    text = _text(body.input)
    if body.voice.customVoice is not None or body.voice.voiceClone is not None:
        field = "voice.customVoice" if body.voice.customVoice is not None else "voice.voiceClone"
        raise InvalidInput(field, "Google's custom and cloned voices are not ttsq's: name a ttsq voice in voice.name")
    config = body.audioConfig
    encoding = config.audioEncoding if isinstance(config.audioEncoding, str) else _ENCODING_NUMBERS[config.audioEncoding]
    try:
        output = parse_google(encoding, config.sampleRateHertz)
    except UnsupportedFormat as exc:
        raise InvalidInput("audioConfig.audioEncoding", str(exc), encoding) from None
    rate = config.speakingRate
    speed = speed_level(rate) if rate else DEFAULT_SAMPLING.speed
    return Synthesis(text, body.voice.name, speed, output, tuple(_ignored(body)))


def _text(given: GoogleSynthesisInput) -> str:
    sent = [name for name in ("text", "ssml", "markup", "multiSpeakerMarkup", "prompt") if getattr(given, name) is not None]
    if len(sent) != 1:
        said = "none" if not sent else " and ".join(sent)
        raise InvalidInput("input", f"exactly one of text, ssml, markup, multiSpeakerMarkup, prompt is needed; got {said}")
    if given.text is None:
        raise InvalidInput(f"input.{sent[0]}", f"input.{sent[0]} is not supported: ttsq reads input.text")
    return given.text


def _ignored(body: GoogleSynthesizeRequest) -> list[str]:
    sent = [name for name in ("advancedVoiceOptions", "enableTimePointing") if getattr(body, name) is not None]
    for prefix, part in (("", body), ("input.", body.input), ("voice.", body.voice), ("audioConfig.", body.audioConfig)):
        sent += [f"{prefix}{name}" for name in (part.model_extra or {})]
    sent += [f"voice.{name}" for name in ("languageCode", "ssmlGender", "modelName") if getattr(body.voice, name) is not None]
    config = body.audioConfig
    sent += [f"audioConfig.{name}" for name in ("pitch", "volumeGainDb", "effectsProfileId") if getattr(config, name) is not None]
    return sent
