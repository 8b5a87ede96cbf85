"""Voice resolution on the worker (:mod:`ttsq.runtime.speakers`), without a worker: a job's parameters and the
speakers drawn on the real tiny ChatTTS engine."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.helpers import params_for
from ttsq.api.schemas import SubmitRequest
from ttsq.domain.blends import BlendPart
from ttsq.domain.jobs import TTSParams
from ttsq.inference.base import PermanentError
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.runtime.speakers import Speakers, part_request, recorded_speaker, speaker, synthesis_request


def params(**fields: object) -> TTSParams:
    return TTSParams.model_validate({"text": "你好。", "seed": 7, **fields})


def test_voice_fixes_the_speaker_and_seeds_draw_new_ones(tiny_engine: ChatTTSEngine) -> None:
    """Moved from tests/integration/runtime/test_worker.py with the code it tests (then ``Worker._speaker``)."""
    speakers = Speakers(tiny_engine)

    def drawn(**body: Any) -> str | None:
        return speaker(params_for(SubmitRequest(text="hi", **body), 500, "tiny"), speakers)

    assert drawn(voice="zh_female", seed=1) == drawn(voice="zh_female", seed=2) == drawn(voice="zh_female")
    assert drawn(voice="zh_male") != drawn(voice="zh_female")
    assert drawn(seed=1) != drawn(seed=2)
    assert drawn(seed=1) == drawn(seed=1)
    with pytest.raises(PermanentError, match="no speaker seed"):
        speaker(params(speaker_seed=None), speakers)


def test_a_seed_voice_is_the_engines_draw_for_its_seed_kept_for_the_next_job(tiny_engine: ChatTTSEngine) -> None:
    speakers = Speakers(tiny_engine)
    drawn = speaker(params(speaker_seed=11), speakers)
    assert drawn == tiny_engine.speaker_from_seed(11)
    assert speakers.kept(11) == drawn and speakers.kept(12) is None


def test_the_kept_speakers_are_bounded_and_the_least_recently_used_goes_first(tiny_engine: ChatTTSEngine) -> None:
    speakers = Speakers(tiny_engine, size=2)
    speakers.seeded(1)
    speakers.seeded(2)
    speakers.seeded(1)  # used again: 2 is now the oldest
    speakers.seeded(3)
    assert speakers.kept(2) is None
    assert speakers.kept(1) is not None and speakers.kept(3) is not None


def test_an_embedding_is_used_as_given_a_reference_voice_has_none_and_no_voice_at_all_is_refused(
    tiny_engine: ChatTTSEngine,
) -> None:
    speakers = Speakers(tiny_engine)
    embedding = tiny_engine.speaker_from_seed(5)
    assert speaker(params(speaker_embedding=embedding, speaker_seed=9), speakers) == embedding
    assert speaker(params(speaker_prompt="a recording's codes", prompt_text="你好"), speakers) is None
    with pytest.raises(PermanentError, match="no speaker seed"):
        speaker(params(), speakers)
    assert speakers.kept(9) is None, "an embedding voice draws nothing"


def test_a_blend_is_the_engines_blend_of_its_components_and_a_component_without_a_voice_is_refused(
    tiny_engine: ChatTTSEngine,
) -> None:
    speakers = Speakers(tiny_engine)
    embedded = tiny_engine.speaker_from_seed(4)
    parts = [BlendPart(voice="a", weight=0.25, seed=2), BlendPart(voice="b", weight=0.75, embedding=embedded)]
    expected = tiny_engine.blend_speakers([tiny_engine.speaker_from_seed(2), embedded], [0.25, 0.75])
    assert speaker(params(speaker_blend=parts, speaker_seed=3), speakers) == expected
    hollow = BlendPart.model_construct(voice="c", weight=0.5, seed=None, embedding=None)
    with pytest.raises(PermanentError, match="neither a seed nor an embedding"):
        speaker(params(speaker_blend=[parts[0], hollow]), speakers)


def test_the_engines_request_carries_the_jobs_text_seed_and_prompt(tiny_engine: ChatTTSEngine) -> None:
    job = params(speaker_prompt="codes", prompt_text="你好", first_chunk=3, consistent_voice=True)
    built = synthesis_request(job, Speakers(tiny_engine))
    assert (built.text, built.seed, built.speaker) == ("你好。", 7, None)
    assert (built.speaker_prompt, built.prompt_text, built.first_chunk, built.consistent) == ("codes", "你好", 3, True)


def test_a_refine_job_draws_no_speaker_and_a_lines_levels_reach_its_request(tiny_engine: ChatTTSEngine) -> None:
    """A refine job's request refines only (no speaker drawn); a dialogue line's own levels are its part's refine prompt,
    a line without its own samples as the job does."""
    refine = synthesis_request(params(speaker_seed=5, refine_only=True, oral=2), Speakers(tiny_engine))
    assert (refine.speaker, refine.refine_only, refine.sampling.refine_prompt) == (None, True, "[oral_2]")
    line = {"text": "你好。", "speaker_seed": 5}
    job = params(segments=[line, {**line, "sampling": {"oral": 4, "break": 1, "refine_text": True}}], laugh=0)
    requests = [part_request(job, part, Speakers(tiny_engine)) for part in job.parts()]
    assert [request.sampling.refine_prompt for request in requests] == ["[laugh_0]", "[oral_4][break_1]"]
    assert all(request.speaker is not None and not request.refine_only for request in requests)


async def test_only_a_draws_preview_records_its_speaker_the_one_it_was_drawn_with(tiny_engine: ChatTTSEngine) -> None:
    speakers = Speakers(tiny_engine)
    assert await recorded_speaker(params(speaker_seed=8), speakers) is None
    used = speaker(params(speaker_seed=8), speakers)
    assert await recorded_speaker(params(speaker_seed=8, record_speaker=True), speakers) == used
    fresh = Speakers(tiny_engine)  # not kept any more: drawn again, reproducibly
    assert await recorded_speaker(params(speaker_seed=8, record_speaker=True), fresh) == used
