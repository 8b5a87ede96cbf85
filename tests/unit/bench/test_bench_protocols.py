"""bench.listening.protocols' summary, turn order and driver-line parsing, and where its driver says the first sentence
ends, on made-up runs (no servers, no clocks)."""

from __future__ import annotations

import math

import pytest

from bench.listening.protocols import PATHS, REFERENCE, order, parse_line, summarize, table
from tests.agents.first_audio_clients import first_sentence_words


def run(seconds: float | None, error: str | None = None) -> dict[str, object]:
    return {"first_audio_after_complete_s": seconds, "error": error}


def test_each_path_is_compared_with_the_reference_median_and_failed_runs_are_counted_not_timed() -> None:
    runs = {
        REFERENCE: [run(0.30), run(0.50), run(0.40)],
        "livekit-elevenlabs": [run(0.42), run(0.46), run(9.0, "boom")],
        "pipecat-cartesia": [run(0.70), run(None)],
    }
    reference, livekit, pipecat = summarize(runs)
    assert (reference.median_s, reference.vs_reference_s, reference.spread_s) == pytest.approx((0.40, 0.0, 0.20))
    assert (livekit.n, livekit.failed) == (2, 1)
    assert livekit.median_s == pytest.approx(0.44)
    assert livekit.vs_reference_s == pytest.approx(0.04) and livekit.within_target
    assert (pipecat.n, pipecat.failed, pipecat.spread_s) == (1, 1, 0.0)
    assert pipecat.vs_reference_s == pytest.approx(0.30) and not pipecat.within_target


def test_a_path_with_no_figure_or_no_reference_is_not_within_the_target() -> None:
    (reference, other) = summarize({REFERENCE: [run(None, "no audio")], "livekit-cartesia": [run(0.1)]})
    assert reference.n == 0 and math.isnan(reference.median_s)
    assert math.isnan(other.vs_reference_s) and not other.within_target
    assert "| livekit-cartesia | 1 | 0 | 100 | 100–100 | 0 | – | no | – | – |" in table([reference, other])


def test_a_path_splits_into_the_clients_own_hold_and_the_time_after_its_socket_sent_the_sentence() -> None:
    runs = {
        REFERENCE: [run(0.40) | {"client_hold_s": 0.0}],
        "pipecat-elevenlabs": [run(0.60) | {"client_hold_s": 0.15}, run(0.80) | {"client_hold_s": 0.25}, run(0.7)],
    }
    reference, pipecat = summarize(runs)
    assert (reference.hold_median_s, reference.after_sent_median_s) == pytest.approx((0.0, 0.40))
    assert (pipecat.hold_median_s, pipecat.after_sent_median_s) == pytest.approx((0.20, 0.50))
    assert pipecat.median_s == pytest.approx(0.70)


def test_turns_are_round_robin_every_path_once_a_round_the_first_moving_on() -> None:
    rounds = [order(n) for n in range(len(PATHS) + 1)]
    assert all(sorted(turns) == sorted(PATHS) for turns in rounds)
    assert [turns[0] for turns in rounds] == [*PATHS, PATHS[0]]


def test_the_driver_line_is_the_last_json_object_on_stdout() -> None:
    stdout = 'a log line\n{"first_audio_after_complete_s": 1, "error": null}\n{"first_audio_after_complete_s": 0.2}\n'
    assert parse_line(stdout) == {"first_audio_after_complete_s": 0.2}
    assert parse_line("Traceback ...\n")["error"] == "the driver printed no result"


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("The train was late. Everyone waited.", 4),
        ('He said "stop!" and left.', 3),
        ("Is it late? Yes.", 3),
        ("No sentence end here", 4),
        ("Dr. Smith is here.", 1),  # no abbreviation list: the driver's texts have none
    ],
)
def test_the_first_sentence_ends_at_the_first_word_ending_a_sentence(text: str, words: int) -> None:
    assert first_sentence_words(text.split(" ")) == words
