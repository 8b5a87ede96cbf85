"""bench.listening.realtime's listener arithmetic and capacity rule, on made-up arrival times (no servers, no clocks)."""

from __future__ import annotations

import math

import httpx
import pytest

from bench.gpu import report as gpu_report
from bench.listening.realtime import (
    Level,
    Playback,
    Stream,
    capacity,
    chunk_count,
    load,
    percentile,
    playback,
    summarize,
    texts,
)


def test_playback_starts_at_the_first_byte_and_counts_no_underrun_while_audio_is_buffered() -> None:
    # 1 s of audio at 0.5 s; the next second arrives at 1.4 s, before the first ran out (1.5 s).
    play = playback([(0.5, 1.0), (1.4, 1.0), (2.4, 0.5)])
    assert play == Playback(first_s=0.5, last_s=2.4, audio_s=2.5, underruns=0, stall_s=0.0)


def test_a_piece_after_the_buffer_ran_out_is_an_underrun_and_its_wait_the_stall() -> None:
    # Buffered until 0.5 + 0.25 = 0.75 s; the next piece comes at 1.0 s: 0.25 s of silence, then playback resumes from
    # there (buffered until 1.0 + 0.25 = 1.25 s), so a piece at 1.2 s is on time (buffered until 1.75 s) and one at
    # 2.0 s stalls 0.25 s more.
    play = playback([(0.5, 0.25), (1.0, 0.25), (1.2, 0.5), (2.0, 0.1)])
    assert play.underruns == 2
    assert play.stall_s == pytest.approx(0.25 + 0.25)
    assert play.first_s == 0.5 and play.last_s == 2.0 and play.audio_s == pytest.approx(1.1)


def test_a_piece_arriving_exactly_when_the_buffer_ends_is_not_an_underrun() -> None:
    assert playback([(0.0, 1.0), (1.0, 1.0)]).underruns == 0


def test_empty_pieces_neither_start_playback_nor_count() -> None:
    assert playback([(0.1, 0.0), (0.3, 1.0)]).first_s == 0.3
    assert playback([]) == Playback(None, None, 0.0, 0, 0.0)


def test_percentile_is_nearest_rank_so_p99_of_few_streams_is_the_worst() -> None:
    assert percentile([0.1, 0.5, 0.2], 99) == 0.5
    assert percentile([0.1, 0.5, 0.2], 50) == 0.2
    assert math.isnan(percentile([], 50))


def _stream(first: float, last: float, audio: float, underruns: int = 0) -> Stream:
    return Stream(60, Playback(first, last, audio, underruns, 0.1 * underruns))


def test_summarize_takes_latency_and_rtf_over_the_streams_that_succeeded() -> None:
    level = summarize(3, [_stream(0.2, 1.0, 2.0), _stream(0.4, 3.0, 2.0, underruns=2), Stream(50, None, "HTTP 429")])
    assert level.requests == 3 and level.success == pytest.approx(2 / 3)
    assert level.first_p50_s == 0.2 and level.first_p99_s == 0.4
    assert level.rtf_p99 == 1.5  # 3.0 s to the last byte for 2.0 s of audio
    assert level.underruns_per_stream == 1.0
    assert level.errors == ["HTTP 429"]
    assert not level.meets


def _level(n: int, success: float = 1.0, first_p99: float = 0.5, rtf_p99: float = 0.5) -> Level:
    return Level(n, 10, success, first_p99 / 2, first_p99, rtf_p99, 0.0, 0.0, 10.0)


def test_capacity_is_the_largest_n_meeting_every_bound_with_every_smaller_n_meeting_them_too() -> None:
    assert capacity([_level(1), _level(2), _level(4), _level(8, first_p99=1.2)]) == 4
    assert capacity([_level(4, rtf_p99=1.01), _level(1), _level(2)]) == 2  # order of measurement does not matter
    assert capacity([_level(1), _level(2, success=0.9), _level(4)]) == 1  # a noisy pass above a failure is no capacity
    assert capacity([_level(1, first_p99=1.0, rtf_p99=1.0)]) == 1  # the bounds are inclusive
    assert capacity([_level(1, first_p99=1.5)]) == 0
    assert capacity([]) == 0


def test_texts_are_one_to_three_sentences_of_40_to_250_characters_and_the_same_for_a_seed() -> None:
    drawn = texts(7, 50)
    assert drawn == texts(7, 50) and drawn != texts(8, 50)
    assert all(40 <= len(text) <= 250 for text in drawn)
    assert {chunk_count(text) for text in drawn} >= {1, 2}
    assert len(set(drawn)) > 20


def test_the_gpu_criterion_counts_streams_with_first_audio_within_300_ms_and_no_underrun() -> None:
    def level(n: int, first_p99: float = 0.2, underruns: float = 0.0) -> dict[str, float]:
        return {
            "streams": n,
            "requests": 10,
            "success": 1.0,
            "first_p99_s": first_p99,
            "rtf_p99": 0.5,
            "underruns_per_stream": underruns,
        }

    levels = [level(64), level(128), level(256), level(320, first_p99=0.4)]
    assert gpu_report.realtime_capacity(levels, gpu_report.REALTIME_FIRST_AUDIO_S) == 256
    assert gpu_report.realtime_capacity([level(64), level(128, underruns=0.1), level(256)], 0.3) == 64
    results = {"dry_run": False, "model": {"size_arg": "full"}, "phases": {"realtime": {"data": {"checkpoints": {
        "model": {"ttsq": {"levels": levels}}}}}}}  # fmt: skip
    [row] = gpu_report.realtime_criteria(results)
    assert row["met"] is True and row["measured"].startswith("256 streams") and row["note"] == ""


async def test_every_listener_opens_a_stream_even_when_its_first_gap_outlasts_the_window() -> None:
    """A window over before any gap ends (0 s): each listener still plays one stream, and only one, so a short window (the
    GPU benchmark's dry run, the untimed first stream) never measures nothing."""
    opened: list[str] = []

    async def open_stream(client: httpx.AsyncClient, text: str, seed: int) -> Stream:
        opened.append(text)
        return Stream(len(text), Playback(0.1, 0.2, 1.0, 0, 0.0))

    streams = await load(open_stream, 3, 0.0, 0.01, 7, 5.0)
    assert len(streams) == len(opened) == 3 and all(stream.ok for stream in streams)
