"""compose.yaml: valid against the Compose Specification schema, accepted by podman-compose, and
shaped as the issue asks (Redis with AOF and noeviction, the API, one GPU worker)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.deploy.manifests import ROOT, Tools

COMPOSE = ROOT / "compose.yaml"


def validate(tools: Tools, path: Path) -> subprocess.CompletedProcess[str]:
    script = (
        "import json, sys, jsonschema, yaml\n"
        "schema = json.load(open(sys.argv[1]))\n"
        "errors = [f'{\"/\".join(map(str, e.absolute_path))}: {e.message}' for e in "
        "jsonschema.Draft201909Validator(schema).iter_errors(yaml.safe_load(open(sys.argv[2])))]\n"
        "print(json.dumps(errors)); sys.exit(1 if errors else 0)\n"
    )
    command = [str(tools.tools_python), "-c", script, str(tools.compose_schema), str(path)]
    return subprocess.run(command, capture_output=True, text=True)


def test_compose_file_matches_the_compose_spec_schema(tools: Tools) -> None:
    result = validate(tools, COMPOSE)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_catches_a_mistake(tools: Tools, tmp_path: Path) -> None:
    broken = yaml.safe_load(COMPOSE.read_text())
    broken["services"]["worker"]["stop_grace_periode"] = "60s"
    broken["services"]["api"]["ports"] = "8000:8000"
    path = tmp_path / "compose.yaml"
    path.write_text(yaml.safe_dump(broken))
    result = validate(tools, path)
    errors = json.loads(result.stdout)
    assert result.returncode == 1
    assert any("stop_grace_periode" in error for error in errors)
    assert any(error.startswith("services/api/ports") for error in errors)


def test_podman_compose_accepts_it(tools: Tools) -> None:
    result = subprocess.run([str(tools.podman_compose), "-f", str(COMPOSE), "config"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert set(yaml.safe_load(result.stdout)["services"]) == {"redis", "api", "worker"}


def test_compose_stack_shape() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    redis_conf = dict(line.split(None, 1) for line in (ROOT / "deploy" / "redis" / "redis.conf").read_text().splitlines()
                      if line and not line.startswith("#"))  # fmt: skip
    assert redis_conf["appendonly"] == "yes" and redis_conf["maxmemory-policy"] == "noeviction"
    assert "./deploy/redis/redis.conf:/usr/local/etc/redis/redis.conf:ro" in services["redis"]["volumes"]
    assert "ports" not in services["redis"], "Redis is not published"
    for name in ("api", "worker"):
        service = services[name]
        assert service["build"]["target"] == name
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
        assert service["environment"]["REDIS_URL"] == "redis://redis:6379/0"
        assert service["environment"]["REQUIRE_NOEVICTION"] == "true"
    [device] = services["worker"]["deploy"]["resources"]["reservations"]["devices"]
    assert device["capabilities"] == ["gpu"] and device["count"] == 1
    assert services["worker"]["volumes"] == ["worker-data:/data"], "the hub cache (HF_HOME=/data/hf) survives restarts"
