"""Monitoring on Kubernetes (k8s/components/monitoring): the PrometheusRule holds exactly the rules of
deploy/prometheus/alerts.yml, the ServiceMonitor and PodMonitor scrape every ttsq pod on a port the pod
has and on a path its application serves, the NetworkPolicies let Prometheus reach exactly those ports,
the dashboard ConfigMap is deploy/grafana/ttsq-dashboard.json, and an overlay without the component
needs no Prometheus Operator CRD. Every check reads the source files and the rendered overlays, never a
copy of either."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml
from starlette.applications import Starlette

from tests.deploy.apps import API_PORT, api_app, serves, worker_app
from tests.deploy.manifests import (
    MONITORED_OVERLAYS,
    MONITORING_GROUP,
    OVERLAYS,
    ROOT,
    TTSQ_COMPONENTS,
    Manifest,
    effective_setting,
    find,
    workloads,
)
from tests.deploy.network_policy import Pod, admitted, pod_of, selector_matches, tcp

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"
DASHBOARD = ROOT / "deploy" / "grafana" / "ttsq-dashboard.json"
RULE = ROOT / "k8s" / "components" / "monitoring" / "prometheusrule.yaml"
RENDER = ROOT / "scripts" / "render_prometheus_rule.py"
MONITOR_KINDS = ("PrometheusRule", "ServiceMonitor", "PodMonitor")
LAST_APPLIED_LIMIT = 262_144
"""Bytes: the most an annotation may hold; client-side `kubectl apply` copies the whole object into one."""

PROMETHEUS = Pod(
    "monitoring",
    {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/managed-by": "prometheus-operator", "prometheus": "k8s",
     "app.kubernetes.io/instance": "k8s", "operator.prometheus.io/name": "k8s", "operator.prometheus.io/shard": "0"},
)  # fmt: skip
"""A Prometheus pod as the Prometheus Operator labels it, in the namespace deploy/README.md documents."""


def duration_s(text: str) -> float:
    """A Prometheus duration (``30s``, ``1m30s``, ``500ms``) in seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
    parts = re.findall(r"(\d+)(ms|[smhdwy])", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a Prometheus duration: {text!r}"
    return sum(int(number) * units[unit] for number, unit in parts)


def alert_rules() -> list[dict[str, Any]]:
    return [rule for group in yaml.safe_load(ALERTS.read_text())["groups"] for rule in group["rules"]]


# ---- which overlays carry monitoring ---------------------------------------------------------------


def test_only_overlays_that_opt_in_need_the_prometheus_operator(objects: dict[str, list[Manifest]]) -> None:
    """gpu (and managed-redis, built on it) carry the monitoring objects; cpu-tiny carries none, so it
    applies on a cluster without the Prometheus Operator's CRDs (KEDA's is the only one it needs)."""
    for overlay in OVERLAYS:
        kinds = Counter(obj.kind for obj in objects[overlay] if obj.group == MONITORING_GROUP)
        dashboards = [obj for obj in objects[overlay] if obj.kind == "ConfigMap" and obj.labels.get("grafana_dashboard")]
        if overlay in MONITORED_OVERLAYS:
            assert kinds == Counter(MONITOR_KINDS), f"{overlay}: one of each monitoring object, found {dict(kinds)}"
            assert len(dashboards) == 1, overlay
        else:
            assert not kinds and not dashboards, f"{overlay} must not need the Prometheus Operator: {dict(kinds)}"
            assert {obj.group for obj in objects[overlay] if "." in obj.group and not obj.group.endswith("k8s.io")} == {"keda.sh"}


# ---- the PrometheusRule is alerts.yml ------------------------------------------------------------


@pytest.mark.parametrize("overlay", MONITORED_OVERLAYS)
def test_prometheus_rule_holds_exactly_the_rules_of_alerts_yml(objects: dict[str, list[Manifest]], overlay: str) -> None:
    source = yaml.safe_load(ALERTS.read_text())
    assert set(source) == {"groups"} and alert_rules(), "alerts.yml is a rules file with rules in it"
    rule = find(objects[overlay], "PrometheusRule", "ttsq")
    assert rule.doc["spec"] == {"groups": source["groups"]}, "the PrometheusRule differs from deploy/prometheus/alerts.yml"


def test_checked_in_prometheus_rule_is_the_rendering_of_alerts_yml() -> None:
    """Byte for byte what scripts/render_prometheus_rule.py makes of alerts.yml today: nobody edited it by hand."""
    result = subprocess.run([sys.executable, str(RENDER), "--check"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr + "\n(run: .venv/bin/python scripts/render_prometheus_rule.py)"


def test_render_check_fails_when_alerts_yml_changes(tmp_path: Path) -> None:
    """The staleness check can tell: an alert threshold changed in alerts.yml makes the checked-in rule stale,
    and rendering the changed file carries the change into spec.groups."""
    changed = tmp_path / "alerts.yml"
    text = ALERTS.read_text()
    assert "> 0.05" in text
    changed.write_text(text.replace("> 0.05", "> 0.07", 1))
    check = subprocess.run([sys.executable, str(RENDER), "--check", "--alerts", str(changed), "--out", str(RULE)],
                           capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    assert check.returncode == 1 and "stale" in check.stderr, check.stdout + check.stderr
    out = tmp_path / "rule.yaml"
    render = [sys.executable, str(RENDER), "--alerts", str(changed), "--out", str(out)]
    subprocess.run(render, check=True, capture_output=True, cwd=ROOT)
    assert yaml.safe_load(out.read_text())["spec"] == {"groups": yaml.safe_load(changed.read_text())["groups"]}
    assert "> 0.07" in out.read_text() and out.read_text() != RULE.read_text()


# ---- the monitors scrape every ttsq pod on a real port and path --------------------------------------


def container_port(workload: Manifest, port: str | int) -> int:
    """A named or numbered port of the workload's pods, resolved as Kubernetes does; fails when the pods lack it."""
    declared = [p for container in workload.containers() for p in container.get("ports", [])]
    ports = {p["name"]: p["containerPort"] for p in declared if "name" in p}
    numbers = {p["containerPort"] for p in declared}
    if isinstance(port, str) and not port.isdigit():
        assert port in ports, f"{workload.name} has no container port named {port!r} (it has {sorted(ports)})"
        return int(ports[port])
    assert int(port) in numbers, f"{workload.name} declares no container port {port}"
    return int(port)


def scrape_targets(objs: list[Manifest]) -> list[tuple[str, int, str, dict[str, Any]]]:
    """(component, container port, path, endpoint) for every pod and endpoint the overlay's monitors scrape."""
    pods = workloads(objs)
    targets = []
    for monitor in objs:
        if monitor.kind not in ("ServiceMonitor", "PodMonitor"):
            continue
        spec = monitor.doc["spec"]
        assert "namespaceSelector" not in spec, f"{monitor.name}: scrape only the monitor's own namespace"
        if monitor.kind == "PodMonitor":
            selected = [workload for workload in pods if selector_matches(spec["selector"], workload.pod_labels)]
            assert selected, f"PodMonitor/{monitor.name} selects no pods"
            for endpoint in spec["podMetricsEndpoints"]:
                for workload in selected:
                    port = container_port(workload, endpoint["port"])
                    targets.append((str(workload.component), port, endpoint["path"], endpoint))
            continue
        services = [s for s in objs if s.kind == "Service" and s.namespace == monitor.namespace]
        services = [s for s in services if selector_matches(spec["selector"], s.labels)]
        assert services, f"ServiceMonitor/{monitor.name} selects no Service"
        for endpoint in spec["endpoints"]:
            for service in services:
                by_name = {p.get("name"): p for p in service.doc["spec"]["ports"]}
                assert endpoint["port"] in by_name, f"Service {service.name} has no port named {endpoint['port']!r}"
                target_port = by_name[endpoint["port"]].get("targetPort", by_name[endpoint["port"]]["port"])
                backing = [w for w in pods if service.doc["spec"]["selector"].items() <= w.pod_labels.items()]
                assert backing, f"Service {service.name} selects no pods"
                for workload in backing:
                    targets.append((str(workload.component), container_port(workload, target_port), endpoint["path"], endpoint))
    return targets


def metrics_ports(objs: list[Manifest]) -> dict[str, int]:
    """Where each ttsq process serves /metrics, from the code's side: the API's port and WORKER_HEALTH_PORT."""
    return {"api": API_PORT, "worker": int(effective_setting(objs, "worker_health_port"))}


@pytest.mark.parametrize("overlay", MONITORED_OVERLAYS)
def test_monitors_scrape_every_ttsq_pod_once_on_a_port_it_has(objects: dict[str, list[Manifest]], overlay: str) -> None:
    targets = scrape_targets(objects[overlay])
    scraped = Counter((component, port) for component, port, _, _ in targets)
    expected = {(component, port) for component, port in metrics_ports(objects[overlay]).items()}
    assert set(scraped) == expected, f"scraped {sorted(scraped)}, /metrics is served at {sorted(expected)}"
    assert all(count == 1 for count in scraped.values()), f"each pod once (no duplicate series): {scraped}"
    assert {component for component, _ in scraped} == set(TTSQ_COMPONENTS)


@pytest.mark.parametrize("overlay", MONITORED_OVERLAYS)
def test_scraped_paths_are_routes_of_the_real_apps(objects: dict[str, list[Manifest]], overlay: str) -> None:
    apps: dict[str, Starlette] = {"api": api_app(), "worker": worker_app()}
    assert not serves(apps["worker"], "/no-such-metrics"), "the route check itself tells routes apart"
    for component, port, path, _ in scrape_targets(objects[overlay]):
        assert serves(apps[component], path), f"{component}:{port}{path} is not a route of the {component}"


@pytest.mark.parametrize("overlay", MONITORED_OVERLAYS)
def test_scrape_timing_suits_prometheus_the_api_and_the_rules(objects: dict[str, list[Manifest]], overlay: str) -> None:
    """Prometheus refuses a timeout longer than the interval; the API's /metrics must answer (ttsq_redis_up 0)
    before the scrape times out when Redis hangs; every alert must see two scrapes before it fires and every
    rate() window at least four (Prometheus' own advice, so one missed scrape does not blank the rate)."""
    scrape_wait_s = float(effective_setting(objects[overlay], "metrics_scrape_timeout_s"))
    for component, _, _, endpoint in scrape_targets(objects[overlay]):
        interval, timeout = duration_s(endpoint["interval"]), duration_s(endpoint["scrapeTimeout"])
        assert timeout <= interval, f"{component}: scrapeTimeout {timeout}s > interval {interval}s"
        assert timeout > scrape_wait_s, f"{component}: scrapeTimeout {timeout}s <= METRICS_SCRAPE_TIMEOUT_S {scrape_wait_s}s"
        for rule in alert_rules():
            if "for" in rule:
                assert duration_s(rule["for"]) >= 2 * interval, f"{rule['alert']}: for {rule['for']} < two {component} scrapes"
            for window in re.findall(r"\[(\w+)\]", rule["expr"]):
                assert duration_s(window) >= 4 * interval, f"{rule['alert']}: [{window}] holds < 4 {component} scrapes"


@pytest.mark.parametrize("overlay", MONITORED_OVERLAYS)
def test_network_policies_admit_prometheus_to_exactly_the_scraped_ports(objects: dict[str, list[Manifest]], overlay: str) -> None:
    """For every pod of the overlay: the ports Prometheus may open are the ports the monitors scrape on it
    (none on Redis); the full who-may-reach-what matrix is in test_kubernetes.py."""
    objs = objects[overlay]
    policies = [obj.doc for obj in objs if obj.kind == "NetworkPolicy"]
    scraped: dict[str, set[int]] = {}
    for component, port, _, _ in scrape_targets(objs):
        scraped.setdefault(component, set()).add(port)
    for workload in workloads(objs):
        got = admitted(policies, PROMETHEUS, pod_of(workload))
        want = tcp(*scraped.get(str(workload.component), set()))
        assert got == want, f"{overlay} {workload.name}: Prometheus admitted to {sorted(got)}, scraped on {sorted(want)}"


PROMETHEUS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
    "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
}
DOCUMENTED_PEERS = {"ttsq-api": "/spec/ingress/1/from/0", "ttsq-worker": "/spec/ingress/0/from/0"}
"""Where deploy/README.md tells operators to patch the Prometheus peer (another namespace or label)."""


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_documented_prometheus_peer_paths_hold(objects: dict[str, list[Manifest]], overlay: str) -> None:
    """The JSON pointers deploy/README.md's patch uses lead to the Prometheus peer, so the documented patch
    changes who counts as Prometheus rather than failing or, worse, rewriting the ingress controller's rule."""
    readme = (ROOT / "deploy" / "README.md").read_text()
    for name, pointer in DOCUMENTED_PEERS.items():
        assert pointer in readme, f"deploy/README.md no longer shows the patch path {pointer} for {name}"
        node: Any = find(objects[overlay], "NetworkPolicy", name).doc
        for part in pointer.strip("/").split("/"):
            node = node[int(part)] if isinstance(node, list) else node[part]
        assert node == PROMETHEUS_PEER, f"{overlay} {name}{pointer} is {node}"


# ---- the dashboard ConfigMap is the dashboard file ------------------------------------------------


@pytest.mark.parametrize("overlay", MONITORED_OVERLAYS)
def test_dashboard_config_map_is_the_dashboard_file(objects: dict[str, list[Manifest]], overlay: str) -> None:
    [config_map] = [obj for obj in objects[overlay] if obj.kind == "ConfigMap" and obj.labels.get("grafana_dashboard") is not None]
    assert config_map.labels["grafana_dashboard"] == "1", "the label (and value) Grafana's dashboard sidecar looks for"
    assert config_map.name == "ttsq-dashboard", "a stable name: a hashed one would leave the old dashboard behind on apply"
    assert set(config_map.doc["data"]) == {DASHBOARD.name} and "binaryData" not in config_map.doc
    text = config_map.doc["data"][DASHBOARD.name]
    assert text == DASHBOARD.read_text(), "the ConfigMap's dashboard differs from deploy/grafana/ttsq-dashboard.json"
    assert json.loads(text) == json.loads(DASHBOARD.read_text()) and json.loads(text)["uid"]
    size = len(json.dumps(config_map.doc).encode())
    assert size < LAST_APPLIED_LIMIT, f"{size} bytes: too large for kubectl apply's last-applied annotation"
