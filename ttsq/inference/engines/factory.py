"""Which engine a worker serves with: one factory that picks the backend and, where a test asks, wraps it for fault
injection.

``ENGINE_BACKEND=ttsq`` is ChatTTS's model decoded by ttsq's own loop (:class:`DecoderEngine`), ``chattts`` ChatTTS's
own ``Chat.infer`` (:class:`ChatTTSEngine`, the reference); ``auto`` is ``ttsq`` on a CPU and ``chattts`` on CUDA
until a GPU run confirms the decoder there (docs/decoder.md).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from ttsq.inference.base import Engine
from ttsq.inference.engines.chattts import ChatTTSEngine, EngineConfig
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.engines.faults import FaultConfig, FaultInjectingEngine

__all__ = ["BackendConfig", "backend_for", "build_engine"]

log = logging.getLogger(__name__)

Backend = Literal["auto", "ttsq", "chattts"]


@dataclass(frozen=True)
class BackendConfig:
    """Which backend serves, and how ttsq's decoder runs there. Built from settings by ``settings.py``."""

    engine_backend: Backend
    cuda_graphs: bool
    batch_invariant: bool
    first_chunk_slots: int
    overlap_prefill_and_audio: bool
    first_chunk_head_start: bool | Literal["auto"]
    """``auto``: on a CPU, not on CUDA (:attr:`DecoderEngine.head_start`)."""
    playback_margin_s: float | None
    """The waiting rows' playback-aware order (``STREAM_SCHEDULING=playback``); None: first chunks, then arrival."""
    piece_tokens: int
    """States per hand-off of a row's audio in pieces (``PIECE_TOKENS``); 0: a chunk's audio is decoded at its end."""
    piece_lookahead: int


def backend_for(backend: Backend, device: str | None) -> Literal["ttsq", "chattts"]:
    """The backend ``auto`` stands for on ``device`` (None: CUDA where torch sees a GPU)."""
    if backend != "auto":
        return backend
    if device is None:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    chosen: Literal["ttsq", "chattts"] = "chattts" if device.startswith("cuda") else "ttsq"
    log.info("ENGINE_BACKEND=auto: %s on %s", chosen, device)
    return chosen


def build_engine(config: EngineConfig, backend: BackendConfig, faults: FaultConfig | None = None) -> Engine:
    """The engine a worker serves with (not loaded yet), wrapped for fault injection when ``faults`` is given."""
    engine: Engine
    if backend_for(backend.engine_backend, config.device) == "ttsq":
        engine = DecoderEngine(
            config,
            cuda_graphs=backend.cuda_graphs,
            batch_invariant=backend.batch_invariant,
            first_chunk_slots=backend.first_chunk_slots,
            overlap=backend.overlap_prefill_and_audio,
            head_start=None if backend.first_chunk_head_start == "auto" else backend.first_chunk_head_start,
            playback_margin_s=backend.playback_margin_s,
            pieces=(backend.piece_tokens, backend.piece_lookahead) if backend.piece_tokens > 0 else None,
        )
    else:
        engine = ChatTTSEngine(config)
    if faults is not None:
        log.warning("FAULT INJECTION is on (test setting): mode=%s match=%r", faults.mode, faults.match)
        engine = FaultInjectingEngine(engine, faults)
    return engine
