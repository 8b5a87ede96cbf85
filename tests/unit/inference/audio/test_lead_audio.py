"""A row's first audio comes once ``first + lookahead`` states exist, and everything after the first piece is the
exact streamed decode (:mod:`ttsq.inference.audio.lead`), on the tiny checkpoint's real decoder and Vocos."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.engine.piecewise import Decode
from tests.unit.inference.audio.test_streaming_audio import TOLERANCE, chat, hidden, whole  # noqa: F401 - the module fixtures
from ttsq.inference.audio.handoff import Cadence
from ttsq.inference.audio.lead import LeadThenExact
from ttsq.inference.audio.streaming import streaming_decoder

PER_TOKEN = 512


def lead_decoder(chat: Any, first: int, lookahead: int, fade: int = 256, piece: int = 1) -> LeadThenExact:  # noqa: F811
    return LeadThenExact(streaming_decoder(chat, run_tokens=piece), Cadence(first, lookahead), fade=fade)


def run(decoder: LeadThenExact, states: npt.NDArray[np.float32], sizes: list[int]) -> tuple[npt.NDArray[np.float32], int | None]:
    """The joined output of ``states`` added in ``sizes`` (round again) then finished, and how many states had been
    added when the first samples came (None: only at the finish)."""
    out: list[npt.NDArray[np.float32]] = []
    at, turn, first_at = 0, 0, None
    while at < len(states):
        size = sizes[turn % len(sizes)]
        samples = decoder.add(states[at : at + size])
        at, turn = min(at + size, len(states)), turn + 1
        if samples.size and first_at is None:
            first_at = at
        out.append(samples)
    out.append(decoder.finish())
    return np.concatenate(out), first_at


def random_states(chat: Any, tokens: int, seed: int) -> npt.NDArray[np.float32]:  # noqa: F811
    return np.random.default_rng(seed).standard_normal((tokens, hidden(chat))).astype(np.float32)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    tokens=st.integers(1, 160),
    first=st.integers(1, 32),
    lookahead=st.integers(1, 8),
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
    piece=st.sampled_from([1, 16, 64]),
)
def test_the_first_audio_comes_with_its_window_and_all_after_the_first_piece_is_the_exact_decode(
    chat: Any,  # noqa: F811
    whole: Decode,  # noqa: F811
    tokens: int,
    first: int,
    lookahead: int,
    sizes: list[int],
    seed: int,
    piece: int,
) -> None:
    states = random_states(chat, tokens, seed)
    decoder = lead_decoder(chat, first, lookahead, piece=piece)
    out, first_at = run(decoder, states, sizes)
    exact = whole(states)
    assert out.shape == exact.shape
    seam = first * PER_TOKEN
    np.testing.assert_allclose(out[seam:], exact[seam:], atol=TOLERANCE, rtol=0)
    due = first + lookahead
    if tokens >= due:
        # The first samples come with the call that completes the lead's window (or sooner, where the exact ones
        # already reach that far), and the lead's samples are the whole decode of the states handed over by then,
        # as if the row ended there, up to the cross-fade.
        assert first_at is not None and first_at <= _ceil_to_call(due, sizes)
        if decoder.seam is not None:
            assert decoder.lead_states == first_at
            # Exact samples up to where the streamed decode had got when the lead was due, the lead's own from there
            # up to the held-back cross-fade.
            lead = whole(states[:first_at])
            start, held = decoder.streamed_at_lead, decoder.held.size
            np.testing.assert_allclose(out[:start], exact[:start], atol=TOLERANCE, rtol=0)
            np.testing.assert_allclose(out[start : seam - held], lead[start : seam - held], atol=TOLERANCE, rtol=0)
    else:
        np.testing.assert_allclose(out, exact, atol=TOLERANCE, rtol=0)  # ended before the lead: all streamed


def _ceil_to_call(due: int, sizes: list[int]) -> int:
    """How many states have been added by the call that makes ``due`` of them."""
    at, turn = 0, 0
    while at < due:
        at, turn = at + sizes[turn % len(sizes)], turn + 1
    return at


@pytest.mark.parametrize("piece", [16, 64, 200])
def test_the_exact_audio_follows_the_lead_as_soon_as_the_field_allows_not_a_whole_run_later(
    chat: Any,  # noqa: F811
    whole: Decode,  # noqa: F811
    piece: int,
) -> None:
    first, lookahead = 8, 2
    decoder = lead_decoder(chat, first, lookahead, piece=piece)
    delay = decoder.stream.delay
    states = random_states(chat, 150, 3)
    handed, past_seam_at = 0, None
    for count in range(1, len(states) + 1):
        handed += decoder.add(states[count - 1 : count]).size
        if handed > first * PER_TOKEN - decoder.fade and past_seam_at is None:
            past_seam_at = count
    # Samples past the lead's end need the state ``delay`` after its last token; they come with that state.
    assert past_seam_at == first + delay + 1
    assert handed + decoder.finish().size == whole(states).size


@pytest.mark.parametrize("lookahead", [9, 12])
def test_at_the_full_field_there_is_no_lead_and_the_output_is_the_whole_decode(
    chat: Any,  # noqa: F811
    whole: Decode,  # noqa: F811
    lookahead: int,
) -> None:
    states = random_states(chat, 120, 7)
    decoder = lead_decoder(chat, 32, lookahead)
    out, _ = run(decoder, states, [5])
    assert decoder.window_tokens == 0 and decoder.seam is None
    np.testing.assert_allclose(out, whole(states), atol=TOLERANCE, rtol=0)


def test_the_seam_is_cross_faded_from_the_lead_into_the_exact_samples(chat: Any, whole: Decode) -> None:  # noqa: F811
    """Below the field the lead's last samples differ from the exact ones (look-ahead 1 on the tiny checkpoint): over
    the held-back samples the output moves from the lead to the exact decode, sample by sample."""
    states = random_states(chat, 80, 3)
    first, lookahead, fade = 32, 1, 256
    decoder = lead_decoder(chat, first, lookahead, fade=fade)
    out, first_at = run(decoder, states, [first + lookahead, 16])
    assert first_at == first + lookahead
    seam = first * PER_TOKEN
    lead = whole(states[: first + lookahead])[:seam]
    exact = whole(states)
    assert np.abs(lead[seam - fade :] - exact[seam - fade : seam]).max() > 1e-3  # there is something to fade
    weights = (np.arange(fade, dtype=np.float32) + 0.5) / fade
    expected = lead[seam - fade :] * (1 - weights) + exact[seam - fade : seam] * weights
    np.testing.assert_allclose(out[seam - fade : seam], expected, atol=TOLERANCE, rtol=0)
    # The lead's work on top of the stream's: the states past the exact samples' end, at most the field.
    assert len(states) < decoder.decoded_tokens <= len(states) + decoder.stream.delay


def test_bad_shapes_are_refused(chat: Any, whole: Decode) -> None:  # noqa: F811
    with pytest.raises(ValueError, match="at least 1 token"):
        lead_decoder(chat, 0, 4)
    with pytest.raises(ValueError, match="cross-fade"):
        lead_decoder(chat, 1, 4, fade=PER_TOKEN + 1)
