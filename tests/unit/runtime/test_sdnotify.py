"""The systemd notifier: one datagram per call, the abstract-namespace convention, and never a stall."""

from __future__ import annotations

import socket
from pathlib import Path

from ttsq.runtime.sdnotify import SystemdNotifier


def test_states_arrive_as_one_message_and_a_full_queue_never_blocks(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(str(path))
        notifier = SystemdNotifier(str(path))
        notifier.notify("READY=1", "STATUS=serving")
        assert receiver.recv(4096) == b"READY=1\nSTATUS=serving"
        # Nobody drains now: the queue (net.unix.max_dgram_qlen, often 10) fills; a blocking send would
        # hang here (and, in the worker, stall its event loop) instead of dropping the ping.
        for _ in range(1000):
            notifier.notify("WATCHDOG=1")
        assert receiver.recv(4096) == b"WATCHDOG=1"


def test_abstract_socket_names_and_no_socket(tmp_path: Path) -> None:
    name = f"ttsq-test-{tmp_path.name}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind("\0" + name)
        SystemdNotifier("@" + name).notify("WATCHDOG=1")
        assert receiver.recv(4096) == b"WATCHDOG=1"
    SystemdNotifier(None).notify("READY=1")  # not under systemd: nothing to do, nothing raised
    assert not SystemdNotifier("").enabled
