"""ttsq's decoder against ChatTTS's own loop, and each row against itself in any company.

Equality with ChatTTS is tested in float64 (the GPT and the embeddings converted after loading),
where floating-point batch variance is far below any sampling decision; ChatTTS's own heads get
the float64 input they would have had (its ``generate`` casts the state to float32 first, so
its heads are wrapped to take float64 — a precision adapter on the reference, nothing else).
Sampling is real: temperature, top-p, top-k, the repetition penalty and the seeded noise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.conftest_engine import TINY_ENGINE_CONFIG
from ttsq.domain.sampling import Sampling
from ttsq.inference.base import (
    Batcher,
    ChunkReady,
    OutOfMemory,
    PieceReady,
    RequestFailed,
    SynthesisRequest,
    TransientError,
)
from ttsq.inference.chattts_rows import ChatTTSRows
from ttsq.inference.engines.decoder_engine import DecoderEngine
from ttsq.inference.engines.faults import FaultInjectingEngine
from ttsq.inference.gpt.slot_decoder import DecoderShape, Finished, Precision, RowParams, SlotDecoder, stream_seed
from ttsq.inference.gpt.slots import PREFILL_PADDING, prefill_groups
from ttsq.inference.sched.scheduler import Scheduler

MAX_NEW = 24
TEXTS = ["hello world how are you", "a b c d e f g", "ni hao shi jie", "the quick brown fox", "你好，世界。", "one two"]


EOS_BOOST = 1.5
"""How much :func:`engine64_ending` scales the end token's row of each code head: with random weights the end token
never wins (0 of 60 rows), so the end-token path was held only to ttsq itself; scaled by 1.5, rows of 24 tokens end
anywhere from their second token to their limit (measured: 10 of 16 rows ended early)."""


def _float64_engine(boost_eos: float = 1.0) -> DecoderEngine:
    config = dataclasses.replace(TINY_ENGINE_CONFIG, max_new_token=MAX_NEW, min_new_token=1)
    engine = DecoderEngine(config, cuda_graphs=False, batch_invariant=False, first_chunk_slots=1, overlap=False)
    engine.load()
    chat = engine._loaded_chat()
    if boost_eos != 1.0:
        eos = ChatTTSRows(chat).code_eos
        with torch.no_grad():
            for head in chat.embed.head_code:  # weight-normed: scale the end row's magnitude, its direction kept
                head.parametrizations.weight.original0[eos] *= boost_eos
    chat.gpt.gpt.double()
    chat.embed.double()
    chat.gpt.head_code = [lambda h, head=head: head(h.double()) for head in chat.gpt.head_code]
    chat.gpt.head_text = lambda h, head=chat.gpt.head_text: head(h.double())
    return engine


@pytest.fixture(scope="module")
def engine64_ending(tiny_checkpoint_dir: Any) -> DecoderEngine:
    """:func:`engine64` with the code heads' end token made able to win (:data:`EOS_BOOST`), for both engines alike."""
    return _float64_engine(EOS_BOOST)


@pytest.fixture(scope="module")
def engine64(tiny_checkpoint_dir: Any) -> Iterator[DecoderEngine]:
    """A decoder engine on the tiny checkpoint whose GPT and embeddings compute in float64."""
    config = dataclasses.replace(TINY_ENGINE_CONFIG, max_new_token=MAX_NEW, min_new_token=1)
    engine = DecoderEngine(config, cuda_graphs=False, batch_invariant=False, first_chunk_slots=1, overlap=False)
    engine.load()
    chat = engine._loaded_chat()
    chat.gpt.gpt.double()
    chat.embed.double()
    chat.gpt.head_code = [lambda h, head=head: head(h.double()) for head in chat.gpt.head_code]
    chat.gpt.head_text = lambda h, head=chat.gpt.head_text: head(h.double())
    yield engine


@pytest.fixture(scope="module")
def rows64(engine64: DecoderEngine) -> ChatTTSRows:
    return ChatTTSRows(engine64._loaded_chat())


def decoder(
    engine: DecoderEngine, slots: int, mode: str = "code", max_new: int = MAX_NEW, *, static: bool = False, invariant: bool = False
) -> SlotDecoder:
    chat = engine._loaded_chat()
    rows = ChatTTSRows(chat)
    return SlotDecoder(
        chat.gpt.gpt,
        chat.embed,
        mode="code" if mode == "code" else "text",
        eos=rows.code_eos if mode == "code" else rows.text_eos,
        shape=DecoderShape(slots=slots, max_prompt=96, max_new=max_new),
        dtype=torch.float64,
        head_dtype=torch.float64,
        static_shapes=static,
        batch_invariant=invariant,
    )


@dataclasses.dataclass(frozen=True)
class Row:
    text: str
    speaker_seed: int | None
    params: RowParams


def row_strategy() -> st.SearchStrategy[Row]:
    params = st.builds(
        RowParams,
        temperature=st.sampled_from([0.05, 0.3, 0.7, 1.0]),
        top_p=st.sampled_from([0.3, 0.7, 0.95, 1.0]),
        top_k=st.integers(1, 40),
        repetition_penalty=st.sampled_from([1.0, 1.05, 1.3]),
        min_new_token=st.integers(0, 4),
        max_new_token=st.integers(4, MAX_NEW),
        seed=st.integers(0, 2**31 - 1),
    )
    return st.builds(Row, text=st.sampled_from(TEXTS), speaker_seed=st.one_of(st.none(), st.integers(0, 50)), params=params)


def prompt_of(engine: DecoderEngine, rows: ChatTTSRows, row: Row) -> torch.Tensor:
    speaker = None if row.speaker_seed is None else engine.speaker_from_seed(row.speaker_seed)
    return rows.code_prompt(row.text, 5, speaker).embeddings


def run_alone(engine: DecoderEngine, rows: ChatTTSRows, row: Row) -> Finished:
    dec = decoder(engine, 1)
    _, ended = dec.admit(prompt_of(engine, rows, row), row.params)
    while ended is None:
        finished = dec.step()
        ended = finished[0] if finished else None
    return ended


def upstream_codes(engine: DecoderEngine, row: Row) -> Any:
    """ChatTTS's own ``infer_code`` for one text (batch 1), with the row's voice and sampling."""
    chat = engine._loaded_chat()
    speaker = None if row.speaker_seed is None else engine.speaker_from_seed(row.speaker_seed)
    p = row.params
    params = chat.InferCodeParams(
        prompt="[speed_5]",
        spk_emb=speaker,
        temperature=p.temperature,
        top_P=p.top_p,
        top_K=p.top_k,
        repetition_penalty=p.repetition_penalty,
        manual_seed=p.seed,
        max_new_token=p.max_new_token,
        min_new_token=p.min_new_token,
        show_tqdm=False,
    )
    return next(chat._infer_code([row.text], False, chat.device, True, params))


# ---- equal to ChatTTS -----------------------------------------------------------------------


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(row_strategy(), min_size=1, max_size=5))
def test_every_row_of_a_mixed_batch_samples_exactly_what_chattts_samples_for_it_alone(
    engine64: DecoderEngine, rows64: ChatTTSRows, batch: list[Row]
) -> None:
    """Any mix of voices, temperatures, top-p/top-k, penalties, lengths and seeds in one batch:
    every row's codes and GPT states are ChatTTS's for that row at batch 1, bit for bit."""
    _check_mixed_batch_against_chattts(engine64, rows64, batch)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(row_strategy(), min_size=1, max_size=5))
def test_rows_that_end_on_their_end_token_end_where_chattts_ends_them_after_their_own_min_new_token(
    engine64_ending: DecoderEngine, batch: list[Row]
) -> None:
    """The same with a checkpoint whose end token can win: where each row ends (its end token, after its own
    ``min_new_token``, or its limit) and every code and state before it are ChatTTS's own."""
    _check_mixed_batch_against_chattts(engine64_ending, ChatTTSRows(engine64_ending._loaded_chat()), batch)


def test_the_end_token_checkpoint_ends_rows_early_under_chattts_itself(engine64_ending: DecoderEngine) -> None:
    """The premise of the test above: ChatTTS's own loop ends most rows of this checkpoint before their limit."""
    rows = [Row(TEXTS[seed % len(TEXTS)], seed, RowParams(0.3, 0.7, 20, 1.05, 0, MAX_NEW, seed)) for seed in range(8)]
    lengths = [int(upstream_codes(engine64_ending, row).ids[0].shape[0]) for row in rows]
    assert sum(length < MAX_NEW for length in lengths) >= 4, lengths


def _check_mixed_batch_against_chattts(engine64: DecoderEngine, rows64: ChatTTSRows, batch: list[Row]) -> None:
    dec = decoder(engine64, len(batch))
    ended: dict[int, Finished] = {}
    for row in batch:
        slot, done = dec.admit(prompt_of(engine64, rows64, row), row.params)
        if done is not None:
            ended[slot] = done
    while dec.occupied:
        ended.update({finished.slot: finished for finished in dec.step()})
    for slot, row in enumerate(batch):
        reference = upstream_codes(engine64, row)
        assert torch.equal(ended[slot].tokens, reference.ids[0]), f"row {slot} ({row}) differs from ChatTTS's own"
        hiddens = ended[slot].hiddens
        assert hiddens is not None and torch.equal(hiddens, reference.hiddens[0])


def test_greedy_rows_equal_chattts_batched_call_whatever_their_batch_mates(engine64: DecoderEngine, rows64: ChatTTSRows) -> None:
    """ChatTTS's own batched call (one voice, left-padded texts) against ttsq's rows of the same
    texts mixed with rows of other voices: with greedy sampling (temperature near zero, where
    ChatTTS's top-k of 1 still keeps 3) every row's codes are equal."""
    chat = engine64._loaded_chat()
    speaker = engine64.speaker_from_seed(3)
    texts = TEXTS[:4]
    greedy = RowParams(
        temperature=1e-5, top_p=0.7, top_k=1, repetition_penalty=1.05, min_new_token=1, max_new_token=MAX_NEW, seed=7
    )
    params = chat.InferCodeParams(
        prompt="[speed_5]", spk_emb=speaker, temperature=1e-5, top_K=1, manual_seed=0, max_new_token=MAX_NEW, min_new_token=1
    )
    params.show_tqdm = False
    reference = next(chat._infer_code(list(texts), False, chat.device, True, params))
    dec = decoder(engine64, 8)
    strangers = [Row(text, seed, dataclasses.replace(greedy, seed=seed)) for seed, text in enumerate(TEXTS[2:], start=10)]
    slots = []
    for index, text in enumerate(texts):
        dec.admit(prompt_of(engine64, rows64, strangers[index % len(strangers)]), strangers[index % len(strangers)].params)
        slot, _ = dec.admit(rows64.code_prompt(text, 5, speaker).embeddings, greedy)
        slots.append(slot)
    ended: dict[int, Finished] = {}
    while dec.occupied:
        ended.update({finished.slot: finished for finished in dec.step()})
    for slot, codes in zip(slots, reference.ids, strict=True):
        assert torch.equal(ended[slot].tokens, codes)


def test_refine_text_rows_equal_chattts_refine_text(engine64: DecoderEngine, rows64: ChatTTSRows) -> None:
    chat = engine64._loaded_chat()
    dec = decoder(engine64, 3, mode="text", max_new=12)
    cases = [(text, RowParams(0.7, 0.7, 20, 1.0, 1, 12, seed)) for seed, text in enumerate(TEXTS[:3], start=5)]
    ended: dict[int, Finished] = {}
    for text, params in cases:
        slot, done = dec.admit(rows64.text_prompt(text).embeddings, params)
        if done is not None:
            ended[slot] = done
    while dec.occupied:
        ended.update({finished.slot: finished for finished in dec.step()})
    for slot, (text, params) in enumerate(cases):
        refine = chat.RefineTextParams(manual_seed=params.seed, max_new_token=12, min_new_token=1, show_tqdm=False)
        reference = chat._refine_text([text], chat.device, refine)
        assert torch.equal(ended[slot].tokens, reference.ids[0])
        kept = reference.ids[0][reference.ids[0].less(chat.tokenizer.break_0_ids)]
        assert rows64.refined_text(ended[slot].tokens) == chat.tokenizer.decode([kept])[0]


# ---- independent of batch-mates -----------------------------------------------------------


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    target=row_strategy(),
    others=st.lists(row_strategy(), min_size=0, max_size=6),
    join_after=st.integers(0, 10),
    data=st.data(),
)
def test_a_rows_codes_and_audio_states_do_not_depend_on_its_batch_mates_slot_or_joining_step(
    engine64: DecoderEngine, rows64: ChatTTSRows, target: Row, others: list[Row], join_after: int, data: st.DataObject
) -> None:
    alone = run_alone(engine64, rows64, target)
    dec = decoder(engine64, 8)
    for row in others:
        dec.admit(prompt_of(engine64, rows64, row), row.params)
    for _ in range(join_after):
        dec.step()
    # Take a free slot other than the lowest sometimes: free slots are filled lowest first, so
    # occupy a random number of them with a row that is dropped again after the target is in.
    filler = prompt_of(engine64, rows64, others[0] if others else target)
    fillers = [dec.admit(filler, target.params)[0] for _ in range(data.draw(st.integers(0, dec.free_slots - 1)))]
    slot, ended = dec.admit(prompt_of(engine64, rows64, target), target.params)
    for taken in fillers:
        dec.release(taken)
    while ended is None:
        ended = next((finished for finished in dec.step() if finished.slot == slot), None)
    assert torch.equal(ended.tokens, alone.tokens)
    assert ended.hiddens is not None and alone.hiddens is not None
    assert torch.equal(ended.hiddens, alone.hiddens)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(row_strategy(), min_size=1, max_size=7), joins=st.lists(st.integers(0, 6), min_size=7, max_size=7))
def test_the_cuda_graph_paths_arithmetic_gives_the_same_rows(
    engine64: DecoderEngine, rows64: ChatTTSRows, batch: list[Row], joins: list[int]
) -> None:
    """What a captured step computes — every slot of the bucket, the whole cache under a mask, the
    full sort for top-p/top-k — run eagerly on the CPU (no GPU here): rows joining at various steps
    get exactly the codes of the CPU's own path (exact window, top-k selection)."""
    results = []
    for static in (False, True):
        dec = decoder(engine64, 8, static=static)
        ended: dict[int, Finished] = {}
        pending = sorted(zip(joins, range(len(batch)), strict=False))
        step = 0
        slots: dict[int, int] = {}
        while pending or dec.occupied:
            while pending and pending[0][0] <= step:
                _, index = pending.pop(0)
                slot, done = dec.admit(prompt_of(engine64, rows64, batch[index]), batch[index].params)
                slots[index] = slot
                if done is not None:
                    ended[slot] = done
            ended.update({finished.slot: finished for finished in dec.step()})
            step += 1
        results.append([ended[slots[index]].tokens for index in range(len(batch))])
        if static:
            assert dec.computed in (0, *dec.buckets()) and dec.attended in (0, *dec.windows())
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


def test_a_captured_step_reads_the_smallest_window_that_holds_its_longest_row(engine64: DecoderEngine, rows64: ChatTTSRows) -> None:
    """A graph's step attends to a window of the cache (a power of two, or the whole cache), not the whole
    preallocated cache: step by step beside the eager path (which attends to exactly the longest row), the static
    one reads the smallest window at least as long, its windows grow as the rows do, and the codes are the same."""
    eager, static = decoder(engine64, 4), decoder(engine64, 4, static=True)
    windows = static.windows()
    assert windows == [32, 64, 96 + MAX_NEW + 1]
    for index, text in enumerate(TEXTS[:3]):
        params = RowParams(0.7, 0.95, 20, 1.05, MAX_NEW, MAX_NEW, index)  # every row runs to MAX_NEW
        for dec in (eager, static):
            dec.admit(prompt_of(engine64, rows64, Row(text, None, params)), params)
    ended: dict[str, dict[int, Finished]] = {"eager": {}, "static": {}}
    read: list[int] = []
    while eager.occupied:
        ended["eager"].update({done.slot: done for done in eager.step()})
        ended["static"].update({done.slot: done for done in static.step()})
        assert static.attended == next(window for window in windows if window >= eager.attended)
        read.append(static.attended)
    assert read == sorted(read) and len(set(read)) >= 2  # the window followed the rows' growth
    assert ended["eager"].keys() == ended["static"].keys() == {0, 1, 2}
    assert all(torch.equal(ended["eager"][slot].tokens, ended["static"][slot].tokens) for slot in ended["eager"])


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(
    batch=st.lists(row_strategy(), min_size=2, max_size=8),
    joins=st.lists(st.integers(0, 12), min_size=8, max_size=8),
    static=st.booleans(),
)
def test_rows_moved_down_into_freed_slots_decode_on_as_if_never_moved(
    engine64_ending: DecoderEngine, rows64: ChatTTSRows, batch: list[Row], joins: list[int], static: bool
) -> None:
    """Rows end at their own time (their end token, their limit) and leave holes below the rows still running;
    compacting after every step moves the highest rows down, so a step covers exactly as many slots as there are
    rows (captured: the smallest bucket that holds them), and every moved row's codes and states are the ones it has
    alone."""
    rows = ChatTTSRows(engine64_ending._loaded_chat())
    dec = decoder(engine64_ending, 8, static=static)
    pending = sorted(zip(joins, range(len(batch)), strict=False))
    where: dict[int, int] = {}  # slot -> row index
    ended: dict[int, Finished] = {}
    moved = step = 0
    while pending or dec.occupied:
        while pending and pending[0][0] <= step:
            _, index = pending.pop(0)
            slot, done = dec.admit(prompt_of(engine64_ending, rows, batch[index]), batch[index].params)
            if done is not None:
                ended[index] = done
            else:
                where[slot] = index
        moves = dec.compact()
        for source, target in moves:
            where[target] = where.pop(source)
        moved += len(moves)
        covered = len(where)
        assert dec.span() == dec.occupied == covered
        for done in dec.step():
            ended[where.pop(done.slot)] = done
        assert dec.computed == (next((b for b in dec.buckets() if b >= covered), 0) if static and covered else covered)
        step += 1
    for index, row in enumerate(batch):
        alone = run_alone(engine64_ending, rows, row)
        assert torch.equal(ended[index].tokens, alone.tokens), f"row {index} changed (moves: {moved})"
        mine, theirs = ended[index].hiddens, alone.hiddens
        assert mine is not None and theirs is not None
        assert torch.equal(mine, theirs)


def test_a_captured_step_pads_its_rows_to_a_bucket_at_most_seven_larger(engine64: DecoderEngine) -> None:
    """Batch buckets as vLLM captures them (1, 2, 4, then every 8): with rows compacted into the lowest slots, a step of
    ``n`` rows replays a graph of at most ``n + 7`` slots (powers of two padded up to ``2n - 1``)."""
    dec = decoder(engine64, 44)
    assert dec.buckets() == [1, 2, 4, 8, 16, 24, 32, 40, 44]
    assert all(0 <= next(b for b in dec.buckets() if b >= rows) - rows <= 7 for rows in range(1, 45))
    assert decoder(engine64, 44, invariant=True).buckets() == [44]


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(batch=st.lists(row_strategy(), min_size=1, max_size=8), invariant=st.booleans())
def test_prompts_prefilled_together_are_each_the_prompt_prefilled_alone(
    engine64: DecoderEngine, rows64: ChatTTSRows, batch: list[Row], invariant: bool
) -> None:
    """Rows prefilled in one pass (right-padded to their group's longest prompt, voices and lengths mixed) get the keys,
    values and last state each gets alone, in order: bit for bit on a batch-invariant decoder (each prompt alone), to
    float64 rounding otherwise (a padded batch's products may sum in another order than one row's on this CPU's BLAS;
    padding that leaked into a row would differ by whole units, not ulps)."""
    dec = decoder(engine64, 2, invariant=invariant)
    prompts = [prompt_of(engine64, rows64, row) for row in batch]
    together = dec.prefill_many(prompts)
    assert len(together) == len(prompts)

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return torch.equal(a, b) if invariant else torch.allclose(a, b, rtol=1e-12, atol=1e-12)

    for prompt, made in zip(prompts, together, strict=True):
        alone = dec.prefill(prompt)
        assert made.length == alone.length == prompt.shape[0]
        assert all(same(a, b) for a, b in zip(made.kv, alone.kv, strict=True))
        assert same(made.hidden, alone.hidden)


@given(lengths=st.lists(st.integers(1, 2654), min_size=1, max_size=64))
def test_prefill_groups_keep_their_padding_bounded_and_cover_every_prompt_once(lengths: list[int]) -> None:
    """A long prompt does not pad short ones: each group's padded positions stay within ``PREFILL_PADDING`` of its rows'
    own; every prompt is in exactly one group; with ``alone`` (a batch-invariant decoder) every group is one prompt."""
    groups = prefill_groups(lengths)
    assert sorted(index for group in groups for index in group) == list(range(len(lengths)))
    for group in groups:
        assert len(group) * max(lengths[i] for i in group) <= PREFILL_PADDING * sum(lengths[i] for i in group)
    assert prefill_groups([90, 10, 12, 11, 88, 9]) == [[0, 4], [2, 3, 1, 5]]
    assert all(len(group) == 1 for group in prefill_groups(lengths, alone=True))


def test_compacting_moves_the_highest_rows_into_the_lowest_holes_and_a_batch_invariant_decoder_never_moves(
    engine64: DecoderEngine, rows64: ChatTTSRows
) -> None:
    dec = decoder(engine64, 6)
    params = [RowParams(0.7, 0.95, 20, 1.05, 0, MAX_NEW, seed) for seed in range(6)]
    for seed, row in enumerate(params):
        dec.admit(prompt_of(engine64, rows64, Row(TEXTS[seed], None, row)), row)
    for slot in (0, 2, 3):
        dec.release(slot)
    assert dec.span() == 6
    assert dec.compact() == [(5, 0), (4, 2)]
    assert (dec.span(), dec.occupied, dec.compact()) == (3, 3, [])
    invariant = decoder(engine64, 4, invariant=True)
    for seed in range(2):
        invariant.admit(prompt_of(engine64, rows64, Row(TEXTS[seed], None, params[seed])), params[seed])
    invariant.release(0)
    assert invariant.compact() == [] and invariant.span() == 2


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(target=row_strategy(), others=st.lists(row_strategy(), min_size=1, max_size=7), join_after=st.integers(0, 8))
def test_batch_invariant_rows_are_bit_identical_in_float32_whatever_shares_their_steps(
    tiny_decoder_engine: DecoderEngine, target: Row, others: list[Row], join_after: int
) -> None:
    """float32, as served: with ``BATCH_INVARIANT`` every product has one shape, so a row's states —
    not only its codes — are the same bits alone and in any company (same slot count)."""
    chat = tiny_decoder_engine._loaded_chat()
    rows = ChatTTSRows(chat)

    def make() -> SlotDecoder:
        return SlotDecoder(
            chat.gpt.gpt, chat.embed, mode="code", eos=rows.code_eos,
            shape=DecoderShape(slots=8, max_prompt=96, max_new=MAX_NEW), dtype=torch.float32, head_dtype=torch.float32,
            batch_invariant=True,
        )  # fmt: skip

    def run(company: list[Row], wait: int) -> Finished:
        dec = make()
        for row in company:
            dec.admit(prompt_of(tiny_decoder_engine, rows, row), row.params)
        for _ in range(wait):
            dec.step()
        slot, ended = dec.admit(prompt_of(tiny_decoder_engine, rows, target), target.params)
        while ended is None:
            ended = next((finished for finished in dec.step() if finished.slot == slot), None)
        return ended

    alone, crowded = run([], 0), run(others, join_after)
    assert torch.equal(alone.tokens, crowded.tokens)
    assert alone.hiddens is not None and crowded.hiddens is not None
    assert torch.equal(alone.hiddens, crowded.hiddens)


@pytest.mark.parametrize("static", [False, True], ids=["eager", "static-shapes"])
def test_the_end_token_is_barred_until_each_rows_own_min_new_token_whatever_its_batch_mates(
    engine64: DecoderEngine, rows64: ChatTTSRows, static: bool
) -> None:
    """Every row's noise makes the end token win whenever it is allowed (its ``q`` is ~0), so a row ends exactly
    at its own ``min_new_token``: rows with different minimums, joining at different steps, share the steps (the
    eager step skips the mask only while no row of the step is still below its minimum)."""
    dec = decoder(engine64, 4, static=static)
    reset = dec._reset

    def eos_always_wins(slot: int, params: RowParams) -> None:
        reset(slot, params)
        dec.noise[slot, :, dec.eos] = 1e-30

    dec._reset = eos_always_wins  # type: ignore[method-assign]
    prompt = rows64.code_prompt(TEXTS[0], 5, None).embeddings
    ended: dict[int, int] = {}
    minimums = iter([3, 0, 6, 1, 5, 2])
    admitted: dict[int, int] = {}
    for step in range(40):
        while dec.free_slots and (minimum := next(minimums, None)) is not None:
            params = RowParams(0.7, 1.0, 626, 1.05, minimum, MAX_NEW, step)
            slot, done = dec.admit(prompt, params)
            admitted[slot] = minimum
            if done is not None:
                ended[minimum] = int(done.tokens.shape[0])
        for done in dec.step():
            ended[admitted[done.slot]] = int(done.tokens.shape[0])
        if not dec.occupied:
            break
    assert ended == {m: m for m in (3, 0, 6, 1, 5, 2)}


def test_the_stream_seed_is_the_request_seed_for_the_first_chunk_and_distinct_for_the_others() -> None:
    assert stream_seed(1234, 0) == 1234
    seeds = {stream_seed(1234, chunk) for chunk in range(1, 50)}
    assert len(seeds) == 49 and 1234 not in seeds
    assert stream_seed(1234, 3) == stream_seed(1234, 3)
    assert all(0 <= seed < 2**63 for seed in seeds)


# ---- the scheduler: continuous batching and failures ----------------------------------------


def requests(engine: DecoderEngine, count: int, poison_at: int | None = None) -> list[SynthesisRequest]:
    texts = ["First one. And a second sentence here.", "你好。再见。", "alpha beta gamma", "short", "x y z w v", "one. two. three."]
    made = []
    for index in range(count):
        text = texts[index % len(texts)]
        if index == poison_at:
            text = "poison " + text
        speaker = engine.speaker_from_seed(index)
        sampling = Sampling(temperature=0.2 + 0.05 * index)
        made.append(SynthesisRequest(text=text, speaker=speaker, seed=100 + index, sampling=sampling))
    return made


def run(scheduler: Batcher, reqs: list[SynthesisRequest]) -> tuple[dict[str, dict[int, np.ndarray]], dict[str, BaseException]]:
    audio: dict[str, dict[int, np.ndarray]] = {}
    failed: dict[str, BaseException] = {}
    for index, req in enumerate(reqs):
        for event in scheduler.add(f"r{index}", req):
            assert isinstance(event, RequestFailed)
            failed[event.key] = event.error
    while scheduler.busy:
        for event in scheduler.step():
            if isinstance(event, ChunkReady):
                audio.setdefault(event.key, {})[event.chunk.index] = event.chunk.samples
            elif isinstance(event, RequestFailed):
                failed[event.key] = event.error
    return audio, failed


def test_a_poisoned_row_in_a_full_batch_fails_alone_and_its_batch_mates_sound_as_without_it(engine64: DecoderEngine) -> None:
    clean, nothing = run(engine64.batcher(8, oom_recover_s=60), requests(engine64, 8))
    assert nothing == {}
    poisoned = requests(engine64, 8, poison_at=3)

    seen = 0

    def fail_after_admission(reqs: Any) -> None:
        # The poison is admitted fine and breaks the first step it shares, where ttsq cannot tell
        # whose fault it was; from then on it fails wherever it runs.
        nonlocal seen
        if any("poison" in req.text for req in reqs):
            seen += 1
            if seen > 1:
                raise TransientError("injected fault")

    scheduler = engine64.batcher(8, oom_recover_s=60)
    scheduler.hook = fail_after_admission
    audio, failed = run(scheduler, poisoned)
    assert set(failed) == {"r3"}
    assert scheduler.stats.suspects >= 2
    for key in clean:
        if key != "r3":
            assert clean[key].keys() == audio[key].keys()
            assert all(np.array_equal(clean[key][i], audio[key][i]) for i in clean[key])


def test_prefill_and_audio_beside_the_loop_give_every_request_the_same_audio(engine64: DecoderEngine) -> None:
    """``OVERLAP_PREFILL_AND_AUDIO``: the next rows are prefilled and finished rows decoded in threads of
    their own while the loop steps; when each row joins changes, what each row is does not."""
    inline, failed_inline = run(engine64.batcher(3, oom_recover_s=60), requests(engine64, 8))
    overlapped = engine64._scheduler(3, engine64._limits(), oom_recover_s=60, capture=False, reserve=1, overlap=True)
    assert overlapped._prefill_pool is not None and overlapped.audio.pool is not None
    audio, failed = run(overlapped, requests(engine64, 8))
    assert failed == failed_inline == {}
    assert audio.keys() == inline.keys()
    assert all(np.array_equal(inline[key][i], audio[key][i]) for key in inline for i in inline[key])
    assert not overlapped.busy


def test_a_request_that_fails_while_its_first_chunk_waits_for_its_prefill_leaves_nothing_behind(
    engine64: DecoderEngine,
) -> None:
    """A regression: its second chunk's prefill failed while its first chunk's was still running, so the first
    chunk was set aside in that admission pass and put back after the request had failed: it then took a slot and
    decoded to its end for audio nobody would receive."""
    from concurrent.futures import Future

    scheduler = engine64._scheduler(3, engine64._limits(), oom_recover_s=60, capture=False, reserve=0, overlap=True)
    text = "This sentence is the first one here. " * 2
    scheduler.add("r", SynthesisRequest(text=text, speaker=engine64.speaker_from_seed(1), seed=1))
    rows = {entry.row.index: entry.row for entry in scheduler._waiting}
    assert sorted(rows) == [0, 1]
    rows[0].prefill = Future()  # still running in the prefill thread
    failed: Future[Any] = Future()
    failed.set_exception(RuntimeError("prefill failed"))
    rows[1].prefill = failed
    events = scheduler.step()
    assert [(type(event), event.key) for event in events] == [(RequestFailed, "r")]
    assert (scheduler.waiting_rows, scheduler.active_rows, scheduler.requests()) == (0, 0, [])
    assert not scheduler.busy


def test_fault_injection_poison_fails_only_its_request(engine64: DecoderEngine) -> None:
    from tests.conftest import fault_config

    faulty = FaultInjectingEngine(engine64, fault_config("raise", match="poison"))
    audio, failed = run(faulty.batcher(4, oom_recover_s=60), requests(engine64, 4, poison_at=1))
    assert set(failed) == {"r1"} and "injected fault" in str(failed["r1"])
    assert set(audio) == {"r0", "r2", "r3"}


def test_out_of_memory_halves_the_slots_in_use_and_every_request_still_completes_unchanged(engine64: DecoderEngine) -> None:
    clean, _ = run(engine64.batcher(8, oom_recover_s=60), requests(engine64, 8))

    spans: list[tuple[int, int]] = []
    scheduler = engine64.batcher(8, oom_recover_s=3600)
    assert isinstance(scheduler, Scheduler)
    code = scheduler.code

    def small_device(reqs: Any) -> None:
        spans.append((len(reqs), code.span()))
        if len(reqs) > 3:
            raise OutOfMemory("CUDA out of memory (injected)")

    scheduler.hook = small_device
    audio, failed = run(scheduler, requests(engine64, 8))
    assert failed == {}
    assert scheduler.slot_limit <= 3
    # a step after the halving covers the rows kept alone (evicted rows free their slots, rows above a hole move down)
    last_failed = max(index for index, (rows, _) in enumerate(spans) if rows > 3)
    assert spans[last_failed + 1 :] and all(span == rows for rows, span in spans[last_failed + 1 :])
    assert scheduler.stats.out_of_memory >= 1
    assert all(np.array_equal(clean[key][i], audio[key][i]) for key in clean for i in clean[key])


@pytest.mark.parametrize("head_start", [True, False], ids=["head-start", "no-head-start"])
def test_with_a_head_start_later_chunks_take_no_slot_until_their_first_chunk_is_decoded(
    engine64: DecoderEngine, head_start: bool
) -> None:
    """A lone request of a few chunks in eight slots: with a head start its first chunk decodes alone (a smaller
    batch, so sooner on a CPU) and the later chunks join once it ends; without, all share the steps from the start.
    The audio is the same either way (each row's random stream is its own)."""
    text = "One sentence here, with a few more words in it. A second one, also long enough to stand alone. And a third."
    request = SynthesisRequest(text=text, speaker=engine64.speaker_from_seed(5), seed=9)
    engine64._head_start = head_start
    try:
        scheduler = engine64._scheduler(8, engine64._limits(), oom_recover_s=60, capture=False, reserve=0)
    finally:
        engine64._head_start = False
    assert scheduler.head_start is head_start
    scheduler.add("r", request)
    rows_per_step: list[int] = []
    first_chunk_step: int | None = None
    audio: dict[int, np.ndarray] = {}
    while scheduler.busy:
        before = scheduler.stats.row_steps
        for event in scheduler.step():
            if isinstance(event, ChunkReady):
                audio[event.chunk.index] = event.chunk.samples
                if event.chunk.index == 0:
                    first_chunk_step = len(rows_per_step)
        rows_per_step.append(scheduler.stats.row_steps - before)
    chunks = len(audio)
    assert 3 <= chunks <= 8 and sorted(audio) == list(range(chunks)) and first_chunk_step is not None
    if head_start:
        assert set(rows_per_step[:first_chunk_step]) == {1}, "the first chunk decoded alone"
        assert max(rows_per_step[first_chunk_step + 1 :]) == chunks - 1, "then the later ones together"
    else:
        assert rows_per_step[0] == chunks, "every chunk from the first step"
    alone = engine64._scheduler(8, engine64._limits(), oom_recover_s=60, capture=False, reserve=0)
    alone.add("again", request)
    again: dict[int, np.ndarray] = {}
    while alone.busy:
        again |= {e.chunk.index: e.chunk.samples for e in alone.step() if isinstance(e, ChunkReady)}
    assert all(np.array_equal(audio[i], again[i]) for i in audio)


def test_a_slot_freed_by_an_ended_row_takes_the_next_waiting_row_at_the_next_step(engine64: DecoderEngine) -> None:
    """Continuous batching: while rows wait, every step runs with every slot taken (none kept for first chunks here)."""
    scheduler = engine64._scheduler(2, engine64._limits(), oom_recover_s=60, capture=False, reserve=0)
    for index, req in enumerate(requests(engine64, 6)):
        scheduler.add(f"r{index}", req)
    full_steps = 0
    while scheduler.busy:
        waiting, before = scheduler.waiting_rows, scheduler.stats.row_steps
        scheduler.step()
        if waiting:
            assert scheduler.stats.row_steps - before == 2, "a slot stayed empty while rows waited"
            full_steps += 1
    assert full_steps > 10
    assert scheduler.stats.wasted_fraction < 0.2


def test_rows_left_running_when_others_end_move_down_so_no_step_computes_a_free_slot_and_audio_is_unchanged(
    engine64_ending: DecoderEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows end at their own time (the end token can win here), leaving holes below rows still running; the scheduler
    compacts the slots before each step and follows the moves: no step computes a free slot, and every request's
    audio — its pieces (read from the row's slot while it runs) and its chunks — is what it gets alone."""
    monkeypatch.setattr(engine64_ending, "pieces", (6, 2))  # a first piece after 8 of a row's at most 24 tokens

    def heard(scheduler: Scheduler, reqs: list[SynthesisRequest]) -> dict[str, list[tuple[str, int, np.ndarray]]]:
        out: dict[str, list[tuple[str, int, np.ndarray]]] = {}
        for index, req in enumerate(reqs):
            assert scheduler.add(f"r{index}", req) == []
        while scheduler.busy:
            for event in scheduler.step():
                assert isinstance(event, ChunkReady | PieceReady), event
                out.setdefault(event.key, []).append((type(event).__name__, event.chunk.index, event.chunk.samples))
        return out

    def scheduler(slots: int) -> Scheduler:
        limits = engine64_ending._limits()
        return engine64_ending._scheduler(slots, limits, oom_recover_s=60, capture=False, pieces=engine64_ending._piecing())

    reqs = requests(engine64_ending, 6)
    together = scheduler(6)
    compact, moves = together.code.compact, []

    def recorded() -> list[tuple[int, int]]:  # the decoder's own compact(), its moves noted
        made = compact()
        moves.extend(made)
        return made

    monkeypatch.setattr(together.code, "compact", recorded)
    crowded = heard(together, reqs)
    assert moves, "no row was moved: the test would not see a move go wrong"
    assert together.stats.slot_steps == together.stats.row_steps, "a step computed a free slot"
    assert any(kind == "PieceReady" for events in crowded.values() for kind, _, _ in events)
    for index, req in enumerate(reqs):
        alone = heard(scheduler(1), [req])["r0"]
        assert [(kind, i) for kind, i, _ in crowded[f"r{index}"]] == [(kind, i) for kind, i, _ in alone]
        assert all(np.array_equal(a, b) for (_, _, a), (_, _, b) in zip(crowded[f"r{index}"], alone, strict=True))


def test_rows_admitted_together_without_a_prefill_thread_are_prefilled_together_and_sound_as_alone(
    engine64: DecoderEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inline admission (CUDA's path: no prefill thread): the rows about to take the free slots go through the GPT in
    one pass per group, and every request's audio is what it gets alone."""
    reqs = requests(engine64, 6)
    scheduler = engine64._scheduler(6, engine64._limits(), oom_recover_s=60, capture=False)
    assert scheduler._prefill_pool is None
    passes: list[int] = []
    real = scheduler.code.prefill_many

    def counted(prompts: Any) -> Any:
        passes.append(len(prompts))
        return real(prompts)

    monkeypatch.setattr(scheduler.code, "prefill_many", counted)
    audio, failed = run(scheduler, reqs)
    assert failed == {}
    assert max(passes) >= 3, f"rows admitted at once were prefilled apart: {passes}"
    assert sum(passes) == scheduler.stats.rows_admitted, "a row was prefilled twice, or not at all"
    for index, req in enumerate(reqs):
        alone, _ = run(engine64._scheduler(1, engine64._limits(), oom_recover_s=60, capture=False), [req])
        assert alone["r0"].keys() == audio[f"r{index}"].keys()
        assert all(np.array_equal(alone["r0"][i], audio[f"r{index}"][i]) for i in alone["r0"])


def test_a_new_requests_first_chunk_starts_at_the_next_step_even_when_long_requests_fill_every_slot(
    engine64: DecoderEngine,
) -> None:
    scheduler = engine64.batcher(3, oom_recover_s=60)
    assert isinstance(scheduler, Scheduler) and scheduler.first_chunk_slots == 1
    long = "This sentence is the first one here. " * 6
    scheduler.add("long", SynthesisRequest(text=long, speaker=engine64.speaker_from_seed(1), seed=1))
    scheduler.step()
    assert (scheduler.active_rows, scheduler.waiting_rows) == (2, 4), "later chunks never take the first-chunk slot"
    scheduler.add("new", SynthesisRequest(text="Short.", speaker=engine64.speaker_from_seed(2), seed=2))
    scheduler.step()
    assert scheduler.active_rows == 3 and "new" in scheduler.requests()
    assert scheduler.waiting_rows == 4, "the new request's chunk went straight into the first-chunk slot"


def test_first_chunks_are_admitted_before_later_chunks_of_earlier_requests(engine64: DecoderEngine) -> None:
    scheduler = engine64.batcher(1, oom_recover_s=60)
    long = SynthesisRequest(text="This sentence is the first one here. " * 4, speaker=engine64.speaker_from_seed(1), seed=1)
    short = SynthesisRequest(text="Late.", speaker=engine64.speaker_from_seed(2), seed=2)
    scheduler.add("long", long)
    order: list[tuple[str, int]] = []
    added = False
    while scheduler.busy:
        for event in scheduler.step():
            assert isinstance(event, ChunkReady)
            order.append((event.key, event.chunk.index))
            if not added:
                scheduler.add("short", short)
                added = True
    assert order[:2] == [("long", 0), ("short", 0)]


def test_cancel_drops_a_requests_rows_and_frees_its_slots(engine64: DecoderEngine) -> None:
    scheduler = engine64.batcher(4, oom_recover_s=60)
    scheduler.add("keep", requests(engine64, 1)[0])
    long = "This sentence is the first one here. " * 6  # six chunks of at most 40 characters
    scheduler.add("drop", SynthesisRequest(text=long, speaker=engine64.speaker_from_seed(9), seed=9))
    scheduler.step()
    # Two first chunks, then later chunks up to the limit less the slot kept for first chunks.
    assert (scheduler.active_rows, scheduler.waiting_rows) == (3, 4)
    scheduler.cancel("drop")
    assert (scheduler.active_rows, scheduler.waiting_rows) == (1, 0)
    keys = set()
    while scheduler.busy:
        keys |= {event.key for event in scheduler.step()}
    assert keys == {"keep"}


def test_a_request_that_must_run_alone_never_shares_a_step(engine64: DecoderEngine) -> None:
    seen: list[set[str]] = []
    scheduler = engine64.batcher(4, oom_recover_s=60)
    scheduler.hook = lambda reqs: seen.append({req.text for req in reqs})
    reqs = requests(engine64, 4)
    scheduler.add("a", reqs[0])
    scheduler.add("isolated", reqs[1], alone=True)
    scheduler.add("b", reqs[2])
    while scheduler.busy:
        scheduler.step()
    assert any(reqs[1].text in texts for texts in seen)
    assert all(texts == {reqs[1].text} for texts in seen if reqs[1].text in texts)


def test_a_cpu_decoder_asked_for_cuda_graphs_captures_none_and_does_not_log_that_it_did(
    tiny_checkpoint_dir: Any, caplog: Any
) -> None:
    """CUDA_GRAPHS is on by default; on a CPU there is nothing to capture, and the worker's log said it had."""
    engine = DecoderEngine(TINY_ENGINE_CONFIG, cuda_graphs=True, batch_invariant=False, first_chunk_slots=1, overlap=False)
    engine.load()
    caplog.set_level("INFO", logger="ttsq.inference.engines.decoder_engine")
    scheduler = engine._scheduler(2, engine._limits(), oom_recover_s=60, capture=True, reserve=0)
    assert not scheduler.code.cuda_graphs
    assert "CUDA graphs" not in caplog.text


def test_onednn_packed_weights_give_the_plain_float32_paths_tokens_for_mixed_rows_over_a_hundred_steps(
    tiny_decoder_engine: DecoderEngine,
) -> None:
    """``CPU_PACKED_WEIGHTS``: the GPT's projections and heads multiplied through oneDNN from weights packed once.
    Mixed voices and sampling, rows joining as others leave, 130 steps: every row's codes are the plain
    float32 path's (MKL's ``F.linear``), and its GPT states agree to float32 rounding."""
    chat = tiny_decoder_engine._loaded_chat()
    rows = ChatTTSRows(chat)
    cases = [
        Row(TEXTS[index % len(TEXTS)], index if index % 3 else None, RowParams(
            temperature=(0.05, 0.3, 0.7, 1.0)[index % 4], top_p=(0.3, 0.7, 0.95)[index % 3], top_k=1 + 7 * index,
            repetition_penalty=(1.0, 1.05, 1.3)[index % 3], min_new_token=length, max_new_token=length, seed=1000 + index,
        ))
        for index, length in enumerate([110, 40, 75, 100, 20, 60, 110, 35, 90, 50])
    ]  # fmt: skip

    def run(packed: bool) -> tuple[list[Finished], int]:
        dec = SlotDecoder(
            chat.gpt.gpt, chat.embed, mode="code", eos=rows.code_eos,
            shape=DecoderShape(slots=6, max_prompt=96, max_new=110), dtype=torch.float32, head_dtype=torch.float32,
            packed_weights=packed,
        )  # fmt: skip
        assert dec.packed_weights is packed
        pending, ended, slots, steps = list(enumerate(cases)), {}, {}, 0
        while pending or dec.occupied:
            while pending and dec.free_slots:
                index, row = pending.pop(0)
                slots[index], _ = dec.admit(prompt_of(tiny_decoder_engine, rows, row), row.params)
            for finished in dec.step():
                ended[next(i for i, s in slots.items() if s == finished.slot and i not in ended)] = finished
            steps += 1
        return [ended[index] for index in range(len(cases))], steps

    (plain, steps), (packed, _) = run(False), run(True)
    assert steps >= 100
    for index, (a, b) in enumerate(zip(plain, packed, strict=True)):
        assert a.tokens.shape[0] == cases[index].params.max_new_token
        assert torch.equal(a.tokens, b.tokens), f"row {index} sampled other codes on packed weights"
        assert a.hiddens is not None and b.hiddens is not None
        torch.testing.assert_close(a.hiddens, b.hiddens, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("precision", ["bf16", "int8"])
def test_an_opt_in_precision_reaches_the_decoders_matmuls_and_serves_requests(
    tiny_checkpoint_dir: Any, precision: Precision
) -> None:
    """``PRECISION=bf16|int8``: the engine's decoders multiply in it (their codes differ from float32's: BENCHMARKS.md
    gives the agreement), and requests are served through it to the end."""
    config = dataclasses.replace(TINY_ENGINE_CONFIG, precision=precision)
    engine = DecoderEngine(config, cuda_graphs=False, batch_invariant=False, first_chunk_slots=1, overlap=False)
    engine.load()
    scheduler = engine._scheduler(3, engine._limits(), oom_recover_s=60, capture=False)
    assert scheduler.code.precision == precision and scheduler.code.packed_weights
    audio, failed = run(scheduler, requests(engine, 3))
    assert failed == {} and set(audio) == {"r0", "r1", "r2"}
    assert all(samples.size > 0 for chunks in audio.values() for samples in chunks.values())


def test_an_opt_in_precision_is_refused_for_a_gpt_that_is_not_float32(engine64: DecoderEngine) -> None:
    with pytest.raises(ValueError, match="PRECISION=int8 needs a CPU and a float32 GPT"):
        chat = engine64._loaded_chat()
        SlotDecoder(
            chat.gpt.gpt, chat.embed, mode="code", eos=0, shape=DecoderShape(slots=1, max_prompt=8, max_new=4),
            dtype=torch.float64, head_dtype=torch.float64, precision="int8",
        )  # fmt: skip


def test_float32_rows_as_served_sample_chattts_float32_codes(tiny_decoder_engine: DecoderEngine) -> None:
    """float32 as a worker serves it (oneDNN-packed weights, fused projections, the CPU's eager step), not float64:
    mixed rows in one batch get the codes ChatTTS's own float32 ``infer_code`` samples for each alone."""
    chat = tiny_decoder_engine._loaded_chat()
    rows = ChatTTSRows(chat)
    cases = [
        Row(TEXTS[index], index if index % 2 else None, RowParams(
            temperature=(0.3, 0.7, 1.0)[index % 3], top_p=(0.7, 1.0, 0.95)[index % 3], top_k=(20, 5, 40)[index % 3],
            repetition_penalty=(1.05, 1.0, 1.3)[index % 3], min_new_token=MAX_NEW, max_new_token=MAX_NEW, seed=50 + index,
        ))
        for index in range(6)
    ]  # fmt: skip
    dec = SlotDecoder(
        chat.gpt.gpt, chat.embed, mode="code", eos=rows.code_eos,
        shape=DecoderShape(slots=6, max_prompt=96, max_new=MAX_NEW), dtype=torch.float32, head_dtype=torch.float32,
        packed_weights=True,
    )  # fmt: skip
    for row in cases:
        dec.admit(prompt_of(tiny_decoder_engine, rows, row), row.params)
    ended: dict[int, Finished] = {}
    while dec.occupied:
        ended.update({finished.slot: finished for finished in dec.step()})
    for slot, row in enumerate(cases):
        assert torch.equal(ended[slot].tokens, upstream_codes(tiny_decoder_engine, row).ids[0]), f"row {slot} ({row})"


def test_a_workers_batcher_builds_the_refine_decoder_before_serving_and_survives_its_failure(engine64: DecoderEngine) -> None:
    """A regression: the refine-text decoder was built (on CUDA, captured) at the first refine_text request,
    mid-serving, stalling every row, and its build error escaped the inference thread. A worker's batcher builds it
    now, before the worker is ready; a build that fails is logged, refine_text requests fail with its reason, and
    every other request is served."""
    assert isinstance(scheduler := engine64.batcher(2, oom_recover_s=60), Scheduler)
    assert scheduler.text is not None and scheduler.text.mode == "text"
    assert all(a is b for a, b in zip(scheduler.text._layers, scheduler.code._layers, strict=True)), "one copy of the weights"

    def no_room() -> SlotDecoder:
        raise RuntimeError("no memory left for the refine cache")

    chat = engine64._loaded_chat()
    broken = Scheduler(ChatTTSRows(chat), decoder(engine64, 2), no_room, engine64._split, engine64._limits(), oom_recover_s=60,
                       build_text_now=True)  # fmt: skip
    assert broken.text is None
    speaker = engine64.speaker_from_seed(1)
    refine = SynthesisRequest(text="refine me.", speaker=speaker, seed=1, sampling=Sampling(refine_text=True))
    audio, failed = run(broken, [refine, SynthesisRequest(text="plain.", speaker=speaker, seed=2)])
    assert set(failed) == {"r0"} and "no memory left for the refine cache" in str(failed["r0"])
    assert set(audio) == {"r1"}


def test_out_of_memory_admitting_a_row_keeps_the_rows_in_flight_and_refuses_new_ones_for_a_while(
    engine64: DecoderEngine,
) -> None:
    """The KV cache is preallocated, so evicting rows in flight frees nothing and throws their work
    away. Out of memory while admitting a row (its prefill) now leaves the rows in flight decoding, holds the slot limit
    at their number, and puts the row back: every row is admitted once, and the audio is what it is without the fault."""
    reqs = requests(engine64, 4)
    clean, _ = run(engine64._scheduler(4, engine64._limits(), oom_recover_s=60, capture=False), reqs)
    scheduler = engine64._scheduler(4, engine64._limits(), oom_recover_s=3600, capture=False)
    prefilled = scheduler._prefilled
    alone: list[bool] = []

    def third_row_out_of_memory(dec: SlotDecoder, rows: list[Any]) -> Any:
        # Out of memory whenever the third row is prefilled together with others (each then is prefilled alone, at its
        # admission) and the first time it is prefilled alone.
        if any(row.request.key == "r2" for row in rows) and not alone:
            alone.extend([True] if len(rows) == 1 else [])
            raise OutOfMemory("CUDA out of memory (injected at the third row's prefill)")
        return prefilled(dec, rows)

    scheduler._prefilled = third_row_out_of_memory  # type: ignore[method-assign,assignment]
    for index, req in enumerate(reqs):
        scheduler.add(f"r{index}", req)
    assert scheduler.step() == []
    assert (scheduler.active_rows, scheduler.slot_limit, scheduler.stats.out_of_memory) == (2, 2, 1)
    audio: dict[str, dict[int, np.ndarray]] = {}
    while scheduler.busy:
        for event in scheduler.step():
            assert isinstance(event, ChunkReady)
            audio.setdefault(event.key, {})[event.chunk.index] = event.chunk.samples
    rows = sum(len(chunks) for chunks in clean.values())
    assert scheduler.stats.rows_admitted == rows, "a row in flight was evicted and admitted again"
    assert audio.keys() == clean.keys()
    assert all(np.array_equal(clean[key][i], audio[key][i]) for key in clean for i in clean[key])
