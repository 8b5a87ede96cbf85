"""Which ports a pod admits from a given peer under a set of NetworkPolicies (ingress only).

The tests ask behavioural questions of the rendered policies ("may Prometheus reach the worker's
port 8001? may it reach Redis? may a Grafana pod in the monitoring namespace reach anything?")
instead of comparing YAML to YAML, so a policy that is restructured but admits the same traffic still
passes, and one that opens a hole anywhere fails. The rules follow the NetworkPolicy API:

* a pod selected by no policy with policy type Ingress is not isolated: every peer reaches every port;
* otherwise a connection is allowed when any rule of any selecting policy allows it (rules add up);
* a rule without ``from`` (or with an empty list) admits every source; a peer with only a
  ``podSelector`` means pods of the policy's own namespace, with only a ``namespaceSelector`` every pod
  of the matching namespaces, with both the pods that match both;
* a rule without ``ports`` (or with an empty list) admits every port; a named port is resolved
  against the target pod's container ports; ``endPort`` makes a range; the protocol defaults to TCP.

``ipBlock`` peers are refused (the manifests use none; pod traffic through an ipBlock depends on the
cluster's pod network, which a static check cannot know).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tests.deploy.manifests import Manifest

ALL_PORTS = frozenset({("*", 0)})
"""What an unrestricted pod or rule admits: every protocol and port."""


@dataclass(frozen=True)
class Pod:
    """A pod as the policies see it: its namespace (name and labels), its labels and its named container ports."""

    namespace: str
    labels: dict[str, str]
    namespace_labels: dict[str, str] = field(default_factory=dict)
    ports: dict[str, tuple[str, int]] = field(default_factory=dict)
    """Container port name -> (protocol, number), for named ports in a policy."""

    def __post_init__(self) -> None:
        # Kubernetes labels every namespace with its own name; selectors in the manifests rely on it.
        object.__setattr__(self, "namespace_labels", {"kubernetes.io/metadata.name": self.namespace, **self.namespace_labels})


def pod_of(workload: Manifest) -> Pod:
    """The pods a rendered Deployment or StatefulSet runs, as the policies see them."""
    ports = {p["name"]: (p.get("protocol", "TCP"), p["containerPort"]) for c in workload.containers() for p in c.get("ports", [])}
    return Pod(str(workload.namespace), workload.pod_labels, ports=ports)


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector: matchLabels and matchExpressions all hold; an empty selector matches everything."""
    selector = selector or {}
    if not selector.get("matchLabels", {}).items() <= labels.items():
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        present = key in labels
        if operator == "In":
            ok = present and labels[key] in values
        elif operator == "NotIn":
            ok = not present or labels[key] not in values
        elif operator == "Exists":
            ok = present
        elif operator == "DoesNotExist":
            ok = not present
        else:
            raise ValueError(f"unknown selector operator {operator!r}")
        if not ok:
            return False
    return True


def peer_matches(peer: dict[str, Any], policy_namespace: str, source: Pod) -> bool:
    if "ipBlock" in peer:
        raise ValueError("ipBlock peers are not evaluated (see the module docstring)")
    if "namespaceSelector" in peer:
        namespace_ok = selector_matches(peer["namespaceSelector"], source.namespace_labels)
    else:
        namespace_ok = source.namespace == policy_namespace
    return namespace_ok and selector_matches(peer.get("podSelector"), source.labels)


def rule_ports(rule: dict[str, Any], target: Pod) -> frozenset[tuple[str, int]]:
    ports = rule.get("ports") or []
    if not ports:
        return ALL_PORTS
    admitted: set[tuple[str, int]] = set()
    for entry in ports:
        protocol = entry.get("protocol", "TCP")
        if "port" not in entry:
            return ALL_PORTS  # a protocol with no port: every port of it; the manifests never do this
        port = entry["port"]
        if isinstance(port, str):
            if port not in target.ports or target.ports[port][0] != protocol:
                continue  # a name the pod does not have admits nothing on that pod
            port = target.ports[port][1]
        admitted.update((protocol, number) for number in range(port, entry.get("endPort", port) + 1))
    return frozenset(admitted)


def ingress_policies(policies: list[dict[str, Any]], target: Pod) -> list[dict[str, Any]]:
    """The policies that isolate ``target`` for ingress."""
    selected = []
    for policy in policies:
        spec = policy["spec"]
        namespace = policy["metadata"].get("namespace")
        types = spec.get("policyTypes") or (["Ingress", "Egress"] if "egress" in spec else ["Ingress"])
        if namespace == target.namespace and "Ingress" in types and selector_matches(spec.get("podSelector"), target.labels):
            selected.append(policy)
    return selected


def admitted(policies: list[dict[str, Any]], source: Pod, target: Pod) -> frozenset[tuple[str, int]]:
    """The (protocol, port) pairs on ``target`` that ``source`` may connect to; ALL_PORTS when unrestricted."""
    selecting = ingress_policies(policies, target)
    if not selecting:
        return ALL_PORTS
    allowed: set[tuple[str, int]] = set()
    for policy in selecting:
        namespace = policy["metadata"]["namespace"]
        for rule in policy["spec"].get("ingress") or []:
            peers = rule.get("from") or []
            if peers and not any(peer_matches(peer, namespace, source) for peer in peers):
                continue
            ports = rule_ports(rule, target)
            if ports == ALL_PORTS:
                return ALL_PORTS
            allowed |= ports
    return frozenset(allowed)


def tcp(*ports: int) -> frozenset[tuple[str, int]]:
    return frozenset(("TCP", port) for port in ports)
