"""Keep a machine's ttsq processes running, as systemd's ``Restart=always`` and Kubernetes would.

``make up`` runs Redis (when embedded), the workers and the API under one :class:`Supervisor`. A
child that exits is started again after a backoff (1 s, doubling to 30 s; back to 1 s once it has
stayed up a minute), and the others keep running: one ``kill -9`` of a worker costs the jobs it
held one lease, not the whole stack. A child with a liveness URL is also restarted when that URL
keeps failing (503, or no answer) for ``unhealthy_after_s`` — the worker's ``/healthz`` turns 503
when an inference hangs past ``JOB_TIMEOUT_S`` — but only once it has *started*: its
``startup_url`` (the worker's ``/readyz``: model loaded and warmed) answered 200 once, as
Kubernetes' startup probe on ``/readyz`` gates the worker's liveness probe (``k8s/base/worker.yaml``).
A worker loading its model is never judged: while it imports torch and ChatTTS from a cold disk
cache, its loop cannot answer ``/healthz`` for tens of seconds (the import holds the interpreter
lock while it maps the libraries), which is slowness to start, not a hang. A child that dies while
it starts — the OOM killer in the middle of a model load — is restarted with the same backoff as
one that dies later. The one exit that is not restarted is a configuration error
(:data:`~ttsq.runtime.launch.CONFIG_ERROR_EXIT`: starting it again would fail the same way): the
child is given up on, and its owner (``make up``) stops.

Time and probes are injected, so the policy is tested by stepping :meth:`Supervisor.tick` on a
fake clock with real child processes.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import httpx

from ttsq.runtime.launch import CONFIG_ERROR_EXIT

log = logging.getLogger("ttsq.supervise")

Probe = Callable[[str], bool]
"""True when the URL answers 200 in time."""


def http_probe(url: str, timeout_s: float = 2.0) -> bool:
    try:
        return httpx.get(url, timeout=timeout_s).status_code == 200
    except httpx.HTTPError:
        return False


@dataclass(frozen=True)
class Policy:
    """Restart backoff and liveness, with systemd- and Kubernetes-like defaults."""

    backoff_initial_s: float = 1.0
    backoff_max_s: float = 30.0
    reset_after_s: float = 60.0
    """A child that stayed up this long starts its backoff from the beginning again."""
    unhealthy_after_s: float = 15.0
    """Liveness failing continuously this long (Kubernetes: periodSeconds 5 × failureThreshold 3) → restart."""
    give_up_on: frozenset[int] = frozenset({CONFIG_ERROR_EXIT})
    """Exit codes that are not restarted (systemd's ``RestartPreventExitStatus=``): the child said it cannot run."""


@dataclass
class Child:
    """One supervised process: how to start it, and where its liveness answers (if anywhere)."""

    name: str
    start: Callable[[], subprocess.Popen[bytes]]
    health_url: str | None = None
    startup_url: str | None = None
    """Its first 200 ends the child's start; liveness is judged only after it. None: ``health_url`` itself."""
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    restarts: int = 0
    consecutive_failures: int = 0
    """Exits or kills in a row without staying up ``reset_after_s``: the backoff's exponent."""
    next_start_at: float | None = None
    started: bool = False
    """``startup_url`` answered 200 since the last launch: from now on ``health_url`` failing means not live."""
    failing_since: float | None = None
    history: list[str] = field(default_factory=list)
    """What happened to it (exits, kills, restarts), for logs and tests."""
    gave_up: str | None = None
    """Why it is no longer restarted (it exited with a code in ``Policy.give_up_on``); None while it is kept running."""


class Supervisor:
    def __init__(
        self,
        children: Sequence[Child],
        policy: Policy | None = None,
        clock: Callable[[], float] = time.monotonic,
        probe: Probe = http_probe,
    ) -> None:
        self.children = list(children)
        self.policy = policy or Policy()
        self.clock = clock
        self.probe = probe
        self.stopping = False

    def start_all(self) -> None:
        for child in self.children:
            self.launch(child)

    def launch(self, child: Child) -> None:
        """Start ``child`` now (its first start; restarts happen in :meth:`tick`)."""
        child.process = child.start()
        child.started_at = self.clock()
        child.next_start_at = None
        child.started = False
        child.failing_since = None

    def backoff_s(self, child: Child) -> float:
        exponent = max(0, child.consecutive_failures - 1)
        return float(min(self.policy.backoff_max_s, self.policy.backoff_initial_s * 2**exponent))

    def tick(self) -> None:
        """Look at every child once: restart what exited (after its backoff), kill what stopped being live."""
        if self.stopping:
            return
        now = self.clock()
        for child in self.children:
            if child.process is None:
                if child.next_start_at is not None and now >= child.next_start_at:
                    child.restarts += 1
                    child.history.append(f"restart {child.restarts}")
                    log.warning("ttsq: restarting %s (restart %d)", child.name, child.restarts)
                    self.launch(child)
                continue
            code = child.process.poll()
            if code in self.policy.give_up_on:
                self._give_up(child, f"exited with code {code} (a configuration error)")
                continue
            if code is not None:
                self._ended(child, now, f"exited with code {code}")
                continue
            if child.health_url is not None:
                self._check_liveness(child, now)

    def _check_liveness(self, child: Child, now: float) -> None:
        assert child.health_url is not None and child.process is not None
        if not child.started:  # still starting (loading a model may take minutes): not judged yet
            child.started = self.probe(child.startup_url or child.health_url)
            return
        if self.probe(child.health_url):
            child.failing_since = None
            return
        if child.failing_since is None:
            child.failing_since = now
            return
        if now - child.failing_since >= self.policy.unhealthy_after_s:
            log.error(
                "ttsq: %s failed its liveness check (%s) for %.0f s; killing it",
                child.name,
                child.health_url,
                now - child.failing_since,
            )
            kill_group(child.process)
            self._ended(child, now, f"killed: not live for {now - child.failing_since:.0f} s")

    def _ended(self, child: Child, now: float, what: str) -> None:
        up_s = now - child.started_at
        child.consecutive_failures = 1 if up_s >= self.policy.reset_after_s else child.consecutive_failures + 1
        delay = self.backoff_s(child)
        child.history.append(what)
        log.error("ttsq: %s %s after %.0f s up; starting it again in %.0f s (the rest runs on)", child.name, what, up_s, delay)
        child.process = None
        child.next_start_at = now + delay

    def _give_up(self, child: Child, what: str) -> None:
        child.history.append(what)
        child.gave_up = what
        log.error("ttsq: %s %s; not restarting it: it would fail the same way", child.name, what)
        child.process = None
        child.next_start_at = None

    def given_up(self) -> list[Child]:
        """The children that will not be restarted (configuration errors), in the order they were given."""
        return [child for child in self.children if child.gave_up is not None]

    def stop(self, grace_s: float = 30.0, order: Sequence[Sequence[Child]] | None = None) -> None:
        """SIGTERM each group in turn (workers finish their jobs within their grace period), then SIGKILL
        what is left after ``grace_s``. Default: every child at once."""
        self.stopping = True
        for group in order or [self.children]:
            running = [c.process for c in group if c.process is not None and c.process.poll() is None]
            for process in running:
                process.send_signal(signal.SIGTERM)
            for process in running:
                try:
                    process.wait(grace_s)
                except subprocess.TimeoutExpired:
                    kill_group(process)


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL a child and everything it started (children run in their own process group)."""
    try:
        if os.getpgid(process.pid) == process.pid:
            os.killpg(process.pid, signal.SIGKILL)
        else:  # not a group leader: the process alone
            process.kill()
    except ProcessLookupError:
        pass  # gone already
    process.wait()
