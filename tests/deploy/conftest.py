"""Fixtures for the deployment checks: the tools (installed by scripts/install_deploy_tools.sh, never
skipped: a missing tool fails the run) and the rendered Kubernetes overlays."""

from __future__ import annotations

import fcntl
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.deploy.manifests import OVERLAYS, ROOT, Manifest, Tools

IMAGE_MARK = "image"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{IMAGE_MARK}: builds and runs an image with podman (minutes): the API image's check runs in every `make test` "
        "where podman is present; the worker image's (~8 GB) only with `pytest -m image` or `make image-check`",
    )


IMAGE_TOOLS = ("podman", "runc", "mmdebstrap")
"""What a real image build and run needs here (scripts/install_deploy_tools.sh --images installs them)."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every deployment check gets room for the first-time tool install; an image check is skipped, saying why, only
    where the tools to build and run images are missing (a machine without podman), never silently deselected."""
    missing = [tool for tool in IMAGE_TOOLS if shutil.which(tool) is None]
    for item in items:
        if "tests/deploy/" not in item.nodeid:
            continue
        image = item.get_closest_marker(IMAGE_MARK)
        item.add_marker(pytest.mark.timeout(1800 if image else 900))
        if image and missing:
            item.add_marker(pytest.mark.skip(reason=f"no {', '.join(missing)} on this machine: the image is not built"))


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
