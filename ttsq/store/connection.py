"""Connecting to Redis the same way in every process, and checking that it will not lose jobs.

``REDIS_URL``'s scheme says what Redis is there:

* ``redis://`` / ``rediss://`` (TLS): one server (or a provider's single endpoint);
* ``redis+cluster://`` / ``rediss+cluster://``: a Redis Cluster, named by one or more of its nodes
  (``redis+cluster://user:password@host1:6379,host2:6379``): redis-py's ``RedisCluster`` follows its
  slots, ``MOVED``/``ASK`` redirections and failovers. Every key ttsq uses carries a hash tag, so each
  script's keys live in one slot (:mod:`ttsq.store.keys`).
* ``redis+sentinel://`` / ``rediss+sentinel://``: a primary managed by Redis Sentinel, named by its
  sentinels and its service name (``redis+sentinel://user:password@s1:26379,s2:26379/mymaster/0``):
  redis-py asks the sentinels where the primary is on every new connection, so after a failover the
  next connection goes to the promoted replica, and a connection still on the demoted one is dropped
  (``READONLY`` becomes a connection error: an outage the caller backs off from).

The socket timeout bounds every command, so a dead Redis surfaces as an error within seconds
instead of hanging a request; blocking reads stay shorter than it (validated in settings). On one server
(or a Sentinel's primary) a command that finds every pooled connection busy waits for one, up to the same
timeout, instead of opening more than ``REDIS_MAX_CONNECTIONS``.
Retries are few and short: the API turns a Redis outage into ``503 Retry-After`` rather than
holding the client while it waits. :data:`STORE_ERRORS` is what an outage raises, the cluster
client's own exceptions (``RedisClusterException`` is not a ``RedisError``) included.

A failover unblocks the commands blocked on the old primary (``UNBLOCKED … instance state changed``) without running
them: on one address (:class:`_FollowsThePrimary`) and on a cluster (:meth:`ClusterClient.execute_command`) they are
sent again, to the primary now, so a blocking read rides through a failover as a pause.

A Redis Cluster being resharded (a slot ``MIGRATING``/``IMPORTING``, its keys ``MIGRATE`` batch by batch, then
``SETSLOT … NODE``) is a pause, not an outage: commands meet ``ASK``, ``TRYAGAIN`` and ``MOVED``, which redis-py's
cluster client follows or retries, and a command it cannot finish in time (``TTL exhausted``) is a ``RedisError``:
the caller's outage path (503 + Retry-After at the API, a paused or retried loop in the worker).
:class:`ClusterClient` keeps it that way: it does not rebuild its whole topology every few ``MOVED`` (which made
redis-py up to 7 close every connection, those under other running commands included), and a command whose
connection was closed under it anyway, which redis-py surfaces as ``RuntimeError`` or ``AttributeError``,
raises a ``ConnectionError`` instead, as the outage it is.
"""

from __future__ import annotations

import asyncio
import os
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import PurePath
from typing import Any, Literal
from urllib.parse import unquote, urlsplit

import redis
from redis.asyncio import BlockingConnectionPool, Redis
from redis.asyncio.cluster import ClusterNode, ClusterPipeline, RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection, SSLConnection, UnixDomainSocketConnection
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelManagedConnection, SentinelManagedSSLConnection
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

RedisClient = Redis | RedisCluster
"""A connection to one Redis server or to a Redis Cluster: every store module takes either."""

STORE_ERRORS = (RedisError, RedisClusterException)
"""What a Redis outage raises: redis-py's errors, and the cluster client's own (not ``RedisError``s)."""

CLUSTER_SCHEMES = {"redis+cluster": False, "rediss+cluster": True}
"""URL schemes that name a Redis Cluster, and whether they speak TLS."""

SENTINEL_SCHEMES = {"redis+sentinel": False, "rediss+sentinel": True}
"""URL schemes that name a Sentinel-managed primary, and whether its servers speak TLS (the sentinels do not)."""


@dataclass(frozen=True)
class RedisConfig:
    """How every process connects. Built from settings by ``settings.py`` (``REDIS_*``)."""

    url: str
    socket_timeout_s: float
    connect_timeout_s: float
    max_connections: int
    retries: int
    """Quick retries of a command after a connection error or a timeout, before the error surfaces."""


def create_redis(config: RedisConfig) -> RedisClient:
    """A client with bytes replies (audio is binary), bounded timeouts and a few quick retries; a cluster
    client when the URL names a Redis Cluster."""
    common: dict[str, Any] = {
        "decode_responses": False,
        "socket_timeout": config.socket_timeout_s,
        "socket_connect_timeout": config.connect_timeout_s,
        "max_connections": config.max_connections,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), config.retries),
        "retry_on_error": [RedisConnectionError, RedisTimeoutError],
    }
    scheme = urlsplit(config.url).scheme
    if scheme in CLUSTER_SCHEMES:
        return _cluster(config.url, tls=CLUSTER_SCHEMES[scheme], **common)
    if scheme in SENTINEL_SCHEMES:
        return _sentinel_primary(config.url, tls=SENTINEL_SCHEMES[scheme], **common)
    # A full pool makes a caller wait for a connection (up to the socket timeout) rather than open more: a burst of
    # requests (a thousand listeners opening at once) then borrows the same few connections in turn instead of leaving
    # a thousand open in the pool once it is over.
    pool = BlockingConnectionPool.from_url(
        config.url,
        timeout=config.socket_timeout_s,
        health_check_interval=30,
        connection_class=_PRIMARY_CONNECTIONS.get(scheme, _PrimaryConnection),
        **common,
    )
    return Redis.from_pool(pool)


_DEMOTED_UNBLOCKED = "UNBLOCKED force unblock from blocking operation, instance state changed"
"""What a primary turned into a replica answers a command blocked on it (``XREAD``, ``BLMOVE``)."""

_LEFT_BEHIND = ("READONLY You can't write against a read only replica", "NOREPLICAS", _DEMOTED_UNBLOCKED)
"""Answers that say the server behind a connection is no primary that takes writes now — a replica, a primary demoted
under its clients, or one whose replicas have left it (``min-replicas-to-write``), as the old primary's are the
moment its replica is promoted. Inside a script the answer comes wrapped (``Error running script …: -READONLY …``),
so it is looked for anywhere in the message."""


def left_behind(exc: ResponseError) -> bool:
    """Whether ``exc`` is one of the :data:`_LEFT_BEHIND` answers."""
    return isinstance(exc, ReadOnlyError) or any(marker in str(exc) for marker in _LEFT_BEHIND)


class _FollowsThePrimary:
    """A pooled connection that gives itself up once the server behind it cannot take writes as a primary any more:
    it became a replica (a managed Redis's endpoint moved to the promoted replica, a primary demoted under its
    clients), or it has lost the replicas ``min-replicas-to-write`` asks for — as the old primary has the moment a
    failover promotes its replica, seconds before the sentinels demote it.

    redis-py keeps such a connection: ``READONLY`` and ``NOREPLICAS`` are answers, not connection errors (and inside a
    script not even a ``ReadOnlyError``), so each write that borrowed it failed (503) for as long as it stayed in the
    pool: every write of a failover's ten seconds on the connections already open, where the new primary took them
    after one; and minutes later, whenever a burst reached the connections at the bottom of the pool. Here it is
    closed and the answer raised as a ``ConnectionError``, which the client's retries (``REDIS_RETRIES``) take: they
    reconnect — to wherever the address leads now, or, behind Sentinel, to the primary the sentinels name now. The
    command had no effect (the server refused it), so sending it again is safe."""

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError as exc:
            if not left_behind(exc):
                raise
            await self.disconnect()  # type: ignore[attr-defined]
            raise RedisConnectionError(f"the server takes no writes as a primary now ({exc}); reconnecting") from exc


class _PrimaryConnection(_FollowsThePrimary, Connection):
    pass


class _PrimarySSLConnection(_FollowsThePrimary, SSLConnection):
    pass


class _PrimaryUnixConnection(_FollowsThePrimary, UnixDomainSocketConnection):
    pass


_PRIMARY_CONNECTIONS: dict[str, type[AbstractConnection]] = {
    "redis": _PrimaryConnection,
    "rediss": _PrimarySSLConnection,
    "unix": _PrimaryUnixConnection,
}


class _AsksTheSentinels(_FollowsThePrimary):
    """A Sentinel-managed connection that asks the sentinels where the primary is whenever it connects again.

    redis-py's asks only when the pool hands it out (``connect``): a command's own retries reconnect through
    ``connect_check_health``, to the address the connection had — the old primary, after a failover (a known redis-py
    bug) — so a stale connection failed its command with every retry, one isolated 503 per connection left in the
    pool, until the pool dropped it. Here every reconnection goes where the sentinels say."""

    _resolved = False
    """Set while redis-py's own ``connect_to`` connects to the address it just asked for (no need to ask again)."""

    async def connect_to(self, address: tuple[str, int]) -> None:
        self._resolved = True
        try:
            await super().connect_to(address)  # type: ignore[misc]
        finally:
            self._resolved = False

    async def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        pool = self.connection_pool  # type: ignore[attr-defined]
        if not self.is_connected and not self._resolved and pool.is_master:  # type: ignore[attr-defined]
            self.host, self.port = await pool.get_master_address()
        await super().connect_check_health(check_health=check_health, retry_socket_connect=retry_socket_connect)  # type: ignore[misc]


class _SentinelPrimaryConnection(_AsksTheSentinels, SentinelManagedConnection):
    pass


class _SentinelPrimarySSLConnection(_AsksTheSentinels, SentinelManagedSSLConnection):
    pass


def cluster_nodes(url: str) -> tuple[list[tuple[str, int]], str | None, str | None]:
    """The seed nodes (host, port), user name and password of a ``redis+cluster://`` URL (or the sentinels of a
    ``redis+sentinel://`` one)."""
    rest = url.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
    credentials, _, hosts = rest.rpartition("@")
    username, _, password = credentials.partition(":")
    nodes = []
    for address in hosts.split(","):
        host, _, port = address.strip().rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"a cluster URL names nodes as host:port, comma-separated; got {address!r}")
        nodes.append((host.strip("[]"), int(port)))
    return nodes, unquote(username) or None, unquote(password) or None


_REDIS_PY = os.path.dirname(redis.__file__ or "") + os.sep
_EVENT_LOOP = os.path.dirname(asyncio.__file__ or "") + os.sep


def _in_event_loop(filename: str) -> bool:
    """Whether a frame is the event loop's transport code: asyncio's, or uvloop's (Cython frames: ``uvloop/….pyx``)."""
    return filename.startswith(_EVENT_LOOP) or "uvloop" in PurePath(filename).parts


def torn_connection(exc: BaseException) -> bool:
    """Whether ``exc`` is redis-py meeting a connection closed under a running command: a ``RuntimeError``
    ("unable to perform operation on <TCPTransport closed=True>; the handler is closed", from uvloop) or an
    ``AttributeError`` (``'NoneType' object has no attribute 'writelines'``: the connection's writer already
    dropped), raised in redis-py's code or in the event loop's transport under it. One raised anywhere else is a
    bug, not an outage; ``NotImplementedError`` and ``RecursionError`` (kinds of ``RuntimeError`` too) never are."""
    if not isinstance(exc, RuntimeError | AttributeError) or isinstance(exc, NotImplementedError | RecursionError):
        return False
    frames = [frame.filename for frame in traceback.extract_tb(exc.__traceback__)]
    while frames and _in_event_loop(frames[-1]):
        frames.pop()
    return bool(frames) and frames[-1].startswith(_REDIS_PY)


def _as_outage(exc: BaseException) -> RedisConnectionError:
    return RedisConnectionError(f"a cluster connection was closed under the command ({type(exc).__name__}: {exc})")


class ClusterPipelineClient(ClusterPipeline):
    """redis-py's cluster pipeline, whose torn connections are outages (see :class:`ClusterClient`)."""

    __slots__ = ()  # redis-py's own pipeline becomes one (ClusterClient.pipeline): the same layout, one method more

    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except (RuntimeError, AttributeError) as exc:
            if not torn_connection(exc):
                raise
            raise _as_outage(exc) from exc


class ClusterClient(RedisCluster):
    """redis-py's cluster client, for which a resharding is a pause (the module's docstring says what that takes).

    ``reinitialize_steps=0``: a ``MOVED`` patches the one slot it names, never the whole topology. A slot move
    answers ``MOVED`` for every key of the slot at once, and a full rebuild every few of them (the default, 5) gains
    nothing over the patch — ttsq's keys live in a handful of slots — while redis-py up to 7 closed every
    connection for it, those other tasks were using included. A failover, a node gone, ``CLUSTERDOWN`` still
    rebuild it (they are connection errors, or ask for it themselves).
    """

    _UNBLOCKED_RETRIES = 2
    """Times a blocking read that a failover unblocked is sent again (each time to the slot's master now)."""

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        """redis-py's, with two outages made what they are: a torn connection (a ``ConnectionError``), and a blocking
        read (``XREAD``, ``BLMOVE``) whose master failed over under it, which Redis answers ``UNBLOCKED`` without
        running it — so it is sent again, and ``MOVED`` leads it to the promoted replica: the listener's read goes on
        where it was instead of surfacing an error."""
        for attempt in range(self._UNBLOCKED_RETRIES + 1):
            try:
                return await super().execute_command(*args, **kwargs)
            except (RuntimeError, AttributeError) as exc:
                if not torn_connection(exc):
                    raise
                raise _as_outage(exc) from exc
            except ResponseError as exc:
                if _DEMOTED_UNBLOCKED not in str(exc) or attempt == self._UNBLOCKED_RETRIES:
                    raise
        raise AssertionError("unreachable: the last attempt returns or raises")

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        """redis-py's pipeline (built by redis-py: its constructor's arguments differ between versions), whose
        :meth:`~ClusterPipelineClient.execute` converts a torn connection as :meth:`execute_command` does."""
        pipe = super().pipeline(transaction, shard_hint)
        # mypy takes an attribute redis-py declares abstract (and sets in __init__) for an abstract class.
        pipe.__class__ = ClusterPipelineClient  # type: ignore[type-abstract,unused-ignore]
        return pipe


def _cluster(url: str, *, tls: bool, **common: Any) -> ClusterClient:
    """A cluster client (:class:`ClusterClient`) on the URL's seed nodes: it learns the slots from them, follows
    ``MOVED`` and ``ASK``, retries ``TRYAGAIN``, and relearns the slots after a failover (its own retries, then
    ours: the caller backs off)."""
    nodes, username, password = cluster_nodes(url)
    return ClusterClient(
        startup_nodes=[ClusterNode(host, port) for host, port in nodes],
        username=username,
        password=password,
        ssl=tls,
        reinitialize_steps=0,
        **common,
    )


def sentinel_service(url: str) -> tuple[str, int]:
    """The service name and database of a ``redis+sentinel://sentinels/service[/db]`` URL."""
    path = urlsplit(url.replace(",", "")).path.strip("/")
    service, _, db = path.partition("/")
    if not service:
        raise ValueError("a sentinel URL names the primary's service after the sentinels: redis+sentinel://host:26379/mymaster")
    if db and not db.isdigit():
        raise ValueError(f"a sentinel URL's database is a number; got {db!r}")
    return service, int(db or 0)


class _Sentinels(Sentinel):
    """redis-py's Sentinel client, asking where the primary is as the Sentinel client guidelines say:
    ``SENTINEL GET-MASTER-ADDR-BY-NAME``.

    redis-py reads ``SENTINEL MASTERS`` instead, which goes on naming the old primary until the failover has ended
    (every replica moved): seconds after ``GET-MASTER-ADDR-BY-NAME`` names the promoted replica. Meanwhile every new
    connection went to the old primary, which refuses writes once its replicas have left it (``NOREPLICAS``) — the
    whole window of a planned failover was refusals where the new primary already took writes."""

    async def discover_master(self, service_name: str) -> tuple[str, int]:
        errors = []
        for index, sentinel in enumerate(self.sentinels):
            try:
                address = await sentinel.sentinel_get_master_addr_by_name(service_name)
            except (RedisConnectionError, RedisTimeoutError, ResponseError) as exc:
                errors.append(f"{sentinel}: {exc!r}")
                continue
            if address and not isinstance(address, bool):  # typed with the True of its ``return_responses`` form
                self.sentinels[0], self.sentinels[index] = sentinel, self.sentinels[0]  # ask this one first next time
                host, port = address
                return (host.decode() if isinstance(host, bytes) else str(host)), int(port)
        why = f": {', '.join(errors)}" if errors else ""
        raise MasterNotFoundError(f"no sentinel names a primary for {service_name!r}{why}")


def _sentinel_primary(url: str, *, tls: bool, **common: Any) -> Redis:
    """A client of the primary the sentinels name now. Each new connection asks them again (redis-py's
    ``SentinelConnectionPool``), so a failover costs the commands in flight on the old primary (connection errors:
    the caller's outage path) and nothing after; the sentinels' own connections use the same bounded timeouts."""
    sentinels, username, password = cluster_nodes(url)
    service, db = sentinel_service(url)
    timeouts = {"socket_timeout": common["socket_timeout"], "socket_connect_timeout": common["socket_connect_timeout"]}
    sentinel = _Sentinels(  # type: ignore[no-untyped-call,unused-ignore]  # redis-py < 8.2 left its __init__ unannotated
        sentinels, sentinel_kwargs=timeouts, username=username, password=password, db=db, ssl=tls, **common
    )
    connection = _SentinelPrimarySSLConnection if tls else _SentinelPrimaryConnection
    primary: Redis = sentinel.master_for(service, connection_class=connection)
    return primary


SubmitWaitReplicas = int | Literal["auto"]
"""``SUBMIT_WAIT_REPLICAS``: the replicas a write that acknowledges a task waits for, or ``auto``."""


class NotReplicatedError(RedisError):
    """A write that would acknowledge a task did not reach the replicas it waits for in time, or the primary has lost
    the replicas it is expected to have. A Redis error, so the API answers it as an outage (503 + Retry-After): nothing
    was acknowledged (the write may still stand if its primary survives: a client that retries may get a duplicate,
    never a loss)."""


@dataclass(frozen=True)
class ReplicaCount:
    """What ``INFO replication`` says of the server a connection writes to."""

    role: str
    """``master``, or ``slave`` when the address now leads to a replica (a demoted primary)."""
    replid: str
    """The primary's replication id: a promoted replica takes a new one, so it names one primary's reign."""
    online: int
    """Replicas attached and streaming (``state=online``; where the server keeps the count, only those within
    ``min-replicas-max-lag``)."""
    guarded: bool
    """The server itself refuses writes without enough replicas (``min-replicas-to-write`` and ``min-replicas-max-lag``
    set)."""

    @classmethod
    def of(cls, info: dict[str, Any]) -> ReplicaCount:
        online = sum(
            1
            for key, value in info.items()
            if key.startswith("slave") and key[5:].isdigit() and isinstance(value, dict) and value.get("state") == "online"
        )
        guarded = "min_slaves_good_slaves" in info
        if guarded:
            online = min(online, int(info["min_slaves_good_slaves"]))
        return cls(str(info.get("role", "master")), str(info.get("master_replid", "")), online, guarded)


class Replication:
    """How many replicas a write that acknowledges a task waits for (``WAIT``), and whether the primary has them now.

    Redis replicates asynchronously: a primary answers a write before its replicas have it, and a failover then
    promotes a replica without it. During a planned ``SENTINEL FAILOVER`` the old primary even goes on taking writes
    on its open connections for seconds after its replica was promoted — and with two replicas, the one not promoted
    goes on following it and confirming them — then discards them when it is demoted. Only a ``WAIT`` on the write's
    own connection (or the server's ``min-replicas-to-write``) keeps an acknowledgement true: every path that answers
    200/202 for a task writes through :meth:`JobQueue._acknowledged <ttsq.store.queue.JobQueue._acknowledged>`, which
    asks :meth:`plan` how many replicas to wait for and :meth:`required` whether enough did.

    ``SUBMIT_WAIT_REPLICAS=N`` waits for N. ``auto`` (the default) waits, on each primary, for every replica that
    primary has been seen with (the most seen online at once; at least one where the server is guarded by
    ``min-replicas-to-write``), and for none on a lone Redis:

    * *every* replica, because Sentinel may promote any of them (it ranks them by priority and by offsets it read
      seconds ago), so a task is safe only once all have it;
    * *seen with*, sticky: a primary that has lost a replica is exactly the one a failover is leaving, so its
      acknowledgements are refused (503) until the replica is back, instead of being confirmed by the replicas left;
    * *on each primary*: ``INFO replication`` rides in the same pipeline, on the same connection, as the write and
      its ``WAIT`` — no round trip of its own — and names the primary (its replication id, which a promoted replica
      renews). A promoted replica is a new primary, judged by the replicas it has; so after a failover submits go on
      as soon as the new primary has its replicas, not once the old primary is back. And a connection still on the
      old primary in the failover's window is judged by the old primary's count, whatever other connections see.

    A lone Redis writes without a ``WAIT`` and is looked at again every ``recheck_s`` (one ``INFO``), so it pays one
    command per ``recheck_s``. The price of *sticky*: while a replica is away (a crash, a restart) its primary's
    submits are refused; a deployment that would rather take them sets a number (``1``), and accepts that a planned
    failover with several replicas may lose what was acknowledged in its window (docs/scale-out.md).

    On a Redis Cluster ``auto`` waits for nothing: redis-py's cluster client cannot put a ``WAIT`` on the connection
    a script ran on (settings refuse an explicit number there). A cluster's planned failover (``CLUSTER FAILOVER``)
    loses nothing anyway, and its masters' ``min-replicas-to-write`` bounds what an unplanned one can
    (docs/scale-out.md).
    """

    def __init__(
        self,
        redis: RedisClient,
        wanted: SubmitWaitReplicas,
        timeout_ms: int,
        recheck_s: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.wanted = wanted
        self.timeout_ms = timeout_ms
        self.recheck_s = recheck_s
        self._monotonic = monotonic
        self._most: dict[str, int] = {}
        """``auto``: per primary (replication id), the most replicas seen online at once."""
        self._latest = ""
        """The primary seen last."""
        self._next_look = 0.0

    @property
    def waits(self) -> bool:
        """Whether a ``WAIT`` can follow a write on its own connection: not through redis-py's cluster client."""
        return not isinstance(self.redis, RedisCluster)

    @property
    def automatic(self) -> bool:
        return self.wanted == "auto" and self.waits

    async def plan(self) -> int:
        """How many replicas the next acknowledging write waits for (0: no ``WAIT``; with ``auto``, its pipeline then
        reads no ``INFO`` either)."""
        if self.wanted != "auto":
            return self.wanted
        if not self.waits:
            return 0
        if not any(self._most.values()):
            if self._monotonic() < self._next_look:
                return 0
            self._next_look = self._monotonic() + self.recheck_s
            await self.count()
        return self._most.get(self._latest, 0) or max(self._most.values(), default=0)

    def required(self, count: ReplicaCount) -> int:
        """``auto``: the replicas a write on the primary ``count`` describes (read on the write's own connection, just
        after its ``WAIT``) must have reached to be acknowledged; what is seen is remembered."""
        if count.role != "master":
            return 1 << 30  # the address leads to a replica now: nothing written there stands
        most = max(self._most.get(count.replid, 0), count.online, 1 if count.guarded else 0)
        self._most[count.replid] = most
        self._latest = count.replid
        return most

    async def count(self) -> ReplicaCount:
        """The primary's replicas now (one ``INFO replication``), remembered as :meth:`required` does."""
        count = ReplicaCount.of(await self.redis.info("replication"))
        self.required(count)
        return count

    async def check(self) -> dict[str, Any]:
        """Readiness: the replicas the primary has online, or :class:`NotReplicatedError` while it has fewer than an
        acknowledging write waits for (it would refuse every submit), or when the address leads to a replica."""
        if not self.waits:
            return {}
        count = await self.count()
        if count.role != "master":
            raise NotReplicatedError(f"the Redis this process writes to is a replica now (role {count.role}): its primary moved")
        wanted = self.wanted if self.wanted != "auto" else self._most.get(count.replid, 0)
        if count.online < wanted:
            raise NotReplicatedError(
                f"the primary has {count.online} replica(s) online and acknowledged writes wait for {wanted} "
                "(SUBMIT_WAIT_REPLICAS): it has lost replicas, and submits are refused until they are back"
            )
        return {"replicas": count.online} if count.online or wanted else {}


class EvictionRisk(StrEnum):
    NONE = "none"
    """``maxmemory-policy`` is ``noeviction``: Redis refuses writes rather than dropping keys."""
    EVICTS = "evicts"
    """Another policy: under memory pressure Redis may delete queued jobs and results."""
    UNKNOWN = "unknown"
    """The policy could not be read (managed Redis services often forbid CONFIG)."""
    UNREACHABLE = "unreachable"
    """Redis did not answer at all."""


@dataclass(frozen=True)
class EvictionCheck:
    risk: EvictionRisk
    message: str | None
    """What to tell the operator; None when there is nothing to say."""


async def _policies(redis: RedisClient) -> list[str]:
    """``maxmemory-policy`` of the server, or of every master of a cluster (each holds part of the queue)."""
    if isinstance(redis, RedisCluster):
        await redis.initialize()
        replies = [await redis.config_get("maxmemory-policy", target_nodes=node) for node in redis.get_primaries()]
    else:
        replies = [await redis.config_get("maxmemory-policy")]
    policies = []
    for reply in replies:
        values = list(reply.values()) if reply else []
        policies.append(values[0].decode() if values and isinstance(values[0], bytes) else str(values[0]) if values else "unknown")
    return policies


async def check_eviction_policy(redis: RedisClient) -> EvictionCheck:
    """Read ``maxmemory-policy`` once at start-up; the caller decides whether to refuse to run."""
    try:
        policies = await _policies(redis)
    except (RedisConnectionError, RedisTimeoutError, RedisClusterException, OSError) as exc:
        return EvictionCheck(EvictionRisk.UNREACHABLE, f"cannot reach Redis at start-up ({exc}); will keep retrying")
    except RedisError as exc:
        return EvictionCheck(EvictionRisk.UNKNOWN, f"cannot read Redis maxmemory-policy ({exc}); make sure it is 'noeviction'")
    policy = next((policy for policy in policies if policy != "noeviction"), "noeviction")
    if policy == "noeviction":
        return EvictionCheck(EvictionRisk.NONE, None)
    return EvictionCheck(
        EvictionRisk.EVICTS,
        f"Redis maxmemory-policy is {policy!r}: under memory pressure Redis may EVICT queued jobs "
        "and results, and accepted tasks would silently disappear. Set it to 'noeviction' "
        "(and put the result cache on its own Redis).",
    )


class UnsafeRedisError(RuntimeError):
    """Redis may evict job keys and the operator asked to refuse to run in that case."""


def enforce_eviction_policy(check: EvictionCheck, *, require_noeviction: bool) -> None:
    """Refuse to start when Redis may evict and ``require_noeviction`` is set; the caller logs the message."""
    if require_noeviction and check.risk is EvictionRisk.EVICTS:
        raise UnsafeRedisError(check.message)


async def verify_redis(redis: RedisClient, *, require_noeviction: bool, warn: Callable[[str], object]) -> EvictionCheck:
    """The start-up check both processes run: report any risk through ``warn``, refuse to run if required."""
    check = await check_eviction_policy(redis)
    if check.message is not None:
        warn(check.message)
    enforce_eviction_policy(check, require_noeviction=require_noeviction)
    return check
