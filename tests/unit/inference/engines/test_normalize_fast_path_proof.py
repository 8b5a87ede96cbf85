"""A proof, on WeTextProcessing's shipped graphs, that their taggers read the text :func:`spoken_as_is` accepts as
plain words and marks only: for every such text at once, not for samples.

The accepted text is written as an automaton (the same rules as :func:`spoken_as_is`: its shapes, the refused runs and
starts of :func:`_refused`, "per " and a lone capital before a mark) and composed with the tagger. Chinese: no path at
all tags anything but single characters. English: paths through other tokens exist (a word-list entry that starts a
longer word: "Afb" may be read as the entry "Af" and a word "b"), so each is weighed against the cheapest plain
tagging of the same text, and every one must cost strictly more: the tagger's shortest path is then a plain one.
That a plain tagging is spoken back as the text itself is the property tests' part
(``test_normalize_fast_path.py``).
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable

import pynini
from pynini.lib import utf8

from ttsq.inference.engines.normalize import _load, _refused

SIGMA = utf8.VALID_UTF8_CHAR.star.optimize()
NOT_QUOTE = pynini.difference(utf8.VALID_UTF8_CHAR, pynini.accep('"'))


def _union(words: Iterable[str]) -> pynini.Fst:
    return pynini.union(*[pynini.accep(pynini.escape(w)) for w in words]).optimize()


def _tagged_as(names: tuple[tuple[str, str], ...]) -> pynini.Fst:
    """Tagger outputs made only of tokens named ``names`` (``w { v: "..." } p { v: "..." }``, one space between)."""
    token = _union(f"{name} {{ {field}: " for name, field in names) + pynini.accep('"') + NOT_QUOTE.plus + pynini.accep('" }')
    return (token + (pynini.accep(" ") + token).star).ques.optimize()


def _without(accepted: pynini.Fst, pattern: pynini.Fst) -> pynini.Fst:
    return pynini.difference(accepted, pattern.optimize()).optimize()


def _english_accepted() -> pynini.Fst:
    runs, elided, _ = _refused()
    refused = _union(runs)
    lower, upper, marks = _union(string.ascii_lowercase), _union(string.ascii_uppercase), _union(",.!?;:")
    first = pynini.difference((lower.plus | upper + lower.star).optimize(), refused).optimize()
    after_apostrophe = pynini.accep("'") + pynini.difference(lower.plus.optimize(), refused).optimize()
    lone_capital = pynini.difference(upper, refused).optimize()  # never before a mark: "U. S. A."
    word = (
        pynini.difference(first, upper).optimize() + after_apostrophe.ques + marks.ques
        | lone_capital + after_apostrophe + marks.ques
        | lone_capital
    )
    accepted = (word + (pynini.accep(" ") + word).star).optimize()
    starts = [re.sub(r"\\(.)", r"\1", key) for key in elided.pattern.split("(?:", 1)[1].rstrip(")").split("|")]
    accepted = _without(accepted, (SIGMA + pynini.accep(" ")).ques + _union(starts) + SIGMA)
    return _without(accepted, SIGMA + pynini.accep("per ") + SIGMA)


def _weight(weight: object) -> float:
    text = str(weight)
    return float("inf") if text == "Infinity" else float(text)


def _cheapest(fst: pynini.Fst) -> float:
    """The least path weight of ``fst`` (tropical weights, some negative; Bellman-Ford, failing on a negative cycle)."""
    arcs = [[(arc.nextstate, _weight(arc.weight)) for arc in fst.arcs(state)] for state in fst.states()]
    distance = [float("inf")] * len(arcs)
    distance[fst.start()] = 0.0
    for _ in range(len(arcs) + 1):
        changed = False
        for state, out in enumerate(arcs):
            for target, weight in out:
                if distance[state] + weight < distance[target] - 1e-9:
                    distance[target], changed = distance[state] + weight, True
        if not changed:
            return min(distance[state] + _weight(fst.final(state)) for state in range(len(arcs)))
    raise AssertionError("a negative cycle: some accepted text is tagged more cheaply with other tokens")


def test_the_chinese_tagger_reads_accepted_text_as_single_characters_on_every_path() -> None:
    han = [chr(c) for c in range(0x4E00, 0xA000) if chr(c) not in _refused()[2]]
    accepted = _union(han + list("，。！？；：、")).star.optimize()
    tagged = pynini.compose(accepted, _load("zh").tagger)  # type: ignore[attr-defined]
    other = pynini.difference(SIGMA, _tagged_as((("char", "value"),)))
    assert pynini.compose(tagged, other).optimize().num_states() == 0


def test_every_other_english_tagging_of_accepted_text_costs_more_than_a_plain_one() -> None:
    accepted = _english_accepted()
    tagged = pynini.compose(accepted, _load("en").tagger)  # type: ignore[attr-defined]
    plain_out = _tagged_as((("w", "v"), ("p", "v")))
    plain = pynini.project(pynini.compose(tagged, plain_out), "input").rmepsilon()
    other = pynini.project(pynini.compose(tagged, pynini.difference(SIGMA, plain_out)), "input").rmepsilon()
    unweighted = pynini.arcmap(plain, map_type="rmweight").optimize()
    assert pynini.difference(accepted, unweighted).optimize().num_states() == 0  # every accepted text has a plain path
    cheapest_plain = pynini.determinize(plain).minimize()  # one path a text: its cheapest plain tagging's weight
    against = pynini.intersect(pynini.arcmap(cheapest_plain, map_type="invert"), other)
    assert against.num_states() > 0  # there are other paths (the word-list prefixes) ...
    assert _cheapest(against) > 0  # ... and each costs more than the cheapest plain path of its text
