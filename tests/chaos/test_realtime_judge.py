"""The realtime chaos runner's judge (:mod:`tests.chaos.realtime`): what counts as a hole, and what does not."""

from __future__ import annotations

import random

from tests.chaos.realtime import SessionRun, SessionSpec, describe_hole, judge

SPEC = SessionSpec("One sentence here is long enough.", "zh_female", 7)
WHOLE = random.Random(1).randbytes(48_000)  # 24,000 samples: one second


def run(audio: bytes, close_code: int | None = 1000, *events: dict[str, str]) -> SessionRun:
    return SessionRun(SPEC, bytearray(audio), list(events), close_code)


def test_a_session_that_ended_well_is_equal_only_with_every_sample_of_the_text() -> None:
    assert judge(run(WHOLE), WHOLE) == "equal"
    assert judge(run(WHOLE[:24_000] + WHOLE[26_000:]), WHOLE) == "hole", "a piece missing from the middle"
    assert judge(run(WHOLE[:-2]), WHOLE) == "hole", "a cut-off end that said nothing"
    assert "at 0.50 s" in describe_hole(run(WHOLE[:24_000] + WHOLE[26_000:]), WHOLE)


def test_a_session_that_said_it_went_wrong_is_an_error_whatever_its_audio() -> None:
    assert judge(run(WHOLE[:100], 1000, {"type": "error", "code": "synthesis_failed"}), WHOLE) == "error"
    assert judge(run(WHOLE[:100], 1013), WHOLE) == "error"
    crashed = run(b"", None)
    crashed.crashed = "ConnectionRefusedError: [Errno 111]"
    assert judge(crashed, WHOLE) == "error"
