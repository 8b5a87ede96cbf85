"""Blended voices: the rule (:mod:`ttsq.domain.blends`), the engine that applies it with the checkpoint's ``spk_stat``,
the prefill it reaches, its determinism across engines, and a blend row among other voices' rows.

The rule is computed again here independently, in torch from ChatTTS's own ``Speaker`` (its ``mean``/``std`` and
``_decode``), so a change to the implementation that departs from the documented rule fails."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from redis.asyncio import Redis

from tests.conftest import task_id
from tests.integration.inference.gpt.test_decoder import engine64
from tests.integration.runtime.test_worker import params, running_worker, wait_final
from tests.integration.runtime.test_worker_decoder import StepLog
from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from tests.unit.inference.engines.test_reference_voices import assert_alone_equals_among_others
from ttsq.domain.blends import MAX_BLEND_COMPONENTS, BlendError, BlendPart, blend_embedding, blend_parts, parse_blend
from ttsq.domain.jobs import Status
from ttsq.domain.voices import Voice
from ttsq.inference.base import SynthesisRequest
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.engines.decoder_engine import DecoderEngine

__all__ = ["engine64"]  # the fixture, imported from tests.integration.inference.gpt.test_decoder


def expected_blend(chat: Any, speakers: list[str], weights: list[float]) -> torch.Tensor:
    """The documented rule, written out in torch: standardise by spk_stat, weigh (normalised), rescale by the root of
    the summed squared weights, un-standardise; float16 as ChatTTS stores embeddings."""
    mean, std = chat.speaker.mean.double(), chat.speaker.std.double()
    w = torch.tensor(weights, dtype=torch.float64)
    w = w / w.sum()
    z = sum(wi * (torch.from_numpy(chat.speaker._decode(s)).double() - mean) / std for wi, s in zip(w, speakers, strict=True))
    assert isinstance(z, torch.Tensor)
    blended: torch.Tensor = (mean + std * z / torch.sqrt((w * w).sum())).half()
    return blended


def test_blending_draws_gives_a_vector_with_a_draws_spread_where_averaging_shrinks_it() -> None:
    """Why the rescale: blends of standard-normal draws stay standard normal (their spread is that of a draw), where
    the plain average of two has a spread of 1/sqrt(2)."""
    rng = np.random.default_rng(0)
    mean, std = rng.normal(size=4096), rng.uniform(0.5, 2.0, size=4096)
    draws = [mean + std * rng.standard_normal(4096) for _ in range(3)]
    blended = blend_embedding(draws, [0.5, 0.3, 0.2], mean, std).astype(np.float64)
    spread = float(np.std((blended - mean) / std))
    averaged = float(np.std(((draws[0] + draws[1]) / 2 - mean) / std))
    assert abs(spread - 1.0) < 0.05 and abs(averaged - 1 / math.sqrt(2)) < 0.05


def test_weights_are_normalised_and_the_order_of_the_terms_does_not_matter() -> None:
    a = Voice(name="a", kind="seed", seed=1)
    b = Voice(name="b", kind="embedding", embedding="x")
    one = blend_parts([(a, 7.0), (b, 3.0)])
    two = blend_parts([(b, 0.3), (a, 0.7)])
    assert one == two
    assert [part.voice for part in one] == ["b", "a"], "canonical order: by what makes each component"
    assert [part.weight for part in one] == pytest.approx([0.3, 0.7])
    assert parse_blend(" zh_female * 0.7 + narrator*0.3") == [("zh_female", 0.7), ("narrator", 0.3)]
    assert parse_blend("a+b") == [("a", 1.0), ("b", 1.0)]


@pytest.mark.parametrize(
    ("expression", "problem"),
    [
        ("a*0.5", "2 to 8 voices"),
        ("+".join(f"v{n}*1" for n in range(MAX_BLEND_COMPONENTS + 1)), "not 9"),
        ("a*-1+b*1", "positive finite"),
        ("a*0+b*1", "positive finite"),
        ("a*nan+b*1", "positive finite"),
        ("a*inf+b*1", "positive finite"),
        ("a*x+b*1", "not a number"),
        ("a**2+b", "not a blend term"),
        ("a*1+a*2", "more than once"),
        ("a*1+", "not a blend term"),
    ],
)
def test_a_bad_blend_expression_is_refused_naming_the_problem(expression: str, problem: str) -> None:
    with pytest.raises(BlendError, match=problem):
        parse_blend(expression)


@pytest.mark.parametrize(
    ("voice", "problem"),
    [
        (Voice(name="rec", kind="reference", prompt="p", transcript="t"), "from a recording"),
        (Voice(name="mix", kind="blend", components=[BlendPart(voice="a", weight=1.0, seed=1)]), "a blend itself"),
        (Voice(name="twin", kind="seed", seed=1), "the same voice"),
    ],
)
def test_only_distinct_points_of_the_embedding_space_blend(voice: Voice, problem: str) -> None:
    with pytest.raises(BlendError, match=problem):
        blend_parts([(Voice(name="a", kind="seed", seed=1), 1.0), (voice, 1.0)])


def test_the_engines_blend_is_the_rule_on_the_checkpoints_spk_stat_and_reaches_the_prefill(engine64: DecoderEngine) -> None:
    """The blended embedding equals the rule computed here, and the prompt's ``[spk_emb]`` position carries it
    (L2-normalised, as ChatTTS's ``Speaker.apply`` writes every embedding)."""
    chat = engine64._loaded_chat()
    speakers = [engine64.speaker_from_seed(2), engine64.speaker_from_seed(1111), engine64.speaker_from_seed(7)]
    weights = [0.5, 0.3, 0.2]
    blended = engine64.blend_speakers(speakers, weights)
    vector = torch.from_numpy(chat.speaker._decode(blended))
    assert torch.equal(vector, expected_blend(chat, speakers, weights))
    assert not any(torch.equal(vector, torch.from_numpy(chat.speaker._decode(s))) for s in speakers)
    other = engine64.blend_speakers(speakers, [0.2, 0.3, 0.5])
    assert other != blended, "other weights, another voice"
    prompt = ChatTTSRows(chat).code_prompt("hello world", 5, blended)
    ids = chat.tokenizer.encode(chat.speaker.decorate_code_prompts(["hello world"], "[speed_5]", None, blended), 4)[0]
    position = int((ids[0, :, 0] == chat.tokenizer.spk_emb_ids).nonzero()[0, 0])
    written = F.normalize(vector, p=2.0, dim=0).to(prompt.embeddings.dtype)  # in float16, as Speaker.apply does
    assert torch.equal(prompt.embeddings[position], written)


def test_a_blend_is_the_same_from_two_engines(tiny_checkpoint_dir: Any) -> None:
    """Deterministic: two engines (two worker processes, or one restarted) blend the same components to the same bits."""
    blends = []
    for _ in range(2):
        engine = DecoderEngine(TINY_ENGINE_CONFIG, cuda_graphs=False, batch_invariant=False, first_chunk_slots=1, overlap=False)
        engine.load()
        speakers = [engine.speaker_from_seed(3), engine.speaker_from_seed(4)]
        blends.append(engine.blend_speakers(speakers, [0.6, 0.4]))
    assert blends[0] == blends[1]


def test_a_blend_request_sounds_the_same_alone_and_in_a_batch_of_other_voices(engine64: DecoderEngine) -> None:
    """A blend is an embedding like any other once made: its rows share steps with any voice (row independence)."""
    blended = engine64.blend_speakers([engine64.speaker_from_seed(2), engine64.speaker_from_seed(9)], [0.7, 0.3])
    mine = SynthesisRequest(text="A blended voice speaks. Then it speaks again.", speaker=blended, seed=3)
    assert_alone_equals_among_others(engine64, mine)


async def test_the_worker_blends_a_jobs_components_and_runs_it_in_a_step_with_other_voices(
    redis: Redis, tiny_decoder_engine: DecoderEngine
) -> None:
    """A job carrying a blend recipe (as the API stores it): the worker draws the seed component, blends it with
    the embedding component, and the row shares steps with a seed voice's row."""
    embedded = tiny_decoder_engine.speaker_from_seed(77)
    parts = [BlendPart(voice="zh_female", weight=0.25, seed=2), BlendPart(voice="emb", weight=0.75, embedding=embedded)]
    expected = tiny_decoder_engine.blend_speakers([tiny_decoder_engine.speaker_from_seed(2), embedded], [0.25, 0.75])
    speakers: list[set[str | None]] = []

    class Speakers(StepLog):
        def batcher(self, slots: int, *, oom_recover_s: float) -> Any:
            batcher = super().batcher(slots, oom_recover_s=oom_recover_s)
            recorded = batcher.hook

            def hook(reqs: Any) -> None:
                speakers.append({req.speaker for req in reqs})
                if recorded is not None:
                    recorded(reqs)

            batcher.hook = hook
            return batcher

    async with running_worker(redis, Speakers(tiny_decoder_engine), max_batch=8, batch_wait_ms=200) as worker:
        jobs = {
            task_id(): params("A blended voice.", speaker_seed=None, speaker_blend=parts, seed=4),
            task_id(): params("A seed voice.", speaker_seed=5, seed=5),
        }
        for job_id, job_params in jobs.items():
            await worker.queue.enqueue(job_id, job_params, single_flight=False)
        for job_id in jobs:
            assert (await wait_final(worker.queue, job_id)).status is Status.DONE
    assert any(expected in step and tiny_decoder_engine.speaker_from_seed(5) in step for step in speakers)
