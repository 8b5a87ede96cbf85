"""Engine fixtures: the generated tiny ChatTTS checkpoint and a loaded, warmed engine on it.

Registered from ``tests/conftest.py``. The checkpoint is cached across test sessions in
``<repo>/var/tiny-checkpoint`` (rebuilding it takes seconds; reusing it, milliseconds) and the
engine is loaded once per session, because loading and warming ChatTTS dominate test time.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from settings import Settings
from ttsq.inference.engines.chattts import ChatTTSEngine, EngineConfig
from ttsq.inference.engines.checkpoint import build_tiny_checkpoint
from ttsq.inference.engines.decoder_engine import DecoderEngine

REPO_ROOT = Path(__file__).resolve().parents[2]
TINY_CHECKPOINT_DIR = REPO_ROOT / "var" / "tiny-checkpoint"

TINY_ENGINE_CONFIG: EngineConfig = Settings(
    _env_file=None,
    model="tiny",
    tiny_checkpoint_dir=TINY_CHECKPOINT_DIR,
    device="cpu",
    cpu_threads=1,
    max_chunk_chars=40,
    max_new_token=48,
    min_new_token=48,
    refine_max_new_token=16,
).engine_config()
"""Small caps keep each synthesis around a tenth of a second; min = max fixes every chunk's length."""


@pytest.fixture(scope="session")
def tiny_checkpoint_dir() -> Path:
    return build_tiny_checkpoint(TINY_CHECKPOINT_DIR)


@pytest.fixture(scope="session")
def tiny_engine(tiny_checkpoint_dir: Path) -> Iterator[ChatTTSEngine]:
    engine = ChatTTSEngine(TINY_ENGINE_CONFIG)
    engine.load()
    engine.warm_up()
    yield engine
    engine.release_memory()


@pytest.fixture(scope="session")
def tiny_decoder_engine(tiny_checkpoint_dir: Path) -> Iterator[DecoderEngine]:
    """The default engine (ttsq's decoder) on the same checkpoint and caps as :func:`tiny_engine`."""
    defaults = Settings(_env_file=None)
    engine = DecoderEngine(
        TINY_ENGINE_CONFIG,
        cuda_graphs=False,
        batch_invariant=defaults.batch_invariant,
        first_chunk_slots=defaults.first_chunk_slots,
        overlap=defaults.overlap_prefill_and_audio,
        playback_margin_s=defaults.playback_margin_s if defaults.stream_scheduling == "playback" else None,
        pieces=(defaults.piece_tokens, defaults.piece_lookahead) if defaults.piece_tokens else None,
    )
    engine.load()
    engine.warm_up()
    yield engine
    engine.release_memory()


@pytest.fixture(scope="module")
def invariant_engine(tiny_checkpoint_dir: Path) -> Iterator[DecoderEngine]:
    """ttsq's decoder, batch-invariant: a row's audio is the same bits whatever shares its steps (one per module, its
    memory released after it)."""
    engine = DecoderEngine(TINY_ENGINE_CONFIG, cuda_graphs=False, batch_invariant=True, first_chunk_slots=1, overlap=False)
    engine.load()
    yield engine
    engine.release_memory()


def pieced_engine(config: EngineConfig = TINY_ENGINE_CONFIG) -> DecoderEngine:
    """ttsq's decoder on ``config``, loaded, its audio in pieces at the default cadence, inline (no prefill or audio
    thread) and with no slot kept for first chunks: what tests of a row's audio drive step by step."""
    defaults = Settings(_env_file=None)
    engine = DecoderEngine(
        config,
        cuda_graphs=False,
        batch_invariant=False,
        first_chunk_slots=0,
        overlap=False,
        pieces=(defaults.piece_tokens, defaults.piece_lookahead),
    )
    engine.load()
    return engine
