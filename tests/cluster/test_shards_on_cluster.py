"""Queue shards on a real Redis Cluster: with QUEUE_SHARDS=3 the shards land on the three masters, and jobs and
memory spread over them (one hash tag once put the whole service on one shard, whatever the cluster's size)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.cluster.deployment import Processes, submit
from tests.support.service import wait_for
from ttsq.store.keys import Shards, shard_label
from ttsq.store.local_topology import LocalCluster

pytestmark = pytest.mark.e2e


@pytest.fixture
def processes(tmp_path: Path, cluster: LocalCluster) -> Iterator[Processes]:
    deployment = Processes(tmp_path, cluster.url(), env={"QUEUE_SHARDS": "3"})
    yield deployment
    deployment.kill_all()


def test_three_shards_spread_jobs_and_memory_over_three_masters(processes: Processes, cluster: LocalCluster) -> None:
    shards = Shards("ttsq", 3)
    masters = {cluster.owner(keys.queue).port for keys in shards.all}
    assert len(masters) == 3, "each shard's slot is served by another master"
    api = processes.api("api")
    processes.worker("w1")
    processes.worker("w2")
    with httpx.Client(timeout=30) as http:
        ids = [submit(http, api, f"spread {n} " + "x" * 200, n + 1, format="wav") for n in range(90)]

        def all_done() -> bool:
            return all(http.get(f"{api}/v1/tts/tasks/{task}").json()["status"] == "done" for task in ids)

        wait_for(all_done, 120, "every job to be done")
    by_shard = {keys.label: sum(1 for task in ids if shard_label(task) == keys.label) for keys in shards.all}
    assert all(count >= 15 for count in by_shard.values()), f"the API placed jobs on every shard: {by_shard}"
    held = {}
    for port in masters:
        with redis.Redis(port=port) as node:
            held[port] = (int(node.dbsize()), int(node.info("memory")["used_memory_dataset"]))
    per_master = {port: keys for port, (keys, _memory) in held.items()}
    assert all(keys >= 30 for keys in per_master.values()), f"job keys on every master: {per_master}"
    datasets = sorted(memory for _keys, memory in held.values())
    assert datasets[0] * 3 >= datasets[-1], f"memory spread, not piled on one master: {held}"
