"""Who is calling: API keys, scopes, and the per-caller rate limit.

A request presents its key as ``Authorization: Bearer <key>`` (what the OpenAI SDK sends) or
``X-API-Key: <key>``. A key that is not genuine, revoked or expired is refused with 401 whatever
the mode. Without a key, the caller is anonymous, which is allowed only when keys are not
required: ``AUTH=auto`` (the default) requires them as soon as the API listens on any
non-loopback address, ``AUTH=on`` always, ``AUTH=off`` never (the app warns loudly at start).

Each caller — its key, or an anonymous client's address — has a token bucket in Redis shared by
every replica (:mod:`ttsq.store.rate_limit`); submits spend from it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

import anyio

from ttsq.domain.jobs import ANONYMOUS_TENANT, Priority
from ttsq.store.api_keys import ApiKey, ApiKeyStore, Scope, looks_like_key

__all__ = [
    "AuthMode",
    "Authenticator",
    "Forbidden",
    "KeyPolicy",
    "Principal",
    "Scope",
    "Unauthorized",
    "listening_addresses",
    "presented_key",
    "until_revoked",
]

AuthMode = Literal["auto", "on", "off"]
T = TypeVar("T")


class Unauthorized(Exception):
    """401: no key where one is needed, or a key that is not valid."""


class Forbidden(Exception):
    """403: a valid key without the scope the route needs."""

    def __init__(self, scope: Scope) -> None:
        super().__init__(f"this API key lacks the {scope!r} scope needed here")
        self.scope = scope


@dataclass(frozen=True)
class Principal:
    """The caller: a key, or an anonymous client (allowed only where keys are optional)."""

    key: ApiKey | None
    address: str

    @property
    def subject(self) -> str:
        """Whose quota and rate limit apply: the key, else the client's address."""
        return f"key:{self.key.id}" if self.key is not None else f"addr:{self.address}"

    @property
    def tenant(self) -> str:
        """Whose fair share of the workers a submit is queued under (docs/fairness.md), decided here only: the tenant
        an admin grouped the key into (``tenant:<name>``), else the key itself (``key:<id>``) — the key's sharing
        scope, so the names never collide — or the one anonymous tenant. Anonymous callers share one tenant, not one
        per address: an address is no identity (NAT and proxies share one, a client can rotate many), and
        per-address queues would sell fair shares by the address."""
        return self.key.sharing_scope if self.key is not None else ANONYMOUS_TENANT

    @property
    def weight(self) -> int:
        """The tenant's claims per round-robin turn: its key's weight (1 for anonymous callers)."""
        return self.key.weight if self.key is not None else 1

    def priority(self, asked: Priority | None) -> Priority:
        """The lane of a submit: what it asked for, else its key's default, else interactive."""
        if asked is not None:
            return asked
        return self.key.priority if self.key is not None else "interactive"

    @property
    def reader(self) -> str | None:
        """The key id that may read and cancel what this caller submits (None: anyone with the task id)."""
        return self.key.id if self.key is not None else None

    @property
    def is_admin(self) -> bool:
        return self.key is not None and self.key.allows("admin")

    def allows(self, scope: Scope) -> bool:
        return self.key is None or self.key.allows(scope)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def listening_addresses(pid: int | None = None) -> list[str]:
    """The addresses this process accepts connections on: its listening TCP sockets' IPs, and ``unix:<path>`` for
    each Unix socket bound to a path (``uvicorn --uds``; a client's Unix sockets are bound to none).

    A Unix socket counts as public, not loopback: it is reachable by whatever can open its path, which behind a
    reverse proxy (its usual use) is every client of the proxy. Under ``AUTH=auto`` such an API requires keys, as on
    a public address (it never did: with no TCP socket found, it stayed keyless and made anonymous callers admins);
    ``AUTH=off`` is how an operator says the proxy authenticates."""
    import psutil

    process = psutil.Process(pid or os.getpid())
    tcp = [conn.laddr.ip for conn in process.net_connections(kind="inet") if conn.status == psutil.CONN_LISTEN and conn.laddr]
    unix = [f"unix:{conn.laddr}" for conn in process.net_connections(kind="unix") if isinstance(conn.laddr, str) and conn.laddr]
    return tcp + unix


class KeyPolicy:
    """Whether a request without a key may pass. ``AUTH=auto`` looks at what the process listens on,
    once its sockets are open (the app starts before uvicorn binds them): decided once, at the first
    request that finds a listening socket. Reading the sockets scans ``/proc/net`` (milliseconds), so
    while none is found (served in-process) it looks again at most every ``recheck_s``."""

    def __init__(self, mode: AuthMode, clock: Callable[[], float] = time.monotonic, recheck_s: float = 1.0) -> None:
        self.mode = mode
        self._required: bool | None = {"on": True, "off": False}.get(mode)
        self._clock = clock
        self._recheck_s = recheck_s
        self._next_check = float("-inf")

    def keys_required(self) -> bool:
        if self._required is None:
            now = self._clock()
            if now < self._next_check:
                return False
            addresses = listening_addresses()
            if not addresses:  # served in-process (tests) or not bound yet: decide on a later request
                self._next_check = now + self._recheck_s
                return False
            self._required = not all(_is_loopback(address) for address in addresses)
        return self._required


class Authenticator:
    def __init__(self, store: ApiKeyStore, policy: KeyPolicy) -> None:
        self.store = store
        self.policy = policy

    async def principal(self, presented: str | None, address: str) -> Principal:
        """The caller behind ``presented`` (a key, or None); :class:`Unauthorized` when it cannot pass.

        Where keys are optional, a value that is not shaped like a ttsq key at all (the OpenAI SDK
        insists on sending *some* key, e.g. ``"unused"``) counts as no key; a ttsq key that is
        revoked or expired is refused everywhere.
        """
        if presented and not self.policy.keys_required() and not looks_like_key(presented):
            presented = None
        if presented:
            record = await self.store.authenticate(presented)
            if record is None:
                raise Unauthorized("the API key is not valid (unknown, revoked or expired)")
            return Principal(record, address)
        if self.policy.keys_required():
            raise Unauthorized("this service needs an API key: send 'Authorization: Bearer <key>' or 'X-API-Key: <key>'")
        return Principal(None, address)


async def until_revoked(source: AsyncIterator[T], still_valid: Callable[[], Awaitable[bool]], every_s: float) -> AsyncIterator[T]:
    """``source``, ended once ``still_valid`` says no: asked once every ``every_s`` seconds, whether the source is
    quiet or busy, so a stream opened with a key that is revoked (or expires) meanwhile stops within about that
    interval instead of delivering for as long as its task lasts.

    The source's next item is awaited in a task of its own (so a quiet source can be left); that task is ended and
    waited for before the source is closed, however this ends (revoked, finished, or cancelled: a client that went
    away), shielded from a cancellation that would interrupt the wait again, as anyio's cancel scopes do."""
    loop = asyncio.get_running_loop()
    items = aiter(source)
    due = loop.time() + every_s
    following: asyncio.Future[T] | None = None
    try:
        while True:
            following = asyncio.ensure_future(anext(items))
            while not (await asyncio.wait({following}, timeout=max(0.0, due - loop.time())))[0]:
                due = loop.time() + every_s
                if not await still_valid():
                    return
            try:
                item = following.result()
            except StopAsyncIteration:
                return
            if loop.time() >= due:
                due = loop.time() + every_s
                if not await still_valid():
                    return
            yield item
    finally:
        if following is not None and not following.done():
            following.cancel()
            with anyio.CancelScope(shield=True):
                await asyncio.wait({following})  # the source is idle again (never raises the task's error)
        if following is not None and following.done() and not following.cancelled():
            following.exception()  # retrieved: a source that failed as it was left is not reported as never retrieved
        closing = getattr(items, "aclose", None)
        if closing is not None:
            with anyio.CancelScope(shield=True):
                await closing()


def presented_key(authorization: str | None, x_api_key: str | None) -> str | None:
    """The key a request carries, from ``Authorization: Bearer`` or ``X-API-Key``."""
    if x_api_key:
        return x_api_key.strip()
    if authorization:
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() == "bearer" and value.strip():
            return value.strip()
    return None
