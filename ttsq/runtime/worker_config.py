"""The worker's timings and limits, as ``settings.py`` gives them (:meth:`Settings.worker_config`): one record the
worker, its model replica and its chores read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["WorkerConfig"]


@dataclass(frozen=True)
class WorkerConfig:
    """The worker's timings and limits. Built from settings by ``worker.py``, which validates them."""

    worker_id: str
    heartbeat_interval_s: float
    sweep_interval_s: float
    job_timeout_s: float
    shutdown_grace_s: float
    health_host: str
    health_port: int
    max_batch: int
    """The largest batch ever run; with ``auto_batch`` the worker may choose less."""
    auto_batch: bool
    """Size the batch from the device at start (on CUDA); on a CPU run at most
    :data:`~ttsq.runtime.replica.CPU_AUTO_BATCH`."""
    batch_memory_headroom: float
    stream_rtf_target: float
    stream_admission: Literal["off", "wait", "refuse"]
    """``wait``/``refuse``: claim no new job past the stream room, the streams a decode step keeps real-time
    (:mod:`ttsq.runtime.stream_admission`); that room goes in the heartbeat, for the API's ``refuse``."""
    max_new_token: int
    document_parts_in_flight: int
    """A document's parts in the engine at once (:mod:`ttsq.runtime.documents`)."""
    compile: bool
    batch_wait_ms: float
    oom_recover_s: float
    release_memory_above: float
    release_memory_idle_s: float
    notify_socket: str | None
    """systemd's ``NOTIFY_SOCKET`` (a ``Type=notify`` unit): ready and watchdog pings (:mod:`ttsq.runtime.sdnotify`)."""

    stream_admission_slack: bool
    """With stream admission on: no claim while a started stream is short of its margin
    (:func:`ttsq.runtime.stream_admission.short_of_slack`)."""
    playback_margin_s: float
    """``PLAYBACK_MARGIN_S``: the margin a started stream's listener is held to."""

    @property
    def stall_after_s(self) -> float:
        """How long the event loop may go without a liveness tick before the worker counts as stalled (``/healthz``,
        systemd's watchdog)."""
        return max(5 * self.heartbeat_interval_s, 10.0)
