"""The OpenAPI document is a contract: what it declares valid is served, what it declares invalid is refused,
and every answer is one it documents.

Each test pins a finding of the schemathesis fuzzing (``tests/fuzz``) or of a user, so that it stays
fixed without a fuzzer run: the event stream of an unknown task, the text limits and the voices
body's "one of seed or embedding" missing from the schema, lax types (``refine_text: 0`` taken as
false), the OpenAI ``voice`` declared valid when empty, 405s whose ``Allow`` left methods out, and
answers (statuses, headers, event streams) the schema did not describe; and, from ``make fuzz``, a body
over the size limit (413, whatever it holds) and a cancelled task that stays readable after its DELETE.
"""

from __future__ import annotations

from typing import Any

import httpx
import jsonschema_rs
import pytest
from redis.asyncio import Redis

from settings import Settings
from tests.conftest import api_client
from tests.integration.api.test_security import new_key
from tests.support.service import Service
from ttsq.store.task_ids import TaskIdSigner

SECRET = "contract-tests-secret-0123"


async def spec(client: httpx.AsyncClient, key: str | None = None) -> dict[str, Any]:
    """The deployment's OpenAPI document (with ``key``: where keys are required, so is one to read it)."""
    answer = await client.get("/openapi.json", headers={"Authorization": f"Bearer {key}"} if key else {})
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def body_validator(document: dict[str, Any], path: str, method: str = "post") -> Any:
    """A JSON Schema validator for an operation's request body, its references resolved in the whole document."""
    schema = document["paths"][path][method]["requestBody"]["content"]["application/json"]["schema"]
    return jsonschema_rs.validator_for({**schema, "components": document["components"]})


# ---- GET /v1/tts/events/{id}: 404 before streaming ---------------------------------------------


async def test_events_of_an_unknown_task_are_a_plain_404_not_a_broken_stream(redis: Redis, make_settings: Any) -> None:
    """An id that is signed (so it reaches Redis) but was never issued, and ids that are not ids at all:
    every one is 404 JSON, like the other task routes, and never a 200 event stream that then breaks."""
    never_issued = TaskIdSigner(SECRET.encode()).new()
    async with api_client(make_settings(task_id_secret=SECRET)) as (client, _):
        for task_id in (never_issued, "not-a-task", "0" * 300):
            for route in ("events", "tasks", "result", "stream"):
                answer = await client.get(f"/v1/tts/{route}/{task_id}")
                assert answer.status_code == 404, (route, task_id, answer.status_code)
                assert answer.headers["content-type"] == "application/json"
                assert "no task" in answer.json()["detail"]


async def test_events_of_a_task_stream_its_status_as_documented(client: httpx.AsyncClient) -> None:
    """A cancelled task's stream is one final event (the in-process transport reads a stream to its end)."""
    task = (await client.post("/v1/tts/submit", json={"text": "hello", "seed": 5})).json()["task_id"]
    assert (await client.delete(f"/v1/tts/tasks/{task}")).status_code == 200
    answer = await client.get(f"/v1/tts/events/{task}")
    assert answer.status_code == 200 and answer.headers["content-type"].startswith("text/event-stream")
    entry_id, name, data = answer.text.split("\n")[:3]
    assert entry_id.startswith("id: ") and name == "event: status"
    event = httpx.Response(200, content=data.removeprefix("data: ")).json()
    assert event["task_id"] == task and event["status"] == "cancelled"
    document = await spec(client)
    documented = document["paths"]["/v1/tts/events/{task_id}"]["get"]["responses"]["200"]["content"]
    status_event = documented["text/event-stream"]["schema"]["oneOf"][0]
    assert status_event["properties"]["event"] == {"const": "status"}
    data_schema = {**status_event["properties"]["data"]["contentSchema"], "components": document["components"]}
    assert jsonschema_rs.validator_for(data_schema).is_valid(event), event


async def test_a_cancelled_task_stays_readable_as_its_delete_documents(client: httpx.AsyncClient) -> None:
    """``DELETE /v1/tts/tasks/{id}`` is a cancel, so the status read after it is 200 ``cancelled``, not 404. The fuzzer's
    use-after-free check reads every 2xx DELETE as a deletion; it is excused for this one read (tests/fuzz/hooks.py)
    because the operation says so."""
    task = (await client.post("/v1/tts/submit", json={"text": "hello", "seed": 6})).json()["task_id"]
    assert (await client.delete(f"/v1/tts/tasks/{task}")).status_code == 200
    status = await client.get(f"/v1/tts/tasks/{task}")
    assert status.status_code == 200 and status.json()["status"] == "cancelled"
    cancel = (await spec(client))["paths"]["/v1/tts/tasks/{task_id}"]["delete"]
    assert "stays readable" in cancel["description"]


@pytest.mark.e2e
def test_an_event_stream_that_loses_redis_ends_with_an_error_event_not_a_broken_stream(service: Service) -> None:
    """Over a real uvicorn: once the first event is out, the status is 200 and cannot change; a Redis outage longer than
    ``LISTEN_OUTAGE_S`` then ends the stream with a documented ``error`` event, cleanly (a broken chunked stream raises
    in the client)."""
    task = service.submit(text="hello", seed=9)
    with httpx.stream("GET", f"{service.api_url}/v1/tts/events/{task}", timeout=30) as stream:
        lines = stream.iter_lines()
        assert next(lines).startswith("id: ") and next(lines) == "event: status" and '"queued"' in next(lines)
        service.redis.stop()
        rest = [line for line in lines if line]
    assert rest == ["event: error", 'data: {"detail": "the job store (Redis) became unreachable; reconnect shortly"}']


# ---- text limits and the voices body in the schema -----------------------------------------------


async def test_the_text_limits_are_declared_and_the_api_refuses_exactly_what_they_refuse(redis: Redis, make_settings: Any) -> None:
    """maxLength is MAX_TEXT_CHARS (a setting; OPENAI_MAX_INPUT_CHARS on OpenAI's speech; MAX_DOCUMENT_CHARS for a
    document), counted on the text as
    sent: a text over it is refused even when cleaning would bring it under (it used to pass, so the schema could
    not be true)."""
    async with api_client(make_settings(max_text_chars=10, openai_max_input_chars=12)) as (client, _):
        document = await spec(client)
        text = document["components"]["schemas"]["SubmitRequest"]["properties"]["text"]
        # A document may be MAX_DOCUMENT_CHARS long; any other text MAX_TEXT_CHARS (the body's anyOf).
        assert (text["minLength"], text["maxLength"]) == (1, 200_000)
        assert {"properties": {"text": {"maxLength": 10}}} in document["components"]["schemas"]["SubmitRequest"]["anyOf"]
        speech_input = document["components"]["schemas"]["SpeechRequest"]["properties"]["input"]
        assert (speech_input["minLength"], speech_input["maxLength"]) == (1, 12)
        validator = body_validator(document, "/v1/tts/submit")
        for candidate, served in (("a" * 10, True), ("a" * 10 + "\u200b", False), ("a" * 11, False), ("", False)):
            assert validator.is_valid({"text": candidate, "seed": 1}) is served, candidate
            answer = await client.post("/v1/tts/submit", json={"text": candidate, "seed": 1})
            assert answer.status_code == (202 if served else 422), (candidate, answer.text)
        longer = {"text": "Eleven or more.", "seed": 1, "document": True}
        assert validator.is_valid(longer) and (await client.post("/v1/tts/submit", json=longer)).status_code == 202
        too_long = await client.post("/v1/tts/submit", json={"text": "a" * 9 + "\u200b\u200b", "seed": 1})
        assert too_long.json()["detail"][0]["msg"] == "text is 11 characters long as sent; the limit is 10"


@pytest.mark.parametrize(
    ("body", "served"),
    [
        ({"name": "by-seed", "seed": 7}, True),
        ({"name": "by-seed-null-embedding", "seed": 7, "embedding": None}, True),
        ({"name": "neither"}, False),
        ({"name": "both-null", "seed": None, "embedding": None}, False),
        ({"name": "both", "seed": 7, "embedding": "abc"}, False),
    ],
)
async def test_the_voices_body_declares_exactly_one_of_seed_or_embedding(
    client: httpx.AsyncClient, body: dict[str, Any], served: bool
) -> None:
    validator = body_validator(await spec(client), "/v1/voices")
    assert validator.is_valid(body) is served
    answer = await client.post("/v1/voices", json=body)
    if served:
        assert answer.status_code == 201, answer.text
    else:
        assert answer.status_code == 422 and "exactly one of seed or embedding" in answer.text


async def test_voice_names_are_declared_as_the_api_checks_them(client: httpx.AsyncClient) -> None:
    validator = body_validator(await spec(client), "/v1/voices")
    for name, served in (("ok_name-1", True), ("", False), ("a" * 65, False), ("has space", False), ("naïve", False)):
        assert validator.is_valid({"name": name, "seed": 1}) is served, name
        answer = await client.post("/v1/voices", json={"name": name, "seed": 1})
        assert answer.status_code == (201 if served else 422), (name, answer.text)


# ---- strict types -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "said"),
    [
        ("refine_text", 0, "expected true or false (not 0, 1 or a string), got the number 0"),
        ("refine_text", "true", "expected true or false (not 0, 1 or a string), got the string 'true'"),
        ("speed", "5", "expected an integer (a JSON number without a fraction, not a string), got the string '5'"),
        ("speed", 5.0, "got the number 5.0"),
        ("seed", True, "got the boolean true"),
        ("temperature", "0.3", "expected a number (not a string or a boolean), got the string '0.3'"),
        ("voice", 1, "expected a string, got the number 1"),
    ],
)
async def test_request_types_are_strict_and_say_what_they_got(client: httpx.AsyncClient, field: str, value: Any, said: str) -> None:
    answer = await client.post("/v1/tts/submit", json={"text": "hi", field: value})
    assert answer.status_code == 422, answer.text
    (error,) = answer.json()["detail"]
    assert error["loc"] == ["body", field] and said in error["msg"], error


async def test_strict_types_still_take_an_integer_for_a_number(client: httpx.AsyncClient) -> None:
    answer = await client.post("/v1/tts/submit", json={"text": "hi", "seed": 3, "temperature": 1, "top_p": 1, "refine_text": True})
    assert answer.status_code == 202, answer.text


async def test_the_voices_and_openai_bodies_are_strict_too(client: httpx.AsyncClient) -> None:
    voice = await client.post("/v1/voices", json={"name": "strict", "seed": "12"})
    assert voice.status_code == 422 and voice.json()["detail"][0]["loc"] == ["body", "seed"]
    speech = await client.post("/v1/audio/speech", json={"model": "tts-1", "input": "hi", "voice": "alloy", "speed": "1"})
    assert speech.status_code == 400 and speech.json()["error"]["param"] == "speed"


# ---- the OpenAI voice ---------------------------------------------------------------------------


async def test_an_empty_openai_voice_is_declared_invalid_and_refused(client: httpx.AsyncClient) -> None:
    document = await spec(client)
    speech = document["components"]["schemas"]["SpeechRequest"]["properties"]
    assert speech["voice"]["minLength"] == 1
    assert speech["response_format"]["enum"] == ["mp3", "opus", "aac", "flac", "wav", "pcm"], "OpenAI's six, aac included"
    validator = body_validator(document, "/v1/audio/speech")
    assert not validator.is_valid({"model": "tts-1", "input": "hi", "voice": ""})
    answer = await client.post("/v1/audio/speech", json={"model": "tts-1", "input": "hi", "voice": ""})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "voice"


# ---- 405 and Allow ------------------------------------------------------------------------------


async def test_every_405_allows_exactly_the_methods_the_schema_lists_for_the_path(client: httpx.AsyncClient) -> None:
    """Starlette named only the first route of a path, so ``OPTIONS /v1/tts/tasks/{id}`` allowed GET but not DELETE."""
    document = await spec(client)
    for path, operations in document["paths"].items():
        concrete = path.replace("{task_id}", "some-task").replace("{name}", "some-voice")
        answer = await client.request("OPTIONS", concrete)
        assert answer.status_code == 405, path
        assert set(answer.headers["allow"].split(", ")) == {method.upper() for method in operations}, (path, answer.headers)
    assert (await client.request("PUT", "/v1/tts/tasks/x")).headers["allow"] == "GET, DELETE"
    assert (await client.request("PATCH", "/v1/voices")).headers["allow"] == "GET, POST"
    assert (await client.request("POST", "/static/app.js")).headers["allow"] == "GET, HEAD"


# ---- every status, header and body the API answers is documented -------------------------------


async def test_every_status_the_api_can_answer_is_documented_with_its_headers(client: httpx.AsyncClient) -> None:
    paths = (await spec(client))["paths"]
    submit = paths["/v1/tts/submit"]["post"]["responses"]
    assert {"200", "202", "401", "403", "413", "422", "429", "503"} <= set(submit)
    for status in ("200", "202", "429"):
        assert {"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset"} <= set(submit[status]["headers"]), status
    for status in ("429", "503"):
        assert submit[status]["headers"]["Retry-After"]["required"] is True
    assert submit["401"]["headers"]["WWW-Authenticate"]["required"] is True
    assert set(submit["202"]["links"]) == {"status", "result", "stream", "events", "cancel"}
    result = paths["/v1/tts/result/{task_id}"]["get"]["responses"]
    assert {"200", "202", "401", "403", "404", "409", "503"} <= set(result)
    assert result["202"]["headers"]["Retry-After"]["required"] is True
    assert "422" in paths["/v1/tts/stream/{task_id}"]["get"]["responses"], "?format= is validated"
    cancel = paths["/v1/tts/tasks/{task_id}"]["delete"]["responses"]
    assert {"200", "202", "404", "409"} <= set(cancel)
    voices = paths["/v1/voices"]["post"]["responses"]
    assert {"201", "409", "413", "422"} <= set(voices) and set(voices["201"]["links"]) == {"get", "delete"}
    speech = paths["/v1/audio/speech"]["post"]["responses"]
    assert {"200", "400", "401", "403", "413", "429", "500", "503"} <= set(speech)
    assert "text/event-stream" in speech["200"]["content"] and speech["200"]["headers"]["X-TTSQ-Task-Id"]["required"]


@pytest.mark.parametrize("path", ["/v1/tts/submit", "/v1/voices", "/v1/audio/speech"])
async def test_a_body_over_the_limit_is_the_documented_413_whatever_it_holds(client: httpx.AsyncClient, path: str) -> None:
    """``make fuzz`` sent an invalid body padded past MAX_BODY_BYTES: the answer is 413 before parsing, not a 422, and
    it is documented (its body too), so the fuzzing config counts 413 as a refusal (tests/fuzz/schemathesis.toml)."""
    document = await spec(client)
    documented = document["paths"][path]["post"]["responses"]["413"]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.validator_for({**documented, "components": document["components"]})
    defaults = Settings(_env_file=None)
    # A recording may be larger, and so may a document (MAX_DOCUMENT_CHARS, six bytes each at most in JSON).
    larger = {"/v1/voices": defaults.max_voice_body_bytes, "/v1/tts/submit": 6 * defaults.max_document_chars + 65_536}
    limit = larger.get(path, 65_536)
    answer = await client.post(path, json={"name": "x", "text": "hi", "seed": {"padding": "x" * (limit + 10)}})
    assert answer.status_code == 413, answer.text
    assert validator.is_valid(answer.json()), answer.json()


async def test_a_body_that_is_not_even_utf8_is_the_documented_422(client: httpx.AsyncClient) -> None:
    """FastAPI answered an undecodable body with an undocumented 400; it is malformed JSON like any other."""
    for path in ("/v1/tts/submit", "/v1/voices"):
        answer = await client.post(path, content=b"_\xff", headers={"content-type": "application/json"})
        assert answer.status_code == 422, (path, answer.text)
        assert answer.json()["detail"][0]["msg"] == "the request body is not JSON in UTF-8"
    speech = await client.post("/v1/audio/speech", content=b"_\xff", headers={"content-type": "application/json"})
    assert speech.status_code == 400 and speech.json()["error"]["type"] == "invalid_request_error"


async def test_the_schema_says_when_a_key_is_optional(redis: Redis, make_settings: Any) -> None:
    """Keys optional (here: served in-process, as on loopback): every secured operation also lists ``{}``."""
    async with api_client(make_settings()) as (client, _):
        submit = (await spec(client))["paths"]["/v1/tts/submit"]["post"]
        assert {} in submit["security"] and {"HTTPBearer": []} in submit["security"]
    async with api_client(make_settings(auth="on")) as (client, _):
        submit = (await spec(client, await new_key(redis, "tts")))["paths"]["/v1/tts/submit"]["post"]
        assert {} not in submit["security"] and {"HTTPBearer": []} in submit["security"]


async def test_every_operation_but_the_probes_offers_both_ways_of_presenting_a_key(redis: Redis, make_settings: Any) -> None:
    """The caller reads ``Authorization: Bearer`` and ``X-API-Key``; the schema must offer both, on every route that takes a
    caller (a fuzzer or a generated client sends only what the schema declares)."""
    async with api_client(make_settings(auth="on")) as (client, _):
        document = await spec(client, await new_key(redis, "tts"))
        for header in ({"X-API-Key": "not-a-key"}, {"Authorization": "Bearer not-a-key"}):  # both are read, both refuse
            answer = await client.get("/v1/voices", headers=header)
            assert answer.status_code == 401, (header, answer.text)
    schemes = document["components"]["securitySchemes"]
    assert schemes["HTTPBearer"] == {"type": "http", "scheme": "bearer", "description": schemes["HTTPBearer"]["description"]}
    assert schemes["APIKeyHeader"] == {"type": "apiKey", "in": "header", "name": "X-API-Key", "description": "An API key."}
    unsecured = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if operation.get("security") != [{"HTTPBearer": []}, {"APIKeyHeader": []}]:
                unsecured.append((path, method))
    assert sorted(unsecured) == [("/healthz", "get"), ("/readyz", "get")]


async def test_callback_url_is_offered_only_where_webhooks_are_configured(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings()) as (client, _):
        assert "callback_url" not in (await spec(client))["components"]["schemas"]["SubmitRequest"]["properties"]
    async with api_client(make_settings(webhook_secret="0123456789abcdef0123", public_url="https://tts.test")) as (client, _):
        assert "callback_url" in (await spec(client))["components"]["schemas"]["SubmitRequest"]["properties"]
