"""Completion webhooks: a signed POST to the task's ``callback_url`` when it ends, delivered safely.

Three parts, each usable alone:

* :class:`WebhookSigner` signs a body the Stripe/Svix way — ``ttsq-signature: t=<unix>,v1=<hex>``
  where the hex is HMAC-SHA256 over ``f"{t}.{body}"`` — and :func:`verify` is the receiver's side.
  The timestamp is signed so a captured request cannot be replayed after the tolerance.
* :class:`SsrfGuard` decides where the service may send a request. A ``callback_url`` is chosen by
  whoever submits a task, so without a guard the service would POST, from inside the network, to
  anything that submitter names: the cloud metadata endpoint, Redis, an admin port. Only http(s)
  without credentials is accepted; the host is resolved and *every* address must be globally
  routable (or allow-listed), so a name with one public and one private address is refused.
* :class:`Deliverer` is the background loop: it claims due deliveries from
  :class:`ttsq.store.deliveries.DeliveryQueue`, POSTs them concurrently (a semaphore-like limit, so
  a slow receiver holds one slot, not the loop), renews their leases meanwhile, retries failures
  with exponential backoff and full jitter for at most ``max_age_s`` after the task ended, and
  sweeps. It runs in the API process beside the routes and never touches inference.

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
import contextlib
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import random
import secrets
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import quote

import certifi
import httpx
from redis.exceptions import RedisError

from ttsq.domain.jobs import Job, Status
from ttsq.store.deliveries import AttemptOutcome, DeliveryAttempt, DeliveryLease, DeliveryQueue, Settled
from ttsq.store.queue import JobQueue

log = logging.getLogger("ttsq.webhooks")

SIGNATURE_HEADER = "ttsq-signature"
EVENT_ID_HEADER = "ttsq-event-id"
"""The task id: the same on every attempt, so a receiver can drop the duplicates at-least-once delivery allows."""
ATTEMPT_HEADER = "ttsq-delivery-attempt"
USER_AGENT = "ttsq-webhooks/1"
MAX_URL_CHARS = 2048
_REDIS_BACKOFF_MAX_S = 10.0
_MAX_ADDRESSES_TRIED = 3
"""Addresses of one name tried in turn when connecting fails (say, an AAAA record on a host without IPv6)."""

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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


# ---- the SSRF guard ---------------------------------------------------------------------------


class AddressClass(StrEnum):
    """Why an address is not one the service may call (each named in the refusal)."""

    UNSPECIFIED = "unspecified"
    LOOPBACK = "loopback"
    PRIVATE = "private"
    LINK_LOCAL = "link-local"
    MULTICAST = "multicast"
    SHARED = "shared"
    RESERVED = "reserved"
    SPECIAL = "special-purpose"
    CLOUD_METADATA = "cloud metadata"


_METADATA = {
    ipaddress.ip_address("169.254.169.254"): "cloud metadata",
    ipaddress.ip_address("169.254.170.2"): "cloud metadata, AWS ECS",
    ipaddress.ip_address("fd00:ec2::254"): "AWS instance metadata over IPv6",
    ipaddress.ip_address("100.100.100.200"): "Alibaba Cloud",
    ipaddress.ip_address("168.63.129.16"): "Azure WireServer",
}
"""Metadata endpoints, refused by name (168.63.129.16 is even globally routable)."""

_PRIVATE = [ipaddress.ip_network(net) for net in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "fc00::/7", "fec0::/10")]
_SHARED = ipaddress.ip_network("100.64.0.0/10")
_THIS_NETWORK = ipaddress.ip_network("0.0.0.0/8")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


@dataclass(frozen=True)
class Refusal:
    """Why one address is refused."""

    address: IPAddress
    address_class: AddressClass
    note: str | None = None

    def describe(self) -> str:
        article = "an" if self.address_class.value[0] in "aeiou" else "a"
        kind = f"{article} {self.address_class.value} address"
        return f"{kind} ({self.note})" if self.note else kind


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address carries (mapped, NAT64, 6to4): it is where packets end up."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped, "IPv4-mapped"
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "NAT64"
    if address.sixtofour is not None:
        return address.sixtofour, "6to4"
    return None


def classify(address: IPAddress) -> Refusal | None:
    """Why the service must not call ``address``; None when it is globally routable."""
    if isinstance(address, ipaddress.IPv6Address):
        address = address if address.scope_id is None else ipaddress.IPv6Address(str(address).split("%")[0])
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            inner = classify(embedded[0])
            if inner is not None:
                return Refusal(
                    address, inner.address_class, f"{embedded[1]} {embedded[0]}" + (f", {inner.note}" if inner.note else "")
                )
    if address in _METADATA:
        name = _METADATA[address]
        return Refusal(address, AddressClass.LINK_LOCAL if address.is_link_local else AddressClass.CLOUD_METADATA, name)
    if address.is_unspecified or address in _THIS_NETWORK:
        return Refusal(address, AddressClass.UNSPECIFIED)
    checks: tuple[tuple[bool, AddressClass, str | None], ...] = (
        (address.is_loopback, AddressClass.LOOPBACK, None),
        (address.is_link_local, AddressClass.LINK_LOCAL, None),
        (address.is_multicast, AddressClass.MULTICAST, None),
        (address in _SHARED, AddressClass.SHARED, "carrier-grade NAT, 100.64.0.0/10"),
        (any(address in net for net in _PRIVATE), AddressClass.PRIVATE, None),
        (address.is_reserved, AddressClass.RESERVED, None),
        (not address.is_global, AddressClass.SPECIAL, "not globally routable"),
    )
    for hit, address_class, note in checks:
        if hit:
            return Refusal(address, address_class, note)
    return None


class RefusedUrl(ValueError):
    """A ``callback_url`` the service will not call, ever (not retried). The message is for the client."""

    def __init__(self, message: str, refusal: Refusal | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


class UnresolvableUrl(Exception):
    """The host did not resolve (now): a delivery retries; a submit may refuse it."""


Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
"""(host, port) → IP address strings; :func:`system_resolver` in production, a table in tests."""


async def system_resolver(host: str, port: int) -> list[str]:
    """Every A and AAAA address of ``host``, through the event loop's ``getaddrinfo``."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    found = [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class Target:
    """A URL the guard approved and the addresses it approved for it (connect only to these)."""

    url: httpx.URL
    port: int
    addresses: tuple[IPAddress, ...]


class SsrfGuard:
    """Only http(s), no credentials in the URL, and every resolved address globally routable.

    ``allow`` names exceptions (``WEBHOOK_ALLOW``): CIDR networks or single addresses
    (``10.20.0.0/16``, ``127.0.0.1``, ``fd00::/8``), or host names whose every address is then
    accepted (an allow-listed name trusts its DNS: prefer networks).
    """

    def __init__(self, allow: Iterable[str] = (), *, resolver: Resolver = system_resolver, resolve_timeout_s: float = 5.0) -> None:
        self.networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
        self.hosts: set[str] = set()
        for entry in (item.strip() for item in allow):
            if not entry:
                continue
            try:
                self.networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                host = entry.lower().rstrip(".")
                if not host or any(not (c.isalnum() or c in "-._") for c in host):
                    raise ValueError(f"webhook allow-list entry {entry!r} is neither a network nor a host name") from None
                self.hosts.add(host)
        self.resolver = resolver
        self.resolve_timeout_s = resolve_timeout_s

    def parse(self, url: str) -> httpx.URL:
        """The checks that need no DNS (for a submit to refuse a bad URL at once): scheme, credentials, host."""
        if len(url) > MAX_URL_CHARS:
            raise RefusedUrl(f"callback_url is longer than {MAX_URL_CHARS} characters")
        try:
            parsed = httpx.URL(url)
        except httpx.InvalidURL as exc:
            raise RefusedUrl(f"callback_url is not a valid URL: {exc}") from exc
        if not parsed.scheme:
            raise RefusedUrl("callback_url must be an absolute http or https URL")
        if parsed.scheme not in ("http", "https"):
            raise RefusedUrl(f"callback_url must be an http or https URL, not {parsed.scheme}")
        if parsed.userinfo:
            raise RefusedUrl("callback_url must not carry a user name or password")
        if not parsed.host:
            raise RefusedUrl("callback_url has no host")
        return parsed

    def _allowed(self, address: IPAddress) -> bool:
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            candidates.append(address.ipv4_mapped)
        return any(candidate in net for candidate in candidates for net in self.networks)

    async def check(self, url: str) -> Target:
        """Approve ``url`` and the addresses to connect to, or raise :class:`RefusedUrl` / :class:`UnresolvableUrl`."""
        parsed = self.parse(url)
        host = parsed.raw_host.decode("ascii")
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            addresses: list[IPAddress] = [ipaddress.ip_address(host)]
        except ValueError:
            addresses = await self._resolve(host, port)
        named = host.lower().rstrip(".") in self.hosts
        for address in addresses:
            refusal = classify(address)
            if refusal is not None and not named and not self._allowed(address):
                raise RefusedUrl(f"callback_url resolves to {address}, {refusal.describe()}; refused", refusal)
        return Target(url=parsed, port=port, addresses=tuple(addresses))

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        try:
            async with asyncio.timeout(self.resolve_timeout_s):
                found = await self.resolver(host, port)
        except (OSError, TimeoutError) as exc:
            raise UnresolvableUrl(f"callback_url host {host!r} did not resolve: {exc or 'timed out'}") from exc
        addresses: list[IPAddress] = []
        for text in found:
            try:
                addresses.append(ipaddress.ip_address(text.split("%")[0]))
            except ValueError as exc:
                raise UnresolvableUrl(f"callback_url host {host!r} resolved to {text!r}, not an address") from exc
        if not addresses:
            raise UnresolvableUrl(f"callback_url host {host!r} has no address")
        return addresses


# ---- delivery -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class WebhookConfig:
    """Delivery timings and limits. ``public_url`` and the first three come from settings (``app.py``)."""

    public_url: str
    """Base of ``result_url`` (``PUBLIC_URL``), e.g. ``https://tts.example.com``."""
    timeout_s: float
    """Bound on one whole attempt: resolving, connecting, sending, the answer (``WEBHOOK_TIMEOUT_S``)."""
    max_age_s: float
    """No new attempt after this long past the task's end (``WEBHOOK_MAX_AGE_S``)."""
    connect_timeout_s: float = 3.0
    retry_base_s: float = 10.0
    """Ceiling of the first retry's delay; the ceiling doubles with each failure (full jitter beneath it)."""
    retry_cap_s: float = 3600.0
    """Largest ceiling of a retry delay."""
    max_response_bytes: int = 4096
    concurrency: int = 8
    """Deliveries in flight at once, per deliverer."""
    block_s: float = 1.0
    """Longest wait for a due delivery in one claim (keep it under the Redis socket timeout)."""
    sweep_interval_s: float = 5.0
    drain_s: float = 5.0
    """On stop, how long deliveries in flight may finish; the rest are left to the sweep."""

    def __post_init__(self) -> None:
        if not self.public_url.startswith(("http://", "https://")):
            raise ValueError(f"public_url must be an absolute http(s) URL, not {self.public_url!r}")
        if min(self.timeout_s, self.connect_timeout_s, self.retry_base_s, self.block_s, self.sweep_interval_s) <= 0:
            raise ValueError("webhook timeouts and intervals must be positive")
        if self.concurrency < 1 or self.max_response_bytes < 1:
            raise ValueError("webhook concurrency and max_response_bytes must be at least 1")


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


@dataclass(frozen=True)
class AttemptResult:
    """How one POST went."""

    status_code: int | None
    error: str | None
    elapsed_s: float
    response_bytes: int = 0
    """Bytes of the answer's body read (never more than ``max_response_bytes``)."""
    permanent: bool = False
    """A failure no retry can fix (a refused URL, a task without a callback)."""

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


class Deliverer:
    """Delivers due webhooks until stopped (:meth:`run`), beside the API's routes.

    ``verify`` is the TLS context for https receivers (certifi's roots by default); ``rng`` draws
    the jitter. Time comes from the delivery queue's clock.
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
        self._closing = asyncio.Event()
        self._redis_ok = True
        self._backoff_s = 0.5

    @property
    def clock(self) -> Callable[[], float]:
        return self.queue.clock

    # ---- the loop ------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        """Claim and deliver until ``stop`` is set; then give deliveries in flight ``drain_s`` to finish.

        Deliveries cut short keep their lease until it lapses; the sweep then hands them to the
        next claim (their receiver may see that attempt twice).
        """
        self._closing.clear()
        upkeep = asyncio.create_task(self._upkeep())
        try:
            while not stop.is_set():
                if len(self._tasks) >= self.config.concurrency:
                    await self._wait_for_slot(stop)
                    continue
                try:
                    lease = await self.queue.claim(self.holder, self.config.block_s)
                except (RedisError, OSError) as exc:
                    self._redis_lost("claim a delivery", exc)
                    await _sleep_unless(stop, self._backoff_s)
                    self._backoff_s = min(self._backoff_s * 2, _REDIS_BACKOFF_MAX_S)
                    continue
                self._redis_back()
                if lease is not None:
                    self._start(lease)
        finally:
            await self._drain()
            self._closing.set()
            _, pending = await asyncio.wait({upkeep}, timeout=self.config.sweep_interval_s + 5)
            for task in pending:  # a Redis command that would not return: cancellation is the fallback
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2)

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
        started_at = self.clock()
        job = await self.jobs.get(job_id)
        result = await self._attempt(job, number)
        now = self.clock()
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
                log.warning("webhook for task %s: attempt %d failed, giving up: %s", job_id, number, error)
            else:
                delay = retry_delay_s(number, self.config.retry_base_s, self.config.retry_cap_s, self._rng)
                at = min(now + delay, give_up_at)
                record = DeliveryAttempt(
                    number, started_at, AttemptOutcome.RETRYING, result.status_code, result.error, result.elapsed_s, at
                )
                log.warning(
                    "webhook for task %s: attempt %d failed (%s); retrying in %.0fs", job_id, number, result.error, at - now
                )
        settled = await self._settle(entry, record)
        if settled is Settled.LOST:
            log.warning("webhook lease on task %s was lost during attempt %d; another deliverer holds it", job_id, number)
        return Delivery(entry.lease, record, settled, result)

    async def _settle(self, entry: _InFlight, record: DeliveryAttempt) -> Settled:
        """Record the attempt under the lease's lock (a renewal changes its token), retrying briefly through a Redis blip.

        Should Redis stay away, the error propagates: the lease lapses and the delivery is attempted again.
        """
        pauses = [0.2, 1.0]
        while True:
            try:
                async with entry.lock:
                    entry.settling = True
                    if record.outcome is AttemptOutcome.DELIVERED:
                        return await self.queue.succeeded(entry.lease, record)
                    if record.outcome is AttemptOutcome.RETRYING and record.next_attempt_at is not None:
                        return await self.queue.retry(entry.lease, record, record.next_attempt_at)
                    return await self.queue.give_up(entry.lease, record)
            except (RedisError, OSError) as exc:
                if not pauses:
                    raise
                self._redis_lost("record a webhook attempt", exc)
                await asyncio.sleep(pauses.pop(0))

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
                    **self.signer.headers(event_id(job), body, int(self.clock())),
                    ATTEMPT_HEADER: str(attempt),
                    "content-type": "application/json",
                    "user-agent": USER_AGENT,
                    "accept-encoding": "identity",
                    "connection": "close",
                }
                status, read, error = await self._send(target, body, headers)
        except RefusedUrl as exc:
            return AttemptResult(None, str(exc), elapsed(), permanent=True)
        except UnresolvableUrl as exc:
            return AttemptResult(None, str(exc), elapsed())
        except TimeoutError:
            return AttemptResult(None, f"no complete answer within {self.config.timeout_s:g}s", elapsed())
        except (httpx.HTTPError, OSError) as exc:
            return AttemptResult(None, f"{type(exc).__name__}: {exc}".rstrip(": "), elapsed())
        return AttemptResult(status, error, elapsed(), read)

    async def _send(self, target: Target, body: bytes, headers: dict[str, str]) -> tuple[int, int, str | None]:
        """POST to the approved addresses in turn (the next only when connecting fails): (status, bytes read, error)."""
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
    ) -> tuple[int, int, str | None]:
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
            return status, len(head), None
        if 300 <= status < 400:
            location = response.headers.get("location", "")
            return (
                status,
                len(head),
                f"the receiver answered {status} (a redirect to {location[:200]!r}); redirects are not followed",
            )
        detail = _excerpt(bytes(head))
        return status, len(head), f"the receiver answered {status}" + (f": {detail}" if detail else "")

    # ---- upkeep ---------------------------------------------------------------------------------

    async def _upkeep(self) -> None:
        """Renew the leases in hand every third of a lease, and sweep every ``sweep_interval_s``."""
        renew_every = self.queue.lease_s / 3
        next_renew = next_sweep = time.monotonic()
        while not self._closing.is_set():
            now = time.monotonic()
            try:
                if now >= next_renew:
                    next_renew = now + renew_every
                    await self._renew_leases()
                if now >= next_sweep:
                    next_sweep = now + self.config.sweep_interval_s
                    report = await self.queue.sweep()
                    if report.requeued or report.orphans:
                        log.warning(
                            "delivery sweep: %d lapsed lease(s) requeued, %d claim(s) never leased", report.requeued, report.orphans
                        )
            except (RedisError, OSError) as exc:
                self._redis_lost("webhook upkeep", exc)
            except Exception:
                log.exception("webhook upkeep failed; trying again at its next interval")
            else:
                self._redis_back()
            await _sleep_unless(self._closing, max(0.0, min(next_renew, next_sweep) - time.monotonic()))

    async def _renew_leases(self) -> None:
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

    def _redis_lost(self, what: str, exc: BaseException) -> None:
        if self._redis_ok:
            log.warning("Redis unavailable (%s: %s); webhook deliveries wait until it is back", what, exc)
        self._redis_ok = False

    def _redis_back(self) -> None:
        if not self._redis_ok:
            log.info("Redis is reachable again; webhook deliveries resume")
        self._redis_ok = True
        self._backoff_s = 0.5


async def _sleep_unless(event: asyncio.Event, seconds: float) -> None:
    """Sleep, but wake at once when ``event`` is set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
