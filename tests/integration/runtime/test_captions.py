"""Captions: cue timings from the joined audio, SRT/WebVTT checked by well-kept parsers (``srt``, ``webvtt-py``),
a real worker recording them with the result, the API serving them, and the cache keeping them."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import numpy as np
import soundfile as sf
import srt
import webvtt
from redis.asyncio import Redis

from tests.conftest import api_client, queue_config, task_id
from tests.integration.runtime.test_worker import params, running_worker, wait_final, worker_config
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.captions import Cue, captions, source_spans, spoken_text
from ttsq.domain.captions import srt as to_srt
from ttsq.domain.captions import vtt as to_vtt
from ttsq.domain.jobs import Status
from ttsq.inference.base import ChunkAudio
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.runtime.assembly import JobAudio
from ttsq.runtime.worker import Worker
from ttsq.store.cache import CachedAudio, ResultCache
from ttsq.store.queue import JobQueue

TEXT = "First sentence here. Second one, longer than the first. Third."


def test_cue_times_cover_the_joined_audio_exactly_whatever_order_chunks_end_in() -> None:
    audio = JobAudio()
    lengths = [7_001, 0, 12_345, 999]  # one chunk produced no audio: it still has its (empty) cue
    texts = ["a", "b", "c", "d"]
    for index in (2, 0, 3, 1):
        audio.add(ChunkAudio(index, 4, np.ones(lengths[index], dtype=np.float32), texts[index]))
    joined = audio.samples()
    assert len(audio.timings) == 4 and [timing.text for timing in audio.timings] == texts
    assert audio.timings[0].start == 0 and audio.timings[-1].end == joined.size
    for (start, end, *_), length in zip(audio.timings, lengths, strict=True):
        assert end - start == length
        assert np.all(joined[start:end][length // 2 : length // 2 + 1] != 0)  # the chunk's own samples, not the pause
    for before, after in zip(audio.timings, audio.timings[1:], strict=False):
        between = joined[before.end : after.start]
        assert between.size == 0 or not between.any(), "between cues: only the pause"


def test_source_offsets_map_each_chunk_back_to_the_callers_text() -> None:
    chunks = ["First sentence here.", "Second one, longer than the first.", "3rd →three"]
    spans = source_spans(TEXT, chunks)
    assert [TEXT[a:b] for a, b in (span for span in spans[:2] if span)] == chunks[:2]
    assert spans[2] is None, "a chunk the normaliser rewrote has no offsets"
    assert source_spans("ab ab", ["ab", "ab"]) == [(0, 2), (3, 5)], "found in order, never the same place twice"


def cues() -> list[Cue]:
    return captions(TEXT, [(0, 36_000, "First sentence here."), (38_880, 90_001, "Second one --> longer\n\nthan the first.")])


def test_a_cue_shows_the_words_without_chattts_control_tokens_and_keeps_its_place() -> None:
    """Found by a tester: cue text kept ``[laugh]`` and ``[uv_break]``, which no one hears as words."""
    source = "Well [laugh] that is funny. Next [uv_break] one."
    (first, second) = captions(source, [(0, 10, "Well [laugh] that is funny."), (10, 20, "Next [uv_break] one.")])
    assert (first.text, second.text) == ("Well that is funny.", "Next one.")
    assert source[first.source_start : first.source_end] == "Well [laugh] that is funny.", "offsets are in the caller's text"
    assert spoken_text("[laugh_2][break_3]") == ""


def test_a_rewritten_chunk_is_not_placed_on_a_later_sentence_that_reads_like_it() -> None:
    """Found by a tester: offsets were filled for a rewritten chunk (docs: null) when its rewriting occurred later on."""
    source = "I have 2 cats. I have two cats."
    assert source_spans(source, ["I have two cats.", "I have two cats."]) == [None, (15, 31)]
    source = "Room 3 is free. Ask for room 4. Room 3 is free."
    assert source_spans(source, ["Room three is free.", "Ask for room four.", "Room 3 is free."]) == [None, None, None], (
        "after a lost chunk, one that occurs twice in the rest is not guessed at"
    )
    assert source_spans("A b. C d. E f.", ["A b.", "C d.", "E f."]) == [(0, 4), (5, 9), (10, 14)]


def test_srt_and_webvtt_parse_with_their_parsers_and_keep_the_times() -> None:
    parsed = list(srt.parse(to_srt(cues(), SAMPLE_RATE)))
    assert [s.index for s in parsed] == [1, 2]
    assert [round(s.start.total_seconds() * 1000) for s in parsed] == [0, 1620]
    assert [round(s.end.total_seconds() * 1000) for s in parsed] == [1500, 3750]
    assert parsed[0].content == "First sentence here."
    captions_ = webvtt.from_buffer(io.StringIO(to_vtt(cues(), SAMPLE_RATE)))
    assert [(c.start, c.end) for c in captions_.captions] == [("00:00:00.000", "00:00:01.500"), ("00:00:01.620", "00:00:03.750")]
    assert captions_[1].text == "Second one -> longer than the first."  # one line: a blank line or "-->" would end the cue


def test_cached_audio_keeps_its_captions() -> None:
    entry = CachedAudio(b"RIFF", "audio/wav", 3.75, cues())
    assert CachedAudio.unpack(entry.pack()) == entry
    assert CachedAudio.unpack(CachedAudio(b"RIFF", "audio/wav", 1.0).pack()).captions is None


async def test_a_real_worker_records_captions_that_the_api_serves_and_the_cache_keeps(
    redis: Redis, tiny_engine: ChatTTSEngine, make_settings: Any
) -> None:
    text = "The first sentence is here. A second sentence follows it. And the third one ends it."
    async with running_worker(redis, tiny_engine) as worker:
        job_id = task_id()
        await worker.queue.enqueue(job_id, params(text, format="wav"), single_flight=False)
        job = await wait_final(worker.queue, job_id)
        assert job.status is Status.DONE, job.error
    audio = await worker.queue.result(job_id)
    assert audio is not None and job.captions is not None
    samples, _ = sf.read(io.BytesIO(audio))
    assert len(job.captions) >= 2 and [cue.index for cue in job.captions] == list(range(len(job.captions)))
    assert job.captions[0].start == 0 and job.captions[-1].end == len(samples), "the last cue ends where the audio does"
    assert all(cue.text for cue in job.captions)

    async with api_client(make_settings()) as (client, _app):
        submitted = await client.post("/v1/tts/submit", json={"text": "Cached, with captions.", "seed": 5})
        first = submitted.json()["task_id"]
        await worker_run(redis, tiny_engine, first, ResultCache(redis, make_settings().cache_config()))
        as_json = (await client.get(f"/v1/tts/result/{first}", params={"format": "json"})).json()
        assert as_json[-1]["end_s"] == as_json[-1]["end"] / SAMPLE_RATE
        again = await client.post("/v1/tts/submit", json={"text": "Cached, with captions.", "seed": 5})
        assert again.json()["cached"] is True
        cached = (await client.get(f"/v1/tts/result/{again.json()['task_id']}", params={"format": "json"})).json()
        assert cached == as_json, "a task answered from the cache has the captions of the synthesis"
        vtt_answer = await client.get(f"/v1/tts/result/{first}", params={"format": "vtt"})
        assert vtt_answer.headers["content-type"].startswith("text/vtt")
        assert len(webvtt.from_buffer(io.StringIO(vtt_answer.text))) == len(as_json)
        srt_answer = await client.get(f"/v1/tts/result/{first}", params={"format": "srt"})
        assert len(list(srt.parse(srt_answer.text))) == len(as_json)
        assert (await client.get(f"/v1/tts/result/{first}", params={"format": "ass"})).status_code == 422


async def worker_run(redis: Redis, engine: ChatTTSEngine, job_id: str, cache: ResultCache) -> None:
    """A real worker that stores its results in the result cache too (as ``worker.py`` does), until ``job_id`` is done."""
    worker = Worker(JobQueue(redis, queue_config(block_s=0.2)), engine, worker_config(), cache)
    running = asyncio.create_task(worker.run())
    try:
        assert (await wait_final(worker.queue, job_id)).status is Status.DONE
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, 30)


def test_json_cues_are_plain_json() -> None:
    listed = json.loads(json.dumps([cue.as_json(SAMPLE_RATE) for cue in cues()]))
    assert listed[0] | {"start_s": 0.0, "end_s": 1.5, "source_start": 0, "source_end": 20} == listed[0]
    assert listed[1]["source_start"] is None, "not in the caller's text as it is"
