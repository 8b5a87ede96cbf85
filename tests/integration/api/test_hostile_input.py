"""Hostile input gets a 4xx that names the field, never a 500, and nothing is logged above WARNING.

The hostile requests a tester sent (each answered 500, with two ERROR tracebacks, before ``ttsq.api.bodies``), the
content types, the order of the checks (a caller without a valid key gets its 401 first), and the whole fixed
hostile-JSON corpus of the fuzz suite (``tests/fuzz/hostile.py``) on every route — through the real app, in
process, where an exception would surface in the test. ``tests/fuzz/test_fuzz_api.py`` sends the same corpus
to real uvicorn processes.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from redis.asyncio import Redis

from tests.conftest import api_client
from tests.fuzz import hostile
from tests.integration.api.test_security import bearer, new_key
from ttsq.api.errors import install_error_handlers
from ttsq.api.headers import declared_length

ISSUE_CASES = [
    ("/v1/tts/submit", b'{"text":"hi","temperature":NaN}', "temperature"),
    ("/v1/tts/submit", b'{"text":"hi","temperature":Infinity}', "temperature"),
    ("/v1/tts/submit", b'{"text":"hi","seed":1e400}', "seed"),
    ("/v1/tts/submit", b'{"text":"\\ud800"}', "text"),
    ("/v1/tts/submit", b'{"text":"hi","voice":"\\ud800"}', "voice"),
    ("/v1/tts/submit", b'{"text":"hi","format":"\\ud800"}', "format"),
    ("/v1/tts/submit", b'{"text":"hi\\u0000there"}', "text"),
    ("/v1/tts/submit", b'{"text":"hi","seed":' + b"7" * 5000 + b"}", "seed"),
    ("/v1/tts/submit", b'{"text":"hi","seed":1,"seed":2}', "seed"),
    ("/v1/tts/submit", b'{"text":"hi","voice":' + b"[" * 20_000 + b"]" * 20_000 + b"}", "voice"),
    ("/v1/tts/submit", b'{"text":"hi","voice":[' + b"0," * 1000 + b"0]}", "voice"),
    ("/v1/voices", b'{"name":"x","seed":NaN}', "seed"),
    ("/v1/voices", b'{"name":"\\ud800","seed":1}', "name"),
    ("/v1/voices", b'{"name":"x","embedding":"\\ud800"}', "embedding"),
]
"""The tester's hostile requests, and one of each other kind: (route, body, the field the answer must name)."""


def above_warning(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [f"{record.levelname} {record.getMessage()}" for record in caplog.records if record.levelno > logging.WARNING]


@pytest.mark.parametrize(("path", "body", "field"), ISSUE_CASES)
async def test_hostile_values_are_a_422_naming_the_field(
    redis: Redis, make_settings: Any, caplog: pytest.LogCaptureFixture, path: str, body: bytes, field: str
) -> None:
    async with api_client(make_settings()) as (client, _):
        answer = await client.post(path, content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert [error["loc"] for error in answer.json()["detail"]] == [["body", field]]
    assert above_warning(caplog) == []


async def test_the_openai_route_answers_hostile_values_with_a_400_naming_the_field(
    redis: Redis, make_settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async with api_client(make_settings()) as (client, _):
        for body, field in (
            (b'{"model":"tts-1","input":"\\ud800","voice":"alloy"}', "input"),
            (b'{"model":"tts-1","input":"hi","voice":"alloy","speed":NaN}', "speed"),
            (b'{"model":"tts-1","input":"hi","voice":["ok",Infinity]}', "voice"),
        ):
            answer = await client.post("/v1/audio/speech", content=body, headers={"content-type": "application/json"})
            assert answer.status_code == 400, answer.text
            error = answer.json()["error"]
            assert error["param"] == field and error["message"].startswith(f"{field}: ")
            assert error["type"] == "invalid_request_error"
    assert above_warning(caplog) == []


async def test_a_body_sent_as_anything_but_json_in_utf8_is_a_415(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _):
        for content_type in ("text/plain", "application/x-www-form-urlencoded", "application/json; charset=utf-16", None):
            headers = {"content-type": content_type} if content_type else {}
            answer = await client.post("/v1/tts/submit", content=b'{"text":"hi"}', headers=headers)
            assert answer.status_code == 415, (content_type, answer.text)
            assert "Content-Type must be application/json" in answer.json()["detail"]
        speech = await client.post("/v1/audio/speech", content=b"input=hi", headers={"content-type": "text/plain"})
        assert speech.status_code == 415 and "Content-Type" in speech.json()["error"]["message"]
        utf8 = {"content-type": "application/json; charset=UTF-8"}
        fine = await client.post("/v1/tts/submit", content=b'{"text":"hi"}', headers=utf8)
        assert fine.status_code == 202, fine.text


async def test_a_caller_without_a_valid_key_learns_nothing_of_its_body(redis: Redis, make_settings: Any) -> None:
    """The key is checked first: 401 without one, 403 without the scope, and only then 422 for the body."""
    hostile_voice = b'{"name":"x","seed":NaN}'
    json_type = {"content-type": "application/json"}
    async with api_client(make_settings(auth="on")) as (client, _):
        assert (await client.post("/v1/voices", content=hostile_voice, headers=json_type)).status_code == 401
        assert (await client.post("/v1/voices", content=b"x", headers={"content-type": "text/plain"})).status_code == 401
        user, admin = await new_key(redis, "tts"), await new_key(redis, "admin")
        assert (await client.post("/v1/voices", content=hostile_voice, headers={**json_type, **bearer(user)})).status_code == 403
        refused = await client.post("/v1/voices", content=hostile_voice, headers={**json_type, **bearer(admin)})
        assert refused.status_code == 422 and refused.json()["detail"][0]["loc"] == ["body", "seed"]


@pytest.mark.parametrize("auth", ["auto", "on"])
async def test_the_fixed_hostile_corpus_on_every_route(
    redis: Redis, make_settings: Any, caplog: pytest.LogCaptureFixture, auth: str
) -> None:
    async with api_client(make_settings(auth=auth)) as (client, _):
        key = await new_key(redis, "admin") if auth == "on" else None
        spec = (await client.get("/openapi.json", headers=bearer(key) if key else {})).json()
        corpus = hostile.cases(spec)
        assert {(case.method, case.path) for case in corpus if case.content is not None and case.must_refuse} == set(
            hostile.BASE_BODIES
        )
        outcome = await hostile.send(client, corpus, key=key)
    assert outcome.problems == [], "\n".join(outcome.problems[:20])
    assert outcome.server_errors == 0 and outcome.sent == len(corpus)
    assert above_warning(caplog) == []


@pytest.mark.parametrize("auth", ["auto", "on"])
async def test_inputs_that_cost_work_are_refused_naming_their_field(
    redis: Redis, make_settings: Any, caplog: pytest.LogCaptureFixture, auth: str
) -> None:
    """The costly inputs (:func:`tests.fuzz.hostile.abuse_cases`): pathological recordings, an oversize form,
    regexes that compile to gigabytes or match nothing, texts of digits that read aloud for minutes."""
    async with api_client(make_settings(auth=auth)) as (client, _):
        key = await new_key(redis, "admin") if auth == "on" else None
        spec = (await client.get("/openapi.json", headers=bearer(key) if key else {})).json()
        corpus = hostile.abuse_cases(spec)
        assert len(corpus) == 9 + 2 + 7 + 2, "every kind reaches its operation"
        outcome = await hostile.send(client, corpus, key=key)
    assert outcome.problems == [], "\n".join(outcome.problems)
    assert outcome.server_errors == 0 and outcome.statuses[413] == 1
    assert above_warning(caplog) == []


async def test_an_echo_that_json_cannot_carry_is_made_safe_not_a_500() -> None:
    """The 422 echoes what was sent; whatever a validator echoes — a non-finite number, a lone surrogate, bytes that are
    not UTF-8 — the answer is still strict JSON in UTF-8 (the cause of the hostile requests' 500s, behind the strict reader)."""
    app = FastAPI()
    install_error_handlers(app, 5, lambda outcome: None)

    @app.get("/echo")
    async def echo() -> None:
        hostile_input = {"n": float("nan"), "s": "a\ud800b", "b": b"\xff\xfe", "i": [float("-inf")]}
        raise RequestValidationError([{"type": "value_error", "loc": ("body", "f\udfff"), "msg": "no", "input": hostile_input}])

    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client:
        answer = await client.get("/echo")
    assert answer.status_code == 422
    error = answer.json()["detail"][0]
    assert error["loc"] == ["body", "f\\udfff"]
    assert error["input"] == {"n": "nan", "s": "a\\ud800b", "b": "\ufffd\ufffd", "i": ["-inf"]}


@pytest.mark.parametrize(
    ("values", "length"),
    [
        ([b"200000000"], 200_000_000),
        ([b"200000000 "], 200_000_000),
        ([b"\t200000000 "], 200_000_000),
        ([b"42, 42"], 42),
        ([b"42", b"42"], 42),
        ([b"42", b"43"], None),
        ([b"4 2"], None),
        ([b"-1"], None),
        ([b"+42"], None),
        ([b"\xd9\xa4"], None),
        ([b"9" * 40], None),
        ([], None),
    ],
)
def test_content_length_is_read_as_http_reads_it(values: list[bytes], length: int | None) -> None:
    """RFC 9110: the whitespace around a field value is not part of it, and a list of one length declares it; anything
    else declares no length (the body is then counted as it streams)."""
    assert declared_length(values) == length
