"""The shape of the codebase: layers whose imports point one way, processes that load only what they need,
a library that reads no environment, and an architecture table (docs/architecture.md) that matches the tree."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def test_import_contracts_hold() -> None:
    """The layer rule, the process boundaries and the rooms inside the layers, as declared in pyproject.toml's
    [tool.importlinter]."""
    result = subprocess.run([str(LINT_IMPORTS)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]["contracts"]
    assert f"{len(declared)} kept, 0 broken" in result.stdout, result.stdout


ROUTERS = [
    "submit_api",
    "query_api",
    "voices_api",
    "draw_api",
    "openai_api",
    "elevenlabs_api",
    "dialogue_api",
    "admin_api",
    "prosody_api",
    "cartesia_api",
    "google_api",
    "realtime_api",
    "elevenlabs_ws_api",
    "cartesia_ws_api",
]
API_ENTRY = ["app", "deps", *ROUTERS]


def parse(module: str) -> ast.Module:
    return ast.parse((ROOT / f"{module}.py").read_text())


def imported_modules(module: str) -> set[str]:
    """Every module a top-level file imports (import-linter takes only packages as roots)."""
    names: set[str] = set()
    for node in ast.walk(parse(module)):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize("router", ROUTERS)
def test_routers_never_import_each_other(router: str) -> None:
    """Shared use cases live in ttsq.api.service; a router importing another would hide one there."""
    assert imported_modules(router) & set(ROUTERS) == set()


ROUTER_IMPORTS = {"ttsq.api.service", "ttsq.api.schemas", "ttsq.api.errors", "ttsq.api.auth", "ttsq.api.elevenlabs"}
"""All a router (or its dependencies, ``deps.py``) may import of ttsq: the use cases, which re-export what the routers
name of the layers beneath, the bodies (ElevenLabs' among them, with what its options mean), the error answers, and who
is calling."""

DEPS_IMPORTS = {"ttsq.api.sessions.engine"}
"""What ``deps.py`` alone may import besides: the session engine it hands the WebSocket routes (``SessionsDep``), so a
WebSocket router takes it from there as every router takes its service."""

PROTOCOL_IMPORTS = {
    "cartesia_api": {"ttsq.api.cartesia", "ttsq.api.audio_out"},
    "google_api": {"ttsq.api.google", "ttsq.api.audio_out"},
    "realtime_api": {"ttsq.api.sessions.ttsq_protocol"},
    "elevenlabs_ws_api": {"ttsq.api.sessions.elevenlabs_protocol"},
    "cartesia_ws_api": {"ttsq.api.sessions.cartesia_protocol"},
}
"""What a router of another vendor's protocol may import besides: that protocol's words (its options read into
ttsq's), and the audio it answers with in the format the protocol asks; a WebSocket router, its protocol's adapter on
the session engine."""

SERVICE_INTERNALS = {"queue", "cache", "voices", "rate_limiter", "webhooks", "streams", "heartbeats"}
"""The service's stores: a router that reaches ``service.queue`` has a use case of its own, outside the service."""


@pytest.mark.parametrize("module", [*ROUTERS, "deps"])
def test_routers_talk_only_to_the_use_cases(module: str) -> None:
    """import-linter does not see the top-level modules, so this holds the routers to ttsq.api: nothing of ttsq.store
    or ttsq.domain (nor the Redis client) imported, and no reaching through the service into its stores."""
    imported = imported_modules(module)
    ours = {name for name in imported if name.split(".")[0] == "ttsq"}
    allowed = ROUTER_IMPORTS | PROTOCOL_IMPORTS.get(module, set()) | (DEPS_IMPORTS if module == "deps" else set())
    assert ours - allowed == set(), "import it from ttsq.api.service (re-export it there)"
    assert {name for name in imported if name.split(".")[0] == "redis"} == set()
    reaching = [
        f"{module}.py:{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(parse(module))
        if isinstance(node, ast.Attribute) and node.attr in SERVICE_INTERNALS
    ]
    assert reaching == [], "give the service the use case instead"


@pytest.mark.parametrize("module", API_ENTRY)
def test_the_api_entry_points_stay_off_the_inference_layer(module: str) -> None:
    heavy = {name for name in imported_modules(module) if name.split(".")[0] in ("torch", "ChatTTS", "transformers", "tn")}
    inference = {name for name in imported_modules(module) if name.startswith(("ttsq.inference", "ttsq.runtime.worker"))}
    assert heavy | inference == set()


def test_the_api_and_the_client_load_neither_torch_nor_chattts() -> None:
    """What the API image and a client-only install rely on: importing them never pulls the model stack in."""
    script = (
        "import sys\n"
        "import app, ttsq.client, ttsq.client.cli\n"
        "heavy = sorted(m for m in ('torch', 'torchaudio', 'ChatTTS', 'transformers', 'tn') if m in sys.modules)\n"
        "print('loaded:', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "loaded: []" in result.stdout, result.stdout


def test_the_client_needs_only_httpx_and_tqdm() -> None:
    script = (
        "import sys\n"
        "import ttsq.client.cli\n"
        "ours = sorted(m for m in sys.modules if m.startswith('ttsq.') and not m.startswith('ttsq.client'))\n"
        "others = sorted(m for m in ('redis', 'fastapi', 'pydantic', 'numpy', 'settings') if m in sys.modules)\n"
        "print(ours, others)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.stdout.strip() == "[] []", result.stdout + result.stderr


def test_library_never_reads_the_environment() -> None:
    """Only the processes read it: settings.py, and the command line (``ttsq/client/cli.py``), a process like worker.py."""
    pattern = re.compile(r"os\.environ|getenv")
    offenders = [
        path.relative_to(ROOT).as_posix()
        for path in sorted((ROOT / "ttsq").rglob("*.py"))
        if path.relative_to(ROOT).as_posix() != "ttsq/client/cli.py" and pattern.search(path.read_text(encoding="utf-8"))
    ]
    assert offenders == [], f"ttsq/ must take configuration as arguments, not from the environment: {offenders}"


def test_architecture_table_matches_the_tree() -> None:
    """Every module of the package is in docs/architecture.md's table of where things are decided, and nothing else is."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = page.split("\n## Where things are decided", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(ttsq/[\w/]+\.(?:py|lua))`", section))
    named |= {
        f"ttsq/store/lua/{name}.lua"
        for group in re.findall(r"`ttsq/store/lua/\{([\w,]+)\}\.lua`", section)
        for name in group.split(",")
    }
    tree = {path.relative_to(ROOT).as_posix() for path in (ROOT / "ttsq").rglob("*") if path.suffix in (".py", ".lua")}
    tree = {path for path in tree if not path.endswith("__init__.py") and "__pycache__" not in path}
    assert sorted(tree - named) == [], "modules missing from docs/architecture.md's table"
    assert sorted(named - tree) == [], "docs/architecture.md's table names modules that do not exist"
