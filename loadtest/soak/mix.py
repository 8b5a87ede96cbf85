"""The locust mix as the soak sizes it: the user classes, their weights and waits read from the locustfile's source, and
an upper bound on the jobs per second a user count asks of the workers."""

from __future__ import annotations

import ast
import heapq
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench import ROOT

LOCUSTFILE = ROOT / "loadtest" / "locustfile.py"


def literal(name: str) -> Any:
    """A constant of the locustfile, read from its source: importing it here would monkey-patch this process with gevent."""
    tree = ast.parse(LOCUSTFILE.read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
                return ast.literal_eval(node.value)
    raise LookupError(f"{name} not found in {LOCUSTFILE}")


@dataclass(frozen=True)
class UserClass:
    name: str
    weight: int
    wait_min_s: float
    wait_max_s: float


def user_classes() -> list[UserClass]:
    """The locustfile's user classes with their weights and ``between(a, b)`` waits, from its source."""
    classes = []
    for node in ast.parse(LOCUSTFILE.read_text()).body:
        if not isinstance(node, ast.ClassDef) or not any(isinstance(b, ast.Name) and b.id == "TTSUser" for b in node.bases):
            continue
        attrs: dict[str, Any] = {}
        for statement in node.body:
            if isinstance(statement, ast.Assign) and isinstance(statement.targets[0], ast.Name):
                attrs[statement.targets[0].id] = statement.value
        wait = attrs["wait_time"]
        assert isinstance(wait, ast.Call) and len(wait.args) == 2, f"{node.name}: wait_time is not between(a, b)"
        low, high = (float(ast.literal_eval(arg)) for arg in wait.args)
        classes.append(UserClass(node.name, int(ast.literal_eval(attrs["weight"])), low, high))
    return classes


def class_split(classes: Sequence[UserClass], users: int) -> Counter[str]:
    """How locust shares ``users`` between the classes: its own order (``locust.dispatch._kl_generator``), by weight."""
    heap = [(c.weight * math.log2(c.weight / (c.weight + 1.0)), c.weight + 1.0, c.weight, c.name) for c in classes if c.weight > 0]
    heapq.heapify(heap)
    split: Counter[str] = Counter()
    for _ in range(users):
        _, x, weight, name = heap[0]
        split[name] += 1
        heapq.heapreplace(heap, (weight * math.log2(x / (x + 1.0)), x + 1.0, weight, name))
    return split


@dataclass(frozen=True)
class Demand:
    """Jobs per second the mix asks of the workers: an upper bound, so that the chosen load is at most the target.

    Only ``SubmitPollUser`` makes a new job every time (a fresh seed); its cycle is at least its mean
    wait plus one status poll. The cached classes miss once per distinct request (4 for
    ``CacheHeavyUser``; 8 sentences × 4 voices × 2 formats for ``OpenAIUser``) and then hit: the API's
    L1 and the disk's L3 have no TTL, so a short ``CACHE_TTL_S`` does not make them miss again.
    Those one-off jobs come early in the run and are left out of the steady rate.
    """

    classes: tuple[UserClass, ...]
    cycle_s: float
    mean_wait_s: float
    poll_interval_s: float
    one_off_jobs: int

    def jobs_s(self, users: int) -> float:
        return class_split(self.classes, users)["SubmitPollUser"] / self.cycle_s

    def users_for(self, jobs_s: float) -> int:
        """The most users whose steady demand stays within ``jobs_s`` (at least one)."""
        users = 1
        while users < 10_000 and self.jobs_s(users + 1) <= jobs_s:
            users += 1
        return users

    def explain(self, users: int) -> str:
        split = class_split(self.classes, users)
        return (
            f"{users} users are {', '.join(f'{split[c.name]} {c.name}' for c in self.classes)} (locust's split by weight); "
            f"each SubmitPollUser makes at most one job per {self.cycle_s:.2f} s (mean wait {self.mean_wait_s:.2f} s + one "
            f"{self.poll_interval_s:g} s poll), so they ask at most {self.jobs_s(users):.2f} jobs/s; the cached classes add "
            f"at most {self.one_off_jobs} one-off misses, then hit"
        )


def demand(poll_interval_s: float = 0.8) -> Demand:
    classes = user_classes()
    submit_poll = next(c for c in classes if c.name == "SubmitPollUser")
    mean_wait_s = (submit_poll.wait_min_s + submit_poll.wait_max_s) / 2
    sentences, voices, formats = (len(literal(name)) for name in ("SENTENCES", "OPENAI_VOICES", "OPENAI_FORMATS"))
    distinct = len(literal("CACHE_SENTENCES")) + sentences * voices * formats
    return Demand(tuple(classes), mean_wait_s + poll_interval_s, mean_wait_s, poll_interval_s, distinct)
