"""Reading a stored job record that does not load as it is (:meth:`Job.stored`): a stand-in made of what did load,
saying why, that never opens the task to more readers than its record did."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from ttsq.domain.jobs import Job, Status, TTSParams


def record(**changes: Any) -> dict[str, Any]:
    job = Job(
        id="task-1",
        params=TTSParams(text="Hello.", seed=3, format="mp3", cache_key="k", callback_url="https://hooks.example/x"),
        max_attempts=3,
        created_at=1.0,
        owner="key:a",
        readers=["key:a"],
        claim=9,
    )
    data: dict[str, Any] = json.loads(job.model_dump_json())
    for name, value in changes.items():
        if name.startswith("params_"):
            data["params"][name.removeprefix("params_")] = value
        else:
            data[name] = value
    return data


def test_a_record_that_loads_is_read_as_it_is() -> None:
    job = Job.stored(json.dumps(record()))
    assert job.unreadable is None and job.params.text == "Hello." and job.params.format == "mp3"


def test_parameters_that_do_not_load_keep_what_ending_the_job_needs_and_say_why() -> None:
    job = Job.stored(json.dumps(record(params_seed={"draw": 7}, params_format="webm")).encode())
    assert job.unreadable is not None
    assert job.unreadable.startswith("the job record could not be read: ")
    assert "params.seed: Input should be a valid integer" in job.unreadable and "params.format: " in job.unreadable
    assert "draw" not in job.unreadable, "a reason never quotes the record's values"
    assert (job.id, job.claim, job.owner, job.max_attempts) == ("task-1", 9, "key:a", 3)
    assert (job.params.cache_key, job.params.callback_url, job.params.format) == ("k", "https://hooks.example/x", "wav")
    assert job.model_copy(update={"status": Status.CANCELLED}).unreadable == job.unreadable


def test_an_access_list_that_does_not_load_opens_the_task_to_nobody() -> None:
    job = Job.stored(json.dumps(record(readers="key:a", params="not an object")))
    assert job.unreadable is not None and job.readers == [], "read as 'anyone holding the id'"
    assert job.params.text == "" and job.params.seed == 0


def test_a_reason_is_kept_short() -> None:
    names = ("seed", "text", "speed", "temperature", "top_p", "top_k", "voice", "first_chunk", "deterministic", "refine_only")
    many = {f"params_{name}": {"x": 1} for name in names}
    reason = Job.stored(json.dumps(record(**many))).unreadable
    assert reason is not None and len(reason) <= 400 and reason.endswith("…")


@pytest.mark.parametrize("raw", ['{"id": 5, "params": {}}', "[1, 2]"])
def test_what_is_no_job_record_at_all_still_raises(raw: str) -> None:
    with pytest.raises(ValidationError):
        Job.stored(raw)
