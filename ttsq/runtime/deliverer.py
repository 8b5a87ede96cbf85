"""The webhook deliverer: it POSTs each finished task's outcome to its ``callback_url``, safely.

:class:`Deliverer` is a loop beside the API's routes, in the API process (``app.py`` starts and stops
it with the app's lifespan); it never touches inference. It claims due deliveries from
:class:`ttsq.store.deliveries.DeliveryQueue`, POSTs them concurrently (at most ``concurrency`` at once,
so a slow receiver holds one slot, not the loop), renews their leases meanwhile, retries failures with
exponential backoff and full jitter for at most ``max_age_s`` after the task ended, and sweeps. Its
lease renewals and sweeps, and what it does while Redis is away, are the worker's too
(:mod:`ttsq.runtime.upkeep`). What a webhook says and how it is signed is :mod:`ttsq.domain.webhooks`;
where it may go, :mod:`ttsq.domain.ssrf`.

The POST connects to the address the guard approved, not to a second DNS answer: the request goes
to ``http(s)://<approved ip>:<port>/path`` with the original ``Host`` header and, for https, the
original name as SNI and as the name the certificate is verified against (httpcore's
``sni_hostname`` extension). A DNS-rebinding receiver (public address for the check, private for
the connection) therefore reaches only the approved address. Each attempt uses a fresh
connection, never a pooled one whose certificate was verified for another name. Redirects are not
followed, proxies from the environment are ignored, and at most ``max_response_bytes`` of the
answer are read (the transport may pull one 64 KiB socket read beyond that, never more; nothing
is decompressed).
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import random
import secrets
import socket
import ssl
import time
from dataclasses import dataclass, field

import certifi
import httpx

from ttsq.domain.jobs import Job
from ttsq.domain.ssrf import IPAddress, RefusedUrl, SsrfGuard, Target, UnresolvableUrl
from ttsq.domain.webhooks import ATTEMPT_HEADER, USER_AGENT, WebhookSigner, event_id, retry_delay_s, webhook_payload
from ttsq.runtime.upkeep import REDIS_ERRORS, Chore, RedisOutage, Upkeep
from ttsq.store.deliveries import AttemptOutcome, DeliveryAttempt, DeliveryLease, DeliveryQueue
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Settled

log = logging.getLogger("ttsq.webhooks")

_MAX_ADDRESSES_TRIED = 3
"""Addresses of one name tried in turn when connecting fails (say, an AAAA record on a host without IPv6)."""
_SETTLE_TRIES = 3
"""Tries to record an attempt through a Redis blip before its lease is left to lapse (it is then attempted again)."""


async def system_resolver(host: str, port: int) -> list[str]:
    """Every A and AAAA address of ``host``, through the event loop's ``getaddrinfo``."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    found = [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class WebhookConfig:
    """Delivery timings and limits. Built from settings by ``settings.py`` (``WEBHOOK_*``), which validates them."""

    public_url: str
    """Base of ``result_url`` (``PUBLIC_URL``), e.g. ``https://tts.example.com``."""
    timeout_s: float
    """Bound on one whole attempt: resolving, connecting, sending, the answer (``WEBHOOK_TIMEOUT_S``)."""
    max_age_s: float
    """No new attempt after this long past the task's end (``WEBHOOK_MAX_AGE_S``)."""
    connect_timeout_s: float
    retry_base_s: float
    """Ceiling of the first retry's delay; the ceiling doubles with each failure (full jitter beneath it)."""
    retry_cap_s: float
    """Largest ceiling of a retry delay."""
    max_response_bytes: int
    concurrency: int
    """Deliveries in flight at once, per deliverer."""
    block_s: float
    """Longest wait for a due delivery in one claim (kept under the Redis socket timeout, as the worker's is)."""
    sweep_interval_s: float
    drain_s: float
    """On stop, how long deliveries in flight may finish; the rest are left to the sweep."""

    def __post_init__(self) -> None:
        if not self.public_url.startswith(("http://", "https://")):
            raise ValueError(f"public_url must be an absolute http(s) URL, not {self.public_url!r}")
        if min(self.timeout_s, self.connect_timeout_s, self.retry_base_s, self.block_s, self.sweep_interval_s) <= 0:
            raise ValueError("webhook timeouts and intervals must be positive")
        if self.concurrency < 1 or self.max_response_bytes < 1:
            raise ValueError("webhook concurrency and max_response_bytes must be at least 1")


@dataclass(frozen=True)
class AttemptResult:
    """How one POST went."""

    status_code: int | None
    error: str | None
    """The class of the failure — the status code, a timeout, a refused connection — as the task's status shows it
    to whoever submitted it: never what the receiver said, which may be an internal service's answer."""
    elapsed_s: float
    response_bytes: int = 0
    """Bytes of the answer's body read (never more than ``max_response_bytes``)."""
    permanent: bool = False
    """A failure no retry can fix (a refused URL, a task without a callback)."""
    detail: str | None = None
    """More than the class, for the operator's log only: the start of the receiver's answer, the connection error."""

    @property
    def delivered(self) -> bool:
        return self.error is None and self.status_code is not None and 200 <= self.status_code < 300


@dataclass(frozen=True)
class Delivery:
    """One claimed delivery, attempted and recorded."""

    lease: DeliveryLease
    attempt: DeliveryAttempt
    settled: Settled
    result: AttemptResult


@dataclass
class _InFlight:
    """A delivery in hand. The lock orders renewals and the acknowledgement: both use the lease's token."""

    lease: DeliveryLease
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    settling: bool = False
    """Being acknowledged, or its lease was lost: no more renewals."""


def _excerpt(raw: bytes) -> str:
    text = raw[:200].decode("utf-8", errors="replace")
    return "".join(c if c.isprintable() else " " for c in text).strip()


def _more(result: AttemptResult) -> str:
    """The log's extra about a failed attempt (never shown to the submitter)."""
    return f"; {result.detail}" if result.detail else ""


def _chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and every exception it was raised from (httpx wraps httpcore's, which wraps the socket's)."""
    found: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def connection_failure(exc: Exception) -> str:
    """The class of a failed connection or exchange, in words, without the addresses or text the error carries."""
    if isinstance(exc, httpx.TimeoutException):
        return "timed out connecting" if isinstance(exc, httpx.ConnectTimeout) else "timed out"
    chain = _chain(exc)
    if any(isinstance(cause, ssl.SSLCertVerificationError) for cause in chain):
        return "the receiver's TLS certificate did not verify"
    if any(isinstance(cause, ssl.SSLError) for cause in chain):
        return "the TLS handshake failed"
    if any(isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == errno.ECONNREFUSED for cause in chain):
        return "connection refused"
    if isinstance(exc, httpx.ConnectError):
        return "could not connect"
    if isinstance(exc, httpx.RemoteProtocolError):
        return "the receiver broke the HTTP exchange"
    return f"the connection failed ({type(exc).__name__})"


class Deliverer:
    """Delivers due webhooks until stopped (:meth:`run`), beside the API's routes.

    ``verify`` is the TLS context for https receivers (certifi's roots by default); ``rng`` draws
    the jitter. Time comes from the delivery queue's clock: Redis's, so the deliverers' hosts need not agree.
    """

    def __init__(
        self,
        queue: DeliveryQueue,
        jobs: JobQueue,
        signer: WebhookSigner,
        guard: SsrfGuard,
        config: WebhookConfig,
        *,
        holder: str | None = None,
        verify: ssl.SSLContext | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.queue = queue
        self.jobs = jobs
        self.signer = signer
        self.guard = guard
        self.config = config
        self.holder = holder or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self._ssl = verify or ssl.create_default_context(cafile=certifi.where())
        self._rng = rng or random.Random()
        self._inflight: dict[str, _InFlight] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.outage = RedisOutage(log, "webhook deliveries wait until it is back", resumed="webhook deliveries resume")

    async def now(self) -> float:
        """Unix seconds by the delivery queue's clock (Redis's ``TIME``; a test's pinned clock)."""
        return await self.queue.clock.now()

    # ---- the loop ------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and deliver until ``stop`` is set; then give deliveries in flight ``drain_s`` to finish.

        Deliveries cut short keep their lease until it lapses; the sweep then hands them to the
        next claim (their receiver may see that attempt twice).
        """
        upkeep = Upkeep(
            [
                Chore("webhook lease renewal", self.queue.config.lease_s / 3, self._renew_leases),
                Chore("webhook sweep", self.config.sweep_interval_s, self._sweep),
            ],
            self.outage,
            log,
        )
        upkeep.start()
        try:
            while not stop.is_set():
                if len(self._tasks) >= self.config.concurrency:
                    await self._wait_for_slot(stop)
                    continue
                try:
                    lease = await self.queue.claim(self.holder, self.config.block_s)
                except REDIS_ERRORS as exc:
                    self.outage.lost("claim a delivery", exc)
                    await self.outage.back_off(stop)
                    continue
                self.outage.back()
                if lease is not None:
                    self._start(lease)
        finally:
            await self._drain()
            await upkeep.stop(self.config.sweep_interval_s + 5)

    async def run_once(self, block_s: float = 0.0) -> Delivery | None:
        """Claim one due delivery (waiting up to ``block_s``) and deliver it now; None if none was due."""
        lease = await self.queue.claim(self.holder, block_s)
        if lease is None:
            return None
        entry = self._inflight[lease.job_id] = _InFlight(lease)
        try:
            return await self._deliver(entry)
        finally:
            self._inflight.pop(lease.job_id, None)

    def _start(self, lease: DeliveryLease) -> None:
        entry = self._inflight[lease.job_id] = _InFlight(lease)
        task = asyncio.create_task(self._deliver_in_background(entry))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _deliver_in_background(self, entry: _InFlight) -> None:
        try:
            await self._deliver(entry)
        except Exception:
            log.exception(
                "webhook delivery for task %s failed unexpectedly; its lease will lapse and it will be retried", entry.lease.job_id
            )
        finally:
            if self._inflight.get(entry.lease.job_id) is entry:
                del self._inflight[entry.lease.job_id]

    async def _wait_for_slot(self, stop: asyncio.Event) -> None:
        stopping = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({*self._tasks, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()

    async def _drain(self) -> None:
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=self.config.drain_s)
        if pending:
            log.warning("leaving %d webhook delivery(ies) in flight to the sweep", len(pending))
            for task in pending:
                task.cancel()
            await asyncio.wait(pending, timeout=2)

    # ---- one delivery ----------------------------------------------------------------------------

    async def _deliver(self, entry: _InFlight) -> Delivery:
        """Attempt the claimed delivery, then log it and act on it: done, retry later, or give up."""
        job_id = entry.lease.job_id
        number = entry.lease.attempts + 1
        started_at = await self.now()
        job = await self.jobs.get(job_id)
        result = await self._attempt(job, number)
        now = await self.now()
        if result.delivered:
            record = DeliveryAttempt(number, started_at, AttemptOutcome.DELIVERED, result.status_code, None, result.elapsed_s)
            log.info("webhook for task %s delivered (attempt %d, HTTP %s)", job_id, number, result.status_code)
        else:
            ended_at = job.finished_at if job is not None and job.finished_at is not None else started_at
            give_up_at = ended_at + self.config.max_age_s
            if result.permanent or now >= give_up_at:
                error = (
                    result.error
                    if result.permanent
                    else f"{result.error}; gave up {self.config.max_age_s:.0f}s after the task ended"
                )
                record = DeliveryAttempt(number, started_at, AttemptOutcome.GAVE_UP, result.status_code, error, result.elapsed_s)
                log.warning("webhook for task %s: attempt %d failed, giving up: %s%s", job_id, number, error, _more(result))
            else:
                delay = retry_delay_s(number, self.config.retry_base_s, self.config.retry_cap_s, self._rng)
                at = min(now + delay, give_up_at)
                record = DeliveryAttempt(
                    number, started_at, AttemptOutcome.RETRYING, result.status_code, result.error, result.elapsed_s, at
                )
                log.warning(
                    "webhook for task %s: attempt %d failed (%s%s); retrying in %.0fs",
                    job_id,
                    number,
                    result.error,
                    _more(result),
                    at - now,
                )
        settled = await self._settle(entry, record)
        if settled is Settled.LOST:
            log.warning("webhook lease on task %s was lost during attempt %d; another deliverer holds it", job_id, number)
        return Delivery(entry.lease, record, settled, result)

    async def _settle(self, entry: _InFlight, record: DeliveryAttempt) -> Settled:
        """Record the attempt, retrying briefly through a Redis blip (:data:`_SETTLE_TRIES` tries).

        Should Redis stay away, the error propagates: the lease lapses and the delivery is attempted again.
        """
        failures = 0

        def out_of_tries() -> bool:
            nonlocal failures
            failures += 1
            return failures >= _SETTLE_TRIES

        return await self.outage.persist(lambda: self._record(entry, record), "record a webhook attempt", give_up=out_of_tries)

    async def _record(self, entry: _InFlight, record: DeliveryAttempt) -> Settled:
        """Record the attempt under the lease's lock (a renewal changes its token)."""
        async with entry.lock:
            entry.settling = True
            if record.outcome is AttemptOutcome.DELIVERED:
                return await self.queue.succeeded(entry.lease, record)
            if record.outcome is AttemptOutcome.RETRYING and record.next_attempt_at is not None:
                return await self.queue.retry(entry.lease, record, record.next_attempt_at)
            return await self.queue.give_up(entry.lease, record)

    async def _attempt(self, job: Job | None, number: int) -> AttemptResult:
        if job is None:
            return AttemptResult(None, "the task expired before its webhook was delivered", 0.0, permanent=True)
        url = getattr(job.params, "callback_url", None)
        if not url:
            return AttemptResult(None, "the task has no callback_url", 0.0, permanent=True)
        if not job.status.is_final:
            return AttemptResult(None, f"the task is {job.status.value}, not finished", 0.0, permanent=True)
        return await self.post(job, url, number)

    async def post(self, job: Job, url: str, attempt: int = 1) -> AttemptResult:
        """One signed POST of ``job``'s outcome to ``url``, within ``timeout_s`` overall; never raises for the receiver's faults."""
        started = time.perf_counter()

        def elapsed() -> float:
            return round(time.perf_counter() - started, 3)

        try:
            async with asyncio.timeout(self.config.timeout_s):
                target = await self.guard.check(url)
                body = json.dumps(webhook_payload(job, self.config.public_url), separators=(",", ":")).encode()
                headers = {
                    **self.signer.headers(event_id(job), body, int(await self.now())),
                    ATTEMPT_HEADER: str(attempt),
                    "content-type": "application/json",
                    "user-agent": USER_AGENT,
                    "accept-encoding": "identity",
                    "connection": "close",
                }
                status, read, error, detail = await self._send(target, body, headers)
        except RefusedUrl as exc:
            return AttemptResult(None, str(exc), elapsed(), permanent=True)
        except UnresolvableUrl as exc:
            return AttemptResult(None, "the host did not resolve", elapsed(), detail=str(exc))
        except TimeoutError:
            return AttemptResult(None, f"no complete answer within {self.config.timeout_s:g}s", elapsed())
        except (httpx.HTTPError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            return AttemptResult(None, connection_failure(exc), elapsed(), detail=detail)
        # A redirect is given up at once: it is not followed, and the same URL will only redirect again.
        return AttemptResult(status, error, elapsed(), read, detail=detail, permanent=300 <= status < 400)

    async def _send(self, target: Target, body: bytes, headers: dict[str, str]) -> tuple[int, int, str | None, str | None]:
        """POST to the approved addresses in turn (the next only when connecting fails): (status, bytes read, error, and
        for the log only, what the receiver said)."""
        last: httpx.HTTPError | None = None
        for address in target.addresses[:_MAX_ADDRESSES_TRIED]:
            try:
                return await self._send_to(target, address, body, headers)
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                last = exc
        assert last is not None
        raise last

    async def _send_to(
        self, target: Target, address: IPAddress, body: bytes, headers: dict[str, str]
    ) -> tuple[int, int, str | None, str | None]:
        pinned = target.url.copy_with(host=str(address))
        timeout = httpx.Timeout(self.config.timeout_s, connect=self.config.connect_timeout_s)
        # A fresh client per attempt: no connection verified for another name is ever reused.
        async with httpx.AsyncClient(verify=self._ssl, trust_env=False, follow_redirects=False, timeout=timeout) as client:
            request = client.build_request(
                "POST",
                pinned,
                content=body,
                headers={**headers, "host": target.url.netloc.decode("ascii")},
                extensions={"sni_hostname": target.url.raw_host.decode("ascii")},
            )
            response = await client.send(request, stream=True)
            try:
                head = bytearray()
                async for chunk in response.aiter_raw():
                    head += chunk[: self.config.max_response_bytes - len(head)]
                    if len(head) >= self.config.max_response_bytes:
                        break
            finally:
                await response.aclose()
        status = response.status_code
        if 200 <= status < 300:
            return status, len(head), None, None
        excerpt = _excerpt(bytes(head))
        if 300 <= status < 400:
            location = response.headers.get("location", "")
            error = f"the receiver answered {status} (a redirect); redirects are not followed"
            return status, len(head), error, f"a redirect to {location[:200]!r}"
        return status, len(head), f"the receiver answered {status}", f"it said: {excerpt}" if excerpt else None

    # ---- upkeep: the chores beside the loop (run by ttsq.runtime.upkeep) -------------------------

    async def _renew_leases(self) -> bool:
        """Move every lease in hand forward (every third of a lease, so one missed renewal never loses one); False
        when there was none (no Redis call: see :class:`ttsq.runtime.upkeep.Chore`)."""
        if not self._inflight:
            return False
        for entry in list(self._inflight.values()):
            async with entry.lock:
                if entry.settling:
                    continue
                renewed = await self.queue.renew(entry.lease)
                if renewed is None:
                    entry.settling = True
                    log.warning("webhook lease on task %s was lost; another deliverer may deliver it too", entry.lease.job_id)
                else:
                    entry.lease = renewed
        return True

    async def _sweep(self) -> None:
        report = await self.queue.sweep()
        if report.requeued or report.orphans:
            log.warning("delivery sweep: %d lapsed lease(s) requeued, %d claim(s) never leased", report.requeued, report.orphans)
