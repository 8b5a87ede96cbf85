"""How the API reads a body, on real uvicorn: the caller first, then within a deadline.

A tester's unauthenticated 8 MiB JSON array of integers to ``POST /v1/voices`` held the API's event loop for 8.3 s
(parsed and walked before the key was checked) and ``/healthz`` with it; with a ``tts`` key, 4.8 s before the 403.
Here the body is declared whole and sent only in part: the 401 and the 403 must come while most of it is still
unsent (the server cannot have read what was never sent), and ``/healthz`` answers meanwhile. An admin's body of
that shape is refused from its count of values, unparsed. A body that declares more than it sends held its
connection for 200 s and more; it gets a 408 once ``BODY_READ_TIMEOUT_S`` has passed (1 s on a second replica
here), and the connection is closed. No timing is asserted: the socket timeout only stops a test that would
otherwise wait for an answer that never comes.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support.redis_server import start_redis_server
from tests.support.service import Service

pytestmark = pytest.mark.e2e

BODY_BYTES = 8 * 2**20
"""The route's whole limit (``MAX_VOICE_BODY_BYTES``): declared in ``Content-Length`` every time."""
SENT_BYTES = 64 * 1024
"""How much of it is sent before the answer is awaited."""
WAIT_S = 30.0
"""Only a guard against a hang: the old code never answered until the whole body had come."""


@dataclass(frozen=True)
class Api:
    url: str
    port: int
    tts_key: str
    admin_key: str
    impatient_port: int
    """A replica with ``BODY_READ_TIMEOUT_S=1``."""


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    tmp = tmp_path_factory.mktemp("auth-first")
    redis = start_redis_server(tmp / "redis")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("FAULT_", "REDIS_", "AUTH"))}
    env.update(REDIS_URL=redis.url, MODEL="tiny", CACHE_DIR=str(tmp / "cache"), PYTHONUNBUFFERED="1")
    service = Service(redis=redis, tmp=Path(tmp), env=env)
    try:
        tts_key, admin_key = service.create_key("user", "tts"), service.create_key("admin", "admin")
        url = service.start_api("api", AUTH="on")
        impatient = service.start_api("api-impatient", AUTH="on", BODY_READ_TIMEOUT_S="1")
        yield Api(url, int(url.rsplit(":", 1)[1]), tts_key, admin_key, int(impatient.rsplit(":", 1)[1]))
    finally:
        service.kill_all()
        redis.stop()


def array_of_ints(size: int) -> bytes:
    """A JSON array of zeros, ``size`` bytes long."""
    zeros = b"0," * ((size - 3) // 2) + b"0"
    return b"[" + zeros + b" " * (size - 2 - len(zeros)) + b"]"


def answer_to_partial_body(port: int, path: str, key: str | None, declared: int = BODY_BYTES) -> tuple[int, bytes, socket.socket]:
    """Send ``path`` a declared body (8 MiB unless told), only its first :data:`SENT_BYTES` or less, and read the
    answer's status line and headers (the connection is returned as the server left it: the rest is never sent)."""
    body = array_of_ints(declared)
    assert len(body) == declared
    head = [f"POST {path} HTTP/1.1", "Host: ttsq", "Content-Type: application/json", f"Content-Length: {declared}"]
    if key is not None:
        head.append(f"Authorization: Bearer {key}")
    conn = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
    conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body[: min(SENT_BYTES, declared // 2)])
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = conn.recv(65536)
        assert chunk, "the server closed the connection without an answer"
        received += chunk
    status = int(received.split(b" ", 2)[1])
    return status, received, conn


def closed_by_server(conn: socket.socket) -> bool:
    """Whether the server closes ``conn`` (after the rest of its answer), rather than waiting for more."""
    while chunk := conn.recv(65536):
        del chunk
    return True


@pytest.mark.parametrize(("which", "status"), [("none", 401), ("tts", 403)])
def test_a_caller_without_the_routes_scope_is_refused_before_its_body_is_sent(api: Api, which: str, status: int) -> None:
    key = {"none": None, "tts": api.tts_key}[which]
    got, received, conn = answer_to_partial_body(api.port, "/v1/voices", key)
    try:
        assert got == status, received[:300]
        # The body is still in flight (7.9 MiB of it unsent) and the API answers everyone else.
        assert httpx.get(f"{api.url}/healthz", timeout=WAIT_S).status_code == 200
        assert b"connection: close" in received.lower() and closed_by_server(conn), "nor does it wait for the rest"
    finally:
        conn.close()


@pytest.mark.parametrize(("path", "declared"), [("/v1/voices", BODY_BYTES), ("/v1/tts/submit", 60_000)])
def test_a_body_that_declares_more_than_it_sends_gets_a_408_once_its_time_is_up_and_the_connection_closed(
    api: Api, path: str, declared: int
) -> None:
    got, received, conn = answer_to_partial_body(api.impatient_port, path, api.admin_key, declared)
    try:
        assert got == 408, received[:300]
        assert b"BODY_READ_TIMEOUT_S" in received or b"BODY_READ_TIMEOUT_S" in conn.recv(65536)
        assert closed_by_server(conn)
    finally:
        conn.close()


def test_an_admins_body_of_eight_mebibytes_of_integers_is_refused_unparsed_from_its_count_of_values(api: Api) -> None:
    answer = httpx.post(
        f"{api.url}/v1/voices",
        content=array_of_ints(BODY_BYTES),
        headers={"Authorization": f"Bearer {api.admin_key}", "Content-Type": "application/json"},
        timeout=WAIT_S,
    )
    assert answer.status_code == 422, answer.text
    assert "more than 1000 values" in json.dumps(answer.json())
    assert httpx.get(f"{api.url}/healthz", timeout=WAIT_S).status_code == 200
