"""Acknowledged means on a replica: a primary and its replica, failed over by hand one step at a time
(``ttsq.store.local_topology.LocalReplicated``), to hold the moment a planned failover's clients live through — the
replica promoted, the old primary not told yet and still taking writes it will discard.

With ``SUBMIT_WAIT_REPLICAS=auto`` (the default) every answer that acknowledges a task — a submit, a cache hit, a
single-flight join — waits for the replica the primary has; in that moment each is refused (503 + Retry-After)
instead of being answered and then lost. ``/readyz`` says so while the primary has lost its replica, and a pooled
connection left on a primary that became a replica reconnects instead of failing every write it carries."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
from redis.asyncio import Redis

from tests.cluster.deployment import Processes
from tests.conftest import api_client, queue_config, settings
from tests.support.redis_proxy import RedisProxy, redis_proxy
from tests.support.redis_server import server_binary
from tests.support.service import wait_for
from tests.unit.api.test_cache_api import warm_cache
from ttsq.store.connection import RedisClient, RedisConfig, create_redis
from ttsq.store.local_redis import RedisServer
from ttsq.store.local_topology import LocalReplicated, start_redis_sentinel, start_replicated
from ttsq.store.queue import JobQueue

pytestmark = pytest.mark.e2e

CACHED = {"text": "Cached before the failover.", "voice": "zh_female", "format": "mp3"}


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[LocalReplicated]:
    local = start_replicated(tmp_path / "redis", replicas=1, binary=server_binary())
    yield local
    local.stop()


@pytest.fixture
def guarded(tmp_path: Path) -> Iterator[LocalReplicated]:
    local = start_replicated(tmp_path / "redis", replicas=1, binary=server_binary(), guarded=True)
    yield local
    local.stop()


def api_settings(server: RedisServer, tmp_path: Path, **overrides: Any) -> Any:
    return settings(redis_url=server.url, model="tiny", cache_dir=tmp_path / "cache", **overrides)


async def stored_on(server: RedisServer, task_id: str) -> bool:
    """Whether ``server`` has the task's record (read from that server alone)."""
    connection = Redis(port=server.port)
    try:
        return await JobQueue(connection, queue_config()).get(task_id) is not None
    finally:
        await connection.aclose()


def refused(response: httpx.Response) -> bool:
    return response.status_code == 503 and int(response.headers.get("retry-after", "0")) >= 1


async def test_by_default_a_submit_waits_for_the_replica_its_primary_has(replicated: LocalReplicated, tmp_path: Path) -> None:
    """``auto``: the primary has a replica, so a submit is answered once the replica has the job. A replica that does
    not confirm it in time (stopped: SIGSTOP) means no acknowledgement — 503 + Retry-After, which the client retries."""
    replica = replicated.replicas[0]
    async with api_client(api_settings(replicated.primary, tmp_path)) as (http, _):
        first = await http.post("/v1/tts/submit", json={"text": "Before the stall.", "seed": 1})
        assert first.status_code == 202, first.text
        assert await stored_on(replica, first.json()["task_id"])
        replica.process.send_signal(signal.SIGSTOP)
        try:
            stalled = await http.post("/v1/tts/submit", json={"text": "During the stall.", "seed": 2})
        finally:
            replica.process.send_signal(signal.SIGCONT)
        assert refused(stalled), (stalled.status_code, stalled.text)
        after = await http.post("/v1/tts/submit", json={"text": "After the stall.", "seed": 3})
        assert after.status_code == 202, after.text
        assert await stored_on(replica, after.json()["task_id"])


@pytest.mark.parametrize(
    ("replicas", "wait"),
    [(1, {}), (1, {"submit_wait_replicas": 1}), (2, {})],
    ids=["one-replica-auto", "one-replica-wait-1", "two-replicas-auto"],
)
async def test_nothing_acknowledged_in_a_failover_window_is_lost(
    tmp_path: Path, replicas: int, wait: dict[str, Any]
) -> None:
    """A replica is promoted; the old primary, not told yet, still takes writes — and with two replicas the other one
    still follows it and confirms them. A cache hit, a new submit and a join of a job in flight are all refused there
    (on a7e2e39, by default, the cache hit was answered 200 ``cached`` and the submit 202, and both were gone once the
    old primary followed the new one; with ``SUBMIT_WAIT_REPLICAS=1`` the submit was refused but the cache hit still
    answered, and lost; waiting for one replica of two, the remaining one confirmed both); ``/readyz`` says the primary
    has lost a replica. Once the old primary is demoted, every task that was acknowledged is on the new one."""
    replicated = start_replicated(tmp_path / "redis", replicas=replicas, binary=server_binary())
    try:
        await failover_window(replicated, tmp_path, wait)
    finally:
        replicated.stop()


async def failover_window(replicated: LocalReplicated, tmp_path: Path, wait: dict[str, Any]) -> None:
    old, new = replicated.primary, replicated.replicas[0]
    async with api_client(api_settings(old, tmp_path, **wait)) as (http, app):
        await warm_cache(app, CACHED, b"ID3-cached-audio")
        cached = await http.post("/v1/tts/submit", json=CACHED)
        assert cached.status_code == 200 and cached.json()["cached"] is True, cached.text
        in_flight = {"text": "Queued before the failover.", "voice": "zh_female"}
        queued = await http.post("/v1/tts/submit", json=in_flight)
        assert queued.status_code == 202, queued.text
        assert (await http.get("/readyz")).status_code == 200

        replicated.detach(new)
        window = {
            "cache hit": await http.post("/v1/tts/submit", json=CACHED),
            "submit": await http.post("/v1/tts/submit", json={"text": "Submitted in the window.", "seed": 5}),
            "join": await http.post("/v1/tts/submit", json=in_flight),
        }
        not_ready = await http.get("/readyz")
    replicated.demote(old, new)

    acknowledged = [cached, queued, *(answer for answer in window.values() if answer.status_code in (200, 202))]
    lost = [answer.json()["task_id"] for answer in acknowledged if not await stored_on(new, answer.json()["task_id"])]
    assert lost == [], f"acknowledged, then lost with the old primary: {lost}"
    assert all(refused(answer) for answer in window.values()), {what: answer.status_code for what, answer in window.items()}
    assert not_ready.status_code == 503, not_ready.text


async def test_readiness_fails_while_the_primary_has_lost_its_replica(guarded: LocalReplicated, tmp_path: Path) -> None:
    """The API's ``/readyz`` (its submits would all be refused) and a worker's (the guarded primary refuses its claims'
    writes: ``NOREPLICAS``) turn 503 when the replica dies, and 200 again once it is back and synced."""
    replica = guarded.replicas[0]
    processes = Processes(tmp_path, guarded.primary.url)
    try:
        worker = processes.worker("w1")
        async with api_client(api_settings(guarded.primary, tmp_path)) as (http, _):
            assert (await http.get("/readyz")).status_code == 200
            replica.process.kill()
            replica.process.wait()
            assert (await http.get("/readyz")).status_code == 503
            assert refused(await http.post("/v1/tts/submit", json={"text": "No replica.", "seed": 1}))
            await asyncio.to_thread(wait_for, lambda: worker.get("/readyz").status_code == 503, 60, "the worker to be unready")
            assert "NOREPLICAS" in worker.get("/readyz").json()["claiming"]

            replica.restart()
            await asyncio.to_thread(
                wait_for, lambda: worker.get("/readyz").status_code == 200, 60, "the worker to be ready again"
            )
            ready = await http.get("/readyz")
            assert ready.status_code == 200 and ready.json()["replicas"] == 1, ready.text
            assert (await http.post("/v1/tts/submit", json={"text": "Replica back.", "seed": 1})).status_code == 202
    finally:
        processes.kill_all()


@pytest.fixture
async def pooled(replicated: LocalReplicated) -> AsyncIterator[tuple[RedisClient, RedisProxy]]:
    async with redis_proxy(replicated.primary.port) as proxy:
        client = create_redis(RedisConfig(proxy.url, 5.0, 2.0, 8, 2))
        yield client, proxy
        await client.aclose()


async def test_a_pooled_connection_left_on_a_demoted_primary_reconnects(
    replicated: LocalReplicated, pooled: tuple[RedisClient, RedisProxy]
) -> None:
    """A managed Redis's endpoint (a proxy here) moves to the promoted replica after a failover; connections opened
    before still lead to the old primary, a replica now, which answers every write ``READONLY`` — and a command
    blocked on it when it was demoted ``UNBLOCKED``. redis-py kept such a connection, so each write that borrowed it
    failed (isolated 503s, minutes later), and the blocked read failed. Now each reconnects, to wherever the endpoint
    leads, within the same command."""
    client, proxy = pooled
    keys = [f"{{ttsq}}:pool-test:{n}" for n in range(8)]
    await asyncio.gather(*(client.blpop([key], timeout=0.2) for key in keys))  # eight connections, all open at once
    old, new = replicated.primary, replicated.replicas[0]
    blocked: asyncio.Future[Any] = asyncio.ensure_future(client.blpop(["{ttsq}:pool-test:blocked"], timeout=2))
    await asyncio.to_thread(wait_for, lambda: blocked_clients(old) == 1, 30, "the read to block on the primary")
    replicated.detach(new)
    proxy.upstream_port = new.port  # new connections reach the new primary; the pooled ones still the old
    replicated.demote(old, new)
    assert await blocked is None, "the blocked read went on on the new primary"  # a7e2e39: ResponseError UNBLOCKED
    outcomes = await asyncio.gather(*(client.blpop([key], timeout=0.2) for key in keys), return_exceptions=True)
    assert [outcome for outcome in outcomes if isinstance(outcome, BaseException)] == []
    written = await asyncio.gather(*(client.set(key, "after") for key in keys), return_exceptions=True)
    assert written == [True] * len(keys)


def blocked_clients(server: RedisServer) -> int:
    with redis.Redis(port=server.port) as direct:
        return int(direct.info("clients")["blocked_clients"])


async def test_pooled_connections_leave_an_old_primary_that_lost_its_replicas_for_the_new_one(tmp_path: Path) -> None:
    """``SENTINEL FAILOVER`` with two replicas, guarded as shipped (``min-replicas-to-write 1``): once the sentinels have
    moved both replicas to the promoted one, the old primary — not demoted yet, for up to ten seconds — refuses every
    write (``NOREPLICAS``) while the new primary takes them. Connections opened before the failover lead to the old
    one; on a7e2e39 each write on them failed until the demotion — and so did each new connection: redis-py asked the
    sentinels ``SENTINEL MASTERS``, which names the old primary until the failover has ended. Now each gives itself
    up and reconnects to the primary the sentinels name (``GET-MASTER-ADDR-BY-NAME``)."""
    local = start_redis_sentinel(tmp_path / "sentinel", replicas=2, sentinels=3, binary=server_binary())
    client = create_redis(settings(redis_url=local.url()).redis_config())
    try:
        keys = [f"{{ttsq}}:failover-test:{n}" for n in range(8)]
        await asyncio.gather(*(client.blpop([key], timeout=0.2) for key in keys))  # eight connections to the primary
        old = local.primary()
        with redis.Redis(port=local.sentinel_ports[0]) as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", local.service)

        def refusing_old_taking_new() -> bool:
            new = local.primary_port()
            return new != old.port and refuses_writes(old) and not refuses_writes(local.node(new))

        await asyncio.to_thread(wait_for, refusing_old_taking_new, 60, "the old primary to refuse writes, the new to take them")
        written = await asyncio.gather(*(client.set(key, "after") for key in keys), return_exceptions=True)
        still_refusing = await asyncio.to_thread(refuses_writes, old)
    finally:
        await client.aclose()
        local.stop()
    assert still_refusing, "the old primary was demoted meanwhile: the test saw nothing (run it again)"
    assert written == [True] * len(keys), [str(outcome) for outcome in written]


def refuses_writes(server: RedisServer) -> bool:
    with redis.Redis(port=server.port) as direct:
        try:
            direct.set("{ttsq}:failover-test:probe", "1")
        except redis.ResponseError as exc:
            return "NOREPLICAS" in str(exc) or "READONLY" in str(exc)
    return False
