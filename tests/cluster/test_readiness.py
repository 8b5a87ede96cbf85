"""A worker that cannot claim is not ready; liveness stays local.

Pointed with a plain client at a cluster node that does not serve the queue's slot, every command a
worker sends is answered ``MOVED``: it logs the outage, claims nothing — and used to keep ``/readyz``
at 200, so an orchestrator would keep a pod that serves no job. Now ``/readyz`` is 503 and says why,
while ``/healthz`` stays 200 (restarting the worker cannot fix where it points). A worker pointed at
the node that does serve the slot is ready, and takes jobs.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.deployment import Processes
from tests.support.service import wait_for
from ttsq.store.keys import Keys
from ttsq.store.local_topology import LocalCluster

pytestmark = pytest.mark.e2e


@pytest.fixture
def processes(tmp_path: Path, cluster: LocalCluster) -> Iterator[Processes]:
    deployment = Processes(tmp_path, cluster.url())
    yield deployment
    deployment.kill_all()


def test_a_worker_answered_moved_for_every_command_is_live_but_not_ready(processes: Processes, cluster: LocalCluster) -> None:
    owner = cluster.owner(Keys("ttsq").queue)
    stranger = next(node for node in cluster.masters() if node.port != owner.port)
    lost = processes.worker("pointed-elsewhere", ready=False, REDIS_URL=f"redis://127.0.0.1:{stranger.port}/0")
    wait_for(lambda: "MovedError" in lost.get("/readyz").json().get("claiming", ""), 60, "a claim to be answered MOVED")
    readiness = lost.get("/readyz")
    assert readiness.status_code == 503 and readiness.json()["model_loaded"] is True
    assert readiness.json()["claiming"].startswith("cannot claim jobs: MovedError: ")
    assert "not a cluster client" in readiness.json()["claiming"]
    liveness = lost.get("/healthz")
    assert liveness.status_code == 200 and liveness.json()["redis"] == "unreachable", "live, and saying why it serves nothing"
    found = processes.worker("pointed-home", REDIS_URL=f"redis://127.0.0.1:{owner.port}/0")
    assert found.get("/readyz").json()["claiming"] == "ok"
    assert lost.get("/readyz").status_code == 503, "still not ready: every claim it tries is refused"
    outages = processes.log("pointed-elsewhere").count("Redis unavailable")
    assert outages == 1, f"one outage, reported once, not a warning per retry ({outages})"
