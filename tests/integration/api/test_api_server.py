"""``api_server.py``: the one place the server's limits come from — the settings, the same for every launch (the
shipped launches all run it: ``tests/deploy/test_crosscheck.py``; what the limits do to hostile clients:
``tests/hostile``)."""

from __future__ import annotations

from typing import Any

from api_server import connection_limits, server_options
from tests.conftest import settings
from ttsq.runtime.connections import AUTO_MAX_CONNECTIONS, RESERVED_FILES, ConnectionLimits, GuardedHttpProtocol
from ttsq.runtime.launch import KEEP_ALIVE_S, api_command


def test_the_websocket_limit_is_the_sessions_message_limit_and_compression_is_off() -> None:
    options: dict[str, Any] = server_options(settings(realtime_max_message_bytes=131_072), open_files=1024)
    assert options["ws_max_size"] == 131_072
    assert options["ws_per_message_deflate"] is False
    assert options["ws"] == "websockets-sansio", "its max_size bounds a message as its frames arrive, inflated or not"
    assert options["timeout_keep_alive"] == KEEP_ALIVE_S
    assert options["loop"] == "uvloop"
    protocol = options["http"]
    assert issubclass(protocol, GuardedHttpProtocol)
    assert protocol.limits == ConnectionLimits(header_timeout_s=10.0, max_connections=1024 - 2 * 64 - RESERVED_FILES)


def test_the_connection_cap_follows_the_open_file_limit_unless_set() -> None:
    assert connection_limits(settings(), open_files=1024).max_connections == 1024 - 2 * 64 - RESERVED_FILES
    assert connection_limits(settings(redis_max_connections=8), open_files=1024).max_connections == 1024 - 16 - RESERVED_FILES
    assert connection_limits(settings(), open_files=1_048_576).max_connections == AUTO_MAX_CONNECTIONS
    assert connection_limits(settings(max_connections=100, http_header_timeout_s=3), open_files=1024) == ConnectionLimits(3.0, 100)


def test_each_server_gets_a_protocol_class_and_pool_of_its_own() -> None:
    first, second = server_options(settings(), 1024)["http"], server_options(settings(), 1024)["http"]
    assert first is not second and first.pool is not second.pool


def test_the_launch_command_runs_it() -> None:
    assert api_command(8000, host="0.0.0.0")[1:] == ["api_server.py", "--host", "0.0.0.0", "--port", "8000"]
    assert api_command(9, app="bench.x:app", access_log=True)[-3:] == ["--app", "bench.x:app", "--access-log"]
