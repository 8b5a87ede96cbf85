"""Settings: validated relations, and the README's configuration table kept in step with them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from settings import Settings

ROOT = Path(__file__).resolve().parent.parent


def make(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


def test_defaults_are_valid_and_map_to_library_configs() -> None:
    settings = make()
    assert settings.queue_config().block_s < settings.redis_socket_timeout_s
    assert settings.engine_config().model_source == "hub"
    assert make(model="tiny").engine_config().model_source == str(settings.tiny_checkpoint_dir)
    assert settings.fault_config().mode == "none"


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"block_s": 5.0, "redis_socket_timeout_s": 5.0}, "BLOCK_S"),
        ({"lease_s": 3.0, "heartbeat_interval_s": 2.0}, "LEASE_S"),
        ({"heartbeat_ttl_s": 4, "heartbeat_interval_s": 2.0}, "HEARTBEAT_TTL_S"),
        ({"min_new_token": 10, "max_new_token": 5}, "MIN_NEW_TOKEN"),
        ({"fault_mode": "explode"}, "fault_mode"),
    ],
)
def test_inconsistent_settings_are_refused_at_start_up(values: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        make(**values)


def test_environment_is_read_by_upper_case_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_TEXT_CHARS", "42")
    monkeypatch.setenv("MODEL", "tiny")
    settings = Settings(_env_file=None)
    assert settings.max_text_chars == 42 and settings.model == "tiny"


def test_readme_documents_every_setting() -> None:
    readme = (ROOT / "README.md").read_text()
    documented = set(re.findall(r"`([A-Z][A-Z0-9_]+)`", readme))
    missing = {name.upper() for name in Settings.model_fields} - documented
    assert not missing, f"settings missing from README's configuration table: {sorted(missing)}"
