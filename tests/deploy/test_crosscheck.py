"""Cross-checks between the deployment files and the code: probe paths and ports, environment
variable names, the queue key, stop signals and grace periods. Each reads the truth from the code
(settings.py, app.py, ttsq.runtime.health, ttsq.store.keys, ttsq.runtime.launch), never a copy."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai._constants
import pytest
import yaml

from api_server import server_options
from settings import Settings
from tests.deploy.apps import API_PORT, api_app, serves, worker_app
from tests.deploy.manifests import (
    NON_SETTING_ENV,
    OVERLAYS,
    ROOT,
    TTSQ_COMPONENTS,
    Manifest,
    config_map_settings,
    dockerfile_stages,
    effective_setting,
    exec_form,
    find,
    setting_default,
    setting_names,
)
from ttsq.runtime.launch import api_command, worker_command
from ttsq.store.keys import Shards


def ttsq_containers(objects: list[Manifest]) -> Iterator[tuple[str, dict[str, Any]]]:
    for component in TTSQ_COMPONENTS:
        deployment = find(objects, "Deployment", f"ttsq-{component}")
        for container in deployment.containers():
            yield component, container


def probe_targets(container: dict[str, Any]) -> Iterator[tuple[str, str, int]]:
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        http = container[probe]["httpGet"]
        port = http["port"]
        yield probe, http["path"], ports[port] if isinstance(port, str) else port


# ---- environment variable names ------------------------------------------------------------------


def test_non_setting_allowlist_holds_no_setting() -> None:
    assert not set(NON_SETTING_ENV) & setting_names(), "a name that is a setting needs no excuse"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_env_var_in_the_manifests_is_a_setting(objects: dict[str, list[Manifest]], overlay: str) -> None:
    names = setting_names()
    unknown = [key for key in config_map_settings(objects[overlay]) if key not in names]
    assert not unknown, f"ConfigMap ttsq-settings: not settings: {unknown}"
    for component, container in ttsq_containers(objects[overlay]):
        for env in container.get("env", []):
            assert env["name"] in names or env["name"] in NON_SETTING_ENV, f"{component}: {env['name']} is not a setting"
        assert next(source["configMapRef"]["name"] for source in container["envFrom"]).startswith("ttsq-settings")
    Settings.model_validate({key.lower(): value for key, value in config_map_settings(objects[overlay]).items()})  # values too


def env_file_names(path: Path) -> dict[str, str]:
    pairs = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key] = value
    return pairs


def test_every_env_var_in_compose_and_the_units_is_a_setting() -> None:
    names = setting_names() | set(NON_SETTING_ENV)
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for service in ("api", "worker"):
        unknown = set(compose["services"][service]["environment"]) - names
        assert not unknown, f"compose {service}: {unknown}"
    unknown_file = set(env_file_names(ROOT / "deploy" / "systemd" / "ttsq.env")) - names
    assert not unknown_file, f"deploy/systemd/ttsq.env: {unknown_file}"
    for unit in (ROOT / "deploy" / "systemd").glob("*.service"):
        for key in re.findall(r"^Environment=(\w+)=", unit.read_text(), re.MULTILINE):
            assert key in names, f"{unit.name}: {key} is not a setting"
        for key in re.findall(r"\b([A-Z_]+)=\$\(\(", unit.read_text()):
            assert key in names, f"{unit.name}: {key} is not a setting"


def test_every_image_env_var_is_a_setting_or_excused() -> None:
    names = setting_names() | set(NON_SETTING_ENV)
    process_env = {"PATH", "PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PIP_DISABLE_PIP_VERSION_CHECK",
                   "PIP_NO_CACHE_DIR", "PIP_ROOT_USER_ACTION"}  # fmt: skip
    for stage in dockerfile_stages(ROOT / "Dockerfile").values():
        for args in stage.all("ENV"):
            for key in re.findall(r"(\w+)=", args):
                assert key in names or key in process_env, f"Dockerfile stage {stage.name}: ENV {key}"


# ---- probes --------------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probes_hit_real_routes_on_real_ports(objects: dict[str, list[Manifest]], overlay: str) -> None:
    apps = {"api": api_app(), "worker": worker_app()}
    assert not serves(apps["api"], "/no-such-probe"), "the route check itself tells routes apart"
    expected_port = {"api": API_PORT, "worker": int(effective_setting(objects[overlay], "worker_health_port"))}
    for component, container in ttsq_containers(objects[overlay]):
        for probe, path, port in probe_targets(container):
            assert serves(apps[component], path), f"{component} {probe}: {path} is not a route of the {component}"
            assert port == expected_port[component], f"{component} {probe}: port {port}"
    assert config_map_settings(objects[overlay])["WORKER_HEALTH_HOST"] == "0.0.0.0", "the kubelet probes from outside the pod"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_probe_semantics(objects: dict[str, list[Manifest]], overlay: str) -> None:
    api = {probe: path for probe, path, _ in probe_targets(find(objects[overlay], "Deployment", "ttsq-api").containers()[0])}
    assert api["readinessProbe"] == "/readyz", "API readiness: Redis reachable, never the workers"
    assert api["livenessProbe"] == "/healthz"
    container = find(objects[overlay], "Deployment", "ttsq-worker").containers()[0]
    worker = {probe: path for probe, path, _ in probe_targets(container)}
    assert worker == {"startupProbe": "/readyz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    startup = container["startupProbe"]
    budget_s = startup["periodSeconds"] * startup["failureThreshold"]
    minimum_s = 300 if overlay == "cpu-tiny" else 600
    assert budget_s >= minimum_s, f"startupProbe allows {budget_s}s for the model load; at least {minimum_s}s"


# ---- queue key, KEDA -------------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_keda_watches_the_real_queue_keys(objects: dict[str, list[Manifest]], overlay: str) -> None:
    namespace, count = effective_setting(objects[overlay], "redis_namespace"), effective_setting(objects[overlay], "queue_shards")
    shards = Shards(str(namespace), int(count))
    scaled = find(objects[overlay], "ScaledObject", "ttsq-worker").doc["spec"]
    assert scaled["scaleTargetRef"]["name"] == find(objects[overlay], "Deployment", "ttsq-worker").name
    assert {trigger["type"] for trigger in scaled["triggers"]} <= {"redis", "redis-cluster", "redis-sentinel"}
    lists = [trigger["metadata"]["listName"] for trigger in scaled["triggers"]]
    assert lists == [name for keys in shards.all for name in (keys.queue, keys.processing)], "every shard's lists"
    worker_env = {env["name"] for env in find(objects[overlay], "Deployment", "ttsq-worker").containers()[0]["env"]}
    for trigger in scaled["triggers"]:
        metadata = trigger["metadata"]
        for key, value in metadata.items():
            if key.endswith("FromEnv"):
                assert value in worker_env, f"KEDA reads {value} from the worker's environment: it must be there"
        if "address" in metadata:
            host, _, port = metadata["address"].rpartition(":")
            service = find(objects[overlay], "Service", "ttsq-redis")
            assert host == f"{service.name}.{service.namespace}.svc.cluster.local", "KEDA connects from its own namespace"
            assert int(port) == service.doc["spec"]["ports"][0]["port"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_scale_down_waits_longer_than_a_job(objects: dict[str, list[Manifest]], overlay: str) -> None:
    job_timeout_s = float(effective_setting(objects[overlay], "job_timeout_s"))
    spec = find(objects[overlay], "ScaledObject", "ttsq-worker").doc["spec"]
    assert spec["cooldownPeriod"] > job_timeout_s
    window = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
    assert window > job_timeout_s


# ---- stop signal and grace -------------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_termination_grace_exceeds_the_drain(objects: dict[str, list[Manifest]], overlay: str) -> None:
    grace_s = float(effective_setting(objects[overlay], "shutdown_grace_s"))
    pod = find(objects[overlay], "Deployment", "ttsq-worker").pod_spec
    assert pod["terminationGracePeriodSeconds"] >= grace_s + 15, "the drain, then exit and the lease bookkeeping"
    assert "lifecycle" not in pod["containers"][0], "no preStop delay eating into the drain"


def test_the_api_holds_idle_connections_longer_than_its_clients_do() -> None:
    """A client that sends on a connection the server closes at that instant loses the request ("Server
    disconnected without sending a response"): it happened to the chaos suite, whose httpx client keeps an idle
    connection exactly as long as uvicorn's default (5 s). The server's keep-alive must outlast the clients'."""
    keep_alive_s = float(server_options(Settings(_env_file=None))["timeout_keep_alive"])
    httpx_expiry = httpx.Limits().keepalive_expiry
    assert httpx_expiry is not None and keep_alive_s > httpx_expiry, "httpx's default idle expiry"
    sdk_expiry = openai._constants.DEFAULT_CONNECTION_LIMITS.keepalive_expiry
    assert sdk_expiry is not None and keep_alive_s > sdk_expiry, "the OpenAI SDK's"
    assert keep_alive_s > 60, "the idle timeout of the common cloud load balancers in front of the API"


def test_image_commands_stop_signals_and_health_checks() -> None:
    stages = dockerfile_stages(ROOT / "Dockerfile")
    python = api_command(API_PORT, host="0.0.0.0")[0]
    expected_api = ["python", *api_command(API_PORT, host="0.0.0.0")[1:]]
    assert exec_form(stages["api"].last("CMD") or "") == expected_api, "the API image runs ttsq.runtime.launch.api_command"
    assert exec_form(stages["worker"].last("CMD") or "") == ["python", *[arg for arg in worker_command() if arg != python]]
    for name in ("api", "worker"):
        assert stages[name].last("STOPSIGNAL") == "SIGTERM"
        assert stages[name].last("HEALTHCHECK"), f"{name}: HEALTHCHECK"
        assert "/healthz" in (stages[name].last("HEALTHCHECK") or "")
    assert str(setting_default("worker_health_port")) in (stages["worker"].last("HEALTHCHECK") or "")
    assert "WORKER_HEALTH_HOST=0.0.0.0" in " ".join(stages["worker"].all("ENV"))


def duration_s(text: str) -> float:
    match = re.fullmatch(r"(\d+)(s|m)", text)
    assert match, text
    return int(match.group(1)) * (60 if match.group(2) == "m" else 1)


def test_compose_and_units_give_the_worker_longer_than_its_drain() -> None:
    grace_s = float(setting_default("shutdown_grace_s"))
    worker = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["worker"]
    assert worker["stop_signal"] == "SIGTERM"
    assert duration_s(worker["stop_grace_period"]) > float(worker["environment"].get("SHUTDOWN_GRACE_S", grace_s)) + 15
    unit = (ROOT / "deploy" / "systemd" / "ttsq-worker@.service").read_text()
    assert re.search(r"^KillSignal=SIGTERM$", unit, re.MULTILINE)
    timeout = re.search(r"^TimeoutStopSec=(\d+)$", unit, re.MULTILINE)
    assert timeout and int(timeout.group(1)) > grace_s + 15


def test_every_shipped_launch_of_the_api_runs_the_launch_command(objects: dict[str, list[Manifest]]) -> None:
    """The server's limits (WebSocket message size and compression, header and idle timeouts, the connection cap) are
    set by ``api_server.py`` from the settings (``tests/integration/api/test_api_server.py``): every launch must run it. The image
    and the unit run ``api_command`` (above, and ``test_systemd``); compose and the Kubernetes API deployment add no command or
    arguments of their own, so they run the image's."""
    assert api_command(API_PORT)[1] == "api_server.py"
    api = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]["api"]
    assert "command" not in api and "entrypoint" not in api, "compose runs the image's CMD"
    for overlay in OVERLAYS:
        for container in find(objects[overlay], "Deployment", "ttsq-api").containers():
            assert "command" not in container and "args" not in container, f"{overlay}: the API runs the image's CMD"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_a_pool_that_scales_to_zero_does_not_refuse_waiters_for_having_no_worker(
    objects: dict[str, list[Manifest]], overlay: str
) -> None:
    """With no worker up until a job brings one (KEDA from zero), ``no_worker`` would refuse the very stream or session
    whose job was to start it: such an overlay turns the check off (``NO_WORKER_S=0``); the others keep it on."""
    scales_to_zero = find(objects[overlay], "ScaledObject", "ttsq-worker").doc["spec"]["minReplicaCount"] == 0
    no_worker_s = float(effective_setting(objects[overlay], "no_worker_s"))
    assert (no_worker_s == 0) == scales_to_zero, f"{overlay}: NO_WORKER_S={no_worker_s:g}"
