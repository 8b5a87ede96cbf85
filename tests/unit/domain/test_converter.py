"""The streaming converter: PCM16 24 kHz pieces into every format at every rate, the same whatever the pieces."""

from __future__ import annotations

import asyncio
import io
import struct
import wave
from collections.abc import AsyncIterator
from fractions import Fraction
from itertools import pairwise

import av
import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf
from av.filter import Graph
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.signal import resample_poly

from ttsq.domain.audio import decode_to_pcm16, encode_audio, stored_as
from ttsq.domain.converter import (
    RESAMPLE_CUTOFF,
    RESAMPLE_FILTER_SIZE,
    StreamConverter,
    convert_whole,
    converted,
    converter,
    wav_header,
)
from ttsq.domain.encoders import decode_pcm16
from ttsq.domain.jobs import AudioFormat
from ttsq.domain.output_formats import COMMON_RATES, OPUS_RATES, PCM_ENCODINGS, OutputFormat, parse_ttsq, stored_format

NATIVE = 24_000
EVERY_FORMAT: list[OutputFormat] = [
    *(OutputFormat(encoding, rate, wav) for encoding in PCM_ENCODINGS for rate in COMMON_RATES for wav in (False, True)),
    *(OutputFormat(codec, rate) for codec in ("mp3", "aac", "flac") for rate in COMMON_RATES),
    *(OutputFormat("opus", rate) for rate in OPUS_RATES),
]
"""Every encoding × every rate it is made at (× WAV or raw for PCM): 104 formats."""
BYTE_EXACT = [fmt for fmt in EVERY_FORMAT if fmt.encoding != "opus"]
"""Formats whose bytes do not depend on how the input was cut. Ogg Opus's packets do not either, but the muxer closes
a page by time, so where its pages end does: for opus the decoded audio is what must not change."""


def speechlike(n: int, seed: int = 0) -> npt.NDArray[np.int16]:
    """A gliding tone, a few harmonics and some noise: not silence, so a misplaced or repeated sample shows."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / NATIVE
    pitch = 2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t
    signal = 0.3 * np.sin(pitch) + 0.1 * np.sin(3 * pitch) + 0.05 * np.sin(7 * pitch) + 0.01 * rng.standard_normal(n)
    return (signal * 32767).astype("<i2")


def streamed(fmt: OutputFormat, data: bytes, cuts: list[int]) -> bytes:
    """``data`` fed in the pieces ``cuts`` (byte offsets, any) make, every call's bytes joined."""
    conv = converter(fmt)
    bounds = [0, *sorted(cuts), len(data)]
    return conv.start() + b"".join(conv.feed(data[a:b]) for a, b in pairwise(bounds)) + conv.end()


def one_shot_resample(samples: npt.NDArray[np.int16], rate: int, sample_fmt: str = "s16") -> npt.NDArray[np.generic]:
    """libswresample's resample of the whole signal at once, with the converter's filter: one frame in, flushed."""
    graph = Graph()
    source = graph.add_abuffer(format="s16", sample_rate=NATIVE, layout="mono", time_base=Fraction(1, NATIVE))
    resample = graph.add("aresample", f"{rate}:filter_size={RESAMPLE_FILTER_SIZE}:cutoff={RESAMPLE_CUTOFF}:phase_shift=10")
    formatted = graph.add("aformat", f"sample_fmts={sample_fmt}:sample_rates={rate}:channel_layouts=mono")
    sink = graph.add("abuffersink")
    source.link_to(resample)
    resample.link_to(formatted)
    formatted.link_to(sink)
    graph.configure()
    frame = av.AudioFrame.from_ndarray(samples.reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate, frame.pts, frame.time_base = NATIVE, 0, Fraction(1, NATIVE)
    graph.push(frame)
    graph.push(None)
    out = []
    while True:
        try:
            out.append(graph.pull().to_ndarray().reshape(-1))
        except (av.BlockingIOError, av.EOFError):
            return np.concatenate(out)


def g711_table(encoding: str) -> npt.NDArray[np.int32]:
    """The 256 G.711 codes decoded by libsndfile (not libav, which encoded them)."""
    fmt = OutputFormat(encoding, 8_000, wav=True)  # type: ignore[arg-type]
    samples, _ = sf.read(io.BytesIO(wav_header(fmt, 256) + bytes(range(256))), dtype="int16")
    return np.asarray(samples, dtype=np.int32)


def decoded(fmt: OutputFormat, data: bytes) -> npt.NDArray[np.float64]:
    """``data`` back to samples at ``fmt``'s rate, in PCM16 units; by libsndfile for WAV and G.711, by libav for the
    codecs (opus: decoded at 48 kHz and brought to the rate by libav's default resampler)."""
    if fmt.wav:
        samples, rate = sf.read(io.BytesIO(data), dtype="float64")
        assert rate == fmt.sample_rate
        return np.asarray(samples) * 32768
    if fmt.encoding == "pcm_s16le":
        return np.frombuffer(data, dtype="<i2").astype(np.float64)
    if fmt.encoding == "pcm_f32le":
        return np.frombuffer(data, dtype="<f4").astype(np.float64) * 32768
    if fmt.encoding in ("pcm_mulaw", "pcm_alaw"):
        return g711_table(fmt.encoding)[np.frombuffer(data, dtype=np.uint8)].astype(np.float64)
    return np.frombuffer(decode_pcm16(data, fmt.sample_rate), dtype="<i2").astype(np.float64)


def snr_db(reference: npt.NDArray[np.float64], signal: npt.NDArray[np.float64]) -> float:
    error = signal[: reference.size] - reference
    return float(10 * np.log10(np.sum(reference**2) / max(float(np.sum(error**2)), 1e-9)))


SIGNAL = speechlike(12_000)
PIECES_AT = [1, 4_801, 4_802, 9_999, 16_000, 16_001]
"""Byte offsets: a piece of one byte (half a sample), odd and even cuts, pieces of one sample and of thousands."""


@pytest.mark.parametrize("fmt", EVERY_FORMAT, ids=str)
def test_every_format_at_every_rate_decodes_to_the_audio_resampled(fmt: OutputFormat) -> None:
    """Every format × rate pair: streamed in pieces, the bytes are the finished file's (but WAV's sizes, and opus's
    page ends), and decode (libsndfile for WAV and G.711, libav for the codecs) to the 24 kHz audio resampled:
    exactly for s16 and FLAC, within a float's rounding for f32, within one G.711 step for µ-law and A-law, and
    close for the lossy codecs; with the length the rate gives (a codec may add its padding at the end)."""
    data = SIGNAL.tobytes()
    stream = streamed(fmt, data, PIECES_AT)
    whole = convert_whole(data, fmt)
    if fmt.wav:  # the same header but for its sizes, the same samples (and an 8-bit WAV's pad byte to even)
        header = len(wav_header(fmt))
        body = stream[header:]
        assert whole[header:] == body + b"\0" * (len(body) & 1)
    elif fmt.encoding != "opus":
        assert stream == whole
    reference = one_shot_resample(SIGNAL, fmt.sample_rate).astype(np.float64)
    assert reference.size == -(-SIGNAL.size * fmt.sample_rate // NATIVE), "the length the rate gives, rounded up"
    out = decoded(fmt, whole)
    if fmt.encoding in ("pcm_s16le", "flac"):
        assert np.array_equal(out, reference)
    elif fmt.encoding == "pcm_f32le":
        assert out.size == reference.size and np.max(np.abs(out - reference)) <= 1.0
    elif fmt.encoding in ("pcm_mulaw", "pcm_alaw"):
        assert out.size == reference.size
        steps = np.unique(g711_table(fmt.encoding))
        at = np.searchsorted(steps, reference)
        below, above = steps[np.clip(at - 1, 0, steps.size - 1)], steps[np.clip(at, 0, steps.size - 1)]
        assert np.all((out == below) | (out == above)), "each sample is one of the two G.711 steps around it"
    else:
        padding = {"mp3": 1_152 + 576, "aac": 2 * 1_024, "opus": 0}[fmt.encoding]
        priming = 1_024 if fmt.encoding == "aac" else 0  # ADTS cannot say it; mp3's LAME tag and OpusHead do
        assert reference.size + priming <= out.size <= reference.size + padding
        assert snr_db(reference, out[priming:]) > 5, "the same audio, not shifted"


@settings(max_examples=60, deadline=None)
@given(fmt=st.sampled_from(BYTE_EXACT), cuts=st.lists(st.integers(0, 2 * 6_000), max_size=12))
def test_any_split_of_the_input_gives_the_bytes_of_one_piece(fmt: OutputFormat, cuts: list[int]) -> None:
    """Cut anywhere (mid-sample too, empty pieces too), the stream is byte for byte the one-piece stream: the
    resampler's state, a codec's incomplete frame and a half sample all carry over a piece boundary."""
    data = speechlike(6_000, seed=3).tobytes()
    assert streamed(fmt, data, cuts) == streamed(fmt, data, [])


@settings(max_examples=15, deadline=None)
@given(rate=st.sampled_from(OPUS_RATES), cuts=st.lists(st.integers(0, 2 * 6_000), max_size=8))
def test_any_split_of_the_input_gives_the_opus_audio_of_one_piece(rate: int, cuts: list[int]) -> None:
    fmt = OutputFormat("opus", rate)
    data = speechlike(6_000, seed=4).tobytes()
    assert np.array_equal(decoded(fmt, streamed(fmt, data, cuts)), decoded(fmt, streamed(fmt, data, [])))


@settings(max_examples=40, deadline=None)
@given(
    rate=st.sampled_from([rate for rate in COMMON_RATES if rate != NATIVE]),
    encoding=st.sampled_from(["pcm_s16le", "pcm_f32le"]),
    cuts=st.lists(st.integers(0, 2 * 9_000), max_size=10),
)
def test_resampled_pcm_is_the_library_one_shot_resample_of_the_whole(rate: int, encoding: str, cuts: list[int]) -> None:
    samples = speechlike(9_000, seed=5)
    fmt = OutputFormat(encoding, rate)  # type: ignore[arg-type]
    dtype = "<f4" if encoding == "pcm_f32le" else "<i2"
    out = np.frombuffer(streamed(fmt, samples.tobytes(), cuts), dtype=dtype)
    assert np.array_equal(out, one_shot_resample(samples, rate, "flt" if encoding == "pcm_f32le" else "s16"))


@pytest.mark.parametrize("rate", [rate for rate in COMMON_RATES if rate < NATIVE])
def test_nothing_above_the_new_nyquist_frequency_folds_back(rate: int) -> None:
    """A tone just above the lower rate's Nyquist frequency is stopped (below -70 dB), where swresample's default
    filter lets it fold back into the audio at about -22 dB; a tone in the pass band passes within 0.5 dB."""
    t = np.arange(2 * NATIVE) / NATIVE

    def level_db(frequency: float) -> float:
        tone = (0.5 * np.sin(2 * np.pi * frequency * t) * 32767).astype("<i2")
        out = np.frombuffer(convert_whole(tone.tobytes(), OutputFormat("pcm_s16le", rate)), dtype="<i2").astype(np.float64)
        steady = out[rate // 4 : -rate // 4]
        return float(20 * np.log10(max(np.sqrt(np.mean(steady**2)), 1e-3) / (0.5 * 32767 / np.sqrt(2))))

    nyquist = rate / 2
    assert level_db(nyquist * 1.05) < -70
    assert abs(level_db(nyquist * 0.8)) < 0.5


@pytest.mark.parametrize("rate", [rate for rate in COMMON_RATES if rate != NATIVE])
def test_resampling_agrees_with_scipy_in_the_pass_band(rate: int) -> None:
    """An independent resampler (scipy's polyphase ``resample_poly``) gives the same audio for what lies in both
    filters' pass band: no delay, no gain, no lost or doubled stretch."""
    t = np.arange(NATIVE) / NATIVE
    low = min(rate, NATIVE) / 2 * 0.6
    signal = 0.3 * np.sin(2 * np.pi * 220 * t) + 0.2 * np.sin(2 * np.pi * low * t)
    samples = (signal * 32767).astype("<i2")
    ours = np.frombuffer(convert_whole(samples.tobytes(), OutputFormat("pcm_s16le", rate)), dtype="<i2").astype(np.float64)
    up, down = Fraction(rate, NATIVE).numerator, Fraction(rate, NATIVE).denominator
    theirs = resample_poly(samples.astype(np.float64), up, down)
    assert ours.size == theirs.size
    middle = slice(rate // 10, -rate // 10)  # away from the ends, where the filters see different edges
    assert snr_db(theirs[middle], ours[middle]) > 50


@pytest.mark.parametrize("encoding", ["pcm_mulaw", "pcm_alaw"])
def test_g711_at_8_khz_decodes_to_the_24_khz_audio_resampled_within_its_quantisation(encoding: str) -> None:
    """What a phone bridge gets: raw µ-law (A-law) at 8 kHz, decoded by libsndfile, is the 24 kHz audio resampled to
    8 kHz, each sample one of the two G.711 steps around the resampled value; the WAV form carries the same bytes."""
    samples = speechlike(48_000, seed=6)
    raw = streamed(OutputFormat(encoding, 8_000), samples.tobytes(), [480, 4_801, 30_000])  # type: ignore[arg-type]
    assert len(raw) == 16_000, "one byte a sample at 8 kHz"
    reference = one_shot_resample(samples, 8_000).astype(np.int32)
    table = g711_table(encoding)
    out = table[np.frombuffer(raw, dtype=np.uint8)]
    steps = np.unique(table)
    at = np.searchsorted(steps, reference)
    below, above = steps[np.clip(at - 1, 0, steps.size - 1)], steps[np.clip(at, 0, steps.size - 1)]
    assert np.all((out == below) | (out == above))
    assert np.max(np.abs(out - reference)) <= np.max(np.diff(steps)), "within one step, the largest being G.711's top"
    wav_fmt = OutputFormat(encoding, 8_000, wav=True)  # type: ignore[arg-type]
    with sf.SoundFile(io.BytesIO(convert_whole(samples.tobytes(), wav_fmt))) as wav:
        assert (wav.samplerate, wav.frames, wav.subtype) == (8_000, 16_000, "ULAW" if encoding == "pcm_mulaw" else "ALAW")


@pytest.mark.parametrize("fmt", [fmt for fmt in EVERY_FORMAT if fmt.wav and fmt.sample_rate in (8_000, 44_100)], ids=str)
def test_wav_headers_open_ended_while_streaming_and_sized_when_whole(fmt: OutputFormat) -> None:
    """The stream's header promises no length (libsndfile reads it as "until the end"); the finished file's states
    it, so that Python's ``wave`` module reads an s16 WAV's frame count right."""
    data = speechlike(2_401).tobytes()  # an odd count: an 8-bit WAV pads its data chunk to even
    stream = streamed(fmt, data, [1_000])
    assert struct.unpack("<I", stream[4:8]) == (0xFFFFFFFF,)
    frames = -(-2_401 * fmt.sample_rate // NATIVE)
    subtype = {"pcm_s16le": "PCM_16", "pcm_f32le": "FLOAT", "pcm_mulaw": "ULAW", "pcm_alaw": "ALAW"}[fmt.encoding]
    with sf.SoundFile(io.BytesIO(stream)) as streamed_wav:
        assert (streamed_wav.samplerate, streamed_wav.subtype) == (fmt.sample_rate, subtype)
    whole = convert_whole(data, fmt)
    with sf.SoundFile(io.BytesIO(whole)) as whole_wav:
        assert (whole_wav.samplerate, whole_wav.frames, whole_wav.subtype) == (fmt.sample_rate, frames, subtype)
    assert struct.unpack("<I", whole[4:8]) == (len(whole) - 8,)
    if fmt.encoding == "pcm_s16le":
        with wave.open(io.BytesIO(whole)) as reader:
            assert (reader.getframerate(), reader.getnframes()) == (fmt.sample_rate, frames)


@pytest.mark.parametrize("rate", COMMON_RATES)
def test_mp3_at_every_rate_announces_its_encoder_delay(rate: int) -> None:
    """MPEG-1 frames (32 kHz and up) have a longer side information than MPEG-2's: the LAME tag is found at both, and
    the decoder trims LAME's 576 samples of priming (the audio starts at once, not 576 samples late)."""
    fmt = OutputFormat("mp3", rate)
    header = converter(fmt).start()
    tag = header.index(b"Xing" if b"Xing" in header else b"Info") + 120
    assert header[tag + 21 : tag + 24] == (576 << 12).to_bytes(3, "big")
    samples = speechlike(12_000, seed=7)
    reference = one_shot_resample(samples, rate).astype(np.float64)
    out = decoded(fmt, convert_whole(samples.tobytes(), fmt))
    head = reference[: rate // 10]
    lags = [float(np.dot(head, out[shift : shift + head.size])) for shift in range(700)]
    assert int(np.argmax(lags)) == 0


@pytest.mark.parametrize(("fmt", "low", "high"), [("mp3", 64_000, 192_000), ("opus", 32_000, 128_000), ("aac", 32_000, 128_000)])
def test_the_bit_rate_asked_for_is_the_bit_rate_made(fmt: str, low: int, high: int) -> None:
    rate = 48_000 if fmt == "opus" else 44_100
    data = speechlike(48_000, seed=8).tobytes()
    small = convert_whole(data, OutputFormat(fmt, rate, bit_rate=low))  # type: ignore[arg-type]
    large = convert_whole(data, OutputFormat(fmt, rate, bit_rate=high))  # type: ignore[arg-type]
    assert 2 < len(large) / len(small) < 4.5, "about the ratio of the bit rates"
    assert len(small) * 8 / 2 == pytest.approx(low, rel=0.3), "two seconds of audio at about the bit rate"


def test_the_header_comes_once_whichever_call_comes_first() -> None:
    """``start`` is optional: a first ``feed`` (or ``end``) carries the header; it never comes twice. A converter is one
    stream: feeding after the end is an error; ``end`` again and ``close`` are harmless."""
    fmt = OutputFormat("pcm_mulaw", 8_000, wav=True)
    data = speechlike(2_400).tobytes()
    started = converter(fmt)
    with_start = started.start() + started.feed(data) + started.end()
    unstarted = converter(fmt)
    without = unstarted.feed(data) + unstarted.end()
    assert with_start == without and with_start.startswith(b"RIFF") and with_start.count(b"RIFF") == 1
    assert converter(fmt).end() == wav_header(fmt), "no audio: the header alone, an empty stream"
    assert unstarted.end() == b""
    unstarted.close()
    with pytest.raises(ValueError, match="ended"):
        unstarted.feed(data)
    abandoned = converter(OutputFormat("mp3", 44_100))
    abandoned.feed(data)
    abandoned.close()  # frees libav's encoder without a tail


def test_only_resampling_and_codecs_are_sent_to_a_worker_thread() -> None:
    assert not StreamConverter(OutputFormat("pcm_s16le")).encodes
    assert not StreamConverter(OutputFormat("pcm_mulaw", 24_000)).encodes
    assert StreamConverter(OutputFormat("pcm_s16le", 8_000)).encodes
    assert StreamConverter(OutputFormat("opus")).encodes


async def test_converted_sends_the_header_at_once_and_each_piece_as_it_comes() -> None:
    gate = asyncio.Event()
    pieces = [speechlike(24_000, seed).tobytes() for seed in (1, 2)]

    async def source() -> AsyncIterator[bytes]:
        yield pieces[0]
        await gate.wait()
        yield pieces[1]

    fmt = OutputFormat("mp3", 44_100)
    stream = converted(source(), fmt)
    header = await anext(stream)
    first = await anext(stream)  # arrives while the second piece is still held back by the gate
    assert b"Xing" in header and decoded(fmt, header + first).size > 22_050
    gate.set()
    rest = b"".join([chunk async for chunk in stream])
    assert header + first + rest == convert_whole(b"".join(pieces), fmt)


async def test_an_error_from_the_pieces_reaches_the_listener_after_what_was_ready() -> None:
    class Boom(Exception):
        pass

    async def source() -> AsyncIterator[bytes]:
        yield speechlike(24_000).tobytes()
        raise Boom

    got: list[bytes] = []
    with pytest.raises(Boom):
        async for chunk in converted(source(), OutputFormat("pcm_mulaw", 8_000, wav=True)):
            got.append(chunk)
    assert len(got) == 2 and got[0].startswith(b"RIFF") and 7_000 < len(got[1]) <= 8_000, "all but the filter's tail"


@pytest.mark.parametrize("stored", ["wav", "pcm", "mp3", "opus", "aac", "flac"])
def test_a_stored_result_is_sent_as_it_is_only_in_its_own_format(stored: AudioFormat) -> None:
    """The stored file of a job (24 kHz, its own format) is the answer to exactly that format; any other format or
    rate is made from its samples, never the stored bytes relabelled."""
    pcm = speechlike(12_000, seed=9).tobytes()
    file = pcm if stored == "pcm" else encode_audio(np.frombuffer(pcm, "<i2") / 32768, stored)
    assert stored_as(file, stored, parse_ttsq(stored)) is file
    assert stored_format(parse_ttsq(stored)) == stored
    samples = pcm if stored in ("pcm", "wav", "flac") else decode_to_pcm16(file)
    for other in (parse_ttsq(stored, 16_000), parse_ttsq("mulaw"), OutputFormat("mp3", 24_000, bit_rate=64_000)):
        assert stored_format(other) is None or stored_format(other) != stored
        made, expected = stored_as(file, stored, other), convert_whole(samples, other)
        if other.encoding == "opus":  # each Ogg stream draws its own serial number: the audio is what must agree
            assert np.array_equal(decoded(other, made), decoded(other, expected))
        else:
            assert made == expected


def test_close_never_touches_the_encoder_while_a_feed_is_running() -> None:
    """A server feeds in a worker thread and closes from the event loop when the client leaves: a close that comes
    while a feed runs leaves libav alone (the encoder is freed with the converter) instead of freeing it under the
    feed; the feed's stream goes on to a valid end."""
    fmt = OutputFormat("mp3", 44_100)
    data = speechlike(24_000).tobytes()
    conv = converter(fmt)
    first = conv.feed(data)
    with conv._busy:  # a feed in flight in another thread
        conv.close()
    rest = conv.feed(data) + conv.end()
    assert first + rest == streamed(fmt, data * 2, [len(data)])
