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
        (422, {"detail": [{"loc": ["body", "style"], "msg": "unknown style 'x'; available: calm, chat"}]}, True),
        (422, {"detail": [{"loc": ["body", "lines.3.style"], "msg": "unknown style 'x'; available: calm"}]}, True),
        (422, {"detail": [{"loc": ["body", "voices.0"], "msg": "unknown voice '0'; available: zh_female"}]}, True),
        (422, {"detail": [{"loc": ["body", "voices"], "msg": "no voice for 'Alice': every speaker needs one"}]}, True),
        (422, {"detail": [{"loc": ["body", "script"], "msg": "line 1 names no speaker: write each line as"}]}, True),
        (422, {"detail": [{"loc": ["body", "inputs.0.text"], "msg": "line 1 (A): text is empty"}]}, True),
        (422, {"detail": [{"loc": ["body", "lines.0"], "msg": "this line's sampling with the dialogue's: no"}]}, False),
        (400, {"error": {"param": "break", "message": "break: expected an integer (a JSON number), got the number 0.0"}}, True),
        (400, {"error": {"param": "break", "message": "break: expected an integer (a JSON number), got the number 0.5"}}, False),
        (422, {"detail": [{"loc": ["body", "oral"], "msg": "a prosody level steers ChatTTS's refine pass"}]}, False),
        (422, {"detail": [{"loc": ["body", "speed"], "msg": "expected an integer", "type": "int_type", "input": 6.5}]}, False),
        (422, {"detail": [{"loc": ["body", "text"], "msg": "text is 41 characters long as sent; the limit is 40"}]}, False),
        (422, {"detail": [{"loc": ["body", "seed"], "msg": "give exactly one of seed or embedding"}]}, False),
        (400, {"error": {"param": "voice", "message": "voice: String should have at least 1 character"}}, False),
        (422, {"detail": [{"loc": ["body", "voices.Alice"], "msg": "unknown voice 'x'; available: zh_male"}]}, True),
        (422, {"detail": [{"loc": ["body", "voices.Alice"], "msg": "String should have at least 1 character"}]}, False),
        (422, {"detail": [{"loc": ["query", "sample_rate"], "msg": "opus at 11025 Hz is not supported; opus is made at"}]}, True),
        (422, {"detail": [{"loc": ["body", "ssml"], "msg": "line 1, column 1: ssml is not well-formed XML: syntax error"}]}, True),
        (422, {"detail": [{"loc": ["body", "ssml"], "msg": "ssml has nothing to speak (no letter, digit or ideograph)"}]}, True),
        (422, {"detail": [{"loc": ["body", "ssml"], "msg": "ssml is 11 characters long; the limit is 10"}]}, False),
        (422, {"detail": [{"loc": ["body", "ssml"], "msg": "send `text` or `ssml`, not both"}]}, False),
        (422, {"detail": [{"loc": ["body", "voices.Alice"], "msg": "unknown voice 'anna'; available: zh_female"}]}, True),
        (422, {"detail": [{"loc": ["body", "inputs.0.text"], "msg": "line 1 (zh_female): text is empty"}]}, True),
        (422, {"detail": [{"loc": ["query", "output_format"], "msg": "opus at 44100 Hz is not supported; opus is made at"}]}, True),
        (422, {"detail": [{"loc": ["query", "output_format"], "msg": "unknown output_format 'x'; use one of pcm_8000"}]}, False),
        (
            400,
            {
                "error": {
                    "code": 400,
                    "message": "audioConfig.sampleRateHertz: expected an integer (a JSON number without a fraction, not a "
                    "string), got the number 26106.0",
                    "status": "INVALID_ARGUMENT",
                    "details": [
                        {
                            "@type": "type.googleapis.com/google.rpc.BadRequest",
                            "fieldViolations": [
                                {
                                    "field": "audioConfig.sampleRateHertz",
                                    "description": "expected an integer (a JSON number without a fraction, not a string), "
                                    "got the number 26106.0",
                                }
                            ],
                        }
                    ],
                }
            },
            True,
        ),
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
