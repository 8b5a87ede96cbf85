"""A document on a worker (:mod:`ttsq.runtime.documents`): its parts enter the engine a few at a time, and a next
attempt that resumes after the parts an earlier one published whole releases exactly what one attempt would have
released from there on — the same samples, at the same offsets, with the same chunk numbers — so a listener's stream
continues without a seam and the captions cover the whole document."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ttsq.domain.segments import Segment, parts
from ttsq.inference.base import ChunkAudio
from ttsq.runtime.assembly import JobAudio, Release
from ttsq.runtime.documents import DocumentFeed
from ttsq.store.streams import ResumePoint, completed_parts


def document(pauses: list[int | None]) -> list[Segment]:
    return [
        Segment(text=f"Part {number} says something.", speaker_seed=1, pause_samples=pause) for number, pause in enumerate(pauses)
    ]


def chunk(part: int, index: int, total: int, length: int) -> ChunkAudio:
    rng = np.random.default_rng(part * 100 + index)
    samples = rng.uniform(-0.5, 0.5, length).astype(np.float32)
    return ChunkAudio(index=index, total=total, samples=samples, text=f"part {part} chunk {index}")


def feed_all(audio: JobAudio, chunks: dict[int, list[ChunkAudio]], first: int = 0) -> list[Release]:
    released = []
    for part in sorted(chunks):
        if part < first:
            continue
        for piece in chunks[part]:
            released.extend(audio.add(piece, part))
    return released


def entries(releases: list[Release]) -> list[tuple[str, dict[str, bytes]]]:
    """The stream entries a worker publishes for ``releases`` (pcm, place, caption, part, parts done)."""
    found = []
    for number, release in enumerate(releases):
        pcm = (release.samples * 32767).astype("<i2").tobytes()
        fields = {
            "index": str(release.index).encode(),
            "total": str(release.total).encode(),
            "pcm": pcm,
            "start": b"-1",
            "end_at": b"-1",
            "text": b"",
            "at": str(release.at).encode(),
            "partial": b"0" if release.final else b"1",
            "part": str(release.part).encode(),
            "parts_done": str(release.parts_done).encode(),
        }
        found.append((f"{number}-0", fields))
    return found


layouts = st.lists(st.one_of(st.none(), st.integers(0, 500)), min_size=2, max_size=6)
chunk_counts = st.lists(st.integers(1, 3), min_size=6, max_size=6)


@settings(max_examples=60, deadline=None)
@given(layouts, chunk_counts, st.data())
def test_a_resumed_attempt_releases_exactly_what_one_attempt_releases_from_there(
    pauses: list[int | None], counts: list[int], data: st.DataObject
) -> None:
    segments = document(pauses)
    job_parts = parts(segments, seed=5)
    chunks = {
        part.number: [chunk(part.number, i, counts[part.number], 40 + 7 * i) for i in range(counts[part.number])]
        for part in job_parts
    }
    whole = JobAudio.of(job_parts)
    reference = feed_all(whole, chunks)
    published = data.draw(st.integers(1, len(reference)), label="releases the first attempt published before it died")
    point = ResumePoint()
    point.read(entries(reference[:published]))
    # It goes on after the last release that completed a part (what came after it, of a part begun, is spoken again).
    cut = max((i + 1 for i, r in enumerate(reference[:published]) if r.final and r.part == r.parts_done - 1), default=0)
    for index, timing in enumerate(whole.timings[: point.index]):  # the worker publishes each chunk's caption
        point.timings[index] = tuple(timing)  # type: ignore[assignment]
    again = JobAudio.of(job_parts, keep=False)
    if point.parts_done:
        again.resume(point.parts_done, point.index, point.at, point.captions())
        assert point.at == reference[cut - 1].at + reference[cut - 1].samples.size
    assert point.parts_done == (reference[cut - 1].parts_done if cut else 0)
    rest = feed_all(again, chunks, point.parts_done)
    assert [(r.index, r.at, r.final, r.part, r.parts_done) for r in rest] == [
        (r.index, r.at, r.final, r.part, r.parts_done) for r in reference[cut:]
    ]
    assert all(np.array_equal(a.samples, b.samples) for a, b in zip(rest, reference[cut:], strict=True))
    assert again.complete and again.length == whole.samples().size
    assert again.timings == whole.timings, "the captions cover the whole document"
    stream = entries(reference[:published]) + entries(rest)
    progress = [found for _, fields in stream if (found := completed_parts(fields)) is not None]
    assert progress == sorted(progress), "the parts done and their audio only grow, across the two attempts"
    assert progress[-1] == (len(job_parts), whole.samples().size)


def test_a_document_keeps_none_of_its_joined_audio() -> None:
    job_parts = parts(document([None, 100]), seed=1)
    audio = JobAudio.of(job_parts, keep=False)
    feed_all(audio, {0: [chunk(0, 0, 1, 50)], 1: [chunk(1, 0, 1, 60)]})
    assert audio.complete and audio.length == 50 + 100 + 60
    assert audio._pieces == []


def test_the_feed_keeps_its_limit_of_parts_in_the_engine_and_starts_after_what_was_published() -> None:
    job_parts = parts(document([None] * 5), seed=1)
    feed = DocumentFeed("doc", job_parts, limit=2)
    assert [part.number for part in feed.start(1)] == [1, 2]
    assert feed.ended(2, total=2) == [], "a part goes on until its last chunk ends"
    assert [part.number for part in feed.ended(2, total=2)] == [3]
    assert [part.number for part in feed.ended(1, total=1)] == [4]
    assert feed.ended(3, total=1) == [] and feed.in_engine == 1
    assert feed.ended(4, total=1) == [] and feed.in_engine == 0


def test_a_stream_without_a_whole_part_resumes_at_the_start() -> None:
    partial = [Release(0, 2, np.zeros(10, np.float32), at=0, final=False, part=0, parts_done=0)]
    point = ResumePoint()
    point.read(entries(partial))
    assert point.parts_done == 0 and point.index == 0 and point.at == 0
