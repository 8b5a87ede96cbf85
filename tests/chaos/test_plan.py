"""The kill scenario's plan: every moment of a worker's loop is aimed at, however short the run."""

from __future__ import annotations

import random
from collections import Counter

from tests.chaos.scenarios import MOMENTS, kill_plan


def test_a_kill_plan_aims_at_every_moment_equally_often_in_a_seeded_order() -> None:
    for kills in (4, 12, 100):
        assert Counter(step.moment for step in kill_plan(random.Random(kills), kills)) == dict.fromkeys(MOMENTS, kills // 4)
    assert kill_plan(random.Random(7), 12) == kill_plan(random.Random(7), 12), "a seed replays its plan"
    orders = {tuple(step.moment for step in kill_plan(random.Random(seed), 12)) for seed in range(5)}
    assert len(orders) > 1, "the order is drawn, not fixed"
