"""ttsq writes a speaker string with ChatTTS's preset and a small dictionary: the same bytes as ChatTTS's own
``Speaker._encode``, which its ``_decode`` reads back."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ChatTTS.model.speaker import Speaker
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ttsq.inference.engines.speaker_string import encode_speaker


@settings(max_examples=200, deadline=None)
@given(
    arrays(
        np.float16,
        st.sampled_from([1, 2, 64, 768, 769, 4096, 32768]),
        elements=st.floats(width=16, allow_nan=False) | st.sampled_from([0.0, -0.0, 1.0]),
    )
)
def test_a_speaker_string_is_chattts_own_bytes(vector: np.ndarray) -> None:
    ours = encode_speaker(vector)
    assert ours == Speaker._encode(torch.from_numpy(vector))
    assert np.array_equal(Speaker._decode(ours), vector, equal_nan=True)


def test_draws_like_chattts_are_chattts_own_bytes() -> None:
    """Vectors drawn as ChatTTS draws a voice (a normal vector, scaled and shifted per dimension), many of them."""
    rng = np.random.default_rng(2026)
    std, mean = rng.uniform(0.5, 5, 768), rng.normal(0, 2, 768)
    for _ in range(300):
        vector = (rng.standard_normal(768) * std + mean).astype(np.float16)
        assert encode_speaker(vector) == Speaker._encode(torch.from_numpy(vector))


def test_a_vector_larger_than_the_dictionary_is_refused() -> None:
    with pytest.raises(ValueError, match="larger than the dictionary"):
        encode_speaker(np.zeros(32769, dtype=np.float16))
