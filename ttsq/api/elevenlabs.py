"""ElevenLabs' text-to-speech protocol in ttsq's terms: the request body, the output formats, the voice settings, the
seed, and the options ttsq accepts but does not act on — one place for the REST routes (``elevenlabs_api.py``) and the
WebSocket ones.

ElevenLabs' clients (its SDK, LiveKit's and Pipecat's ElevenLabs services) send the options ElevenLabs' API has; ttsq
takes each of them, and each either maps onto something ttsq does or is named in :data:`IGNORED_OPTIONS` (and in
docs/protocols/elevenlabs.md, which a test holds to it) — never silently read as something else:

* ``voice_id`` names a ttsq voice as the OpenAI route's ``voice`` does (a built-in or tenant voice, an OpenAI name, a
  blend: :meth:`ttsq.api.service.VoiceService.resolve_any`); ElevenLabs' own voice ids mean nothing here and are
  ElevenLabs' ``404 voice_not_found``, with the names that would do;
* ``voice_settings.speed`` (a factor, 1.0 = normal) is ChatTTS's ``[speed_N]`` by the factor rule every protocol shares
  (:func:`ttsq.domain.sampling.speed_level`);
* ``seed`` (ElevenLabs takes 0 to 2^32 - 1) is ttsq's sampling seed, folded into ttsq's range (:func:`sampling_seed`);
* ``output_format`` (``mp3_44100_128``, ``pcm_16000``, ``ulaw_8000``, ...) is an
  :class:`~ttsq.domain.output_formats.OutputFormat` (:func:`~ttsq.domain.output_formats.parse_elevenlabs`), which the
  listening service converts ttsq's 24 kHz PCM into as it streams;
* a request that sent options ttsq does not act on is answered with their names (:func:`ignored_options`).

Word alignment: ChatTTS gives no character timing, so every ``alignment`` and ``normalized_alignment`` ttsq sends is
``null``, which ElevenLabs' protocol allows and every stock client reads as "no timing".
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from fastapi import Query
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ttsq.api.errors import ELEVENLABS_ERROR_RESPONSES, RATE_LIMIT_HEADERS
from ttsq.api.schemas import task_links
from ttsq.api.service import MAX_SEED, OutputFormat, UnsupportedFormat
from ttsq.domain.output_formats import ELEVENLABS_DEFAULT, parse_elevenlabs

__all__ = [
    "ACTED_ON",
    "DEFAULT_OUTPUT_FORMAT",
    "IGNORED_OPTIONS",
    "OUTPUT_FORMAT_PATTERN",
    "OutputFormat",
    "OutputFormatName",
    "TextToSpeechRequest",
    "UnsupportedFormat",
    "VoiceSettings",
    "audio_responses",
    "ignored_options",
    "parse_output_format",
    "sampling_seed",
]

DEFAULT_OUTPUT_FORMAT = ELEVENLABS_DEFAULT
"""ElevenLabs' own default, which its SDK relies on: it sends no ``output_format`` unless the caller names one."""

parse_output_format = parse_elevenlabs
"""An ElevenLabs ``output_format`` name as the :class:`OutputFormat` ttsq makes, or :class:`UnsupportedFormat` naming
what it can make (:func:`ttsq.domain.output_formats.parse_elevenlabs`)."""


def _offered(name: str) -> str:
    """``output_format`` checked with the other parameters, so that a request wrong in several places hears of each."""
    parse_output_format(name)
    return name


OUTPUT_FORMAT_PATTERN = r"^((mp3|opus)_[0-9]{4,6}(_[0-9]{1,3})?|(pcm|ulaw|alaw|wav)_[0-9]{4,6})$"
"""The shape of every name :func:`parse_output_format` takes, as the OpenAPI document states it. Which rates and bit
rates each codec is made at is the converter's table, which the refusal of one it cannot make names."""

OutputFormatName = Annotated[
    str,
    AfterValidator(_offered),
    Query(
        description="ElevenLabs' format name: `pcm_8000` ... `pcm_48000` (raw PCM16 LE mono; `pcm_24000` is the jobs' own "
        "audio), `ulaw_8000`, `alaw_8000`, `wav_<rate>`, `mp3_<rate>_<kbps>`, `opus_48000_<kbps>`. Default: ElevenLabs' "
        "own, `mp3_44100_128`.",
        # In the schema only: the check is parse_output_format's, whose refusal says which names ttsq makes.
        json_schema_extra={"pattern": OUTPUT_FORMAT_PATTERN},
    ),
]
"""The ``output_format`` query parameter of every ElevenLabs route (text-to-speech and text-to-dialogue): a name
:func:`parse_output_format` takes, else a 422 naming ``output_format`` and the names ttsq makes."""

ELEVENLABS_MAX_SEED = 2**32 - 1
"""The largest ``seed`` ElevenLabs accepts."""

IGNORED_OPTIONS: dict[str, str] = {
    "model_id": "one model serves every request (ChatTTS); the name is not checked",
    "language_code": "ChatTTS reads Chinese and English from the text itself",
    "voice_settings.stability": "ChatTTS has no stability control; the sampling seed fixes the take",
    "voice_settings.similarity_boost": "ChatTTS has no similarity control",
    "voice_settings.style": "ChatTTS has no style control (prosody tokens such as [laugh] go in the text)",
    "voice_settings.use_speaker_boost": "ChatTTS has no speaker boost",
    "pronunciation_dictionary_locators": "ttsq has its own pronunciation dictionary (docs/dictionary.md), applied always",
    "previous_text": "each request is synthesised on its own",
    "next_text": "each request is synthesised on its own",
    "previous_request_ids": "each request is synthesised on its own",
    "next_request_ids": "each request is synthesised on its own",
    "use_pvc_as_ivc": "ttsq's voices are its own (docs/voices.md)",
    "apply_text_normalization": "ttsq's workers normalise numbers and symbols as NORMALIZE_TEXT says",
    "apply_language_text_normalization": "ttsq's workers normalise numbers and symbols as NORMALIZE_TEXT says",
    "audio_effects": "no effects are applied",
    "enable_logging": "ttsq logs as its LOG_LEVEL says, never the text",
    "optimize_streaming_latency": "audio streams as each sentence is synthesised, always",
}
"""Every option of ElevenLabs' text-to-speech requests that ttsq accepts and does not act on, with the reason. A body
field is named as sent (``voice_settings.`` for the settings' members); query parameters by their own names."""


class VoiceSettings(BaseModel):
    """ElevenLabs' ``voice_settings``: only ``speed`` is honoured; the others are :data:`IGNORED_OPTIONS`."""

    # Strict as every request body; ElevenLabs may add settings, and its clients send them: unknown ones pass, and are
    # named among the ignored fields.
    model_config = ConfigDict(strict=True, extra="allow")

    stability: float | None = None
    similarity_boost: float | None = None
    style: float | None = None
    use_speaker_boost: bool | None = None
    speed: float | None = Field(
        None,
        ge=0.25,
        le=4.0,
        description="A factor (1.0 = normal; ElevenLabs takes 0.7-1.2, ttsq 0.25-4.0), mapped onto ChatTTS's speed 1-9 "
        "as every protocol's factor is (1.0 → 5, each doubling two steps: `speed_level`).",
    )


MAX_NAMED_OPTIONS = 20
"""How many ignored options :func:`ignored_options` names; the rest are counted."""
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class TextToSpeechRequest(BaseModel):
    """ElevenLabs' text-to-speech body. ``text``, ``seed`` and ``voice_settings.speed`` are acted on (:data:`ACTED_ON`);
    every other field of ElevenLabs' is accepted and not acted on (:data:`IGNORED_OPTIONS`), and so is any field
    ElevenLabs adds later; the answer names them in ``X-TTSQ-Ignored-Fields``."""

    model_config = ConfigDict(strict=True, extra="allow")

    text: str = Field(
        description="Text to speak, checked as `text` on /v1/tts/submit (MAX_TEXT_CHARS), synthesised in sentence chunks.",
        examples=["Hello from ttsq."],
        json_schema_extra={"minLength": 1},  # "" is refused by the text check, with its own message
    )
    voice_settings: VoiceSettings | None = None
    seed: int | None = Field(
        None,
        ge=0,
        le=ELEVENLABS_MAX_SEED,
        description="The sampling seed (ttsq's `seed`; above 2^31 - 1 it is folded into ttsq's range). Default: the "
        "voice's fixed sampling seed, so the same text and voice give the same audio.",
    )
    model_id: str | None = None
    language_code: str | None = None
    pronunciation_dictionary_locators: list[Any] | None = None
    previous_text: str | None = None
    next_text: str | None = None
    previous_request_ids: list[str] | None = None
    next_request_ids: list[str] | None = None
    use_pvc_as_ivc: bool | None = None
    apply_text_normalization: str | None = None
    apply_language_text_normalization: bool | None = None
    audio_effects: Any = None


ACTED_ON = frozenset({"text", "voice_settings", "seed"})
"""The body's fields ttsq acts on (``voice_settings`` for its ``speed``)."""


def ignored_options(sent: Mapping[str, Any], declared: frozenset[str] = frozenset()) -> list[str]:
    """The names of what a request ``sent`` (its body's or query's fields, ``voice_settings`` as a mapping or a
    :class:`VoiceSettings`) that ttsq does not act on: the :data:`IGNORED_OPTIONS` ones it sent with a value, and any field
    outside ``declared`` (the fields the route acts on). Sorted; a name that is not a plain identifier (ASCII letters,
    digits, ``_.-``, at most 64) is ``(unnamed)``; past :data:`MAX_NAMED_OPTIONS`, the last says how many more."""
    names: list[str] = []
    for name, value in sent.items():
        if value is None:
            continue
        if name == "voice_settings":
            settings = value.model_dump(exclude_none=True) if isinstance(value, BaseModel) else value
            if isinstance(settings, Mapping):
                names += [f"voice_settings.{key}" for key, member in settings.items() if member is not None and key != "speed"]
            continue
        if name in IGNORED_OPTIONS or name not in declared:
            names.append(name)
    shown = sorted({name if _PLAIN_NAME.fullmatch(name) else "(unnamed)" for name in names})
    if len(shown) > MAX_NAMED_OPTIONS:
        return [*shown[:MAX_NAMED_OPTIONS], f"and {len(shown) - MAX_NAMED_OPTIONS} more"]
    return shown


def sampling_seed(seed: int) -> int:
    """ElevenLabs' ``seed`` (0 to 2^32 - 1) as ttsq's sampling seed (0 to 2^31 - 1): itself where it fits, else folded
    (modulo 2^31). The same ElevenLabs seed always gives the same ttsq seed, which is all a seed promises."""
    return seed % (MAX_SEED + 1)


AUDIO_TYPES = ("audio/pcm", "audio/basic", "audio/x-alaw-basic", "audio/wav", "audio/mpeg", "audio/ogg; codecs=opus")
"""The media types an ElevenLabs ``output_format`` is sent as."""


def audio_responses(description: str, voice_not_found: bool = True) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI answers of an ElevenLabs route that answers with audio: ``200`` (``description``) with the task's
    id and the ignored fields in headers, and ElevenLabs' errors — its ``404 voice_not_found`` only where a route has
    it (text-to-speech's ``voice_id``; a dialogue's unknown voice is a 422 naming its line's speaker)."""
    errors = {code: answer for code, answer in ELEVENLABS_ERROR_RESPONSES.items() if voice_not_found or code != 404}
    return {
        200: {
            "description": description,
            "content": {media_type: {} for media_type in AUDIO_TYPES},
            "headers": {
                **RATE_LIMIT_HEADERS,
                "X-TTSQ-Task-Id": {"schema": {"type": "string"}, "required": True, "description": "The ttsq task behind it."},
                "X-TTSQ-Ignored-Fields": {"schema": {"type": "string"}, "description": "The options sent and not acted on."},
            },
            "links": task_links("$response.header.X-TTSQ-Task-Id"),
        },
        **errors,
    }
