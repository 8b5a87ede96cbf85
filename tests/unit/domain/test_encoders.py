"""The incremental encoders: pieces in, one valid file out, sent while it grows, decoding to the samples fed."""

from __future__ import annotations

import io
import struct
from typing import get_args

import av
import numpy as np
import numpy.typing as npt
import pytest
import soundfile as sf

from ttsq.domain.audio import SAMPLE_RATE, decode_to_pcm16, encode_audio
from ttsq.domain.encoders import (
    STREAM_CONTENT_TYPES,
    StreamFormat,
    decode_pcm16,
    encode_whole,
    open_ended_wav_header,
    stream_encoder,
)

COMPRESSED: tuple[StreamFormat, ...] = ("mp3", "opus", "aac", "flac")
MP3_FRAME = 576
"""Samples in an MPEG-2 layer III frame (24 kHz)."""
AAC_FRAME = 1024


def speechlike(n: int, seed: int = 0) -> npt.NDArray[np.int16]:
    """A tone with a wobble and some noise: not silence, so a misplaced sample shows."""
    rng = np.random.default_rng(seed)
    t = np.arange(n) / SAMPLE_RATE
    signal = 0.3 * np.sin(2 * np.pi * (180 + 40 * np.sin(2 * np.pi * 3 * t)) * t) + 0.02 * rng.standard_normal(n)
    return (signal * 32767).astype("<i2")


def pieces_of(sizes: list[int]) -> list[bytes]:
    return [speechlike(n, seed).tobytes() for seed, n in enumerate(sizes)]


def streamed(fmt: StreamFormat, pieces: list[bytes]) -> list[bytes]:
    encoder = stream_encoder(fmt, SAMPLE_RATE)
    return [encoder.start(), *(encoder.feed(piece) for piece in pieces), encoder.finish()]


def decoded(data: bytes) -> npt.NDArray[np.int16]:
    return np.frombuffer(decode_pcm16(data, SAMPLE_RATE), dtype="<i2")


def lag(reference: npt.NDArray[np.int16], signal: npt.NDArray[np.int16]) -> int:
    """Where ``reference``'s first 0.2 s best match ``signal``: the samples a decoder put before the audio."""
    head = reference[:4800].astype(np.float64)
    window = signal[: 4800 + 3000].astype(np.float64)
    scores = [float(np.dot(head, window[shift : shift + head.size])) for shift in range(3000)]
    return int(np.argmax(scores))


@pytest.mark.parametrize("fmt", COMPRESSED)
def test_the_pieces_join_into_one_file_that_decodes_to_the_samples_fed(fmt: StreamFormat) -> None:
    """Pieces of any length (not frame-aligned); libav's decoder reads the joined bytes as one file. Opus and FLAC
    decode to exactly the samples fed; mp3's LAME tag trims the priming but cannot know the end padding (LAME's
    288 samples and the rest of the last frame: under one frame and a granule); ADTS can say neither, so AAC's
    priming frame comes first and its last frame is padded."""
    sizes = [30_011, 45_000, 7_777, 20_000]
    fed = np.concatenate([speechlike(n, seed) for seed, n in enumerate(sizes)])
    out = decoded(b"".join(streamed(fmt, pieces_of(sizes))))
    excess = out.size - fed.size
    if fmt in ("opus", "flac"):
        assert excess == 0
    elif fmt == "mp3":
        assert 0 <= excess < MP3_FRAME + 64 and lag(fed, out) == 0, "the priming is trimmed, the padding is not"
    else:
        assert AAC_FRAME <= excess < 2 * AAC_FRAME and lag(fed, out) == AAC_FRAME
    if fmt == "flac":
        assert np.array_equal(out, fed), "lossless"


@pytest.mark.parametrize("fmt", COMPRESSED)
def test_each_piece_is_sent_as_soon_as_its_frames_are_encoded(fmt: StreamFormat) -> None:
    """What a piece's feed returns already plays: all of it but a codec's look-ahead and the part of a frame
    (or, for Ogg, of a 100 ms page) waiting for the next piece. Not the whole file at the end."""
    piece = speechlike(36_000).tobytes()
    encoder = stream_encoder(fmt, SAMPLE_RATE)
    sent = encoder.start() + encoder.feed(piece)
    playable = decoded(sent).size - (AAC_FRAME if fmt == "aac" else 0)
    assert playable >= 36_000 - SAMPLE_RATE // 4, f"{fmt}: only {playable} of 36,000 samples were sent"
    assert encoder.finish(), "the rest comes at the end"


def test_headers_come_first_and_promise_no_length() -> None:
    """A stream cannot rewrite its header at the end: FLAC's STREAMINFO says "total samples unknown" (0), the MP3
    Xing frame's LAME tag carries the encoder delay (576) but no frame count or padding, WAV says "until the stream
    ends"."""
    flac = b"".join(streamed("flac", pieces_of([5000])))
    assert flac[:4] == b"fLaC"
    streaminfo = flac[8:42]
    total_samples = int.from_bytes(streaminfo[13:18], "big") & 0xF_FFFF_FFFF
    assert total_samples == 0
    assert sf.info(io.BytesIO(encode_audio(speechlike(5000) / 32768, "flac"))).frames == 5000, "the stored file knows"
    mp3_header = stream_encoder("mp3", SAMPLE_RATE).start()
    lame_tag = mp3_header.index(b"Xing") + 120
    assert mp3_header[lame_tag + 21 : lame_tag + 24] == (576 << 12).to_bytes(3, "big"), "delay 576, padding unknown (0)"
    assert struct.unpack(">I", mp3_header[mp3_header.index(b"Xing") + 8 :][:4]) == (0,), "no frame count"
    opus_header = stream_encoder("opus", SAMPLE_RATE).start()
    assert opus_header.startswith(b"OggS") and b"OpusHead" in opus_header and b"OpusTags" in opus_header
    assert stream_encoder("aac", SAMPLE_RATE).start() == b"", "ADTS has no file header: each frame has its own"
    wav = open_ended_wav_header(SAMPLE_RATE)
    assert struct.unpack("<I", wav[4:8]) == (0xFFFFFFFF,) and struct.unpack("<I", wav[40:44]) == (0xFFFFFFFF,)


def test_open_ended_wav_header_is_read_as_a_stream() -> None:
    header = open_ended_wav_header(SAMPLE_RATE)
    pcm = b"\x00\x10" * 2400
    with sf.SoundFile(io.BytesIO(header + pcm)) as wav:
        assert wav.samplerate == 24000 and wav.channels == 1 and wav.subtype == "PCM_16"


def test_opus_is_ogg_opus_at_48_khz_recording_the_24_khz_input() -> None:
    data = b"".join(streamed("opus", pieces_of([12_000])))
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.audio[0]
        assert container.format.name == "ogg" and stream.codec_context.name in ("opus", "libopus")
        assert stream.codec_context.sample_rate == 48_000
    opus_head = data[data.index(b"OpusHead") :]
    assert struct.unpack("<I", opus_head[12:16]) == (SAMPLE_RATE,), "input sample rate"
    samples, rate = sf.read(io.BytesIO(data), dtype="int16")
    assert rate == SAMPLE_RATE and len(samples) == 12_000, "libsndfile decodes it at the input's rate, exactly"


@pytest.mark.parametrize("fmt", ["wav", "pcm"])
def test_wav_and_pcm_pass_the_samples_through(fmt: StreamFormat) -> None:
    pieces = pieces_of([100, 2000])
    out = streamed(fmt, pieces)
    assert out[1:3] == pieces and out[3] == b""
    assert out[0] == (open_ended_wav_header(SAMPLE_RATE) if fmt == "wav" else b"")


def test_the_stored_aac_is_the_streamed_aac() -> None:
    """One encoding of the same PCM16: a client that streamed a task's aac has the file a download gives."""
    samples = speechlike(30_000).astype(np.float32) / 32768
    pcm = encode_audio(samples, "pcm")
    sizes = [7000, 13_000, 10_000]
    pieces = [pcm[2 * sum(sizes[:i]) : 2 * sum(sizes[: i + 1])] for i in range(len(sizes))]
    stored = encode_audio(samples, "aac")
    assert b"".join(streamed("aac", pieces)) == stored == encode_whole(pcm, "aac", SAMPLE_RATE)
    assert stored[:2] == b"\xff\xf1", "ADTS sync word, MPEG-4"
    assert len(decode_to_pcm16(stored)) // 2 - 30_000 in range(AAC_FRAME, 2 * AAC_FRAME), "libav decodes what libsndfile cannot"


def test_every_stream_format_has_a_content_type_and_an_encoder() -> None:
    assert set(STREAM_CONTENT_TYPES) == set(get_args(StreamFormat))
    with pytest.raises(ValueError, match="ogg"):
        stream_encoder("ogg", SAMPLE_RATE)  # type: ignore[arg-type]


@pytest.mark.parametrize("fmt", [*COMPRESSED, "wav", "pcm"])
def test_many_small_pieces_encode_as_the_same_samples_in_one_piece_do(fmt: StreamFormat) -> None:
    """Audio streamed within a chunk comes in many pieces of a few hundred ms, some of a sample or two (a chunk's
    rest after its last piece): the stream decodes to what the same samples fed at once decode to."""
    fed = speechlike(60_000)
    cuts = np.cumsum([16_384, 1, 239, 16_128, 2, 9_000, 3_333])
    small = [part.tobytes() for part in np.split(fed, cuts)]
    assert len(small) == 8 and b"".join(small) == fed.tobytes()
    one = b"".join(streamed(fmt, [fed.tobytes()]))
    many = b"".join(streamed(fmt, small))
    if fmt in ("wav", "pcm"):
        assert many == one
    else:
        assert np.array_equal(decoded(many), decoded(one))
