"""Queue shards (``QUEUE_SHARDS``) on a real redis-server: where jobs go, how workers claim across shards, and that
the sweep, dead letters, counts, heartbeats, webhooks, the cache and the API cover every shard.

One server holds every shard here (the shards' tags are just names to it); ``tests/cluster/`` runs them on a
real Redis Cluster, where each shard lands on its own master.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import pytest
from redis.asyncio import Redis
from redis.crc import key_slot

from tests.conftest import FakeClock, api_client, claimed, params, settings
from ttsq.domain.jobs import Status
from ttsq.store.cache import CachedAudio, ResultCache
from ttsq.store.dead_letters import DeadLetters
from ttsq.store.deliveries import DeliveryQueue
from ttsq.store.keys import SLOTS, Keys, Shards, shard_label, spread_labels
from ttsq.store.queue import JobQueue, QueueFullError
from ttsq.store.rate_limit import RateLimiter, RateLimitExceeded
from ttsq.store.replies import Completed
from ttsq.store.task_ids import TaskIdSigner

SHARDS = 3


def sharded(redis: Redis, clock: FakeClock | None = None, **overrides: Any) -> JobQueue:
    return JobQueue(redis, settings(queue_shards=SHARDS, **overrides).queue_config(), clock=clock)


def on_shard(queue: JobQueue, index: int) -> str:
    """A job id on shard ``index`` (what the API's signer makes for a job placed there)."""
    label = queue.shards.all[index].label
    return f"{uuid.uuid4()}_{label}" if label else str(uuid.uuid4())


def placed(queue: JobQueue, cache_key: str) -> str:
    """A job id on the shard the API places a job with this cache key on."""
    return on_shard(queue, queue.shards.all.index(queue.shards.place(cache_key)))


def test_shard_tags_spread_over_equal_slot_ranges() -> None:
    """Shard 0 keeps the namespace's tag (a single-shard deployment's keys are unchanged); the others land each in
    another of N equal slot ranges, so a cluster with evenly split slots serves each from another master."""
    assert Shards("ttsq", 1).home.prefix == "{ttsq}:" and spread_labels("ttsq", 1) == []
    for count in (2, 3, 4, 8):
        shards = Shards("ttsq", count)
        assert shards.home.prefix == "{ttsq}:"
        ranges = {key_slot(keys.prefix[1:-2].encode()) * count // SLOTS for keys in shards.all}
        assert ranges == set(range(count)), f"{count} shards, one per slot range"


def test_a_job_id_names_its_shard_and_the_signature_covers_it() -> None:
    signer = TaskIdSigner(b"s" * 32)
    plain, labelled = signer.new(), signer.new("7")
    assert shard_label(plain) == "" and shard_label(labelled) == "7"
    assert signer.verify(plain) and signer.verify(labelled)
    forged = labelled.replace("_7.", "_3.")
    assert not signer.verify(forged), "moving a task to another shard's name breaks its signature"
    assert Shards("ttsq", 3).of(labelled).prefix == "{ttsq:7}:", "a label no longer in use still finds its keys"


def test_an_id_naming_no_shard_a_signer_could_make_is_looked_up_on_shard_0() -> None:
    """What a caller may put in a task id's place (the fuzzer's ``DELETE /v1/admin/dead-letters/ó_\\x18`` was a 500):
    a label that is not ASCII digits names no shard, so the id is looked for on shard 0 and answers 404."""
    shards = Shards("ttsq", 3)
    for hostile in ("\u00f3\u00d2\x0b\u00dd_\x18", "x_\u00b2", "x_7a", "x_-1", "x_{ttsq}", "x_.sig"):
        assert shards.of(hostile) is shards.home, hostile


async def test_identical_requests_meet_on_one_shard_and_others_spread(redis: Redis) -> None:
    queue = sharded(redis)
    homes = Counter(queue.shards.place(f"{n:064x}").label for n in range(300))
    assert len(homes) == SHARDS and min(homes.values()) > 60, f"cache keys spread over the shards: {homes}"
    key = "k" * 64
    shard = queue.shards.place(key)
    first = await queue.enqueue(placed(queue, key), params(cache_key=key), single_flight=True)
    again = await queue.enqueue(placed(queue, key), params(cache_key=key), single_flight=True)
    assert again.joined and again.job.id == first.job.id, "single-flight holds: the marker is on the key's shard"
    assert await redis.llen(shard.queue) == 1


async def test_workers_claim_from_every_shard_in_turn(redis: Redis) -> None:
    queue = sharded(redis)
    for index in range(SHARDS):
        for _ in range(4):
            await queue.enqueue(on_shard(queue, index), params(), single_flight=False)
    assert await queue.depth() == 12
    first_round = [shard_label((await claimed(queue)).job.id) for _ in range(SHARDS)]
    assert sorted(first_round) == sorted(keys.label for keys in queue.shards.all), "one from each shard, in turn"
    batch = await queue.leases.claim_more("w", 9)
    assert len(batch) == 9 and await queue.depth() == 0
    snapshot = await queue.stats.snapshot()
    assert snapshot.queued == 0 and snapshot.processing == 12 and snapshot.queued_by_shard == (0, 0, 0)


async def test_sweep_dead_letters_and_counts_cover_every_shard(redis: Redis, clock: FakeClock) -> None:
    queue = sharded(redis, clock, lease_s=10, max_attempts=1)
    lost, failed = on_shard(queue, 2), on_shard(queue, 1)
    await queue.enqueue(lost, params("lost"), single_flight=False)
    await queue.enqueue(failed, params("failed"), single_flight=False)
    claims = {claim.job.id: claim for claim in [await claimed(queue), await claimed(queue)]}
    await queue.leases.fail(claims[failed].job, "refused", retryable=False, cache_key=None)
    clock.advance(11)
    report = await queue.leases.sweep(5.0, "w")
    assert report.swept and report.requeued == 1, "the lapsed lease on shard 2 came back"
    assert await queue.position(lost) == 0
    assert [job.id for job in await DeadLetters(queue).newest()] == [failed] and await DeadLetters(queue).count() == 1
    assert (await DeadLetters(queue).get(failed)) is not None
    assert str(await DeadLetters(queue).requeue(failed)) == "requeued" and await queue.depth() == 2
    assert await DeadLetters(queue).purge() == 0


async def test_the_depth_and_owner_caps_hold_per_shard_as_shares(redis: Redis) -> None:
    queue = sharded(redis, max_queue_depth=6)
    for _ in range(2):
        await queue.enqueue(on_shard(queue, 0), params(), single_flight=False)
    with pytest.raises(QueueFullError):
        await queue.enqueue(on_shard(queue, 0), params(), single_flight=False)
    await queue.enqueue(on_shard(queue, 1), params(), single_flight=False, owner="key:a", max_per_owner=3)
    with pytest.raises(QueueFullError, match="MAX_QUEUED_PER_KEY=3"):  # a third of 3 on each shard
        await queue.enqueue(on_shard(queue, 1), params(), single_flight=False, owner="key:a", max_per_owner=3)
    await queue.enqueue(on_shard(queue, 2), params(), single_flight=False, owner="key:a", max_per_owner=3)


async def test_a_submit_pays_its_token_whichever_shard_its_job_goes_to(redis: Redis) -> None:
    queue = sharded(redis)
    limiter = RateLimiter(redis, queue.keys, 0.001, 2)
    for index in (1, 2):
        result = await queue.enqueue(on_shard(queue, index), params(), single_flight=False, charge=limiter.charge("c"))
        assert result.rate is not None and result.rate.remaining == 2 - index
    with pytest.raises(RateLimitExceeded):
        await queue.enqueue(on_shard(queue, 0), params(), single_flight=False, charge=limiter.charge("c"))
    assert await queue.depth() == 2, "a refused submit queues nothing"


async def test_heartbeats_webhooks_and_the_cache_follow_the_shards(redis: Redis, clock: FakeClock) -> None:
    queue = sharded(redis, clock)
    from ttsq.store.heartbeats import Heartbeats

    beats = Heartbeats(redis, queue.shards, 5, queue.clock)
    await beats.write("w1", {"worker_id": "w1"})
    assert [await redis.zscore(keys.workers, "w1") for keys in queue.shards.all] == [clock.now] * SHARDS
    assert await beats.live_count() == 1
    deliveries = DeliveryQueue(redis, settings(queue_shards=SHARDS).delivery_config(), clock=clock)
    job_id = on_shard(queue, 2)
    await queue.enqueue(job_id, params(callback_url="https://hooks.example/x"), single_flight=False)
    claim = await claimed(queue)
    assert await queue.leases.complete(claim.job, b"RIFF", "audio/wav", 1.0, 0.1, cache_key=None) is Completed.DONE
    assert await redis.llen(queue.shards.all[2].deliveries) == 1, "the webhook is due on the job's shard"
    lease = await deliveries.claim("d", 0)
    assert lease is not None and lease.job_id == job_id
    cache = ResultCache(redis, settings(queue_shards=SHARDS).cache_config())
    await cache.put("c" * 64, CachedAudio(b"audio", "audio/wav", 1.0))
    assert cache.l2_key("c" * 64).startswith(queue.shards.place("c" * 64).prefix)
    assert await redis.exists(cache.l2_key("c" * 64))


async def test_the_api_places_reads_and_cancels_across_shards(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(queue_shards=SHARDS, cache_enabled=False)) as (client, app):
        answers = [await client.post("/v1/tts/submit", json={"text": f"text {n}", "seed": n + 1}) for n in range(12)]
        ids = [answer.json()["task_id"] for answer in answers]
        labels = Counter(shard_label(task) for task in ids)
        assert len(labels) == SHARDS, f"jobs spread over the shards: {labels}"
        for task in ids:
            status = (await client.get(f"/v1/tts/tasks/{task}")).json()
            assert status["status"] == "queued" and status["queue_position"] is not None
        queue: JobQueue = app.state.service.tasks.queue
        claim = await claimed(queue)
        await queue.leases.complete(claim.job, b"RIFFaudio", "audio/wav", 1.0, 0.1, cache_key=None)
        assert (await client.get(f"/v1/tts/result/{claim.job.id}")).content == b"RIFFaudio"
        cancelled = await client.delete(f"/v1/tts/tasks/{ids[-1]}")
        assert cancelled.json()["status"] in ("cancelled", "cancelling")
        ready = (await client.get("/readyz")).json()
        assert ready["queue_depth"] == await queue.depth() == 10
        metrics = (await client.get("/metrics")).text
        assert 'ttsq_queue_shard_depth{shard="0"}' in metrics
    assert Keys("ttsq").queue == "{ttsq}:queue"
    assert (await queue.get(ids[0])) is not None and (await queue.get(ids[0])).status in (Status.QUEUED, Status.RUNNING)  # type: ignore[union-attr]
