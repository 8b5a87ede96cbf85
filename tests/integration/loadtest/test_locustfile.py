"""The load test (``loadtest/locustfile.py``): its user classes, and one real headless run.

Locust monkey-patches the standard library with gevent as soon as it is imported, which would
change the rest of this pytest session under its feet; so the locustfile is only ever imported
in a child process, as locust itself does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from tests.support.service import ROOT, Service

LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"
USER_CLASSES = {"SubmitPollUser", "CacheHeavyUser", "OpenAIUser"}

if find_spec("locust") is None:  # fail loudly: a skipped load-test check is not a passed one
    raise ImportError("locust is not installed: pip install -e '.[dev]'")

INSPECT = """
import importlib.util, inspect, json, sys
from locust import FastHttpUser
spec = importlib.util.spec_from_file_location("locustfile", sys.argv[1])
module = sys.modules["locustfile"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
users = {
    name: {"tasks": [t.__name__ for t in cls.tasks], "weight": cls.weight, "host": cls.host,
           "fast": issubclass(cls, FastHttpUser), "waits": cls.wait_time is not None}
    for name, cls in vars(module).items()
    if inspect.isclass(cls) and issubclass(cls, FastHttpUser) and not cls.abstract and cls.__module__ == "locustfile"
}
wav = b"RIFF" + bytes(4) + b"WAVE" + bytes(40)
checks = {
    "wav_ok": module.audio_problem(wav, "audio/wav", "wav"),
    "mp3_ok": module.audio_problem(b"\\xff\\xf3\\x84\\xc4" + bytes(8), "audio/mpeg", "mp3"),
    "wav_as_mp3": module.audio_problem(wav, "audio/mpeg", "mp3"),
    "json_as_wav": module.audio_problem(b'{"status": "queued"}', "application/json", "wav"),
}
print(json.dumps({"users": users, "checks": checks}))
"""


def child_env() -> dict[str, str]:
    """This environment without LOCUST_* settings, so that a developer's shell cannot change the run."""
    return {key: value for key, value in os.environ.items() if not key.startswith("LOCUST_")}


def test_locustfile_defines_the_three_user_classes_with_tasks() -> None:
    result = subprocess.run(
        [sys.executable, "-c", INSPECT, str(LOCUSTFILE)], cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    users = report["users"]
    assert set(users) == USER_CLASSES
    for name, user in users.items():
        assert user["tasks"], f"{name} has no tasks"
        assert user["fast"] and user["waits"] and user["weight"] >= 1, name
        assert user["host"] == "http://127.0.0.1:8000", name
    checks = report["checks"]
    assert checks["wav_ok"] is None and checks["mp3_ok"] is None
    assert "not an MP3" in checks["wav_as_mp3"] and "content-type" in checks["json_as_wav"]


@pytest.mark.e2e
def test_submit_poll_headless_run_against_the_real_service(service: Service, tmp_path: Path) -> None:
    service.start_worker("w")
    prefix = tmp_path / "submit-poll"
    command = [
        sys.executable, "-m", "locust", "-f", str(LOCUSTFILE), "SubmitPollUser",
        "--headless", "-u", "3", "-r", "3", "-t", "10s", "--host", service.api_url,
        "--json-file", str(prefix), "--only-summary", "--tts-seed", "1", "--tts-task-timeout", "60",
    ]  # fmt: skip
    result = subprocess.run(command, cwd=ROOT, env=child_env(), capture_output=True, text=True, timeout=120)
    output = f"{result.stdout}\n{result.stderr}"
    assert result.returncode == 0, f"{output[-4000:]}\n{service.logs()}"  # locust exits 1 on any failure
    stats: list[dict[str, Any]] = json.loads(Path(f"{prefix}.json").read_text())
    rows = {(row["method"], row["name"]): row for row in stats}
    for key in (("POST", "/v1/tts/submit"), ("GET", "/v1/tts/tasks/[id]"), ("GET", "/v1/tts/result/[id]")):
        assert key in rows and rows[key]["num_requests"] > 0, f"no {key} requests: {sorted(rows)}"
    assert all(row["num_failures"] == 0 for row in stats), output[-4000:]
    assert "Traceback" not in output, output[-4000:]
