"""Whole documents on the native submit, through the real app on a real Redis (docs/documents.md): ``document: true``
lifts the text's limit to MAX_DOCUMENT_CHARS and pays a token per MAX_TEXT_CHARS, ``text_format: markdown`` is read as a
person reads it aloud, the document is cut into parts at sentence ends with the structure's pauses, and every refusal
is a 422 naming what to fix. Spoken by a real worker (ttsq's decoder on the tiny checkpoint), its status reports its
parts and audio so far, its audio is served from its stream in any streamed format, and its captions cover it all."""

from __future__ import annotations

import io
import math
from typing import Any

import httpx
import jsonschema_rs
import numpy as np
import pytest
import soundfile as sf
from redis.asyncio import Redis

from tests.conftest import api_client
from tests.integration.api.test_dialogue import job_of, refusal
from tests.integration.runtime.test_worker import running_worker, wait_final
from ttsq.domain.documents import PAUSE_MS
from ttsq.domain.jobs import Status
from ttsq.inference.engines.decoder_engine import DecoderEngine

ROUTE = "/v1/tts/submit"
MARKDOWN = """# The title

A first paragraph, with **strong** words and a [link](https://example.com/page).

- one item
- another item 🎉

```python
print("never read")
```
"""


async def test_a_markdown_document_is_read_into_parts_with_the_pauses_of_its_structure(
    client: httpx.AsyncClient, redis: Redis
) -> None:
    job = await job_of(redis, await client.post(ROUTE, json={"text": MARKDOWN, "text_format": "markdown", "document": True}))
    segments = job.params.segments or []
    assert [segment.text for segment in segments] == [
        "The title.",
        "A first paragraph, with strong words and a link.",
        "one item",
        "another item",
        "A code block is skipped here.",
    ]
    rate = 24  # samples per ms
    assert [segment.pause_samples for segment in segments] == [
        None,
        PAUSE_MS["after_heading"] * rate,
        PAUSE_MS["item"] * rate,
        PAUSE_MS["item"] * rate,
        PAUSE_MS["code"] * rate,
    ]
    assert job.params.document and job.params.cache_key is None
    assert {segment.speaker_seed for segment in segments} == {job.params.speaker_seed}, "each part in the request's voice"


async def test_a_document_may_be_longer_than_a_text_and_is_cut_at_sentence_ends(redis: Redis, make_settings: Any) -> None:
    sentence = "This sentence is part of a long document. "
    text = sentence * 60  # 2,520 characters: five times MAX_TEXT_CHARS
    async with api_client(make_settings(max_text_chars=500, document_part_chars=200)) as (client, _):
        where, message = refusal(await client.post(ROUTE, json={"text": text}))
        assert where == "text" and "limit is 500" in message
        job = await job_of(redis, await client.post(ROUTE, json={"text": text, "document": True}))
    segments = job.params.segments or []
    assert all(len(segment.text) <= 200 and segment.text.endswith(".") for segment in segments)
    assert " ".join(segment.text for segment in segments) == text.strip()
    assert [segment.pause_samples for segment in segments] == [None] * len(segments), "one paragraph: the usual gaps"


async def test_a_document_pays_a_token_per_text_limit_of_it(redis: Redis, make_settings: Any) -> None:
    text = "Word after word goes on here. " * 70  # 2,100 characters: five tokens at MAX_TEXT_CHARS=500
    async with api_client(make_settings(max_text_chars=500, rate_limit_per_s=0.001, rate_limit_burst=8)) as (client, _):
        first = await client.post(ROUTE, json={"text": text, "document": True})
        assert first.status_code == 202, first.text
        assert int(first.headers["RateLimit-Remaining"]) == 8 - math.ceil(len(text) / 500)
        second = await client.post(ROUTE, json={"text": text, "document": True})
        assert second.status_code == 429, "the bucket holds three tokens; the document costs five"


async def test_what_a_document_cannot_be_is_a_422_naming_the_field(client: httpx.AsyncClient, make_settings: Any) -> None:
    cases = [
        ({"ssml": "<speak>Hi.</speak>", "document": True}, "document", "applies to a `text`"),
        ({"ssml": "<speak>Hi.</speak>", "text_format": "markdown"}, "text_format", "applies to a `text`"),
        ({"text": "Hello there.", "document": True, "format": "ogg"}, "format", "streamed as it is made"),
        ({"text": "```\nonly code\n```", "text_format": "markdown", "document": True}, "text", "nothing to read aloud"),
        ({"text": "# [uv_break] and [spk_emb]", "text_format": "markdown"}, "text", "not allowed"),
        ({"text": "Fine.", "text_format": "html"}, "text_format", "'plain' or 'markdown'"),
    ]
    async with api_client(make_settings(document_code="skip")) as (skipping, _):
        for body, field, said in cases:
            where, message = refusal(await skipping.post(ROUTE, json=body))
            assert where == field and said in message, (body, where, message)
    async with api_client(make_settings(max_document_chars=1_000)) as (short, _):
        where, message = refusal(await short.post(ROUTE, json={"text": "x" * 1_001, "document": True}))
        assert where == "text" and "limit is 1000" in message


async def test_the_schema_says_a_document_may_be_longer(client: httpx.AsyncClient) -> None:
    schema = (await client.get("/openapi.json")).json()["components"]["schemas"]["SubmitRequest"]
    assert schema["properties"]["text"]["maxLength"] == 200_000
    assert {"properties": {"text": {"maxLength": 500}}} in schema["anyOf"]
    validator = jsonschema_rs.validator_for(schema)
    assert not validator.is_valid({"ssml": "<speak>Hi.</speak>", "document": True}), "a document is a text"
    assert not validator.is_valid({"ssml": "<speak>Hi.</speak>", "text_format": "markdown"})
    assert validator.is_valid({"ssml": "<speak>Hi.</speak>", "document": False})
    assert not validator.is_valid({"text": "Hi.", "refine_text": False, "oral": 2}), "the model's own rules are kept"


# ---- spoken by a real worker ---------------------------------------------------------------------------------------


async def test_a_spoken_document_reports_its_parts_and_is_served_from_its_stream(
    client: httpx.AsyncClient, redis: Redis, invariant_engine: DecoderEngine
) -> None:
    answer = await client.post(ROUTE, json={"text": MARKDOWN, "text_format": "markdown", "document": True, "format": "pcm"})
    task_id = answer.json()["task_id"]
    short = await client.post(ROUTE, json={"text": "One short line.", "document": True, "format": "pcm"})
    async with running_worker(redis, invariant_engine, document_parts_in_flight=2) as worker:
        job = await wait_final(worker.queue, task_id, timeout_s=300)
        one = await wait_final(worker.queue, short.json()["task_id"], timeout_s=300)
    assert job.status is Status.DONE, job.error
    one_part = (await client.get(f"/v1/tts/result/{one.id}")).content
    assert one.status is Status.DONE and len(one_part) == round((one.duration_s or 0) * 24_000) * 2 > 0, "a one-chunk document"
    status = (await client.get(f"/v1/tts/tasks/{task_id}")).json()
    samples = np.frombuffer((await client.get(f"/v1/tts/result/{task_id}")).content, dtype="<i2")
    assert (status["chunks_done"], status["chunks_total"]) == (5, 5)
    assert samples.size > 0 and status["audio_s"] == pytest.approx(samples.size / 24_000)
    assert status["audio_duration_s"] == pytest.approx(samples.size / 24_000, abs=1e-6)
    wav = (await client.get(f"/v1/tts/result/{task_id}", params={"format": "wav"})).content
    decoded, rate = sf.read(io.BytesIO(wav), dtype="int16")
    assert rate == 24_000 and np.array_equal(decoded, samples), "the stream's audio, in the format asked"
    cues = (await client.get(f"/v1/tts/result/{task_id}", params={"format": "json"})).json()
    segments = [cue["segment"] for cue in cues]
    assert segments == sorted(segments) and set(segments) == {0, 1, 2, 3, 4}, "every part captioned, in order"
    assert cues[0]["start"] == 0 and cues[-1]["end"] == samples.size
    heading_gap = cues[1]["start"] - cues[0]["end"]
    assert heading_gap == PAUSE_MS["after_heading"] * 24 and not samples[cues[0]["end"] : cues[1]["start"]].any()
