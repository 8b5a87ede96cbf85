"""The cache key: it folds only what cannot change the sound, and everything else changes it."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.helpers import params_for
from ttsq.api.schemas import SubmitRequest
from ttsq.domain.cache_key import cache_key, engine_input
from ttsq.domain.segments import speakable
from ttsq.domain.text import canonical_text

MODEL = "tiny-random|chunk=40"
ALPHABET = list("abcXYZ0189 ,.?!;:-'你好世界今天。，？！")


def key_and_input(text: str, **body: Any) -> tuple[str | None, dict[str, object]]:
    params = params_for(SubmitRequest(text=text, **body), 10_000, MODEL)
    return params.cache_key, engine_input(params)


@st.composite
def sound_preserving_variant(draw: st.DrawFn, text: str) -> str:
    """Re-spell ``text`` with foldable differences: width forms, whitespace runs, invisible characters."""
    out = []
    for char in text:
        choice = draw(st.integers(0, 3))
        if char == " " and choice == 1:
            out.append(draw(st.sampled_from(["\t", "\n", "  ", "\u3000", " \r\n ", "\u00a0"])))
        elif "!" <= char <= "~" and choice == 2:
            out.append(chr(ord(char) + 0xFEE0))
        elif choice == 3:
            out.append(char + draw(st.sampled_from(["\u200b", "\u200d", "\ufeff", "\u2060", "\u200e"])))
        else:
            out.append(char)
    return draw(st.sampled_from(["", " ", "\u200b", "\n"])) + "".join(out)


texts = st.text(alphabet=ALPHABET, min_size=1, max_size=40).filter(lambda t: speakable(canonical_text(t)))
"""Texts a submit takes: something to read aloud once cleaned (punctuation alone is refused)."""


@settings(max_examples=300, deadline=None)
@given(data=st.data(), text=texts)
def test_foldable_variants_share_one_key_and_one_engine_input(data: st.DataObject, text: str) -> None:
    variant = data.draw(sound_preserving_variant(text))
    original_key, original_input = key_and_input(text, seed=7)
    variant_key, variant_input = key_and_input(variant, seed=7)
    assert original_key == variant_key
    assert original_input == variant_input


@settings(max_examples=300, deadline=None)
@given(first=texts, second=texts, seeds=st.tuples(st.integers(0, 3), st.integers(0, 3)))
def test_equal_keys_mean_identical_engine_input(first: str, second: str, seeds: tuple[int, int]) -> None:
    key_a, input_a = key_and_input(first, seed=seeds[0])
    key_b, input_b = key_and_input(second, seed=seeds[1])
    assert (key_a == key_b) == (input_a == input_b)


@settings(max_examples=200, deadline=None)
@given(text=texts)
def test_folding_is_idempotent(text: str) -> None:
    assert canonical_text(canonical_text(text)) == canonical_text(text)


BASE: dict[str, Any] = {"text": "我有3个苹果。Hello world", "voice": "zh_female", "seed": 5}


@pytest.mark.parametrize(
    "change",
    [
        {"text": "我有4个苹果。Hello world"},
        {"text": "我有3个苹果。Hello there"},
        {"text": "我有3个苹果？Hello world"},
        {"text": "我有3个苹果。Hello world."},
        {"text": "我有3个苹果。 Hello world[uv_break]"},
        {"speed": 6},
        {"voice": "zh_male"},
        {"seed": 6},
        {"temperature": 0.31},
        {"top_p": 0.5},
        {"top_k": 21},
        {"format": "mp3"},
        {"refine_text": True},
    ],
)
def test_every_sound_changing_edit_changes_the_key(change: dict[str, Any]) -> None:
    base_key, _ = key_and_input(**BASE)
    changed_key, _ = key_and_input(**(BASE | change))
    assert base_key is not None and changed_key is not None and base_key != changed_key


def test_the_model_identity_is_part_of_the_key() -> None:
    request = SubmitRequest(**BASE)
    assert params_for(request, 500, "model-a").cache_key != params_for(request, 500, "model-b").cache_key


def test_the_speaker_not_the_voice_name_is_part_of_the_key() -> None:
    """A voice re-created under the same name with another speaker must not hit the old entry."""
    params = params_for(SubmitRequest(**BASE), 500, MODEL)
    recreated = params.model_copy(update={"speaker_seed": (params.speaker_seed or 0) + 1})
    assert recreated.voice == params.voice
    assert cache_key(recreated, MODEL) != cache_key(params, MODEL)


def test_random_requests_have_no_key() -> None:
    assert params_for(SubmitRequest(text="hello"), 500, MODEL).cache_key is None
    assert params_for(SubmitRequest(text="hello", seed=1), 500, MODEL).cache_key is not None
    assert params_for(SubmitRequest(text="hello", voice="zh_male"), 500, MODEL).cache_key is not None


KNOWN_KEYS = {
    '{"text": "你好，欢迎使用 ttsq。", "voice": "zh_female", "format": "mp3"}': (
        "5e247d861a687556fc456ddc014b021efbce8f9855a72d589b507cb781647e22"
    ),
    '{"text": "Hello world", "seed": 7}': "0d13cfb5c4547ac6fb19a385f5914a018c579f42def3467a7ea86ae0ae1a5a3c",
    (
        '{"text": "Hello world", "seed": 7, "temperature": 1, "top_p": 1, "top_k": 5, "speed": 9, "refine_text": true, '
        '"format": "opus"}'
    ): "e15ed5663eb9bbf4694b19f618b2c584be3f184515dcccee7bd8f3b0f858e6ce",
    '{"text": "我有3个苹果。Hello world", "voice": "zh_male", "seed": 5, "temperature": 0.31, "top_p": 0.5}': (
        "ef7966fcbb488521ce3efa7afd399ea78ff5f3542b8818191fbc4073af54927d"
    ),
}
"""Submit bodies (as a client sends them) and their keys, computed before the sampling parameters became one record
(ttsq.domain.sampling): a key that changes for the same request empties every deployment's cache at the upgrade."""


@pytest.mark.parametrize(("body", "key"), KNOWN_KEYS.items())
def test_known_requests_keep_their_keys(body: str, key: str) -> None:
    assert params_for(SubmitRequest.model_validate_json(body), 10_000, MODEL).cache_key == key


def test_the_sharing_scope_is_part_of_the_key_and_no_scope_keeps_the_key_it_always_had() -> None:
    """Two tenants never compute the same key (so neither the cache nor single-flight joins them); no scope is the key
    as it was before scopes, so a single-tenant deployment keeps its cache."""
    params = params_for(SubmitRequest(**BASE), 500, MODEL)
    keys = {cache_key(params, MODEL, scope) for scope in (None, "key:0123456789ab", "key:ba9876543210", "tenant:acme")}
    assert len(keys) == 4
    assert cache_key(params, MODEL, None) == cache_key(params, MODEL) == params.cache_key
    assert cache_key(params, MODEL, "tenant:acme") == cache_key(params.model_copy(), MODEL, "tenant:acme")
