"""Reading the deployment files: rendered Kubernetes objects, the Dockerfile, settings defaults."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from settings import Settings

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ("gpu", "cpu-tiny", "managed-redis", "managed-redis-cluster", "redis-ha")
MONITORED_OVERLAYS = ("gpu", "managed-redis", "managed-redis-cluster", "redis-ha")
"""Overlays with k8s/components/monitoring (they need the Prometheus Operator's CRDs); the others must not need them."""
MONITORING_GROUP = "monitoring.coreos.com"
TTSQ_COMPONENTS = ("api", "worker")
"""Pods that run ttsq's own processes (their environment is ttsq's settings)."""

NON_SETTING_ENV = {
    "REDIS_PASSWORD": "only composes REDIS_URL ($(REDIS_PASSWORD)) and feeds KEDA's redis scaler (passwordFromEnv)",
    "REDIS_ADDRESS": "read by KEDA's redis scaler (addressFromEnv) in the managed-redis overlay, not by ttsq",
    "REDIS_ADDRESSES": "read by KEDA's redis-cluster scaler (addressesFromEnv) in the managed-redis-cluster overlay",
    "REDIS_USERNAME": "the ACL user KEDA's scalers sign in as (usernameFromEnv) with a managed Redis, not read by ttsq",
    "HF_HOME": "the Hugging Face cache location (MODEL=hub downloads there), read by huggingface_hub",
    "CUDA_VISIBLE_DEVICES": "which GPU a worker@N unit sees, read by CUDA",
}
"""Environment variables in the deployment files that are not ttsq settings, each for a reason."""


def setting_names() -> set[str]:
    return {name.upper() for name in Settings.model_fields}


def setting_default(name: str) -> Any:
    return Settings.model_fields[name.lower()].default


@dataclass
class Manifest:
    doc: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.doc["kind"])

    @property
    def name(self) -> str:
        return str(self.doc["metadata"]["name"])

    @property
    def namespace(self) -> str | None:
        namespace = self.doc["metadata"].get("namespace")
        return None if namespace is None else str(namespace)

    @property
    def group(self) -> str:
        """The API group ("" for the core group)."""
        return str(self.doc["apiVersion"]).rpartition("/")[0]

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.doc["metadata"].get("labels", {}))

    @property
    def component(self) -> str | None:
        component = self.doc["metadata"].get("labels", {}).get("app.kubernetes.io/component")
        return None if component is None else str(component)

    @property
    def pod_spec(self) -> dict[str, Any]:
        return dict(self.doc["spec"]["template"]["spec"])

    @property
    def pod_labels(self) -> dict[str, str]:
        return dict(self.doc["spec"]["template"]["metadata"]["labels"])

    def containers(self) -> list[dict[str, Any]]:
        spec = self.pod_spec
        return [*spec.get("initContainers", []), *spec["containers"]]


WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Job")


def find(objects: list[Manifest], kind: str, name: str) -> Manifest:
    matches = [obj for obj in objects if obj.kind == kind and (obj.name == name or obj.name.startswith(name + "-"))]
    assert len(matches) == 1, f"expected one {kind}/{name}, found {[m.name for m in matches]}"
    return matches[0]


def workloads(objects: list[Manifest]) -> list[Manifest]:
    return [obj for obj in objects if obj.kind in WORKLOAD_KINDS]


def config_map_settings(objects: list[Manifest]) -> dict[str, str]:
    return dict(find(objects, "ConfigMap", "ttsq-settings").doc["data"])


def effective_setting(objects: list[Manifest], name: str) -> Any:
    """A setting's value as the pods see it: the ConfigMap's, else the default in settings.py."""
    value = config_map_settings(objects).get(name.upper())
    return value if value is not None else setting_default(name)


@dataclass
class Tools:
    kubernetes_validate: Path
    hadolint: Path
    podman_compose: Path
    tools_python: Path
    checkov: Path
    compose_schema: Path

    @classmethod
    def at(cls, root: Path) -> Tools:
        venv, checkov = root / "var" / "deploy-tools-venv", root / "var" / "checkov-venv"
        return cls(
            kubernetes_validate=venv / "bin" / "kubernetes-validate",
            hadolint=venv / "bin" / "hadolint",
            podman_compose=venv / "bin" / "podman-compose",
            tools_python=venv / "bin" / "python",
            checkov=checkov / "bin" / "checkov",
            compose_schema=venv / "lib" / "python3.11" / "site-packages" / "compose" / "config" / "compose_spec.json",
        )

    def missing(self) -> list[str]:
        return [str(path) for path in vars(self).values() if not path.exists()]


# ---- the Dockerfile ----------------------------------------------------------------------------------


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]]

    def all(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def last(self, keyword: str) -> str | None:
        found = self.all(keyword)
        return found[-1] if found else None


def dockerfile_stages(path: Path) -> dict[str, Stage]:
    """The stages of a Dockerfile, with their instructions (continuation lines joined, comments dropped)."""
    logical: list[str] = []
    pending = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.match(r"(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?", args, re.IGNORECASE)
            assert match, line
            current = Stage(match.group(2) or f"stage{len(stages)}", match.group(1), [])
            stages[current.name] = current
        elif current is not None:
            current.instructions.append((keyword, args.strip()))
    return stages


def exec_form(args: str) -> list[str] | None:
    """The argv of an exec-form instruction (a JSON array), None for the shell form."""
    import json

    text = args.strip()
    if not text.startswith("["):
        return None
    value = json.loads(text)
    assert isinstance(value, list)
    return [str(item) for item in value]


def healthcheck_command(args: str) -> list[str] | None:
    _, _, command = args.partition("CMD ")
    return exec_form(command)


def split_command(line: str) -> list[str]:
    return shlex.split(line)
