"""The bounded chaos scenarios (``make test``); ``make chaos`` runs the same ones at full size.

Each test runs one scenario of :mod:`tests.chaos.scenarios` on the shared deployment and fails with
the scenario's violations: an acknowledged job lost, failed without a reason or for no reason, left
queued or running, with two different results, or with audio unlike the clean run's; an API answer
that is a 500, a hang, or a 429/503 without Retry-After; a dead letter the scenario did not mean.
Tests run in file order: the SIGTERM scenario stops two pool workers, and the restart without
persistence wipes Redis, so they come last.
"""

from __future__ import annotations

import pytest

from tests.chaos.ledger import Figures
from tests.chaos.scenarios import (
    Chaos,
    can_mount,
    disks,
    flood,
    hung_inference,
    kill9,
    late_worker,
    poison_crash,
    poison_raise,
    redis_restart,
    redis_restart_without_persistence,
    redis_stall,
    replicas_after_data_loss,
    sigterm,
)

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(1200)]


def check(chaos: Chaos, figures: Figures) -> None:
    assert not figures.violations, (
        f"{figures.line()}\n"
        + "\n".join(f"  ✗ {violation}" for violation in figures.violations[:30])
        + f"\nseed {chaos.seed} (CHAOS_SEED={chaos.seed} replays it); process logs in {chaos.deployment.logs}"
    )


def test_kill_9_of_workers_at_random_moments_loses_nothing(chaos: Chaos) -> None:
    check(chaos, kill9(chaos))


def test_redis_stalled_past_the_lease_never_gives_two_results(chaos: Chaos) -> None:
    check(chaos, redis_stall(chaos))


def test_redis_killed_and_restarted_with_aof_loses_nothing_and_workers_resume(chaos: Chaos) -> None:
    check(chaos, redis_restart(chaos))


def test_full_or_read_only_cache_disk_fails_no_request(chaos: Chaos) -> None:
    if not can_mount():
        pytest.skip("mounting a tmpfs over the cache directory needs root")
    check(chaos, disks(chaos))


def test_flood_is_refused_with_429_and_nothing_acknowledged_is_lost(chaos: Chaos) -> None:
    check(chaos, flood(chaos))


def test_a_poison_job_that_raises_is_dead_lettered_with_its_reason(chaos: Chaos) -> None:
    check(chaos, poison_raise(chaos))


def test_a_job_that_crashes_its_worker_is_dead_lettered_alone_and_its_batch_mates_finish(chaos: Chaos) -> None:
    """Depends on poison isolation: jobs back from a lapsed lease run alone until they succeed once."""
    check(chaos, poison_crash(chaos))


def test_a_hung_inference_fails_liveness_and_its_job_finishes_after_the_restart(chaos: Chaos) -> None:
    check(chaos, hung_inference(chaos))


def test_a_worker_frozen_past_its_lease_is_refused_when_it_wakes_and_no_job_runs_twice(chaos: Chaos) -> None:
    check(chaos, late_worker(chaos))


def test_sigterm_mid_batch_exits_0_and_loses_nothing(chaos: Chaos) -> None:
    check(chaos, sigterm(chaos))


def test_redis_restart_without_persistence_loses_exactly_the_unfinished_jobs(chaos: Chaos) -> None:
    check(chaos, redis_restart_without_persistence(chaos))


def test_api_replicas_agree_on_task_ids_after_redis_lost_its_data(chaos: Chaos) -> None:
    check(chaos, replicas_after_data_loss(chaos))
