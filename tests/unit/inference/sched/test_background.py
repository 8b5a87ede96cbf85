"""The ranked background thread: what waits runs lowest rank first, so a newcomer's row is not queued behind others'."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from ttsq.inference.sched.background import RankedExecutor


def test_waiting_calls_run_lowest_rank_first_and_ties_in_submission_order() -> None:
    executor = RankedExecutor("test-ranked")
    gate = threading.Event()
    ran: list[str] = []
    blocker: Future[object] = executor.submit((0,), gate.wait)  # holds the thread while the others queue
    queued = [((2, 0), "late"), ((1, 5), "b"), ((1, 5), "c"), ((1, 0), "a")]
    futures: list[Future[object]] = [executor.submit(rank, ran.append, name) for rank, name in queued]
    gate.set()
    for future in [blocker, *futures]:
        future.result(timeout=10)
    executor.shutdown()
    assert ran == ["a", "b", "c", "late"]


def test_a_failure_reaches_the_caller_and_the_thread_goes_on() -> None:
    executor = RankedExecutor("test-ranked")
    failed = executor.submit(0, int, "not a number")
    after = executor.submit(1, int, "7")
    with pytest.raises(ValueError):
        failed.result(timeout=10)
    assert after.result(timeout=10) == 7
    executor.shutdown()
    with pytest.raises(RuntimeError):
        executor.submit(0, int, "1")
