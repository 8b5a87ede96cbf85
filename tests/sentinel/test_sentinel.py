"""Redis Sentinel for real: ``REDIS_URL=redis+sentinel://…`` finds the primary through the
sentinels, follows it across a failover, and ``SUBMIT_WAIT_REPLICAS`` makes an acknowledged job survive the loss of
its primary. Every server and sentinel is a real ``redis-server`` process (``ttsq.store.local_topology``)."""

from __future__ import annotations

import random
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import numpy as np
import pytest
import redis

from tests.chaos.harness import background
from tests.chaos.ledger import Client, Expect, Figures, Requests, judge, samples, settle_through_api
from tests.cluster.deployment import Processes
from tests.conftest import api_client, params, queue_config, task_id
from tests.conftest import settings as settings_of
from tests.support.service import wait_for
from ttsq.domain.audio import encode_audio
from ttsq.store.connection import NotReplicatedError, RedisClient, cluster_nodes, create_redis, sentinel_service
from ttsq.store.keys import Keys
from ttsq.store.local_topology import LocalSentinel
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Completed

pytestmark = pytest.mark.e2e


@pytest.fixture
async def client(sentinel: LocalSentinel) -> AsyncIterator[RedisClient]:
    connection = create_redis(settings_of(redis_url=sentinel.url()).redis_config())
    yield connection
    await connection.aclose()


def test_a_sentinel_url_names_its_sentinels_its_service_and_database() -> None:
    url = "redis+sentinel://app:s%40cret@10.0.0.1:26379,10.0.0.2:26380/mymaster/2"
    assert cluster_nodes(url) == ([("10.0.0.1", 26379), ("10.0.0.2", 26380)], "app", "s@cret")
    assert sentinel_service(url) == ("mymaster", 2)
    assert sentinel_service("redis+sentinel://h:26379/mymaster") == ("mymaster", 0)
    with pytest.raises(ValueError, match="service"):
        sentinel_service("redis+sentinel://h:26379")


def test_waiting_for_replicas_is_refused_with_a_redis_cluster() -> None:
    with pytest.raises(ValueError, match="SUBMIT_WAIT_REPLICAS"):
        settings_of(redis_url="redis+cluster://127.0.0.1:7000", submit_wait_replicas=1)


async def test_the_job_protocol_runs_on_the_primary_the_sentinels_name(client: RedisClient, sentinel: LocalSentinel) -> None:
    queue = JobQueue(client, queue_config())
    job_id = task_id()
    await queue.enqueue(job_id, params("through sentinel"), single_flight=False)
    with redis.Redis(port=sentinel.primary_port()) as primary:
        assert primary.exists(Keys("ttsq").job(job_id)), "the job is on the primary the sentinels name"
    claim = await queue.leases.claim("w", block_s=0.2)
    assert claim is not None and claim.job.id == job_id
    assert await queue.leases.complete(claim.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key=None) is Completed.DONE


async def test_an_acknowledged_job_is_on_the_replica_when_submit_waits_for_it(
    client: RedisClient, sentinel: LocalSentinel
) -> None:
    """``WAIT 1`` after the enqueue script, on the same connection: once ``enqueue`` returns, the replica has the job
    (read from the replica itself); asking for more replicas than there are is refused, not acknowledged."""
    replica = next(server for server in sentinel.servers if server.port != sentinel.primary_port())
    queue = JobQueue(client, queue_config(submit_wait_replicas=1, submit_wait_timeout_ms=5000))
    job_id = task_id()
    await queue.enqueue(job_id, params("replicated"), single_flight=False)
    with redis.Redis(port=replica.port) as node:
        assert node.exists(Keys("ttsq").job(job_id)), "WAIT returned, so the replica has the job"
    greedy = JobQueue(client, queue_config(submit_wait_replicas=2, submit_wait_timeout_ms=50))
    with pytest.raises(NotReplicatedError, match="reached 1 of 2 replica"):
        await greedy.enqueue(task_id(), params("on one replica only"), single_flight=False)


@pytest.fixture
def processes(tmp_path: Path, sentinel: LocalSentinel) -> Iterator[Processes]:
    deployment = Processes(tmp_path, sentinel.url(), env={"SUBMIT_WAIT_REPLICAS": "1", "SUBMIT_WAIT_TIMEOUT_MS": "2000"})
    yield deployment
    deployment.kill_all()


def test_a_primary_killed_under_load_loses_no_acknowledged_job_when_submit_waits(
    processes: Processes, sentinel: LocalSentinel
) -> None:
    """Jobs flow through an API (``SUBMIT_WAIT_REPLICAS=1``) and two workers while the primary is SIGKILLed; the
    sentinels promote the replica. Every acknowledged job was on that replica, so every one is done, with the
    stand-in engine's audio; submits meanwhile are 503 with Retry-After, never 500. A worker's write the dead
    primary took with it (a claim, a completion) is redone: the lease lapses and the job runs again, so a job may
    be completed twice across an unplanned failover — once acknowledged, it is never lost."""
    api = processes.api("api")
    workers = [processes.worker(f"w{n}") for n in range(2)]
    client = Client(api, "sentinel")
    requests = Requests(random.Random(19))
    figures = Figures("SE1", "primary SIGKILLed under load, submit waits for one replica")

    def load(stop: threading.Event) -> None:
        while not stop.wait(0.03):
            client.submit(requests.new("Sentinel"))

    with background(load, "sentinel-load"):
        wait_for(lambda: len(client.acks) >= 20, 60, "jobs to flow")
        old = sentinel.primary_port()
        promoted = sentinel.kill_primary()
        after = len(client.acks)
        wait_for(lambda: len(client.acks) >= after + 20, 90, "jobs to flow after the failover")
    assert promoted.port != old
    outcomes = settle_through_api(client, 120)
    silence = samples(encode_audio(np.zeros(240, dtype=np.float32), "wav"), "wav")  # the stand-in's 0.01 s
    reference = {outcome.request.identity: silence for outcome in outcomes.values()}
    judge(figures, outcomes, reference, Expect(acked=40, done=40), set(), client)
    figures.faults = f"primary on port {old} SIGKILLed, port {promoted.port} promoted; {client.refused(503)} submits 503"
    print(figures.line())
    assert all(worker.process.poll() is None for worker in workers), "the workers rode out the failover"
    assert not figures.violations, "\n".join(figures.violations[:20])
    assert figures.lost == 0 and figures.done == len(outcomes)



async def test_a_submit_that_no_replica_confirmed_is_a_503_with_retry_after(sentinel: LocalSentinel) -> None:
    """Not acknowledged, so never a 202 the client would rely on: a 503 it retries (never a 500)."""
    config = settings_of(redis_url=sentinel.url(), submit_wait_replicas=2, submit_wait_timeout_ms=50)
    async with api_client(config) as (http, _):
        submitted = await http.post("/v1/tts/submit", json={"text": "hello", "seed": 1})
    assert submitted.status_code == 503 and int(submitted.headers["retry-after"]) >= 1, submitted.text
