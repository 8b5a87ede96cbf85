"""``make contended``'s verdict (``python -m bench.listening.contended --check``): what makes a variant's run fail."""

from __future__ import annotations

from typing import Any

from bench.listening.contended import broken


def result(**changes: Any) -> dict[str, Any]:
    clean = {
        "variant": "slack",
        "sessions": 40,
        "ended_well": 40,
        "waited": 12,
        "underruns_listeners": 0,
        "underruns_metric": 0.0,
        "worst_gap_s": 0.0,
        "errors": [],
    }
    return clean | changes


def test_a_run_where_sessions_waited_but_every_one_played_through_passes() -> None:
    assert broken(result(waited=31)) == []


def test_a_gap_heard_by_a_listener_fails_the_run_even_when_the_worker_counted_none() -> None:
    assert broken(result(underruns_listeners=1, worst_gap_s=0.4)) == ["1 underruns heard by the listeners (worst gap 0.4 s)"]


def test_a_gap_the_worker_counted_fails_the_run_even_when_no_listener_heard_it() -> None:
    assert broken(result(underruns_metric=2.0)) == ["ttsq_stream_underruns_total counted 2.0"]


def test_a_session_that_did_not_end_well_fails_the_run_with_its_error() -> None:
    assert broken(result(ended_well=39, errors=["4429 busy"])) == ["1 of 40 sessions did not end well", "error: 4429 busy"]
