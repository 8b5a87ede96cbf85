"""The Dockerfile: lint (hadolint, zero findings), one stage per role, non-root, no build tools in the
final stages, weights never baked in, and (``pytest -m image``, minutes) a real build and run."""

from __future__ import annotations

import ast
import fnmatch
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.deploy.manifests import ROOT, Tools, dockerfile_stages, exec_form, healthcheck_command

sys.path.insert(0, str(ROOT / "deploy" / "image"))
from requirements import requirements  # deploy/image/requirements.py: what the image build runs

DOCKERFILE = ROOT / "Dockerfile"
FINAL_STAGES = ("api", "worker")


def project_name(requirement: str) -> str:
    """The normalized project name of a requirement line (PEP 503: case and -_. folded)."""
    name = re.split(r"[\[<>=!~;\s]", requirement.strip(), maxsplit=1)[0]
    return re.sub(r"[-_.]+", "-", name).lower()


def test_hadolint_finds_nothing(tools: Tools) -> None:
    result = subprocess.run([str(tools.hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout + result.stderr


def test_hadolint_would_catch_a_bad_dockerfile(tools: Tools, tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install -y curl\nCMD python app.py\n")
    result = subprocess.run([str(tools.hadolint), "--no-color", str(bad)], capture_output=True, text=True)
    assert result.returncode != 0
    assert {"DL3006", "DL3008", "DL3025"} <= {code for code in ("DL3006", "DL3008", "DL3025") if code in result.stdout}


def test_one_final_stage_per_role_on_the_base_argument() -> None:
    stages = dockerfile_stages(DOCKERFILE)
    text = DOCKERFILE.read_text()
    assert "ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm@sha256:" in text, "a pinned default: tag and digest"
    assert all(stage.base in ("${BASE_IMAGE}", *stages) for stage in stages.values()), "every stage starts from BASE_IMAGE"
    for name in FINAL_STAGES:
        stage = stages[name]
        assert stage.base == "runtime-base"
        assert stage.last("USER") == "10001:10001", f"{name}: non-root"
        assert exec_form(stage.last("CMD") or ""), f"{name}: exec-form CMD"
        assert healthcheck_command(stage.last("HEALTHCHECK") or ""), f"{name}: exec-form HEALTHCHECK"
        copies = stage.all("COPY")
        assert all(copy.startswith("--from=") for copy in copies), f"{name}: only built artefacts, no build context"
        assert not stage.all("RUN"), f"{name}: nothing is installed in a final stage"
    assert not any("apt-get" in args or "gcc" in args for stage in stages.values() for _, args in stage.instructions)


def test_weights_are_never_baked_in() -> None:
    text = DOCKERFILE.read_text().lower()
    for forbidden in ("snapshot_download", "huggingface-cli", "hf download", "chattts.chat().load", "chat.load("):
        assert forbidden not in text
    env = " ".join(args for stage in dockerfile_stages(DOCKERFILE).values() for args in stage.all("ENV"))
    assert "MODEL=" not in env.replace("TINY_CHECKPOINT_DIR", ""), "the model is chosen at run time"
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    assert "*" in ignored, "an allow-list .dockerignore: var/, models/, .venv stay out"
    assert not any(line.startswith("!") and ("var" in line or "models" in line or ".venv" in line) for line in ignored)


def test_the_api_image_installs_no_torch_and_the_worker_image_does() -> None:
    api = requirements(ROOT / "pyproject.toml", ["api"])
    worker = requirements(ROOT / "pyproject.toml", ["worker"])
    names = {"api": {project_name(r) for r in api}, "worker": {project_name(r) for r in worker}}
    assert not names["api"] & {"torch", "torchaudio", "chattts", "transformers", "wetextprocessing"}
    assert {"torch", "torchaudio", "chattts", "wetextprocessing"} <= names["worker"]
    assert names["api"] <= names["worker"], "the worker extra includes the API's (ttsq[api] is expanded)"
    constraints = (ROOT / "deploy" / "image" / "constraints.txt").read_text().splitlines()
    pinned = {project_name(line) for line in constraints if "==" in line}
    missing = names["worker"] - pinned
    assert not missing, f"deploy/image/constraints.txt pins no version of {missing}: make image-constraints"


@pytest.mark.image
def test_api_image_builds_and_serves() -> None:
    """The real thing, API only (~2 minutes; the worker image is ~8 GB: make image-check)."""
    command = [sys.executable, str(ROOT / "deploy" / "image" / "check.py"), "--api-only"]
    result = subprocess.run(command, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert "image-check PASSED" in result.stdout


def _admitted(path: str, patterns: list[str]) -> bool:
    """Whether ``.dockerignore`` (``patterns``, in order) lets ``path`` into the build context: the last
    pattern that matches the path or one of its parent directories decides, ``!`` re-admits (Docker's rule)."""
    admitted = True
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negated = pattern.startswith("!")
        glob = pattern.lstrip("!").rstrip("/")
        if any(fnmatch.fnmatchcase(prefix, glob) for prefix in prefixes):
            admitted = negated
    return admitted


def test_every_file_the_dockerfile_copies_is_in_the_build_context() -> None:
    """A file the Dockerfile COPYs but ``.dockerignore`` keeps out breaks the build ("no items matching"); a
    top-level module (``pyproject.toml``'s ``py-modules``) missing from the image breaks the app at import."""
    lines = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()]
    patterns = [line for line in lines if line and not line.startswith("#")]
    copied: list[str] = []
    for stage in dockerfile_stages(DOCKERFILE).values():
        for args in stage.all("COPY"):
            if not args.startswith("--from="):
                copied += [source.rstrip("/") for source in args.split()[:-1] if not source.startswith("--")]
    assert copied, "the Dockerfile copies nothing from the build context"
    files: set[str] = set()
    for source in copied:
        matches = [path.relative_to(ROOT).as_posix() for path in ROOT.glob(source)]
        assert matches, f"the Dockerfile copies {source}, which does not exist"
        for match in matches:
            assert _admitted(match, patterns), f"the Dockerfile copies {match}, but .dockerignore keeps it out of the build context"
        files.update(matches)
    missing = [f"{module}.py" for module in py_modules() if f"{module}.py" not in files]
    assert not missing, f"the images lack the top-level modules {missing} (pyproject.toml py-modules)"


def py_modules() -> list[str]:
    """The one list of top-level modules: pyproject.toml's ``py-modules`` (what ``pip install .`` ships)."""
    modules: list[str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["py-modules"]
    return modules


def root_imports(module: str) -> set[str]:
    """The top-level modules of the repository's root that ``module`` imports, directly or through other root
    modules or the ``ttsq`` package (every ``import``/``from`` anywhere in their source, lazy ones included)."""
    found: set[str] = set()
    pending = [ROOT / f"{module}.py"]
    seen: set[Path] = set()
    while pending:
        path = pending.pop()
        if path in seen:
            continue
        seen.add(path)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                if (ROOT / f"{top}.py").is_file():
                    found.add(top)
                    pending.append(ROOT / f"{top}.py")
                elif top == "ttsq":
                    pending.extend((ROOT / "ttsq").rglob("*.py"))
    return found


def test_every_top_level_module_is_listed_once_and_shipped() -> None:
    """``py-modules`` names every root module the app's entry points import (a module added without it would be
    missing from ``pip install .``, and an image built from the list) and every ``*.py`` at the root (the images copy
    the root's ``*.py``): one list, the code and both installs agreeing."""
    listed = set(py_modules())
    imported = root_imports("app") | root_imports("worker") | {"app", "worker"}
    assert imported <= listed, f"pyproject.toml py-modules lacks {sorted(imported - listed)}, which the app imports"
    on_disk = {path.stem for path in ROOT.glob("*.py")}
    assert on_disk == listed, f"root modules {sorted(on_disk - listed)} unlisted; listed but absent: {sorted(listed - on_disk)}"


def test_the_module_walk_sees_lazy_and_package_imports(tmp_path: Path) -> None:
    """The walk follows imports inside functions and through ``ttsq``: the draw router (``draw_api``) is imported
    by app.py itself, and the worker's entry point imports settings."""
    assert "draw_api" in root_imports("app")
    assert "settings" in root_imports("worker")


def test_the_build_context_check_would_catch_an_ignored_file() -> None:
    assert not _admitted("admin_api.py", ["*", "!app.py"])
    assert _admitted("ttsq/api/service.py", ["*", "!ttsq/"])
    assert not _admitted("ttsq/__pycache__/x.pyc", ["*", "!ttsq/", "**/__pycache__"])
