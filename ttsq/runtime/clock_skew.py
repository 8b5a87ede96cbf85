"""Fault injection for tests: a process whose host clock is off (``FAULT_CLOCK_SKEW_S``; test use only).

Hosts' clocks drift apart; two API replicas two seconds apart once let a 1/s, burst-5
rate limit pass 40 of 40 requests, and that a worker's clock running ahead could judge another's
live lease lapsed. ttsq now takes every deadline and bucket from Redis's clock
(:mod:`ttsq.store.clock`), and the end-to-end tests prove it by running processes whose own clock is
off: this shifts ``time.time`` for the whole process, as a drifted host clock would. Nothing else
changes; off (0) unless the test setting is set, and said loudly in the log when it is.
"""

from __future__ import annotations

import logging
import time


def skew_host_clock(seconds: float, log: logging.Logger) -> None:
    """Make this process's ``time.time`` run ``seconds`` off from now on (0: leave it alone)."""
    if not seconds:
        return
    real = time.time

    def skewed() -> float:
        return real() + seconds

    time.time = skewed
    log.warning("FAULT INJECTION (test setting): this process's clock runs %+.1fs off (FAULT_CLOCK_SKEW_S)", seconds)
