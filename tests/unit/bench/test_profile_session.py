"""The session profile's reading of py-spy's collapsed stacks: each sample in its leaf's category, or its caller's
for a leaf in torch, numpy or the event loop."""

from __future__ import annotations

from pathlib import Path

from bench.listening.profile_session import Profile, category


def test_a_sample_goes_to_its_leaf_s_category_or_its_caller_s_for_torch() -> None:
    gpt = [
        "<module> (worker.py:1)",
        "Scheduler.step (ttsq/inference/sched/scheduler.py:2)",
        "step (ttsq/inference/gpt/slot_decoder.py:3)",
    ]
    assert category([*gpt, "linear (torch/nn/functional.py:4)"]) == "gpt step (speech)"
    assert category(gpt[:2]) == "scheduler"
    assert category(["<module> (worker.py:1)", "xadd (redis/commands/core.py:9)"]) == "redis client"
    assert category(["<module> (worker.py:1)"]) == "other"
    assert category(["run (asyncio/runners.py:1)", "send (websockets/x.py:2)", "x (numpy/core.py:3)"]) == "websocket / http"
    assert category(["main (worker.py:1)", "linear (torch/nn/functional.py:4)"]) == "torch (other)"


def test_collapsed_stacks_are_read_and_counted(tmp_path: Path) -> None:
    raw = tmp_path / "worker.txt"
    raw.write_text(
        "thread 1;main (worker.py:1);step (ttsq/inference/gpt/slot_decoder.py:3) 30\n"
        "thread 2;run (threading.py:9);compress (lzma.py:327) 10\n"
        "thread 1;main (worker.py:1);step (ttsq/inference/gpt/slot_decoder.py:3) 5\n"
    )
    profile = Profile.read("worker", raw)
    assert profile.total == 45
    assert profile.top_self(1) == [("step (ttsq/inference/gpt/slot_decoder.py:3)", 35)]
    assert profile.by_category()["gpt step (speech)"] == 35 and profile.by_category()["speaker draw"] == 10
    assert ("main (worker.py:1)", 35) in profile.top_inclusive(5)
    assert Profile.read("missing", tmp_path / "none.txt").total == 0
