"""A stream's continuations in the queue: a realtime session's chunk after its first waits in the continuation lane,
claimed before every new stream's first chunk, and a worker without room for new streams still claims it; fair
queuing among tenants' new work is what it was (docs/fairness.md). On a real redis-server, the test's pinned clock."""

from __future__ import annotations

from typing import Any

from redis.asyncio import Redis

from tests.conftest import FakeClock, params, task_id
from ttsq.domain.jobs import Priority, StreamPlace
from ttsq.store.queue import JobQueue

SWEEP = 1.0


async def queued(
    queue: JobQueue, tenant: str, chunk: int | None = None, *, priority: Priority = "interactive", stream: str = "s1"
) -> str:
    """One job of ``tenant``: with ``chunk``, that chunk of stream ``stream`` (0: the stream's first)."""
    job_id = task_id()
    place = None if chunk is None else StreamPlace(id=stream, chunk=chunk, buffered_s=1.5)
    await queue.enqueue(job_id, params(job_id, stream=place), single_flight=False, tenant=tenant, priority=priority)
    return job_id


async def claim_ids(queue: JobQueue, count: int, *, new: int | None = None) -> list[str]:
    return [claim.job.id for claim in await queue.leases.claim_more("w", count, new=new)]


async def test_a_continuation_queued_after_new_streams_first_chunks_is_claimed_first(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    firsts = [await queued(queue, tenant, 0, stream=f"new-{tenant}") for tenant in ("A", "B", "C", "A")]
    plain = await queued(queue, "B")
    before = await queue.position(firsts[0])
    assert before is not None
    continuation = await queued(queue, "C", 1)
    assert (await queue.get(continuation)).lane == "continuation"  # type: ignore[union-attr]
    assert await queue.position(continuation) == 0, "its estimate: next"
    assert await queue.position(firsts[0]) == before + 1, "a new stream's first chunk waits for the continuation"
    taken = await claim_ids(queue, 6)
    assert taken[0] == continuation
    assert set(taken[1:]) == {*firsts, plain}


async def test_fair_queuing_among_new_work_is_unchanged_around_continuations(make_queue: Any) -> None:
    """A's backlog and B's one job take turns as before; the continuations of both go first, in their own round robin."""
    queue: JobQueue = make_queue()
    backlog = [await queued(queue, "A", 0, stream=f"a{n}") for n in range(4)]
    (late,) = [await queued(queue, "B", 0, stream="b0")]
    going_on = [await queued(queue, "A", 1, stream="a-on"), await queued(queue, "A", 2, stream="a-on")]
    other = await queued(queue, "B", 1, stream="b-on")
    taken = await claim_ids(queue, 8)
    assert taken[:3] == [going_on[0], other, going_on[1]], "continuations first, A and B in turn"
    assert taken[3:] == [backlog[0], late, *backlog[1:]], "then new work in the round robin as without them"


async def test_a_claim_without_room_for_new_streams_still_takes_continuations(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    first = await queued(queue, "A", 0, stream="x")
    continuations = [await queued(queue, "B", 1, stream="y"), await queued(queue, "A", 3, stream="z")]
    assert set(await claim_ids(queue, 5, new=0)) == set(continuations), "continuations only, past the stream room"
    assert await claim_ids(queue, 5, new=0) == [], "no new stream is started"
    assert await claim_ids(queue, 5, new=1) == [first]


async def test_the_new_work_limit_counts_only_new_streams(make_queue: Any) -> None:
    queue: JobQueue = make_queue()
    firsts = [await queued(queue, "A", 0, stream=f"n{n}") for n in range(3)]
    continuation = await queued(queue, "A", 1)
    taken = await claim_ids(queue, 5, new=2)
    assert taken == [continuation, *firsts[:2]], "the continuation, then two new ones: the limit"


async def test_a_batch_sessions_chunks_stay_in_the_batch_lane(make_queue: Any) -> None:
    """Continuations come ahead of interactive work only where the job asked to be interactive: batch keeps its lane."""
    queue: JobQueue = make_queue()
    urgent = await queued(queue, "A")
    batch = await queued(queue, "A", 1, priority="batch")
    assert (await queue.get(batch)).lane == "batch"  # type: ignore[union-attr]
    assert await claim_ids(queue, 2) == [urgent, batch]


async def test_a_batch_backlog_keeps_its_share_beside_continuations(make_queue: Any) -> None:
    """Continuations count in the interactive streak: one batch claim after INTERACTIVE_BURST of them, as before."""
    queue: JobQueue = make_queue(interactive_burst=2)
    bulk = [await queued(queue, "bulk", priority="batch") for _ in range(3)]
    going = [await queued(queue, "A", n + 1, stream=f"s{n}") for n in range(4)]
    taken = await claim_ids(queue, 7)
    assert taken == [going[0], going[1], bulk[0], going[2], going[3], bulk[1], bulk[2]]


async def test_a_continuation_whose_worker_was_lost_goes_back_to_its_lane_and_a_cancel_takes_it_out(
    make_queue: Any, redis: Redis, clock: FakeClock
) -> None:
    queue: JobQueue = make_queue(lease_s=10)
    lost = await queued(queue, "A", 1)
    first = await queued(queue, "A", 0, stream="other")
    assert await claim_ids(queue, 1) == [lost]
    clock.advance(11)
    assert (await queue.leases.sweep(SWEEP, "sweeper")).requeued == 1
    assert await queue.waiting("A", "continuation") == [lost]  # type: ignore[arg-type]
    cancelled = await queued(queue, "B", 2)
    job = await queue.get(cancelled)
    assert job is not None
    await queue.cancel(job, None)
    assert await redis.lrange(queue.keys.ring("continuation"), 0, -1) == [b"A"], "B left the ring with its last job"
    assert await queue.depth() == 2
    assert await claim_ids(queue, 3) == [lost, first]
