"""Every knob of ttsq, read from the environment (or a ``.env`` file) and validated at start-up.

This is the only module that reads the environment. The processes (``app.py``, ``worker.py``)
build one :class:`Settings` and hand the library the plain config objects it needs
(:meth:`Settings.queue_config`, :meth:`Settings.engine_config`, ...), so the library can be
used and tested without any environment at all.

Variable names are the field names in upper case (``REDIS_URL``, ``MAX_TEXT_CHARS``, ``MODEL``).
"""

from __future__ import annotations

import os
import socket
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ttsq.cache import CacheConfig
from ttsq.queue import QueueConfig
from ttsq.redis_conn import RedisConfig

if TYPE_CHECKING:  # the engine pulls in torch: only the worker imports it, lazily
    from ttsq.engine import EngineConfig
    from ttsq.faults import FaultConfig

REPO_ROOT = Path(__file__).resolve().parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore", frozen=True)

    # --- Redis -------------------------------------------------------------------------------
    redis_url: str = Field("redis://127.0.0.1:6379/0", description="The queue's Redis.")
    redis_namespace: str = Field("ttsq", description="Hash tag of every key: {ttsq}:...")
    redis_socket_timeout_s: float = Field(5.0, gt=0)
    redis_connect_timeout_s: float = Field(2.0, gt=0)
    redis_max_connections: int = Field(64, ge=2)
    require_noeviction: bool = Field(False, description="Refuse to start when Redis may evict keys (instead of only warning).")

    # --- queue -------------------------------------------------------------------------------
    lease_s: float = Field(30.0, gt=0, description="A claimed job returns to the queue this long after its worker stops renewing.")
    max_attempts: int = Field(3, ge=1, le=20)
    retry_base_s: float = Field(2.0, ge=1.0, description="Backoff after attempt n is retry_base_s ** n.")
    result_ttl_s: int = Field(600, ge=10, description="Results and final statuses expire after this.")
    max_result_bytes: int = Field(50 * 1024 * 1024, ge=1024)
    max_queue_depth: int = Field(10_000, ge=1)
    block_s: float = Field(2.0, gt=0, description="Longest blocking claim; must stay below the socket timeout.")
    dead_letter_max: int = Field(10_000, ge=1)
    retry_after_s: int = Field(5, ge=1, description="Retry-After sent with 429 and 503.")

    # --- API ---------------------------------------------------------------------------------
    max_text_chars: int = Field(500, ge=1, le=100_000)
    task_id_secret: SecretStr | None = Field(
        None,
        description="HMAC secret that signs task ids (>= 16 bytes). Unset: one is created in Redis and shared by all replicas.",
    )

    # --- result cache ------------------------------------------------------------------------
    cache_enabled: bool = Field(True, description="Serve repeated deterministic requests from the cache.")
    single_flight: bool = Field(True, description="Identical deterministic requests in flight share one job.")
    cache_redis_url: str | None = Field(
        None, description="Redis for the L2 cache (LRU eviction is fine there); unset = the queue's Redis."
    )
    cache_ttl_s: int = Field(24 * 3600, ge=1, description="L2 entry lifetime.")
    cache_l1_max_bytes: int = Field(64 * 1024 * 1024, ge=0, description="In-process LRU bound, in bytes, per process.")
    cache_l2_max_entry_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="Larger results skip L2.")
    cache_dir: Path | None = Field(REPO_ROOT / "var" / "cache", description="L3 directory; empty disables L3.")
    cache_dir_max_bytes: int = Field(1024 * 1024 * 1024, ge=1024 * 1024, description="L3 total size bound.")
    model_id: str | None = Field(
        None,
        description="Identity of the weights in cache keys; unset = derived from MODEL. Change it when the weights change.",
    )
    default_job_s: float = Field(5.0, gt=0, description="Wait estimate per job before any job has finished.")

    # --- model / engine ----------------------------------------------------------------------
    model: str = Field(
        "hub",
        description="'hub' (2Noise/ChatTTS from the model hub), 'tiny' (generated random weights: speaks noise), or a directory.",
    )
    tiny_checkpoint_dir: Path = Field(REPO_ROOT / "var" / "tiny-checkpoint")
    device: str | None = Field(None, description="cpu, cuda, cuda:N; unset = CUDA when available.")
    speaker_dim: int | None = Field(
        None, ge=1, description="Speaker-embedding size of the model (768 for ChatTTS); checked for embedding voices."
    )
    cpu_threads: int = Field(1, ge=1, description="torch threads on CPU; 1 is fastest on small machines.")
    compile: bool = False
    max_chunk_chars: int = Field(120, ge=8, description="Long text is synthesised in chunks of at most this many characters.")
    max_new_token: int = Field(2048, ge=1)
    min_new_token: int = Field(0, ge=0)
    refine_max_new_token: int = Field(384, ge=1)
    normalize_text: bool = Field(True, description="Speak numbers, dates and amounts (WeTextProcessing).")
    cuda_alloc_conf: str = Field("expandable_segments:True", description="PYTORCH_CUDA_ALLOC_CONF for the worker.")

    # --- worker ------------------------------------------------------------------------------
    worker_id: str = Field(default_factory=lambda: f"{socket.gethostname()}-{os.getpid()}")
    worker_health_host: str = "127.0.0.1"
    worker_health_port: int = Field(8001, ge=0, le=65535)
    heartbeat_interval_s: float = Field(2.0, gt=0)
    heartbeat_ttl_s: int = Field(15, ge=1)
    reap_interval_s: float = Field(5.0, gt=0)
    job_timeout_s: float = Field(300.0, gt=0, description="An inference running longer is hung: worker /healthz turns 503.")
    max_batch: int = Field(8, ge=1, le=256, description="Most jobs in one ChatTTS call (1 turns batching off).")
    batch_wait_ms: float = Field(20.0, ge=0, le=5000, description="How long a claim waits for a batch to fill.")
    oom_recover_s: float = Field(300.0, ge=0, description="After an out-of-memory split, how long the smaller batch size holds.")
    shutdown_grace_s: float = Field(25.0, ge=0, description="On SIGTERM, how long the current job may still run.")

    # --- fault injection (tests only; off unless set explicitly) -----------------------------
    fault_mode: Literal["none", "hang", "raise", "oom"] = "none"
    fault_match: str = Field("", description="Only texts containing this substring fault ('' = all).")
    fault_oom_above_batch: int = Field(0, ge=0, description="With FAULT_MODE=oom: only batches larger than this fail.")
    fault_hang_s: float = Field(3600.0, gt=0, description="How long a 'hang' fault lasts before inference goes on.")

    log_level: str = "INFO"

    @field_validator("cache_dir", mode="before")
    @classmethod
    def _empty_disables(cls, value: object) -> object:
        return None if value == "" else value

    @field_validator("task_id_secret")
    @classmethod
    def _secret_long_enough(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value().encode()) < 16:
            raise ValueError("TASK_ID_SECRET must be at least 16 bytes")
        return value

    @model_validator(mode="after")
    def _check_relations(self) -> Settings:
        if self.block_s >= self.redis_socket_timeout_s:
            raise ValueError(
                f"BLOCK_S ({self.block_s}) must be below REDIS_SOCKET_TIMEOUT_S ({self.redis_socket_timeout_s}): "
                "a blocking read longer than the socket timeout fails with a timeout error"
            )
        if self.lease_s < 3 * self.heartbeat_interval_s:
            raise ValueError(
                f"LEASE_S ({self.lease_s}) must be at least 3 x HEARTBEAT_INTERVAL_S ({self.heartbeat_interval_s}) "
                "so a live worker always renews its lease in time"
            )
        if self.heartbeat_ttl_s <= 2 * self.heartbeat_interval_s:
            raise ValueError("HEARTBEAT_TTL_S must exceed 2 x HEARTBEAT_INTERVAL_S or live workers look dead")
        if self.min_new_token > self.max_new_token:
            raise ValueError("MIN_NEW_TOKEN must not exceed MAX_NEW_TOKEN")
        return self

    def model_dir(self) -> str:
        """The engine's model source: 'hub' or a directory ('tiny' resolves to the generated checkpoint)."""
        if self.model == "tiny":
            return str(self.tiny_checkpoint_dir)
        return self.model

    def expected_speaker_dim(self) -> int | None:
        """Speaker-embedding size that voices must have: SPEAKER_DIM, else known for hub and tiny."""
        return self.speaker_dim or {"hub": 768, "tiny": 64}.get(self.model)

    def model_identity(self) -> str:
        """What cache keys say about the model: its weights plus the settings that shape its audio."""
        weights = self.model_id or {"hub": "2Noise/ChatTTS", "tiny": "tiny-random"}.get(self.model, self.model)
        return (
            f"{weights}|chunk={self.max_chunk_chars}|new={self.min_new_token}-{self.max_new_token}"
            f"|refine={self.refine_max_new_token}|norm={int(self.normalize_text)}"
        )

    def cache_config(self) -> CacheConfig:
        return CacheConfig(
            enabled=self.cache_enabled,
            namespace=self.redis_namespace,
            l1_max_bytes=self.cache_l1_max_bytes,
            l2_ttl_s=self.cache_ttl_s,
            l2_max_entry_bytes=self.cache_l2_max_entry_bytes,
            l3_dir=self.cache_dir,
            l3_max_bytes=self.cache_dir_max_bytes,
        )

    def cache_redis_config(self) -> RedisConfig | None:
        """A separate Redis for the cache, or None to share the queue's client."""
        if not self.cache_redis_url or self.cache_redis_url == self.redis_url:
            return None
        return RedisConfig(
            url=self.cache_redis_url,
            socket_timeout_s=self.redis_socket_timeout_s,
            connect_timeout_s=self.redis_connect_timeout_s,
            max_connections=self.redis_max_connections,
        )

    def redis_config(self) -> RedisConfig:
        return RedisConfig(
            url=self.redis_url,
            socket_timeout_s=self.redis_socket_timeout_s,
            connect_timeout_s=self.redis_connect_timeout_s,
            max_connections=self.redis_max_connections,
        )

    def queue_config(self) -> QueueConfig:
        return QueueConfig(
            namespace=self.redis_namespace,
            lease_s=self.lease_s,
            max_attempts=self.max_attempts,
            result_ttl_s=self.result_ttl_s,
            max_result_bytes=self.max_result_bytes,
            max_queue_depth=self.max_queue_depth,
            block_s=self.block_s,
            retry_base_s=self.retry_base_s,
            heartbeat_ttl_s=self.heartbeat_ttl_s,
            dead_letter_max=self.dead_letter_max,
            default_job_s=self.default_job_s,
        )

    def engine_config(self) -> EngineConfig:
        from ttsq.engine import EngineConfig

        return EngineConfig(
            model_source=self.model_dir(),
            device=self.device,
            cpu_threads=self.cpu_threads,
            compile=self.compile,
            max_chunk_chars=self.max_chunk_chars,
            max_new_token=self.max_new_token,
            min_new_token=self.min_new_token,
            refine_max_new_token=self.refine_max_new_token,
            normalize_text=self.normalize_text,
        )

    def fault_config(self) -> FaultConfig:
        from ttsq.faults import FaultConfig

        return FaultConfig(
            mode=self.fault_mode, match=self.fault_match, hang_s=self.fault_hang_s, oom_above_batch=self.fault_oom_above_batch
        )


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return Settings()
