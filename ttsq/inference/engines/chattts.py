"""The inference engine: text and voice parameters in, 24 kHz float32 audio out.

It wraps one ``ChatTTS.Chat`` and knows nothing of queues or HTTP. Everything that makes ChatTTS
0.2.5 safe to run as a long-lived service is decided here:

* ChatTTS is not thread-safe (one RNG, one interrupt flag, mutable default parameter objects),
  so every call runs under one lock with freshly built parameter objects.
* Its config dataclasses share their nested default instances between all ``Chat`` objects, so
  a checkpoint's config overrides are applied to a private deep copy.
* A chunk whose first sampled token is the end token makes ChatTTS return *no audio for the whole
  batch* (and the refine step raise ``StopIteration``), so at least one token is always forced.
* It silently drops digits, so text is normalized to words first (:mod:`ttsq.inference.engines.normalize`).

torch and ChatTTS are imported lazily so that the worker can configure the CUDA allocator
before torch loads, and so that importing this module for its types stays cheap.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.batching import Probe, batch_key, bucket_for
from ttsq.domain.blends import blend_embedding
from ttsq.domain.text import detect_language, split_sentences
from ttsq.inference.base import (
    Batcher,
    ChunkAudio,
    DeviceMemory,
    EngineStats,
    ModelInfo,
    ModelLoadError,
    OutOfMemory,
    PermanentError,
    SynthesisRequest,
    TransientError,
)
from ttsq.inference.engines.checkpoint import (
    ASSET_FILES,
    ManifestError,
    apply_config_overrides,
    compute_sha256_map,
    missing_asset_files,
    read_manifest,
    sha256_key,
)
from ttsq.inference.engines.normalize import TextNormalizer
from ttsq.inference.engines.speaker_string import encode_speaker

if TYPE_CHECKING:
    import torch

    from ttsq.inference.gpt.layers import Precision

__all__ = ["HUB_REPO", "WARMUP_TOKENS", "ChatTTSEngine", "EngineConfig"]

log = logging.getLogger(__name__)

HUB_REPO = "2Noise/ChatTTS"
WARMUP_TOKENS = 16
"""Tokens a warm-up synthesis runs to (both engines; the reference's ``prepare`` too). Warm-up exists to pay one-off
costs (numba JIT, CUDA context, kernel selection, a compiled model's graphs, which ChatTTS compiles with dynamic
shapes); length adds nothing."""


Dtype = Literal["float32", "bfloat16", "float16"]


@dataclass(frozen=True)
class EngineConfig:
    """How to load and run the model. Built from settings by ``settings.py``."""

    model_source: str
    """``"hub"`` (download 2Noise/ChatTTS) or a checkpoint directory."""
    device: str | None
    """``"cpu"``, ``"cuda"``, ``"cuda:N"``; ``None`` picks CUDA when available."""
    cpu_threads: int
    compile: bool
    max_chunk_chars: int
    max_new_token: int
    min_new_token: int
    refine_max_new_token: int
    normalize_text: bool
    gpt_dtype: Dtype
    decoder_dtype: Dtype
    max_reference_s: float
    """Longest reference recording whose speaker prompt ttsq's decoder keeps room for (``MAX_REFERENCE_S``)."""
    cpu_packed_weights: bool
    """ttsq's decoder on a CPU in float32: the GPT's projections and heads packed once for oneDNN (``CPU_PACKED_WEIGHTS``)."""
    precision: Precision
    """What ttsq's decoder's GPT matmuls compute in on a CPU (``PRECISION``; :data:`ttsq.inference.gpt.layers.Precision`)."""
    warmup_text: str = "warm up."


class _DropExpectedWarnings(logging.Filter):
    """Drop ChatTTS warnings about characters it strips on every request by design (digits, '?')."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("found invalid characters")


def _chattts_logger() -> logging.Logger:
    """A logger for ChatTTS that keeps warnings and errors but not its per-step INFO chatter."""
    logger = logging.getLogger("ttsq.chattts")
    logger.setLevel(logging.WARNING)
    if not any(isinstance(f, _DropExpectedWarnings) for f in logger.filters):
        logger.addFilter(_DropExpectedWarnings())
    return logger


def _cache_jit_kernels(module: Any) -> None:
    """Keep the numba kernels of ``module`` (ChatTTS's text normalizer) in numba's on-disk cache.

    ChatTTS declares them ``@jit(nopython=True)`` without ``cache=True``, so every process compiled them
    again on its first request (the warm-up): an eighth of the CPU a worker start costs (BENCHMARKS.md,
    "Measured once"), paid again by every restart and every worker the tests start. ``enable_caching`` is
    what ``cache=True`` does: the machine code is kept where numba finds a writable place (beside the
    package, ``NUMBA_CACHE_DIR``, or the user's cache directory) and numba itself discards it when the
    source, numba or the CPU changes. Where there is no such place (a read-only image) nothing changes:
    each process compiles them, as before.
    """
    from numba.core.dispatcher import Dispatcher

    for name, kernel in vars(module).items():
        if isinstance(kernel, Dispatcher):
            try:
                kernel.enable_caching()
            except RuntimeError as exc:  # numba: "no locator available" (nowhere writable)
                log.debug("numba kernel %s is compiled per process: %s", name, exc)


def _cast_calls(module: Any, method: str, dtype: Any) -> None:
    """Make ``module.method`` take its floating-point tensor arguments in ``dtype`` and return float32."""
    import torch

    original = getattr(module, method)

    def cast(value: Any) -> Any:
        return value.to(dtype) if isinstance(value, torch.Tensor) and value.is_floating_point() else value

    def call(*args: Any, **kwargs: Any) -> Any:
        result = original(*(cast(a) for a in args), **{k: cast(v) for k, v in kwargs.items()})
        return result.float() if isinstance(result, torch.Tensor) and result.is_floating_point() else result

    setattr(module, method, call)


class ChatTTSEngine:
    """One ChatTTS model replica. Blocking; meant to be driven from one inference thread."""

    def __init__(self, config: EngineConfig) -> None:
        if config.max_new_token < 1:
            raise ValueError("max_new_token must be at least 1")
        if config.min_new_token > config.max_new_token:
            raise ValueError("min_new_token must not exceed max_new_token")
        self.config = config
        self._normalizer = TextNormalizer(isolated=True) if config.normalize_text else None
        self._lock = threading.Lock()
        self._chat: Any = None
        self._buckets: tuple[int, ...] = ()
        self._info: ModelInfo | None = None
        self._device = ""

    # ---- loading --------------------------------------------------------------------------

    def load(self) -> ModelInfo:
        """Load the model (blocking); calling it again on a loaded engine returns the same info."""
        with self._lock:
            if self._info is not None:
                return self._info
            import torch

            device = self.config.device or ("cuda" if torch.cuda.is_available() else "cpu")
            torch_device = torch.device(device)
            if torch_device.type == "cpu":
                torch.set_num_threads(self.config.cpu_threads)
            if self.config.model_source == "hub":
                chat, info = self._load_hub(torch_device)
            else:
                chat, info = self._load_directory(Path(self.config.model_source), torch_device)
            self._apply_dtypes(chat, torch_device)
            self._chat, self._info, self._device = chat, info, str(torch_device)
            log.info("model %s loaded from %s on %s", info.name, info.source, info.device)
            return info

    def _apply_dtypes(self, chat: Any, device: torch.device) -> None:
        """Half precision from the weights themselves (``GPT_DTYPE``, ``DECODER_DTYPE``), not autocast.

        On an H200, ``torch.autocast(bfloat16)`` around a call made batch 1 six times slower: in a
        decode loop bound by kernel launches the cast kernels cost more than the cheaper matmuls
        save. ChatTTS casts the GPT's inputs to its weights' dtype itself; the decoder and the
        vocoder are handed float32 tensors, so their calls cast inputs to their dtype and their
        outputs back to float32 (numpy has no bfloat16).
        """
        import torch

        gpt_dtype, decoder_dtype = getattr(torch, self.config.gpt_dtype), getattr(torch, self.config.decoder_dtype)
        if torch.float16 in (gpt_dtype, decoder_dtype) and device.type != "cuda":
            raise ModelLoadError("float16 needs a CUDA device; use bfloat16 or float32 on a CPU")
        if gpt_dtype is not torch.float32:
            chat.gpt.to(gpt_dtype)
        if decoder_dtype is not torch.float32:
            for module, method in ((chat.decoder, "forward"), (chat.dvae, "forward"), (chat.vocos, "decode")):
                module.to(decoder_dtype)
                _cast_calls(module, method, decoder_dtype)

    def _new_chat(self) -> Any:
        import ChatTTS
        import ChatTTS.norm

        _cache_jit_kernels(ChatTTS.norm)
        return ChatTTS.Chat(logger=_chattts_logger())

    def _load_hub(self, device: torch.device) -> tuple[Any, ModelInfo]:
        chat = self._new_chat()
        try:
            ok = chat.load(source="huggingface", device=device, compile=self.config.compile)
        except Exception as exc:
            raise ModelLoadError(f"loading {HUB_REPO} from the model hub failed: {exc}") from exc
        if not ok:
            raise ModelLoadError(
                f"could not download or load {HUB_REPO} from the model hub (is the hub reachable? "
                "offline, point model_source at a checkpoint directory instead)"
            )
        return chat, ModelInfo(name=HUB_REPO, source="hub", speaks_noise=False, device=str(device))

    def _load_directory(self, path: Path, device: torch.device) -> tuple[Any, ModelInfo]:
        """Load a checkpoint directory through ChatTTS's hash-checked ``source="custom"`` path.

        With a ``ttsq-model.json`` manifest, its config overrides and hash map replace ChatTTS's
        before anything is built; without one, the files must be the genuine ChatTTS weights.
        ``source="local"`` is never used: on a hash mismatch it renames files to ``.bak`` and tries
        to download a helper binary.
        """
        if not path.is_dir():
            raise ModelLoadError(f"model directory {path} does not exist")
        missing = missing_asset_files(path)
        if missing:
            raise ModelLoadError(f"model directory {path} is incomplete: missing {', '.join(missing)}")
        try:
            manifest = read_manifest(path)
        except ManifestError as exc:
            raise ModelLoadError(str(exc)) from exc

        chat = self._new_chat()
        name, speaks_noise = path.name, False
        if manifest is not None:
            try:
                chat.config = apply_config_overrides(chat.config, manifest.get("config_overrides", {}))
            except ManifestError as exc:
                raise ModelLoadError(f"{path}: {exc}") from exc
            sha256_map = manifest.get("sha256_map")
            if not isinstance(sha256_map, dict):
                raise ModelLoadError(f"{path}: the manifest has no sha256_map")
            chat.sha256_map = dict(sha256_map)
            name = str(manifest.get("name", name))
            speaks_noise = bool(manifest.get("speaks_noise", False))

        try:
            ok = chat.load(source="custom", custom_path=str(path), device=device, compile=self.config.compile)
        except Exception as exc:
            raise ModelLoadError(f"ChatTTS could not build the model from {path}: {type(exc).__name__}: {exc}") from exc
        if not ok:
            raise ModelLoadError(self._explain_refusal(path, chat.sha256_map))
        return chat, ModelInfo(name=name, source="directory", speaks_noise=speaks_noise, device=str(device))

    @staticmethod
    def _explain_refusal(path: Path, expected: dict[str, str]) -> str:
        actual = compute_sha256_map(path)
        mismatched = [rel for rel in ASSET_FILES if expected.get(sha256_key(rel)) != actual[sha256_key(rel)]]
        if mismatched:
            return (
                f"model directory {path} failed its sha256 check: {', '.join(mismatched)} "
                "differ from the expected hashes (corrupt or replaced files)"
            )
        return f"ChatTTS refused to load {path} (see the ttsq.chattts log)"

    # ---- inference ------------------------------------------------------------------------

    @property
    def info(self) -> ModelInfo:
        if self._info is None:
            raise RuntimeError("the engine is not loaded; call load() first")
        return self._info

    def _loaded_chat(self) -> Any:
        if self._chat is None:
            raise RuntimeError("the engine is not loaded; call load() first")
        return self._chat

    def warm_up(self) -> None:
        """Run one short synthesis so numba JIT, CUDA init and normalizer loading precede the first job."""
        if self._normalizer is not None:
            self._normalizer.preload(("zh", "en"))
        request = SynthesisRequest(text=self.config.warmup_text, speaker=self.speaker_from_seed(0), seed=0)
        chat = self._loaded_chat()
        lang = detect_language(request.text)
        self._infer(chat, self._split(request, lang), lang, request, min(self.config.max_new_token, WARMUP_TOKENS))

    def speaker_from_seed(self, seed: int) -> str:
        """A reproducible random voice for ``seed``, the same on every device.

        Equivalent to ``torch.manual_seed(seed); chat.sample_random_speaker()`` on CPU, but drawn
        from a private CPU generator: ChatTTS samples on the model's device, which would give a
        different voice for the same seed on a GPU worker than on a CPU worker, and would reset
        the process's global RNG as a side effect.
        """
        import torch

        chat = self._loaded_chat()
        with self._lock:
            speaker = chat.speaker
            generator = torch.Generator(device="cpu").manual_seed(seed)
            std, mean = speaker.std.cpu(), speaker.mean.cpu()
            sample = torch.randn(speaker.dim, generator=generator, dtype=std.dtype).mul_(std).add_(mean)
        return encode_speaker(sample.to(torch.float16).numpy())

    def speaker_from_audio(self, samples: npt.NDArray[np.float32]) -> str:
        """``Chat.sample_audio_speaker``: the recording's DVAE codes (its encoder, on the model's device), compressed.

        Runs under the engine's lock, like every other use of the model here; the inference thread calls it between
        two steps (:class:`ttsq.runtime.worker.Worker` serves voice encodings that way)."""
        import torch

        chat = self._loaded_chat()
        with self._lock, torch.inference_mode():
            wav = torch.from_numpy(np.ascontiguousarray(samples, dtype=np.float32)).to(chat.dvae.coef.device)
            encoded: str = chat.sample_audio_speaker(wav)
        return encoded

    def blend_speakers(self, speakers: Sequence[str], weights: Sequence[float]) -> str:
        """A blended speaker (:func:`ttsq.domain.blends.blend_embedding`: standardised by ``spk_stat``, weighed,
        rescaled to a draw's variance), encoded as ChatTTS encodes every embedding. Pure numpy on the CPU: the same
        bits on every device, as :meth:`speaker_from_seed` is."""
        import torch

        chat = self._loaded_chat()
        with self._lock:
            speaker = chat.speaker
            mean = speaker.mean.float().cpu().numpy()
            std = speaker.std.float().cpu().numpy()
            blended = blend_embedding([speaker._decode(one) for one in speakers], weights, mean, std)
        return encode_speaker(torch.from_numpy(blended).to(torch.float16).numpy())

    def synthesize_batch(self, reqs: Sequence[SynthesisRequest]) -> Iterator[tuple[int, ChunkAudio]]:
        """Speak several requests in shared ChatTTS calls; yield ``(request index, chunk)`` as chunks finish.

        One ChatTTS call takes one speaker embedding and one set of sampling parameters, so the
        requests must agree on everything but their text (:func:`batch_key`); the call's random
        stream is seeded with the first request's seed, which is why a batched request's prosody
        may depend on its neighbours (the voice never does). Two calls: every request's first
        chunk, then all remaining chunks — time to first audio stays one (batched) sentence.
        A request whose chunks all come back empty is the caller's to fail; the others stand.
        """
        if not reqs:
            return
        if len({batch_key(req, req.grouping) for req in reqs}) != 1:
            raise PermanentError("a batch must share speaker, speed, sampling parameters, language and what it makes")
        first = reqs[0]
        if not 0 <= first.sampling.speed <= 9:  # the tokens ChatTTS has; the API offers 1-9 of them (ttsq.domain.sampling)
            raise PermanentError(f"speed must be between 0 and 9, got {first.sampling.speed}")
        chat = self._loaded_chat()
        lang = detect_language(first.text)
        chunked = [self._split(req, lang) for req in reqs]
        if first.refine_only:
            yield from self._refined(chat, chunked, lang, first)
            return
        firsts = [(owner, 0, chunks[0]) for owner, chunks in enumerate(chunked)]
        rests = [(owner, index, text) for owner, chunks in enumerate(chunked) for index, text in enumerate(chunks) if index]
        heard: dict[int, ChunkAudio] = {}
        for owner, chunk in self._grouped_call(chat, firsts, lang, first, chunked):
            heard[owner] = chunk
            yield owner, chunk
        if not (first.consistent and first.speaker_prompt is None):
            yield from self._grouped_call(chat, rests, lang, first, chunked)
            return
        for owner, chunk in heard.items():  # one voice across each text: its own prompt, so one call per request
            anchored = replace(reqs[owner], speaker_prompt=self.speaker_from_audio(chunk.samples), prompt_text=chunk.text)
            yield from self._grouped_call(chat, [row for row in rests if row[0] == owner], lang, anchored, chunked)

    def _grouped_call(
        self, chat: Any, rows: list[tuple[int, int, str]], lang: str, req: SynthesisRequest, chunked: list[list[str]]
    ) -> Iterator[tuple[int, ChunkAudio]]:
        """One ChatTTS call for ``rows`` (owner, chunk index, text) with ``req``'s voice and parameters."""
        if not rows:
            return
        wavs = self._infer_typed(chat, [text for _, _, text in rows], lang, req)
        for position, (owner, index, spoken) in enumerate(rows):
            wav = wavs[position] if position < len(wavs) else np.zeros(0, dtype=np.float32)
            samples = np.asarray(wav, dtype=np.float32).reshape(-1)
            if samples.size == 0:
                log.warning("chunk %d of request %d produced no audio", index, owner)
            yield owner, ChunkAudio(index=index, total=len(chunked[owner]), samples=samples, text=spoken)

    def _refined(self, chat: Any, chunked: list[list[str]], lang: str, req: SynthesisRequest) -> Iterator[tuple[int, ChunkAudio]]:
        """Refine-only requests: every chunk of every request refined in one ChatTTS call (``refine_text_only``), each
        handed out as a chunk without samples whose text is the chunk refined."""
        import torch

        rows = [(owner, index, text) for owner, chunks in enumerate(chunked) for index, text in enumerate(chunks)]
        try:
            with self._lock, torch.inference_mode():
                torch.manual_seed(req.seed)
                refined: list[str] = chat.infer(
                    [text for _, _, text in rows],
                    lang=lang,
                    split_text=False,
                    refine_text_only=True,
                    do_text_normalization=True,
                    do_homophone_replacement=True,
                    params_refine_text=_refine_params(chat, req, self.config.refine_max_new_token),
                )
        except torch.cuda.OutOfMemoryError as exc:
            raise OutOfMemory(str(exc)) from exc
        except Exception as exc:
            raise TransientError(f"{type(exc).__name__}: {exc}") from exc
        for (owner, index, _), text in zip(rows, refined, strict=True):
            yield owner, ChunkAudio(index=index, total=len(chunked[owner]), samples=np.zeros(0, dtype=np.float32), text=text)

    def _split(self, req: SynthesisRequest, lang: Literal["zh", "en"]) -> list[str]:
        if not req.text.strip():
            raise PermanentError("text is empty")
        text = self._normalizer.normalize(req.text, lang) if self._normalizer is not None else req.text
        chunks = split_sentences(text, self.config.max_chunk_chars)
        if not chunks:
            raise PermanentError("text is empty after normalization")
        return chunks

    def _infer_typed(self, chat: Any, texts: list[str], lang: str, req: SynthesisRequest) -> list[Any]:
        """:meth:`_infer`, with torch's failures turned into the engine contract's types (:mod:`ttsq.inference.base`).

        When the model is prepared for a few batch sizes (:meth:`prepare`), the call is padded to the
        smallest of them that holds ``texts`` (copies of the last text) and the padding rows' audio is
        dropped here, so it never reaches a result: a compiled model then never meets a new shape.
        """
        import torch

        rows = len(texts)
        padded = texts + [texts[-1]] * (bucket_for(rows, self._buckets) - rows) if self._buckets else texts
        try:
            return self._infer(chat, padded, lang, req, self.config.max_new_token)[:rows]
        except torch.cuda.OutOfMemoryError as exc:
            raise OutOfMemory(str(exc)) from exc
        except Exception as exc:
            raise TransientError(f"{type(exc).__name__}: {exc}") from exc

    def _infer(
        self, chat: Any, texts: list[str], lang: str, req: SynthesisRequest, max_new_token: int, min_new_token: int | None = None
    ) -> list[Any]:
        """One ChatTTS call for ``texts`` (one padded batch), with fresh parameter objects."""
        import torch

        floor = self.config.min_new_token if min_new_token is None else min_new_token
        min_new_token = min(max(floor, 1), max_new_token)
        sampling = req.sampling
        with self._lock, torch.inference_mode():
            torch.manual_seed(req.seed)
            wavs: list[Any] = chat.infer(
                texts,
                lang=lang,
                split_text=False,
                skip_refine_text=not sampling.refine_text,
                # With no normalizer registered inside ChatTTS this only maps ASCII punctuation in
                # Chinese text to the full-width forms the model was trained on (and its
                # homophone map fixes characters it mispronounces); numbers were handled above.
                do_text_normalization=True,
                do_homophone_replacement=True,
                params_infer_code=chat.InferCodeParams(
                    prompt=f"[speed_{sampling.speed}]",
                    spk_emb=req.speaker,
                    spk_smp=req.speaker_prompt,
                    txt_smp=req.prompt_text,
                    temperature=sampling.temperature,
                    top_P=sampling.top_p,
                    top_K=sampling.top_k,
                    manual_seed=req.seed,
                    max_new_token=max_new_token,
                    min_new_token=min_new_token,
                    show_tqdm=False,
                ),
                params_refine_text=_refine_params(chat, req, self.config.refine_max_new_token),
            )
        return wavs

    def batcher(self, slots: int, *, oom_recover_s: float) -> Batcher:
        """ChatTTS's own loop batches only requests that share a speaker and parameters: one
        compatible group per call (:class:`~ttsq.inference.sched.grouped.GroupedBatcher`)."""
        from ttsq.inference.sched.grouped import GroupedBatcher

        return GroupedBatcher(self, slots, oom_recover_s=oom_recover_s)

    def stats(self) -> EngineStats:
        """torch's CUDA allocator statistics (None on a CPU) and how many graphs torch.compile has built."""
        memory = None
        if self._device.startswith("cuda"):
            import torch

            device = torch.device(self._device)
            free, total = torch.cuda.mem_get_info(device)
            memory = DeviceMemory(
                allocated=torch.cuda.memory_allocated(device),
                reserved=torch.cuda.memory_reserved(device),
                max_allocated=torch.cuda.max_memory_allocated(device),
                total=total,
                free=free,
            )
        return EngineStats(memory=memory, compiled_graphs=self._compiled_graphs())

    def _compiled_graphs(self) -> int | None:
        if not (self.config.compile and self._device.startswith("cuda")):
            return None
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])

    def measure(self, batch: int, tokens: int) -> Probe | None:
        """On CUDA: one call of ``batch`` copies of the longest chunk, each forced to ``tokens`` audio tokens,
        with its peak memory and duration (for sizing the batch); None on a CPU."""
        if not self._device.startswith("cuda"):
            return None
        import torch

        chat = self._loaded_chat()
        text = ("你好世界" * self.config.max_chunk_chars)[: self.config.max_chunk_chars]
        request = SynthesisRequest(text=text, speaker=self.speaker_from_seed(0), seed=0)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        started = time.perf_counter()
        wavs = self._infer(chat, [text] * batch, "zh", request, tokens, tokens)
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        audio_s = float(np.asarray(wavs[0]).reshape(-1).size) / SAMPLE_RATE if wavs else 0.0
        return Probe(batch=batch, tokens=tokens, peak_bytes=torch.cuda.max_memory_allocated(), seconds=seconds, audio_s=audio_s)

    def prepare(self, batch_sizes: Sequence[int]) -> None:
        """Pad every later call to one of ``batch_sizes`` and run each size once now, so a compiled model
        builds all its graphs before the worker takes jobs (and never recompiles while serving)."""
        self._buckets = tuple(sorted(batch_sizes))
        chat = self._loaded_chat()
        request = SynthesisRequest(text=self.config.warmup_text, speaker=self.speaker_from_seed(0), seed=0)
        lang = detect_language(request.text)
        text = self._split(request, lang)[0]
        for size in self._buckets:
            self._infer(chat, [text] * size, lang, request, min(self.config.max_new_token, WARMUP_TOKENS))

    def release_memory(self) -> None:
        """Return cached CUDA memory to the device after each batch (an OOM leaves large blocks cached).

        A no-op on CPU: there is no device cache to return, and a full ``gc.collect()`` costs a
        quarter of a second per call with ChatTTS loaded (measured) for nothing.
        """
        if self._device.startswith("cuda"):
            import torch

            gc.collect()
            torch.cuda.empty_cache()


def _refine_params(chat: Any, req: SynthesisRequest, max_new_token: int) -> Any:
    """ChatTTS's ``RefineTextParams`` for ``req``, fresh (its defaults are shared mutable objects): the refine prompt of
    its levels (``[oral_N][laugh_N][break_N]``, or none), its seed, the engine's token cap."""
    return chat.RefineTextParams(
        prompt=req.sampling.refine_prompt, manual_seed=req.seed, max_new_token=max_new_token, min_new_token=1, show_tqdm=False
    )
