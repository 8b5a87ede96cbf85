"""A Redis Cluster resharded under load is a pause, not a crash.

The queue's slots are moved back and forth between masters by hand, as a managed Redis does when it
reshards (``CLUSTER SETSLOT … IMPORTING/MIGRATING``, ``MIGRATE`` batch by batch, ``SETSLOT … NODE``), while
an API and two real workers (``python worker.py`` on the tiny ChatTTS checkpoint) take a steady stream of
submits and status reads. Half-moved, a slot answers ``ASK`` for the keys already gone and ``TRYAGAIN`` for a
script whose keys are split; redis-py's cluster client, meanwhile, raised ``RuntimeError`` and
``AttributeError`` from connections it closed under a running command. What must hold: every acknowledged job
done (0 lost), no 500 (a 503 with Retry-After is the answer while a command cannot run), no worker exit, and
each worker taking jobs again soon after the last move (polled to a deadline, not timed).
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.crc import key_slot

from tests.chaos.harness import background
from tests.chaos.ledger import Client, Requests, settle_through_api
from tests.cluster.deployment import Processes, StandIn
from tests.support.service import wait_for
from ttsq.store.keys import Shards
from ttsq.store.local_topology import LocalCluster

pytestmark = pytest.mark.e2e

SHARDS = 2
"""Two queue shards, so a worker's claim visits two slots in turn: one may be moving while the other is not."""
ROUND_TRIPS = int(os.environ.get("RESHARD_ROUND_TRIPS", "2"))
"""Each shard's slot goes to another master and back this many times (``make reshard-chaos``: ten)."""
ENOUGH = 30
"""Jobs acknowledged at the least, moves or not, for the verdict to mean something."""


@pytest.fixture
def processes(tmp_path: Path, cluster: LocalCluster) -> Iterator[Processes]:
    # Leases of 10 s, not the 3 s of the other cluster tests: a lease renewal refused for a few seconds while a slot
    # moves must not pass for a dropped claim (a job run twice); one dropped still comes back, at attempt 2.
    deployment = Processes(tmp_path, cluster.url(), env={"QUEUE_SHARDS": str(SHARDS), "LEASE_S": "10"})
    yield deployment
    deployment.kill_all()


def jobs_done(worker: StandIn) -> int:
    return int(worker.get("/healthz").json()["jobs_done"])


def test_moving_the_queues_slots_back_and_forth_under_load_loses_nothing_and_answers_no_500(
    processes: Processes, cluster: LocalCluster, tiny_checkpoint_dir: Path
) -> None:
    api = processes.api("api")
    workers = processes.model_workers(["w1", "w2"], tiny_checkpoint_dir)
    client = Client(api, "resharding")
    requests = Requests(random.Random(28))
    slots = sorted({key_slot(keys.queue.encode()) for keys in Shards("ttsq", SHARDS).all})
    moves: list[str] = []

    def load(stop: threading.Event) -> None:
        while not stop.wait(0.05):
            client.submit(requests.new("Reshard"))

    def read(stop: threading.Event) -> None:
        """Status reads of recent jobs, as clients polling for their results do: a read must not 500 either."""
        while not stop.wait(0.1):
            recent = list(client.acks)[-5:]
            for task_id in recent:
                client.status(task_id)

    with background(load, "reshard-load"), background(read, "reshard-reads"):
        wait_for(lambda: len(client.acks) >= 10, 60, "jobs to flow")
        for _ in range(ROUND_TRIPS):
            for slot in slots:
                home = cluster.slot_owner(slot)
                away = next(node for node in cluster.masters() if node.port != home.port)
                for target in (away, home):
                    moved = cluster.migrate_slot(slot, target, batch=5, pause_s=0.02)
                    moves.append(f"slot {slot} → {target.port}: {moved} keys")
        wait_for(lambda: len(client.acks) >= ENOUGH, 60, f"{ENOUGH} jobs acknowledged")
        # Every worker takes jobs again after the last move: each finishes one more within a deadline.
        after_moves = {worker.name: jobs_done(worker) for worker in workers}
        for worker in workers:
            wait_for(
                lambda worker=worker: jobs_done(worker) > after_moves[worker.name],  # type: ignore[misc]
                60,
                f"{worker.name} to finish a job after the slots moved ({processes.log(worker.name)[-2000:]})",
            )
    outcomes = settle_through_api(client, 120)
    client.close()
    exited = {worker.name: worker.process.poll() for worker in workers if worker.process.poll() is not None}
    assert not exited, f"workers exited: {exited}\n" + "\n".join(processes.log(name)[-3000:] for name in exited)
    assert not client.problems, "\n".join(client.problems[:20])  # a 500 (or a 503 without Retry-After) lands here
    statuses = [outcome.status for outcome in outcomes.values()]
    assert statuses.count("done") == len(outcomes), {status: statuses.count(status) for status in set(statuses)}
    assert len(outcomes) >= ENOUGH
    # A claim taken but never handed to its worker (or a job held and never stored) waits out its lease, and is run
    # again by whoever claims it after the sweep: a second attempt says a claim was dropped.
    again = {outcome.task_id: outcome.attempts for outcome in outcomes.values() if outcome.attempts != 1}
    assert not again, f"jobs whose first claim was dropped (their lease lapsed): {again}"
    assert all(outcome.audio for outcome in outcomes.values()), "every done job's result downloads"
    for name in ("api", *(worker.name for worker in workers)):
        log = processes.log(name)
        assert "Traceback" not in log, f"{name}: {log[-3000:]}"
    print(f"{len(outcomes)} jobs done, {client.refused(503)} submits answered 503 during {len(moves)} moves: {moves}")
