"""Tests for ttsq.domain.audio: encoding round trips and click-free joining."""

from __future__ import annotations

import io
from typing import get_args

import av
import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf

from ttsq.domain.audio import CONTENT_TYPES, AudioFormat, ChunkJoiner, decode_to_pcm16, duration_s, encode_audio, join_chunks

SR = 24000
PCM16_STEP = 1.0 / 32768


def tone(freq: float, n: int, phase: float, amplitude: float = 0.8) -> npt.NDArray[np.float32]:
    """A sine tone starting at ``phase``, so that its first sample is not a zero crossing."""
    t = np.arange(n, dtype=np.float64) / SR
    return (amplitude * np.sin(2 * np.pi * freq * t + phase)).astype(np.float32)


def max_step(x: npt.NDArray[np.float32]) -> float:
    """Largest sample-to-sample jump: a click shows up as a jump bigger than the tone's own."""
    return float(np.max(np.abs(np.diff(x.astype(np.float64)))))


def decode(data: bytes) -> tuple[npt.NDArray[np.float32], int]:
    """Read encoded bytes back the way a client would, independently of encode_audio."""
    samples, rate = sf.read(io.BytesIO(data), dtype="float32")
    return samples, rate


# --- encoding ---------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["wav", "flac", "ogg", "mp3", "opus"])
def test_encode_round_trip(fmt: AudioFormat) -> None:
    original = tone(440.0, 12_345, phase=0.7, amplitude=0.5)
    data = encode_audio(original, fmt, SR)
    assert data
    decoded, rate = decode(data)
    assert rate == SR
    assert decoded.ndim == 1
    if fmt in ("wav", "flac"):
        assert decoded.shape == original.shape
        assert np.max(np.abs(decoded - original)) <= PCM16_STEP
    else:
        assert abs(decoded.size - original.size) <= 2 * 1152 + 0.05 * original.size
        assert float(np.sqrt(np.mean(decoded**2))) == pytest.approx(0.5 / np.sqrt(2), rel=0.2)


@pytest.mark.parametrize("fmt", ["wav", "flac"])
def test_encode_clips_out_of_range_and_non_finite(fmt: AudioFormat) -> None:
    loud = np.array([0.0, 2.0, -3.0, 0.5, np.nan, np.inf, -np.inf, 0.0], dtype=np.float32)
    decoded, _ = decode(encode_audio(loud, fmt))
    expected = np.array([0.0, 1.0, -1.0, 0.5, 0.0, 1.0, -1.0, 0.0], dtype=np.float32)
    assert np.max(np.abs(decoded - expected)) <= PCM16_STEP


def test_encode_wav_is_pcm16_and_flac_is_pcm16() -> None:
    samples = tone(220.0, 2400, phase=1.0)
    assert sf.info(io.BytesIO(encode_audio(samples, "wav"))).subtype == "PCM_16"
    assert sf.info(io.BytesIO(encode_audio(samples, "flac"))).subtype == "PCM_16"
    assert sf.info(io.BytesIO(encode_audio(samples, "ogg"))).subtype == "VORBIS"
    assert sf.info(io.BytesIO(encode_audio(samples, "mp3"))).format == "MP3"


def test_encode_accepts_column_and_row_vectors() -> None:
    samples = tone(220.0, 1000, phase=0.3)
    flat = encode_audio(samples, "wav")
    assert encode_audio(samples.reshape(1, -1), "wav") == flat
    assert encode_audio(samples.reshape(-1, 1), "wav") == flat


def test_encode_long_ogg_does_not_crash() -> None:
    samples = tone(330.0, SR * 120, phase=0.2)
    decoded, _ = decode(encode_audio(samples, "ogg"))
    assert abs(decoded.size - samples.size) <= 0.01 * samples.size


@pytest.mark.parametrize("fmt", ["alac", "WAV", "", "m4a"])
def test_encode_unknown_format_raises(fmt: str) -> None:
    with pytest.raises(ValueError, match="unknown audio format"):
        encode_audio(tone(220.0, 100, 0.1), fmt, SR)  # type: ignore[arg-type]


def test_encode_empty_raises() -> None:
    with pytest.raises(ValueError, match="empty"):
        encode_audio(np.zeros(0, dtype=np.float32), "wav")


def test_encode_multichannel_raises() -> None:
    with pytest.raises(ValueError, match="mono"):
        encode_audio(np.zeros((100, 2), dtype=np.float32), "wav")


CONTAINERS = {"audio/wav": ("WAV", None), "audio/mpeg": ("MP3", None), "audio/flac": ("FLAC", None)}
"""What a content type promises, as libsndfile reads it back: (container, codec or None for any)."""


@pytest.mark.parametrize("fmt", sorted(set(get_args(AudioFormat)) - {"pcm"}))
def test_each_content_type_names_what_the_bytes_really_are(fmt: AudioFormat) -> None:
    """A client trusts Content-Type to pick a decoder: the label must match the encoded container and codec."""
    encoded = encode_audio(tone(440, SR // 10, 0.3), fmt)
    content_type = CONTENT_TYPES[fmt]
    if content_type == "audio/aac":  # ADTS, which libsndfile cannot read: libav says what it is
        with av.open(io.BytesIO(encoded)) as adts:
            assert (adts.format.name, adts.streams.audio[0].codec_context.name) == ("aac", "aac")
        return
    info = sf.info(io.BytesIO(encoded))
    if content_type.startswith("audio/ogg"):
        expected_codec = "OPUS" if "codecs=opus" in content_type else "VORBIS"
        assert (info.format, info.subtype) == ("OGG", expected_codec)
    else:
        container, _ = CONTAINERS[content_type]
        assert info.format == container


def test_pcm_content_type_is_raw_samples() -> None:
    samples = tone(440, 480, 0.3)
    assert CONTENT_TYPES["pcm"] == "audio/pcm"
    assert len(encode_audio(samples, "pcm")) == 2 * len(samples), "raw PCM16: two bytes per sample, no header"


# --- joining ----------------------------------------------------------------------------

TONES = [
    tone(220.0, 4_801, phase=1.3),
    tone(523.25, 3_333, phase=-2.1),
    tone(330.0, 7_000, phase=0.4),
    tone(440.0, 5_557, phase=2.5),
]


def seams(lengths: list[int], gap: int) -> list[int]:
    """Positions in the joined signal where one chunk ends and the gap begins."""
    positions = []
    end = 0
    for length in lengths[:-1]:
        end += length
        positions.append(end)
        end += gap
    return positions


def test_tones_are_cut_at_nonzero_phase() -> None:
    for chunk in TONES:
        assert abs(chunk[0]) > 0.2
        assert abs(chunk[-1]) > 0.2


@pytest.mark.parametrize("fade_ms", [5.0, 10.0, 20.0])
@pytest.mark.parametrize("gap_ms", [0.0, 120.0, 37.5])
def test_join_has_no_discontinuity_at_seams(gap_ms: float, fade_ms: float) -> None:
    joined = join_chunks(TONES, SR, fade_ms=fade_ms, gap_ms=gap_ms)
    gap = round(gap_ms * SR / 1000)
    inner = max(max_step(chunk) for chunk in TONES)
    window = 480
    for seam in seams([chunk.size for chunk in TONES], gap):
        around = joined[max(seam - window, 0) : seam + gap + window]
        assert max_step(around) <= inner
        assert max_step(joined[seam - 8 : seam + gap + 8]) <= 0.25 * inner
        assert joined[seam - 1] == 0.0
        assert joined[seam + gap] == 0.0
    assert max_step(joined) <= inner
    assert joined[0] == 0.0
    assert joined[-1] == 0.0


def test_naive_concatenation_has_discontinuity() -> None:
    naive = np.concatenate(TONES)
    inner = max(max_step(chunk) for chunk in TONES)
    seam_steps = [abs(float(naive[seam]) - float(naive[seam - 1])) for seam in seams([chunk.size for chunk in TONES], 0)]
    assert max(seam_steps) > 3 * inner


@pytest.mark.parametrize(("gap_ms", "gap"), [(120.0, 2880), (0.0, 0), (10.0, 240)])
def test_join_length_is_chunks_plus_gaps(gap_ms: float, gap: int) -> None:
    joined = join_chunks(TONES, SR, gap_ms=gap_ms)
    assert joined.size == sum(chunk.size for chunk in TONES) + gap * (len(TONES) - 1)
    assert joined.dtype == np.float32


def test_join_gap_is_silent_and_chunks_keep_their_middle() -> None:
    joined = join_chunks(TONES[:2], SR, fade_ms=10.0, gap_ms=120.0)
    first, second = TONES[0], TONES[1]
    assert np.all(joined[first.size : first.size + 2880] == 0.0)
    np.testing.assert_array_equal(joined[240 : first.size - 240], first[240:-240])
    start = first.size + 2880
    np.testing.assert_array_equal(joined[start + 240 : start + second.size - 240], second[240:-240])


def test_join_empty_list() -> None:
    joined = join_chunks([])
    assert joined.dtype == np.float32
    assert joined.size == 0


def test_join_single_chunk_is_faded_only_at_ends() -> None:
    chunk = TONES[2]
    joined = join_chunks([chunk], SR)
    assert joined.size == chunk.size
    np.testing.assert_array_equal(joined[240:-240], chunk[240:-240])
    assert joined[0] == 0.0 and joined[-1] == 0.0


@pytest.mark.parametrize("length", [1, 2, 3, 50, 479, 480, 481])
def test_join_short_chunks_fade_over_half_their_length(length: int) -> None:
    short = np.full(length, 0.5, dtype=np.float32)
    joined = join_chunks([TONES[0], short, TONES[1]], SR, fade_ms=10.0, gap_ms=20.0)
    gap = 480
    assert joined.size == TONES[0].size + length + TONES[1].size + 2 * gap
    middle = joined[TONES[0].size + gap : TONES[0].size + gap + length]
    assert middle[0] == 0.0 and middle[-1] == 0.0
    assert np.all(middle <= 0.5)
    assert max_step(joined) <= max(max_step(TONES[0]), max_step(TONES[1]), 0.5)


def test_join_skips_empty_chunks() -> None:
    empty = np.zeros(0, dtype=np.float32)
    joined = join_chunks([empty, TONES[0], empty, TONES[1], empty], SR, gap_ms=120.0)
    assert joined.size == TONES[0].size + TONES[1].size + 2880


def test_join_does_not_modify_inputs() -> None:
    chunk = TONES[3].copy()
    join_chunks([chunk, chunk], SR)
    np.testing.assert_array_equal(chunk, TONES[3])


def test_join_rejects_negative_durations() -> None:
    with pytest.raises(ValueError):
        join_chunks(TONES, SR, fade_ms=-1.0)
    with pytest.raises(ValueError):
        join_chunks(TONES, SR, gap_ms=-5.0)


# --- duration ---------------------------------------------------------------------------


def test_duration_s() -> None:
    assert duration_s(np.zeros(24_000, dtype=np.float32)) == 1.0
    assert duration_s(np.zeros(12_000, dtype=np.float32), 24_000) == 0.5
    assert duration_s(np.zeros(0, dtype=np.float32)) == 0.0
    assert duration_s(np.zeros(44_100, dtype=np.float32), 44_100) == 1.0
    joined = join_chunks(TONES, SR, gap_ms=120.0)
    expected = (sum(chunk.size for chunk in TONES) + 3 * 2880) / SR
    assert duration_s(joined) == pytest.approx(expected)


def test_pcm_is_headerless_pcm16_little_endian() -> None:
    samples = tone(440.0, SR // 10, 0.5)
    raw = encode_audio(samples, "pcm", SR)
    assert len(raw) == 2 * samples.size
    decoded = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768
    assert np.max(np.abs(decoded - samples)) < 1e-3
    assert decode_to_pcm16(encode_audio(samples, "wav", SR)) == raw


def test_chunk_joiner_pieces_concatenate_to_the_joined_signal() -> None:
    chunks = [tone(220.0, 3000, 0.3), np.zeros(0, dtype=np.float32), tone(330.0, 5, 0.2), tone(440.0, 4000, 0.25)]
    joiner = ChunkJoiner(SR)
    pieces = [joiner.add(chunk) for chunk in chunks]
    assert np.array_equal(np.concatenate(pieces), join_chunks(chunks, SR))
    assert pieces[0].size == 3000 and pieces[1].size == 0
