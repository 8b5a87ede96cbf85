"""Voices from a reference recording in the engine: ChatTTS's speaker prompt, built as upstream builds it, per row.

A reference voice is ChatTTS's ``spk_smp`` (the recording's DVAE codes, from ``Chat.sample_audio_speaker``) with
its transcript as ``txt_smp``. These tests hold ttsq's rows to ChatTTS's own ``_infer_code`` with those parameters
(in float64, on the tiny checkpoint, as :mod:`tests.integration.inference.gpt.test_decoder` does for plain rows), show the codes
reaching the prefill, and mix reference rows with seed and embedding rows in one batch. ``engine64`` is test_decoder's float64
engine; its decoder keeps room for references of ``MAX_REFERENCE_S`` (the settings' default).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from tests.integration.inference.gpt.test_decoder import engine64, run
from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from ttsq.domain.sampling import Sampling
from ttsq.inference.base import SynthesisRequest
from ttsq.inference.chattts_rows import ChatTTSRows, Prompt
from ttsq.inference.engines.decoder_engine import DecoderEngine, prompt_budget
from ttsq.inference.gpt.slot_decoder import DecoderShape, Finished, RowParams, SlotDecoder

MAX_NEW = 20
__all__ = ["engine64"]  # the fixture, imported from tests.integration.inference.gpt.test_decoder
TRANSCRIPT = "这是一段参考录音。"


def recording(seconds: float, seed: int) -> np.ndarray:
    """Stand-in speech: a voiced buzz with noise (the random-weight encoder only needs audio)."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(24_000 * seconds)) / 24_000
    return (0.2 * np.sin(2 * np.pi * (120 + 40 * seed) * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)


def slot_decoder(engine: DecoderEngine, slots: int) -> SlotDecoder:
    chat = engine._loaded_chat()
    rows = ChatTTSRows(chat)
    code_budget, _ = prompt_budget(40, 16, 2.0)
    return SlotDecoder(
        chat.gpt.gpt,
        chat.embed,
        mode="code",
        eos=rows.code_eos,
        shape=DecoderShape(slots=slots, max_prompt=code_budget, max_new=MAX_NEW),
        dtype=torch.float64,
        head_dtype=torch.float64,
    )


@dataclasses.dataclass(frozen=True)
class Voice:
    speaker: str | None
    prompt: str | None
    text: str | None


def upstream(engine: DecoderEngine, text: str, voice: Voice, params: RowParams) -> Any:
    """ChatTTS's own ``_infer_code`` at batch 1, with ``spk_smp``/``txt_smp`` as ``Chat.infer`` passes them."""
    chat = engine._loaded_chat()
    infer = chat.InferCodeParams(
        prompt="[speed_5]",
        spk_emb=voice.speaker,
        spk_smp=voice.prompt,
        txt_smp=voice.text,
        temperature=params.temperature,
        top_P=params.top_p,
        top_K=params.top_k,
        repetition_penalty=params.repetition_penalty,
        manual_seed=params.seed,
        max_new_token=params.max_new_token,
        min_new_token=params.min_new_token,
        show_tqdm=False,
    )
    return next(chat._infer_code([text], False, chat.device, True, infer))


def prompt_of(rows: ChatTTSRows, text: str, voice: Voice) -> Prompt:
    return rows.code_prompt(text, 5, voice.speaker, voice.prompt, voice.text)


def test_the_recordings_codes_and_transcript_reach_the_prefill(engine64: DecoderEngine) -> None:
    """The prompt ends with one position per DVAE code frame, each the sum of the four code embeddings of that frame
    (what ``Embed`` gives positions outside the text mask), and the transcript's tokens come before the text."""
    chat = engine64._loaded_chat()
    rows = ChatTTSRows(chat)
    prompt = engine64.speaker_from_audio(recording(1.0, 1))
    codes = chat.speaker.decode_prompt(prompt)
    assert codes.shape[0] == 4 and codes.shape[1] > 40, "about 47 code frames per second of recording"
    plain = rows.code_prompt("hello world", 5, None)
    with_text = rows.code_prompt("hello world", 5, None, None, TRANSCRIPT)
    full = rows.code_prompt("hello world", 5, None, prompt, TRANSCRIPT)
    frames = int(codes.shape[1])
    assert with_text.length > plain.length, "the transcript is tokenised into the prompt"
    assert full.length == with_text.length + frames
    embed = chat.embed
    expected = torch.stack([embed.emb_code[q](codes[q].to(torch.long)) for q in range(4)], 1).sum(1)
    assert torch.equal(full.embeddings[-frames:], expected.to(full.embeddings.dtype))
    assert torch.equal(full.embeddings[: with_text.length], with_text.embeddings)


@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "sampled"])
def test_reference_rows_mixed_with_other_voices_sample_exactly_what_chattts_samples_for_each_alone(
    engine64: DecoderEngine, greedy: bool
) -> None:
    """One decoder, four voices at once — a reference voice, a reference voice over a seed speaker (what
    ``split_text`` gives later chunks upstream), a seed voice, no speaker — each row's codes and states equal
    ChatTTS's ``_infer_code`` with that row's ``spk_emb``/``spk_smp``/``txt_smp`` alone."""
    rows = ChatTTSRows(engine64._loaded_chat())
    prompt = engine64.speaker_from_audio(recording(1.2, 2))
    seeded = engine64.speaker_from_seed(5)
    voices = [
        Voice(None, prompt, TRANSCRIPT),
        Voice(seeded, prompt, TRANSCRIPT),
        Voice(seeded, None, None),
        Voice(None, None, None),
    ]
    texts = ["hello world how are you", "你好，世界。", "the quick brown fox", "one two"]
    base = RowParams(temperature=0.3, top_p=0.7, top_k=20, repetition_penalty=1.05, min_new_token=1, max_new_token=MAX_NEW, seed=0)
    if greedy:
        base = dataclasses.replace(base, temperature=1e-5, top_k=1)
    params = [dataclasses.replace(base, seed=11 + index) for index in range(len(voices))]
    dec = slot_decoder(engine64, len(voices))
    ended: dict[int, Finished] = {}
    for text, voice, row in zip(texts, voices, params, strict=True):
        slot, done = dec.admit(prompt_of(rows, text, voice).embeddings, row)
        if done is not None:
            ended[slot] = done
    while dec.occupied:
        ended.update({finished.slot: finished for finished in dec.step()})
    for slot, (text, voice, row) in enumerate(zip(texts, voices, params, strict=True)):
        reference = upstream(engine64, text, voice, row)
        assert torch.equal(ended[slot].tokens, reference.ids[0]), f"row {slot} ({voice}) differs from ChatTTS's own"
        hiddens = ended[slot].hiddens
        assert hiddens is not None and torch.equal(hiddens, reference.hiddens[0])
    assert not torch.equal(ended[0].tokens, ended[3].tokens) or not torch.equal(ended[1].tokens, ended[2].tokens)


def test_the_prompt_is_the_same_from_two_engines_and_after_a_reload(tiny_checkpoint_dir: Any) -> None:
    """The DVAE encoding is deterministic: two engines (as two worker processes, or one restarted) encode one
    recording to the same prompt string."""
    audio = recording(3.0, 3)
    prompts = []
    for _ in range(2):
        engine = DecoderEngine(TINY_ENGINE_CONFIG, cuda_graphs=False, batch_invariant=False, first_chunk_slots=1, overlap=False)
        engine.load()
        prompts.append(engine.speaker_from_audio(audio))
    assert prompts[0] == prompts[1]


def test_a_reference_request_sounds_the_same_alone_and_in_a_batch_of_other_voices(engine64: DecoderEngine) -> None:
    """Through the scheduler: a request with a reference voice, alone and then among seed-voice requests, gives the
    same audio (row independence holds for prompts of any length)."""
    prompt = engine64.speaker_from_audio(recording(1.5, 4))
    mine = SynthesisRequest(
        text="The first sentence is here. And a second sentence follows.",
        speaker=None,
        seed=7,
        speaker_prompt=prompt,
        prompt_text=TRANSCRIPT,
    )
    assert_alone_equals_among_others(engine64, mine)


def assert_alone_equals_among_others(engine: DecoderEngine, mine: SynthesisRequest) -> None:
    """``mine``'s two chunks through the scheduler alone, then beside three seed-voice requests: the same audio."""
    others = [
        SynthesisRequest(text=f"other voice {n}.", speaker=engine.speaker_from_seed(n), seed=n, sampling=Sampling(temperature=0.5))
        for n in range(3)
    ]
    alone, failed = run(engine._scheduler(4, engine._limits(), oom_recover_s=0.0, capture=False), [mine])
    mixed, failed_mixed = run(engine._scheduler(4, engine._limits(), oom_recover_s=0.0, capture=False), [*others, mine])
    assert not failed and not failed_mixed
    assert alone["r0"].keys() == mixed["r3"].keys() == {0, 1}
    for index in alone["r0"]:
        assert np.array_equal(alone["r0"][index], mixed["r3"][index])
