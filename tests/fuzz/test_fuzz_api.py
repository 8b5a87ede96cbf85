"""The bounded fuzzing run of ``make test``: schemathesis against a live deployment, every operation and check.

Both replicas of one deployment (:mod:`tests.fuzz.deployment`) are fuzzed from their own
``/openapi.json``: the one that takes callers without a key, and the one that requires keys with an
``admin`` key sent as a bearer header. A failure shows schemathesis's report (each failing case with
a ``curl`` line that reproduces it) and the processes' logs. ``make fuzz`` draws many more examples.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fuzz.deployment import Deployment, Target, deployment
from tests.fuzz.run import fuzz, hostile_markdown, hostile_run

pytestmark = [pytest.mark.e2e, pytest.mark.fuzz, pytest.mark.timeout(900)]
"""The timeout guards against a hang only: a run takes a minute or two, more on two busy cores."""

MAX_EXAMPLES = 10
"""Per operation and phase. The coverage phase (every boundary the schema states) does not depend on it, nor
does much the stateful phase (submit → status, result, stream, events, cancel; new voice → fetch, delete),
whose scenarios are long (``tests/fuzz/schemathesis.toml``)."""

HOSTILE_DRAWS = 20
"""Drawn hostile-JSON bodies per operation with a body, besides the fixed corpus (``make fuzz`` draws 500)."""

SEED = 20261201
"""A fixed seed: ``make test`` starts from the same draws each time (stateful scenarios still follow what the server
answers, such as how far a job has got); ``make fuzz`` draws fresh ones."""


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory, tiny_checkpoint_dir: Path) -> Iterator[Deployment]:
    with deployment(tmp_path_factory.mktemp("fuzz"), tiny_checkpoint_dir) as running:
        yield running


def check(deployed: Deployment, target: Target, phases: str | None = None) -> None:
    outcome = fuzz(target, max_examples=MAX_EXAMPLES, seed=SEED, phases=phases)
    print(f"{target.name}: {outcome.summary}")  # shown with -rP
    assert outcome.passed, f"{' '.join(outcome.command)}\n\n{outcome.output}\n\n{deployed.logs()}"


def test_the_api_holds_its_schema_for_callers_without_a_key(deployed: Deployment) -> None:
    check(deployed, deployed.open)


def test_the_api_holds_its_schema_with_keys_required_and_an_admin_key(deployed: Deployment) -> None:
    """``AUTH=on``: the key reaches every authenticated path, and ``ignored_auth`` checks that leaving it out,
    or sending a wrong one, is refused. The coverage phase (the schema's boundaries, the same bodies on both replicas)
    runs on the first replica only, to keep ``make test`` short; ``make fuzz`` runs it on both."""
    check(deployed, deployed.keyed, phases="examples,fuzzing,stateful")


@pytest.mark.parametrize("which", ["open", "keyed"])
def test_hostile_json_gets_a_4xx_naming_the_field_on_every_route(deployed: Deployment, which: str) -> None:
    """The hostile-JSON corpus (``tests/fuzz/hostile.py``) on every route of real uvicorn processes: no 5xx and no
    dropped connection, every refusal names its field, every answer is documented, nothing logged above WARNING."""
    target = deployed.open if which == "open" else deployed.keyed
    result = hostile_run(deployed, target, draws=HOSTILE_DRAWS, seed=SEED)
    print("\n".join(hostile_markdown(target, result)))  # shown with -rP
    assert result.passed, "\n".join([*hostile_markdown(target, result), deployed.logs()])

