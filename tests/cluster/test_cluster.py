"""ttsq on a real Redis Cluster (three masters, each with a replica): every part of the protocol through
redis-py's cluster client, outages answered 503 (never 500), and a slot migration and a master failover
under load with the chaos ledger's judgement.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import uvloop
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from tests.chaos.harness import background
from tests.chaos.ledger import Client, Expect, Figures, Requests, completions_in, judge, samples, settle_through_api
from tests.cluster.deployment import Processes
from tests.conftest import api_client, params, queue_config, settings, task_id
from tests.support.service import wait_for
from ttsq.domain.audio import encode_audio
from ttsq.store.connection import ClusterClient, ClusterPipelineClient, RedisClient, cluster_nodes, create_redis, torn_connection
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.keys import Keys
from ttsq.store.local_redis import free_port
from ttsq.store.local_topology import LocalCluster
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Completed, Failed
from ttsq.store.streams import AudioStreams

pytestmark = pytest.mark.e2e


@pytest.fixture
async def client(cluster: LocalCluster) -> AsyncIterator[RedisClient]:
    redis = create_redis(settings(redis_url=cluster.url()).redis_config())
    assert isinstance(redis, RedisCluster), "a redis+cluster:// URL makes a cluster client"
    yield redis
    await redis.aclose()


def raised(action: Callable[[], object]) -> BaseException:
    try:
        action()
    except BaseException as exc:  # noqa: BLE001 - the test looks at what was raised
        return exc
    raise AssertionError("nothing was raised")


def test_only_redis_pys_own_errors_of_a_torn_connection_count_as_an_outage() -> None:
    """Mid slot move, redis-py (before 8) raised ``RuntimeError`` and ``AttributeError`` from connections it
    had closed under running commands; ttsq did not count them as a Redis outage, and two workers exited. Raised in
    redis-py's code they are one now (a ``ConnectionError``); raised anywhere else, or a ``NotImplementedError``, they
    are bugs, and stay what they are."""
    in_redis_py = raised(lambda: key_slot(None))  # type: ignore[arg-type]  # redis-py's own code, handed a None
    assert isinstance(in_redis_py, AttributeError) and torn_connection(in_redis_py)
    assert not torn_connection(raised(lambda: None.writelines))  # type: ignore[attr-defined]  # raised here
    assert not torn_connection(raised(_not_implemented))
    assert not torn_connection(ValueError("not a connection's"))
    closed = uvloop.run(_write_to_a_closed_transport())  # uvloop's own RuntimeError, but called from here, not redis-py
    assert "the handler is closed" in str(closed) and not torn_connection(closed)


async def _write_to_a_closed_transport() -> BaseException:
    """What uvloop raises for a write on a transport closed under the writer (frames: asyncio's, uvloop's ``.pyx``)."""
    server = await asyncio.start_server(lambda _reader, _writer: None, "127.0.0.1", 0)
    try:
        _, writer = await asyncio.open_connection("127.0.0.1", server.sockets[0].getsockname()[1])
        writer.transport.close()
        await asyncio.sleep(0.05)
        return raised(lambda: writer.writelines([b"PING\r\n"]))
    finally:
        server.close()


def _not_implemented() -> None:
    key_slot(b"x")
    raise NotImplementedError


async def test_the_cluster_client_patches_one_slot_per_moved_instead_of_reconnecting_everything(client: RedisClient) -> None:
    """A slot move answers MOVED for every key of the slot; rebuilding the whole topology every few of them closed
    every connection, those under other running commands too (redis-py before 8)."""
    assert isinstance(client, ClusterClient) and client.reinitialize_steps == 0
    async with client.pipeline(transaction=False) as pipe:
        assert isinstance(pipe, ClusterPipelineClient)
        pipe.set("{ttsq}torn", b"1")
        pipe.get("{ttsq}torn")
        assert await pipe.execute() == [True, b"1"], "its pipelines are redis-py's, with the same conversion"


def test_a_cluster_url_names_its_seed_nodes_and_credentials() -> None:
    assert cluster_nodes("rediss+cluster://user:p%40ss@10.0.0.1:6379,10.0.0.2:6380/0") == (
        [("10.0.0.1", 6379), ("10.0.0.2", 6380)],
        "user",
        "p@ss",
    )
    with pytest.raises(ValueError, match="host:port"):
        cluster_nodes("redis+cluster://10.0.0.1")


async def test_the_whole_job_protocol_runs_on_a_cluster(client: RedisClient) -> None:
    """Every script's keys share one slot, so each runs on the master serving it; pipelines, transactions and the
    blocking wait go through the cluster client as they do through a plain one."""
    queue = JobQueue(client, queue_config(max_attempts=2))
    keyed, plain = task_id(), task_id()
    await queue.enqueue(keyed, params("keyed", cache_key="c" * 64), single_flight=True, owner="key:a", max_per_owner=5)
    joined = await queue.enqueue(task_id(), params("keyed", cache_key="c" * 64), single_flight=True, owner="key:b")
    assert joined.joined and joined.job.id == keyed
    await queue.enqueue(plain, params("plain"), single_flight=False)
    assert await queue.position(plain) == 1
    first = await queue.leases.claim("w", block_s=0.2)
    assert first is not None and first.job.id == keyed
    assert await AudioStreams(client, queue.shards, 60).publish(keyed, first.token, 0, 2, b"\1\1", fresh=True)
    assert (await queue.leases.renew_leases({keyed: first.token})).lost == set()
    done = await queue.leases.complete(first.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key="c" * 64)
    assert done is Completed.DONE and await queue.result(keyed) == b"RIFF"
    second = await queue.leases.claim_more("w", 4)
    assert [claim.job.id for claim in second] == [plain]
    assert await queue.leases.fail(second[0].job, "boom", retryable=False, cache_key=None) is Failed.FAILED
    assert [job.id for job in await DeadLetters(queue).newest()] == [plain]
    assert str(await DeadLetters(queue).requeue(plain)) == "requeued"
    snapshot = await queue.stats.snapshot()
    assert (snapshot.queued, snapshot.processing, snapshot.dead_letters) == (1, 0, 0)
    assert (await queue.leases.sweep(1.0, "w")).swept
    hit = task_id()
    await queue.record_done(hit, params("hit"), encode_audio(samples_of(0.01), "wav"), "audio/wav", 0.01)
    assert (await queue.get(hit)) is not None
    assert await queue.leases.claim("w", block_s=0.1) is not None, "the requeued dead letter"


def samples_of(seconds: float) -> npt.NDArray[np.float32]:
    """Silence: what the stand-in engine answers, and what a recorded cache hit may carry."""
    return np.zeros(int(seconds * 24000), dtype=np.float32)


async def test_an_unreachable_cluster_is_a_503_with_retry_after_never_a_500(make_settings: Any) -> None:
    """``RedisClusterException`` is not a ``RedisError``: it used to reach the catch-all and answer 500."""
    dead = f"redis+cluster://127.0.0.1:{free_port()}"
    config = make_settings(redis_url=dead, redis_connect_timeout_s=0.2, redis_socket_timeout_s=0.5, block_s=0.2)
    async with api_client(config) as (http, _):
        submitted = await http.post("/v1/tts/submit", json={"text": "hello", "seed": 1})
        ready = await http.get("/readyz")
    assert submitted.status_code == 503 and int(submitted.headers["retry-after"]) >= 1, submitted.text
    assert ready.status_code == 503


@pytest.fixture
def processes(tmp_path: Path, cluster: LocalCluster) -> Iterator[Processes]:
    deployment = Processes(tmp_path, cluster.url())
    yield deployment
    deployment.kill_all()


def test_a_slot_migration_and_a_failover_under_load_lose_nothing(processes: Processes, cluster: LocalCluster) -> None:
    """Jobs flow through an API and two workers while the queue's slot moves to another master (its keys
    migrated batch by batch: ASK and TRYAGAIN meanwhile), then while that master fails over to its replica
    (a planned failover: the master stops taking writes until its replica has caught up). Every acknowledged
    job is done, exactly once, with the stand-in engine's audio; a submit refused meanwhile is a 503 with
    Retry-After, never a 500."""
    api = processes.api("api")
    workers = [processes.worker(f"w{n}") for n in range(2)]
    client = Client(api, "cluster")
    requests = Requests(random.Random(7))
    figures = Figures("C1", "slot migration and failover under load")
    slot = key_slot(Keys("ttsq").queue.encode())

    def load(stop: threading.Event) -> None:
        while not stop.wait(0.03):
            client.submit(requests.new("Cluster"))

    with background(load, "cluster-load"):
        wait_for(lambda: len(client.acks) >= 20, 60, "jobs to flow")
        source = cluster.slot_owner(slot)
        target = next(node for node in cluster.masters() if node.port != source.port)
        moved = cluster.migrate_slot(slot, target)
        after_move = len(client.acks)
        wait_for(lambda: len(client.acks) >= after_move + 20, 60, "jobs to flow after the move")
        promoted = cluster.failover(target)
        after_failover = len(client.acks)
        wait_for(lambda: len(client.acks) >= after_failover + 20, 60, "jobs to flow after the failover")
    assert cluster.slot_owner(slot).port == promoted.port
    outcomes = settle_through_api(client, 120)
    silence = samples(encode_audio(samples_of(0.01), "wav"), "wav")
    reference = {outcome.request.identity: silence for outcome in outcomes.values()}
    judge(figures, outcomes, reference, Expect(acked=60, done=60), set(), client)  # the three waits above: 20 each
    finished = completions_in(processes.tmp / f"{worker.name}.log" for worker in workers)
    twice = [task for task in outcomes if finished[task] > 1]
    figures.faults = f"{moved} keys moved with slot {slot}; failed over to port {promoted.port}; {client.refused(503)} submits 503"
    print(figures.line())
    assert moved > 0, "the slot held keys to move"
    assert not figures.violations, "\n".join(figures.violations[:20])
    assert figures.lost == 0 and figures.done == len(outcomes) and not twice
    assert len(outcomes) >= 60
