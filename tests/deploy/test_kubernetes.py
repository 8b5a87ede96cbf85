"""The Kubernetes manifests: every overlay renders, validates (built-in kinds and custom resources),
passes checkov, and carries the hardening, probes, budgets and policies the issue asks for."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.apps import API_PORT
from tests.deploy.manifests import MONITORED_OVERLAYS, OVERLAYS, ROOT, Manifest, Tools, effective_setting, find, workloads
from tests.deploy.network_policy import ALL_PORTS, Pod, admitted, pod_of, tcp
from ttsq.store.connection import cluster_nodes, sentinel_service

KUBERNETES_VERSIONS = ("1.29.0", "1.37.0")
"""The oldest Kubernetes the manifests target (autoscaling/v2, policy/v1, the sleep-free preStop) and the newest bundled."""


def test_every_overlay_renders(objects: dict[str, list[Manifest]]) -> None:
    for overlay in OVERLAYS:
        kinds = {obj.kind for obj in objects[overlay]}
        assert {"Deployment", "ScaledObject", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy"} <= kinds, overlay
        assert all(obj.namespace == "ttsq" for obj in objects[overlay]), f"{overlay}: every object in the ttsq namespace"
    assert any(obj.kind == "StatefulSet" for obj in objects["gpu"])
    assert not any(obj.kind == "StatefulSet" or obj.name.startswith("ttsq-redis") for obj in objects["managed-redis"])


def is_builtin(api_version: str) -> bool:
    group = api_version.rpartition("/")[0]
    return "." not in group or group.endswith("k8s.io")


def builtin_only(path: Path, out: Path) -> Path:
    docs = [doc for doc in yaml.safe_load_all(path.read_text()) if doc and is_builtin(doc["apiVersion"])]
    out.write_text(yaml.safe_dump_all(docs))
    return out


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_builtin_kinds_validate_strictly(tools: Tools, rendered: dict[str, Path], tmp_path: Path, version: str) -> None:
    files = [str(builtin_only(path, tmp_path / path.name)) for path in rendered.values()]
    files.append(str(ROOT / "k8s" / "secret.example.yaml"))
    command = [str(tools.kubernetes_validate), "--strict", "--quiet", "-k", version, *files]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def crd_validate(tools: Tools, *manifests: Path) -> tuple[int, dict[str, list[str]]]:
    script = Path(__file__).with_name("crd_validate.py")
    command = [str(tools.tools_python), str(script), str(ROOT / "deploy" / "schemas"), *map(str, manifests)]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.stdout, result.stderr
    return result.returncode, json.loads(result.stdout)


def test_custom_resources_validate_against_vendored_crds(tools: Tools, rendered: dict[str, Path]) -> None:
    code, result = crd_validate(tools, *rendered.values())
    assert code == 0, "\n".join(result["errors"])
    assert len([line for line in result["checked"] if "ScaledObject/ttsq-worker" in line]) == len(OVERLAYS)
    for what in ("PrometheusRule/ttsq", "ServiceMonitor/ttsq-api", "PodMonitor/ttsq-worker"):
        assert len([line for line in result["checked"] if f"{what} " in line]) == len(MONITORED_OVERLAYS), what


def test_crd_validation_rejects_mistakes_and_unknown_kinds(tools: Tools, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        yaml.safe_dump_all([
            {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": {"name": "w"},
             "spec": {"scaleTargetRef": {"name": "w"}, "minReplicaCount": "one", "cooldownPeriodd": 5,
                      "triggers": [{"type": "redis", "metadata": {"listLength": 8}}]}},
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "m"},
             "spec": {"selector": {}, "endpoints": [{"port": "http", "interval": "15 seconds"}]}},
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "r"},
             "spec": {"groups": [{"name": "g", "rules": [{"alert": "A", "for": "5m"}]}]}},
            {"apiVersion": "monitoring.coreos.com/v1", "kind": "PodMonitor", "metadata": {"name": "p"},
             "spec": {"podMetricsEndpoints": [{"port": 8001, "scrapeInterval": "30s"}]}},
            {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "x"}},
        ])
    )  # fmt: skip
    code, result = crd_validate(tools, bad)
    errors = "\n".join(result["errors"])
    assert code == 1
    assert "minReplicaCount: 'one' is not of type 'integer'" in errors
    assert "'cooldownPeriodd' was unexpected" in errors
    assert "listLength: 8 is not of type 'string'" in errors
    assert "interval: '15 seconds' does not match" in errors
    assert "'expr' is a required property" in errors
    assert "PodMonitor/p" in errors and "'selector' is a required property" in errors
    assert "port: 8001 is not of type 'string'" in errors and "'scrapeInterval' was unexpected" in errors
    assert "Widget/x" in errors and "no CRD schema vendored" in errors


def test_checkov_passes_with_the_justified_skips(tools: Tools, rendered: dict[str, Path]) -> None:
    config = ROOT / "deploy" / "checkov.yaml"
    skips = yaml.safe_load(config.read_text())["skip-check"]
    assert len(skips) <= 4, "the skip list stays short; fix the manifests instead"
    result = subprocess.run(
        [str(tools.checkov), "-d", str(next(iter(rendered.values())).parent), "--framework", "kubernetes", "--skip-download",
         "--config-file", str(config), "--quiet", "--compact", "-o", "json"],
        capture_output=True, text=True,
    )  # fmt: skip
    reports = json.loads(result.stdout)
    reports = reports if isinstance(reports, list) else [reports]
    failed = [f"{check['check_id']} {check['check_name']}: {check['resource']}" for report in reports
              for check in report["results"]["failed_checks"]]  # fmt: skip
    assert not failed, "\n".join(failed)
    assert sum(report["summary"]["passed"] for report in reports) > 100
    assert result.returncode == 0


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_is_hardened(objects: dict[str, list[Manifest]], overlay: str) -> None:
    for workload in workloads(objects[overlay]):
        pod = workload.pod_spec
        where = f"{overlay} {workload.kind}/{workload.name}"
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] >= 10000, where
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, where
        assert pod["automountServiceAccountToken"] is False, where
        for container in workload.containers():
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"]["drop"] == ["ALL"], where
            assert "add" not in context["capabilities"], where
            assert {"requests", "limits"} <= container["resources"].keys(), where
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), where
            assert "memory" in container["resources"]["limits"], where
            mounts = {mount["mountPath"] for mount in container.get("volumeMounts", [])}
            assert "/tmp" in mounts, f"{where}: /tmp must be a volume (the root filesystem is read-only)"


def test_ttsq_pods_mount_every_writable_path(objects: dict[str, list[Manifest]]) -> None:
    for overlay in OVERLAYS:
        worker = find(objects[overlay], "Deployment", "ttsq-worker")
        mounts = {mount["mountPath"]: mount["name"] for mount in worker.containers()[0]["volumeMounts"]}
        volumes = {volume["name"]: volume for volume in worker.pod_spec["volumes"]}
        assert {"/data", "/tmp", "/home/ttsq", "/dev/shm"} <= mounts.keys(), overlay
        assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory", "torch's /dev/shm is a memory emptyDir"
        api = find(objects[overlay], "Deployment", "ttsq-api")
        assert {"/data", "/tmp"} <= {mount["mountPath"] for mount in api.containers()[0]["volumeMounts"]}, overlay


def test_gpu_workers_get_one_gpu_and_cpu_workers_none(objects: dict[str, list[Manifest]]) -> None:
    for overlay in ("gpu", "managed-redis"):
        worker = find(objects[overlay], "Deployment", "ttsq-worker")
        assert worker.containers()[0]["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert any(t["key"] == "nvidia.com/gpu" for t in worker.pod_spec["tolerations"])
        rolling = worker.doc["spec"]["strategy"]["rollingUpdate"]
        assert rolling == {"maxSurge": 0, "maxUnavailable": 1}, "no spare GPU for a surge pod"
    tiny = find(objects["cpu-tiny"], "Deployment", "ttsq-worker")
    assert "nvidia.com/gpu" not in tiny.containers()[0]["resources"]["limits"]


def test_scaling_and_disruption_budgets(objects: dict[str, list[Manifest]]) -> None:
    for overlay in OVERLAYS:
        objs = objects[overlay]
        for name in ("ttsq-api", "ttsq-worker"):
            deployment = find(objs, "Deployment", name)
            assert "replicas" not in deployment.doc["spec"], f"{name}: the autoscaler owns replicas; a re-apply must not reset them"
            budget = find(objs, "PodDisruptionBudget", name)
            assert budget.doc["spec"]["selector"]["matchLabels"].items() <= deployment.pod_labels.items()
            spread = deployment.pod_spec["topologySpreadConstraints"]
            assert any(c["topologyKey"] == "kubernetes.io/hostname" for c in spread)
            assert all(c["labelSelector"]["matchLabels"].items() <= deployment.pod_labels.items() for c in spread)
        assert find(objs, "PodDisruptionBudget", "ttsq-worker").doc["spec"] == {
            "maxUnavailable": 1, "selector": find(objs, "PodDisruptionBudget", "ttsq-worker").doc["spec"]["selector"]
        }, "maxUnavailable, so that a pool of one (or zero) does not block node drains"  # fmt: skip
        hpa = find(objs, "HorizontalPodAutoscaler", "ttsq-api")
        assert hpa.doc["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "ttsq-api"}
        assert hpa.doc["spec"]["metrics"][0]["resource"]["name"] == "cpu"
        worker_hpas = [obj for obj in objs if obj.kind == "HorizontalPodAutoscaler" and obj.name == "ttsq-worker"]
        assert not worker_hpas, "KEDA makes the worker's HPA"
    assert find(objects["gpu"], "ScaledObject", "ttsq-worker").doc["spec"]["minReplicaCount"] == 1
    assert find(objects["cpu-tiny"], "ScaledObject", "ttsq-worker").doc["spec"]["minReplicaCount"] == 0


SOURCES = {
    "prometheus": Pod("monitoring", {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/managed-by": "prometheus-operator",
                                     "prometheus": "k8s"}),
    "grafana in monitoring": Pod("monitoring", {"app.kubernetes.io/name": "grafana"}),
    "prometheus-labelled pod in default": Pod("default", {"app.kubernetes.io/name": "prometheus"}),
    "prometheus-labelled pod in ttsq": Pod("ttsq", {"app.kubernetes.io/name": "prometheus"}),
    "ingress controller": Pod("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"}),
    "ingress-labelled pod in default": Pod("default", {"app.kubernetes.io/name": "ingress-nginx"}),
    "keda operator": Pod("keda", {"app": "keda-operator"}),
    "other pod in keda": Pod("keda", {"app": "keda-metrics-apiserver"}),
    "keda-labelled pod in default": Pod("default", {"app": "keda-operator"}),
    "other pod in ttsq": Pod("ttsq", {"app.kubernetes.io/name": "ttsq", "app.kubernetes.io/component": "debug"}),
    "unlabelled pod in ttsq": Pod("ttsq", {}),
}
"""Peers inside and outside the cluster's namespaces; the ttsq pods themselves are added per overlay."""


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_network_policies_admit_exactly_the_intended_traffic(objects: dict[str, list[Manifest]], overlay: str) -> None:
    """Who may open which port on which pod, evaluated like the NetworkPolicy API (tests/deploy/network_policy.py):
    Redis only from the API, the workers and KEDA's operator; the API only from the ingress controller and
    Prometheus; the workers only from Prometheus, on their metrics port. Every other pair: nothing."""
    objs = objects[overlay]
    policies = [obj.doc for obj in objs if obj.kind == "NetworkPolicy"]
    targets = {str(w.component): pod_of(w) for w in workloads(objs)}
    assert set(targets) == ({"api", "worker"} if overlay.startswith("managed-redis") else {"api", "worker", "redis"}), overlay
    sources = {
        **SOURCES,
        "api pod": targets["api"],
        "worker pod": targets["worker"],
        # The same labels in another namespace are other pods: a podSelector alone means the policy's namespace.
        "api-labelled pod in default": Pod("default", targets["api"].labels),
        "worker-labelled pod in default": Pod("default", targets["worker"].labels),
    }
    worker_port = int(effective_setting(objs, "worker_health_port"))
    # With Sentinel (redis-ha) the clients also ask the sentinels (26379), and the Redis pods reach each other on both.
    redis_ports = tcp(6379, 26379) if overlay == "redis-ha" else tcp(6379)
    if overlay == "redis-ha":
        sources["redis pod"] = targets["redis"]
    expected = {
        ("redis", "api pod"): redis_ports, ("redis", "worker pod"): redis_ports, ("redis", "keda operator"): redis_ports,
        ("redis", "redis pod"): tcp(6379, 26379),
        ("api", "ingress controller"): tcp(API_PORT), ("api", "prometheus"): tcp(API_PORT),
        ("worker", "prometheus"): tcp(worker_port),
    }  # fmt: skip
    for target_name, target in targets.items():
        for source_name, source in sources.items():
            got = admitted(policies, source, target)
            want = expected.get((target_name, source_name), frozenset())
            assert got == want, f"{overlay}: {source_name} -> {target_name}: admitted {sorted(got)}, expected {sorted(want)}"


def test_network_policy_evaluator_follows_the_api() -> None:
    """The evaluator behind the matrix above knows the rules that decide it, so that a pass means something:
    unselected pods are open, rules add up, a peer with both selectors needs both, a podSelector alone means
    the policy's own namespace, no `ports` means every port, named ports resolve against the target."""
    target = Pod("ns", {"app": "t"}, ports={"metrics": ("TCP", 9100)})
    inside, outside = Pod("ns", {"role": "c"}), Pod("mon", {"role": "c"})

    def policy(*rules: dict[str, Any], selector: dict[str, Any] | None = None) -> dict[str, Any]:
        spec = {"podSelector": selector or {"matchLabels": {"app": "t"}}, "policyTypes": ["Ingress"], "ingress": list(rules)}
        return {"metadata": {"name": "p", "namespace": "ns"}, "spec": spec}

    assert admitted([], inside, target) == ALL_PORTS, "a pod no policy selects is not isolated"
    assert admitted([policy(selector={"matchLabels": {"app": "other"}})], inside, target) == ALL_PORTS
    assert admitted([policy()], inside, target) == frozenset(), "selected with no rules: nothing"
    assert admitted([policy({})], outside, target) == ALL_PORTS, "a rule with neither from nor ports: everything"
    by_pod = {"from": [{"podSelector": {"matchLabels": {"role": "c"}}}], "ports": [{"port": 80}]}
    assert admitted([policy(by_pod)], inside, target) == tcp(80)
    assert admitted([policy(by_pod)], outside, target) == frozenset(), "podSelector alone: the policy's namespace only"
    both = {"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "mon"}},
                      "podSelector": {"matchExpressions": [{"key": "role", "operator": "In", "values": ["c"]}]}}]}  # fmt: skip
    assert admitted([policy(both)], outside, target) == ALL_PORTS, "no ports: every port"
    assert admitted([policy(both)], Pod("mon", {"role": "d"}), target) == frozenset(), "both selectors must match"
    assert admitted([policy(both)], Pod("ns", {"role": "c"}), target) == frozenset()
    named = {"from": [{"namespaceSelector": {}}], "ports": [{"port": "metrics"}, {"port": 8000, "endPort": 8002}, {"port": "nope"}]}
    assert admitted([policy(named)], outside, target) == tcp(9100, 8000, 8001, 8002)
    assert admitted([policy(by_pod), policy(named)], inside, target) == tcp(80, 9100, 8000, 8001, 8002), "policies add up"


def test_redis_runs_with_aof_noeviction_and_a_volume(objects: dict[str, list[Manifest]]) -> None:
    objs = objects["gpu"]
    config = find(objs, "ConfigMap", "ttsq-redis-config").doc["data"]["redis.conf"]
    directives = dict(line.split(None, 1) for line in config.splitlines() if line and not line.startswith("#"))
    assert directives["appendonly"] == "yes"
    assert directives["maxmemory-policy"] == "noeviction"
    assert directives["dir"] == "/data"
    redis = find(objs, "StatefulSet", "ttsq-redis")
    assert redis.doc["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    container = redis.containers()[0]
    assert {"name": "data", "mountPath": "/data"} in container["volumeMounts"]
    assert container["command"][:2] == ["redis-server", "/etc/redis/redis.conf"]
    assert find(objs, "ConfigMap", "ttsq-settings").doc["data"]["REQUIRE_NOEVICTION"] == "true"


def test_secret_example_holds_placeholders_and_every_referenced_key(objects: dict[str, list[Manifest]]) -> None:
    example = yaml.safe_load((ROOT / "k8s" / "secret.example.yaml").read_text())
    assert all(value.count("CHANGE-ME") or value.startswith("redis.example.com") for value in example["stringData"].values())
    referenced = set()
    for overlay in OVERLAYS:
        for workload in workloads(objects[overlay]):
            for container in workload.containers():
                for env in container.get("env", []):
                    ref = env.get("valueFrom", {}).get("secretKeyRef")
                    if ref:
                        assert ref["name"] == example["metadata"]["name"]
                        referenced.add(ref["key"])
        for monitor in (obj for obj in objects[overlay] if obj.kind in ("ServiceMonitor", "PodMonitor")):
            for endpoint in monitor.doc["spec"].get("endpoints", []) + monitor.doc["spec"].get("podMetricsEndpoints", []):
                credentials = endpoint.get("authorization", {}).get("credentials")
                if credentials:  # Prometheus's key for the API's /metrics
                    assert credentials["name"] == example["metadata"]["name"]
                    referenced.add(credentials["key"])
    assert referenced == set(example["stringData"]), "the example names exactly the keys the manifests read"
    secrets = [obj for overlay in OVERLAYS for obj in objects[overlay] if obj.kind == "Secret"]
    assert not secrets, "no placeholder Secret is ever applied"


def test_redis_ha_runs_sentinels_beside_three_servers_and_ttsq_follows_them(objects: dict[str, list[Manifest]]) -> None:
    """The redis-ha overlay: three Redis pods, each a server and a sentinel that watch one service; the API and
    the workers reach the primary through those sentinels (redis+sentinel://), submits wait for a replica, and
    KEDA follows the same primary."""
    objs = objects["redis-ha"]
    redis = find(objs, "StatefulSet", "ttsq-redis")
    assert redis.doc["spec"]["replicas"] == 3
    headless = find(objs, "Service", redis.doc["spec"]["serviceName"])
    assert headless.doc["spec"]["clusterIP"] == "None" and {p["port"] for p in headless.doc["spec"]["ports"]} == {6379, 26379}
    server, sentinel = redis.containers()
    assert server["command"] == ["sh", "/scripts/start-redis.sh"] and sentinel["command"] == ["sh", "/scripts/start-sentinel.sh"]
    scripts = find(objs, "ConfigMap", next(v["configMap"]["name"] for v in redis.pod_spec["volumes"] if v["name"] == "scripts"))
    monitor = next(line for line in scripts.doc["data"]["start-sentinel.sh"].splitlines() if "sentinel monitor" in line)
    service = monitor.split()[2]
    assert monitor.split()[-1] == "2", "a quorum of two of the three sentinels"
    for name in ("ttsq-api", "ttsq-worker"):
        env = {e["name"]: e.get("value") for e in find(objs, "Deployment", name).containers()[0]["env"]}
        url = env["REDIS_URL"].replace("$(REDIS_PASSWORD)", "hex")
        sentinels, _user, password = cluster_nodes(url)
        assert url.startswith("redis+sentinel://") and password == "hex"
        assert sentinel_service(url) == (service, 0)
        assert sorted(sentinels) == [(f"ttsq-redis-{n}.{headless.name}", 26379) for n in range(3)]
    assert effective_setting(objs, "submit_wait_replicas") == "1"
    start = scripts.doc["data"]["start-redis.sh"]
    assert "--min-replicas-to-write 1 --min-replicas-max-lag 10" in start, "a primary without a replica refuses writes"
    for trigger in find(objs, "ScaledObject", "ttsq-worker").doc["spec"]["triggers"]:
        assert trigger["type"] == "redis-sentinel" and trigger["metadata"]["sentinelMaster"] == service
        hosts = [address.rpartition(":")[0] for address in trigger["metadata"]["addresses"].split(",")]
        assert hosts == [f"ttsq-redis-{n}.{headless.name}.ttsq.svc.cluster.local" for n in range(3)]
