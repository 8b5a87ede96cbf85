"""A reference recording for a voice: decoded, resampled to the model's rate, and checked — in the API, without torch.

ChatTTS turns a recording into a speaker prompt with its DVAE *encoder* (``Chat.sample_audio_speaker``), which
expects mono float32 audio at 24 kHz. That encoding needs the model, so it runs in a worker
(:mod:`ttsq.store.voice_encodings`); everything that can be refused without the model is refused here, in the API,
with a message naming the problem, before a worker is asked for anything:

* not decodable audio (PyAV reads wav, mp3, flac and ogg/vorbis/opus from the bytes alone);
* shorter than :data:`MIN_REFERENCE_S` or longer than :data:`MAX_REFERENCE_S` (ChatTTS's own advice for a prompt
  is a few seconds; 30 s of prompt is already ~1,400 positions of the GPT's context);
* silent: an RMS level below :data:`SILENCE_DBFS` (nothing to learn a voice from);
* a transcript that is empty, or implausible for the duration: :func:`check_transcript`.
"""

from __future__ import annotations

import io
import math

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLE_RATE

__all__ = [
    "MAX_CHARS_PER_S",
    "MAX_REFERENCE_S",
    "MIN_CHARS_PER_S",
    "MIN_REFERENCE_S",
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
DVAE_HOP = 512
"""Samples per prompt position: the DVAE's mel hop (256) times its encoder's downsampling (2)."""


class ReferenceAudioError(ValueError):
    """A reference recording or transcript that cannot make a voice; the message says why."""


def decode_reference(data: bytes) -> npt.NDArray[np.float32]:
    """Any audio PyAV can read → mono float32 at :data:`~ttsq.domain.audio.SAMPLE_RATE` (what the DVAE encoder takes).

    Channels are averaged and the rate converted by libswresample, deterministically: the same bytes give the
    same samples (and so the same prompt) in every API process.
    """
    import av

    if not data:
        raise ReferenceAudioError("the audio is empty")
    try:
        with av.open(io.BytesIO(data), mode="r") as container:
            if not container.streams.audio:
                raise ReferenceAudioError("the file holds no audio stream")
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="flt", layout="mono", rate=SAMPLE_RATE)
            pieces: list[npt.NDArray[np.float32]] = []
            for frame in [*container.decode(stream), None]:
                pieces.extend(np.asarray(out.to_ndarray(), dtype=np.float32).reshape(-1) for out in resampler.resample(frame))
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
    per character). The decoder keeps room for them (:func:`ttsq.inference.decoder_engine.prompt_budget`)."""
    codes = math.ceil(max_reference_s * SAMPLE_RATE / DVAE_HOP) + 1
    return codes + math.floor(MAX_CHARS_PER_S * max_reference_s)
