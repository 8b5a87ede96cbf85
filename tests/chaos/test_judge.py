"""The chaos judge fails a scenario that acknowledged nothing, instead of finding no broken promise in it.

The run the judge must not pass: a real API whose Redis is gone answers every submit 503 with
``Retry-After`` — a correct answer, so the client records no problem, and with no job acknowledged
no invariant can be violated either. Only the scenario's minimum of acknowledged and completed
jobs (:class:`tests.chaos.ledger.Expect`) tells that it tested nothing.
"""

from __future__ import annotations

import random

from tests.chaos.ledger import Client, Expect, Figures, Requests, judge
from tests.support.service import Service

SUBMITS = 5


def test_a_scenario_whose_every_submit_was_answered_503_fails(service: Service) -> None:
    service.redis.stop()
    client = Client(service.api_url, "empty")
    requests = Requests(random.Random(0))
    try:
        for _ in range(SUBMITS):
            assert client.submit(requests.new("Empty")) is None
    finally:
        client.close()
    assert [refusal.code for refusal in client.refusals] == [503] * SUBMITS
    assert client.problems == [], "503 with Retry-After is a correct answer: nothing else would flag this run"

    figures = Figures("S0", "every submit refused")
    # What settle() returns when nothing was acknowledged: no outcome, no reference audio, no new dead letter.
    judge(figures, {}, {}, Expect(acked=SUBMITS, done=SUBMITS), set(), client)

    assert figures.acked == 0 and figures.done == 0
    assert figures.violations == [
        f"only 0 job(s) acknowledged, fewer than the {SUBMITS} this scenario submits when it runs as meant "
        f"(refused: {SUBMITS} × 503)",
        f"only 0 job(s) done, fewer than the {SUBMITS} this scenario needs",
    ]
    assert "VIOLATION" in figures.line()
