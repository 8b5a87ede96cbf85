"""The engine on the generated tiny checkpoint, through the genuine ChatTTS code path."""

from __future__ import annotations

import dataclasses
import gc
import json
import shutil
import threading
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import torch

from tests.conftest import fault_config
from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from ttsq.domain.sampling import Sampling
from ttsq.domain.text import split_sentences
from ttsq.inference.base import (
    Engine,
    ModelInfo,
    ModelLoadError,
    OutOfMemory,
    PermanentError,
    SynthesisRequest,
    TransientError,
    synthesize,
)
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.checkpoint import (
    ASSET_FILES,
    MANIFEST_NAME,
    build_tiny_checkpoint,
    compute_sha256_map,
    sha256_key,
)
from ttsq.inference.engines.faults import FaultInjectingEngine

SHORT = "Hello there, good day."
LONG = "This is the first sentence of the text. Here comes a second one, a bit longer. And a third sentence closes it."


@pytest.fixture(scope="module")
def speaker(tiny_engine: ChatTTSEngine) -> str:
    return tiny_engine.speaker_from_seed(7)


def request(speaker: str, text: str = SHORT, seed: int = 1, **sampling: Any) -> SynthesisRequest:
    """A request with these sampling parameters, not validated: the engine's own checks are under test too."""
    return SynthesisRequest(text=text, speaker=speaker, seed=seed, sampling=Sampling.model_construct(**sampling))


# ---- the checkpoint ------------------------------------------------------------------------


def test_checkpoint_manifest_hashes_match_its_files(tiny_checkpoint_dir: Path) -> None:
    manifest = json.loads((tiny_checkpoint_dir / MANIFEST_NAME).read_text())
    assert manifest["name"] == "tiny-random"
    assert manifest["speaks_noise"] is True
    assert manifest["sha256_map"] == compute_sha256_map(tiny_checkpoint_dir)
    assert set(manifest["sha256_map"]) == {sha256_key(rel) for rel in ASSET_FILES}
    assert manifest["config_overrides"]["gpt"]["hidden_size"] == 64
    total = sum((tiny_checkpoint_dir / rel).stat().st_size for rel in ASSET_FILES)
    assert total < 10 * 1024 * 1024


def test_sha256_keys_follow_chattts_naming() -> None:
    assert sha256_key("asset/gpt/model.safetensors") == "sha256_asset_gpt_model_safetensors"
    assert sha256_key("asset/DVAE.safetensors") == "sha256_asset_DVAE_safetensors"


def test_build_is_idempotent(tiny_checkpoint_dir: Path) -> None:
    before = {rel: (tiny_checkpoint_dir / rel).stat().st_mtime_ns for rel in ASSET_FILES}
    assert build_tiny_checkpoint(tiny_checkpoint_dir) == tiny_checkpoint_dir
    after = {rel: (tiny_checkpoint_dir / rel).stat().st_mtime_ns for rel in ASSET_FILES}
    assert before == after


def test_build_is_deterministic_and_replaces_a_broken_directory(tiny_checkpoint_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "ckpt"
    target.mkdir()
    (target / "leftover.txt").write_text("half-written")
    build_tiny_checkpoint(target)
    assert not (target / "leftover.txt").exists()
    assert compute_sha256_map(target) == compute_sha256_map(tiny_checkpoint_dir)
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"], "temporary build directories must not be left behind"


# ---- loading -------------------------------------------------------------------------------


def test_loads_through_genuine_chattts(tiny_engine: ChatTTSEngine) -> None:
    import ChatTTS

    assert tiny_engine.info == ModelInfo(name="tiny-random", source="directory", speaks_noise=True, device="cpu")
    assert isinstance(tiny_engine._chat, ChatTTS.Chat)
    assert tiny_engine._chat.config.gpt.hidden_size == 64


def test_overrides_do_not_leak_into_other_chat_instances(tiny_engine: ChatTTSEngine) -> None:
    import ChatTTS

    assert ChatTTS.Chat().config.gpt.hidden_size == 768


def test_chattts_numba_kernels_are_compiled_once_per_machine_not_once_per_process(tiny_engine: ChatTTSEngine) -> None:
    """Loading the engine puts ChatTTS's text-normalizer kernels in numba's on-disk cache (a worker start pays
    their compilation once per machine); the warm-up compiled or loaded the one every request uses."""
    import ChatTTS.norm

    stats = ChatTTS.norm._fast_replace.stats
    assert stats.cache_path is not None, "no on-disk cache: every worker process compiles the kernels again"
    assert sum(stats.cache_hits.values()) + sum(stats.cache_misses.values()) >= 1, "the warm-up ran the kernel"


def test_tampered_asset_is_refused(tiny_checkpoint_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "tampered"
    shutil.copytree(tiny_checkpoint_dir, copy)
    victim = copy / "asset" / "DVAE.safetensors"
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    engine = ChatTTSEngine(dataclasses.replace(TINY_ENGINE_CONFIG, model_source=str(copy)))
    with pytest.raises(ModelLoadError, match=r"asset/DVAE\.safetensors"):
        engine.load()
    assert victim.exists() and not victim.with_name(victim.name + ".bak").exists()


def test_missing_asset_is_named(tiny_checkpoint_dir: Path, tmp_path: Path) -> None:
    copy = tmp_path / "incomplete"
    shutil.copytree(tiny_checkpoint_dir, copy)
    (copy / "asset" / "gpt" / "config.json").unlink()
    engine = ChatTTSEngine(dataclasses.replace(TINY_ENGINE_CONFIG, model_source=str(copy)))
    with pytest.raises(ModelLoadError, match=r"incomplete: missing asset/gpt/config\.json"):
        engine.load()


def test_missing_directory_is_named(tmp_path: Path) -> None:
    engine = ChatTTSEngine(dataclasses.replace(TINY_ENGINE_CONFIG, model_source=str(tmp_path / "nope")))
    with pytest.raises(ModelLoadError, match="does not exist"):
        engine.load()
    with pytest.raises(RuntimeError, match="not loaded"):
        _ = engine.info


# ---- synthesis -----------------------------------------------------------------------------


def test_synthesize_returns_finite_float32_audio(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    audio = synthesize(tiny_engine, request(speaker))
    assert audio.dtype == np.float32
    assert audio.ndim == 1 and audio.size > 0
    assert np.isfinite(audio).all()


def test_text_with_digits_and_tokens_synthesizes(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    audio = synthesize(tiny_engine, request(speaker, "今天是2026年11月30日[uv_break]价格是3.5元。"))
    assert audio.size > 0 and np.isfinite(audio).all()


def test_same_request_is_bit_identical(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    first = synthesize(tiny_engine, request(speaker))
    second = synthesize(tiny_engine, request(speaker))
    assert np.array_equal(first, second)


def test_different_seed_gives_different_audio(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    assert not np.array_equal(synthesize(tiny_engine, request(speaker, seed=1)), synthesize(tiny_engine, request(speaker, seed=2)))


def test_speaker_from_seed_is_reproducible(tiny_engine: ChatTTSEngine) -> None:
    assert tiny_engine.speaker_from_seed(3) == tiny_engine.speaker_from_seed(3)
    assert tiny_engine.speaker_from_seed(3) != tiny_engine.speaker_from_seed(4)


def test_speaker_from_seed_matches_chattts_sampling_on_cpu(tiny_engine: ChatTTSEngine) -> None:
    torch.manual_seed(11)
    assert tiny_engine.speaker_from_seed(11) == tiny_engine._chat.sample_random_speaker()


def test_different_speaker_gives_different_audio(tiny_engine: ChatTTSEngine) -> None:
    first = synthesize(tiny_engine, request(tiny_engine.speaker_from_seed(1)))
    second = synthesize(tiny_engine, request(tiny_engine.speaker_from_seed(2)))
    assert not np.array_equal(first, second)


def test_long_text_is_split_and_gives_longer_audio(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    assert len(split_sentences(LONG, TINY_ENGINE_CONFIG.max_chunk_chars)) >= 3
    short = synthesize(tiny_engine, request(speaker))
    long = synthesize(tiny_engine, request(speaker, LONG))
    assert long.size > 2 * short.size


def test_parameters_are_fresh_on_every_call(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    normal = synthesize(tiny_engine, request(speaker, speed=5))
    slow = synthesize(tiny_engine, request(speaker, speed=2))
    normal_again = synthesize(tiny_engine, request(speaker, speed=5))
    assert not np.array_equal(normal, slow)
    assert np.array_equal(normal, normal_again)


def test_refine_text_path_runs(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    first = synthesize(tiny_engine, request(speaker, refine_text=True))
    assert first.size > 0
    assert np.array_equal(first, synthesize(tiny_engine, request(speaker, refine_text=True)))


def test_concurrent_calls_are_serialized(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    expected = synthesize(tiny_engine, request(speaker))
    results: list[npt.NDArray[np.float32]] = []
    threads = [threading.Thread(target=lambda: results.append(synthesize(tiny_engine, request(speaker)))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 3
    assert all(np.array_equal(expected, result) for result in results)


@pytest.mark.parametrize(("text", "speed"), [("   ", 5), (SHORT, 10), (SHORT, -1)])
def test_invalid_requests_are_permanent_errors(tiny_engine: ChatTTSEngine, speaker: str, text: str, speed: int) -> None:
    with pytest.raises(PermanentError):
        synthesize(tiny_engine, request(speaker, text, speed=speed))


def test_release_memory_costs_nothing_on_cpu(tiny_engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """On CPU there is no device cache to return; a full gc.collect() would cost ~0.25 s per call for nothing."""
    collections: list[int] = []

    def collect(*_: object) -> int:
        collections.append(1)
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    tiny_engine.release_memory()
    assert collections == []


# ---- fault injection -----------------------------------------------------------------------


def test_raise_fault(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    faulty: Engine = FaultInjectingEngine(tiny_engine, fault_config("raise", ""))
    faulty.warm_up()
    assert faulty.load() == tiny_engine.info
    with pytest.raises(TransientError, match="injected fault"):
        synthesize(faulty, request(speaker))


def test_oom_fault(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    faulty = FaultInjectingEngine(tiny_engine, fault_config("oom", ""))
    with pytest.raises(OutOfMemory):
        synthesize(faulty, request(speaker))


def test_fault_only_hits_matching_text(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    faulty = FaultInjectingEngine(tiny_engine, fault_config("raise", "explode"))
    assert np.array_equal(synthesize(faulty, request(speaker)), synthesize(tiny_engine, request(speaker)))
    with pytest.raises(TransientError, match="injected fault"):
        synthesize(faulty, request(speaker, "please explode now."))


def test_no_fault_mode_delegates(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    faulty = FaultInjectingEngine(tiny_engine, fault_config("none", ""))
    assert faulty.speaker_from_seed(7) == speaker
    assert synthesize(faulty, request(speaker)).size > 0


def test_hang_fault_blocks_until_released(tiny_engine: ChatTTSEngine, speaker: str) -> None:
    faulty = FaultInjectingEngine(tiny_engine, fault_config("hang", ""))
    results: list[npt.NDArray[np.float32]] = []
    worker = threading.Thread(target=lambda: results.append(synthesize(faulty, request(speaker))), daemon=True)
    worker.start()
    worker.join(timeout=0.5)
    assert worker.is_alive() and not results
    faulty.release()
    worker.join(timeout=60)
    assert not worker.is_alive()
    assert len(results) == 1 and results[0].size > 0
