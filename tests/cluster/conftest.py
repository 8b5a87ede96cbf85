"""A real Redis Cluster per test module: three masters, each with a replica (six ``redis-server`` processes,
a few seconds to start). Tests that move slots or fail masters over leave it healthy for the next one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import server_binary
from ttsq.store.local_topology import LocalCluster, start_redis_cluster


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    local = start_redis_cluster(tmp_path_factory.mktemp("cluster"), masters=3, replicas=1, binary=server_binary())
    yield local
    local.stop()
