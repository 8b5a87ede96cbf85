"""One voice across a long text (``consistent``): the first chunk's audio becomes the speaker prompt of every later
chunk, with the first chunk's text as ``txt_smp``, as ChatTTS's own ``Chat._infer`` does with ``split_text``.

The prompt is observed where it enters the model (the prefill embeddings each code row is built from) and held to
what upstream computes: ``sample_audio_speaker`` of ``_decode_to_wavs`` of ChatTTS's own ``_infer_code`` for the first
text; the later chunks' audio equals ChatTTS's ``_infer_code`` with that ``spk_smp``/``txt_smp``. On the tiny
checkpoint in float64 (``engine64``)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from tests.integration.inference.gpt.test_decoder import engine64, run
from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from tests.unit.inference.engines.test_reference_voices import TRANSCRIPT, recording
from ttsq.inference.base import ChunkReady, SynthesisRequest
from ttsq.inference.chattts_rows import ChatTTSRows, Prompt
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.gpt.slot_decoder import RowParams, stream_seed
from ttsq.inference.sched.scheduler import Scheduler

__all__ = ["engine64"]  # the fixture, imported from tests.integration.inference.gpt.test_decoder

TEXT = "The first sentence sets the voice. The second one follows it. And a third ends the text."


class Prefills:
    """The scheduler's rows, recording every code prompt it builds (arguments and embeddings) in order, with the
    chunks that ended meanwhile (a spy around the real :class:`ChatTTSRows`)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.log: list[tuple[str, Any]] = []
        real = scheduler.rows.code_prompt

        def code_prompt(
            text: str, speed: int, speaker: str | None, spk_smp: str | None = None, txt_smp: str | None = None
        ) -> Prompt:
            prompt = real(text, speed, speaker, spk_smp, txt_smp)
            self.log.append(("prompt", (text, speaker, spk_smp, txt_smp, prompt.embeddings)))
            return prompt

        scheduler.rows.code_prompt = code_prompt  # type: ignore[method-assign,assignment]

    def prompts(self) -> list[tuple[str, str | None, str | None, str | None, torch.Tensor]]:
        return [entry for kind, entry in self.log if kind == "prompt"]


def scheduler_of(engine: DecoderEngine) -> Scheduler:
    scheduler = engine._scheduler(4, engine._limits(), oom_recover_s=0.0, capture=False)
    scheduler.rows = ChatTTSRows(engine._loaded_chat())  # its own, so the spy stays with this scheduler
    return scheduler


def upstream_code(
    engine: DecoderEngine, text: str, speaker: str | None, spk_smp: str | None, txt_smp: str | None, seed: int
) -> Any:
    """ChatTTS's ``_infer_code`` for one text at batch 1, with the parameters the scheduler gives that row."""
    chat = engine._loaded_chat()
    limits = engine._limits()
    row = RowParams(
        temperature=0.3,
        top_p=0.7,
        top_k=20,
        repetition_penalty=1.05,
        min_new_token=1,
        max_new_token=limits.max_new_token,
        seed=seed,
    )
    infer = chat.InferCodeParams(
        prompt="[speed_5]",
        spk_emb=speaker,
        spk_smp=spk_smp,
        txt_smp=txt_smp,
        temperature=row.temperature,
        top_P=row.top_p,
        top_K=row.top_k,
        repetition_penalty=row.repetition_penalty,
        manual_seed=row.seed,
        max_new_token=row.max_new_token,
        min_new_token=max(limits.min_new_token, 1),
        show_tqdm=False,
    )
    return next(chat._infer_code([text], False, chat.device, True, infer))


def test_every_later_chunk_is_prefilled_with_the_first_chunks_prompt_as_chatts_split_text_makes_it(engine64: DecoderEngine) -> None:
    chat = engine64._loaded_chat()
    speaker = engine64.speaker_from_seed(8)
    request = SynthesisRequest(text=TEXT, speaker=speaker, seed=21, consistent=True)
    scheduler = scheduler_of(engine64)
    spy = Prefills(scheduler)
    audio, failed = run(scheduler, [request])
    assert not failed and sorted(audio["r0"]) == [0, 1, 2]
    prompts = spy.prompts()
    texts = [text for text, *_ in prompts]
    assert len(prompts) == 3 and prompts[0][2] is None, "the first chunk is spoken as it would be alone"
    # Upstream: the first text's codes, decoded to a wave, encoded by the DVAE: the later texts' spk_smp.
    first = upstream_code(engine64, texts[0], speaker, None, None, stream_seed(21, 0))
    wave = chat._decode_to_wavs([first.hiddens[0]], True)[0]
    expected = chat.sample_audio_speaker(torch.from_numpy(np.asarray(wave, dtype=np.float32).reshape(-1)))
    rows = ChatTTSRows(chat)
    for index, (text, used_speaker, spk_smp, txt_smp, embeddings) in enumerate(prompts[1:], start=1):
        assert (used_speaker, spk_smp, txt_smp) == (speaker, expected, texts[0]), f"chunk {index}"
        assert torch.equal(embeddings, rows.code_prompt(text, 5, speaker, expected, texts[0]).embeddings)
        reference = upstream_code(engine64, text, speaker, expected, texts[0], stream_seed(21, index))
        assert np.array_equal(audio["r0"][index], rows.audio(reference.hiddens[0])), f"chunk {index} differs from ChatTTS's"
    assert np.array_equal(audio["r0"][0], rows.audio(first.hiddens[0]))


def test_without_the_flag_or_with_a_reference_voice_later_chunks_carry_no_prompt_of_the_first(engine64: DecoderEngine) -> None:
    prompt = engine64.speaker_from_audio(recording(1.0, 5))
    plain = SynthesisRequest(text=TEXT, speaker=engine64.speaker_from_seed(8), seed=21)
    referenced = SynthesisRequest(text=TEXT, speaker=None, seed=21, speaker_prompt=prompt, prompt_text=TRANSCRIPT, consistent=True)
    for request, expected in ((plain, (None, None)), (referenced, (prompt, TRANSCRIPT))):
        scheduler = scheduler_of(engine64)
        spy = Prefills(scheduler)
        _, failed = run(scheduler, [request])
        assert not failed
        assert {(spk_smp, txt_smp) for _, _, spk_smp, txt_smp, _ in spy.prompts()} == {expected}


def test_later_chunks_wait_for_the_first_chunks_audio_while_other_requests_rows_run(engine64: DecoderEngine) -> None:
    """No later chunk of the consistent request is prefilled before its first chunk has ended; another request's
    rows are admitted meanwhile (its chunks keep the slots busy)."""
    scheduler = scheduler_of(engine64)
    spy = Prefills(scheduler)
    mine = SynthesisRequest(text=TEXT, speaker=engine64.speaker_from_seed(8), seed=21, consistent=True)
    other = SynthesisRequest(text="Another request speaks. In two sentences.", speaker=engine64.speaker_from_seed(3), seed=4)
    for key, request in (("mine", mine), ("other", other)):
        assert scheduler.add(key, request) == []
    while scheduler.busy:
        for event in scheduler.step():
            assert isinstance(event, ChunkReady)
            spy.log.append(("ready", (event.key, event.chunk.index)))
    first_ready = spy.log.index(("ready", ("mine", 0)))
    mine_later = [i for i, (kind, entry) in enumerate(spy.log) if kind == "prompt" and entry[2] is not None]
    assert len(mine_later) == 2 and min(mine_later) > first_ready
    others_second = [i for i, (kind, entry) in enumerate(spy.log) if kind == "prompt" and entry[0].startswith("In two")]
    assert others_second and others_second[0] < first_ready, "the other request's later chunk did not wait"


def test_the_grouped_backend_conditions_each_requests_later_chunks_on_its_own_first_chunk(tiny_engine: ChatTTSEngine) -> None:
    """``ENGINE_BACKEND=chattts``: the first chunks in one call, then each request's later chunks in a call of its own
    with ``spk_smp`` from its first chunk's audio (as ``Chat.infer`` returns it) and ``txt_smp`` its text."""
    request = SynthesisRequest(text=TEXT, speaker=tiny_engine.speaker_from_seed(8), seed=21, consistent=True)
    chunks = {chunk.index: chunk for _, chunk in tiny_engine.synthesize_batch([request])}
    assert sorted(chunks) == [0, 1, 2]
    anchored = dataclasses.replace(
        request, consistent=False, speaker_prompt=tiny_engine.speaker_from_audio(chunks[0].samples), prompt_text=chunks[0].text
    )
    chat = tiny_engine._loaded_chat()
    wavs = tiny_engine._infer(chat, [chunks[1].text, chunks[2].text], "en", anchored, TINY_ENGINE_CONFIG.max_new_token)
    for index in (1, 2):
        assert np.array_equal(chunks[index].samples, np.asarray(wavs[index - 1], dtype=np.float32).reshape(-1))
    unanchored = tiny_engine._infer(
        chat, [chunks[1].text, chunks[2].text], "en", dataclasses.replace(request, consistent=False), 48
    )
    assert not np.array_equal(chunks[1].samples, np.asarray(unanchored[0], dtype=np.float32).reshape(-1))


@pytest.mark.parametrize("flag", [True, False])
def test_the_flag_is_in_the_requests_voice_so_grouped_calls_never_mix_it(flag: bool) -> None:
    one = SynthesisRequest(text="a", speaker="s", seed=1, consistent=flag)
    assert (one.voice == SynthesisRequest(text="b", speaker="s", seed=2).voice) is (not flag)
