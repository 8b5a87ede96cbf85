"""Fixtures for the deployment checks: the tools (installed by scripts/install_deploy_tools.sh, never
skipped: a missing tool fails the run) and the rendered Kubernetes overlays."""

from __future__ import annotations

import fcntl
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.manifests import OVERLAYS, ROOT, Manifest, Tools

IMAGE_MARK = "image"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{IMAGE_MARK}: builds and runs the images with podman (minutes; make image-check)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Image tests run only when asked for (`pytest -m image`); the rest get room for the first-time tool install."""
    selected, deselected = [], []
    wants_images = IMAGE_MARK in (config.getoption("markexpr", "") or "")
    for item in items:
        if "tests/deploy/" not in item.nodeid:
            selected.append(item)
            continue
        if item.get_closest_marker(IMAGE_MARK) and not wants_images:
            deselected.append(item)
            continue
        item.add_marker(pytest.mark.timeout(1800 if item.get_closest_marker(IMAGE_MARK) else 900))
        selected.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


@pytest.fixture(scope="session")
def tools() -> Tools:
    """Install (or find already installed) every tool the checks use; fail loudly when that does not work."""
    script = ROOT / "scripts" / "install_deploy_tools.sh"
    lock = ROOT / "var" / "deploy-tools.lock"
    lock.parent.mkdir(exist_ok=True)
    with lock.open("w") as held:  # one install at a time: `make test` runs two test processes
        fcntl.flock(held, fcntl.LOCK_EX)
        result = subprocess.run([str(script)], cwd=ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        pytest.fail(
            f"{script.relative_to(ROOT)} failed (exit {result.returncode}); the deployment checks need its tools.\n"
            f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}",
            pytrace=False,
        )
    found = Tools.at(ROOT)
    missing = found.missing()
    if missing:
        pytest.fail(f"after scripts/install_deploy_tools.sh these tools are still missing: {', '.join(missing)}", pytrace=False)
    return found


@pytest.fixture(scope="session")
def rendered(tools: Tools, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Every overlay rendered by `kubectl kustomize` into a file (overlay name -> path)."""
    out = tmp_path_factory.mktemp("rendered")
    paths = {}
    for overlay in OVERLAYS:
        result = subprocess.run(["kubectl", "kustomize", str(ROOT / "k8s" / "overlays" / overlay)], capture_output=True, text=True)
        assert result.returncode == 0, f"kubectl kustomize k8s/overlays/{overlay} failed:\n{result.stderr}"
        paths[overlay] = out / f"{overlay}.yaml"
        paths[overlay].write_text(result.stdout)
    return paths


@pytest.fixture(scope="session")
def objects(rendered: dict[str, Path]) -> dict[str, list[Manifest]]:
    """The rendered objects of every overlay."""
    return {overlay: [Manifest(doc) for doc in yaml.safe_load_all(path.read_text()) if doc] for overlay, path in rendered.items()}
