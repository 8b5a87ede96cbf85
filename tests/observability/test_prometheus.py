"""A real Prometheus scrapes a real API and a real worker (tiny model); jobs run; its HTTP API must see them.

The same Prometheus then evaluates every panel query of the Grafana dashboard and loads the alert
rules, so neither can reference a metric that does not exist; docs/operations.md must name every metric
the processes export. And one job's id is followed through the API's and the worker's JSON logs.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.service import Service, wait_for
from ttsq.runtime.launch import free_port, wait_until_ok

ROOT = Path(__file__).resolve().parent.parent.parent
DASHBOARD = ROOT / "deploy" / "grafana" / "ttsq-dashboard.json"
RULES = ROOT / "deploy" / "prometheus" / "alerts.yml"
OPERATIONS = ROOT / "docs" / "operations.md"
CORE_PANELS = {
    "Queue depth",
    "Queue wait (submit → claim)",
    "Throughput",
    "Real-time factor",
    "Inference time per batch",
    "Time to first audio",
    "Batch size",
    "Cache hit ratio by level",
    "Workers alive",
    "API request p99 by route",
}
"""Panels that must show data after a few jobs on a CPU worker (GPU memory has none there; errors may have none)."""

pytestmark = pytest.mark.e2e


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Any]:
    binary = shutil.which("prometheus")
    assert binary, "prometheus is missing: run scripts/install_prometheus.sh (make test does)"
    port = free_port()

    def start(targets: dict[str, str]) -> str:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(RULES)],
            "scrape_configs": [{"job_name": job, "static_configs": [{"targets": [target]}]} for job, target in targets.items()],
        }
        (tmp_path / "prometheus.yml").write_text(json.dumps(config))
        log = (tmp_path / "prometheus.log").open("wb")
        process = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp_path / 'prometheus.yml'}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        processes.append(process)
        url = f"http://127.0.0.1:{port}"
        wait_until_ok(f"{url}/-/ready", 60, [process])
        return url

    processes: list[subprocess.Popen[bytes]] = []
    yield start
    for process in processes:
        process.terminate()
        process.wait(30)


def query(url: str, promql: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=10)
    body = response.json()
    assert response.status_code == 200 and body["status"] == "success", (promql, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


def scalar(url: str, promql: str) -> float:
    result = query(url, promql)
    return float(result[0]["value"][1]) if result else 0.0


def test_prometheus_sees_jobs_cache_and_queue_wait_and_every_panel_query_works(service: Service, prometheus: Any) -> None:
    worker = service.start_worker("observed")
    api = service.api_url.removeprefix("http://")
    url = prometheus({"ttsq-api": api, "ttsq-worker": worker.url.removeprefix("http://")})
    wait_for(lambda: scalar(url, 'sum(up{job=~"ttsq-.*"})') == 2, 30, "both targets to be scraped")

    ids = [service.submit(text=f"Observed sentence number {n}.", voice="zh_female") for n in range(3)]
    for task in ids:
        assert service.wait_status(task, {"done", "failed"})["status"] == "done", service.logs()
    cached = httpx.post(f"{service.api_url}/v1/tts/submit", json={"text": "Observed sentence number 0.", "voice": "zh_female"})
    assert cached.status_code == 200 and cached.json()["cached"] is True
    invalid = httpx.post(f"{service.api_url}/v1/tts/submit", json={"text": ""})
    assert invalid.status_code == 422, invalid.text

    wait_for(lambda: scalar(url, 'sum(ttsq_jobs_total{outcome="done"})') >= 3, 30, "the job counter to move")
    wait_for(lambda: scalar(url, "sum(ttsq_queue_wait_seconds_count)") >= 3, 30, "the queue-wait histogram to fill")
    wait_for(lambda: scalar(url, 'sum(ttsq_submits_total{outcome=~"cache_hit_.*"})') >= 1, 30, "the cache-hit submit to count")
    assert scalar(url, 'sum(ttsq_cache_lookups_total{result="hit"})') >= 1
    wait_for(lambda: scalar(url, 'sum(ttsq_submits_total{outcome="invalid"})') == 1, 30, "the invalid submit to count")
    assert scalar(url, "sum(ttsq_audio_seconds_total)") > 0
    assert scalar(url, 'count(ttsq_http_requests_total{route="/v1/tts/tasks/{task_id}"})') >= 1, "routes are templates"

    every_label_value = {
        value for series in query(url, '{__name__=~"ttsq_.*"}') for name, value in series["metric"].items() if name != "__name__"
    }
    assert not any(re.search(r"[0-9a-f]{8}-[0-9a-f]{4}-", value) for value in every_label_value), "a task id became a label"

    # Rate windows need two scrapes of the moved counters.
    wait_for(lambda: scalar(url, 'sum(rate(ttsq_jobs_total{outcome="done"}[5m]))') > 0, 30, "rates to be computable")
    panels = json.loads(DASHBOARD.read_text())["panels"]
    assert {panel["title"] for panel in panels} >= CORE_PANELS
    empty = []
    for panel in panels:
        for target in panel["targets"]:
            result = query(url, target["expr"])  # asserts the query itself is valid
            if panel["title"] in CORE_PANELS and not result:
                empty.append((panel["title"], target["expr"]))
    assert empty == [], f"core panels without data: {empty}"

    rules = httpx.get(f"{url}/api/v1/rules", timeout=10).json()["data"]["groups"]
    loaded = [rule for group in rules for rule in group["rules"]]
    shipped = [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]
    assert len(loaded) == len(shipped) and all(rule["health"] == "ok" for rule in loaded), loaded

    # docs/operations.md's Metrics section names every ttsq_ metric family either process exposes.
    exported = set()
    for text in (httpx.get(f"{service.api_url}/metrics").text, worker.get("/metrics").text):
        exported |= {re.sub(r"_(total|bucket|count|sum|created)$", "", m) for m in re.findall(r"^(ttsq_\w+)", text, re.M)}
    metrics = OPERATIONS.read_text(encoding="utf-8").split("\n## Metrics", 1)[1].split("\n## ", 1)[0]
    assert sorted(name for name in exported if f"`{name}" not in metrics) == [], "metrics missing from docs/operations.md"


def test_one_grep_follows_a_job_through_the_api_and_the_worker_logs(service: Service) -> None:
    api = service.start_api("api-json", LOG_FORMAT="json")
    service.start_worker("worker-json", LOG_FORMAT="json")
    secret = "The quick brown fox whispers."
    response = httpx.post(f"{api}/v1/tts/submit", json={"text": secret, "seed": 9}, headers={"X-Request-ID": "trace-me-42"})
    assert response.status_code == 202 and response.headers["x-request-id"] == "trace-me-42"
    task = response.json()["task_id"]
    service.wait_status(task, {"done"})

    def lines(name: str) -> list[dict[str, Any]]:
        records = []
        for line in (service.tmp / f"{name}.log").read_text().splitlines():
            if line.startswith("{"):
                records.append(json.loads(line))
        return records

    wait_for(lambda: any(r.get("task_id") == task for r in lines("worker-json")), 30, "the worker's line about the job")
    api_lines = [r for r in lines("api-json") if r.get("task_id") == task]
    worker_lines = [r for r in lines("worker-json") if r.get("task_id") == task]
    assert any(r["logger"] == "ttsq.api" and r["request_id"] == "trace-me-42" for r in api_lines), api_lines
    assert any(r["logger"] == "ttsq.access" and "POST /v1/tts/submit 202" in r["message"] for r in api_lines), api_lines
    assert any("✓" in r["message"] for r in worker_lines), worker_lines
    assert all({"time", "level", "logger", "message"} <= set(r) for r in api_lines + worker_lines)
    everything = (service.tmp / "api-json.log").read_text() + (service.tmp / "worker-json.log").read_text()
    assert secret not in everything, "users' text is never logged at info"
