"""Jobs made of segments (:mod:`ttsq.domain.segments`): how they are cut into the engine's requests, how their audio
is joined (exact pauses, gains, silences, marks: :mod:`ttsq.runtime.assembly`), their captions with speakers, their
cache key, each part's engine request, and a real worker speaking one — each line in its own voice, every other
line's audio bit-equal when one line's speaker changes (ttsq's decoder, batch-invariant)."""

from __future__ import annotations

import asyncio
import html
import io
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import srt
import webvtt
from pydantic import ValidationError
from redis.asyncio import Redis

from tests.conftest import fault_config, queue_config, task_id
from tests.integration.runtime.test_worker import running_worker, wait_final, wait_until
from ttsq.domain.audio import SAMPLE_RATE, ChunkJoiner
from ttsq.domain.cache_key import cache_key
from ttsq.domain.captions import segment_captions
from ttsq.domain.captions import srt as to_srt
from ttsq.domain.captions import vtt as to_vtt
from ttsq.domain.jobs import Status, TTSParams
from ttsq.domain.sampling import Sampling
from ttsq.domain.segments import Mark, Segment, gain_factor, part_seed, parts
from ttsq.inference.base import ChunkAudio
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.engines.faults import FaultInjectingEngine
from ttsq.runtime.assembly import JobAudio, PartLayout, marks_of, part_key, parts_of_key
from ttsq.runtime.speakers import Speakers, part_request, synthesis_request

GAP = ChunkJoiner().gap


def seg(text: str, seed: int = 1, **fields: Any) -> Segment:
    return Segment(text=text, speaker_seed=seed, **fields)


def dialogue(*lines: tuple[str, int, str], **fields: Any) -> TTSParams:
    """A job of segments: (speaker, speaker seed, text) per line."""
    segments = [seg(text, voice_seed, speaker=who) for who, voice_seed, text in lines]
    return TTSParams(text="\n".join(s.text for s in segments), segments=segments, seed=fields.pop("seed", 9), **fields)


# ---- the parts ------------------------------------------------------------------------------------------------------


def test_a_plain_job_is_one_part_with_its_own_seed_and_first_chunk() -> None:
    params = TTSParams(text="Hello there. How are you?", speaker_seed=3, seed=77, first_chunk=4)
    (only,) = params.parts()
    assert (only.text, only.seed, only.first_chunk, only.pause, only.silent) == (params.text, 77, 4, None, False)
    assert only.source.speaker_seed == 3 and only.source.sampling is None


def test_segments_are_cut_at_their_marks_and_never_merged_across() -> None:
    text = "Hello there, friend. And goodbye."
    marks = [Mark(name="start", offset=0), Mark(name="mid", offset=13), Mark(name="end", offset=len(text))]
    found = parts([seg("One."), seg(text, marks=marks), seg("Three.")], seed=5)
    assert [(p.segment, p.index, p.text) for p in found] == [
        (0, 0, "One."),
        (1, 0, "Hello there, "),
        (1, 1, "friend. And goodbye."),
        (2, 0, "Three."),
    ]
    assert [p.number for p in found] == [0, 1, 2, 3]
    assert (found[1].marks_at_start, found[2].marks_at_start, found[2].marks_at_end) == (("start",), ("mid",), ("end",))
    assert found[1].marks_at_end == () and found[3].marks_at_start == ()


def test_a_parts_seed_depends_on_the_jobs_seed_and_its_place_alone() -> None:
    first = parts([seg("A.", 1), seg("B.", 2), seg("C.", 3)], seed=5)
    other = parts([seg("A.", 1), seg("Different words.", 8, pause_samples=10), seg("C.", 3)], seed=5)
    assert [p.seed for p in first] == [p.seed for p in other], "other segments' voices and texts change no seed"
    assert first[0].seed == 5 == part_seed(5, 0, 0), "the first part samples as the plain text would"
    assert len({p.seed for p in first}) == 3 and part_seed(6, 1, 0) != first[1].seed
    assert [p.first_chunk for p in parts([seg("A."), seg("B.")], seed=5, first_chunk=3)] == [3, 0]


def test_a_segment_with_nothing_to_say_is_silence_and_a_mark_past_its_text_is_refused() -> None:
    found = parts([seg(""), seg(" … "), seg("Words.")], seed=1)
    assert [p.silent for p in found] == [True, True, False]
    with pytest.raises(ValidationError, match="past the end of its text"):
        seg("Hi.", marks=[Mark(name="x", offset=4)])
    with pytest.raises(ValidationError):
        seg("Hi.", gain_db=float("inf"))
    with pytest.raises(ValidationError):
        seg("Hi.", pause_samples=-1)


def test_a_job_of_segments_is_stored_and_read_back_as_it_was() -> None:
    params = dialogue(("Alice", 1, "Hi."), ("Bob", 2, "Hello."))
    params.segments[1].sampling = Sampling(speed=7)  # type: ignore[index]
    params.segments[1].marks = [Mark(name="m", offset=0)]  # type: ignore[index]
    assert TTSParams.model_validate_json(params.model_dump_json()) == params


# ---- each part's engine request -------------------------------------------------------------------------------------


def test_each_part_is_asked_in_its_segments_voice_and_sampling(tiny_engine: ChatTTSEngine) -> None:
    speakers = Speakers(tiny_engine)
    params = dialogue(("Alice", 1, "Hi."), ("Bob", 2, "Hello."), seed=4)
    params.segments[1].sampling = Sampling(speed=8, temperature=0.5)  # type: ignore[index]
    first, second = (part_request(params, part, speakers) for part in params.parts())
    assert first.speaker == tiny_engine.speaker_from_seed(1) and second.speaker == tiny_engine.speaker_from_seed(2)
    assert first.sampling == params.sampling and second.sampling == Sampling(speed=8, temperature=0.5)
    assert (first.text, first.seed, second.text, second.seed) == ("Hi.", 4, "Hello.", part_seed(4, 1, 0))
    plain = TTSParams(text="Hi.", speaker_seed=1, seed=4, first_chunk=2)
    assert synthesis_request(plain, speakers) == part_request(plain, plain.parts()[0], speakers)
    assert synthesis_request(plain, speakers).first_chunk == 2


def test_a_parts_key_names_its_job_and_part() -> None:
    assert part_key("job.1", 0) == "job.1" and part_key("job.1", 3) == "job.1#3"
    assert parts_of_key("job.1", {"job.1"}) == ("job.1", 0)
    assert parts_of_key("job.1#3", {"job.1"}) == ("job.1", 3)


# ---- joining the parts ---------------------------------------------------------------------------------------------


def chunk(index: int, total: int, length: int, value: float = 0.5, text: str = "x") -> ChunkAudio:
    return ChunkAudio(index, total, np.full(length, value, dtype=np.float32), text)


def test_a_pause_is_exactly_its_samples_of_silence_in_place_of_the_usual_gap() -> None:
    audio = JobAudio([PartLayout(), PartLayout(pause=16_800), PartLayout()])
    released = audio.add(chunk(0, 1, 1000), part=2) + audio.add(chunk(0, 2, 800), part=1)
    assert released == [], "nothing before the first part"
    released = audio.add(chunk(0, 1, 500), part=0) + audio.add(chunk(1, 2, 700), part=1)
    assert [r.index for r in released] == [0, 1, 2, 3], "one order over the whole job"
    joined = audio.samples()
    first, second, third, fourth = audio.timings
    assert second.start - first.end == 16_800 and not joined[first.end : second.start].any()
    assert third.start - second.end == GAP and fourth.start - third.end == GAP
    assert joined.size == 500 + 16_800 + 800 + GAP + 700 + GAP + 1000
    assert [t.part for t in audio.timings] == [0, 1, 1, 2]
    assert b"".join(r.samples.tobytes() for r in released) == joined.tobytes()


def test_silent_parts_are_silence_at_the_start_between_and_at_the_end_and_spans_place_them() -> None:
    silence = [PartLayout(pause=pause, silent=True) for pause in (100, 50, 30)]
    audio = JobAudio([silence[0], PartLayout(), silence[1], PartLayout(), silence[2]])
    audio.add(chunk(0, 1, 400), part=3)
    audio.add(chunk(0, 1, 200), part=1)
    joined = audio.samples()
    first, second = audio.timings
    assert (first.start, first.end) == (100, 300) and not joined[:100].any()
    assert second.start - first.end == 50, "an explicit silence replaces the usual gap; none is added after it"
    assert joined.size == 100 + 200 + 50 + 400 + 30 and not joined[-30:].any()
    assert audio.spans == {0: (0, 100), 1: (100, 300), 2: (300, 350), 3: (350, 750), 4: (750, 780)}


def test_a_gain_scales_a_parts_samples_streamed_and_stored_alike() -> None:
    factor = gain_factor(-6.0)
    assert factor == pytest.approx(0.501, abs=1e-3) and gain_factor(None) == 1.0
    audio = JobAudio([PartLayout(), PartLayout(gain=factor)])
    samples = np.linspace(0.1, 0.9, 2_000, dtype=np.float32)
    out = audio.add_piece(ChunkAudio(0, 1, samples[:1500], "a"), part=1)
    assert out == [], "the second part waits for the first"
    out += audio.add(ChunkAudio(0, 1, samples, "a"), part=0)
    out += audio.add_piece(ChunkAudio(0, 1, samples[1500:], "a"), part=1) + audio.add(ChunkAudio(0, 1, samples, "a"), part=1)
    joined = audio.samples()
    assert b"".join(r.samples.tobytes() for r in out) == joined.tobytes(), "what is streamed is what is stored"
    first, second = audio.timings
    mid = (first.end - first.start) // 2
    assert joined[second.start + mid] == pytest.approx(joined[first.start + mid] * factor, rel=1e-6)


def test_totals_only_grow_and_a_late_total_that_disagrees_is_refused() -> None:
    audio = JobAudio([PartLayout(), PartLayout(), PartLayout()])
    out = audio.add(chunk(0, 2, 100), part=0)
    assert [r.total for r in out] == [4], "parts not begun count as one each"
    out = audio.add(chunk(0, 3, 100), part=1) + audio.add(chunk(1, 2, 100), part=0)
    assert [r.total for r in out] == [6, 6] and audio.total is None
    with pytest.raises(ValueError, match="says 1 chunks"):
        audio.add(chunk(1, 1, 100), part=1)
    with pytest.raises(ValueError, match="has no chunks"):
        JobAudio([PartLayout(silent=True), PartLayout()]).add(chunk(0, 1, 10), part=0)


def test_marks_stand_where_speech_begins_or_ends() -> None:
    text = "One two. Three four."
    segments = [seg(""), seg(text, marks=[Mark(name="a", offset=0), Mark(name="b", offset=9), Mark(name="c", offset=len(text))])]
    segments[0].marks = [Mark(name="silence", offset=0)]
    segments[0].pause_samples = 240
    found = parts(segments, seed=1)
    audio = JobAudio.of(found)
    audio.add(chunk(0, 1, 300), part=2)
    audio.add(chunk(0, 1, 500), part=1)
    first, second = audio.timings
    assert marks_of(found, audio.spans) == [("silence", 240), ("a", first.start), ("b", second.start), ("c", second.end)]
    assert first.start == 240


# ---- captions ---------------------------------------------------------------------------------------------------


def test_captions_carry_each_lines_speaker_and_offsets_in_its_own_text() -> None:
    timings = [(0, 24_000, "Hi there.", 0), (26_880, 48_000, "Hello, Alice.", 1), (50_880, 72_000, "Bye <now> & then.", 0)]
    cues = segment_captions(["Hi there. Bye <now> & then.", "Hello, Alice."], timings, ["Alice", "Bob"], [("m", 26_880)])
    assert [(c.segment, c.speaker, c.source_start) for c in cues] == [(0, "Alice", 0), (1, "Bob", 0), (0, "Alice", 10)]
    assert cues[0].marks is None and cues[1].marks is not None and cues[1].marks[0].sample == 26_880
    parsed = webvtt.from_buffer(io.StringIO(to_vtt(cues, SAMPLE_RATE)))
    assert [c.voice for c in parsed.captions] == ["Alice", "Bob", "Alice"]
    assert html.unescape(parsed.captions[2].text) == "Bye <now> & then.", "the words are escaped, not read as tags"
    assert [s.content for s in srt.parse(to_srt(cues, SAMPLE_RATE))][1] == "Bob: Hello, Alice."
    shown = cues[1].as_json(SAMPLE_RATE)
    assert shown["speaker"] == "Bob" and shown["marks"] == [{"name": "m", "sample": 26_880, "s": 1.12}]
    assert "speaker" not in segment_captions(["Hi."], [(0, 10, "Hi.", 0)], plain=True)[0].as_json(SAMPLE_RATE)


# ---- the cache key ---------------------------------------------------------------------------------------------


def test_everything_of_a_segment_that_changes_the_audio_or_its_captions_changes_the_key() -> None:
    def key(**changes: Any) -> str | None:
        params = dialogue(("Alice", 1, "Hi."), ("Bob", 2, "Hello."))
        for name, value in changes.items():
            setattr(params.segments[1], name, value)  # type: ignore[index]
        return cache_key(params, "tiny")

    base = key()
    changes: list[dict[str, Any]] = [
        {"text": "Hello!"},
        {"speaker_seed": 3},
        {"speaker_embedding": "emb"},
        {"sampling": Sampling(speed=6)},
        {"pause_samples": 2400},
        {"gain_db": 3.0},
        {"speaker": "Carol"},
        {"marks": [Mark(name="m", offset=0)]},
        {"voice_owner": "tenant:x"},
    ]
    keys = [key(**change) for change in changes]
    assert base is not None and None not in keys and len({base, *keys}) == len(changes) + 1
    assert key() == base
    plain = TTSParams(text="Hi.", speaker_seed=1, seed=9)
    assert cache_key(plain, "tiny") != cache_key(dialogue(("Alice", 1, "Hi.")), "tiny")


# ---- a real worker ------------------------------------------------------------------------------------------------


def lines_audio(samples: np.ndarray, captions: list[Any], segment: int) -> np.ndarray:
    """One line's speech in a result: from its first cue's start to its last cue's end."""
    cues = [cue for cue in captions if cue.segment == segment]
    return samples[cues[0].start : cues[-1].end]


async def test_changing_one_lines_speaker_leaves_every_other_lines_audio_bit_equal(
    redis: Redis, invariant_engine: DecoderEngine
) -> None:
    lines = [("Alice", 1, "Hi there, how are you today?"), ("Bob", 2, "I am well. Thank you."), ("Alice", 1, "Good to hear.")]
    changed = [lines[0], ("Carol", 3, lines[1][2]), lines[2]]
    async with running_worker(redis, invariant_engine) as worker:
        ids = [task_id(), task_id()]
        for job_id, spoken in zip(ids, (lines, changed), strict=True):
            await worker.queue.enqueue(job_id, dialogue(*spoken, format="pcm"), single_flight=False)
        jobs = [await wait_final(worker.queue, job_id) for job_id in ids]
        assert [job.status for job in jobs] == [Status.DONE, Status.DONE], [job.error for job in jobs]
        results = [await worker.queue.result(job_id) for job_id in ids]
    audio = [np.frombuffer(result or b"", dtype="<i2") for result in results]
    captions = [job.captions or [] for job in jobs]
    assert [cue.speaker for cue in captions[1] if cue.segment == 1] and all(
        cue.speaker == "Carol" for cue in captions[1] if cue.segment == 1
    )
    for segment in (0, 2):
        assert np.array_equal(lines_audio(audio[0], captions[0], segment), lines_audio(audio[1], captions[1], segment))
    assert not np.array_equal(lines_audio(audio[0], captions[0], 1), lines_audio(audio[1], captions[1], 1))


async def test_a_worker_speaks_a_job_of_segments_with_pauses_gains_and_marks(redis: Redis, tiny_engine: ChatTTSEngine) -> None:
    """ChatTTS's own loop (the reference backend): lines of different voices never share a call, the job still ends
    whole, with each pause exact and the marks placed."""
    seen: list[set[str | None]] = []
    segments = [
        seg("The first line is spoken here.", 1, speaker="Alice", marks=[Mark(name="start", offset=0)]),
        seg("And the second answers it.", 2, speaker="Bob", pause_samples=12_000, gain_db=-6.0),
        seg("", 1, pause_samples=2_400, marks=[Mark(name="after", offset=0)]),
    ]
    params = TTSParams(text="…", segments=segments, seed=3, format="wav")
    async with running_worker(redis, tiny_engine) as worker:
        assert worker._batcher is not None
        worker._batcher.hook = lambda requests: seen.append({request.speaker for request in requests})
        job_id = task_id()
        await worker.queue.enqueue(job_id, params, single_flight=False)
        job = await wait_final(worker.queue, job_id)
        assert job.status is Status.DONE, job.error
        result = await worker.queue.result(job_id)
    samples, rate = sf.read(io.BytesIO(result or b""), dtype="int16")
    assert rate == SAMPLE_RATE and seen and all(len(voices) == 1 for voices in seen), "one voice per ChatTTS call"
    cues = job.captions or []
    alice = [cue for cue in cues if cue.segment == 0]
    bob = [cue for cue in cues if cue.segment == 1]
    assert {cue.speaker for cue in alice} == {"Alice"} and {cue.speaker for cue in bob} == {"Bob"}
    assert bob[0].start - alice[-1].end == 12_000 and not samples[alice[-1].end : bob[0].start].any()
    assert samples.size == bob[-1].end + 2_400 and not samples[-2_400:].any(), "the trailing break is exact silence"
    marks = {mark.name: mark.sample for cue in cues for mark in cue.marks or ()}
    assert marks == {"start": 0, "after": samples.size}


async def test_a_failing_line_fails_its_dialogue_and_takes_every_other_line_out_of_the_engine(
    redis: Redis, invariant_engine: DecoderEngine
) -> None:
    long = " ".join(["This line goes on for a good many sentences, one after another."] * 6)
    engine = FaultInjectingEngine(invariant_engine, fault_config("raise", "BOOM"))
    async with running_worker(redis, engine, queue_config(block_s=0.2, max_attempts=1)) as worker:
        job_id = task_id()
        failing = dialogue(("A", 1, long), ("B", 2, "BOOM it fails."), ("A", 1, long))
        await worker.queue.enqueue(job_id, failing, single_flight=False)
        job = await wait_final(worker.queue, job_id)
        assert job.status is Status.FAILED and "injected fault" in (job.error or ""), job.error
        assert worker._batcher is not None
        left = await asyncio.wrap_future(worker._thread.call(worker._batcher.requests))
        assert [key for key in left if key.startswith(job_id)] == [], "the other lines left the engine with it"


async def test_a_dialogue_cancelled_while_it_runs_leaves_the_engine_whole(redis: Redis, invariant_engine: DecoderEngine) -> None:
    long = " ".join(["This line goes on for a good many sentences, one after another."] * 6)
    held = FaultInjectingEngine(invariant_engine, fault_config("hang", "good many", hang_s=60))  # runs until cancelled
    async with running_worker(redis, held) as worker:
        job_id = task_id()
        await worker.queue.enqueue(job_id, dialogue(("A", 1, long), ("B", 2, long)), single_flight=False)

        async def running() -> bool:
            return job_id in worker._in_flight

        await wait_until(running)
        job = await worker.queue.get(job_id)
        assert job is not None
        await worker.queue.cancel(job, None, "test")
        final = await wait_final(worker.queue, job_id)
        held.release()
        assert final.status is Status.CANCELLED
        assert worker._batcher is not None
        left = await asyncio.wrap_future(worker._thread.call(worker._batcher.requests))
        assert [key for key in left if key.startswith(job_id)] == []
