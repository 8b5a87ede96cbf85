"""A reference recording for a voice: decoded, resampled to the model's rate, and checked — in the API, without torch.

ChatTTS turns a recording into a speaker prompt with its DVAE *encoder* (``Chat.sample_audio_speaker``), which
expects mono float32 audio at 24 kHz. That encoding needs the model, so it runs in a worker
(:mod:`ttsq.store.voice_encodings`); everything that can be refused without the model is refused here, in the API,
with a message naming the problem, before a worker is asked for anything:

* not decodable audio (PyAV reads wav, mp3, flac and ogg/vorbis/opus from the bytes alone);
* a sample rate outside :data:`MIN_SAMPLE_RATE`-:data:`MAX_SAMPLE_RATE` or more than :data:`MAX_CHANNELS` channels,
  refused from the stream's header before a sample is decoded (a WAV whose header claims 1 Hz was upsampled 24,000x:
  a 240 KB upload grew the API by 22 GB);
* more audio than the longest reference, refused as soon as the decoder has read past it (an hour of FLAC in
  272 KB was decoded whole: +320 MB, 7 s), or a decode that runs past its time budget;
* shorter than :data:`MIN_REFERENCE_S` or longer than :data:`MAX_REFERENCE_S` (ChatTTS's own advice for a prompt
  is a few seconds; 30 s of prompt is already ~1,400 positions of the GPT's context);
* silent: an RMS level below :data:`SILENCE_DBFS` (nothing to learn a voice from);
* a transcript that is empty, or implausible for the duration: :func:`check_transcript`.
"""

from __future__ import annotations

import io
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLE_RATE

__all__ = [
    "DECODE_BUDGET_S",
    "MAX_CHANNELS",
    "MAX_CHARS_PER_S",
    "MAX_REFERENCE_S",
    "MAX_SAMPLE_RATE",
    "MIN_CHARS_PER_S",
    "MIN_REFERENCE_S",
    "MIN_SAMPLE_RATE",
    "SILENCE_DBFS",
    "ReferenceAudioError",
    "check_reference",
    "check_transcript",
    "decode_reference",
    "reference_positions",
]

MIN_REFERENCE_S = 3.0
MAX_REFERENCE_S = 30.0
SILENCE_DBFS = -50.0
"""Quieter than this (RMS, dB below full scale) over the whole recording counts as silence."""
MIN_CHARS_PER_S = 0.5
"""A transcript has at least one spoken character per two seconds of recording (pauses allowed for)..."""
MAX_CHARS_PER_S = 25.0
"""...and at most 25 per second: fast English runs ~15 letters and spaces a second, Chinese ~5-7 characters."""
MIN_SAMPLE_RATE = 8_000
"""Slowest sample rate taken (telephone audio); below it a header is lying or the recording holds no speech band."""
MAX_SAMPLE_RATE = 192_000
"""Fastest sample rate taken (studio audio); every decoded frame is held to the same range as the header."""
MAX_CHANNELS = 8
"""Most channels taken (7.1); they are averaged to mono."""
DECODE_BUDGET_S = 10.0
"""Longest a decode may take: 30 s of 192 kHz FLAC decodes in well under a second here, so past this the file is
built to be slow, and the decoding thread is released with a refusal."""
DVAE_HOP = 512
"""Samples per prompt position: the DVAE's mel hop (256) times its encoder's downsampling (2)."""


class ReferenceAudioError(ValueError):
    """A reference recording or transcript that cannot make a voice; the message says why."""


def decode_reference(
    data: bytes,
    max_s: float = MAX_REFERENCE_S,
    *,
    budget_s: float = DECODE_BUDGET_S,
    clock: Callable[[], float] = time.monotonic,
) -> npt.NDArray[np.float32]:
    """Any audio PyAV can read → mono float32 at :data:`~ttsq.domain.audio.SAMPLE_RATE` (what the DVAE encoder takes).

    Channels are averaged and the rate converted by libswresample, deterministically: the same bytes give the
    same samples (and so the same prompt) in every API process.

    What it may cost is bounded before and while decoding, since a few kilobytes can claim anything: the stream's
    sample rate and channels are checked from its header before a frame is decoded, every frame again, and decoding
    stops with a refusal as soon as more than ``max_s`` seconds were read or ``budget_s`` seconds of ``clock`` passed.
    Each frame is resampled as it comes and only the 24 kHz mono output is kept, so memory stays near ``max_s``
    seconds of output whatever the file holds. Runs in a thread (the caller's ``asyncio.to_thread``): it blocks.
    """
    import av

    if not data:
        raise ReferenceAudioError("the audio is empty")
    deadline = clock() + budget_s
    pieces: list[npt.NDArray[np.float32]] = []
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise ReferenceAudioError("the file holds no audio stream")
            stream = container.streams.audio[0]
            _check_format(stream.sample_rate, stream.channels, "its header says")
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            read_s = 0.0
            for frame in container.decode(stream):
                _check_format(frame.sample_rate, len(frame.layout.channels), "a frame has")
                read_s += frame.samples / frame.sample_rate
                if read_s > max_s:
                    raise ReferenceAudioError(f"the recording is longer than {max_s:g} s; at most {max_s:g} s are taken")
                if clock() > deadline:
                    raise ReferenceAudioError(f"the audio took longer than {budget_s:g} s to decode; nothing was kept")
                pieces.extend(_mono(resampler.resample(frame)))
            pieces.extend(_mono(resampler.resample(None)))
    except ReferenceAudioError:
        raise
    except Exception as exc:
        raise ReferenceAudioError(f"not decodable audio (wav, mp3, flac or ogg expected): {exc}") from exc
    samples = np.concatenate(pieces).astype(np.float32) if pieces else np.zeros(0, dtype=np.float32)
    if samples.size == 0:
        raise ReferenceAudioError("the audio decodes to no samples")
    if not np.isfinite(samples).all():
        raise ReferenceAudioError("the audio holds non-finite samples")
    return samples


def _check_format(rate: int | None, channels: int, where: str) -> None:
    if rate is None or not MIN_SAMPLE_RATE <= rate <= MAX_SAMPLE_RATE:
        raise ReferenceAudioError(
            f"{where} a sample rate of {rate} Hz; {MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz is taken; nothing was decoded"
        )
    if not 1 <= channels <= MAX_CHANNELS:
        raise ReferenceAudioError(f"{where} {channels} channels; 1-{MAX_CHANNELS} are taken")


def _mono(frames: list[Any]) -> list[npt.NDArray[np.float32]]:
    return [np.asarray(out.to_ndarray(), dtype=np.float32).reshape(-1) for out in frames]


def check_reference(samples: npt.NDArray[np.float32], max_reference_s: float = MAX_REFERENCE_S) -> float:
    """Refuse a recording that is too short, too long (``MAX_REFERENCE_S``) or silent; its duration in seconds otherwise."""
    duration = samples.size / SAMPLE_RATE
    if duration < MIN_REFERENCE_S:
        raise ReferenceAudioError(f"the recording is {duration:.1f} s long; at least {MIN_REFERENCE_S:g} s are needed")
    if duration > max_reference_s:
        raise ReferenceAudioError(f"the recording is {duration:.1f} s long; at most {max_reference_s:g} s are taken")
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    level = 20 * math.log10(rms) if rms > 0 else -math.inf
    if level < SILENCE_DBFS:
        raise ReferenceAudioError(f"the recording is silent (RMS {level:.0f} dBFS, below {SILENCE_DBFS:g} dBFS)")
    return duration


def check_transcript(transcript: str, duration_s: float) -> str:
    """The transcript stripped, or a refusal: empty, or fewer than :data:`MIN_CHARS_PER_S` or more than
    :data:`MAX_CHARS_PER_S` non-space characters per second of recording (it must be *this* recording's words:
    ChatTTS reads the transcript and the recording's codes as one utterance)."""
    text = " ".join(transcript.split())
    if not text:
        raise ReferenceAudioError("the transcript is empty")
    spoken = sum(1 for c in text if not c.isspace())
    low, high = math.ceil(MIN_CHARS_PER_S * duration_s), math.floor(MAX_CHARS_PER_S * duration_s)
    if not low <= spoken <= high:
        raise ReferenceAudioError(
            f"a transcript of {spoken} characters is implausible for {duration_s:.1f} s of speech "
            f"(expected {low}-{high}: {MIN_CHARS_PER_S:g} to {MAX_CHARS_PER_S:g} characters per second)"
        )
    return text


def reference_positions(max_reference_s: float = MAX_REFERENCE_S) -> int:
    """GPT positions the longest reference takes in a prompt: its DVAE codes plus its transcript (at most one token
    per character). The decoder keeps room for them (:func:`ttsq.inference.engines.decoder_engine.prompt_budget`)."""
    codes = math.ceil(max_reference_s * SAMPLE_RATE / DVAE_HOP) + 1
    return codes + math.floor(MAX_CHARS_PER_S * max_reference_s)
