"""systemd's notify protocol, for a worker run as a ``Type=notify`` unit with ``WatchdogSec=``.

systemd restarts a unit on exit, but it cannot see a *hung* inference: the process is alive and its
HTTP ``/healthz`` answers 503, which Kubernetes acts on and systemd does not. So the worker says
``READY=1`` once its model is loaded and warmed, and sends ``WATCHDOG=1`` on every upkeep pass
*while its liveness holds*; when an inference hangs past ``JOB_TIMEOUT_S`` the pings stop, and
systemd kills and restarts it after ``WatchdogSec``. The socket path comes from ``NOTIFY_SOCKET``
(read by ``settings.py``); without it every call is a no-op. A hand-written sender, because the
protocol is one datagram and the libraries for it wrap libsystemd or add nothing.
"""

from __future__ import annotations

import logging
import socket

log = logging.getLogger(__name__)


class SystemdNotifier:
    def __init__(self, path: str | None) -> None:
        # "@name" is a socket in the abstract namespace (systemd's convention); the rest are file paths.
        self.address = None if not path else "\0" + path[1:] if path.startswith("@") else path
        self._failed = False

    @property
    def enabled(self) -> bool:
        return self.address is not None

    def notify(self, *states: str) -> None:
        """Send ``states`` (``READY=1``, ``WATCHDOG=1``, ``STATUS=…``) as one message; never raises."""
        if self.address is None:
            return
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                # Never block the event loop: a receiver that does not drain fills its queue
                # (net.unix.max_dgram_qlen), and a blocking send would then stall the worker.
                sock.setblocking(False)
                sock.sendto("\n".join(states).encode(), self.address)
        except OSError as exc:
            if not self._failed:  # once: a broken socket must not flood the log every pass
                log.warning("cannot notify systemd at %s: %s", self.address.lstrip("\0"), exc)
                self._failed = True
