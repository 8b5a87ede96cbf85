"""The "crash" fault mode: a matching request SIGKILLs the process it runs in, and nothing else does.

It must be a real SIGKILL (no exception a worker could catch, no ``finally`` that records a failure),
so it runs in a child process: an unloaded engine is enough, because the fault strikes before the
engine is asked for anything, and a request that does not match only gets the (lazy) generator.
"""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.chaos.harness import ROOT
from tests.conftest import fault_config

pytestmark = pytest.mark.chaos

SCRIPT = """
from settings import Settings
from ttsq.inference.base import SynthesisRequest
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.faults import FaultInjectingEngine

settings = Settings(_env_file=None, model="tiny", normalize_text=False, fault_mode="crash", fault_match="Crashmark")
engine = FaultInjectingEngine(ChatTTSEngine(settings.engine_config()), settings.fault_config())
engine.synthesize_batch([SynthesisRequest(text="An innocent job.", speaker="", seed=1)])
print("innocent job passed", flush=True)
engine.synthesize_batch([SynthesisRequest(text="An innocent job.", speaker="", seed=1),
                         SynthesisRequest(text="The Crashmark job.", speaker="", seed=2)])
print("still alive after the poison job", flush=True)
"""


def test_crash_mode_kills_its_own_process_only_for_a_matching_request() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stdout + result.stderr
    assert "innocent job passed" in result.stdout
    assert "still alive" not in result.stdout


def test_crash_is_a_fault_mode_the_settings_accept() -> None:
    assert fault_config("crash", "Crashmark").mode == "crash"
