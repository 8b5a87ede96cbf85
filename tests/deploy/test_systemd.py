"""deploy/systemd: the units pass `systemd-analyze verify` with no warning at all, restart always
within limits, are hardened, and the worker template derives its GPU and probe port from N."""

from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.deploy.manifests import ROOT, Tools, split_command
from ttsq.runtime.launch import api_command

UNITS = ROOT / "deploy" / "systemd"
HARDENING = ("NoNewPrivileges=yes", "ProtectSystem=strict", "ProtectHome=yes", "PrivateTmp=yes", "User=ttsq",
             "CapabilityBoundingSet=")  # fmt: skip


def verify(root: Path, *units: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["systemd-analyze", "verify", f"--root={root}", *units], capture_output=True, text=True)


@pytest.fixture
def system_root(tmp_path: Path) -> Path:
    """A root with the host's unit tree (for the targets the units reference), ours, and the programs they run."""
    root = tmp_path / "root"
    shutil.copytree("/usr/lib/systemd/system", root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    (root / "lib").symlink_to("usr/lib")
    shutil.copytree(UNITS, root / "etc" / "systemd" / "system", ignore=shutil.ignore_patterns("*.env"))
    python = root / "opt" / "ttsq" / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(python.stat().st_mode | stat.S_IXUSR)
    (root / "bin").mkdir()
    shutil.copy("/bin/sh", root / "bin" / "sh")
    return root


def test_units_verify_without_a_single_warning(tools: Tools, system_root: Path) -> None:
    result = verify(system_root, "ttsq-api.service", "ttsq-worker@0.service", "ttsq-worker@3.service")
    assert result.returncode == 0 and not result.stdout.strip() and not result.stderr.strip(), result.stdout + result.stderr


def test_verify_catches_a_broken_unit(tools: Tools, system_root: Path) -> None:
    unit = system_root / "etc" / "systemd" / "system" / "ttsq-api.service"
    unit.write_text(unit.read_text().replace("ProtectHome=yes", "ProtectHome=sometimes"))
    result = verify(system_root, "ttsq-api.service")
    assert "ttsq-api.service:" in result.stderr and "sometimes" in result.stderr, result.stderr


def directives(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]


@pytest.mark.parametrize("unit", ["ttsq-api.service", "ttsq-worker@.service"])
def test_units_restart_always_within_limits_and_are_hardened(unit: str) -> None:
    lines = directives(UNITS / unit)
    assert "Restart=always" in lines
    assert any(line.startswith("StartLimitBurst=") for line in lines)
    assert any(line.startswith("StartLimitIntervalSec=") for line in lines)
    for hardening in HARDENING:
        assert hardening in lines, f"{unit}: {hardening}"
    assert "EnvironmentFile=/etc/ttsq/ttsq.env" in lines


def test_api_unit_runs_the_launch_command() -> None:
    [exec_start] = [line for line in directives(UNITS / "ttsq-api.service") if line.startswith("ExecStart=")]
    argv = split_command(exec_start.removeprefix("ExecStart="))
    assert argv[1:] == api_command(8000, host="0.0.0.0")[1:]
    assert argv[0] == "/opt/ttsq/.venv/bin/python"


def test_worker_template_takes_gpu_and_port_from_the_instance() -> None:
    lines = directives(UNITS / "ttsq-worker@.service")
    assert "Environment=CUDA_VISIBLE_DEVICES=%i" in lines
    [exec_start] = [line for line in lines if line.startswith("ExecStart=")]
    assert "WORKER_HEALTH_PORT=$((8001 + %i))" in exec_start and "exec /opt/ttsq/.venv/bin/python worker.py" in exec_start
    shell = re.search(r"-c '(.*)'", exec_start)
    assert shell
    for n in (0, 3):
        # The same shell line for instance N, with `env` in place of the worker: what the worker would see.
        script = shell.group(1).replace("%i", str(n)).replace("/opt/ttsq/.venv/bin/python worker.py", "/usr/bin/env")
        environment = subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True).stdout.splitlines()
        assert f"WORKER_HEALTH_PORT={8001 + n}" in environment
