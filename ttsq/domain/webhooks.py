"""What a completion webhook is: its body, its headers, its signature, and when a failed one is tried again.

A task that ends with a ``callback_url`` is POSTed there (:mod:`ttsq.runtime.deliverer` delivers it).
The body is :func:`webhook_payload`, signed the Stripe/Svix way: ``ttsq-signature: t=<unix>,v1=<hex>``,
where the hex is HMAC-SHA256 over ``f"{t}.{body}"`` under the secret the receivers hold
(``WEBHOOK_SECRET``). The timestamp is signed so a captured request cannot be replayed after the
tolerance; :func:`verify` is the receiver's side. Pure computation, no I/O: the receiver's code and
the deliverer use the same functions.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import time
from typing import Any
from urllib.parse import quote

from ttsq.domain.jobs import Job, Status

SIGNATURE_HEADER = "ttsq-signature"
EVENT_ID_HEADER = "ttsq-event-id"
"""The task id: the same on every attempt, so a receiver can drop the duplicates at-least-once delivery allows."""
ATTEMPT_HEADER = "ttsq-delivery-attempt"
USER_AGENT = "ttsq-webhooks/1"


# ---- signatures ---------------------------------------------------------------------------------


class SignatureError(ValueError):
    """A webhook signature that does not verify; the message says why."""


def _secret_bytes(secret: str | bytes) -> bytes:
    return secret.encode() if isinstance(secret, str) else secret


def signature(secret: str | bytes, timestamp: int, body: bytes) -> str:
    """Hex HMAC-SHA256 of ``f"{timestamp}.{body}"``."""
    return hmac.new(_secret_bytes(secret), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


class WebhookSigner:
    """Signs webhook bodies with the shared secret the receivers also hold (``WEBHOOK_SECRET``)."""

    def __init__(self, secret: str | bytes) -> None:
        if len(_secret_bytes(secret)) < 16:
            raise ValueError("the webhook secret must be at least 16 bytes")
        self._secret = _secret_bytes(secret)

    def sign(self, body: bytes, timestamp: int) -> str:
        """The ``ttsq-signature`` header value: ``t=<unix>,v1=<hex>``."""
        return f"t={timestamp},v1={signature(self._secret, timestamp, body)}"

    def headers(self, event_id: str, body: bytes, timestamp: int) -> dict[str, str]:
        return {SIGNATURE_HEADER: self.sign(body, timestamp), EVENT_ID_HEADER: event_id}


def verify(header: str, body: bytes, secret: str | bytes, tolerance_s: float = 300.0, now: float | None = None) -> int:
    """Check a ``ttsq-signature`` header against the raw body; return its timestamp.

    Raises :class:`SignatureError` when the header is malformed, the timestamp is more than
    ``tolerance_s`` from ``now`` (either way: a replay, or a clock far off) or no ``v1`` matches.
    Several ``v1`` entries are accepted, as during a secret rotation.
    """
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == "v1" and value:
            candidates.append(value)
    if timestamp is None or not candidates:
        raise SignatureError("malformed signature header: expected t=<unix seconds>,v1=<hex>")
    current = time.time() if now is None else now
    if abs(current - timestamp) > tolerance_s:
        raise SignatureError(f"signature timestamp is {current - timestamp:+.0f}s from now; the tolerance is {tolerance_s:.0f}s")
    expected = signature(secret, timestamp, body)
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise SignatureError("signature does not match the body")
    return timestamp


# ---- the body, and when to try again -----------------------------------------------------------


def result_url(public_url: str, task_id: str) -> str:
    return f"{public_url.rstrip('/')}/v1/tts/result/{quote(task_id, safe='')}"


def webhook_payload(job: Job, public_url: str) -> dict[str, Any]:
    """What the receiver is told: the task, how it ended, and where its audio is (done tasks only)."""
    return {
        "task_id": job.id,
        "status": job.status.value,
        "result_url": result_url(public_url, job.id) if job.status is Status.DONE else None,
        "audio_duration_s": job.duration_s,
        "error": job.error,
        "finished_at": job.finished_at,
    }


def event_id(job: Job) -> str:
    """The same on every attempt of one outcome: the task id, plus ``/N`` once an operator requeued the
    task from the dead letters N times (its new outcome is a new event, not a duplicate)."""
    return job.id if job.requeues == 0 else f"{job.id}/{job.requeues}"


def retry_delay_s(attempt: int, base_s: float, cap_s: float, rng: random.Random) -> float:
    """Exponential backoff with full jitter: uniform in [0, min(cap, base × 2^(attempt-1))]."""
    return rng.uniform(0.0, min(cap_s, base_s * 2.0 ** min(attempt - 1, 60)))
