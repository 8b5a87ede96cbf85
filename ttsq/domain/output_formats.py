"""What a listener asked its audio to be: one :class:`OutputFormat`, whichever protocol named it.

ttsq makes PCM16 mono at 24 kHz (:data:`ttsq.domain.audio.SAMPLE_RATE`); every route that hands audio out converts it
(:mod:`ttsq.domain.converter`) into the format its caller asked for. Each protocol names formats its own way:

=====================  ===========================================================  ==============================
protocol               names                                                        parser
=====================  ===========================================================  ==============================
ttsq / OpenAI          ``format``/``response_format`` (wav, pcm, mp3, opus, aac,     :func:`parse_ttsq`
                       flac, mulaw, alaw) and an optional ``sample_rate``
ElevenLabs             ``output_format`` strings: ``pcm_24000``, ``ulaw_8000``,      :func:`parse_elevenlabs`
                       ``mp3_44100_128``, ``opus_48000_64``, ``wav_16000``, ...
Cartesia               ``output_format`` objects: ``{"container": "raw",             :func:`parse_cartesia`
                       "encoding": "pcm_s16le", "sample_rate": 24000}``, ...
Google Cloud           ``audioConfig.audioEncoding`` (LINEAR16, MP3, OGG_OPUS,        :func:`parse_google`
                       MULAW, ALAW, PCM) and ``sampleRateHertz``
=====================  ===========================================================  ==============================

Each parser returns an :class:`OutputFormat` or raises :class:`UnsupportedFormat` (a :class:`ValueError` whose message
names what was asked and what ttsq can make: a route answers it with a 4xx in its protocol's error shape). A route
never branches on protocol names past its parser: it hands the :class:`OutputFormat` to
:func:`ttsq.domain.converter.converter` and sends :attr:`OutputFormat.content_type`.

Sample rates: any of :data:`COMMON_RATES` for PCM, G.711, mp3, AAC and FLAC (ffmpeg's encoders take them all); opus
only at libopus's own input rates (:data:`OPUS_RATES`). µ-law and A-law default to 8 kHz (telephony), everything else
to ttsq's 24 kHz. Bit rates apply to mp3, opus and AAC only; None is the encoder's default for that rate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

__all__ = [
    "COMMON_RATES",
    "ELEVENLABS_DEFAULT",
    "ELEVENLABS_PATTERN",
    "NATIVE_RATE",
    "OPUS_RATES",
    "TTSQ_NAMES",
    "Encoding",
    "OutputFormat",
    "TtsqName",
    "UnsupportedFormat",
    "parse_cartesia",
    "parse_elevenlabs",
    "parse_google",
    "parse_ttsq",
    "stored_format",
]

NATIVE_RATE = 24_000
"""The rate ttsq's audio is made at (ChatTTS's; :data:`ttsq.domain.audio.SAMPLE_RATE`): no resampling there."""

Encoding = Literal["pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw", "mp3", "opus", "aac", "flac"]
"""How the samples are written: four PCM encodings (raw, or in WAV), and four codecs each in its own container (mp3
frames, Ogg Opus, ADTS AAC, native FLAC)."""
PCM_ENCODINGS: tuple[Encoding, ...] = ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw")
CODECS: tuple[Encoding, ...] = ("mp3", "opus", "aac", "flac")

COMMON_RATES: tuple[int, ...] = (8_000, 11_025, 12_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000)
"""Every rate the PCM encodings, mp3 (MPEG-1, -2 and -2.5 layer III), ADTS AAC and FLAC take."""
OPUS_RATES: tuple[int, ...] = (8_000, 12_000, 16_000, 24_000, 48_000)
"""libopus's input rates (Ogg Opus always decodes at 48 kHz; the input rate is recorded in its header)."""

_MP3_MPEG1_KBPS = (32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320)
"""Bit rates of MPEG-1 layer III (32, 44.1, 48 kHz)."""
_MP3_MPEG2_KBPS = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160)
"""Bit rates of MPEG-2 and 2.5 layer III (8 to 24 kHz)."""
_OPUS_BIT_RATES = (6_000, 510_000)
_AAC_BIT_RATES = (16_000, 320_000)

_DEFAULT_BIT_RATES: dict[str, int] = {"mp3": 48_000, "mp3_mpeg1": 128_000, "opus": 32_000, "aac": 48_000}
"""What the stream encoders used before rates and bit rates could be asked for (mp3 48 kbps at 24 kHz, opus 32 kbps,
AAC 48 kbps); mp3 at MPEG-1's rates (32 kHz and up) defaults to 128 kbps, ElevenLabs' default (``mp3_44100_128``)."""


class UnsupportedFormat(ValueError):
    """A format ttsq cannot make (or a name it does not know); the message names it and what ttsq can make instead."""


@dataclass(frozen=True)
class OutputFormat:
    """One output format: an encoding, a sample rate, a WAV header or not (PCM encodings only), and a bit rate
    (mp3, opus and AAC only; None: the encoder's default for the rate). Valid by construction: an impossible
    combination raises :class:`UnsupportedFormat`. Hashable and comparable, so it can key a dict or a test."""

    encoding: Encoding
    sample_rate: int = NATIVE_RATE
    wav: bool = False
    bit_rate: int | None = None

    def __post_init__(self) -> None:
        if self.encoding not in get_args(Encoding):
            raise UnsupportedFormat(f"unknown encoding {self.encoding!r}; ttsq makes {', '.join(get_args(Encoding))}")
        rates = OPUS_RATES if self.encoding == "opus" else COMMON_RATES
        if isinstance(self.sample_rate, bool) or not isinstance(self.sample_rate, int) or self.sample_rate not in rates:
            raise UnsupportedFormat(
                f"{self.encoding} at {self.sample_rate!r} Hz is not supported; {self.encoding} is made at "
                + ", ".join(map(str, rates))
                + " Hz"
            )
        if self.wav and self.encoding not in PCM_ENCODINGS:
            raise UnsupportedFormat(f"a WAV container holds PCM ({', '.join(PCM_ENCODINGS)}), not {self.encoding}")
        if self.bit_rate is not None:
            allowed = self.bit_rates()
            if allowed is None:
                raise UnsupportedFormat(f"{self.encoding} has no bit rate to choose (it is set by the sample rate)")
            if isinstance(self.bit_rate, bool) or not isinstance(self.bit_rate, int) or not _within(self.bit_rate, allowed):
                raise UnsupportedFormat(f"{self.label_without_bit_rate} cannot be made at {self.bit_rate!r} bit/s; {_say(allowed)}")

    def bit_rates(self) -> tuple[int, ...] | tuple[int, int] | None:
        """The bit rates this encoding takes at this sample rate: a list (mp3), a (lowest, highest) range (opus,
        AAC), or None where there is no choice."""
        if self.encoding == "mp3":
            kbps = _MP3_MPEG1_KBPS if self.sample_rate >= 32_000 else _MP3_MPEG2_KBPS
            return tuple(k * 1000 for k in kbps)
        if self.encoding == "opus":
            return _OPUS_BIT_RATES
        if self.encoding == "aac":
            return _AAC_BIT_RATES
        return None

    @property
    def effective_bit_rate(self) -> int | None:
        """The bit rate the encoder runs at: the one asked for, else the default for the rate; None without one."""
        if self.bit_rate is not None or self.encoding not in _DEFAULT_BIT_RATES:
            return self.bit_rate
        if self.encoding == "mp3" and self.sample_rate >= 32_000:
            return _DEFAULT_BIT_RATES["mp3_mpeg1"]
        return _DEFAULT_BIT_RATES[self.encoding]

    @property
    def content_type(self) -> str:
        """The HTTP ``Content-Type`` of this format (always ``audio/*``: LiveKit's ElevenLabs plugin requires it)."""
        if self.wav:
            return "audio/wav"
        return _CONTENT_TYPES[self.encoding]

    @property
    def extension(self) -> str:
        """A file name extension for this format (a download's ``Content-Disposition``)."""
        return "wav" if self.wav else _EXTENSIONS[self.encoding]

    @property
    def label_without_bit_rate(self) -> str:
        return f"{self.encoding}{' in WAV' if self.wav else ''} at {self.sample_rate} Hz"

    @property
    def label(self) -> str:
        """For messages and logs: ``pcm_mulaw at 8000 Hz``, ``mp3 at 44100 Hz, 128 kbps``."""
        rate = self.effective_bit_rate
        return self.label_without_bit_rate + (f", {rate // 1000} kbps" if rate is not None else "")

    def __str__(self) -> str:
        return self.label


_CONTENT_TYPES: dict[str, str] = {
    "pcm_s16le": "audio/pcm",
    "pcm_f32le": "audio/pcm",
    "pcm_mulaw": "audio/basic",
    "pcm_alaw": "audio/x-alaw-basic",
    "mp3": "audio/mpeg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "flac": "audio/flac",
}
_EXTENSIONS: dict[str, str] = {
    "pcm_s16le": "pcm",
    "pcm_f32le": "f32",
    "pcm_mulaw": "ulaw",
    "pcm_alaw": "alaw",
    "mp3": "mp3",
    "opus": "opus",
    "aac": "aac",
    "flac": "flac",
}


def _within(value: int, allowed: tuple[int, ...]) -> bool:
    return value in allowed if len(allowed) != 2 else allowed[0] <= value <= allowed[1]


def _say(allowed: tuple[int, ...]) -> str:
    if len(allowed) == 2:
        return f"from {allowed[0]} to {allowed[1]} bit/s"
    return "one of " + ", ".join(map(str, allowed)) + " bit/s"


# --- ttsq's own names (and OpenAI's, which are a subset) -----------------------------------------------------------

TtsqName = Literal["wav", "pcm", "mp3", "opus", "aac", "flac", "mulaw", "alaw"]
TTSQ_NAMES: dict[TtsqName, tuple[Encoding, bool, int]] = {
    "wav": ("pcm_s16le", True, NATIVE_RATE),
    "pcm": ("pcm_s16le", False, NATIVE_RATE),
    "mp3": ("mp3", False, NATIVE_RATE),
    "opus": ("opus", False, NATIVE_RATE),
    "aac": ("aac", False, NATIVE_RATE),
    "flac": ("flac", False, NATIVE_RATE),
    "mulaw": ("pcm_mulaw", False, 8_000),
    "alaw": ("pcm_alaw", False, 8_000),
}
"""ttsq's ``format`` names: encoding, WAV header, default rate. ``mulaw``/``alaw`` are raw G.711 at 8 kHz unless a
``sample_rate`` says otherwise; the rest are at 24 kHz unless it does."""


def parse_ttsq(name: str, sample_rate: int | None = None) -> OutputFormat:
    """ttsq's ``format`` (OpenAI's ``response_format``: the same names) with its optional ``sample_rate``."""
    known = TTSQ_NAMES.get(name)  # type: ignore[call-overload]  # any string may be asked for; unknown ones are refused
    if known is None:
        raise UnsupportedFormat(f"unknown format {name!r}; use one of {', '.join(TTSQ_NAMES)}")
    encoding, wav, default_rate = known
    return OutputFormat(encoding, default_rate if sample_rate is None else sample_rate, wav)


def stored_format(fmt: OutputFormat) -> TtsqName | None:
    """The job format (:data:`ttsq.domain.jobs.AudioFormat`) whose stored result *is* ``fmt``, byte for byte what a
    listener asking for ``fmt`` may be sent: 24 kHz WAV, PCM, mp3, opus, AAC or FLAC at the encoder's default bit rate.
    None for every other format: a stored result is never handed out as one of them, it is converted
    (:func:`ttsq.domain.audio.stored_as`)."""
    if fmt.sample_rate != NATIVE_RATE or fmt.bit_rate is not None:
        return None
    stored: tuple[TtsqName, ...] = ("wav", "pcm", "mp3", "opus", "aac", "flac")
    return next((name for name in stored if TTSQ_NAMES[name][:2] == (fmt.encoding, fmt.wav)), None)


# --- ElevenLabs ----------------------------------------------------------------------------------------------------

ELEVENLABS_DEFAULT = "mp3_44100_128"
"""ElevenLabs' ``output_format`` when a request names none (its SDK sends none unless told)."""
_ELEVENLABS = re.compile(r"(?P<kind>mp3|opus|pcm|ulaw|alaw|wav)_(?P<rate>[0-9]{4,6})(?:_(?P<kbps>[0-9]{1,3}))?")
ELEVENLABS_PATTERN = "^" + re.sub(r"\?P<\w+>", "", _ELEVENLABS.pattern) + "$"
"""The shape of an ElevenLabs ``output_format`` name, for a schema (whether ttsq makes that rate is :func:`parse_elevenlabs`'s)."""
_ELEVENLABS_KINDS: dict[str, tuple[Encoding, bool]] = {
    "mp3": ("mp3", False),
    "opus": ("opus", False),
    "pcm": ("pcm_s16le", False),
    "ulaw": ("pcm_mulaw", False),
    "alaw": ("pcm_alaw", False),
    "wav": ("pcm_s16le", True),
}
ELEVENLABS_EXAMPLES = (
    "pcm_8000|16000|22050|24000|32000|44100|48000, ulaw_8000, alaw_8000, wav_<rate>, mp3_22050_32, mp3_24000_48, "
    "mp3_44100_32|64|96|128|192, opus_48000_32|64|96|128|192"
)


def parse_elevenlabs(output_format: str | None) -> OutputFormat:
    """An ElevenLabs ``output_format`` (``pcm_24000``, ``ulaw_8000``, ``mp3_44100_128``, ``opus_48000_64``,
    ``wav_16000``, ...); None is ElevenLabs' default, :data:`ELEVENLABS_DEFAULT`. The bit rate is in kbps and only
    for mp3 and opus (a bare ``mp3_44100``, which LiveKit lists, takes the default). Rates and bit rates beyond
    ElevenLabs' own list are accepted where ttsq can make them (``pcm_12000``, ``mp3_16000_64``)."""
    name = ELEVENLABS_DEFAULT if output_format is None else output_format
    match = _ELEVENLABS.fullmatch(name)
    if match is None:
        raise UnsupportedFormat(f"unknown output_format {name!r}; use one of {ELEVENLABS_EXAMPLES}")
    encoding, wav = _ELEVENLABS_KINDS[match["kind"]]
    kbps = match["kbps"]
    if kbps is not None and encoding not in ("mp3", "opus"):
        raise UnsupportedFormat(f"output_format {name!r}: only mp3 and opus take a bit rate; use one of {ELEVENLABS_EXAMPLES}")
    try:
        return OutputFormat(encoding, int(match["rate"]), wav, None if kbps is None else int(kbps) * 1000)
    except UnsupportedFormat as exc:
        raise UnsupportedFormat(f"output_format {name!r}: {exc}") from None


# --- Cartesia ------------------------------------------------------------------------------------------------------

_CARTESIA_ENCODINGS: tuple[Encoding, ...] = PCM_ENCODINGS


def parse_cartesia(output_format: Mapping[str, object]) -> OutputFormat:
    """A Cartesia ``output_format`` object: ``{"container": "raw"|"wav", "encoding": "pcm_s16le"|"pcm_f32le"|
    "pcm_mulaw"|"pcm_alaw", "sample_rate": R}`` or ``{"container": "mp3", "sample_rate": R, "bit_rate": B}``
    (``bit_rate`` in bit/s, optional here). Fields Cartesia defines for other containers are refused by name."""
    if not isinstance(output_format, Mapping):
        raise UnsupportedFormat("output_format must be an object with container, encoding and sample_rate")
    container = output_format.get("container")
    rate = output_format.get("sample_rate")
    if not isinstance(rate, int) or isinstance(rate, bool):
        raise UnsupportedFormat(f"output_format.sample_rate must be an integer (Hz), got {rate!r}")
    if container in ("raw", "wav"):
        encoding = output_format.get("encoding")
        if encoding not in _CARTESIA_ENCODINGS:
            raise UnsupportedFormat(
                f"output_format.encoding {encoding!r} is not supported; use one of {', '.join(_CARTESIA_ENCODINGS)}"
            )
        return _cartesia(encoding, rate, container == "wav", None)
    if container == "mp3":
        bit_rate = output_format.get("bit_rate")
        if bit_rate is not None and (not isinstance(bit_rate, int) or isinstance(bit_rate, bool)):
            raise UnsupportedFormat(f"output_format.bit_rate must be an integer (bit/s), got {bit_rate!r}")
        return _cartesia("mp3", rate, False, bit_rate)
    raise UnsupportedFormat(f"output_format.container {container!r} is not supported; use raw, wav or mp3")


def _cartesia(encoding: Encoding, rate: int, wav: bool, bit_rate: int | None) -> OutputFormat:
    try:
        return OutputFormat(encoding, rate, wav, bit_rate)
    except UnsupportedFormat as exc:
        raise UnsupportedFormat(f"output_format: {exc}") from None


# --- Google Cloud Text-to-Speech -----------------------------------------------------------------------------------

_GOOGLE: dict[str, tuple[Encoding, bool, int, int | None]] = {
    "LINEAR16": ("pcm_s16le", True, NATIVE_RATE, None),
    "PCM": ("pcm_s16le", False, NATIVE_RATE, None),
    "MULAW": ("pcm_mulaw", True, 8_000, None),
    "ALAW": ("pcm_alaw", True, 8_000, None),
    "MP3": ("mp3", False, NATIVE_RATE, 32_000),
    "OGG_OPUS": ("opus", False, 48_000, None),
}
"""Google's encodings: LINEAR16, MULAW and ALAW carry a WAV header, PCM does not; MP3 is 32 kbps (Google's)."""


def parse_google(audio_encoding: str, sample_rate_hertz: int | None = None) -> OutputFormat:
    """Google's ``audioConfig.audioEncoding`` and ``sampleRateHertz`` (None or 0: the encoding's default — 24 kHz,
    8 kHz for MULAW/ALAW, 48 kHz for OGG_OPUS)."""
    known = _GOOGLE.get(audio_encoding)
    if known is None:
        raise UnsupportedFormat(f"audioEncoding {audio_encoding!r} is not supported; use one of {', '.join(_GOOGLE)}")
    encoding, wav, default_rate, bit_rate = known
    rate = sample_rate_hertz if sample_rate_hertz else default_rate
    try:
        return OutputFormat(encoding, rate, wav, bit_rate)
    except UnsupportedFormat as exc:
        raise UnsupportedFormat(f"audioEncoding {audio_encoding} with sampleRateHertz {rate}: {exc}") from None
