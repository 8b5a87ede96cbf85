"""Which drawn voices are kept: the Euclidean distance to the nearest existing voice, farthest first."""

from __future__ import annotations

import numpy as np

from tests.unit.api.test_voices import embedding
from ttsq.domain.draw import rank, speaker_vector


def test_an_embedding_string_decodes_to_its_vector() -> None:
    values = np.linspace(-2, 2, 64)
    assert np.allclose(speaker_vector(embedding(values)), values.astype(np.float16))


def test_the_candidates_farthest_from_their_nearest_voice_are_kept_farthest_first() -> None:
    origin, far = embedding(np.zeros(64)), embedding(np.full(64, 10.0))
    existing = {"a": origin, "b": far}
    near_a = embedding(np.full(64, 1.0))  # 8 from a
    between = embedding(np.full(64, 5.0))  # 40 from both
    near_b = embedding(np.full(64, 9.5))  # 4 from b
    kept = rank([near_a, between, None, near_b], existing, keep=3)
    assert [(r.index, r.nearest) for r in kept] == [(1, "a"), (0, "a"), (3, "b")]
    assert np.isclose(kept[0].distance or 0, 40.0) and np.isclose(kept[1].distance or 0, 8.0)


def test_an_unmeasured_candidate_comes_last_and_another_models_voice_is_not_compared() -> None:
    other_model = {"big": embedding(np.zeros(768))}
    kept = rank([None, embedding(np.ones(64))], other_model, keep=2)
    assert [(r.index, r.nearest, r.distance) for r in kept] == [(0, None, None), (1, None, None)]
