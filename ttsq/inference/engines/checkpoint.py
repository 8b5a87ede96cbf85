"""The ``ttsq-model.json`` checkpoint manifest, and a generator for random-weight checkpoints.

The real ChatTTS weights (about 1.1 GB, from the model hub) cannot be fetched on development or
CI machines, yet the service must be tested against the genuine ``ChatTTS.Chat`` code path:
tokenizer, GPT sampling, DVAE decoder and Vocos vocoder. :func:`build_random_checkpoint` writes a
checkpoint with the real file layout and module structure that ``Chat.load(source="custom", ...)``
loads and runs, in one of two sizes. Both speak noise:

* ``"tiny"`` (:func:`build_tiny_checkpoint`): tiny dimensions, about 3 MB, built in seconds; what
  the tests and ``MODEL=tiny`` use.
* ``"full"``: ChatTTS's real dimensions (a 20-layer, 768-wide GPT of about 189M parameters, the
  real DVAE, decoder, Vocos and a 21,178-token text vocabulary), about 1.1 GB. It costs what the
  real model costs on a CPU, so benchmarks can measure latency without the licensed weights.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ttsq.domain.text import CHATTTS_CONTROL_TOKENS

__all__ = [
    "ASSET_FILES",
    "CHECKPOINT_SIZES",
    "MANIFEST_NAME",
    "CheckpointSize",
    "ManifestError",
    "apply_config_overrides",
    "build_random_checkpoint",
    "build_tiny_checkpoint",
    "compute_sha256_map",
    "config_overrides",
    "gpt_llama_config",
    "missing_asset_files",
    "read_manifest",
    "sha256_key",
    "text_vocab_size",
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

CheckpointSize = Literal["tiny", "full"]
CHECKPOINT_SIZES: tuple[CheckpointSize, ...] = ("tiny", "full")


@dataclass(frozen=True)
class _SizeSpec:
    """Everything that differs between the generated checkpoint sizes."""

    name: str
    """The manifest's ``name``: what logs, ``/readyz`` and responses report."""
    hidden: int
    """GPT hidden size; the decoder's in/out dim is half of it, the speaker statistic twice it."""
    llama: Mapping[str, Any]
    """The ``asset/gpt/config.json`` that ``LlamaModel.from_pretrained`` reads."""
    modules: Mapping[str, Any]
    """Config overrides for the decoder, DVAE and Vocos (the GPT and embed ones follow ``llama``)."""
    text_vocab_base: int | None
    """Pad the tokenizer's WordPiece vocabulary to this many entries before the 50 control tokens
    are added (``None``: no padding), so the text embedding and head get ChatTTS's real shape."""


def _llama(hidden: int, intermediate: int, heads: int, layers: int) -> dict[str, Any]:
    """A LLaMA config for the GPT. Its vocabulary is a stub on purpose: ChatTTS embeds text and
    audio through ``Embed`` and deletes ``embed_tokens`` right after loading, so a real-sized
    table would only add bytes to read (24.6M parameters at ``LlamaConfig``'s default 32,000) and never any compute."""
    return {
        "architectures": ["LlamaModel"],
        "model_type": "llama",
        "hidden_size": hidden,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": heads,
        "num_hidden_layers": layers,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-06,
        "vocab_size": 8,
        "torch_dtype": "float32",
        "use_cache": False,
    }


_SIZES: dict[str, _SizeSpec] = {
    "tiny": _SizeSpec(
        name="tiny-random",
        hidden=64,
        llama=_llama(hidden=64, intermediate=128, heads=2, layers=2),
        modules={
            "decoder": {"idim": 32, "odim": 32, "hidden": 32, "n_layer": 1, "bn_dim": 16},
            "dvae": {
                "encoder": {"idim": 32, "odim": 64, "hidden": 32, "n_layer": 1, "bn_dim": 16},
                "decoder": {"idim": 32, "odim": 32, "hidden": 32, "n_layer": 1, "bn_dim": 16},
                "vq": {"dim": 64},
            },
            "vocos": {
                "backbone": {"init_args": {"dim": 32, "intermediate_dim": 64, "num_layers": 1}},
                "head": {"init_args": {"dim": 32}},
            },
        },
        text_vocab_base=None,
    ),
    # ChatTTS 0.2.5's own defaults (``ChatTTS.config.Config``), which describe the released
    # weights. They are written out in full rather than left to the defaults so that the manifest
    # says what the checkpoint is, and stays right if a later ChatTTS changes its defaults.
    "full": _SizeSpec(
        name="full-random",
        hidden=768,
        llama=_llama(hidden=768, intermediate=3072, heads=12, layers=20),
        modules={
            "decoder": {"idim": 384, "odim": 384, "hidden": 512, "n_layer": 12, "bn_dim": 128},
            "dvae": {
                "encoder": {"idim": 512, "odim": 1024, "hidden": 256, "n_layer": 12, "bn_dim": 128},
                "decoder": {"idim": 512, "odim": 512, "hidden": 256, "n_layer": 12, "bn_dim": 128},
                "vq": {"dim": 1024},
            },
            "vocos": {
                "backbone": {"init_args": {"dim": 512, "intermediate_dim": 1536, "num_layers": 8}},
                "head": {"init_args": {"dim": 512}},
            },
        },
        # bert-base-chinese's 21,128 WordPiece entries + 50 control tokens = ChatTTS's 21,178.
        text_vocab_base=21128,
    ),
}


def gpt_llama_config(size: CheckpointSize = "tiny") -> dict[str, Any]:
    """The ``asset/gpt/config.json`` contents for a checkpoint size (no files touched)."""
    return copy.deepcopy(dict(_spec(size).llama))


def _spec(size: str) -> _SizeSpec:
    try:
        return _SIZES[size]
    except KeyError:
        raise ValueError(f"unknown checkpoint size {size!r} (known: {', '.join(CHECKPOINT_SIZES)})") from None


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


def config_overrides(size: CheckpointSize, spk_stat: str) -> dict[str, Any]:
    """The manifest's ``config_overrides`` for a checkpoint size (no files touched).

    Constraints (from ChatTTS's module code): decoder in/out dim = GPT hidden / 2; DVAE vq dim =
    2 x DVAE decoder idim = encoder odim; groups x residual levels of the quantizer = num_vq (4)
    and the product of its levels = num_audio_tokens - 1 (625), both left at their defaults;
    100 mel channels, n_fft and hop length stay fixed so one audio token is still 21.3 ms.
    ``gpt.num_text_tokens`` must equal the tokenizer's length (:func:`text_vocab_size`).
    ``spk_stat`` is the speaker statistic, ``2 x hidden`` float16 values, base16384-encoded.
    """
    spec = _spec(size)
    num_text_tokens = text_vocab_size(size)
    overrides = copy.deepcopy(dict(spec.modules))
    overrides["gpt"] = {
        "hidden_size": spec.hidden,
        "intermediate_size": spec.llama["intermediate_size"],
        "num_attention_heads": spec.llama["num_attention_heads"],
        "num_hidden_layers": spec.llama["num_hidden_layers"],
        "num_text_tokens": num_text_tokens,
    }
    overrides["embed"] = {"hidden_size": spec.hidden, "num_text_tokens": num_text_tokens}
    overrides["spk_stat"] = spk_stat
    return overrides


def _tokenizer_vocab(size: CheckpointSize) -> list[str]:
    """WordPiece entries: enough ASCII and frequent CJK for test text to become real tokens,
    padded with ``[unusedN]`` entries for the full size so the text tables get the real shape."""
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    singles = list(string.ascii_lowercase + string.digits + string.punctuation)
    continuations = [f"##{c}" for c in string.ascii_lowercase + string.digits]
    words = ["the", "and", "you", "have", "hello", "world", "warm", "up", "is", "a", "to", "of", "in", "it"]
    cjk = list(_COMMON_CJK + _CJK_PUNCTUATION)
    vocab = list(dict.fromkeys(specials + singles + continuations + words + cjk))
    base = _spec(size).text_vocab_base
    if base is not None:
        vocab += [f"[unused{index}]" for index in range(base - len(vocab))]
    return vocab


def text_vocab_size(size: CheckpointSize) -> int:
    """The generated tokenizer's length (WordPiece entries + ChatTTS's control tokens), without building it."""
    vocab = set(_tokenizer_vocab(size))
    return len(vocab) + len({token for token in CHATTTS_CONTROL_TOKENS if token not in vocab})


_SPECIAL_TOKENS: dict[str, str] = {
    "cls_token": "[CLS]",
    "mask_token": "[MASK]",
    "pad_token": "[PAD]",
    "sep_token": "[SEP]",
    "unk_token": "[UNK]",
}
"""The BERT special tokens the generated tokenizer is built with (and ``special_tokens_map.json`` lists)."""

_TOKENIZER_FILES = frozenset({"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
"""What ``asset/tokenizer`` holds: the three files ChatTTS hash-checks (:data:`ASSET_FILES`), nothing else."""


def _special_tokens_map_json() -> str:
    """``special_tokens_map.json`` exactly as transformers 4.x's ``save_pretrained`` writes it for this tokenizer."""
    return json.dumps(_SPECIAL_TOKENS, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def _write_tokenizer(target: Path, size: CheckpointSize) -> int:
    """Write a WordPiece ``BertTokenizerFast`` with ChatTTS's control tokens; return its length.

    The control tokens are added un-normalized, in ChatTTS's order, because ChatTTS looks up
    ``[spk_emb]``, ``[break_0]`` and ``[Ebreak]`` by name and the lower-casing normalizer must not
    touch ``[Stts]`` and friends.

    transformers 5 no longer writes ``special_tokens_map.json`` (the special tokens live in
    ``tokenizer_config.json`` alone), but ChatTTS 0.2.5's loader refuses a checkpoint without it:
    ``check_all_assets`` hash-checks it with the other two tokenizer files. When the save did not
    write it, it is written here, byte for byte as transformers 4.x writes it, so a checkpoint's
    file set (and this file's hash) is the same whichever transformers built it.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import BertTokenizerFast

    vocab = {token: index for index, token in enumerate(_tokenizer_vocab(size))}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    backend.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True, strip_accents=False, lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    tokenizer = BertTokenizerFast(
        tokenizer_object=backend,
        do_lower_case=True,
        tokenize_chinese_chars=True,
        strip_accents=False,
        **_SPECIAL_TOKENS,
    )
    tokenizer.add_tokens([AddedToken(token, normalized=False) for token in CHATTTS_CONTROL_TOKENS])
    tokenizer.save_pretrained(str(target), legacy_format=False)
    for extra in set(os.listdir(target)) - _TOKENIZER_FILES:
        (target / extra).unlink()
    special_tokens_map = target / "special_tokens_map.json"
    if not special_tokens_map.is_file():
        special_tokens_map.write_text(_special_tokens_map_json(), encoding="utf-8")
    return len(tokenizer)


def _random_spk_stat(generator: Any, hidden: int) -> str:
    """Speaker statistics: ``2 x hidden`` float16 values (std, then mean), base16384-encoded.

    Random for every size, the full one included: ChatTTS's default ``spk_stat`` comes from the
    trained model, and a random-weight checkpoint carries nothing of it.
    """
    import numpy as np
    import pybase16384 as b14
    import torch

    std = torch.rand(hidden, generator=generator) * 0.5 + 0.5
    mean = torch.randn(hidden, generator=generator) * 0.1
    stat = torch.cat([std, mean]).to(torch.float16).numpy().astype(np.float16)
    encoded: str = b14.encode_to_string(stat.tobytes())
    return encoded


def _save_state(module: Any, path: Path) -> None:
    """Write a module's state without copying it: safetensors writes straight from the tensors'
    memory, so the full-size GPT (755 MB) is held once, not two or three times."""
    from safetensors.torch import save_file

    state = {name: tensor.detach().contiguous() for name, tensor in module.state_dict().items()}
    save_file(state, str(path), metadata={"format": "pt"})


@contextmanager
def _seeded_torch(seed: int) -> Iterator[None]:
    """Seed torch's global RNG for module initialisation without disturbing the caller's RNG."""
    import torch

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


def _write_weights(asset: Path, seed: int, overrides: Mapping[str, Any], llama: Mapping[str, Any]) -> None:
    """Instantiate every module exactly as ``Chat._load`` does, from the overridden config, and save it.

    One module at a time, each dropped once written, so the build's peak memory is the largest
    module (the GPT) rather than the whole model. The order fixes which random numbers each
    module draws, so it never changes.
    """
    import torch
    from ChatTTS.config import Config
    from ChatTTS.model import DVAE, Embed
    from transformers import LlamaConfig, LlamaModel
    from vocos import Vocos
    from vocos.pretrained import instantiate_class

    config = apply_config_overrides(Config(), overrides)
    asdict = dataclasses.asdict

    def vocos() -> Any:
        return Vocos(
            feature_extractor=instantiate_class(args=(), init=asdict(config.vocos.feature_extractor)),
            backbone=instantiate_class(args=(), init=asdict(config.vocos.backbone)),
            head=instantiate_class(args=(), init=asdict(config.vocos.head)),
        )

    def dvae() -> Any:
        return DVAE(
            decoder_config=asdict(config.dvae.decoder),
            encoder_config=asdict(config.dvae.encoder),
            vq_config=asdict(config.dvae.vq),
            dim=config.dvae.decoder.idim,
        )

    def decoder() -> Any:
        return DVAE(decoder_config=asdict(config.decoder), dim=config.decoder.idim)

    def embed() -> Any:
        return Embed(config.embed.hidden_size, config.embed.num_audio_tokens, config.embed.num_text_tokens, config.embed.num_vq)

    with _seeded_torch(seed), torch.no_grad():
        for name, make in (("Vocos", vocos), ("DVAE", dvae), ("Decoder", decoder), ("Embed", embed)):
            _save_state(make(), asset / f"{name}.safetensors")
        gpt_dir = asset / "gpt"
        gpt_dir.mkdir()
        (gpt_dir / "config.json").write_text(json.dumps(dict(llama), indent=2, sort_keys=True) + "\n")
        _save_state(LlamaModel(LlamaConfig(**llama)), gpt_dir / "model.safetensors")


def _builder_record(size: CheckpointSize, seed: int) -> dict[str, Any]:
    """The manifest's ``builder`` entry. The tiny one predates sizes and is kept as it was, so
    tiny checkpoints built by earlier code are still recognised and reused."""
    record: dict[str, Any] = {"version": _BUILDER_VERSION, "seed": seed}
    if size != "tiny":
        record["size"] = size
    return record


def _is_complete(checkpoint_dir: Path, size: CheckpointSize, seed: int) -> bool:
    """Whether ``checkpoint_dir`` already holds this builder's checkpoint for ``size`` and ``seed``, intact."""
    try:
        manifest = read_manifest(checkpoint_dir)
    except ManifestError:
        return False
    if manifest is None or manifest.get("builder") != _builder_record(size, seed):
        return False
    if missing_asset_files(checkpoint_dir):
        return False
    return bool(manifest.get("sha256_map") == compute_sha256_map(checkpoint_dir))


def _build_into(staging: Path, size: CheckpointSize, seed: int) -> None:
    import torch

    spec = _spec(size)
    asset = staging / "asset"
    (asset / "tokenizer").mkdir(parents=True)
    num_text_tokens = _write_tokenizer(asset / "tokenizer", size)
    if num_text_tokens != text_vocab_size(size):
        raise RuntimeError(f"the generated tokenizer has {num_text_tokens} tokens, expected {text_vocab_size(size)}")
    generator = torch.Generator().manual_seed(seed)
    overrides = config_overrides(size, _random_spk_stat(generator, spec.hidden))
    _write_weights(asset, seed, overrides, spec.llama)
    manifest = {
        "name": spec.name,
        "speaks_noise": True,
        "builder": _builder_record(size, seed),
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


def build_random_checkpoint(out_dir: Path, size: CheckpointSize = "tiny", seed: int = 0) -> Path:
    """Generate (or reuse) a random-weight ChatTTS checkpoint of ``size`` in ``out_dir``; return ``out_dir``.

    Deterministic for a given size, seed and library versions. An intact checkpoint for the same
    size and seed is reused after hashing its files (milliseconds for tiny, a few seconds for
    full). A new one is built in a sibling temporary directory and renamed into place, so
    concurrent builders (parallel test processes, several workers) never see a half-written
    checkpoint: the first rename wins and the others discard their copy.
    """
    _spec(size)
    out_dir = Path(out_dir)
    if _is_complete(out_dir, size, seed):
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.build-", dir=out_dir.parent))
    try:
        _build_into(staging, size, seed)
        for _attempt in range(3):
            try:
                os.rename(staging, out_dir)
                return out_dir
            except OSError:
                if _is_complete(out_dir, size, seed):
                    return out_dir
                _move_aside(out_dir)
        raise RuntimeError(f"could not move the {size} checkpoint into {out_dir}")
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def build_tiny_checkpoint(out_dir: Path, seed: int = 0) -> Path:
    """The tiny random-weight checkpoint (a few MB, seconds): ``build_random_checkpoint(out_dir, "tiny", seed)``."""
    return build_random_checkpoint(out_dir, "tiny", seed)


def _move_aside(stale: Path) -> None:
    """Remove a stale or broken checkpoint directory without racing another remover."""
    trash = Path(tempfile.mkdtemp(prefix=f".{stale.name}.stale-", dir=stale.parent))
    with suppress(OSError):
        os.rename(stale, trash / stale.name)
    shutil.rmtree(trash, ignore_errors=True)
