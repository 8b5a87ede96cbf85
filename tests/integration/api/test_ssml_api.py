"""SSML on the native submit, through the real app on a real Redis: ``{"ssml": …}`` is queued as one task whose
segments are the document's runs of speech — each ``<voice>`` resolved for the caller's tenant, each rate a speed,
each volume a gain, each break an exact pause, each mark where the audio can place it; every refusal is a 422 naming
``ssml`` with what to fix and where; hostile XML is refused at the API; and a real worker (ttsq's decoder on the tiny
checkpoint, batch-invariant) speaks such a task: 16,800 zero samples at a 700 ms break, the marks' samples in the
result's captions, the volume as gain on the samples."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config
from tests.integration.api.test_dialogue import job_of, refusal
from tests.integration.api.test_security import bearer, new_key
from tests.integration.runtime.test_worker import running_worker, wait_final
from tests.unit.api.test_voices import embedding
from tests.unit.domain.test_ssml import DEEP, EXTERNAL, LAUGHS, LONG_ATTRIBUTE
from ttsq.client.sdk import AsyncTTSClient, TTSError
from ttsq.domain.jobs import Status
from ttsq.domain.segments import Mark
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.store.queue import JobQueue

ROUTE = "/v1/tts/submit"
DOCUMENT = (
    '<speak><voice name="zh_female">Hello <mark name="greeted"/><break time="700ms"/></voice>'
    '<voice name="zh_male"><prosody rate="fast" volume="+3dB">It is <say-as interpret-as="cardinal">42</say-as>.'
    "</prosody></voice></speak>"
)


async def test_an_ssml_submit_is_a_task_of_segments_each_in_its_voice_speed_gain_and_pause(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    answer = await client.post(ROUTE, json={"ssml": DOCUMENT, "seed": 3, "speed": 5})
    job = await job_of(redis, answer)
    params = job.params
    assert params.text == "Hello It is forty two.", "the status shows what the document says"
    assert params.segments is not None and len(params.segments) == 2
    first, second = params.segments
    assert (first.text, first.voice, first.speaker_seed) == ("Hello", "zh_female", 2)
    assert first.pause_samples is None and first.gain_db is None
    assert first.marks == [Mark(name="greeted", offset=5)] and first.sampling is None and first.speaker == "zh_female"
    assert (second.text, second.voice, second.speaker_seed) == ("It is forty two.", "zh_male", 1111)
    assert second.pause_samples == 16_800 and second.gain_db == 3.0
    assert second.sampling is not None and second.sampling.speed == 7 and second.sampling.temperature == params.temperature


async def test_text_outside_any_voice_speaks_in_the_requests_voice_and_the_document_is_in_the_cache_key(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    plain = await job_of(redis, await client.post(ROUTE, json={"ssml": "<speak>Hi there.</speak>", "voice": "zh_male"}))
    assert plain.params.segments is not None and plain.params.segments[0].speaker_seed == 1111
    again = await client.post(ROUTE, json={"ssml": "<speak>Hi there.</speak>", "voice": "zh_male"})
    assert again.json()["joined"] is True, "the same document joins the task in flight"
    keys = {plain.params.cache_key}
    for ssml in (
        '<speak>Hi <break time="700ms"/>there.</speak>',
        '<speak>Hi <break time="701ms"/>there.</speak>',
        '<speak><prosody volume="-3dB">Hi there.</prosody></speak>',
        '<speak><prosody rate="slow">Hi there.</prosody></speak>',
        '<speak>Hi there.<mark name="end"/></speak>',
    ):
        keys.add((await job_of(redis, await client.post(ROUTE, json={"ssml": ssml, "voice": "zh_male"}))).params.cache_key)
    assert len(keys) == 6, "breaks, gains, rates and marks are each in the cache key"


async def test_a_tenants_voice_speaks_its_own_documents_only(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(auth="on")) as (client, _):
        admin, acme = await new_key(redis, "admin", tenant="acme"), await new_key(redis, "tts", tenant="acme")
        other = await new_key(redis, "tts", tenant="other")
        voice = {"name": "anna", "embedding": embedding(np.linspace(-1, 1, 64))}
        assert (await client.post("/v1/voices", json=voice, headers=bearer(admin))).status_code == 201
        body = {"ssml": '<speak>\n<voice name="anna">Hello.</voice></speak>'}
        job = await job_of(redis, await client.post(ROUTE, json=body, headers=bearer(acme)))
        assert job.params.segments is not None and job.params.segments[0].voice_owner == "tenant:acme"
        field, said = refusal(await client.post(ROUTE, json=body, headers=bearer(other)))
        assert field == "ssml" and said.startswith("line 2, column 1: <voice name='anna'>: unknown voice 'anna'")


async def test_the_pronunciation_dictionary_rewrites_each_run_and_its_marks_stay_at_its_ends(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    entry = {"match": "SQL", "replacement": "sequel", "language": "en"}
    assert (await client.post("/v1/admin/pronunciation", json=entry)).status_code == 201
    ssml = '<speak>I like SQL<mark name="m"/><break time="1s"/><voice name="zh_male">SQL is fine.</voice></speak>'
    job = await job_of(redis, await client.post(ROUTE, json={"ssml": ssml}))
    segments = job.params.segments or []
    assert [s.text for s in segments] == ["I like sequel", "sequel is fine."]
    assert segments[0].marks == [Mark(name="m", offset=len("I like sequel"))]


@pytest.mark.parametrize(
    ("body", "field", "said"),
    [
        ({"ssml": "<speak>Hi\n  <audio src='x.wav'/></speak>"}, "ssml", "line 2, column 3: <audio> is not supported"),
        ({"ssml": "<speak><emphasis>x</emphasis></speak>"}, "ssml", "supported elements: speak, p, s, break, prosody"),
        ({"ssml": "<speak><phoneme ph='x'>x</phoneme></speak>"}, "ssml", "<phoneme> is not supported"),
        ({"ssml": '<speak><prosody pitch="+2st">x</prosody></speak>'}, "ssml", "supported attributes of <prosody>: rate, volume"),
        ({"ssml": '<speak><break time="700ms" foo="1"/>x</speak>'}, "ssml", "<break> attribute 'foo' is not supported"),
        ({"ssml": "<speak>\n<p>x</s>"}, "ssml", "line 2, column 7: ssml is not well-formed XML: mismatched tag"),
        ({"ssml": '<speak><voice name="nobody">x</voice></speak>'}, "ssml", "unknown voice 'nobody'"),
        ({"ssml": "<speak>[Stts] hi</speak>"}, "ssml", "control token [Stts]"),
        ({"ssml": "<speak>hi</speak>", "text": "hi"}, "ssml", "send `text` or `ssml`, not both"),
        ({}, "text", "one of them is required"),
        ({"ssml": "<speak>" + "x" * 600 + "</speak>"}, "ssml", "text is 600 characters long as sent; the limit is 500"),
        ({"ssml": "<speak>" + "<s>x</s>" * 2_000 + "</speak>"}, "ssml", "the limit is 10000 (MAX_SSML_CHARS)"),
        ({"ssml": LAUGHS}, "ssml", "must not have a document type"),
        ({"ssml": EXTERNAL}, "ssml", "must not have a document type"),
        ({"ssml": "<speak>" + "<prosody>" * 40 + "x" + "</prosody>" * 40 + "</speak>"}, "ssml", "more than 32 deep"),
        ({"ssml": "<speak>" + "<break/>" * 201 + "x</speak>"}, "ssml", "more than 200 elements (MAX_SSML_ELEMENTS)"),
    ],
)
async def test_what_ttsq_will_not_speak_is_a_422_naming_ssml_what_and_where(
    client: httpx.AsyncClient, body: dict[str, Any], field: str, said: str
) -> None:
    where, message = refusal(await client.post(ROUTE, json=body))
    assert where == field and said in message, message


async def test_hostile_documents_are_refused_under_the_widest_limits_and_a_megabyte_before_it_is_read(
    client: httpx.AsyncClient, make_settings: Any
) -> None:
    """At the defaults a 1 MB attribute or a 10,000-deep document never reaches the reader: the submit's body may be
    as long as a document (``MAX_DOCUMENT_CHARS``), but an ``ssml`` over ``MAX_SSML_CHARS`` is refused before it is
    parsed; with every limit at its widest each hostile document is a 422 from the reader (tests/unit/domain/test_ssml.py
    bounds its memory)."""
    for source in (LONG_ATTRIBUTE, DEEP):
        where, message = refusal(await client.post(ROUTE, json={"ssml": source}))
        assert where == "ssml" and "MAX_SSML_CHARS" in message, message[:300]
    widest = make_settings(max_body_bytes=2_000_000, max_ssml_chars=1_000_000, max_ssml_depth=1_000, max_ssml_elements=100_000)
    async with api_client(widest) as (wide, _):
        for source, said in (
            (LAUGHS, "document type"),
            (EXTERNAL, "document type"),
            (DEEP, "more than 1000 deep"),
            (LONG_ATTRIBUTE, "(MAX_SSML_CHARS)"),
            (LONG_ATTRIBUTE[:999_000] + '"/>x</speak>', "the longest this attribute may be is 1000"),
        ):
            where, message = refusal(await wide.post(ROUTE, json={"ssml": source}))
            assert where == "ssml" and said in message and len(message) < 1_000, message[:300]


# ---- spoken by a real worker ---------------------------------------------------------------------------------------


async def spoken(client: httpx.AsyncClient, redis: Redis, engine: DecoderEngine, ssml: str) -> tuple[np.ndarray, list[Any]]:
    """``ssml`` submitted, spoken by a worker: the result's samples (PCM16) and its captions as the API lists them."""
    answer = await client.post(ROUTE, json={"ssml": ssml, "seed": 5, "format": "pcm"})
    assert answer.status_code == 202, answer.text
    task_id = answer.json()["task_id"]
    async with running_worker(redis, engine) as worker:
        job = await wait_final(worker.queue, task_id, timeout_s=300)
    assert job.status is Status.DONE, job.error
    result = await client.get(f"/v1/tts/result/{task_id}")
    cues = (await client.get(f"/v1/tts/result/{task_id}", params={"format": "json"})).json()
    return np.frombuffer(result.content, dtype="<i2"), cues


async def test_a_worker_speaks_the_document_with_its_breaks_exact_its_marks_placed_and_its_volume_as_gain(
    client: httpx.AsyncClient, redis: Redis, invariant_engine: DecoderEngine
) -> None:
    loud = (
        '<speak><voice name="zh_female"><mark name="start"/>Hello there.<mark name="greeted"/><break time="700ms"/>'
        '</voice><voice name="zh_male">Quieter now.<mark name="end"/></voice></speak>'
    )
    samples, cues = await spoken(client, redis, invariant_engine, loud)
    first = [cue for cue in cues if cue["segment"] == 0]
    second = [cue for cue in cues if cue["segment"] == 1]
    assert {cue["speaker"] for cue in first} == {"zh_female"} and {cue["speaker"] for cue in second} == {"zh_male"}
    assert second[0]["start"] - first[-1]["end"] == 16_800, "a 700 ms break is 16,800 samples at 24 kHz"
    assert not samples[first[-1]["end"] : second[0]["start"]].any(), "and every one of them is zero"
    marks = {mark["name"]: mark["sample"] for cue in cues for mark in cue.get("marks") or ()}
    assert marks == {"start": 0, "greeted": first[-1]["end"], "end": second[-1]["end"]} and samples.size == second[-1]["end"]

    softer = loud.replace("Quieter now.", '<prosody volume="-6dB">Quieter now.</prosody>')
    quiet, quiet_cues = await spoken(client, redis, invariant_engine, softer)
    assert quiet_cues == cues and np.array_equal(quiet[: second[0]["start"]], samples[: second[0]["start"]])
    line, quieter = samples[second[0]["start"] :].astype(float), quiet[second[0]["start"] :].astype(float)
    assert line.any() and np.abs(quieter - line * 10 ** (-6 / 20)).max() <= 1.0, "-6 dB: each sample times 0.501"


async def test_the_python_client_submits_a_document_in_place_of_a_text(redis: Redis, make_settings: Any) -> None:
    async with (
        api_client(make_settings()) as (_, app),
        AsyncTTSClient("http://ttsq.test", transport=httpx.ASGITransport(app=app)) as tts,
    ):
        submitted = await tts.submit(None, ssml='<speak>Hi <break time="700ms"/>there.</speak>', seed=4)
        with pytest.raises(TTSError, match="not well-formed XML"):
            await tts.submit(None, ssml="<speak>Hi")
    job = await JobQueue(redis, queue_config()).get(submitted.task_id)
    assert job is not None and [s.pause_samples for s in job.params.segments or []] == [None, 16_800]
