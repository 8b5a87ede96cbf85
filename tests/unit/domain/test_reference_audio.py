"""Reference recordings decoded in the API (:func:`ttsq.domain.reference_audio.decode_reference`): what a file may
cost is bounded by what its header says and what the decoder has read, never by what the whole file would decode to.

A tester's 240 KB WAV whose header claimed 1 Hz was upsampled 24,000x (the API grew by 22 GB); a 272 KB FLAC
holding an hour was decoded whole (+320 MB). The memory these tests bound is Python's (``tracemalloc`` sees numpy's
buffers, where the decoded samples live): the bound holds with room to spare for a 30 s recording and fails by a
wide margin on the old whole-file decode.
"""

from __future__ import annotations

import io
import itertools
import struct
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.reference_audio import MAX_REFERENCE_S, ReferenceAudioError, decode_reference

PEAK_BYTES = 16 * 2**20
"""Most Python memory one decode may take: 30 s of 24 kHz float32 is 2.9 MB, concatenated once more is 5.8 MB."""


def wav(rate: int, samples: int, channels: int = 1, declared: int | None = None) -> bytes:
    """A PCM16 WAV written by hand, so its header can say what no encoder would write (``declared``: the data size
    its header claims, when it lies)."""
    data = (np.random.default_rng(0).standard_normal(samples * channels) * 3000).astype("<i2").tobytes()
    size = len(data) if declared is None else declared
    fmt = struct.pack("<IHHIIHH", 16, 1, channels, rate, min(rate * 2 * channels, 2**32 - 1), 2 * channels, 16)
    return (
        b"RIFF" + struct.pack("<I", min(36 + size, 2**32 - 1)) + b"WAVE" + b"fmt " + fmt + b"data" + struct.pack("<I", size) + data
    )


def long_flac(seconds: int, rate: int = 8_000) -> bytes:
    """``seconds`` of FLAC at ``rate``, written a second at a time: silence compresses to about 100 KB an hour."""
    buffer = io.BytesIO()
    second = np.zeros(rate, dtype=np.float32)
    with sf.SoundFile(buffer, "w", samplerate=rate, channels=1, format="FLAC") as file:
        for _ in range(seconds):
            file.write(second)
    return buffer.getvalue()


def peak_memory(fn: Callable[[], Any]) -> tuple[Any, int]:
    """What ``fn`` returned or raised, and the most Python memory it held at once."""
    tracemalloc.start()
    try:
        try:
            outcome: Any = fn()
        except ReferenceAudioError as exc:
            outcome = exc
        return outcome, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("rate", [1, 100, 7_999, 192_001, 10_000_000])
def test_a_sample_rate_outside_8_to_192_khz_is_refused_from_the_header_before_anything_is_decoded(rate: int) -> None:
    outcome, peak = peak_memory(lambda: decode_reference(wav(rate, 20_000)))
    assert isinstance(outcome, ReferenceAudioError), outcome
    assert f"sample rate of {rate} Hz" in str(outcome) and "8000-192000 Hz" in str(outcome)
    assert peak < PEAK_BYTES, peak


@pytest.mark.parametrize("rate", [8_000, 192_000])
def test_the_edges_of_the_rate_range_decode_at_24_khz(rate: int) -> None:
    samples = decode_reference(wav(rate, rate * 4))
    assert abs(samples.size - 4 * SAMPLE_RATE) < SAMPLE_RATE // 100


def test_an_hour_of_flac_is_refused_once_the_decoder_is_past_the_limit_holding_no_more_than_that() -> None:
    hour = long_flac(3_600)
    assert len(hour) < 2**20, "an hour in under a megabyte: far under MAX_VOICE_BODY_BYTES"
    outcome, peak = peak_memory(lambda: decode_reference(hour))
    assert isinstance(outcome, ReferenceAudioError) and f"longer than {MAX_REFERENCE_S:g} s" in str(outcome), outcome
    assert peak < PEAK_BYTES, f"{peak} bytes: the whole hour would be 345 MB"


def test_a_header_that_claims_more_channels_than_a_recording_has_is_refused() -> None:
    with pytest.raises(ReferenceAudioError, match="64 channels; 1-8 are taken"):
        decode_reference(wav(16_000, 1_000, channels=64))


@pytest.mark.parametrize(
    "data",
    [
        wav(16_000, 16_000 * 5)[:30],  # cut inside the header
        wav(16_000, 16_000 * 5, declared=2**31),  # claims 18 hours, holds 5 s
        wav(16_000, 16_000 * 5)[:50_000],  # cut in the data
        b"fLaC" + b"\xff" * 200,
    ],
    ids=["wav-header-cut", "wav-claims-more-than-it-holds", "flac-cut", "flac-garbage"],
)
def test_truncated_files_decode_what_they_hold_or_are_refused_as_not_decodable(data: bytes) -> None:
    try:
        samples = decode_reference(data)
    except ReferenceAudioError as exc:
        assert "not decodable" in str(exc) or "no samples" in str(exc), exc
    else:
        assert 0 < samples.size <= 5 * SAMPLE_RATE + SAMPLE_RATE // 100


def test_a_decode_past_its_time_budget_is_refused() -> None:
    """The clock is the test's: each reading is a second later, so the budget runs out after a few frames."""
    ticks = itertools.count()
    with pytest.raises(ReferenceAudioError, match="took longer than 3 s to decode"):
        decode_reference(wav(16_000, 16_000 * 20), budget_s=3, clock=lambda: float(next(ticks)))
