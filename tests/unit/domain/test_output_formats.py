"""Every protocol's names for an output format parse to one :class:`OutputFormat`; what ttsq cannot make is refused by name."""

from __future__ import annotations

import pytest

from ttsq.domain.output_formats import (
    COMMON_RATES,
    OPUS_RATES,
    OutputFormat,
    UnsupportedFormat,
    parse_cartesia,
    parse_elevenlabs,
    parse_google,
    parse_ttsq,
)

ELEVENLABS_SDK_ENUM = {
    # The elevenlabs SDK 2.78's output_format enum (protocols.md §4), each with what it must mean.
    "mp3_22050_32": OutputFormat("mp3", 22_050, bit_rate=32_000),
    "mp3_24000_48": OutputFormat("mp3", 24_000, bit_rate=48_000),
    "mp3_44100_32": OutputFormat("mp3", 44_100, bit_rate=32_000),
    "mp3_44100_64": OutputFormat("mp3", 44_100, bit_rate=64_000),
    "mp3_44100_96": OutputFormat("mp3", 44_100, bit_rate=96_000),
    "mp3_44100_128": OutputFormat("mp3", 44_100, bit_rate=128_000),
    "mp3_44100_192": OutputFormat("mp3", 44_100, bit_rate=192_000),
    "opus_48000_32": OutputFormat("opus", 48_000, bit_rate=32_000),
    "opus_48000_64": OutputFormat("opus", 48_000, bit_rate=64_000),
    "opus_48000_96": OutputFormat("opus", 48_000, bit_rate=96_000),
    "opus_48000_128": OutputFormat("opus", 48_000, bit_rate=128_000),
    "opus_48000_192": OutputFormat("opus", 48_000, bit_rate=192_000),
    "ulaw_8000": OutputFormat("pcm_mulaw", 8_000),
    "alaw_8000": OutputFormat("pcm_alaw", 8_000),
    **{f"pcm_{rate}": OutputFormat("pcm_s16le", rate) for rate in (8000, 16000, 22050, 24000, 32000, 44100, 48000)},
    **{f"wav_{rate}": OutputFormat("pcm_s16le", rate, wav=True) for rate in (8000, 16000, 22050, 24000, 32000, 44100, 48000)},
}


@pytest.mark.parametrize("name", sorted(ELEVENLABS_SDK_ENUM))
def test_every_elevenlabs_output_format_the_sdk_names_is_made(name: str) -> None:
    assert parse_elevenlabs(name) == ELEVENLABS_SDK_ENUM[name]


def test_elevenlabs_defaults_and_what_livekit_lists_beyond_the_sdk() -> None:
    """No ``output_format`` is ElevenLabs' default, mp3 at 44.1 kHz and 128 kbps; LiveKit's bare ``mp3_44100`` takes the
    default bit rate."""
    assert parse_elevenlabs(None) == OutputFormat("mp3", 44_100, bit_rate=128_000)
    assert parse_elevenlabs("mp3_44100") == OutputFormat("mp3", 44_100)
    assert parse_elevenlabs("mp3_44100").effective_bit_rate == 128_000


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("flac_44100", "unknown output_format 'flac_44100'"),
        ("pcm_24000_64", "only mp3 and opus take a bit rate"),
        ("opus_44100_64", "8000, 12000, 16000, 24000, 48000"),
        ("pcm_96000", "pcm_s16le at 96000 Hz is not supported"),
        ("mp3_44100_144", "mp3 at 44100 Hz cannot be made at 144000 bit/s"),
        ("mp3_8000_192", "one of 8000, 16000"),
        ("PCM_24000", "unknown output_format"),
        ("", "unknown output_format ''"),
    ],
)
def test_an_elevenlabs_name_ttsq_cannot_make_is_refused_by_name(name: str, says: str) -> None:
    with pytest.raises(UnsupportedFormat, match=says) as refused:
        parse_elevenlabs(name)
    assert repr(name) in str(refused.value) or name.split("_")[0] in str(refused.value)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}, OutputFormat("pcm_s16le", 24_000)),
        ({"container": "raw", "encoding": "pcm_f32le", "sample_rate": 44100}, OutputFormat("pcm_f32le", 44_100)),
        ({"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}, OutputFormat("pcm_mulaw", 8_000)),
        ({"container": "raw", "encoding": "pcm_alaw", "sample_rate": 8000}, OutputFormat("pcm_alaw", 8_000)),
        ({"container": "wav", "encoding": "pcm_s16le", "sample_rate": 16000}, OutputFormat("pcm_s16le", 16_000, wav=True)),
        ({"container": "wav", "encoding": "pcm_mulaw", "sample_rate": 8000}, OutputFormat("pcm_mulaw", 8_000, wav=True)),
        ({"container": "mp3", "sample_rate": 44100, "bit_rate": 128000}, OutputFormat("mp3", 44_100, bit_rate=128_000)),
        ({"container": "mp3", "sample_rate": 22050, "bit_rate": 32000}, OutputFormat("mp3", 22_050, bit_rate=32_000)),
        ({"container": "mp3", "sample_rate": 24000}, OutputFormat("mp3", 24_000)),
        # Cartesia's own clients send every field; unknown extra ones (as in a newer API version) are not its business.
        ({"container": "raw", "encoding": "pcm_s16le", "sample_rate": 8000, "other": 1}, OutputFormat("pcm_s16le", 8_000)),
    ],
)
def test_cartesia_output_format_objects(given: dict[str, object], expected: OutputFormat) -> None:
    assert parse_cartesia(given) == expected


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"container": "ogg", "encoding": "pcm_s16le", "sample_rate": 24000}, "container 'ogg' is not supported"),
        ({"container": "raw", "sample_rate": 24000}, "encoding None is not supported; use one of pcm_s16le"),
        ({"container": "raw", "encoding": "pcm_s24le", "sample_rate": 24000}, "encoding 'pcm_s24le'"),
        ({"container": "raw", "encoding": "pcm_s16le"}, "sample_rate must be an integer"),
        ({"container": "raw", "encoding": "pcm_s16le", "sample_rate": "24000"}, "sample_rate must be an integer"),
        ({"container": "raw", "encoding": "pcm_s16le", "sample_rate": True}, "sample_rate must be an integer"),
        ({"container": "raw", "encoding": "pcm_s16le", "sample_rate": 96000}, "at 96000 Hz is not supported"),
        ({"container": "mp3", "sample_rate": 8000, "bit_rate": 192000}, "mp3 at 8000 Hz cannot be made at 192000"),
        ({"container": "mp3", "sample_rate": 44100, "bit_rate": "128k"}, "bit_rate must be an integer"),
    ],
)
def test_a_cartesia_format_ttsq_cannot_make_is_refused_by_name(given: dict[str, object], says: str) -> None:
    with pytest.raises(UnsupportedFormat, match=says):
        parse_cartesia(given)


def test_a_cartesia_output_format_that_is_no_object_is_refused() -> None:
    with pytest.raises(UnsupportedFormat, match="must be an object"):
        parse_cartesia("pcm_s16le")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("encoding", "rate", "expected"),
    [
        ("LINEAR16", None, OutputFormat("pcm_s16le", 24_000, wav=True)),
        ("LINEAR16", 16000, OutputFormat("pcm_s16le", 16_000, wav=True)),
        ("PCM", 0, OutputFormat("pcm_s16le", 24_000)),
        ("MULAW", None, OutputFormat("pcm_mulaw", 8_000, wav=True)),
        ("ALAW", 8000, OutputFormat("pcm_alaw", 8_000, wav=True)),
        ("MP3", None, OutputFormat("mp3", 24_000, bit_rate=32_000)),
        ("MP3", 44100, OutputFormat("mp3", 44_100, bit_rate=32_000)),
        ("OGG_OPUS", None, OutputFormat("opus", 48_000)),
        ("OGG_OPUS", 24000, OutputFormat("opus", 24_000)),
    ],
)
def test_google_audio_config(encoding: str, rate: int | None, expected: OutputFormat) -> None:
    """LINEAR16, MULAW and ALAW carry a WAV header (Google's answer does), PCM does not; MP3 is 32 kbps; 0 or no
    ``sampleRateHertz`` is the encoding's default."""
    assert parse_google(encoding, rate) == expected


@pytest.mark.parametrize(
    ("encoding", "rate", "says"),
    [
        ("M4A", None, "audioEncoding 'M4A' is not supported; use one of LINEAR16"),
        ("AUDIO_ENCODING_UNSPECIFIED", None, "'AUDIO_ENCODING_UNSPECIFIED' is not supported"),
        ("linear16", None, "'linear16' is not supported"),
        ("OGG_OPUS", 44100, "OGG_OPUS with sampleRateHertz 44100: opus at 44100 Hz is not supported"),
        ("LINEAR16", 7000, "LINEAR16 with sampleRateHertz 7000"),
    ],
)
def test_a_google_encoding_ttsq_cannot_make_is_refused_by_name(encoding: str, rate: int | None, says: str) -> None:
    with pytest.raises(UnsupportedFormat, match=says):
        parse_google(encoding, rate)


def test_ttsq_names_with_and_without_a_sample_rate() -> None:
    """µ-law and A-law are 8 kHz unless asked; everything else 24 kHz unless asked."""
    assert parse_ttsq("wav") == OutputFormat("pcm_s16le", 24_000, wav=True)
    assert parse_ttsq("pcm", 16_000) == OutputFormat("pcm_s16le", 16_000)
    assert parse_ttsq("mulaw") == OutputFormat("pcm_mulaw", 8_000)
    assert parse_ttsq("alaw") == OutputFormat("pcm_alaw", 8_000)
    assert parse_ttsq("mulaw", 16_000) == OutputFormat("pcm_mulaw", 16_000)
    assert parse_ttsq("mp3", 44_100).effective_bit_rate == 128_000
    assert parse_ttsq("mp3").effective_bit_rate == 48_000, "what the stream encoder always used at 24 kHz"
    assert parse_ttsq("opus", 48_000) == OutputFormat("opus", 48_000)
    with pytest.raises(UnsupportedFormat, match="unknown format 'ogg'; use one of wav, pcm, mp3"):
        parse_ttsq("ogg")
    with pytest.raises(UnsupportedFormat, match="opus at 44100 Hz is not supported; opus is made at 8000, 12000"):
        parse_ttsq("opus", 44_100)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda: OutputFormat("mp3", 24_000, wav=True), "a WAV container holds PCM"),
        (lambda: OutputFormat("pcm_s16le", 24_000, bit_rate=64_000), "pcm_s16le has no bit rate"),
        (lambda: OutputFormat("flac", 24_000, bit_rate=64_000), "flac has no bit rate"),
        (lambda: OutputFormat("opus", 48_000, bit_rate=600_000), "from 6000 to 510000 bit/s"),
        (lambda: OutputFormat("vorbis", 24_000), "unknown encoding 'vorbis'"),  # type: ignore[arg-type]
        (lambda: OutputFormat("pcm_s16le", 24_000.0), "at 24000.0 Hz is not supported"),  # type: ignore[arg-type]
    ],
)
def test_an_impossible_format_cannot_be_made(make: object, says: str) -> None:
    with pytest.raises(UnsupportedFormat, match=says):
        make()  # type: ignore[operator]


def test_every_format_has_an_audio_content_type_and_an_extension() -> None:
    """LiveKit's ElevenLabs plugin refuses a body whose content type is not ``audio/*``."""
    for encoding in ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw", "mp3", "opus", "aac", "flac"):
        rate = OPUS_RATES[0] if encoding == "opus" else COMMON_RATES[0]
        fmt = OutputFormat(encoding, rate)
        assert fmt.content_type.startswith("audio/") and fmt.extension
    assert OutputFormat("pcm_mulaw", 8000, wav=True).content_type == "audio/wav"
    assert str(OutputFormat("mp3", 44_100)) == "mp3 at 44100 Hz, 128 kbps"
    assert str(OutputFormat("pcm_mulaw", 8_000, wav=True)) == "pcm_mulaw in WAV at 8000 Hz"
