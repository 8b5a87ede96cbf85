"""What a session's store calls meet while a Redis Cluster moves a slot or fails a master over: a right answer, or an
outage error the caller retries (``STORE_ERRORS``) — never a hang, never a wrong answer — and a blocking read
(the listener's ``XREAD``) that a failover unblocks goes on on the promoted replica instead of failing.
Three masters, each with a replica, all real ``redis-server`` processes (``ttsq.store.local_topology``)."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis
from redis.crc import key_slot

from tests.conftest import params, queue_config, settings, task_id
from ttsq.store.connection import STORE_ERRORS, RedisClient, create_redis
from ttsq.store.local_redis import RedisServer
from ttsq.store.local_topology import LocalCluster
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Cancelled

pytestmark = pytest.mark.e2e


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[RedisClient]:
    connection = create_redis(settings(redis_url=cluster.url()).redis_config())
    yield connection
    await connection.aclose()


def blocked_on(node: RedisServer, command: str) -> bool:
    """Whether a client of ``node`` is blocked in ``command`` now (``CLIENT LIST``: flag ``b``)."""
    with redis.Redis(port=node.port) as direct:
        return any(entry["cmd"] == command and "b" in entry["flags"] for entry in direct.client_list())


async def until(check: Any, what: str) -> None:
    for _ in range(600):
        if await asyncio.to_thread(check):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_read_blocked_on_a_master_that_fails_over_goes_on_on_the_promoted_replica(
    client: RedisClient, cluster: LocalCluster
) -> None:
    """``CLUSTER FAILOVER`` answers the reads blocked on the old master ``UNBLOCKED`` without running them; on a7e2e39
    that reached the listener as an error (an outage it backed off from). Now the read is sent again, follows
    ``MOVED`` to the promoted replica, and sees what is written there."""
    stream = JobQueue(client, queue_config()).keys.stream(task_id())
    first = await client.xadd(stream, {"n": "0"})
    master = cluster.owner(stream)
    reading: asyncio.Future[Any] = asyncio.ensure_future(client.xread({stream: first}, block=3000))
    await until(lambda: blocked_on(master, "xread"), "the read to block on the master")
    promoted = await asyncio.to_thread(cluster.failover, master)
    await client.xadd(stream, {"n": "1"})
    reply = await reading  # on a7e2e39: ResponseError UNBLOCKED … (master -> replica?)
    assert reply == [] or reply is None or reply[0][1][0][1] == {b"n": b"1"}
    again: Any = await client.xread({stream: first})
    assert [fields for _id, fields in again[0][1]] == [{b"n": b"1"}]
    assert promoted.port != master.port


async def test_a_read_blocked_on_a_slot_that_moves_goes_on_on_its_new_master(client: RedisClient, cluster: LocalCluster) -> None:
    """A slot moved to another master while a read is blocked on one of its streams: the read is redirected
    (``MOVED``) and goes on there."""
    stream = JobQueue(client, queue_config()).keys.stream(task_id())
    first = await client.xadd(stream, {"n": "0"})
    source = cluster.owner(stream)
    target = next(node for node in cluster.masters() if node.port != source.port)
    reading: asyncio.Future[Any] = asyncio.ensure_future(client.xread({stream: first}, block=3000))
    await until(lambda: blocked_on(source, "xread"), "the read to block on the slot's master")
    slot = key_slot(stream.encode())
    await asyncio.to_thread(cluster.migrate_slot, slot, target)
    await client.xadd(stream, {"n": "1"})
    reply = await reading
    assert reply == [] or reply is None or reply[0][1][0][1] == {b"n": b"1"}
    again: Any = await client.xread({stream: first})
    assert [fields for _id, fields in again[0][1]] == [{b"n": b"1"}]
    await asyncio.to_thread(cluster.migrate_slot, slot, source)


async def test_submit_read_and_cancel_during_slot_moves_answer_right_or_raise_an_outage(
    client: RedisClient, cluster: LocalCluster
) -> None:
    """The queue's slot moved away and back, a few keys per ``MIGRATE`` with pauses (so it stays half-moved a while),
    while jobs are enqueued, read back, cancelled, and their streams read: each call answers right (an enqueued job
    is there, a cancel finds it) or raises an outage the caller retries; after the moves every call succeeds
    (the client has relearned where the slot is)."""
    queue = JobQueue(client, queue_config())
    for n in range(60):  # keys for the moves to carry, so that they take a while
        await queue.enqueue(task_id(), params(f"filler {n}"), single_flight=False)
    slot = key_slot(queue.keys.queue.encode())
    home = cluster.slot_owner(slot)
    away = next(node for node in cluster.masters() if node.port != home.port)
    outcomes: collections.Counter[str] = collections.Counter()
    wrong: list[str] = []
    moving = asyncio.Event()

    async def call(what: str, action: Any) -> tuple[bool, Any]:
        try:
            result = await action
        except STORE_ERRORS:
            outcomes[f"{what}: outage"] += 1
            return False, None
        outcomes[f"{what}: ok"] += 1
        return True, result

    async def load() -> None:
        while not moving.is_set():
            job_id = task_id()
            enqueued, _ = await call("enqueue", queue.enqueue(job_id, params("during the move"), single_flight=False))
            if not enqueued:
                continue
            read, job = await call("get", queue.get(job_id))
            if read and job is None:
                wrong.append(f"enqueued {job_id}, then read as missing")
            if job is not None:
                cancelled, outcome = await call("cancel", queue.cancel(job, None))
                if cancelled and outcome is not Cancelled.CANCELLED:
                    wrong.append(f"cancel of queued {job_id}: {outcome}")
            await call("xread", client.xread({queue.keys.stream(job_id): "0"}, block=50))

    loads = [asyncio.create_task(load()) for _ in range(2)]
    try:
        await asyncio.to_thread(cluster.migrate_slot, slot, away, 3, 0.02)
        await asyncio.to_thread(cluster.migrate_slot, slot, home, 3, 0.02)
    finally:
        moving.set()
        await asyncio.gather(*loads)
    assert wrong == []
    assert outcomes["enqueue: ok"] > 0 and outcomes["cancel: ok"] > 0, outcomes
    after = task_id()
    await queue.enqueue(after, params("after the moves"), single_flight=False)
    job = await queue.get(after)
    assert job is not None and await queue.cancel(job, None) is Cancelled.CANCELLED
