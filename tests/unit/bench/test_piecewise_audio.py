"""A row's audio decoded in pieces as its states arrive equals its whole decode, at the measured look-ahead
(:mod:`bench.engine.piecewise`), on the tiny checkpoint's real decoder and Vocos."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.engine.piecewise import AudioField, Decode, PieceDecoder, chat_decode, measure_field
from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from ttsq.inference.engines.decoder_engine import DecoderEngine


@pytest.fixture(scope="module")
def decode(tiny_checkpoint_dir: Any) -> Iterator[tuple[Decode, int]]:
    engine = DecoderEngine(
        dataclasses.replace(TINY_ENGINE_CONFIG), cuda_graphs=False, batch_invariant=False, first_chunk_slots=1, overlap=False
    )
    engine.load()
    chat = engine._loaded_chat()
    yield chat_decode(chat), int(chat.config.decoder.idim) * 2


@pytest.fixture(scope="module")
def field(decode: tuple[Decode, int]) -> AudioField:
    return measure_field(*decode)


def test_the_field_is_what_the_architecture_says(field: AudioField) -> None:
    # Two mel frames a token, a hop of 256 samples each; the tiny decoder has one ConvNeXt block (kernel 7, dilation
    # 2) between two kernel-3 convolutions, Vocos its own blocks and an inverse STFT of 1,024: a few tokens each side.
    assert field.samples_per_token == 512
    assert 2 <= field.left <= 16 and 2 <= field.right <= 16


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    tokens=st.integers(1, 160),
    piece=st.integers(1, 24),
    extra=st.integers(0, 4),
    feeds=st.lists(st.integers(1, 12), min_size=1, max_size=8),
    seed=st.integers(0, 2**16),
)
def test_pieces_at_the_full_lookahead_join_into_the_whole_decode(
    decode: tuple[Decode, int], field: AudioField, tokens: int, piece: int, extra: int, feeds: list[int], seed: int
) -> None:
    run, hidden = decode
    states = np.random.default_rng(seed).standard_normal((tokens, hidden)).astype(np.float32)
    whole = run(states)
    pieces = PieceDecoder(run, field, piece, field.right + extra)
    out, at, turn = [], 0, 0
    while at < tokens:
        size = feeds[turn % len(feeds)]
        out.append(pieces.add(states[at : at + size]))
        at, turn = at + size, turn + 1
    out.append(pieces.finish())
    joined = np.concatenate(out)
    assert joined.size == whole.size
    np.testing.assert_allclose(joined, whole, rtol=0, atol=1e-5)  # float rounding: a convolution's algorithm may differ
    # Linear work: each piece decodes its own tokens, the left context and the look-ahead, never the prefix again.
    assert pieces.decoded_tokens <= tokens + (tokens // piece + 1) * (field.left + field.right + extra)


def test_audio_is_handed_out_once_a_piece_has_its_lookahead(decode: tuple[Decode, int], field: AudioField) -> None:
    run, hidden = decode
    states = np.random.default_rng(3).standard_normal((40, hidden)).astype(np.float32)
    pieces = PieceDecoder(run, field, piece=4, lookahead=field.right)
    assert pieces.add(states[: 3 + field.right]).size == 0  # one token short of the first piece's look-ahead
    assert pieces.add(states[3 + field.right : 4 + field.right]).size == 4 * field.samples_per_token
