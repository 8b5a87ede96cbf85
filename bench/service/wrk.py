"""Driving ``wrk`` for a JSON POST and reading its ``--latency`` report.

wrk is used (not a Python client) because on a 2-core machine a Python load generator saturates
before a uvicorn server does; wrk's C event loop leaves the server most of the CPU. A POST needs
a Lua script; the percentiles come from the ``Latency Distribution`` block that ``--latency``
prints, requests/s from its ``Requests/sec`` line, and any failure from its error lines.
"""

from __future__ import annotations

import json
import re
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.machine import ensure_debian_tool

_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


@dataclass(frozen=True)
class WrkResult:
    requests: int
    duration_s: float
    requests_per_s: float
    p50_ms: float
    p75_ms: float
    p90_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ensure_wrk() -> str:
    return ensure_debian_tool("wrk")


def wrk_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False, timeout=10)
    first = (out.stdout or out.stderr).splitlines()
    return first[0].split(" Copyright")[0] if first else "unknown"


def post_script(path: Path, body: dict[str, Any]) -> Path:
    """A wrk Lua script that POSTs ``body`` as JSON on every request."""
    payload = json.dumps(body, ensure_ascii=False).replace("\\", "\\\\").replace("'", "\\'")
    path.write_text(
        f'wrk.method = "POST"\nwrk.headers["Content-Type"] = "application/json"\nwrk.body = \'{payload}\'\n',
        encoding="utf-8",
    )
    return path


def _ms(value: str, unit: str) -> float:
    return float(value) * _UNITS_MS[unit]


def parse_wrk(output: str) -> WrkResult:
    """Parse wrk's text report (run with ``--latency``)."""
    percentiles: dict[str, float] = {}
    for pct, value, unit in re.findall(r"^\s+(50|75|90|99)%\s+([\d.]+)(us|ms|s|m)\s*$", output, re.MULTILINE):
        percentiles[pct] = _ms(value, unit)
    total = re.search(r"(\d+) requests in ([\d.]+)(us|ms|s|m)", output)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", output)
    if total is None or rate is None or len(percentiles) != 4:
        raise RuntimeError(f"could not parse wrk's report:\n{output}")
    non_2xx = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", output)
    socket = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    return WrkResult(
        requests=int(total.group(1)),
        duration_s=_ms(total.group(2), total.group(3)) / 1000,
        requests_per_s=float(rate.group(1)),
        p50_ms=percentiles["50"],
        p75_ms=percentiles["75"],
        p90_ms=percentiles["90"],
        p99_ms=percentiles["99"],
        non_2xx=int(non_2xx.group(1)) if non_2xx else 0,
        socket_errors=sum(int(n) for n in socket.groups()) if socket else 0,
    )


def run_wrk(binary: str, url: str, script: Path, *, connections: int, threads: int, duration_s: int) -> WrkResult:
    """One wrk run; bounded by its own duration plus a margin."""
    args = [binary, f"-t{threads}", f"-c{connections}", f"-d{duration_s}s", "--latency", "-s", str(script), url]
    out = subprocess.run(args, capture_output=True, text=True, check=False, timeout=duration_s + 60)
    if out.returncode != 0:
        raise RuntimeError(f"wrk failed ({out.returncode}): {out.stderr or out.stdout}")
    return parse_wrk(out.stdout)
