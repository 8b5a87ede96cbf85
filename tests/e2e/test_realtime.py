"""Realtime sessions (``/v1/tts/realtime``) against real processes: text in word by word, audio out as it is made.

A real uvicorn API, a real worker on the tiny checkpoint, a real WebSocket client (``websockets``)."""

from __future__ import annotations

import base64
import itertools
import json
import subprocess
import sys
from typing import Any

import httpx
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from tests.support.service import ROOT, Service, wait_for
from ttsq.domain.audio import SAMPLE_RATE, SENTENCE_GAP_MS

pytestmark = pytest.mark.e2e

# Each sentence is over half of the tests' MAX_CHUNK_CHARS (40), so a submit of the whole text cuts it where the
# session does: at every sentence.
TEXT = "The first sentence is spoken here. The second one follows right after. Then a third one ends it."
GAP = round(SENTENCE_GAP_MS * SAMPLE_RATE / 1000)


def session_url(api_url: str) -> str:
    return api_url.replace("http://", "ws://") + "/v1/tts/realtime"


def start(ws: ClientConnection, **options: Any) -> None:
    ws.send(json.dumps({"type": "session.start", **options}))
    started = json.loads(ws.recv(timeout=30))
    assert started["type"] == "session.started" and started["sample_rate"] == SAMPLE_RATE, started


def drain(ws: ClientConnection, order: list[str] | None = None) -> tuple[bytes, list[dict[str, Any]], int | None]:
    """Everything until the server closes: the audio, the events, the close code (and into ``order``, each
    message's kind as it came: ``audio`` or the event's type)."""
    audio, events = bytearray(), []
    try:
        while True:
            message = ws.recv(timeout=120)
            if isinstance(message, bytes):
                audio += message
            else:
                events.append(json.loads(message))
            if order is not None:
                order.append("audio" if isinstance(message, bytes) else events[-1]["type"])
    except ConnectionClosed:
        pass
    return bytes(audio), events, ws.close_code


def submitted_pcm(service: Service, text: str, **body: Any) -> bytes:
    """``text`` submitted whole and its stored audio, decoded in pieces (``listen``) as a session's is: the two decode
    paths agree only to float rounding (docs/decoder.md), so a comparison sample for sample takes the same one."""
    body = {"text": text, "format": "pcm", "listen": True, **body}
    task = httpx.post(f"{service.api_url}/v1/tts/submit", json=body, timeout=30)
    assert task.status_code in (200, 202), task.text
    task_id = task.json()["task_id"]
    service.wait_status(task_id, {"done"})
    result = httpx.get(f"{service.api_url}/v1/tts/result/{task_id}", timeout=30)
    assert result.status_code == 200
    return result.content


def test_text_streamed_word_by_word_speaks_as_the_text_submitted_whole(service: Service) -> None:
    # BATCH_INVARIANT: a row's audio is bit-identical whatever shares its decode steps, so the session's chunks (each
    # a task) and the whole text's (one task) can be compared sample for sample.
    service.start_worker("realtime", BATCH_INVARIANT="true")
    with connect(session_url(service.api_url), open_timeout=30) as ws:
        start(ws, voice="zh_female", seed=7)
        words = TEXT.split(" ")
        for word in words[:6]:  # the first sentence, and the first word of the next: the first sentence is complete
            ws.send(json.dumps({"type": "text", "text": word + " "}))
        first = ws.recv(timeout=120)
        order = []
        while not isinstance(first, bytes):  # segment.queued events come first
            assert json.loads(first)["type"] == "segment.queued", first
            order.append("segment.queued")
            first = ws.recv(timeout=120)
        order.append("audio")
        # Audio is here while most of the text has not been sent yet.
        for word in words[6:]:
            ws.send(json.dumps({"type": "text", "text": word + " "}))
        ws.send(json.dumps({"type": "close"}))
        rest, events, code = drain(ws, order)
    audio = first + rest
    assert code == 1000, events
    assert [e["type"] for e in events if e["type"] != "segment.queued"] == ["segment.done"] * 3 + ["session.done"], events
    # REALTIME_AHEAD=1: a chunk is queued once the one before it has audio out, never before.
    queued_at = [n for n, kind in enumerate(order) if kind == "segment.queued"]
    assert len(queued_at) == 3 and all("audio" in order[a:b] for a, b in itertools.pairwise(queued_at)), order
    done = [e for e in events if e["type"] == "segment.done"]
    assert [d["text"] for d in done] == [
        "The first sentence is spoken here.",
        "The second one follows right after.",
        "Then a third one ends it.",
    ]
    assert done[0]["start_s"] == 0 and events[-1]["audio_s"] == done[-1]["end_s"] == len(audio) / 2 / SAMPLE_RATE
    for before, after in itertools.pairwise(done):  # the pause a joined text has between sentences
        assert round((after["start_s"] - before["end_s"]) * SAMPLE_RATE) == GAP

    whole = submitted_pcm(service, TEXT, voice="zh_female", seed=7)
    assert len(audio) == len(whole) and audio == whole, "the session's audio is the text's submitted whole"


def test_two_contexts_on_one_session_each_speak_as_their_text_submitted_whole(service: Service) -> None:
    """Two contexts fed word by word in turn, with their own seeds, audio as JSON events: each context's chunks are
    numbered from its own start (``first_chunk``), so each context's audio is its text's submitted whole, sample for
    sample, however the two interleave."""
    service.start_worker("realtime-contexts", BATCH_INVARIANT="true")
    texts = {"a": TEXT, "b": "Another voice starts its turn here. It says a second sentence too."}
    seeds = {"a": 7, "b": 9}
    with connect(session_url(service.api_url), open_timeout=30) as ws:
        start(ws, voice="zh_female", seed=7, audio_transport="json")
        ws.send(json.dumps({"type": "context.start", "context_id": "a"}))
        ws.send(json.dumps({"type": "context.start", "context_id": "b", "seed": seeds["b"]}))
        words = {name: text.split(" ") for name, text in texts.items()}
        for n in range(max(len(w) for w in words.values())):
            for name in texts:
                if n < len(words[name]):
                    ws.send(json.dumps({"type": "text", "context_id": name, "text": words[name][n] + " "}))
        for name in texts:
            ws.send(json.dumps({"type": "close", "context_id": name}))
        ws.send(json.dumps({"type": "close"}))
        audio, events, code = drain(ws)
    assert code == 1000 and audio == b"", "no binary frame on a json session"
    heard = dict.fromkeys(texts, b"")
    for said in events:
        if said["type"] == "audio":
            heard[said["context_id"]] += base64.b64decode(said["audio"])
    finished = [e for e in events if e["type"] == "context.done"]
    assert sorted(e["context_id"] for e in finished) == ["a", "b"] and not any(e["cancelled"] for e in finished), finished
    for name, text in texts.items():
        assert heard[name] == submitted_pcm(service, text, voice="zh_female", seed=seeds[name]), f"context {name}"


def test_bad_messages_each_get_an_error_and_the_session_goes_on(service: Service) -> None:
    service.start_worker("realtime-bad")
    ws = connect(session_url(service.api_url), open_timeout=30).__enter__()  # the server closes it
    start(ws, voice="zh_male")
    bad: list[str | bytes] = [
        "not json",
        "[1, 2]",
        '{"type": 5}',
        '{"type": "dance"}',
        '{"type": "text", "text": 5}',
        '{"type": "text", "text": "x", "extra": 1}',
        '{"type": "text", "text": NaN}',
        '{"type": "session.start"}',
        "[" * 5000 + "]" * 5000,
        b"\x00\x01binary",
        '{"type": "flush", "now": true}',
        '{"type": "text", "text": "Say this.", "text": "Say that."}',  # a duplicate key, refused as on HTTP
        '{"type": "text", "text": "\\ud800"}',  # a lone surrogate: not text, refused as on HTTP
    ]
    messages = [bad[i % len(bad)] for i in range(1000)]
    for message in messages:
        ws.send(message)
    errors = [json.loads(ws.recv(timeout=60)) for _ in messages]
    assert all(e["type"] == "error" and e["code"] == "invalid_message" and e["message"] for e in errors), errors[:12]
    ws.send('{"type": "text", "text": "Still speaking after all that. "}')
    for piece in ["la", " "] * 40:  # a flood of tiny pieces with no sentence end: cut as the text outgrows a chunk
        ws.send(json.dumps({"type": "text", "text": piece}))
    ws.send(json.dumps({"type": "close"}))
    ws.send(json.dumps({"type": "text", "text": "too late"}))
    audio, events, code = drain(ws)
    assert code == 1000 and len(audio) > 0
    assert {"type": "error", "code": "closing", "message": "the session is closing: no more messages"} in events
    done = [e for e in events if e["type"] == "segment.done"]
    assert done[0]["text"] == "Still speaking after all that."
    assert "".join(d["text"] for d in done[1:]).replace(" ", "") == "la" * 40
    assert events[-1]["type"] == "session.done" and events[-1]["segments"] == len(done) >= 3

    with connect(session_url(service.api_url), open_timeout=30) as huge:
        start(huge)
        huge.send(json.dumps({"type": "text", "text": "a" * 70_000}))
        _, events, code = drain(huge)
        reason = huge.close_reason or ""
    # The server itself refuses a frame over REALTIME_MAX_MESSAGE_BYTES as it arrives (api_server.py): the close frame's
    # reason says why, no error event comes first (the session never saw the message).
    assert code == 1009 and "exceeds limit of 65536 bytes" in reason and not [e for e in events if e["type"] == "error"]
    assert httpx.get(f"{service.api_url}/healthz").status_code == 200


def test_sessions_that_cannot_start_are_closed_with_a_reason(service: Service) -> None:
    url = session_url(service.api_url)
    revoked = service.create_key("revoked", "tts")
    subprocess.run(
        [sys.executable, "-m", "ttsq", "keys", "revoke", revoked.split("_")[1]], cwd=ROOT, env=service.env, check=True, timeout=60
    )
    cases: list[tuple[dict[str, Any] | str, int, str]] = [
        ({"type": "text", "text": "hi"}, 4400, "session.start"),
        ({"type": "session.start", "voice": "nobody"}, 4400, "unknown voice"),
        ({"type": "session.start", "speed": 99}, 4400, "speed"),
        ({"type": "session.start", "api_key": revoked}, 4401, "key"),
        ({"type": "session.start", "api_key": service.create_key("metrics-only", "metrics")}, 4403, "'tts' scope"),
    ]
    for first, code, said in cases:
        with connect(url, open_timeout=30) as ws:
            ws.send(first if isinstance(first, str) else json.dumps(first))
            _, events, closed = drain(ws)
        assert closed == code and events[-1]["type"] == "error" and said in events[-1]["message"], (first, closed, events)

    with pytest.raises(InvalidStatus) as refused:  # the key in the handshake's header, as the plugins send it: checked first
        connect(url, open_timeout=30, additional_headers={"Authorization": f"Bearer {revoked}"})
    assert refused.value.response.status_code == 401 and b"not valid" in refused.value.response.body
    valid = service.create_key("speaker", "tts")
    with connect(url, open_timeout=30, additional_headers={"X-API-Key": valid}) as ws:
        start(ws)

    for _ in range(10):  # more sessions than MAX_STREAMS_PER_KEY (8), each dropped: none keeps its slot
        with connect(url, open_timeout=30) as ws:
            start(ws)

    idle_api = service.start_api("api-idle", REALTIME_IDLE_S="0.5")
    with connect(session_url(idle_api), open_timeout=30) as ws:
        start(ws)
        _, events, idle_code = drain(ws)  # never sends a thing
    assert idle_code == 4408 and "REALTIME_IDLE_S" in events[-1]["message"]


def test_a_dropped_client_cancels_what_it_queued(service: Service) -> None:
    service.start_worker("realtime-drop")
    eager = service.start_api("api-eager", REALTIME_AHEAD="100")  # every chunk queued at once
    sentences = [f"Sentence number {n} is long enough to stand alone." for n in range(12)]
    with connect(session_url(eager), open_timeout=30) as ws:
        start(ws, voice="zh_female")
        ws.send(json.dumps({"type": "text", "text": " ".join(sentences) + " "}))
        queued: list[str] = []
        while len(queued) < len(sentences):
            event = ws.recv(timeout=60)
            if isinstance(event, str) and json.loads(event)["type"] == "segment.queued":
                queued.append(json.loads(event)["task_id"])
    # gone without a close message

    def all_final() -> bool:
        return all(service.status(task)["status"] in {"done", "cancelled"} for task in queued)

    wait_for(all_final, 120, "every queued chunk to end")
    assert "cancelled" in {service.status(task)["status"] for task in queued}, "the worker went on with a gone session"


def test_a_session_that_cancels_or_hangs_up_leaves_a_job_it_shares_to_the_others(service: Service) -> None:
    """Three sessions from one address (one caller) with the same voice, seed and sentence share one job (single-flight).
    Before any worker runs it, the first cancels and the second hangs up: each gives up its own interest only, and the
    third gets all of its audio once a worker is there."""
    url = session_url(service.api_url)
    sentence = "Every session asks for this one."
    sessions = [connect(url, open_timeout=30).__enter__() for _ in range(3)]  # closed by the server (or dropped)
    for ws in sessions:
        start(ws, voice="zh_female", seed=11)
        ws.send(json.dumps({"type": "text", "text": sentence}))
        ws.send(json.dumps({"type": "flush"}))
    queued = []
    for ws in sessions:
        event = json.loads(ws.recv(timeout=30))
        assert event["type"] == "segment.queued", event
        queued.append(event["task_id"])
    assert len(set(queued)) == 1, "one job for the three"
    cancelling, hanging_up, listening = sessions
    cancelling.send(json.dumps({"type": "cancel"}))
    _, events, code = drain(cancelling)
    assert code == 1000 and events[-1]["type"] == "session.done", events
    hanging_up.socket.close()  # gone without a word
    wait_for(lambda: service.log("api").count(b"ended: 1 chunks") >= 2, 60, "both sessions to end")

    service.start_worker("realtime-shared")
    listening.send(json.dumps({"type": "close"}))
    audio, events, code = drain(listening)
    assert code == 1000 and [e["type"] for e in events] == ["segment.done", "session.done"], events
    assert audio == submitted_pcm(service, sentence, voice="zh_female", seed=11)
