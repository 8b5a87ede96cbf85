"""Dialogues through the real app on a real Redis: ``POST /v1/tts/dialogue`` queues one task whose segments are the
lines, each in its speaker's voice (resolved for the caller's tenant), with its own sampling where it says; every
refusal names what to fix; the ElevenLabs routes take ``xi-api-key`` and refuse a format they cannot make. (Audio from
real workers, the bit-equality of lines and the ``elevenlabs`` SDK: ``tests/e2e/test_dialogue.py``.)"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import numpy as np
import pytest
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_cartesia_api import GUARD_S, PIECES, play_worker
from tests.integration.api.test_security import bearer, new_key
from tests.unit.api.test_voices import embedding
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.dialogue import ScriptError, read_script
from ttsq.domain.jobs import DEFAULT_SAMPLING_SEED, Job
from ttsq.domain.sampling import Sampling
from ttsq.store.queue import JobQueue

ROUTE = "/v1/tts/dialogue"
VOICES = {"Alice": "zh_female", "Bob": "zh_male"}
LINES = [{"speaker": "Alice", "text": "Hi Bob, how are you?"}, {"speaker": "Bob", "text": "Fine, thanks."}]


async def job_of(redis: Redis, answer: httpx.Response) -> Job:
    assert answer.status_code == 202, answer.text
    job = await JobQueue(redis, queue_config()).get(answer.json()["task_id"])
    assert job is not None
    return job


def refusal(answer: httpx.Response) -> tuple[str, str]:
    """A 422's field (its place in the body) and message."""
    assert answer.status_code == 422, answer.text
    error = answer.json()["detail"][0]
    return ".".join(str(part) for part in error["loc"][1:]), str(error["msg"])


async def test_each_line_is_a_segment_in_its_speakers_voice_with_the_gap_between(client: httpx.AsyncClient, redis: Redis) -> None:
    lines = [*LINES, {"speaker": "Alice", "text": "Glad to hear.", "speed": 7}]
    job = await job_of(redis, await client.post(ROUTE, json={"lines": lines, "voices": VOICES, "gap_ms": 500, "format": "mp3"}))
    segments = job.params.segments or []
    assert [(s.speaker, s.voice, s.text) for s in segments] == [
        ("Alice", "zh_female", "Hi Bob, how are you?"),
        ("Bob", "zh_male", "Fine, thanks."),
        ("Alice", "zh_female", "Glad to hear."),
    ]
    assert segments[0].speaker_seed == segments[2].speaker_seed != segments[1].speaker_seed
    assert [s.pause_samples for s in segments] == [None, SAMPLE_RATE // 2, SAMPLE_RATE // 2]
    assert [s.sampling for s in segments] == [None, None, Sampling(speed=7)], "a line's own fields override the dialogue's"
    assert job.params.seed == DEFAULT_SAMPLING_SEED and job.params.deterministic and job.params.format == "mp3"
    assert job.params.text == "Alice: Hi Bob, how are you?\nBob: Fine, thanks.\nAlice: Glad to hear."
    assert job.params.cache_key is not None


async def test_a_script_is_the_same_dialogue_as_its_lines(client: httpx.AsyncClient, redis: Redis) -> None:
    from_lines = await job_of(redis, await client.post(ROUTE, json={"lines": LINES, "voices": VOICES}))
    script = "Alice: Hi Bob, how are you?\n\n  Bob ： Fine, thanks.  \n"
    from_script = await job_of(redis, await client.post(ROUTE, json={"script": script, "voices": VOICES}))
    assert from_script.params.segments == from_lines.params.segments
    assert from_script.params.cache_key == from_lines.params.cache_key


def test_a_script_line_without_a_speaker_is_refused_with_its_number() -> None:
    assert read_script("A: one: two\nB:three") == [("A", "one: two"), ("B", "three")]
    for script, said in [
        ("Alice: Hi.\nno speaker here", "line 2 names no speaker"),
        ("Alice:   \n", "line 1: Alice has nothing to say"),
        (": nobody", "line 1 names no speaker"),
        ("\n  \n", "the script has no lines"),
        ("x" * 70 + ": too long a name", "line 1 names no speaker"),
    ]:
        with pytest.raises(ScriptError, match=said):
            read_script(script)


async def test_every_speaker_needs_a_voice_and_each_voice_must_be_one_the_caller_sees(client: httpx.AsyncClient) -> None:
    lines = [*LINES, {"speaker": "Carol", "text": "And me."}, {"speaker": "Dan", "text": "Me too."}]
    field, said = refusal(await client.post(ROUTE, json={"lines": lines, "voices": VOICES}))
    assert field == "voices" and "no voice for 'Carol', 'Dan'" in said
    field, said = refusal(await client.post(ROUTE, json={"lines": LINES, "voices": {**VOICES, "Bob": "nobody"}}))
    assert field == "voices.Bob" and said.startswith("unknown voice 'nobody'")
    field, said = refusal(await client.post(ROUTE, json={"script": "Alice: Hi.\nwho says this?", "voices": VOICES}))
    assert field == "script" and "line 2 names no speaker" in said


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ({"voices": VOICES}, "exactly one of `lines` and `script`"),
        ({"lines": LINES, "script": "Alice: Hi.", "voices": VOICES}, "exactly one of `lines` and `script`"),
        ({"lines": LINES, "voices": {}}, "voices"),
        ({"lines": [], "voices": VOICES}, "lines"),
        ({"lines": [{"speaker": "Alice", "text": "..."}, {"speaker": "Bob", "text": "?!"}], "voices": VOICES}, "nothing to read"),
        ({"lines": [{"speaker": "Alice", "text": "Hi.", "speed": 12}], "voices": VOICES}, "lines.0.speed"),
        ({"lines": [{"speaker": "Alice", "text": "Hi.", "pitch": 2}], "voices": VOICES}, "lines.0.pitch"),
        ({"lines": LINES, "voices": VOICES, "gap_ms": -1}, "gap_ms"),
        ({"lines": [{"speaker": "Alice", "text": "[Stts] hi"}], "voices": VOICES}, "lines.0.text"),
        ({"lines": [{"speaker": "Alice", "text": "\u200b"}], "voices": VOICES}, "lines.0.text"),
    ],
)
async def test_bad_dialogues_are_refused_naming_the_field(client: httpx.AsyncClient, body: dict[str, Any], where: str) -> None:
    field, said = refusal(await client.post(ROUTE, json=body))
    assert where in (field, said) or where in said, (field, said)


async def test_the_limits_on_lines_and_characters_are_settings(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(max_dialogue_lines=2, max_dialogue_chars=40)) as (client, _):
        assert (await client.post(ROUTE, json={"lines": LINES, "voices": VOICES})).status_code == 202
        field, said = refusal(await client.post(ROUTE, json={"lines": [*LINES, LINES[0]], "voices": VOICES}))
        assert field == "lines" and "3 lines; the limit is 2 (MAX_DIALOGUE_LINES)" in said
        long = [LINES[0], {"speaker": "Bob", "text": "Fine, thanks, and you?"}]
        field, said = refusal(await client.post(ROUTE, json={"lines": long, "voices": VOICES}))
        assert field == "lines" and "the limit is 40 (MAX_DIALOGUE_CHARS)" in said
        digits = [{"speaker": "Bob", "text": "Call 1234567."}]
        field, said = refusal(await client.post(ROUTE, json={"lines": digits, "voices": VOICES}))
        assert field == "lines.0.text" and "digits are read aloud" in said


async def test_changing_one_lines_voice_or_sampling_changes_the_cache_key_and_the_same_dialogue_joins(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    first = await client.post(ROUTE, json={"lines": LINES, "voices": VOICES})
    again = await client.post(ROUTE, json={"lines": LINES, "voices": VOICES})
    assert again.json()["joined"] is True and again.json()["task_id"] == first.json()["task_id"], "single-flight"
    keys = {(await job_of(redis, first)).params.cache_key}
    for body in (
        {"lines": LINES, "voices": {**VOICES, "Bob": "zh_female"}},
        {"lines": [LINES[0], {**LINES[1], "temperature": 0.5}], "voices": VOICES},
        {"lines": LINES, "voices": VOICES, "gap_ms": 300},
        {"lines": [LINES[0], {**LINES[1], "speaker": "Robert"}], "voices": {**VOICES, "Robert": "zh_male"}},
    ):
        keys.add((await job_of(redis, await client.post(ROUTE, json=body))).params.cache_key)
    assert len(keys) == 5, "a voice, a line's sampling, the gap and a speaker's label are each in the key"


async def test_a_tenants_voice_serves_its_own_dialogues_only(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(auth="on")) as (client, _):
        admin, acme = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "tts", tenant="acme")
        other = await new_key(redis, "tts", tenant="other")
        voice = {"name": "anna", "embedding": embedding(np.linspace(-1, 1, 64))}
        assert (await client.post("/v1/voices", json=voice, headers=bearer(admin))).status_code == 201
        body = {"lines": LINES, "voices": {"Alice": "anna", "Bob": "zh_male"}}
        job = await job_of(redis, await client.post(ROUTE, json=body, headers=bearer(acme)))
        assert job.params.segments is not None and job.params.segments[0].voice_owner == "tenant:acme"
        field, said = refusal(await client.post(ROUTE, json=body, headers=bearer(other)))
        assert field == "voices.Alice" and said.startswith("unknown voice 'anna'") and "anna" not in said.partition(":")[2]


async def test_the_pronunciation_dictionary_rewrites_each_line(client: httpx.AsyncClient, redis: Redis) -> None:
    entry = {"match": "SQL", "replacement": "sequel", "language": "en"}
    assert (await client.post("/v1/admin/pronunciation", json=entry)).status_code == 201
    lines = [{"speaker": "Alice", "text": "I like SQL."}, {"speaker": "Bob", "text": "SQL is fine."}]
    job = await job_of(redis, await client.post(ROUTE, json={"lines": lines, "voices": VOICES}))
    assert [s.text for s in job.params.segments or []] == ["I like sequel.", "sequel is fine."]


async def test_the_elevenlabs_routes_take_xi_api_key_and_refuse_a_format_they_cannot_make(redis: Redis, make_settings: Any) -> None:
    body = {"inputs": [{"text": "Hi.", "voice_id": "zh_female"}], "model_id": "eleven_v3"}
    async with api_client(make_settings(auth="on")) as (client, _):
        key = await new_key(redis, "tts")
        for route in ("/v1/text-to-dialogue", "/v1/text-to-dialogue/stream"):
            assert (await client.post(route, json=body)).status_code == 401
            assert (await client.post(route, json=body, headers={"xi-api-key": "sk-wrong"})).status_code == 401
            answer = await client.post(route, json=body, params={"output_format": "flac_44100"}, headers={"xi-api-key": key})
            field, said = refusal(answer)
            assert field == "output_format" and "unknown output_format 'flac_44100'" in said and "ulaw_8000" in said
            answer = await client.post(route, json=body, params={"output_format": "opus_44100_64"}, headers={"xi-api-key": key})
            field, said = refusal(answer)
            assert field == "output_format" and "opus_44100_64" in said
            unknown = {"inputs": [{"text": "Hi.", "voice_id": "nobody"}]}
            field, said = refusal(await client.post(route, json=unknown, headers={"xi-api-key": key}))
            assert field == "voices.nobody" and said.startswith("unknown voice 'nobody'")
            empty = {"inputs": [{"text": " ", "voice_id": "zh_female"}]}
            field, said = refusal(await client.post(route, json=empty, headers={"xi-api-key": key}))
            assert field == "inputs.0.text" and "text is empty" in said
            assert (await client.post(route, json={"inputs": []}, headers={"xi-api-key": key})).status_code == 422


async def test_a_dialogue_of_as_many_lines_as_the_default_limit_fits_a_body_as_lines_and_as_a_script(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    lines = [{"speaker": "Alice" if number % 2 else "Bob", "text": f"Line {chr(65 + number % 26)}."} for number in range(200)]
    job = await job_of(redis, await client.post(ROUTE, json={"lines": lines, "voices": VOICES}))
    assert len(job.params.segments or []) == 200
    script = "\n".join(f"{line['speaker']}: {line['text']}" for line in lines)
    assert (await client.post(ROUTE, json={"script": script, "voices": VOICES, "seed": 1})).status_code == 202


async def test_a_dialogue_of_no_lines_is_refused_never_queued(client: httpx.AsyncClient, redis: Redis) -> None:
    """A job of no segments would be stored as `segments: {}` (an empty Lua table), which no worker can read back."""
    field, said = refusal(await client.post(ROUTE, json={"lines": [], "voices": VOICES}))
    assert field == "lines"
    field, said = refusal(await client.post(ROUTE, json={"script": "\n\n", "voices": VOICES}))
    assert field == "script" and "no lines" in said
    assert await JobQueue(redis, queue_config()).depth() == 0


async def test_the_elevenlabs_route_names_each_ignored_field_once(redis: Redis, make_settings: Any) -> None:
    """What ttsq does not use (the body's and every input's) is named in ``X-TTSQ-Ignored-Fields``, each name once
    however many inputs sent it (``schemas.field_names``, as every route of another vendor's protocol names them)."""
    inputs = [
        {"text": "Hi.", "voice_id": "zh_female", "voice_settings": {}},
        {"text": "Hey.", "voice_id": "zh_male", "voice_settings": {}},
    ]
    body = {"inputs": inputs, "model_id": "eleven_v3", "bad name": 1}
    async with api_client(make_settings()) as (client, _):
        asking = asyncio.create_task(client.post("/v1/text-to-dialogue", json=body, params={"output_format": "pcm_24000"}))
        await asyncio.wait_for(play_worker(redis), GUARD_S)
        answer = await asyncio.wait_for(asking, GUARD_S)
    assert answer.status_code == 200, answer.text
    assert answer.content == b"".join(PIECES)
    assert answer.headers["X-TTSQ-Ignored-Fields"] == "(unnamed), inputs.voice_settings, model_id"
