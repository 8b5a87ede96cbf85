"""ChatTTS's refine prompt (``[oral_N][laugh_N][break_N]``) from the sampling record to the model, on both engines and
the tiny checkpoint; refine-only requests (the refine job); the levels in the cache key and in who shares a call; the
refined text a refine job answers; and the styles' merge and catalogue."""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from pydantic import ValidationError

from ttsq.api.schemas import SubmitRequest
from ttsq.api.service import build_params
from ttsq.domain.batching import batch_key
from ttsq.domain.refine import refined_text
from ttsq.domain.sampling import Sampling, SamplingPreset, overridden
from ttsq.domain.styles import BUILTIN_STYLES, Style
from ttsq.domain.text import validate_text
from ttsq.inference.base import ChunkAudio, ChunkReady, EngineWrapper, SynthesisRequest, synthesize
from ttsq.inference.engines.chattts import ChatTTSEngine
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.sched.grouped import GroupedBatcher

MODEL = "tiny-test"
TEXT = "Hello there. How are you today, my friend?"
PROMPT = "[oral_3][laugh_1][break_4]"
LEVELS = {"oral": 3, "laugh": 1, "break": 4}


def sampling(**fields: Any) -> Sampling:
    return Sampling.model_validate(fields)


class Prompts:
    """The texts ChatTTS's tokenizer is handed (what ``Chat._refine_text`` and ``_infer_code`` encode), and the ids it
    makes of them: a spy on the real tokenizer, which it calls through."""

    def __init__(self, chat: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.texts: list[str] = []
        self.ids: list[torch.Tensor] = []
        self.tokenizer = chat.tokenizer
        encode = chat.tokenizer.encode

        def spy(texts: list[str], *args: Any, **kwargs: Any) -> Any:
            self.texts.extend(texts)
            encoded = encode(texts, *args, **kwargs)
            self.ids.extend(encoded[0])
            return encoded

        monkeypatch.setattr(chat.tokenizer, "encode", spy)

    def refine_prompts(self) -> list[str]:
        return [text for text in self.texts if text.startswith("[Sbreak]")]

    def refine_ids(self) -> list[torch.Tensor]:
        return [ids for text, ids in zip(self.texts, self.ids, strict=True) if text.startswith("[Sbreak]")]

    def token_id(self, token: str) -> int:
        return int(self.tokenizer._tokenizer.convert_tokens_to_ids(token))


@pytest.fixture(params=["chattts", "ttsq"])
def engine(request: pytest.FixtureRequest) -> ChatTTSEngine:
    """Each backend: ChatTTS's own loop (the reference) and ttsq's decoder (the default on a CPU)."""
    fixture = "tiny_engine" if request.param == "chattts" else "tiny_decoder_engine"
    found: ChatTTSEngine = request.getfixturevalue(fixture)
    return found


# ---- the prompt reaches ChatTTS ----------------------------------------------------------------------------------


def test_the_levels_reach_chattts_refine_step_as_its_prompt(engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """A request with levels is refined with ``[Sbreak]text[Pbreak][oral_3][laugh_1][break_4]``, as ChatTTS builds the
    refine prompt from ``RefineTextParams.prompt``, and those tokens are in the refine step's input ids."""
    prompts = Prompts(engine._loaded_chat(), monkeypatch)
    request = SynthesisRequest(text=TEXT, speaker=engine.speaker_from_seed(3), seed=3, sampling=sampling(**LEVELS))
    assert synthesize(engine, request).size > 0
    refined = prompts.refine_prompts()
    assert refined and all(text.endswith(f"[Pbreak]{PROMPT}") for text in refined), refined
    wanted = [prompts.token_id(token) for token in ("[Pbreak]", "[oral_3]", "[laugh_1]", "[break_4]")]
    for ids in prompts.refine_ids():
        tokens = ids[:, 0].tolist() if ids.dim() == 2 else ids.tolist()
        tail = [token for token in tokens if token in wanted]
        assert tail == wanted, tokens


def test_refine_text_alone_keeps_chattts_empty_prompt(engine: ChatTTSEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """``refine_text`` without a level sends the prompt it always sent: none."""
    prompts = Prompts(engine._loaded_chat(), monkeypatch)
    request = SynthesisRequest(text=TEXT, speaker=engine.speaker_from_seed(3), seed=3, sampling=sampling(refine_text=True))
    synthesize(engine, request)
    assert prompts.refine_prompts() and all(text.endswith("[Pbreak]") for text in prompts.refine_prompts())


def test_different_levels_make_different_refinements(engine: ChatTTSEngine) -> None:
    """The prompt is not decoration: on the same text and seed, other levels refine the text otherwise."""

    def refined(**levels: int) -> list[str]:
        request = SynthesisRequest(text=TEXT, speaker=None, seed=5, sampling=sampling(**levels), refine_only=True)
        return [chunk.text for _, chunk in engine.synthesize_batch([request])]

    assert refined(oral=0, laugh=0, **{"break": 0}) != refined(oral=9, laugh=2, **{"break": 7})


# ---- refine-only requests (the refine job) -------------------------------------------------------------------------


def test_a_refine_only_request_answers_each_chunk_refined_without_audio(engine: ChatTTSEngine) -> None:
    request = SynthesisRequest(text=TEXT, speaker=None, seed=9, sampling=sampling(**LEVELS), refine_only=True)
    chunks = [chunk for _, chunk in engine.synthesize_batch([request])]
    assert sorted(chunk.index for chunk in chunks) == [0, 1] and {chunk.total for chunk in chunks} == {2}
    assert all(chunk.samples.size == 0 and chunk.text for chunk in chunks)
    again = [chunk.text for _, chunk in engine.synthesize_batch([request])]
    assert again == [chunk.text for chunk in chunks], "the same seed refines alike"


def test_refine_only_and_speech_requests_share_a_decoder_and_each_gets_its_own(tiny_decoder_engine: DecoderEngine) -> None:
    """On ttsq's decoder a refine job's rows share steps with audio rows: the refine ends as text, the speech as audio."""
    speaker = tiny_decoder_engine.speaker_from_seed(4)
    refine = SynthesisRequest(text=TEXT, speaker=None, seed=9, sampling=sampling(oral=5), refine_only=True)
    speech = SynthesisRequest(text="Plain speech here.", speaker=speaker, seed=2)
    chunks = list(tiny_decoder_engine.synthesize_batch([refine, speech]))
    assert {chunk.samples.size for owner, chunk in chunks if owner == 0} == {0}
    assert all(chunk.samples.size > 0 for owner, chunk in chunks if owner == 1)
    alone = [chunk.text for _, chunk in tiny_decoder_engine.synthesize_batch([refine])]
    assert sorted((c.index, c.text) for o, c in chunks if o == 0) == sorted(enumerate(alone)), "as refined alone"


class _Calls(EngineWrapper):
    """The real engine, with the groups the grouped batcher hands it recorded (a test spy)."""

    def __init__(self, inner: ChatTTSEngine) -> None:
        super().__init__(inner)
        self.groups: list[list[SynthesisRequest]] = []

    def synthesize_batch(self, reqs: Sequence[SynthesisRequest]) -> Iterator[tuple[int, ChunkAudio]]:
        self.groups.append(list(reqs))
        return self.inner.synthesize_batch(reqs)


def test_the_reference_engine_never_groups_other_levels_or_a_refine_with_speech(tiny_engine: ChatTTSEngine) -> None:
    """One ChatTTS call has one refine prompt and either speaks or refines: requests that differ there never share a
    call; requests that differ only in text and seed still do."""
    speaker = tiny_engine.speaker_from_seed(6)
    calls = _Calls(tiny_engine)
    batcher = GroupedBatcher(calls, 8, oom_recover_s=1.0)
    requests = {
        "a": SynthesisRequest(text="First one.", speaker=speaker, seed=1, sampling=sampling(oral=2)),
        "b": SynthesisRequest(text="Second one.", speaker=speaker, seed=2, sampling=sampling(oral=2)),
        "c": SynthesisRequest(text="Third one.", speaker=speaker, seed=3, sampling=sampling(oral=3)),
        "d": SynthesisRequest(text="Fourth one.", speaker=speaker, seed=4, sampling=sampling(laugh=1)),
        "e": SynthesisRequest(text="Fifth one.", speaker=speaker, seed=5, sampling=sampling(oral=2), refine_only=True),
    }
    for key, request in requests.items():
        batcher.add(key, request)
    done: set[str] = set()
    while batcher.busy:
        done |= {event.key for event in batcher.step() if isinstance(event, ChunkReady)}
    assert done == set(requests)
    grouped = sorted(sorted(req.text for req in group) for group in calls.groups)
    assert grouped == sorted([["First one.", "Second one."], ["Fifth one."], ["Fourth one."], ["Third one."]])


# ---- keys: the cache, single-flight and the batch --------------------------------------------------------------------


def params(body: dict[str, Any], **kwargs: Any) -> Any:
    return build_params(SubmitRequest.model_validate(body), None, max_text_chars=500, model_identity=MODEL, **kwargs)


@pytest.mark.parametrize(
    "change", [{"oral": 2}, {"laugh": 0}, {"break": 3}, {"oral": 2, "laugh": 1}, {"refine_text": True}, {"break": 7}]
)
def test_every_level_changes_the_cache_key(change: dict[str, Any]) -> None:
    base = params({"text": "Hello world", "seed": 7, "oral": 1, "laugh": 2, "break": 0})
    other = params({"text": "Hello world", "seed": 7, **change})
    assert base.cache_key is not None and other.cache_key is not None and base.cache_key != other.cache_key


def test_a_refine_job_never_shares_a_key_with_speech() -> None:
    body = {"text": "Hello world", "seed": 7, "oral": 2}
    assert params(body).cache_key != params(body, refine_only=True).cache_key
    assert params(body, refine_only=True).cache_key == params(body, refine_only=True).cache_key


def test_other_levels_never_share_a_batch() -> None:
    def key(text: str, refine_only: bool = False, **levels: int) -> tuple[object, ...]:
        request = SynthesisRequest(text=text, speaker="s", seed=1, sampling=sampling(**levels), refine_only=refine_only)
        return batch_key(request, request.grouping)

    assert key("one.", oral=2) == key("two.", oral=2)
    assert key("one.", oral=2) != key("one.", oral=3)
    assert key("one.", oral=2) != key("one.", oral=2, laugh=0)
    assert key("one.", oral=2) != key("one.", True, oral=2)


# ---- the refined text ----------------------------------------------------------------------------------------------


def test_the_refined_text_keeps_the_allowed_tokens_and_drops_the_rest() -> None:
    chunks = ["so [uv_break] we went [v_break] home [laugh]", "[Sbreak] and [spk_emb] it [lbreak] rained [Stts]"]
    text = refined_text(chunks)
    assert text == "so [uv_break] we went home [laugh] and it [lbreak] rained"
    validate_text(text, 500)  # a submit takes it: raises on a forbidden token


def test_whatever_the_tiny_model_refines_a_submit_accepts(tiny_engine: ChatTTSEngine) -> None:
    """Random weights emit any control token below ``[break_0]``: what a refine job answers still passes the submit's
    token check."""
    for seed in range(4):
        request = SynthesisRequest(text=TEXT, speaker=None, seed=seed, sampling=sampling(oral=9), refine_only=True)
        text = refined_text([chunk.text for _, chunk in sorted(tiny_engine.synthesize_batch([request]), key=lambda c: c[1].index)])
        validate_text(text, 10_000)  # raises on a forbidden token


# ---- styles -------------------------------------------------------------------------------------------------------


def test_a_request_overrides_its_style_and_a_style_fills_the_rest() -> None:
    style = BUILTIN_STYLES["chat"]  # speed 6, oral 9, laugh 1, break 2
    body = SubmitRequest.model_validate({"text": "hi", "speed": 3, "oral": 0})
    merged = body.with_sampling(style.under(body)).sampling
    assert (merged.speed, merged.oral, merged.laugh, merged.break_, merged.refine_text) == (3, 0, 1, 2, True)
    assert merged.temperature == 0.3, "what neither says keeps its default"


def test_refine_text_false_in_the_request_drops_its_styles_levels() -> None:
    body = SubmitRequest.model_validate({"text": "hi", "refine_text": False})
    merged = body.with_sampling(BUILTIN_STYLES["chat"].under(body)).sampling
    assert (merged.refine_text, merged.oral, merged.speed) == (False, None, 6)
    assert merged.refine_prompt == ""


def test_a_lines_own_fields_override_the_dialogues_with_the_refine_rules() -> None:
    """A dialogue line's sampling over its dialogue's: a level turns refinement on for the line alone, ``refine_text:
    false`` takes the dialogue's levels out for the line, one beside a level of the line's own is refused."""
    plain = Sampling(speed=4)
    line = overridden(plain, {"oral": 3, "break": 1})
    assert (line.speed, line.oral, line.break_, line.refine_text, line.refine_prompt) == (4, 3, 1, True, "[oral_3][break_1]")
    assert overridden(Sampling(refine_text=False), {"laugh": 2}).refine_text is True, "the line's own level over the dialogue's off"
    chatty = Sampling.model_validate({"oral": 9, "laugh": 1})
    off = overridden(chatty, {"refine_text": False})
    assert (off.refine_text, off.oral, off.laugh, off.refine_prompt) == (False, None, None, "")
    assert overridden(chatty, {"laugh": 0}).refine_prompt == "[oral_9][laugh_0]"
    with pytest.raises(ValidationError, match="refine_text: false"):
        overridden(chatty, {"refine_text": False, "oral": 2})
    calm = BUILTIN_STYLES["calm"]  # speed 1, oral 4, break 4
    assert overridden(plain, calm.beneath({"speed": 7})).refine_prompt == "[oral_4][break_4]"
    assert overridden(plain, calm.beneath({"speed": 7})).speed == 7, "the line's own field over its style's"
    assert overridden(plain, calm.beneath({"refine_text": False})).refine_prompt == ""


def test_the_builtin_catalogue_is_valid_and_each_refines() -> None:
    assert len(BUILTIN_STYLES) >= 10
    for name, style in BUILTIN_STYLES.items():
        assert style.name == name and style.builtin and style.owner is None
        assert style.refine_text is True and style.oral is not None, name
        assert Style.model_validate_json(style.model_dump_json()) == style
    assert (BUILTIN_STYLES["calm"].speed, BUILTIN_STYLES["calm"].oral, BUILTIN_STYLES["calm"].break_) == (1, 4, 4)


def test_a_preset_is_held_to_the_records_bounds() -> None:
    for bad in ({"oral": 10}, {"laugh": -1}, {"break": 8}, {"speed": 0}, {"top_k": 0}, {"refine_text": False, "oral": 1}):
        with pytest.raises(ValidationError):
            SamplingPreset.model_validate(bad)
    assert SamplingPreset.model_validate({"laugh": 2}).settings() == {"refine_text": True, "laugh": 2}


def test_every_sampling_field_can_be_preset() -> None:
    """One list of parameters: a style can set each one the record has."""
    assert {field.alias or name for name, field in SamplingPreset.model_fields.items()} == set(Sampling().model_dump())



def test_the_docs_list_the_builtin_catalogue_as_it_is() -> None:
    """docs/prosody.md's table of the built-in styles is the catalogue, style by style."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "prosody.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w-]+)` \| (\d) \| `((?:\[\w+\])*)` \|$", page, re.M)
    documented = {name: (int(speed), prompt) for name, speed, prompt in rows}
    catalogue = {
        name: (style.speed, Sampling.model_validate(style.settings()).refine_prompt) for name, style in BUILTIN_STYLES.items()
    }
    assert documented == catalogue
