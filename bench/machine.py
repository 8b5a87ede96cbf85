"""What every benchmark, soak and chaos report says about the machine it ran on (one place, so the reports agree)."""

from __future__ import annotations

import contextlib
import os
import platform
from typing import Any


def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo``, else what :mod:`platform` knows."""
    cpu = platform.processor() or platform.machine() or "unknown"
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as info:
        cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")), cpu)
    return cpu


def machine() -> dict[str, Any]:
    """Platform, CPU model, cores and memory; callers add what only they know (GPU, load at start)."""
    import psutil  # here, not above: bench.gpu runs on bare GPU machines and needs only cpu_model()

    return {
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
    }
