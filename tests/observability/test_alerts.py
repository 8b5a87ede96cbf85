"""The alert rules, checked and unit-tested with Prometheus's own promtool (Debian's prometheus package)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent.parent
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "alerts_test.yml"


@pytest.fixture(scope="module")
def promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: run scripts/install_prometheus.sh (make test does)"
    return found


def test_the_rules_are_valid(promtool: str) -> None:
    result = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 9 rules found" in result.stdout


def test_every_alert_fires_and_stays_silent_in_its_unit_tests(promtool: str) -> None:
    result = subprocess.run(
        [promtool, "test", "rules", str(RULE_TESTS)], cwd=RULE_TESTS.parent, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_silent_case() -> None:
    """promtool passes a test file that never mentions an alert; this makes sure none is left out."""
    alerts = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    fires: set[str] = set()
    silent: set[str] = set()
    for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for case in test["alert_rule_test"]:
            (fires if case["exp_alerts"] else silent).add(case["alertname"])
    assert alerts == fires == silent, {"never fires": alerts - fires, "never silent": alerts - silent}
