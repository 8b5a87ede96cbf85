"""``AUTH=auto`` decides from the listening sockets, without scanning ``/proc`` on every request."""

from __future__ import annotations

import pytest

from ttsq.api import auth


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_auto_looks_again_at_most_once_per_interval_until_a_socket_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    scans: list[int] = []
    found: list[str] = []

    def addresses(pid: int | None = None) -> list[str]:
        scans.append(1)
        return list(found)

    monkeypatch.setattr(auth, "listening_addresses", addresses)
    clock = Clock()
    policy = auth.KeyPolicy("auto", clock=clock, recheck_s=1.0)

    assert policy.keys_required() is False
    assert policy.keys_required() is False
    assert len(scans) == 1, "a second request within the interval must not scan again"

    clock.now += 1.0
    found.append("0.0.0.0")
    assert policy.keys_required() is True, "a public bind found on the next look requires keys"
    assert len(scans) == 2
    found.clear()
    clock.now += 10
    assert policy.keys_required() is True, "once decided, the decision holds"
    assert len(scans) == 2


def test_auto_on_loopback_only_does_not_require_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "listening_addresses", lambda pid=None: ["127.0.0.1", "::1"])
    assert auth.KeyPolicy("auto").keys_required() is False


def test_on_and_off_never_look_at_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(pid: int | None = None) -> list[str]:
        raise AssertionError("scanned")

    monkeypatch.setattr(auth, "listening_addresses", boom)
    assert auth.KeyPolicy("on").keys_required() is True
    assert auth.KeyPolicy("off").keys_required() is False
