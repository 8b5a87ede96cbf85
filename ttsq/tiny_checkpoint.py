"""The ``ttsq-model.json`` checkpoint manifest, and a generator for a tiny random-weight checkpoint.

The real ChatTTS weights (about 1.1 GB, from the model hub) cannot be fetched on development or
CI machines, yet the service must be tested against the genuine ``ChatTTS.Chat`` code path:
tokenizer, GPT sampling, DVAE decoder and Vocos vocoder. :func:`build_tiny_checkpoint` writes a
checkpoint with the real file layout and module structure but tiny dimensions (a few MB, built in
seconds, offline) that ``Chat.load(source="custom", ...)`` loads and runs. It speaks noise.

``Chat.load`` builds every module from ``chat.config`` before a strict ``load_state_dict``, and
checks every file against a sha256 map, so a non-standard checkpoint directory carries a manifest
that says which config fields differ from ChatTTS's defaults and what its files hash to.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import os
import shutil
import string
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from ttsq.normalize import CHATTTS_CONTROL_TOKENS

__all__ = [
    "ASSET_FILES",
    "MANIFEST_NAME",
    "ManifestError",
    "apply_config_overrides",
    "build_tiny_checkpoint",
    "compute_sha256_map",
    "missing_asset_files",
    "read_manifest",
    "sha256_key",
]

MANIFEST_NAME = "ttsq-model.json"

ASSET_FILES: tuple[str, ...] = (
    "asset/Decoder.safetensors",
    "asset/DVAE.safetensors",
    "asset/Embed.safetensors",
    "asset/Vocos.safetensors",
    "asset/gpt/config.json",
    "asset/gpt/model.safetensors",
    "asset/tokenizer/special_tokens_map.json",
    "asset/tokenizer/tokenizer_config.json",
    "asset/tokenizer/tokenizer.json",
)
"""Every file ``Chat.load(source="custom")`` hash-checks, relative to the checkpoint directory."""

_BUILDER_VERSION = 1
"""Bumped whenever the generated files change, so cached checkpoints from older code are rebuilt."""

_GPT_HIDDEN = 64
_TINY_GPT_LLAMA_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaModel"],
    "model_type": "llama",
    "hidden_size": _GPT_HIDDEN,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-06,
    "vocab_size": 8,
    "torch_dtype": "float32",
    "use_cache": False,
}
"""The ``asset/gpt/config.json`` that ``LlamaModel.from_pretrained`` reads. ChatTTS deletes the
LLaMA token embedding after loading (it embeds through ``Embed``), so its vocabulary is a stub."""

_COMMON_CJK = (
    "的一是不了人我在有他这为之大来以个中上们到说国和地也子时道出而要于就下得可你年生自会那后能对着事其里所去"
    "行过家十用发天如然作方成者多日都三小军二无同么经法当起与好看学进种将还分此心前面又定见只主没公从己已向手"
    "知最四外给意等再战使实第次长话现正美名相因高点月力王业本明头全五部才由水白问新各爱气口七八九零百千万亿元"
    "角秒今星期号价格电温度负两几少请谢您她它哪谁什怎样何所但果虽应该需道认觉喜欢希望开始结束工习活朋友老师"
    "北京海早午晚间题情东西世界语音合声笑哭坏低快慢旧冷热短远近幺买卖钱块毛店路车站飞机场医院银行公司电脑手"
    "机网络视频图片信息服务客户系统设计问答测试运行完成失败成功错误重新听读写字句词汉英文中秋春夏冬节快乐生日"
    "祝福欢迎光临感谢聊天讲故事今晚明早昨天周末上班下班吃饭喝水茶咖啡米面包肉鱼鸡蛋菜果苹香蕉红黄蓝绿黑色"
)
"""A few hundred frequent Chinese characters, plus every character the zh normalizer emits for
numbers, so Chinese test text becomes real tokens rather than ``[UNK]``."""

_CJK_PUNCTUATION = "，。！？、；：“”‘’（）《》【】…—～"


class ManifestError(ValueError):
    """The ``ttsq-model.json`` manifest is unreadable or names config fields ChatTTS lacks."""


def sha256_key(relative_path: str) -> str:
    """The key ChatTTS's ``res/sha256_map.json`` uses for an asset file.

    ``asset/gpt/model.safetensors`` -> ``sha256_asset_gpt_model_safetensors``.
    """
    *dirs, name = relative_path.split("/")
    return "sha256_" + "".join(f"{d}_" for d in dirs) + name.replace(".", "_")


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def compute_sha256_map(checkpoint_dir: Path) -> dict[str, str]:
    """Hash every asset file, keyed the way ChatTTS's own sha256 map keys them."""
    return {sha256_key(rel): _file_sha256(checkpoint_dir / rel) for rel in ASSET_FILES}


def missing_asset_files(checkpoint_dir: Path) -> list[str]:
    """The asset files ChatTTS needs that ``checkpoint_dir`` lacks (relative paths)."""
    return [rel for rel in ASSET_FILES if not (checkpoint_dir / rel).is_file()]


def read_manifest(checkpoint_dir: Path) -> dict[str, Any] | None:
    """Return the checkpoint's manifest, or ``None`` when the directory has none."""
    path = checkpoint_dir / MANIFEST_NAME
    if not path.is_file():
        return None
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{path}: unreadable manifest: {exc}") from exc
    if not isinstance(manifest, dict):
        raise ManifestError(f"{path}: the manifest must be a JSON object")
    for key, kind in (("config_overrides", dict), ("sha256_map", dict)):
        if key in manifest and not isinstance(manifest[key], kind):
            raise ManifestError(f"{path}: {key!r} must be a JSON object")
    return manifest


def apply_config_overrides(config: Any, overrides: Mapping[str, Any]) -> Any:
    """Return a deep copy of a ChatTTS ``Config`` with nested field overrides applied.

    The copy matters: ChatTTS's config dataclasses use dataclass *instances* as field defaults,
    so every ``Chat()`` in the process shares the same ``GPT``, ``DVAE``, ... objects, and
    assigning to ``chat.config.gpt.hidden_size`` would silently reshape every other Chat too.
    JSON lists become tuples where ChatTTS declares a tuple (``dvae.vq.levels``).
    """
    result = copy.deepcopy(config)
    _apply_in_place(result, overrides, "config")
    return result


def _apply_in_place(node: Any, overrides: Mapping[str, Any], where: str) -> None:
    if not dataclasses.is_dataclass(node):
        raise ManifestError(f"{where} is not a config section; cannot override its fields")
    names = {field.name for field in dataclasses.fields(node)}
    for key, value in overrides.items():
        if key not in names:
            raise ManifestError(f"{where} has no field {key!r} (known: {', '.join(sorted(names))})")
        current = getattr(node, key)
        if isinstance(value, Mapping):
            _apply_in_place(current, value, f"{where}.{key}")
        elif isinstance(current, tuple) and isinstance(value, list):
            setattr(node, key, tuple(value))
        else:
            setattr(node, key, value)


def _tiny_config_overrides(num_text_tokens: int, spk_stat: str) -> dict[str, Any]:
    """Config fields that differ from ChatTTS's defaults for the tiny shapes.

    Constraints (from ChatTTS's module code): decoder in/out dim = GPT hidden / 2; DVAE vq dim =
    2 x DVAE decoder idim = encoder odim; groups x residual levels of the quantizer = num_vq (4)
    and the product of its levels = num_audio_tokens - 1 (625), both left at their defaults;
    100 mel channels, n_fft and hop length stay fixed so one audio token is still 21.3 ms.
    """
    return {
        "gpt": {
            "hidden_size": _GPT_HIDDEN,
            "intermediate_size": _TINY_GPT_LLAMA_CONFIG["intermediate_size"],
            "num_attention_heads": _TINY_GPT_LLAMA_CONFIG["num_attention_heads"],
            "num_hidden_layers": _TINY_GPT_LLAMA_CONFIG["num_hidden_layers"],
            "num_text_tokens": num_text_tokens,
        },
        "embed": {"hidden_size": _GPT_HIDDEN, "num_text_tokens": num_text_tokens},
        "decoder": {"idim": _GPT_HIDDEN // 2, "odim": _GPT_HIDDEN // 2, "hidden": 32, "n_layer": 1, "bn_dim": 16},
        "dvae": {
            "encoder": {"idim": 32, "odim": 64, "hidden": 32, "n_layer": 1, "bn_dim": 16},
            "decoder": {"idim": 32, "odim": 32, "hidden": 32, "n_layer": 1, "bn_dim": 16},
            "vq": {"dim": 64},
        },
        "vocos": {
            "backbone": {"init_args": {"dim": 32, "intermediate_dim": 64, "num_layers": 1}},
            "head": {"init_args": {"dim": 32}},
        },
        "spk_stat": spk_stat,
    }


def _tokenizer_vocab() -> list[str]:
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    singles = list(string.ascii_lowercase + string.digits + string.punctuation)
    continuations = [f"##{c}" for c in string.ascii_lowercase + string.digits]
    words = ["the", "and", "you", "have", "hello", "world", "warm", "up", "is", "a", "to", "of", "in", "it"]
    cjk = list(_COMMON_CJK + _CJK_PUNCTUATION)
    return list(dict.fromkeys(specials + singles + continuations + words + cjk))


def _write_tokenizer(target: Path) -> int:
    """Write a WordPiece ``BertTokenizerFast`` with ChatTTS's control tokens; return its length.

    The control tokens are added un-normalized, in ChatTTS's order, because ChatTTS looks up
    ``[spk_emb]``, ``[break_0]`` and ``[Ebreak]`` by name and the lower-casing normalizer must not
    touch ``[Stts]`` and friends.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import BertTokenizerFast

    vocab = {token: index for index, token in enumerate(_tokenizer_vocab())}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    tokenizer = BertTokenizerFast(
        tokenizer_object=backend,
        do_lower_case=True,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
        tokenize_chinese_chars=True,
        strip_accents=False,
    )
    tokenizer.add_tokens([AddedToken(token, normalized=False) for token in CHATTTS_CONTROL_TOKENS])
    tokenizer.save_pretrained(str(target), legacy_format=False)
    for extra in set(os.listdir(target)) - {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}:
        (target / extra).unlink()
    return len(tokenizer)


def _random_spk_stat(generator: Any) -> str:
    """Speaker statistics: ``2 x hidden`` float16 values (std, then mean), base16384-encoded."""
    import numpy as np
    import pybase16384 as b14
    import torch

    std = torch.rand(_GPT_HIDDEN, generator=generator) * 0.5 + 0.5
    mean = torch.randn(_GPT_HIDDEN, generator=generator) * 0.1
    stat = torch.cat([std, mean]).to(torch.float16).numpy().astype(np.float16)
    encoded: str = b14.encode_to_string(stat.tobytes())
    return encoded


def _save_state(module: Any, path: Path) -> None:
    from safetensors.torch import save_file

    state = {name: tensor.detach().contiguous().clone() for name, tensor in module.state_dict().items()}
    save_file(state, str(path), metadata={"format": "pt"})


@contextmanager
def _seeded_torch(seed: int) -> Iterator[None]:
    """Seed torch's global RNG for module initialisation without disturbing the caller's RNG."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _write_weights(asset: Path, seed: int, overrides: Mapping[str, Any]) -> None:
    """Instantiate every module exactly as ``Chat._load`` does, from the overridden config, and save it."""
    import torch
    from ChatTTS.config import Config
    from ChatTTS.model import DVAE, Embed
    from transformers import LlamaConfig, LlamaModel
    from vocos import Vocos
    from vocos.pretrained import instantiate_class

    config = apply_config_overrides(Config(), overrides)
    asdict = dataclasses.asdict
    with _seeded_torch(seed), torch.no_grad():
        vocos = Vocos(
            feature_extractor=instantiate_class(args=(), init=asdict(config.vocos.feature_extractor)),
            backbone=instantiate_class(args=(), init=asdict(config.vocos.backbone)),
            head=instantiate_class(args=(), init=asdict(config.vocos.head)),
        )
        _save_state(vocos, asset / "Vocos.safetensors")
        dvae = DVAE(
            decoder_config=asdict(config.dvae.decoder),
            encoder_config=asdict(config.dvae.encoder),
            vq_config=asdict(config.dvae.vq),
            dim=config.dvae.decoder.idim,
        )
        _save_state(dvae, asset / "DVAE.safetensors")
        decoder = DVAE(decoder_config=asdict(config.decoder), dim=config.decoder.idim)
        _save_state(decoder, asset / "Decoder.safetensors")
        embed = Embed(
            config.embed.hidden_size,
            config.embed.num_audio_tokens,
            config.embed.num_text_tokens,
            config.embed.num_vq,
        )
        _save_state(embed, asset / "Embed.safetensors")
        gpt_dir = asset / "gpt"
        gpt_dir.mkdir()
        (gpt_dir / "config.json").write_text(json.dumps(_TINY_GPT_LLAMA_CONFIG, indent=2, sort_keys=True) + "\n")
        _save_state(LlamaModel(LlamaConfig(**_TINY_GPT_LLAMA_CONFIG)), gpt_dir / "model.safetensors")


def _is_complete(checkpoint_dir: Path, seed: int) -> bool:
    """Whether ``checkpoint_dir`` already holds this builder's checkpoint for ``seed``, intact."""
    try:
        manifest = read_manifest(checkpoint_dir)
    except ManifestError:
        return False
    if manifest is None or manifest.get("builder") != {"version": _BUILDER_VERSION, "seed": seed}:
        return False
    if missing_asset_files(checkpoint_dir):
        return False
    return bool(manifest.get("sha256_map") == compute_sha256_map(checkpoint_dir))


def _build_into(staging: Path, seed: int) -> None:
    import torch

    asset = staging / "asset"
    (asset / "tokenizer").mkdir(parents=True)
    num_text_tokens = _write_tokenizer(asset / "tokenizer")
    generator = torch.Generator().manual_seed(seed)
    overrides = _tiny_config_overrides(num_text_tokens, _random_spk_stat(generator))
    _write_weights(asset, seed, overrides)
    manifest = {
        "name": "tiny-random",
        "speaks_noise": True,
        "builder": {"version": _BUILDER_VERSION, "seed": seed},
        "config_overrides": overrides,
        "sha256_map": compute_sha256_map(staging),
    }
    (staging / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    _make_world_readable(staging)


def _make_world_readable(root: Path) -> None:
    """``mkdtemp`` and safetensors create private (0700/0600) entries; a model directory is shared."""
    root.chmod(0o755)
    for path in root.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def build_tiny_checkpoint(out_dir: Path, seed: int = 0) -> Path:
    """Generate (or reuse) a tiny random-weight ChatTTS checkpoint in ``out_dir``; return ``out_dir``.

    Deterministic for a given seed and library versions. An intact checkpoint for the same seed is
    reused after hashing its files (milliseconds). A new one is built in a sibling temporary
    directory and renamed into place, so concurrent builders (parallel test processes, several
    workers) never see a half-written checkpoint: the first rename wins and the others discard
    their copy.
    """
    out_dir = Path(out_dir)
    if _is_complete(out_dir, seed):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.build-", dir=out_dir.parent))
    try:
        _build_into(staging, seed)
        for _attempt in range(3):
            try:
                os.rename(staging, out_dir)
                return out_dir
            except OSError:
                if _is_complete(out_dir, seed):
                    return out_dir
                _move_aside(out_dir)
        raise RuntimeError(f"could not move the tiny checkpoint into {out_dir}")
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _move_aside(stale: Path) -> None:
    """Remove a stale or broken checkpoint directory without racing another remover."""
    trash = Path(tempfile.mkdtemp(prefix=f".{stale.name}.stale-", dir=stale.parent))
    with suppress(OSError):
        os.rename(stale, trash / stale.name)
    shutil.rmtree(trash, ignore_errors=True)
