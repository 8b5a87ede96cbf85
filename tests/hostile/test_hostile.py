"""The bounded hostile suite (``make hostile-realtime`` is the long one): the API launched as shipped, under the image
check's open-file limit, against compressed WebSocket bombs, frames past the message limit, idle and trickling
connections. Asserted on what the server does — the close codes, the connections it keeps, a ``/healthz`` answered —
and on the API's memory, sampled throughout; never on how long anything takes.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from tests.hostile.attacks import BOMB_BYTES, bombs, churning_contexts, handshake, idle_connections
from tests.hostile.deployment import Api, deployment

pytestmark = pytest.mark.e2e

HANG_GUARD_S = 60
"""Only a server that never does what is asserted reaches it."""

RSS_GROWTH_BOUND = 100 * 1024 * 1024
"""Generous: what is held per connection is now at most one message (64 KiB), and the bombs inflate to 15 MiB each."""


@contextmanager
def peak_rss(pid: int) -> Iterator[list[int]]:
    """The process's resident memory, sampled until the block ends: ``[at the start, the highest seen]``."""
    process = psutil.Process(pid)
    seen = [process.memory_info().rss] * 2
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.01):
            seen[1] = max(seen[1], process.memory_info().rss)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        done.set()
        sampler.join()


def established(api: Api) -> int:
    """Client connections the API process holds now."""
    return sum(
        1
        for conn in psutil.Process(api.process.pid).net_connections(kind="tcp")
        if conn.status == psutil.CONN_ESTABLISHED and conn.laddr and conn.laddr.port == api.port
    )


async def until(condition: object, what: str) -> None:
    assert callable(condition)
    for _ in range(HANG_GUARD_S * 20):
        if condition():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"never: {what}")


async def test_keyless_compressed_bombs_are_refused_as_their_frames_arrive_and_leave_the_memory_bounded(tmp_path: Path) -> None:
    with deployment(tmp_path) as api:
        with peak_rss(api.process.pid) as rss:
            outcomes = await bombs(api.port, 48, hold_s=HANG_GUARD_S, kinds=("deflate", "fragment", "oversize"))
        assert rss[1] - rss[0] < RSS_GROWTH_BOUND, f"the API grew by {(rss[1] - rss[0]) / 2**20:.0f} MiB: {outcomes}"
        assert outcomes.counts == {"deflate: closed 1002": 16, "fragment: closed 1002": 16, "oversize: closed 1009": 16}

        sock = await handshake(api.port, offer_deflate=True)
        assert sock.status == 101 and "sec-websocket-extensions" not in sock.headers, "compression is declined"
        sock.close()
        async with connect(api.ws_url, compression="deflate", max_size=None) as polite:  # offers it, and takes the answer
            with pytest.raises(ConnectionClosed) as closed:
                await polite.send(bytes(BOMB_BYTES // 16))  # a message over the limit, sent as it is
                await asyncio.wait_for(polite.recv(), HANG_GUARD_S)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009


async def test_idle_connections_past_the_cap_make_room_and_a_new_request_is_served(tmp_path: Path) -> None:
    """Past ``MAX_CONNECTIONS`` a new connection closes the one idle longest: the process keeps its cap (its file
    descriptors) however many connect, and a health probe arriving among them is answered. The header deadline is a
    minute here, so that only the cap can explain what is closed."""
    with deployment(tmp_path, MAX_CONNECTIONS="64", HTTP_HEADER_TIMEOUT_S="60") as api:
        holding = asyncio.ensure_future(idle_connections(api.port, 300, hold_s=3 * HANG_GUARD_S))
        await until(lambda: established(api) >= 60, "the idle connections are open")
        probe = await asyncio.to_thread(httpx.get, f"{api.url}/healthz", timeout=HANG_GUARD_S)
        assert probe.status_code == 200
        await until(lambda: established(api) <= 64, "the API keeps at most MAX_CONNECTIONS")
        holding.cancel()
        with pytest.raises(asyncio.CancelledError):
            await holding


async def test_a_connection_that_sends_nothing_or_trickles_its_headers_is_closed(tmp_path: Path) -> None:
    with deployment(tmp_path, HTTP_HEADER_TIMEOUT_S="1") as api:
        silent = await asyncio.open_connection("127.0.0.1", api.port)
        trickling = await asyncio.open_connection("127.0.0.1", api.port)
        trickling[1].write(b"GET /healthz HTTP/1.1\r\nX-Trickle: ")

        async def trickle() -> bytes:
            while True:
                try:
                    trickling[1].write(b"a")
                    return await asyncio.wait_for(trickling[0].read(1), 0.2)
                except TimeoutError:
                    continue
                except ConnectionError:
                    return b""

        assert await asyncio.wait_for(silent[0].read(1), HANG_GUARD_S) == b"", "closed, with nothing sent"
        assert await asyncio.wait_for(trickle(), HANG_GUARD_S) == b"", "closed, its headers never whole"
        for _, writer in (silent, trickling):
            writer.close()
        kept = await asyncio.to_thread(httpx.get, f"{api.url}/healthz", timeout=HANG_GUARD_S)
        assert kept.status_code == 200, "a request that comes whole is served as ever"


async def test_sessions_churning_a_thousand_contexts_each_get_their_limits_and_leave_nothing_behind(tmp_path: Path) -> None:
    """Two sessions each open and cancel a thousand contexts and then ask for a thousand more at once: every context is
    answered (``context.started``/``context.done``) or refused (``too_many_contexts`` past ``REALTIME_MAX_CONTEXTS``),
    the API's memory stays bounded, and once the sessions are gone their stream slots and listener subscriptions are
    back to zero (``/metrics``)."""
    sessions, rounds, limit = 2, 1000, 8
    with deployment(tmp_path) as api:
        keys = [api.create_key("tts") for _ in range(sessions)]
        metrics_key = api.create_key("metrics")
        with peak_rss(api.process.pid) as rss:
            told = await asyncio.wait_for(churning_contexts(api.ws_url, keys, rounds), 3 * HANG_GUARD_S)
        assert rss[1] - rss[0] < RSS_GROWTH_BOUND, f"the API grew by {(rss[1] - rss[0]) / 2**20:.0f} MiB: {told}"
        opened = sessions * (rounds + limit)
        assert told == {
            "session.started": sessions,
            "context.started": opened,
            "context.done": opened,  # the churn's as they were cancelled, the held ones' at the session's cancel
            "too_many_contexts": sessions * (rounds - limit),
            "session.done": sessions,
            "closed 1000": sessions,
        }, told

        def held() -> dict[str, float]:
            answer = httpx.get(f"{api.url}/metrics", headers={"Authorization": f"Bearer {metrics_key}"}, timeout=HANG_GUARD_S)
            assert answer.status_code == 200, answer.text
            wanted = ('ttsq_stream_slots{state="in_use"}', "ttsq_listener_subscriptions ")
            return {line.split(" ")[0]: float(line.split(" ")[1]) for line in answer.text.splitlines() if line.startswith(wanted)}

        zero = {'ttsq_stream_slots{state="in_use"}': 0.0, "ttsq_listener_subscriptions": 0.0}
        await until(lambda: held() == zero, "the sessions' slots and subscriptions are given back")


def test_the_deployment_runs_the_api_as_shipped(tmp_path: Path) -> None:
    """The attacked API is ``api_command``'s process itself (``prlimit`` execs it), under the image's open-file limit."""
    with deployment(tmp_path) as api:
        process = psutil.Process(api.process.pid)
        assert "api_server.py" in " ".join(process.cmdline())
        assert process.rlimit(psutil.RLIMIT_NOFILE) == (1024, 1024)
