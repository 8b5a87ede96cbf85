"""Settings: one source of every default, validated relations, warnings for unknown keys, docs kept in step."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from settings import Settings, unknown_setting_warnings
from ttsq.api.service import ServiceConfig
from ttsq.inference.engines.chattts import EngineConfig
from ttsq.inference.engines.faults import FaultConfig
from ttsq.runtime.deliverer import WebhookConfig
from ttsq.runtime.worker_config import WorkerConfig
from ttsq.store.cache import CacheConfig
from ttsq.store.connection import RedisConfig
from ttsq.store.deliveries import DeliveryConfig
from ttsq.store.queue import QueueConfig

ROOT = Path(__file__).resolve().parents[2]
LIBRARY_CONFIGS = [
    QueueConfig,
    CacheConfig,
    RedisConfig,
    EngineConfig,
    WorkerConfig,
    FaultConfig,
    ServiceConfig,
    WebhookConfig,
    DeliveryConfig,
]
NOT_SETTINGS = {"EngineConfig.warmup_text"}
"""Config fields with a default of their own because no setting drives them."""


def make(**values: Any) -> Settings:
    return Settings(_env_file=None, **values)


def test_defaults_are_valid_and_map_to_library_configs() -> None:
    settings = make()
    assert settings.queue_config().block_s < settings.redis_socket_timeout_s
    assert settings.queue_config().lease_s == settings.lease_s
    assert settings.engine_config().model_source == "hub"
    assert make(model="tiny").engine_config().model_source == str(settings.tiny_checkpoint_dir)
    assert settings.worker_config().health_port == settings.worker_health_port
    assert settings.fault_config().mode == "none"
    assert settings.cache_config().l3_dir == settings.cache_dir
    assert settings.redis_config().retries == settings.redis_retries
    assert settings.delivery_config().lease_s == settings.webhook_lease_s
    assert settings.delivery_config().result_ttl_s == settings.result_ttl_s, "a delivery log expires as results do"
    assert settings.webhook_config() is None, "webhooks are off without WEBHOOK_SECRET"
    webhooks = make(webhook_secret="whsec-0123456789abcdef", public_url="https://tts.example.com").webhook_config()
    assert webhooks is not None and webhooks.concurrency == settings.webhook_concurrency
    assert webhooks.connect_timeout_s == settings.webhook_connect_timeout_s and webhooks.drain_s == settings.webhook_drain_s
    assert webhooks.block_s == settings.block_s, "a blocking claim stays under the socket timeout, as the worker's does"


@pytest.mark.parametrize("config", LIBRARY_CONFIGS, ids=lambda c: c.__name__)
def test_no_library_config_writes_a_default_of_its_own(config: type) -> None:
    """Every default lives in settings.py; a library config that had its own could silently disagree."""
    own = [
        f"{config.__name__}.{field.name}"
        for field in dataclasses.fields(config)
        if field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
    ]
    assert set(own) <= NOT_SETTINGS, f"defaults written outside settings.py: {sorted(set(own) - NOT_SETTINGS)}"


@pytest.mark.parametrize(
    ("values", "words"),
    [
        ({"block_s": 5.0, "redis_socket_timeout_s": 5.0}, "BLOCK_S"),
        ({"lease_s": 6.0, "redis_socket_timeout_s": 5.0}, "LEASE_S"),
        ({"webhook_lease_s": 7.0, "redis_socket_timeout_s": 5.0}, "WEBHOOK_LEASE_S"),
        ({"heartbeat_ttl_s": 4, "heartbeat_interval_s": 2.0}, "HEARTBEAT_TTL_S"),
        ({"heartbeat_ttl_s": 1.5, "sweep_interval_s": 2.0}, "SWEEP_INTERVAL_S"),
        ({"min_new_token": 10, "max_new_token": 5}, "MIN_NEW_TOKEN"),
        ({"fault_mode": "explode"}, "fault_mode"),
        ({"log_level": "chatty"}, "log_level"),
        ({"task_id_secret": "short"}, "16 bytes"),
        ({"precision": "bf16", "gpt_dtype": "bfloat16"}, "PRECISION=bf16 is for ttsq's decoder on a CPU"),
        ({"precision": "int8", "device": "cuda"}, "PRECISION=int8 is for ttsq's decoder on a CPU"),
        ({"precision": "int8", "engine_backend": "chattts"}, "PRECISION=int8"),
        ({"precision": "int8", "batch_invariant": True}, "contradict"),
        ({"precision": "fp16"}, "precision"),
        ({"no_worker_s": 1, "heartbeat_interval_s": 0.5}, "NO_WORKER_S"),
        ({"max_streams": 8, "max_streams_per_tenant": 9}, "MAX_STREAMS_PER_TENANT"),
        ({"max_connections": 0}, "MAX_CONNECTIONS"),
        ({"refine_wait_s": 31.0, "max_wait_s": 30.0}, "REFINE_WAIT_S"),
    ],
)
def test_inconsistent_settings_are_refused_at_start_up(values: dict[str, Any], words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        make(**values)


def test_precision_other_than_fp32_is_named_in_the_model_identity_and_fp32_leaves_every_key_as_it_was() -> None:
    """bf16 and int8 change the audio, so their results must never share cache entries with float32's; fp32 keys
    (and the packed-weights switch, whose codes are float32's) stay what they were before the knob existed."""
    plain = make().model_identity()
    assert "precision" not in plain
    assert make(cpu_packed_weights=False).model_identity() == plain
    identities = {make(precision=p).model_identity() for p in ("bf16", "int8")}
    assert len(identities | {plain}) == 3
    assert all("|precision=" in identity for identity in identities)


def test_lease_rule_states_the_renewal_it_protects() -> None:
    """Leases renew every LEASE_S/3; a renewal waiting a full socket timeout must still land in time."""
    make(lease_s=7.6, redis_socket_timeout_s=5.0)
    with pytest.raises(ValidationError, match="renewed every LEASE_S/3"):
        make(lease_s=7.5, redis_socket_timeout_s=5.0)


def test_environment_is_read_by_upper_case_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MAX_TEXT_CHARS", "42")
    monkeypatch.setenv("MODEL", "tiny")
    monkeypatch.setenv("LOG_LEVEL", "debug")
    settings = Settings(_env_file=None)
    assert settings.max_text_chars == 42 and settings.model == "tiny" and settings.log_level == "DEBUG"


def test_unknown_keys_are_named_with_the_closest_setting() -> None:
    warnings = unknown_setting_warnings(
        {"TTSQ_MAX_BATCH": "64", "TTSQ_LEASE": "9", "TTSQ_URL": "http://x", "PATH": "/bin", "HOME": "/root"},
        ["MAX_BATCHES", "REDIS_URL", "WORKERS_COUNT_ZZZ"],
    )
    assert warnings == [
        "unknown setting MAX_BATCHES is ignored; did you mean MAX_BATCH?",
        "unknown setting TTSQ_LEASE is ignored; did you mean LEASE_S?",
        "unknown setting TTSQ_MAX_BATCH is ignored; settings have no prefix: use MAX_BATCH",
        "unknown setting WORKERS_COUNT_ZZZ is ignored",
    ]


def test_a_process_warns_about_a_mistyped_env_file_key(tmp_path: Path) -> None:
    """The worker and the API call startup_warnings(); here a .env typo is caught as a user would meet it."""
    (tmp_path / ".env").write_text("MAX_BATCHES=64\n")
    script = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from settings import startup_warnings; print(startup_warnings())"
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert "did you mean MAX_BATCH?" in result.stdout, result.stderr


def test_configuration_table_and_env_example_are_generated_from_settings() -> None:
    """Defaults are written once (settings.py); docs/configuration.md's table and .env.example are its output."""
    result = subprocess.run([sys.executable, "scripts/settings_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    table = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    for name in Settings.model_fields:
        assert f"`{name.upper()}`" in table, name
        assert f"#{name.upper()}=" in (ROOT / ".env.example").read_text(), name
    assert "| `LEASE_S` | `30.0` |" in table


def test_a_tenants_share_of_streams_defaults_to_half_the_process_never_below_a_keys() -> None:
    assert make().streams_per_tenant() == 16
    assert make(max_streams=6, max_streams_per_key=4).streams_per_tenant() == 4
    assert make(max_streams_per_tenant=5).streams_per_tenant() == 5
    assert make(no_worker_s=0).no_worker_s == 0, "0 turns the no-worker refusal off, whatever the heartbeat interval"
