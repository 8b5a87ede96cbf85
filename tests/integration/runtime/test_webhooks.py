"""Completion webhooks: signatures, the SSRF guard, and delivery to a real HTTP receiver.

The receiver is a small asyncio HTTP/1.1 server on 127.0.0.1 (loopback, so the tests allow-list
127.0.0.1 where they mean to deliver). Deliveries go through a real redis-server, and retries are
driven by the test's clock and the sweep, never by sleeping.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

from tests.conftest import FakeClock, settings
from tests.unit.store.test_deliveries import delivery_config, finished_job
from ttsq.domain.jobs import Status
from ttsq.domain.ssrf import AddressClass, RefusedUrl, Resolver, SsrfGuard, UnresolvableUrl
from ttsq.domain.webhooks import (
    ATTEMPT_HEADER,
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    SignatureError,
    WebhookSigner,
    retry_delay_s,
    verify,
)
from ttsq.runtime.deliverer import Deliverer, WebhookConfig, system_resolver
from ttsq.store.deliveries import AttemptOutcome, DeliveryQueue
from ttsq.store.queue import JobQueue
from ttsq.store.replies import Settled

SECRET = "whsec-test-0123456789abcdef"
PUBLIC_URL = "https://tts.example.com"
LEASE_S = 30.0


def webhook_config(**overrides: Any) -> WebhookConfig:
    """The deliverer's config as settings build it; ``overrides`` name its fields (``block_s`` is ``BLOCK_S``)."""
    values: dict[str, Any] = {"webhook_secret": SECRET, "public_url": PUBLIC_URL, "webhook_timeout_s": 5.0}
    values |= {"webhook_retry_base_s": 10.0, "webhook_retry_cap_s": 100.0}
    values |= {name if name == "block_s" else f"webhook_{name}": value for name, value in overrides.items()}
    config = settings(**values).webhook_config()
    assert config is not None
    return config


def make_guard(allow: Sequence[str] = (), resolver: Resolver = system_resolver) -> SsrfGuard:
    """The SSRF guard with the resolve timeout settings give it (``WEBHOOK_RESOLVE_TIMEOUT_S``)."""
    return SsrfGuard(allow, resolver=resolver, resolve_timeout_s=settings().webhook_resolve_timeout_s)


# ---- signatures ---------------------------------------------------------------------------------


def test_a_signature_verifies_and_returns_its_timestamp() -> None:
    body = b'{"task_id":"t1","status":"done"}'
    header = WebhookSigner(SECRET).sign(body, 1_800_000_000)
    assert header.startswith("t=1800000000,v1=")
    assert verify(header, body, SECRET, tolerance_s=300, now=1_800_000_100) == 1_800_000_000


def test_a_tampered_body_does_not_verify() -> None:
    header = WebhookSigner(SECRET).sign(b'{"status":"failed"}', 1_800_000_000)
    with pytest.raises(SignatureError, match="does not match"):
        verify(header, b'{"status":"done"}', SECRET, tolerance_s=300, now=1_800_000_000)


def test_a_tampered_timestamp_does_not_verify() -> None:
    header = WebhookSigner(SECRET).sign(b"{}", 1_800_000_000).replace("t=1800000000", "t=1800000001")
    with pytest.raises(SignatureError, match="does not match"):
        verify(header, b"{}", SECRET, tolerance_s=300, now=1_800_000_000)


@pytest.mark.parametrize("skew", [-301, 301])
def test_a_stale_or_future_timestamp_does_not_verify(skew: int) -> None:
    header = WebhookSigner(SECRET).sign(b"{}", 1_800_000_000)
    with pytest.raises(SignatureError, match="tolerance"):
        verify(header, b"{}", SECRET, tolerance_s=300, now=1_800_000_000 + skew)


def test_another_secret_does_not_verify() -> None:
    header = WebhookSigner(SECRET).sign(b"{}", 1_800_000_000)
    with pytest.raises(SignatureError):
        verify(header, b"{}", "another-secret-of-enough-length", tolerance_s=300, now=1_800_000_000)


@pytest.mark.parametrize("header", ["", "v1=abc", "t=1800000000", "t=soon,v1=abc", "garbage"])
def test_a_malformed_header_does_not_verify(header: str) -> None:
    with pytest.raises(SignatureError, match="malformed"):
        verify(header, b"{}", SECRET, tolerance_s=300, now=1_800_000_000)


def test_any_of_several_v1_signatures_verifies_during_a_rotation() -> None:
    old = WebhookSigner("the-old-secret-0123456789").sign(b"{}", 1_800_000_000)
    new = WebhookSigner(SECRET).sign(b"{}", 1_800_000_000)
    header = f"{old},v1={new.split('v1=')[1]}"
    assert verify(header, b"{}", SECRET, tolerance_s=300, now=1_800_000_000) == 1_800_000_000


def test_a_short_secret_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        WebhookSigner("short")


# ---- the SSRF guard -----------------------------------------------------------------------------


def table(names: Mapping[str, Sequence[str]]) -> Callable[[str, int], Awaitable[Sequence[str]]]:
    """A resolver that answers from ``names`` (and fails, like DNS, for anything else)."""

    async def resolve(host: str, port: int) -> Sequence[str]:
        if host not in names:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return names[host]

    return resolve


REFUSED = [
    ("http://127.0.0.1/hook", AddressClass.LOOPBACK),
    ("http://127.8.9.10/hook", AddressClass.LOOPBACK),
    ("http://10.1.2.3/hook", AddressClass.PRIVATE),
    ("http://172.16.0.1/hook", AddressClass.PRIVATE),
    ("http://172.31.255.254/hook", AddressClass.PRIVATE),
    ("http://192.168.1.10/hook", AddressClass.PRIVATE),
    ("http://169.254.169.254/latest/meta-data/", AddressClass.LINK_LOCAL),
    ("http://169.254.1.1/", AddressClass.LINK_LOCAL),
    ("http://[fe80::1]/", AddressClass.LINK_LOCAL),
    ("http://[fe80::1%25eth0]/", AddressClass.LINK_LOCAL),
    ("http://[::1]/", AddressClass.LOOPBACK),
    ("http://224.0.0.1/", AddressClass.MULTICAST),
    ("http://[ff02::1]/", AddressClass.MULTICAST),
    ("http://0.0.0.0/", AddressClass.UNSPECIFIED),
    ("http://0.1.2.3/", AddressClass.UNSPECIFIED),
    ("http://[::]/", AddressClass.UNSPECIFIED),
    ("http://100.64.0.1/", AddressClass.SHARED),
    ("http://100.127.255.254/", AddressClass.SHARED),
    ("http://[::ffff:127.0.0.1]/", AddressClass.LOOPBACK),
    ("http://[::ffff:10.0.0.1]/", AddressClass.PRIVATE),
    ("http://[::ffff:169.254.169.254]/", AddressClass.LINK_LOCAL),
    ("http://[64:ff9b::7f00:1]/", AddressClass.LOOPBACK),
    ("http://[2002:7f00:1::1]/", AddressClass.LOOPBACK),
    ("http://[fc00::1]/", AddressClass.PRIVATE),
    ("http://[fd12:3456::1]/", AddressClass.PRIVATE),
    ("http://240.0.0.1/", AddressClass.RESERVED),
    ("http://255.255.255.255/", AddressClass.RESERVED),
    ("http://192.0.2.1/", AddressClass.SPECIAL),
    ("http://198.18.0.1/", AddressClass.SPECIAL),
    ("http://168.63.129.16/", AddressClass.CLOUD_METADATA),
    ("https://[fd00:ec2::254]/", AddressClass.CLOUD_METADATA),
]


@pytest.mark.parametrize(("url", "address_class"), REFUSED)
async def test_every_refused_address_class_is_refused_by_name(url: str, address_class: AddressClass) -> None:
    with pytest.raises(RefusedUrl) as refused:
        await make_guard().check(url)
    assert refused.value.refusal is not None and refused.value.refusal.address_class is address_class
    assert f"{address_class.value} address" in str(refused.value) and str(refused.value).endswith("; refused")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        (f"http://{'a' * 64}.example/", "a label of 64 characters"),
        (f"http://{'a.' * 127}example/", "at most 253"),
        ("http://a..example/", "a label of 0 characters"),
        ("http://hooks.example:0/", "port 0 is not a TCP port"),
        ("http://hooks.example:99999/", "port 99999 is not a TCP port"),
    ],
)
async def test_a_host_dns_cannot_carry_or_a_port_tcp_has_not_is_refused_before_resolving(url: str, problem: str) -> None:
    """Through the system resolver, a 64-character label raised ``UnicodeError`` (IDNA) out of the guard: a 500."""
    with pytest.raises(RefusedUrl, match=problem):
        await make_guard().check(url)


async def test_a_resolver_that_fails_encoding_the_name_is_an_unresolvable_host() -> None:
    async def idna_failure(host: str, port: int) -> Sequence[str]:
        raise UnicodeError("encoding with 'idna' codec failed (UnicodeError: label too long)")

    with pytest.raises(UnresolvableUrl, match="did not resolve"):
        await make_guard(resolver=idna_failure).check("http://hooks.example/")


async def test_the_metadata_refusal_says_what_it_is() -> None:
    with pytest.raises(RefusedUrl) as refused:
        await make_guard().check("http://169.254.169.254/latest/meta-data/iam/")
    assert str(refused.value) == "callback_url resolves to 169.254.169.254, a link-local address (cloud metadata); refused"


async def test_an_ipv4_mapped_address_names_the_address_inside() -> None:
    with pytest.raises(RefusedUrl, match=r"::ffff:7f00:1, a loopback address \(IPv4-mapped 127\.0\.0\.1\); refused"):
        await make_guard().check("http://[::ffff:127.0.0.1]:8080/")


@pytest.mark.parametrize("host", ["localhost", "2130706433", "0x7f000001", "127.1", "017700000001"])
async def test_names_and_number_forms_that_resolve_to_loopback_are_refused(host: str) -> None:
    """Through the system resolver: ``localhost`` from /etc/hosts, the rest are inet_aton's other spellings of 127.0.0.1."""
    with pytest.raises(RefusedUrl, match="loopback address"):
        await make_guard().check(f"http://{host}/hook")


async def test_a_name_mapped_to_a_refused_address_is_refused() -> None:
    guard = make_guard(resolver=table({"hooks.internal.example": ["10.0.0.7"], "meta.example": ["169.254.169.254"]}))
    with pytest.raises(RefusedUrl, match=r"10\.0\.0\.7, a private address"):
        await guard.check("https://hooks.internal.example/ttsq")
    with pytest.raises(RefusedUrl, match="cloud metadata"):
        await guard.check("http://meta.example/")


async def test_a_name_with_one_public_and_one_private_address_is_refused() -> None:
    guard = make_guard(resolver=table({"split.example": ["93.184.216.34", "2606:4700::1", "192.168.0.5"]}))
    with pytest.raises(RefusedUrl, match=r"192\.168\.0\.5, a private address"):
        await guard.check("https://split.example/hook")


async def test_a_public_name_is_approved_with_every_address() -> None:
    guard = make_guard(resolver=table({"hooks.example": ["93.184.216.34", "2606:4700::1"]}))
    target = await guard.check("https://hooks.example:8443/ttsq?x=1")
    assert [str(a) for a in target.addresses] == ["93.184.216.34", "2606:4700::1"]
    assert target.port == 8443 and target.url.host == "hooks.example"


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example/x",
        "file:///etc/passwd",
        "gopher://hooks.example:70/_",
        "javascript:alert(1)",
        "ws://hooks.example/",
        "dict://127.0.0.1:6379/info",
        "/relative/hook",
        "hooks.example/hook",
    ],
)
async def test_only_absolute_http_and_https_urls_are_accepted(url: str) -> None:
    with pytest.raises(RefusedUrl, match="http or https"):
        await make_guard(resolver=table({"hooks.example": ["93.184.216.34"]})).check(url)


async def test_credentials_in_the_url_are_refused() -> None:
    with pytest.raises(RefusedUrl, match="user name or password"):
        await make_guard(resolver=table({"hooks.example": ["93.184.216.34"]})).check("https://admin:pw@hooks.example/")


async def test_an_overlong_url_is_refused() -> None:
    with pytest.raises(RefusedUrl, match="longer than"):
        make_guard().parse("https://hooks.example/" + "a" * 3000)


async def test_the_allow_list_opens_only_what_it_names() -> None:
    guard = make_guard(["10.20.0.0/16", "127.0.0.1", "hooks.internal"], resolver=table({"hooks.internal": ["192.168.7.7"]}))
    assert [str(a) for a in (await guard.check("http://10.20.3.4/")).addresses] == ["10.20.3.4"]
    assert [str(a) for a in (await guard.check("https://127.0.0.1/")).addresses] == ["127.0.0.1"]
    assert [str(a) for a in (await guard.check("http://[::ffff:127.0.0.1]/")).addresses] == ["::ffff:7f00:1"]
    assert [str(a) for a in (await guard.check("https://hooks.internal/x")).addresses] == ["192.168.7.7"]
    for url in ("http://10.21.0.1/", "http://127.0.0.2/", "http://192.168.7.7/", "http://169.254.169.254/"):
        with pytest.raises(RefusedUrl):
            await guard.check(url)


async def test_an_allow_list_entry_opens_only_its_ports() -> None:
    """A bare entry opens http's and https's ports, not every port of the host: an allow-listed name is no way to scan
    what else it runs (its Redis, its admin port) and read the answers back."""
    internal = table({"hooks.internal": ["192.168.7.7"], "other.internal": ["192.168.7.8"]})
    guard = make_guard(
        ["hooks.internal", "other.internal:8080", "10.20.0.0/16:9000", "[fd00::/8]:8443", "127.0.0.1:*"], resolver=internal
    )
    for url in (
        "http://hooks.internal/",
        "https://hooks.internal:443/",
        "http://other.internal:8080/",
        "http://10.20.3.4:9000/",
        "https://[fd00::5]:8443/",
        "http://127.0.0.1:6379/",
    ):
        await guard.check(url)
    for url in (
        "http://hooks.internal:6379/",
        "http://hooks.internal:8080/",
        "http://other.internal/",
        "http://10.20.3.4/",
        "http://10.20.3.4:9001/",
        "https://[fd00::5]/",
    ):
        with pytest.raises(RefusedUrl, match="refused"):
            await guard.check(url)


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("http://x/", "neither a network nor a host name"),
        ("hooks.internal:0", "no valid port"),
        ("hooks.internal:65536", "no valid port"),
        ("[fd00::/8", "not \\[IPv6\\]:port"),
        ("[fd00::/8]8443", "not \\[IPv6\\]:port"),
        ("[fd00::/8]:x", "no valid port"),
    ],
)
def test_a_bad_allow_list_entry_is_refused_at_start(entry: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_guard(["10.0.0.0/8", entry])


async def test_a_name_that_does_not_resolve_is_unresolvable_not_refused() -> None:
    with pytest.raises(UnresolvableUrl, match="did not resolve"):
        await make_guard(resolver=table({})).check("https://nowhere.example/")


# ---- a real receiver ----------------------------------------------------------------------------


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b"ok"
    hold: asyncio.Event | None = None
    """Hold the connection, answering nothing, until this is set."""
    endless: bool = False
    """Answer 200 with a body that never ends."""


class Receiver:
    """A minimal HTTP/1.1 server on 127.0.0.1 that answers each request as ``answer`` says."""

    def __init__(self, answer: Callable[[Received], Answer], tls: ssl.SSLContext | None = None) -> None:
        self.answer = answer
        self.tls = tls
        self.received: list[Received] = []
        self.arrived = asyncio.Event()
        self.endless_bytes_sent = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[Any]] = set()

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}{path}"

    def paths(self) -> list[str]:
        return [request.path for request in self.received]

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, ssl=self.tls)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Close the listener and every connection still open (a held or endless answer)."""
        if self._server is not None:
            self._server.close()
        for handler in self._handlers:
            handler.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.add(handler)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines if line)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            request = Received(request_line.split(" ")[1], headers, body)
            self.received.append(request)
            self.arrived.set()
            answer = self.answer(request)
            if answer.hold is not None:
                await answer.hold.wait()
                return
            if answer.endless:
                writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\n\r\n")
                chunk = b"x" * 16384
                while True:
                    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    await writer.drain()
                    self.endless_bytes_sent += len(chunk)
            extra = "".join(f"{k}: {v}\r\n" for k, v in answer.headers.items())
            writer.write(
                f"HTTP/1.1 {answer.status} X\r\ncontent-length: {len(answer.body)}\r\nconnection: close\r\n{extra}\r\n".encode()
                + answer.body
            )
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass
        finally:
            writer.close()


@asynccontextmanager
async def receiver(
    answer: Callable[[Received], Answer] | None = None, tls: ssl.SSLContext | None = None
) -> AsyncIterator[Receiver]:
    server = Receiver(answer or (lambda request: Answer()), tls)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def scripted(*answers: Answer) -> Callable[[Received], Answer]:
    """Answer the n-th request with the n-th answer (the last one repeats)."""
    queue = list(answers)

    def answer(request: Received) -> Answer:
        return queue.pop(0) if len(queue) > 1 else queue[0]

    return answer


@dataclass
class Setup:
    deliverer: Deliverer
    deliveries: DeliveryQueue
    redis: Redis
    clock: FakeClock

    async def job(self, url: str | None, **fields: Any) -> str:
        return await finished_job(self.redis, self.clock, url, **fields)

    async def advance_and_sweep(self, seconds: float) -> int:
        self.clock.advance(seconds)
        return (await self.deliveries.sweep()).promoted


@pytest.fixture
def setup(redis: Redis, clock: FakeClock, make_queue: Any) -> Callable[..., Setup]:
    def build(
        allow: Sequence[str] = ("127.0.0.1:*",),  # the receivers listen on whatever port is free
        resolver: Callable[[str, int], Awaitable[Sequence[str]]] = system_resolver,
        verify_tls: ssl.SSLContext | None = None,
        **config: Any,
    ) -> Setup:
        deliveries = DeliveryQueue(redis, delivery_config(webhook_lease_s=LEASE_S, result_ttl_s=3600), clock=clock)
        jobs: JobQueue = make_queue()
        deliverer = Deliverer(
            deliveries,
            jobs,
            WebhookSigner(SECRET),
            make_guard(allow, resolver=resolver),
            webhook_config(**config),
            holder="test-deliverer",
            verify=verify_tls,
            rng=random.Random(7),
        )
        return Setup(deliverer, deliveries, redis, clock)

    return build


async def test_a_finished_task_is_posted_signed_and_logged(setup: Callable[..., Setup]) -> None:
    s = setup()
    async with receiver(lambda request: Answer(204, body=b"")) as hooks:
        job_id = await s.job(hooks.url("/hooks/ttsq?src=test"))
        delivery = await s.deliverer.run_once()
    assert delivery is not None and delivery.settled is Settled.SETTLED
    [request] = hooks.received
    assert request.path == "/hooks/ttsq?src=test"
    assert json.loads(request.body) == {
        "task_id": job_id,
        "status": "done",
        "result_url": f"{PUBLIC_URL}/v1/tts/result/{job_id}",
        "audio_duration_s": 1.25,
        "error": None,
        "finished_at": s.clock.now,
    }
    assert verify(request.headers[SIGNATURE_HEADER], request.body, SECRET, tolerance_s=300, now=s.clock.now) == int(s.clock.now)
    assert request.headers[EVENT_ID_HEADER] == job_id and request.headers[ATTEMPT_HEADER] == "1"
    assert request.headers["content-type"] == "application/json"
    [record] = await s.deliveries.log(job_id)
    assert (record.attempt, record.outcome, record.status_code, record.error) == (1, AttemptOutcome.DELIVERED, 204, None)
    assert await s.redis.llen(s.deliveries.keys.deliveries_processing) == 0
    assert await s.redis.zcard(s.deliveries.keys.delivery_leases) == 0


async def test_a_failed_task_is_posted_with_its_error_and_no_result_url(setup: Callable[..., Setup]) -> None:
    s = setup()
    async with receiver() as hooks:
        job_id = await s.job(hooks.url(), status=Status.FAILED, error="invalid job: text is empty")
        await s.deliverer.run_once()
    body = json.loads(hooks.received[0].body)
    assert (body["task_id"], body["status"], body["result_url"]) == (job_id, "failed", None)
    assert body["error"] == "invalid job: text is empty" and body["audio_duration_s"] is None


async def test_two_failures_then_success_takes_three_attempts_paced_by_the_sweep(setup: Callable[..., Setup]) -> None:
    s = setup(retry_base_s=10.0)
    async with receiver(scripted(Answer(500, body=b"database down"), Answer(500), Answer(200))) as hooks:
        job_id = await s.job(hooks.url())
        for number, ceiling in [(1, 10.0), (2, 20.0)]:
            failed = await s.deliverer.run_once()
            assert failed is not None and failed.attempt.attempt == number
            assert failed.attempt.outcome is AttemptOutcome.RETRYING and failed.attempt.status_code == 500
            at = failed.attempt.next_attempt_at
            assert at is not None and s.clock.now + 0.001 < at <= s.clock.now + ceiling, "backoff stays under its ceiling"
            s.clock.now = at - 0.001
            assert (await s.deliveries.sweep()).promoted == 0
            assert await s.deliverer.run_once() is None, "nothing is due before the retry time"
            s.clock.now = at
            assert (await s.deliveries.sweep()).promoted == 1
        third = await s.deliverer.run_once()
        assert third is not None and third.attempt.outcome is AttemptOutcome.DELIVERED
    assert [r.headers[ATTEMPT_HEADER] for r in hooks.received] == ["1", "2", "3"]
    for request in hooks.received:  # every attempt is signed afresh, with the same event id
        verify(request.headers[SIGNATURE_HEADER], request.body, SECRET, tolerance_s=300, now=s.clock.now)
        assert request.headers[EVENT_ID_HEADER] == job_id
    log = await s.deliveries.log(job_id)
    assert [(r.attempt, r.outcome, r.status_code) for r in log] == [
        (1, AttemptOutcome.RETRYING, 500),
        (2, AttemptOutcome.RETRYING, 500),
        (3, AttemptOutcome.DELIVERED, 200),
    ]
    assert log[0].error == "the receiver answered 500", "the class of the failure, never what the receiver said"
    assert "database down" not in json.dumps([dataclasses.asdict(record) for record in log])


def test_retry_delays_are_exponential_with_full_jitter_under_the_cap() -> None:
    rng = random.Random(1)
    for attempt, ceiling in [(1, 10.0), (2, 20.0), (3, 40.0), (4, 80.0), (9, 100.0), (500, 100.0)]:
        delays = [retry_delay_s(attempt, 10.0, 100.0, rng) for _ in range(300)]
        assert all(0 <= d <= ceiling for d in delays)
        assert max(delays) > 0.9 * ceiling and min(delays) < 0.1 * ceiling, "full jitter spreads over the whole range"


async def test_a_redirect_is_not_followed_and_the_delivery_is_given_up_at_once(setup: Callable[..., Setup]) -> None:
    """A tester saw 3xx answers retried for 24 h: the same URL only redirects again."""
    s = setup()
    async with receiver(lambda request: Answer(302, headers={"location": "/elsewhere"}, body=b"")) as hooks:
        job_id = await s.job(hooks.url("/hook"))
        delivery = await s.deliverer.run_once()
    assert hooks.paths() == ["/hook"], "the redirect target is never requested"
    assert delivery is not None and delivery.attempt.outcome is AttemptOutcome.GAVE_UP
    assert delivery.attempt.status_code == 302
    assert delivery.attempt.error == "the receiver answered 302 (a redirect); redirects are not followed"
    assert (await s.deliveries.log(job_id))[0].status_code == 302


async def test_what_the_receiver_said_reaches_the_log_never_the_task_status(
    setup: Callable[..., Setup], caplog: pytest.LogCaptureFixture
) -> None:
    """The submitter reads the status: a receiver inside the network must not be readable through it."""
    s = setup()
    internal = b'{"redis_version":"7.0.15","role":"master"}'
    async with receiver(lambda request: Answer(405, body=internal)) as hooks:
        job_id = await s.job(hooks.url("/hook"))
        await s.deliverer.run_once()
    record = (await s.deliveries.log(job_id))[0]
    assert (record.status_code, record.error) == (405, "the receiver answered 405")
    assert any("redis_version" in line.getMessage() for line in caplog.records), "the operator still sees it"


async def test_a_refused_connection_is_named_as_such_without_its_address(setup: Callable[..., Setup]) -> None:
    s = setup()
    with socket.socket() as probe:  # a port nothing listens on once the probe closes
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    job_id = await s.job(f"http://127.0.0.1:{port}/hook")
    delivery = await s.deliverer.run_once()
    assert delivery is not None and delivery.attempt.outcome is AttemptOutcome.RETRYING
    assert delivery.attempt.error == "connection refused"
    assert (await s.deliveries.log(job_id))[0].error == "connection refused"


async def test_a_receiver_that_never_succeeds_is_given_up_after_max_age(setup: Callable[..., Setup]) -> None:
    s = setup(max_age_s=300.0, retry_base_s=10.0, retry_cap_s=60.0)
    async with receiver(lambda request: Answer(503)) as hooks:
        job_id = await s.job(hooks.url())
        outcomes = []
        for _ in range(200):  # bounded, so a deliverer that never gives up fails here instead of hanging
            delivery = await s.deliverer.run_once()
            if delivery is None:
                assert await s.advance_and_sweep(60.0) <= 1
                continue
            outcomes.append(delivery.attempt.outcome)
            if delivery.attempt.outcome is AttemptOutcome.GAVE_UP:
                break
            assert delivery.attempt.next_attempt_at is not None
            assert delivery.attempt.next_attempt_at <= s.clock.now + 60.0
    log = await s.deliveries.log(job_id)
    assert outcomes[-1] is AttemptOutcome.GAVE_UP and all(o is AttemptOutcome.RETRYING for o in outcomes[:-1])
    assert log[-1].at >= log[0].at + 300.0 - 60.0, "attempts go on until max_age_s"
    assert log[-1].at <= log[0].at + 300.0, "and stop there"
    assert "gave up 300s after the task ended" in (log[-1].error or "")
    assert len(hooks.received) == len(log)
    assert await s.redis.zcard(s.deliveries.keys.deliveries_delayed) == 0
    assert await s.advance_and_sweep(3600) == 0 and await s.deliverer.run_once() is None


async def test_a_refused_callback_is_given_up_at_once_without_a_request(setup: Callable[..., Setup]) -> None:
    s = setup(allow=())
    async with receiver() as hooks:
        job_id = await s.job(hooks.url())
        delivery = await s.deliverer.run_once()
    assert hooks.received == []
    assert delivery is not None and delivery.attempt.outcome is AttemptOutcome.GAVE_UP
    assert delivery.attempt.error == "callback_url resolves to 127.0.0.1, a loopback address; refused"
    assert [r.outcome for r in await s.deliveries.log(job_id)] == [AttemptOutcome.GAVE_UP]


async def test_an_unresolvable_name_is_retried(setup: Callable[..., Setup]) -> None:
    s = setup(resolver=table({}))
    await s.job("https://nowhere.example/hook")
    delivery = await s.deliverer.run_once()
    assert delivery is not None and delivery.attempt.outcome is AttemptOutcome.RETRYING
    assert "did not resolve" in (delivery.attempt.error or "")


async def test_the_connection_goes_to_the_approved_address_with_the_original_host(setup: Callable[..., Setup]) -> None:
    """``hooks.receiver.test`` exists only in the guard's resolver: the POST can arrive only if the
    transport connects to the address the guard approved instead of resolving the name again."""
    s = setup(resolver=table({"hooks.receiver.test": ["127.0.0.1"]}))
    async with receiver() as hooks:
        job_id = await s.job(hooks.url(host="hooks.receiver.test"))
        delivery = await s.deliverer.run_once()
    assert delivery is not None
    assert delivery.attempt.outcome is AttemptOutcome.DELIVERED, delivery.attempt.error
    assert hooks.received[0].headers["host"] == f"hooks.receiver.test:{hooks.port}"
    assert json.loads(hooks.received[0].body)["task_id"] == job_id


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    folder = tmp_path_factory.mktemp("tls")
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=hooks.receiver.test"),
            *("-addext", "subjectAltName=DNS:hooks.receiver.test", "-keyout", str(key), "-out", str(cert)),
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_https_to_a_pinned_address_verifies_the_certificate_for_the_original_name(
    setup: Callable[..., Setup], certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert, key)
    client_tls = ssl.create_default_context(cafile=str(cert))
    names = {"hooks.receiver.test": ["127.0.0.1"], "impostor.receiver.test": ["127.0.0.1"]}
    s = setup(resolver=table(names), verify_tls=client_tls)
    async with receiver(tls=server_tls) as hooks:
        good = await s.job(hooks.url(host="hooks.receiver.test"))
        delivered = await s.deliverer.run_once()
        assert delivered is not None and delivered.lease.job_id == good
        assert delivered.attempt.outcome is AttemptOutcome.DELIVERED, delivered.attempt.error
        await s.job(hooks.url(host="impostor.receiver.test"))
        refused = await s.deliverer.run_once()
    assert refused is not None and refused.attempt.outcome is AttemptOutcome.RETRYING
    assert "certificate" in (refused.attempt.error or "").lower(), refused.attempt.error
    assert [r.headers["host"] for r in hooks.received] == [f"hooks.receiver.test:{hooks.port}"]


async def test_a_deliverer_killed_mid_delivery_loses_nothing(setup: Callable[..., Setup]) -> None:
    s = setup()
    async with receiver() as hooks:
        job_id = await s.job(hooks.url())
        crashed = await s.deliveries.claim("crashed-deliverer", 0)  # claimed, then the process died
        assert crashed is not None and crashed.job_id == job_id
        assert await s.deliverer.run_once() is None, "a leased delivery is not handed out twice"
        s.clock.advance(LEASE_S + 1)
        assert (await s.deliveries.sweep()).requeued == 1
        delivery = await s.deliverer.run_once()
    assert delivery is not None and delivery.lease.job_id == job_id and delivery.settled is Settled.SETTLED
    assert [r.outcome for r in await s.deliveries.log(job_id)] == [AttemptOutcome.DELIVERED]
    assert len(hooks.received) == 1
    assert await s.deliveries.renew(crashed) is None


async def test_a_slow_receiver_does_not_hold_up_a_fast_one(setup: Callable[..., Setup]) -> None:
    s = setup(timeout_s=30.0, concurrency=4, block_s=0.05, drain_s=0.2)
    release = asyncio.Event()
    fast_arrived = asyncio.Event()

    def answer(request: Received) -> Answer:
        if request.path == "/slow":
            return Answer(hold=release)
        fast_arrived.set()
        return Answer(200)

    stop = asyncio.Event()
    async with receiver(answer) as hooks:
        slow = await s.job(hooks.url("/slow"))
        fast = await s.job(hooks.url("/fast"))
        running = asyncio.create_task(s.deliverer.run(stop))
        try:
            await asyncio.wait_for(fast_arrived.wait(), 5)
            for _ in range(100):
                if await s.deliveries.log(fast):
                    break
                await asyncio.sleep(0.02)
            assert hooks.paths()[0] == "/slow", "the slow delivery was claimed first"
            assert [r.outcome for r in await s.deliveries.log(fast)] == [AttemptOutcome.DELIVERED]
            assert await s.deliveries.log(slow) == [], "the slow one is still in flight"
        finally:
            stop.set()
            await asyncio.wait_for(running, 10)
            release.set()
    assert await s.redis.lrange(s.deliveries.keys.deliveries_processing, 0, -1) == [slow.encode()], (
        "a delivery cut short at shutdown keeps its lease, for the sweep to hand on"
    )


async def test_leases_are_renewed_while_a_delivery_is_in_flight(
    setup: Callable[..., Setup], redis: Redis, clock: FakeClock
) -> None:
    deliveries = DeliveryQueue(redis, dataclasses.replace(delivery_config(result_ttl_s=3600), lease_s=0.3), clock=clock)
    s = setup(timeout_s=30.0, block_s=0.05, drain_s=0.1, sweep_interval_s=60.0)
    s.deliverer.queue = deliveries
    release = asyncio.Event()
    stop = asyncio.Event()
    async with receiver(lambda request: Answer(hold=release)) as hooks:
        job_id = await s.job(hooks.url())
        running = asyncio.create_task(s.deliverer.run(stop))
        try:
            await asyncio.wait_for(hooks.arrived.wait(), 5)
            first = await redis.zscore(deliveries.keys.delivery_leases, job_id)
            clock.advance(100)
            renewed = first
            for _ in range(100):
                renewed = await redis.zscore(deliveries.keys.delivery_leases, job_id)
                if renewed != first:
                    break
                await asyncio.sleep(0.02)
            assert renewed == clock.now + 0.3, "upkeep moved the lease forward while the POST was in flight"
            release.set()
            for _ in range(100):
                if await deliveries.log(job_id):
                    break
                await asyncio.sleep(0.02)
            [record] = await deliveries.log(job_id)
            assert record.outcome is AttemptOutcome.RETRYING, "the receiver closed without answering"
            assert await redis.zscore(deliveries.keys.deliveries_delayed, job_id) is not None, "and the renewed lease settled"
        finally:
            stop.set()
            await asyncio.wait_for(running, 10)


async def test_the_answer_is_read_no_further_than_the_limit(setup: Callable[..., Setup]) -> None:
    s = setup(timeout_s=3.0, max_response_bytes=1024)
    async with receiver(lambda request: Answer(endless=True)) as hooks:
        job_id = await s.job(hooks.url())
        delivery = await s.deliverer.run_once()
    assert delivery is not None
    # Held until its 3 s timeout, the attempt would have ended "no complete answer within 3s", not delivered.
    assert delivery.attempt.outcome is AttemptOutcome.DELIVERED, delivery.attempt.error
    assert delivery.result.response_bytes == 1024
    assert [r.outcome for r in await s.deliveries.log(job_id)] == [AttemptOutcome.DELIVERED]


async def test_a_receiver_that_answers_nothing_times_out(setup: Callable[..., Setup]) -> None:
    s = setup(timeout_s=0.5)
    release = asyncio.Event()
    async with receiver(lambda request: Answer(hold=release)) as hooks:
        await s.job(hooks.url())
        delivery = await s.deliverer.run_once()
        release.set()
    assert delivery is not None and delivery.attempt.outcome is AttemptOutcome.RETRYING
    assert delivery.attempt.error == "no complete answer within 0.5s"


async def test_a_task_without_a_callback_is_given_up(setup: Callable[..., Setup]) -> None:
    s = setup()
    job_id = await s.job(None)
    delivery = await s.deliverer.run_once()
    assert delivery is not None and delivery.attempt.outcome is AttemptOutcome.GAVE_UP
    assert (await s.deliveries.log(job_id))[0].error == "the task has no callback_url"


def test_the_config_refuses_a_relative_public_url() -> None:
    with pytest.raises(ValueError, match="public_url"):
        dataclasses.replace(webhook_config(), public_url="tts.example.com")
