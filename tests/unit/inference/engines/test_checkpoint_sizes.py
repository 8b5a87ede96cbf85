"""The generated checkpoint sizes: "full" describes ChatTTS's real dimensions, "tiny" is unchanged.

The full-size checkpoint is 1.1 GB and is never built or loaded here: its manifest's config
overrides, its GPT config and its tokenizer size are computed without touching any file, and the
GPT's parameter count is taken on the meta device (no memory). Only the tiny one is built.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.checkpoint import (
    ASSET_FILES,
    CHECKPOINT_SIZES,
    MANIFEST_NAME,
    CheckpointSize,
    apply_config_overrides,
    build_random_checkpoint,
    build_tiny_checkpoint,
    config_overrides,
    gpt_llama_config,
    sha256_key,
    text_vocab_size,
)


def _without_spk_stat(overrides: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in overrides.items() if key != "spk_stat"}


def test_full_size_overrides_describe_the_real_chattts_dims() -> None:
    overrides = config_overrides("full", spk_stat="unused")
    assert overrides["gpt"] == {
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_attention_heads": 12,
        "num_hidden_layers": 20,
        "num_text_tokens": 21178,
    }
    assert overrides["embed"] == {"hidden_size": 768, "num_text_tokens": 21178}
    assert overrides["decoder"] == {"idim": 384, "odim": 384, "hidden": 512, "n_layer": 12, "bn_dim": 128}
    assert overrides["dvae"]["encoder"] == {"idim": 512, "odim": 1024, "hidden": 256, "n_layer": 12, "bn_dim": 128}
    assert overrides["dvae"]["decoder"] == {"idim": 512, "odim": 512, "hidden": 256, "n_layer": 12, "bn_dim": 128}
    assert overrides["dvae"]["vq"] == {"dim": 1024}
    assert overrides["vocos"]["backbone"]["init_args"] == {"dim": 512, "intermediate_dim": 1536, "num_layers": 8}
    assert overrides["vocos"]["head"]["init_args"] == {"dim": 512}


def test_full_size_overrides_are_exactly_chattts_defaults() -> None:
    """Applied to ChatTTS's own ``Config()``, the full-size overrides change nothing but the speaker
    statistic: the stand-in is built with the dimensions ChatTTS builds for the released weights."""
    from ChatTTS.config import Config

    overridden = apply_config_overrides(Config(), _without_spk_stat(config_overrides("full", spk_stat="unused")))
    assert dataclasses.asdict(overridden) == dataclasses.asdict(Config())


def test_full_size_gpt_config_is_chattts_gpt() -> None:
    from ChatTTS.config import Config

    llama = gpt_llama_config("full")
    gpt = Config().gpt
    assert llama["model_type"] == "llama"
    assert llama["hidden_size"] == gpt.hidden_size == 768
    assert llama["intermediate_size"] == gpt.intermediate_size
    assert llama["num_attention_heads"] == llama["num_key_value_heads"] == gpt.num_attention_heads
    assert llama["num_hidden_layers"] == gpt.num_hidden_layers == 20
    assert llama["max_position_embeddings"] == gpt.max_position_embeddings


def test_full_size_gpt_has_189m_parameters() -> None:
    """Counted on the meta device, so nothing is allocated. ``embed_tokens`` is left out: ChatTTS
    deletes it right after loading."""
    import torch
    from transformers import LlamaConfig, LlamaModel

    with torch.device("meta"):
        model = LlamaModel(LlamaConfig(**gpt_llama_config("full")))  # type: ignore[no-untyped-call]
    params = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("embed_tokens"))
    assert 185_000_000 < params < 195_000_000


def test_full_size_tokenizer_has_chattts_text_vocabulary() -> None:
    from ChatTTS.config import Config

    assert text_vocab_size("full") == Config().gpt.num_text_tokens == Config().embed.num_text_tokens


@pytest.mark.parametrize("size", CHECKPOINT_SIZES)
def test_every_size_meets_chattts_shape_constraints(size: CheckpointSize) -> None:
    overrides = config_overrides(size, spk_stat="unused")
    llama = gpt_llama_config(size)
    hidden = overrides["gpt"]["hidden_size"]
    assert llama["hidden_size"] == hidden == overrides["embed"]["hidden_size"]
    assert overrides["gpt"]["num_text_tokens"] == overrides["embed"]["num_text_tokens"] == text_vocab_size(size)
    assert overrides["decoder"]["idim"] == overrides["decoder"]["odim"] == hidden // 2
    assert overrides["dvae"]["vq"]["dim"] == 2 * overrides["dvae"]["decoder"]["idim"] == overrides["dvae"]["encoder"]["odim"]
    assert overrides["vocos"]["backbone"]["init_args"]["dim"] == overrides["vocos"]["head"]["init_args"]["dim"]


def test_tiny_size_is_unchanged(tiny_checkpoint_dir: Path) -> None:
    manifest = json.loads((tiny_checkpoint_dir / MANIFEST_NAME).read_text())
    assert manifest["name"] == "tiny-random"
    assert manifest["speaks_noise"] is True
    assert manifest["builder"] == {"version": 1, "seed": 0}
    assert manifest["config_overrides"] == config_overrides("tiny", spk_stat=manifest["config_overrides"]["spk_stat"])
    assert manifest["config_overrides"]["gpt"]["hidden_size"] == 64
    assert sum((tiny_checkpoint_dir / rel).stat().st_size for rel in ASSET_FILES) < 10 * 1024 * 1024


def test_build_random_checkpoint_tiny_reuses_the_tiny_checkpoint(tiny_checkpoint_dir: Path) -> None:
    before = {rel: (tiny_checkpoint_dir / rel).stat().st_mtime_ns for rel in ASSET_FILES}
    assert build_random_checkpoint(tiny_checkpoint_dir, "tiny") == tiny_checkpoint_dir
    assert build_tiny_checkpoint(tiny_checkpoint_dir) == tiny_checkpoint_dir
    assert {rel: (tiny_checkpoint_dir / rel).stat().st_mtime_ns for rel in ASSET_FILES} == before


def test_tiny_checkpoint_loads(tiny_engine: ChatTTSEngine) -> None:
    assert tiny_engine.info.name == "tiny-random"
    assert tiny_engine.info.speaks_noise


def test_unknown_size_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown checkpoint size"):
        build_random_checkpoint(tmp_path / "ckpt", "huge")  # type: ignore[arg-type]
    assert not (tmp_path / "ckpt").exists()
    assert list(tmp_path.iterdir()) == []


def test_builder_writes_special_tokens_map_when_the_tokenizer_save_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tiny_checkpoint_dir: Path
) -> None:
    """transformers 5 (5.17 on the GPU image) no longer writes ``special_tokens_map.json``, which
    ChatTTS 0.2.5's loader hash-checks: the builder writes it itself, byte for byte as transformers
    4.x does, and ChatTTS's own asset check then accepts the checkpoint. Everything else is the real
    code path; only the tokenizer's save is made to behave like transformers 5's."""
    from transformers import BertTokenizerFast

    original = BertTokenizerFast.save_pretrained
    dropped: list[Path] = []

    def save_like_transformers_5(self: Any, save_directory: str, *args: Any, **kwargs: Any) -> Any:
        written = original(self, save_directory, *args, **kwargs)
        special = Path(save_directory) / "special_tokens_map.json"
        if special.exists():
            special.unlink()
            dropped.append(special)
        return tuple(name for name in written if Path(name).name != special.name)

    monkeypatch.setattr(BertTokenizerFast, "save_pretrained", save_like_transformers_5)
    built = build_random_checkpoint(tmp_path / "ckpt", "tiny")
    assert dropped, "the patched save never ran"
    tokenizer_dir = built / "asset" / "tokenizer"
    assert sorted(path.name for path in tokenizer_dir.iterdir()) == [
        "special_tokens_map.json",
        "tokenizer.json",
        "tokenizer_config.json",
    ]
    reference = tiny_checkpoint_dir / "asset" / "tokenizer" / "special_tokens_map.json"
    assert (tokenizer_dir / "special_tokens_map.json").read_bytes() == reference.read_bytes()
    manifest = json.loads((built / MANIFEST_NAME).read_text())
    assert set(manifest["sha256_map"]) == {sha256_key(rel) for rel in ASSET_FILES}

    engine = ChatTTSEngine(dataclasses.replace(TINY_ENGINE_CONFIG, model_source=str(built)))
    info = engine.load()  # Chat.load(source="custom") runs ChatTTS's check_all_assets over all three tokenizer files
    assert info.name == "tiny-random"
    engine.release_memory()
