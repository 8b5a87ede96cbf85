"""The connections the API process keeps open: a deadline for a request's headers, and a cap on open connections that
closes the one idle longest to make room for a new one.

uvicorn times a connection out only between requests (``--timeout-keep-alive``, armed when a response ends): one that
opens and sends nothing, or sends its headers a byte at a time, is kept for ever. 1,100 of them under a 1,024
open-file limit took every file descriptor of the process, and every ``/healthz`` failed for 40 s. None of uvicorn's
options helps: ``--limit-concurrency`` counts those connections and answers the next *request* 503 (``/healthz``
included), ``--backlog`` only sizes the kernel's queue, ``--h11-max-incomplete-event-size`` bounds bytes, not time.
So the API runs uvicorn's httptools protocol with two additions (:func:`guarded_http`):

* **a header deadline** (``HTTP_HEADER_TIMEOUT_S``): a connection must send a request's headers whole within it, from
  its opening, or from the first byte of a later request on a kept-alive connection; past it, it is closed. Between
  requests uvicorn's own keep-alive timeout still applies.
* **a connection cap** (``MAX_CONNECTIONS``): a connection that would take the process past it closes the connection
  idle longest first — one that never sent a whole request before one that is between requests — so that a client
  arriving in a flood of idle connections (a health probe, a real request) is served, and the process never runs out
  of file descriptors. A connection inside a request (a stream, a long-poll, a realtime session after its upgrade)
  is never closed for it; only when nothing else is idle is the newcomer itself closed.

What the cap leaves: a few file descriptors per Redis connection and file the process needs besides its clients
(:func:`connection_budget`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["AUTO_MAX_CONNECTIONS", "ConnectionLimits", "connection_budget", "guarded_http"]

AUTO_MAX_CONNECTIONS = 4096
"""The most connections ``MAX_CONNECTIONS=auto`` keeps, whatever the open-file limit: one process serves at most
``MAX_STREAMS`` streams, and thousands of idle connections are memory held for nothing."""

RESERVED_FILES = 64
"""File descriptors the API needs besides its clients and its Redis pools: its listening socket, standard streams and
logs, the disk cache's files, the event loop's own, ``/proc`` reads (``AUTH=auto`` looks at the process's sockets)."""


def connection_budget(open_files: int, redis_connections: int) -> int:
    """``MAX_CONNECTIONS=auto``: the open-file limit less the Redis pools (the queue's and the cache's, at most
    ``redis_connections`` each) and :data:`RESERVED_FILES`, at most :data:`AUTO_MAX_CONNECTIONS`, at least 16."""
    return max(16, min(AUTO_MAX_CONNECTIONS, open_files - 2 * redis_connections - RESERVED_FILES))


@dataclass(frozen=True)
class ConnectionLimits:
    header_timeout_s: float
    """``HTTP_HEADER_TIMEOUT_S``."""
    max_connections: int
    """``MAX_CONNECTIONS``, resolved."""


@dataclass
class _Pool:
    """One server's guarded connections, oldest first, and those closed by the guard but not yet gone."""

    open: dict[GuardedHttpProtocol, None] = field(default_factory=dict)
    closing: set[GuardedHttpProtocol] = field(default_factory=set)


class GuardedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header deadline and a connection cap (:func:`guarded_http` sets both)."""

    limits: ConnectionLimits
    pool: _Pool

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_deadline: asyncio.TimerHandle | None = None
        self._awaiting_headers = False
        """Between a request's first byte (or the connection's opening) and its last header."""
        self._in_request = False
        """A request is being answered (or one pipelined after it waits)."""
        self._answered = 0

    # ---- the deadline --------------------------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.pool.open[self] = None
        self._awaiting_headers = True
        self._arm_header_deadline()
        self._make_room()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._awaiting_headers = True
        self._arm_header_deadline()  # a later request on a kept-alive connection: its own deadline, from its first byte

    def on_headers_complete(self) -> None:
        self._awaiting_headers = False
        self._disarm_header_deadline()
        self._in_request = True
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        self._answered += 1
        self._in_request = bool(self.pipeline)  # a pipelined request starts now
        super().on_response_complete()

    def handle_websocket_upgrade(self) -> None:
        self._forget()  # the socket is the WebSocket protocol's from now on (the session's own limits apply)
        super().handle_websocket_upgrade()

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self.limits.header_timeout_s, self._headers_too_slow)

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _headers_too_slow(self) -> None:
        self._header_deadline = None
        if self._awaiting_headers:  # even behind a request being answered: a pipelined request may not trickle either
            self._close()

    # ---- the cap -------------------------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        """Not inside a request, nor between pipelined ones: closing it loses nothing a client is waiting for."""
        return not self._in_request and not self.pipeline and not self.transport.is_closing()

    def _make_room(self) -> None:
        """Close connections idle longest until the process is back within its cap (this one last of all)."""
        while len(self.connections) - len(self.pool.closing) > self.limits.max_connections:
            victim = self._longest_idle()
            if victim is None:
                return
            victim._close()

    def _longest_idle(self) -> GuardedHttpProtocol | None:
        """The oldest idle connection that never had an answer, else the oldest idle one, else this one (if idle)."""
        fallback = None
        for connection in self.pool.open:
            if connection is self or not connection.idle:
                continue
            if connection._answered == 0:
                return connection
            if fallback is None:
                fallback = connection
        if fallback is None and self.idle:
            return self
        return fallback

    def _close(self) -> None:
        self._disarm_header_deadline()
        self.pool.open.pop(self, None)
        self.pool.closing.add(self)
        self.transport.close()

    def _forget(self) -> None:
        self._disarm_header_deadline()
        self.pool.open.pop(self, None)
        self.pool.closing.discard(self)


def guarded_http(limits: ConnectionLimits) -> type[GuardedHttpProtocol]:
    """The HTTP protocol class uvicorn is given (``Config(http=...)``): :class:`GuardedHttpProtocol` with ``limits``
    and a connection pool of its own (one server per class)."""
    return type("GuardedHttpProtocol", (GuardedHttpProtocol,), {"limits": limits, "pool": _Pool()})
