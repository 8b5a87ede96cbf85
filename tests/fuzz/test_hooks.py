"""The project's own fuzzing checks (:mod:`tests.fuzz.hooks`) catch what they are for, and only that."""

from __future__ import annotations

import sys

import pytest

from tests.fuzz.hooks import ROOT, internal_details, is_cancel_read, is_semantic_refusal


@pytest.mark.parametrize(
    "answer",
    [
        'Traceback (most recent call last):\n  File "/srv/app.py", line 3, in <module>',
        '{"detail": "boom at File \\"x.py\\", line 12"}',
        f'{{"detail": "cannot open {ROOT}/var/cache/ab"}}',
        f'{{"detail": "{sys.prefix}/lib/python3.11/site-packages/fastapi/routing.py"}}',
    ],
)
def test_a_stack_trace_or_an_internal_path_is_caught(answer: str) -> None:
    assert internal_details(answer, sent="{}") is not None


def test_a_plain_error_and_an_echo_of_the_input_are_not_leaks() -> None:
    assert internal_details('{"detail": "internal error; quote request id 7f when reporting it"}', sent="{}") is None
    assert internal_details("unknown voice 'site-packages'", sent='{"voice": "site-packages"}') is None


@pytest.mark.parametrize(
    ("status", "body", "semantic"),
    [
        (422, {"detail": [{"loc": ["body", "voice"], "msg": "unknown voice 'x'; available: zh_male"}]}, True),
        (422, {"detail": [{"loc": ["body", "text"], "msg": "text is empty after removing invisible characters"}]}, True),
        (422, {"detail": [{"loc": ["body", "speed"], "msg": "expected an integer", "type": "int_type", "input": 6.0}]}, True),
        (400, {"error": {"param": "voice", "message": "voice: 'x' is not supported; use one of: alloy"}}, True),
        (422, {"detail": [{"loc": ["body", "speed"], "msg": "expected an integer", "type": "int_type", "input": 6.5}]}, False),
        (422, {"detail": [{"loc": ["body", "text"], "msg": "text is 41 characters long as sent; the limit is 40"}]}, False),
        (422, {"detail": [{"loc": ["body", "seed"], "msg": "give exactly one of seed or embedding"}]}, False),
        (400, {"error": {"param": "voice", "message": "voice: String should have at least 1 character"}}, False),
        (422, {"detail": [{"loc": ["body", "voices.Alice"], "msg": "unknown voice 'x'; available: zh_male"}]}, True),
        (422, {"detail": [{"loc": ["body", "voices.Alice"], "msg": "String should have at least 1 character"}]}, False),
        (422, {"detail": [{"loc": ["query", "sample_rate"], "msg": "opus at 11025 Hz is not supported; opus is made at"}]}, True),
        (500, {"detail": "internal error"}, False),
    ],
)
def test_only_refusals_no_schema_can_state_are_excused(status: int, body: object, semantic: bool) -> None:
    assert is_semantic_refusal(status, body) is semantic


def test_only_a_cancelled_tasks_status_is_excused_from_use_after_free() -> None:
    """DELETE /v1/tts/tasks/{id} cancels; a deleted voice, or any other read after a DELETE, must be 404."""
    assert is_cancel_read("GET /v1/tts/tasks/{task_id}")
    assert not is_cancel_read("GET /v1/voices/{name}")
    assert not is_cancel_read("GET /v1/tts/result/{task_id}")
