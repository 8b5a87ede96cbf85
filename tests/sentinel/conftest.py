"""A real Sentinel-managed Redis per test module: a primary, one replica and three sentinels (five ``redis-server``
processes, a few seconds to start). Tests that fail the primary over leave a primary with a replica behind."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.redis_server import server_binary
from ttsq.store.local_topology import LocalSentinel, start_redis_sentinel


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSentinel]:
    local = start_redis_sentinel(tmp_path_factory.mktemp("sentinel"), replicas=1, sentinels=3, binary=server_binary())
    yield local
    local.stop()
