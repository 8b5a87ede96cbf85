"""A chunk decoded whole at its end (a job nobody listens to) and the same chunk decoded in pieces as its states come
(a job somebody hears as it is made) are the same audio to float rounding, at a look-ahead that covers the decoder's
field; below it they differ only in the first piece's lead. On the tiny checkpoint's real decoder and Vocos."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.engine.piecewise import Decode
from tests.unit.inference.audio.test_lead_audio import PER_TOKEN, random_states
from tests.unit.inference.audio.test_streaming_audio import chat, whole  # noqa: F401 - the module fixtures
from ttsq.inference.audio.handoff import Cadence
from ttsq.inference.audio.lead import LeadThenExact
from ttsq.inference.audio.streaming import streaming_decoder

FLOAT_BOUND = 1e-6
"""Largest difference allowed between the two decodes' samples (of about 0.1): float rounding, a convolution or matrix
product of another length summing in another order (BENCHMARKS.md, "Decoding whole where nobody listens")."""
PCM16_BOUND = 1
"""The same in 16-bit steps: a sample may round to the neighbouring step, never further."""


def pcm16(samples: npt.NDArray[np.float32]) -> npt.NDArray[np.int32]:
    return np.clip(np.round(samples.astype(np.float64) * 32767), -32768, 32767).astype(np.int32)


def in_pieces(chat: Any, states: npt.NDArray[np.float32], cadence: Cadence, run_tokens: int) -> npt.NDArray[np.float32]:  # noqa: F811
    """``states`` decoded as the scheduler hands them on: ``cadence.first`` at first, then ``piece_tokens`` at a time,
    the rest with the row's end."""
    decoder = LeadThenExact(streaming_decoder(chat, run_tokens=run_tokens), cadence)
    out, at = [], 0
    if len(states) > cadence.first:
        out.append(decoder.add(states[: cadence.first]))
        at = cadence.first
        while len(states) - at > cadence.piece_tokens:
            out.append(decoder.add(states[at : at + cadence.piece_tokens]))
            at += cadence.piece_tokens
    out.append(decoder.finish(states[at:]))
    return np.concatenate(out)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    tokens=st.integers(1, 300),
    piece_tokens=st.integers(1, 48),
    beyond=st.integers(0, 16),
    run_tokens=st.sampled_from([1, 16, 64]),
    seed=st.integers(0, 2**16),
)
def test_at_a_look_ahead_covering_the_field_whole_and_in_pieces_agree_to_float_rounding(
    chat: Any,  # noqa: F811
    whole: Decode,  # noqa: F811
    tokens: int,
    piece_tokens: int,
    beyond: int,
    run_tokens: int,
    seed: int,
) -> None:
    delay = streaming_decoder(chat).delay
    states = random_states(chat, tokens, seed)
    pieced = in_pieces(chat, states, Cadence(piece_tokens, delay + beyond), run_tokens)
    decoded = whole(states)
    assert pieced.shape == decoded.shape
    assert np.abs(pieced - decoded).max(initial=0) <= FLOAT_BOUND
    assert np.abs(pcm16(pieced) - pcm16(decoded)).max(initial=0) <= PCM16_BOUND


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    tokens=st.integers(1, 300),
    piece_tokens=st.integers(1, 48),
    short=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_below_the_field_they_differ_only_in_the_first_pieces_lead(
    chat: Any,  # noqa: F811
    whole: Decode,  # noqa: F811
    tokens: int,
    piece_tokens: int,
    short: int,
    seed: int,
) -> None:
    delay = streaming_decoder(chat).delay
    states = random_states(chat, tokens, seed)
    lookahead = max(1, delay - short)
    pieced = in_pieces(chat, states, Cadence(piece_tokens, lookahead), 64)
    decoded = whole(states)
    assert pieced.shape == decoded.shape
    seam = piece_tokens * PER_TOKEN
    assert np.abs(pieced[seam:] - decoded[seam:]).max(initial=0) <= FLOAT_BOUND
    assert np.abs(pcm16(pieced[seam:]) - pcm16(decoded[seam:])).max(initial=0) <= PCM16_BOUND
