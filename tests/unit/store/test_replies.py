"""Reading the Lua scripts' replies: the shapes each script documents, as redis-py hands them over (bytes, integers).

The scripts themselves run against a real redis-server in ``tests/unit/store/test_queue.py``,
``tests/unit/store/test_deliveries.py`` and the API tests; these pin the shapes that only some paths produce
(a charged enqueue's trailing bucket values, a refused one, a skipped sweep).
"""

from __future__ import annotations

from ttsq.store.replies import (
    ClaimReply,
    Enqueued,
    EnqueueReply,
    Leased,
    LeaseReply,
    Requeued,
    RequeueReply,
    SweepReport,
    TokenTaken,
)


def test_a_charged_enqueue_carries_the_bucket_after_its_own_values() -> None:
    created = EnqueueReply.parse([b"created", 3, b"10", b"25.5", 2, 41, 7])
    assert created == EnqueueReply(
        Enqueued.CREATED, 3, jobs_done=10, busy_s=25.5, live_workers=2, bucket=TokenTaken(True, 41, 0, 7)
    )
    joined = EnqueueReply.parse([b"joined", b"other-id", 40, 8])
    assert joined.other_id == "other-id" and joined.bucket == TokenTaken(True, 40, 0, 8)


def test_an_uncharged_enqueue_has_no_bucket() -> None:
    assert EnqueueReply.parse([b"exists", 5]) == EnqueueReply(Enqueued.EXISTS, 5)
    assert EnqueueReply.parse([b"owner_full", 1000]) == EnqueueReply(Enqueued.OWNER_FULL, 1000)


def test_a_refused_enqueue_says_when_a_token_is_back() -> None:
    assert EnqueueReply.parse([b"limited", 0, 2, 5]) == EnqueueReply(Enqueued.LIMITED, bucket=TokenTaken(False, 0, 2, 5))


def test_replies_without_values() -> None:
    assert ClaimReply.parse([b"claimed"]) == ClaimReply(repeated=False, started=[])
    assert ClaimReply.parse([b"repeated"]) == ClaimReply(repeated=True, started=[])
    assert SweepReport.parse([b"skipped"]) == SweepReport(swept=False)
    assert SweepReport.parse([b"swept", 1, 2, 3, 4]) == SweepReport(swept=True, requeued=1, orphans=2, promoted=3, abandoned=4)
    assert RequeueReply.parse([b"active", b"queued"]) == RequeueReply(Requeued.ACTIVE, None)
    assert RequeueReply.parse([b"requeued", 4]) == RequeueReply(Requeued.REQUEUED, 4)
    assert LeaseReply.parse([b"finished"]) == LeaseReply(Leased.FINISHED, 0)
    assert LeaseReply.parse([b"leased", 2, b"1800000030.5"]) == LeaseReply(Leased.LEASED, 2, 1800000030.5)
