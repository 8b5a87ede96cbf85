"""A row's audio streamed through the decoder and Vocos as its states arrive equals its whole decode
(:mod:`ttsq.inference.audio.streaming`), on the tiny checkpoint's real decoder and Vocos, whatever sizes the states
come in, with every state decoded once."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.engine.piecewise import Decode, chat_decode, measure_field
from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from ttsq.inference.audio.streaming import StreamingDecoder, add_together, streaming_decoder
from ttsq.inference.engines.decoder_engine import DecoderEngine

TOLERANCE = 1e-5
"""Float rounding: a convolution or matrix product over another number of frames may sum in another order (the
differences seen are about 2e-7 on samples of about 1)."""


@pytest.fixture(scope="module")
def chat(tiny_checkpoint_dir: Any) -> Iterator[Any]:
    engine = DecoderEngine(
        dataclasses.replace(TINY_ENGINE_CONFIG), cuda_graphs=False, batch_invariant=False, first_chunk_slots=1, overlap=False
    )
    engine.load()
    yield engine._loaded_chat()
    engine.release_memory()


@pytest.fixture(scope="module")
def whole(chat: Any) -> Decode:
    return chat_decode(chat)


def hidden(chat: Any) -> int:
    return int(chat.config.decoder.idim) * 2


def stream(decoder: StreamingDecoder, states: npt.NDArray[np.float32], feeds: list[int]) -> npt.NDArray[np.float32]:
    """``states`` added ``feeds[0]``, ``feeds[1]``, ... at a time (round again), then finished; the joined output."""
    out, at, turn = [], 0, 0
    while at < len(states):
        size = feeds[turn % len(feeds)]
        out.append(decoder.add(states[at : at + size]))
        at, turn = at + size, turn + 1
    out.append(decoder.finish())
    return np.concatenate(out)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    tokens=st.one_of(st.integers(1, 3), st.integers(1, 300)),
    piece=st.integers(1, 32),
    feeds=st.lists(st.one_of(st.just(1), st.integers(1, 40)), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_the_streamed_audio_joins_into_the_whole_decode(
    chat: Any, whole: Decode, tokens: int, piece: int, feeds: list[int], seed: int
) -> None:
    states = np.random.default_rng(seed).standard_normal((tokens, hidden(chat))).astype(np.float32)
    expected = whole(states)
    decoder = streaming_decoder(chat, run_tokens=piece)
    joined = stream(decoder, states, feeds)
    assert joined.dtype == np.float32 and joined.size == expected.size
    np.testing.assert_allclose(joined, expected, rtol=0, atol=TOLERANCE)
    # Linear work: each state goes through the layers once, in at most one call per piece plus the flush.
    assert decoder.decoded_tokens == tokens
    assert decoder.calls <= tokens // piece + 1


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(0, 120), min_size=2, max_size=4),
    piece=st.integers(1, 24),
    feeds=st.lists(st.integers(1, 20), min_size=1, max_size=6),
    seed=st.integers(0, 2**16),
)
def test_rows_run_together_each_join_into_their_own_whole_decode(
    chat: Any, whole: Decode, lengths: list[int], piece: int, feeds: list[int], seed: int
) -> None:
    rng = np.random.default_rng(seed)
    rows = [rng.standard_normal((length, hidden(chat))).astype(np.float32) for length in lengths]
    decoders = [streaming_decoder(chat, run_tokens=piece) for _ in rows]
    outs: list[list[npt.NDArray[np.float32]]] = [[] for _ in rows]
    at, turn = 0, 0
    while any(not decoder.finished for decoder in decoders):  # each step's states for every row; short rows end
        size = feeds[turn % len(feeds)]
        live = [index for index, decoder in enumerate(decoders) if not decoder.finished]
        new = add_together([decoders[index] for index in live], [rows[index][at : at + size] for index in live])
        for index, samples in zip(live, new, strict=True):
            outs[index].append(samples)
            if at + size >= len(rows[index]):
                outs[index].append(decoders[index].finish())
        at, turn = at + size, turn + 1
    for index, (row, decoder) in enumerate(zip(rows, decoders, strict=True)):
        joined = np.concatenate(outs[index])
        expected = whole(row) if len(row) else np.zeros(0, dtype=np.float32)
        assert joined.size == expected.size, index
        np.testing.assert_allclose(joined, expected, rtol=0, atol=TOLERANCE)
        assert decoder.decoded_tokens == len(row)


def test_an_empty_row_has_no_audio(chat: Any) -> None:
    decoder = streaming_decoder(chat, run_tokens=1)
    assert decoder.add(np.zeros((0, hidden(chat)), dtype=np.float32)).size == 0
    assert decoder.finish().size == 0
    assert decoder.decoded_tokens == 0


def test_the_delay_is_the_measured_field(chat: Any, whole: Decode) -> None:
    # The delay comes from the layers' shapes; on the tiny checkpoint's random weights every layer passes a change
    # on, so the measured right field is the same number of tokens (ChatTTS's real one: 52 from its shapes).
    assert streaming_decoder(chat).delay == measure_field(whole, hidden(chat)).right == 9


def test_a_token_is_heard_once_the_delay_after_it_exists(chat: Any) -> None:
    decoder = streaming_decoder(chat, run_tokens=1)
    per_token = 512  # two mel frames of a 256-sample hop
    states = np.random.default_rng(5).standard_normal((40, hidden(chat))).astype(np.float32)
    out = 0
    for n in range(1, len(states) + 1):
        out += decoder.add(states[n - 1 : n]).size
        # Tokens [0, n - delay) are out whole (the newest, n - 1, is the delay after n - 1 - delay), the next one not.
        complete = max(n - decoder.delay, 0)
        assert complete * per_token <= out < (complete + 1) * per_token, n
    assert out + decoder.finish().size == len(states) * per_token - per_token // 2  # the ISTFT's last half hop


def test_states_wait_until_a_piece_is_there(chat: Any, whole: Decode) -> None:
    decoder = streaming_decoder(chat, run_tokens=16)
    states = np.random.default_rng(9).standard_normal((40, hidden(chat))).astype(np.float32)
    assert decoder.add(states[:15]).size == 0 and decoder.calls == 0
    first = decoder.add(states[15:16])
    assert decoder.calls == 1 and (16 - decoder.delay) * 512 <= first.size < (17 - decoder.delay) * 512
    rest = decoder.add(states[16:]), decoder.finish()
    np.testing.assert_allclose(np.concatenate([first, *rest]), whole(states), rtol=0, atol=TOLERANCE)


def test_the_decoder_runs_the_chats_own_modules(chat: Any) -> None:
    decoder = streaming_decoder(chat)
    assert decoder.decoder is chat.decoder and decoder.vocos is chat.vocos


def test_a_finished_row_takes_no_more_states(chat: Any) -> None:
    decoder = streaming_decoder(chat, run_tokens=1)
    decoder.finish()
    with pytest.raises(RuntimeError, match="finished"):
        decoder.add(np.zeros((1, hidden(chat)), dtype=np.float32))


def test_a_piece_is_at_least_one_token(chat: Any) -> None:
    with pytest.raises(ValueError, match="at least 1 token"):
        streaming_decoder(chat, run_tokens=0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    before=st.integers(1, 80),
    after=st.integers(0, 80),
    piece=st.sampled_from([1, 16, 64]),
    wanted=st.one_of(st.none(), st.integers(1, 80)),
    seed=st.integers(0, 2**16),
)
def test_a_preview_is_the_whole_decode_of_the_states_so_far_and_leaves_the_stream_as_it_was(
    chat: Any, whole: Decode, before: int, after: int, piece: int, wanted: int | None, seed: int
) -> None:
    """What a lead is made of: the exact samples so far, then what the end would add if the row ended here (all of it,
    or at least the first ``wanted`` tokens' samples); the stream then goes on to the whole decode of every state."""
    states = np.random.default_rng(seed).standard_normal((before + after, hidden(chat))).astype(np.float32)
    decoder = streaming_decoder(chat, run_tokens=piece)
    out = [decoder.add(states[:before])]
    exact, rest = decoder.preview(wanted)
    out.append(exact)
    again, same = decoder.preview(wanted)  # a preview runs nothing twice and moves nothing but the exact frames on
    assert again.size == 0
    np.testing.assert_allclose(same, rest, atol=TOLERANCE, rtol=0)
    so_far = whole(states[:before])
    joined = np.concatenate([*out, rest])
    reach = so_far.size if wanted is None else min(wanted * 512, so_far.size)
    assert joined.size >= reach
    np.testing.assert_allclose(joined[:reach], so_far[:reach], atol=TOLERANCE, rtol=0)
    if wanted is None:
        assert joined.size == so_far.size
    # The preview ran nothing twice and changed nothing: the rest of the row streams on to its whole decode.
    finished = stream(decoder, states[before:], [7]) if after else decoder.finish()
    np.testing.assert_allclose(np.concatenate([*out, finished]), whole(states), atol=TOLERANCE, rtol=0)
    assert decoder.decoded_tokens == len(states)
