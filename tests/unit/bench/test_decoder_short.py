"""``bench.engine.decoder``'s short requests on the tiny checkpoint: the same requests through ttsq's batcher (nobody
listening, then listened) and ChatTTS's loop, with the settings the section names, and the ratios it reports."""

from __future__ import annotations

import dataclasses
from typing import Any

from bench.engine.decoder import checkpoint, mixed_ratios, short_requests
from bench.engine.decoder_traffic import SENTENCES, SHORT_CHUNK_CHARS, SHORT_SENTENCES, SHORT_TOKENS, requests_of, traffic
from ttsq.domain.text import split_sentences


def test_short_requests_run_the_same_requests_through_both_engines_and_report_both_ratios(tiny_checkpoint_dir: Any) -> None:
    point = dataclasses.replace(checkpoint("tiny", quick=True), short_requests=3)
    rows = short_requests(point, slots=8)
    assert [(row["engine"], row["pieces"]) for row in rows] == [("ttsq", False), ("chattts", False), ("ttsq, pieces", True)]
    assert all(row["requests"] == 3 for row in rows)
    assert len({row["rows"] for row in rows}) == 1  # every engine spoke the same chunks
    ratios = mixed_ratios("tiny", rows)
    assert set(ratios) == {
        f"tiny: short requests {unit}, ttsq {who} / ChatTTS's loop"
        for unit in ("jobs/s", "jobs per CPU-second")
        for who in ("(nobody listens)", "listened (pieces)")
    }


def test_a_short_request_is_four_sentences_of_its_own_voice_seed_and_sampling_nobody_listens_to(tiny_engine: Any) -> None:
    make = requests_of(traffic("short", tiny_engine))
    made = [make(n) for n in range(6)]
    assert all(not request.pieces for request in made)
    assert len({request.speaker for request in made}) == len({request.seed for request in made}) == 6
    assert len({request.sampling for request in made}) > 1
    for request in made:
        assert _sentences(request.text) == SHORT_SENTENCES
        assert SHORT_SENTENCES <= len(split_sentences(request.text, SHORT_CHUNK_CHARS)) <= 3 * SHORT_SENTENCES
    assert SHORT_TOKENS == 48


def _sentences(text: str) -> int:
    """How many of the benchmark's sentences ``text`` is, joined by spaces."""
    count = 0
    while text:
        sentence = next(s for s in SENTENCES if text.startswith(s))
        text = text[len(sentence) :].lstrip(" ")
        count += 1
    return count
