"""Completion webhooks and cancellation against real processes: uvicorn, a worker, redis-server, and a
real HTTP receiver that checks the signature the way docs/webhooks.md tells receivers to."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest

from tests.support.service import Service, wait_for
from ttsq.domain.webhooks import SignatureError, verify

pytestmark = pytest.mark.e2e

SECRET = "whsec-e2e-0123456789abcdef"


@dataclass
class Receiver:
    url: str
    deliveries: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    verdicts: list[int] = field(default_factory=list)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on loopback that answers 204 to a genuine signature and 400 otherwise."""
    got: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            got.deliveries.append(({k.lower(): v for k, v in self.headers.items()}, body))
            try:
                verify(self.headers.get("ttsq-signature", ""), body, SECRET)
                code = 204
            except SignatureError:
                code = 400
            got.verdicts.append(code)
            self.send_response(code)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    got = Receiver(f"http://127.0.0.1:{server.server_address[1]}/hooks/tts")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield got
    server.shutdown()


def test_a_finished_task_is_posted_signed_to_its_callback_and_the_status_records_it(
    service: Service, receiver: Receiver
) -> None:
    receiver_port = str(httpx.URL(receiver.url).port)  # an allow-list entry opens only the ports it names
    api = service.start_api(
        "api-webhooks", WEBHOOK_SECRET=SECRET, PUBLIC_URL="https://tts.example.test", WEBHOOK_ALLOW=f"127.0.0.1:{receiver_port}"
    )
    service.start_worker("worker-1")
    submitted = httpx.post(f"{api}/v1/tts/submit", json={"text": "call me back", "seed": 4, "callback_url": receiver.url})
    assert submitted.status_code == 202, submitted.text
    task_id = submitted.json()["task_id"]
    wait_for(lambda: bool(receiver.deliveries), 120, "the webhook to arrive")
    headers, body = receiver.deliveries[0]
    assert receiver.verdicts[0] == 204, "the signature verifies with the shared secret"
    payload = json.loads(body)
    assert payload["task_id"] == task_id and payload["status"] == "done"
    assert payload["result_url"] == f"https://tts.example.test/v1/tts/result/{task_id}"
    assert payload["audio_duration_s"] > 0 and headers["ttsq-event-id"]
    wait_for(lambda: httpx.get(f"{api}/v1/tts/tasks/{task_id}").json()["webhook"]["state"] == "delivered", 30, "delivered")
    webhook = httpx.get(f"{api}/v1/tts/tasks/{task_id}").json()["webhook"]
    assert webhook["attempts"] == 1 and webhook["last_status_code"] == 204

    internal = httpx.post(f"{api}/v1/tts/submit", json={"text": "x", "seed": 1, "callback_url": "http://169.254.169.254/"})
    assert internal.status_code == 422, "cloud metadata is refused at submit"
    plain = httpx.post(f"{service.api_url}/v1/tts/submit", json={"text": "x", "seed": 1, "callback_url": receiver.url})
    assert plain.status_code == 422 and "WEBHOOK_SECRET" in plain.text, "without a secret, webhooks are off"


def test_cancelling_a_running_task_discards_its_result_and_waiting_clients_see_cancelled(service: Service) -> None:
    # The fault-injection wrapper holds this one text's inference for a few seconds, so it is surely running
    # when the cancel arrives; the worker hears of it at its next lease renewal and takes the job's rows
    # out of the engine, so no audio is made for it at all.
    service.start_worker("worker-1", FAULT_MODE="hang", FAULT_MATCH="cancel me", FAULT_HANG_S="4")
    api = service.api_url
    task_id = service.submit(text="cancel me please", seed=8)
    service.wait_status(task_id, {"running"}, 60)
    cancelling = httpx.delete(f"{api}/v1/tts/tasks/{task_id}")
    assert cancelling.status_code == 202 and cancelling.json()["status"] == "cancelling"
    final = service.wait_status(task_id, {"cancelled", "done", "failed"}, 60)
    assert final["status"] == "cancelled"
    assert httpx.delete(f"{api}/v1/tts/tasks/{task_id}").json()["status"] == "cancelled", "idempotent"
    result = httpx.get(f"{api}/v1/tts/result/{task_id}")
    assert result.status_code == 409 and result.json()["status"] == "cancelled", "no audio for a cancelled task"
    events = httpx.get(f"{api}/v1/tts/events/{task_id}", timeout=30).text
    assert '"status": "cancelled"' in events or '"status":"cancelled"' in events

    # The synthesis was stopped, not finished and thrown away: nothing entered the result cache, so an
    # identical request is a new task of its own that runs (the cancelled task's record is never reused).
    again = httpx.post(f"{api}/v1/tts/submit", json={"text": "cancel me please", "seed": 8}).json()
    assert again["task_id"] != task_id and again["cached"] is False
