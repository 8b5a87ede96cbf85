"""Validate custom resources against the CRD schemas vendored in deploy/schemas/ (jsonschema).

Run with the deployment tools' Python (var/deploy-tools-venv, which has jsonschema and PyYAML):

    python crd_validate.py SCHEMA_DIR MANIFEST.yaml [...]

Every object whose API group is not a Kubernetes one (no dot, or ending in ``k8s.io``) must match a
vendored CRD, so a new custom resource kind without a vendored schema fails instead of passing
unchecked. Validation is strict like ``kubectl apply --validate=strict``: an object schema that lists
its properties rejects any other field (unless it says ``x-kubernetes-preserve-unknown-fields``).
Prints one JSON object: ``{"checked": [...], "errors": [...]}``; exits 1 when there are errors.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def is_custom(api_version: str) -> bool:
    group = api_version.rpartition("/")[0]
    return "." in group and not group.endswith("k8s.io")


def to_json_schema(node: Any) -> Any:
    """OpenAPI v3 (Kubernetes structural schema) to JSON Schema, closed wherever properties are listed."""
    if isinstance(node, list):
        return [to_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    schema = {key: to_json_schema(value) for key, value in node.items() if not key.startswith("x-kubernetes-") and key != "format"}
    if isinstance(schema.get("pattern"), str) and "(?i)" in schema["pattern"]:
        schema["pattern"] = "(?i)" + schema["pattern"].replace("(?i)", "")  # Python wants global flags first
    if node.get("nullable"):
        schema.pop("nullable")
        schema = {"anyOf": [schema, {"type": "null"}]}
    elif "properties" in node and "additionalProperties" not in node and not node.get("x-kubernetes-preserve-unknown-fields"):
        schema["additionalProperties"] = False
    return schema


def load_schemas(directory: Path) -> dict[tuple[str, str, str], dict[str, Any]]:
    schemas = {}
    for path in sorted(directory.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schemas[(group, version["name"], kind)] = to_json_schema(version["schema"]["openAPIV3Schema"])
    return schemas


def validate(schemas: dict[tuple[str, str, str], dict[str, Any]], manifests: list[Path]) -> dict[str, list[str]]:
    checked: list[str] = []
    errors: list[str] = []
    for path in manifests:
        for doc in yaml.safe_load_all(path.read_text()):
            if not doc or not is_custom(doc.get("apiVersion", "")):
                continue
            group, _, version = doc["apiVersion"].partition("/")
            name = doc.get("metadata", {}).get("name", "")
            what = f"{path.name}: {doc['kind']}/{name} ({doc['apiVersion']})"
            schema = schemas.get((group, version, doc["kind"]))
            if schema is None:
                errors.append(f"{what}: no CRD schema vendored in deploy/schemas/ for this kind")
                continue
            if not DNS_SUBDOMAIN.match(name) or len(name) > 253:
                errors.append(f"{what}: metadata.name {name!r} is not a DNS subdomain")
            validator = jsonschema.Draft7Validator(schema)
            for error in validator.iter_errors(doc):
                where = "/".join(str(part) for part in error.absolute_path)
                errors.append(f"{what}: {where or '(root)'}: {error.message}")
            checked.append(what)
    return {"checked": checked, "errors": errors}


def main(argv: list[str]) -> None:
    result = validate(load_schemas(Path(argv[1])), [Path(arg) for arg in argv[2:]])
    print(json.dumps(result, indent=1))
    sys.exit(1 if result["errors"] else 0)


if __name__ == "__main__":
    main(sys.argv)
