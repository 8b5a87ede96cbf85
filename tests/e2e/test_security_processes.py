"""Security against real processes: the body limit under uvicorn, keys on a public bind, the keys command."""

from __future__ import annotations

import itertools
import json
import secrets
import socket
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import redis
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from tests.support.service import ROOT, Service, wait_for
from ttsq.runtime.launch import free_port

# Debian's redis-server, built with TLS (the bundled one is not); scripts/install_debian_redis.sh.
DEBIAN_REDIS = "/usr/bin/redis-server"

pytestmark = pytest.mark.e2e


def open_request(url: str, head: bytes, body: bytes) -> socket.socket:
    """Send a request's head and only part of its body by hand (so the client can declare, or stream,
    far more than it sends) and leave the connection open."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=60)
    sock.sendall(head + body)
    return sock


def status_of(sock: socket.socket) -> int:
    """The status the server answers on ``sock``; the socket timeout fails the test if it waits for more body."""
    answer = sock.recv(4096)
    return int(answer.split(b" ", 2)[1])


def test_an_oversized_body_is_refused_before_it_is_read_and_the_api_keeps_serving(service: Service) -> None:
    url = service.api_url
    declared = 200 * 1024 * 1024
    # As HTTP reads Content-Length, the whitespace around a field value is not part of it (a trailing space once
    # skipped the immediate 413; uvicorn itself answers 400 to a list of lengths, which HTTP allows).
    for length in (f"{declared}", f"{declared} ", f" {declared}\t"):
        head = (
            f"POST /v1/tts/submit HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        ).encode()
        with open_request(url, head, b"{") as declared_200_mb:
            # The server has 1 byte of a declared 200 MB: a server that read (or buffered) the body first
            # would wait here for the other 199.99 MB, and the socket timeout would fail the test.
            assert status_of(declared_200_mb) == 413, repr(length)

    # A route that keeps MAX_BODY_BYTES (the submit's may hold a whole document: MAX_DOCUMENT_CHARS).
    chunked_head = (
        b"POST /v1/tts/dialogue HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    chunk = b"%x\r\n%s\r\n" % (16_384, b" " * 16_384)
    with open_request(url, chunked_head, chunk * 5) as streaming:  # 80 KiB sent, no final chunk: the stream goes on
        assert status_of(streaming) == 413, "a chunked body without Content-Length is counted as it streams"

    with open_request(url, chunked_head, chunk) as slow:  # 16 KiB of a body that has not ended
        assert httpx.get(f"{url}/healthz", timeout=30).status_code == 200, "one slow body holds up no one else"
        slow.sendall(b"0\r\n\r\n")
        assert status_of(slow) == 422, "an under-limit body is read and judged as usual"

    refused = httpx.post(
        f"{url}/v1/tts/dialogue", content=b"{" + b" " * 70_000 + b"}", headers={"content-type": "application/json"}
    )
    assert refused.status_code == 413 and "MAX_BODY_BYTES" in refused.json()["detail"]
    openai = httpx.post(f"{url}/v1/audio/speech", content=b" " * 70_000, headers={"content-type": "application/json"})
    assert openai.status_code == 413 and openai.json()["error"]["message"], "OpenAI routes answer in OpenAI's shape"


def test_keys_are_required_on_a_public_bind_and_managed_with_the_command(service: Service) -> None:
    public = service.start_api("api-public", host="0.0.0.0")
    anonymous = httpx.post(f"{public}/v1/tts/submit", json={"text": "hi", "seed": 1})
    assert anonymous.status_code == 401, "AUTH=auto: a non-loopback listener needs keys"
    loopback = httpx.post(f"{service.api_url}/v1/tts/submit", json={"text": "hi", "seed": 1})
    assert loopback.status_code == 202, "the loopback API of the same deployment stays open"

    def ttsq(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "ttsq", *args], cwd=ROOT, env=service.env, capture_output=True, text=True, timeout=60
        )

    created = ttsq("keys", "create", "--name", "ci", "--scopes", "tts")
    assert created.returncode == 0, created.stderr
    key = created.stdout.splitlines()[0]
    assert key.startswith("ttsq_") and "shown only now" in created.stderr
    assert (
        httpx.post(
            f"{public}/v1/tts/submit", json={"text": "hi", "seed": 2}, headers={"Authorization": f"Bearer {key}"}
        ).status_code
        == 202
    )
    listed = ttsq("keys", "list")
    key_id = key.split("_")[1]
    assert key_id in listed.stdout and key not in listed.stdout, "a list never shows a key"
    assert ttsq("keys", "revoke", key_id).returncode == 0
    assert httpx.get(f"{public}/v1/voices", headers={"X-API-Key": key}).status_code == 401
    assert ttsq("keys", "revoke", key_id).returncode == 1
    assert ttsq("keys", "create", "--name", "x", "--scopes", "root").returncode == 2
    logs = service.logs()
    assert key not in logs, "no key ever reaches a log"


def test_an_api_on_a_unix_socket_requires_keys_under_auth_auto(service: Service, tmp_path: Path) -> None:
    """``uvicorn --uds`` (behind a reverse proxy, its usual use) is as public as the proxy: under AUTH=auto it needs
    keys. It stayed keyless (no TCP socket to judge by) and made every anonymous caller an admin."""
    path = tmp_path / "ttsq.sock"
    api = service.spawn("api-uds", [sys.executable, "-m", "uvicorn", "app:app", "--uds", str(path), "--no-access-log"])
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(path)), base_url="http://ttsq") as client:

        def ready() -> bool:
            assert api.poll() is None, service.log("api-uds").decode()[-2000:]
            try:
                return client.get("/readyz").status_code == 200
            except httpx.TransportError:
                return False

        wait_for(ready, 60, "the API on a Unix socket to be ready")
        anonymous = client.post("/v1/voices", json={"name": "taken", "seed": 1})
        assert anonymous.status_code == 401, anonymous.text
        assert client.post("/v1/tts/submit", json={"text": "hi", "seed": 1}).status_code == 401
        admin = service.create_key("operator", "admin")
        made = client.post("/v1/voices", json={"name": "narrator2", "seed": 1}, headers={"Authorization": f"Bearer {admin}"})
        assert made.status_code == 201, made.text


def test_a_stream_opened_with_a_key_ends_when_the_key_is_revoked(service: Service) -> None:
    """An event stream, an audio stream and a realtime session, opened before their key's revocation: each ends within
    STREAM_KEY_RECHECK_S of it (they delivered for as long as their task lasted), and says so — the event stream with
    an ``error`` event, the audio stream broken off (a clean end would read as the whole audio), the session with
    close code 4401. No worker runs: the task waits."""
    api = service.start_api("api-revoke", AUTH="on", STREAM_KEY_RECHECK_S="0.2")
    key = service.create_key("streamer", "tts")
    bearer = {"Authorization": f"Bearer {key}"}
    task = httpx.post(f"{api}/v1/tts/submit", json={"text": "hi", "seed": 1}, headers=bearer).json()["task_id"]

    def revoke() -> None:
        subprocess.run(
            [sys.executable, "-m", "ttsq", "keys", "revoke", key.split("_")[1]], cwd=ROOT, env=service.env, check=True, timeout=60
        )

    with (
        httpx.stream("GET", f"{api}/v1/tts/events/{task}", headers=bearer, timeout=30) as events,
        httpx.stream("GET", f"{api}/v1/tts/stream/{task}", headers=bearer, timeout=30) as audio,
        connect(api.replace("http://", "ws://") + "/v1/tts/realtime", additional_headers=bearer) as session,
    ):
        lines = events.iter_lines()
        assert next(lines).startswith("id: ") and "queued" in "".join(itertools.islice(lines, 3))
        assert audio.status_code == 200
        session.send(json.dumps({"type": "session.start"}))
        assert json.loads(session.recv(timeout=30))["type"] == "session.started"
        revoke()
        rest = [line for line in lines if line]  # ends: a read timeout (30 s) would fail the test instead
        assert rest[0] == "event: error" and json.loads(rest[1].removeprefix("data: "))["code"] == "unauthorized", rest
        assert not any("status" in line for line in rest), rest
        with pytest.raises(httpx.RemoteProtocolError):
            audio.read()
        closing = [session.recv(timeout=30) for _ in range(1)]
        with pytest.raises(ConnectionClosed):
            session.recv(timeout=30)
        assert session.close_code == 4401 and "revoked" in json.loads(closing[0])["message"]
    log = service.log("api-revoke").decode()
    assert "the response was broken off: the API key was revoked" in log
    assert " ERROR " not in log, "a stream broken off on purpose is a warning, not an error"


def _tls_material(directory: Path) -> dict[str, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1, made with the openssl command."""
    directory.mkdir()
    files = {name: directory / f"{name}.pem" for name in ("ca", "ca-key", "server", "server-key")}
    ext = directory / "san.cnf"
    ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")

    def openssl(*args: str | Path) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=ttsq-test-ca",
            "-keyout", files["ca-key"], "-out", files["ca"])  # fmt: skip
    csr = directory / "server.csr"
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", files["server-key"], "-out", csr)
    openssl("x509", "-req", "-in", csr, "-CA", files["ca"], "-CAkey", files["ca-key"], "-CAcreateserial", "-days", "2",
            "-extfile", ext, "-out", files["server"])  # fmt: skip
    return files


def test_redis_over_tls_with_a_password_from_a_secret_file_and_no_secret_in_any_log(service: Service, tmp_path: Path) -> None:
    """Managed Redis as operators run it: ``rediss://`` with a CA to verify, a password, the URL read from a
    mounted secret file (SECRETS_DIR); the job goes through, and the password shows up in no log or probe."""
    tls = _tls_material(tmp_path / "tls")
    password = secrets.token_urlsafe(24)
    port = free_port()
    redis_process = subprocess.Popen(
        [DEBIAN_REDIS, "--port", "0", "--tls-port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path), "--tls-cert-file", str(tls["server"]), "--tls-key-file", str(tls["server-key"]),
         "--tls-ca-cert-file", str(tls["ca"]), "--tls-auth-clients", "no", "--requirepass", password],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    secret_dir = tmp_path / "secrets"
    secret_dir.mkdir()
    url = f"rediss://:{password}@127.0.0.1:{port}/0?ssl_ca_certs={tls['ca']}&ssl_cert_reqs=required"
    (secret_dir / "redis_url").write_text(url)
    (secret_dir / "cache_redis_url").write_text(url.replace("/0?", "/1?"))  # the cache's own Redis (db), also over TLS
    env = {key: value for key, value in service.env.items() if key != "REDIS_URL"}
    tls_service = Service(redis=service.redis, tmp=tmp_path / "deployment", env={**env, "SECRETS_DIR": str(secret_dir)})
    tls_service.tmp.mkdir()
    try:
        wait_for(lambda: _tls_ping(url), 30, "the TLS redis-server to answer")
        plain = redis.Redis(port=port, socket_connect_timeout=2)
        with pytest.raises(redis.ConnectionError):
            plain.ping()  # no plaintext listener: --port 0
        api = tls_service.start_api("api-tls")
        tls_service.start_worker("worker-tls")
        task_id = tls_service.submit(text="over tls", seed=3)
        assert tls_service.wait_status(task_id, {"done", "failed"}, 180)["status"] == "done"
        again = httpx.post(f"{api}/v1/tts/submit", json={"text": "over tls", "seed": 3}).json()
        assert again["cached"] is True, "the result came back from the cache Redis over TLS"
        cache_db = redis.Redis.from_url(url.replace("/0?", "/1?"))
        assert cache_db.dbsize() > 0, "the cache lives in its own database"
        probes = [httpx.get(f"{api}{path}").text for path in ("/readyz", "/healthz", "/metrics")]
        for text in [tls_service.logs(), *probes]:
            assert password not in text, "the Redis password never reaches a log, a probe or the metrics"
    finally:
        tls_service.kill_all()
        redis_process.kill()
        redis_process.wait()


def _tls_ping(url: str) -> bool:
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=1)
        try:
            return bool(client.ping())
        finally:
            client.close()
    except redis.ConnectionError:
        return False
