"""The machine a benchmark runs on: what every benchmark, soak and chaos report says about it (one place, so the
reports agree), and the Debian tools a benchmark needs on it."""

from __future__ import annotations

import contextlib
import os
import platform
import shutil
import subprocess
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


def ensure_debian_tool(binary: str, package: str | None = None) -> str:
    """The path of ``binary``; installs Debian's ``package`` (default: the binary's name) when it is missing and we
    are root, else stops with the command to run."""
    found = shutil.which(binary)
    if found:
        return found
    package = package or binary
    if os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"{binary} is missing: installing Debian's package (apt-get install -y {package})", flush=True)

        def apt_get(*args: str) -> bool:
            done = subprocess.run(["apt-get", *args], check=False, timeout=900, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
            return done.returncode == 0

        if not apt_get("install", "-y", package):  # a stale package list: refresh it once
            apt_get("update")
            apt_get("install", "-y", package)
        found = shutil.which(binary)
        if found:
            return found
    raise SystemExit(f"this benchmark needs {binary}: install it with `apt-get install -y {package}` (Debian/Ubuntu)")
