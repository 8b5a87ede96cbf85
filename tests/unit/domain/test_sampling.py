"""The sampling parameters are one record (ttsq.domain.sampling) with one home for each default and bound, and every
carrier takes them from it without changing a shape anyone sees: the submit body and its OpenAPI schema, the stored
job, the engine request, and the client."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from ttsq.api.schemas import SubmitRequest
from ttsq.client.sdk import SynthesisOptions, _submit_body
from ttsq.domain.jobs import Job, TTSParams
from ttsq.domain.sampling import DEFAULT_SAMPLING, SAMPLING_FIELDS, Sampling
from ttsq.inference.base import SynthesisRequest

STORED_BEFORE = (
    '{"id":"x","status":"queued","params":{"text":"Hello world","voice":null,"speaker_seed":7,"speaker_embedding":null,'
    '"seed":7,"speed":9,"temperature":1.0,"top_p":1.0,"top_k":5,"format":"opus","refine_text":true,"deterministic":true,'
    '"cache_key":"e15ed5663eb9bbf4694b19f618b2c584be3f184515dcccee7bd8f3b0f858e6ce","callback_url":null},"attempts":0,'
    '"max_attempts":3,"error":null,"created_at":1.0,"started_at":null,"finished_at":null,"worker":null,"duration_s":null,'
    '"content_type":null,"result_bytes":null,"not_before":null,"owner":null,"readers":null,"isolate":false,"requeues":0,'
    '"holders":null,"cancel_requested":false}'
)
"""A job as the release before the record stored it (every sampling parameter away from its default)."""

SCHEMA_BEFORE: dict[str, Any] = {
    "speed": {
        "default": 5,
        "description": "ChatTTS speed 1 (slow) to 9 (fast).",
        "maximum": 9,
        "minimum": 1,
        "title": "Speed",
        "type": "integer",
    },
    "temperature": {"default": 0.3, "maximum": 1.0, "minimum": 0.01, "title": "Temperature", "type": "number"},
    "top_p": {"default": 0.7, "maximum": 1.0, "minimum": 0.1, "title": "Top P", "type": "number"},
    "top_k": {"default": 20, "maximum": 100, "minimum": 1, "title": "Top K", "type": "integer"},
    "refine_text": {
        "default": False,
        "description": "Let ChatTTS add oral prosody tokens first (slower).",
        "title": "Refine Text",
        "type": "boolean",
    },
}
"""The submit body's sampling properties as the release before the record published them."""


def test_a_job_stored_before_the_record_loads_and_is_stored_again_unchanged() -> None:
    """Flat, as always: an old job loads with its own parameters, and what is stored now an older worker reads alike."""
    job = Job.model_validate_json(STORED_BEFORE)
    assert job.params.sampling == Sampling(speed=9, temperature=1.0, top_p=1.0, top_k=5, refine_text=True)
    # The fields added since load with their defaults from a record without them (the fencing token, null until the
    # job is claimed; the tenant and lane; the captions), and an older worker ignores them (pydantic ignores fields it
    # does not know).
    # Reference voices add the speaker prompt and its text to the parameters, null for every other voice;
    # its blends add the blend's recipe (null for other voices) and its one-voice-across-the-text flag (false); its
    # voice draw, whether the worker records the speaker it drew (false but for a draw's preview) and that speaker.
    # Tenant voices add the voice's owner (null for a global voice) and the count of submits that joined the job (0);
    # realtime sessions, where a job's chunks stand in a longer text (0: at its start).
    added = {"claim": None, "tenant": None, "priority": "interactive", "captions": None, "speaker": None, "joins": 0}
    before = json.loads(STORED_BEFORE)
    later: dict[str, object] = {"speaker_prompt": None, "prompt_text": None, "speaker_blend": None, "consistent_voice": False}
    later |= {"record_speaker": False}
    later |= {"voice_owner": None, "first_chunk": 0}
    # The refine prompt's levels (unset: null) and the refine job's flag (false for every job that makes audio).
    later |= {"oral": None, "laugh": None, "break": None, "refine_only": False}
    later |= {"segments": None}  # dialogues: a job's speaker turns, null for one voice
    later |= {"document": False}  # whole documents: false for every other job
    later |= {"listened": False, "stream": None}  # heard as it is made (false), a session's stream (null for any other)
    before["params"] = {**before["params"], **later}
    assert json.loads(job.model_dump_json()) == {**before, **added}


def test_the_submit_body_publishes_the_same_fields_defaults_and_bounds() -> None:
    """The fields that were there are unchanged but for refine_text's description (which now says what turns it on); the
    refine levels and a style are new, optional, and unset by default."""
    schema = SubmitRequest.model_json_schema()
    published = {name: dict(schema["properties"][name]) for name in SCHEMA_BEFORE}
    assert published["refine_text"].pop("description").startswith(SCHEMA_BEFORE["refine_text"]["description"][:-1])
    before = {**SCHEMA_BEFORE, "refine_text": {k: v for k, v in SCHEMA_BEFORE["refine_text"].items() if k != "description"}}
    assert published == before
    levels = {"oral": 9, "laugh": 2, "break": 7}
    for name, most in levels.items():
        bounds = schema["properties"][name]["anyOf"][0]
        assert (bounds["minimum"], bounds["maximum"], schema["properties"][name]["default"]) == (0, most, None)
    own = {
        "text",
        "ssml",
        "document",
        "text_format",
        "voice",
        "seed",
        "format",
        "callback_url",
        "priority",
        "consistent_voice",
        "style",
        "listen",
    }
    assert set(schema["properties"]) == {*own, *SCHEMA_BEFORE, *levels} == {*own, *SAMPLING_FIELDS}
    assert "required" not in schema and schema["oneOf"] == [{"required": ["text"]}, {"required": ["ssml"]}]


def test_every_carrier_defaults_to_the_one_record() -> None:
    carriers = [
        SubmitRequest(text="hi").sampling,
        TTSParams(text="hi", seed=1).sampling,
        SynthesisRequest(text="hi", speaker="", seed=1).sampling,
    ]
    assert carriers == [DEFAULT_SAMPLING] * 3
    assert Sampling(speed=5, temperature=0.3, top_p=0.7, top_k=20, refine_text=False) == DEFAULT_SAMPLING


@pytest.mark.parametrize(
    "field_value",
    [
        ("speed", 0),
        ("speed", 10),
        ("temperature", 0.0),
        ("top_p", 1.5),
        ("top_k", 0),
        ("top_k", 101),
        ("oral", -1),
        ("oral", 10),
        ("laugh", 3),
        ("break", 8),
        ("break", -1),
    ],
)
def test_the_bounds_hold_wherever_the_parameters_are_validated(field_value: tuple[str, Any]) -> None:
    field, value = field_value
    for model in (Sampling, TTSParams, SubmitRequest):
        with pytest.raises(ValidationError) as refused:
            model.model_validate({"text": "hi", "seed": 1, field: value} if model is not Sampling else {field: value})
        assert [error["loc"] for error in refused.value.errors()] == [(field,)], model


def test_the_record_is_a_hashable_value_whatever_carried_it() -> None:
    """What a batch key needs: equal parameters from a job and from a request are one value."""
    from_job = TTSParams(text="a", seed=1, speed=7, top_k=3).sampling
    from_body = SubmitRequest(text="b", speed=7, top_k=3).sampling
    assert from_job == from_body and hash(from_job) == hash(from_body)
    assert from_job != DEFAULT_SAMPLING
    with pytest.raises(ValidationError):
        from_job.speed = 6  # type: ignore[misc]


def test_the_client_offers_every_field_of_the_submit_body() -> None:
    """The client imports nothing of ttsq, so it writes the fields out; this holds it to the body it sends them in
    (by the attributes' names, which a keyword argument can be: ``break_``, sent as ``break``)."""
    offered = SynthesisOptions.__required_keys__ | SynthesisOptions.__optional_keys__
    assert offered | {"text", "callback_url"} == set(SubmitRequest.model_fields), "ssml is an option, text or None the argument"
    assert {name.replace("break", "break_") for name in SAMPLING_FIELDS} <= offered
    assert _submit_body("hi", {"break_": 3, "oral": None}) == {"text": "hi", "break": 3}


# ---- the refine prompt's levels -------------------------------------------------------------------------------------


def test_a_level_turns_refinement_on_and_makes_the_refine_prompt() -> None:
    """Setting any level asks for the refine pass; the prompt holds the levels set, in ChatTTS's order; none set is
    ChatTTS's own empty prompt, what refine_text alone always sent."""
    body = SubmitRequest.model_validate({"text": "hi", "break": 4, "oral": 3})
    assert body.refine_text is True
    assert body.sampling.refine_prompt == "[oral_3][break_4]"
    assert SubmitRequest.model_validate({"text": "hi", "laugh": 0}).sampling.refine_prompt == "[laugh_0]"
    assert SubmitRequest.model_validate({"text": "hi", "refine_text": True}).sampling.refine_prompt == ""
    assert DEFAULT_SAMPLING.refine_prompt == "" and DEFAULT_SAMPLING.refine_text is False


def test_a_level_beside_refine_text_false_is_refused_naming_the_level() -> None:
    with pytest.raises(ValidationError) as refused:
        SubmitRequest.model_validate({"text": "hi", "refine_text": False, "break": 2})
    assert [error["loc"] for error in refused.value.errors()] == [("break",)]
    assert "refine_text: false" in refused.value.errors()[0]["msg"]


def test_break_is_break_on_the_wire_in_redis_and_in_the_record() -> None:
    """``break`` is a Python keyword: the attribute is ``break_``, every name anyone sees is ``break``."""
    body = SubmitRequest.model_validate({"text": "hi", "break": 5})
    assert body.break_ == 5 and dict(body.sampling)["break"] == 5 and "break_" not in dict(body.sampling)
    with pytest.raises(ValidationError):
        SubmitRequest.model_validate({"text": "hi", "break_": 5})
    params = TTSParams.model_construct(text="hi", seed=1, **dict(body.sampling))
    stored = json.loads(params.model_dump_json())
    assert stored["break"] == 5 and "break_" not in stored
    assert TTSParams.model_validate(stored).sampling == body.sampling


def test_the_levels_are_part_of_the_record_its_hash_and_what_a_body_says() -> None:
    plain = SubmitRequest(text="hi", refine_text=True).sampling
    steered = SubmitRequest.model_validate({"text": "hi", "oral": 2}).sampling
    assert plain != steered and hash(plain) != hash(steered)
    said = SubmitRequest.model_validate({"text": "hi", "oral": 2, "speed": 7}).said()
    assert said == {"speed": 7, "refine_text": True, "oral": 2}
