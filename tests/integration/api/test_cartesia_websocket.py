"""Cartesia's WebSocket (``/tts/websocket``) on the session engine, against the real app under a real uvicorn in the
test's own process, a real redis-server and a real WebSocket client. No worker: the test plays it through the queue's
own calls (:class:`tests.integration.api.test_realtime_contexts.Worker`), so it decides whose audio comes when.

What each test would catch: a reply without ``type`` or ``context_id`` (Pipecat indexes both), a last ``chunk`` that
carries the end (LiveKit ends a stream only on a ``done`` without ``data``), a cancel that stops more than its own
context or is answered with more, options read wrong (speed, format, voice), and a malformed message that ends the
socket instead of getting an error.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from tests.integration.api.test_realtime_contexts import Worker, _speech, pcm
from tests.integration.api.test_realtime_session import GUARD_S, served
from tests.integration.api.test_security import new_key
from ttsq.api.sessions.cartesia_protocol import IGNORED_OPTIONS
from ttsq.domain.converter import convert_whole
from ttsq.domain.output_formats import OutputFormat

RAW = {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000}


def options(context_id: str | None, **more: Any) -> dict[str, Any]:
    """What LiveKit's plugin sends with every message (its defaults), for a ttsq voice."""
    said: dict[str, Any] = {
        "model_id": "sonic-3",
        "voice": {"mode": "id", "id": "alloy"},
        "output_format": RAW,
        "language": "en",
        "add_timestamps": True,
        "max_buffer_delay_ms": 0,
    }
    if context_id is not None:
        said["context_id"] = context_id
    return said | more


async def say(ws: ClientConnection, context_id: str | None, transcript: str, *, more: bool = True, **extra: Any) -> None:
    await ws.send(json.dumps(options(context_id, transcript=transcript, **{"continue": more}, **extra)))


async def reply(ws: ClientConnection) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.recv(), GUARD_S)
    assert isinstance(message, str), "Cartesia's replies are all text frames"
    said = dict(json.loads(message))
    assert "type" in said and "context_id" in said, said
    return said


async def claim_by_text(worker: Worker, count: int) -> dict[str, str]:
    """Claim ``count`` jobs as they are queued; their task ids by their text (Cartesia's replies never name a task)."""
    found: dict[str, str] = {}
    async with asyncio.timeout(GUARD_S):
        while len(found) < count:
            if (held := await worker.queue.leases.claim("w", block_s=0.5)) is not None:
                worker.held[held.job.id] = held
                found[held.job.params.text] = held.job.id
    return found


def url_of(realtime: str) -> str:
    return realtime.replace("/v1/tts/realtime", "/tts/websocket")


async def test_a_context_streams_its_chunks_then_a_done_of_its_own(redis: Redis, make_settings: Any) -> None:
    """LiveKit's way: sentences with a trailing space and ``continue: true``, then ``" "`` with ``continue: false``:
    each chunk is base64 raw PCM tagged with the context, and the end is a ``done`` with no ``data``."""
    worker = Worker(redis)
    versioned = "?cartesia_version=2025-04-16"
    async with served(make_settings()) as (realtime, _app), connect(url_of(realtime) + versioned, open_timeout=GUARD_S) as ws:
        await say(ws, "lk1", "Hello there, this is the first sentence. ")
        await say(ws, "lk1", "And a second one. ")
        await say(ws, "lk1", " ", more=False)
        tasks = await claim_by_text(worker, 1)
        assert set(tasks) == {"Hello there, this is the first sentence."}, tasks
        await worker.speak(tasks["Hello there, this is the first sentence."], pcm(2))
        first = await reply(ws)
        assert first == {"type": "chunk", "context_id": "lk1", "data": first["data"], "done": False, "status_code": 206}
        assert base64.b64decode(first["data"]) == pcm(2)
        tasks = await claim_by_text(worker, 1)  # the next chunk is queued once the first one's audio is out
        assert set(tasks) == {"And a second one."}, tasks
        await worker.speak(tasks["And a second one."], pcm(4))
        rest = []
        while (said := await reply(ws))["type"] == "chunk":
            rest.append(base64.b64decode(said["data"]))
        assert said == {"type": "done", "context_id": "lk1", "done": True, "status_code": 200}
        assert rest[-1] == pcm(4) and set(b"".join(rest[:-1])) == {0}, "the pause between sentences, then the second"

        await say(ws, "lk1", "The id is free again once done.", more=False)  # a context id may be used again
        (task,) = (await claim_by_text(worker, 1)).values()
        await worker.speak(task, pcm(6))
        assert base64.b64decode((await reply(ws))["data"]) == pcm(6)
        assert (await reply(ws))["type"] == "done"


async def test_pieces_that_end_sentences_are_joined_with_a_space(redis: Redis, make_settings: Any) -> None:
    """Pipecat sends whole sentences with no trailing space, and ends with ``""`` and ``continue: false``: each
    sentence is its own chunk, words never run together; tokens that carry their own spaces are joined as sent."""
    worker = Worker(redis)
    async with served(make_settings()) as (realtime, _app), connect(url_of(realtime), open_timeout=GUARD_S) as ws:
        await say(ws, "pc", "This is the second turn.")
        await say(ws, "pc", "It plays to the")
        await say(ws, "pc", " end, with to")
        await say(ws, "pc", "kens.")
        await say(ws, "pc", "", more=False)
        tasks = await claim_by_text(worker, 1)
        assert set(tasks) == {"This is the second turn."}, tasks
        await worker.speak(tasks["This is the second turn."], pcm(2))
        assert (await reply(ws))["type"] == "chunk"
        assert set(await claim_by_text(worker, 1)) == {"It plays to the end, with tokens."}


async def test_a_sentence_that_ends_a_transcript_is_queued_before_the_next_one(redis: Redis, make_settings: Any) -> None:
    """Cartesia's clients send whole sentences and no flush: the sentence is spoken now, not when the next arrives."""
    worker = Worker(redis)
    # No timed way out meanwhile: what is queued is what the text's own cuts make.
    settings = make_settings(realtime_clause_wait_s=60)
    async with served(settings) as (realtime, _app), connect(url_of(realtime), open_timeout=GUARD_S) as ws:
        await say(ws, "lk", "Nothing follows this yet. ")
        assert set(await claim_by_text(worker, 1)) == {"Nothing follows this yet."}


async def test_a_new_context_while_the_last_is_sending_and_a_cancel_stops_only_its_own(redis: Redis, make_settings: Any) -> None:
    """Pipecat's barge-in: turn 1 is cancelled while its audio streams and turn 2 opens on the same socket: turn 1's job
    is abandoned and nothing more comes for it (not even a ``done``); turn 2 is spoken to its end."""
    worker = Worker(redis)
    async with served(make_settings()) as (realtime, _app), connect(url_of(realtime), open_timeout=GUARD_S) as ws:
        await say(ws, "turn1", "Turn one is long and will be cut off.")
        await say(ws, "turn1", "Its second sentence is never heard.")
        tasks = await claim_by_text(worker, 1)
        await worker.speak(tasks["Turn one is long and will be cut off."], pcm(2))
        assert (await reply(ws))["context_id"] == "turn1"
        tasks |= await claim_by_text(worker, 1)  # turn 1's next sentence, queued once its first one's audio went out
        await say(ws, "turn2", "Turn two starts now.")  # opened while turn 1 is still sending
        await ws.send(json.dumps({"context_id": "turn1", "cancel": True}))
        await say(ws, "turn2", "", more=False)
        tasks |= await claim_by_text(worker, 1)
        assert await worker.stopped(tasks["Its second sentence is never heard."]), "turn 1's unsent chunk is abandoned"
        await worker.speak(tasks["Turn two starts now."], pcm(4))
        said = [await reply(ws) for _ in range(2)]
        assert [(s["type"], s["context_id"]) for s in said] == [("chunk", "turn2"), ("done", "turn2")], said
        assert not await worker.stopped(tasks["Turn two starts now."])

        await ws.send(json.dumps({"context_id": "turn1", "cancel": True}))  # a context that is over: an error, tagged
        said = [await reply(ws)]
        assert said[0]["type"] == "error" and said[0]["context_id"] == "turn1" and said[0]["error_code"] == "unknown_context"
        assert said[0]["done"] is False, "LiveKit reads done: true as a plain end and drops the error"


async def test_a_flush_is_acknowledged_once_what_it_cut_is_spoken(redis: Redis, make_settings: Any) -> None:
    worker = Worker(redis)
    async with served(make_settings()) as (realtime, _app), connect(url_of(realtime), open_timeout=GUARD_S) as ws:
        await say(ws, "f", "Flushed before its sentence ends", flush=True)
        (task,) = (await claim_by_text(worker, 1)).values()
        await worker.speak(task, pcm(2))
        assert (await reply(ws))["type"] == "chunk"
        assert await reply(ws) == {
            "type": "flush_done",
            "context_id": "f",
            "done": False,
            "flush_done": True,
            "flush_id": 1,
            "status_code": 206,
        }


async def test_options_speed_format_and_voice_come_from_a_contexts_first_message(redis: Redis, make_settings: Any) -> None:
    """Speed by ``generation_config.speed`` (a factor), the SDK's ``speed`` (a name) or ``__experimental_controls``; the
    voice by id as any ttsq voice; µ-law at 8 kHz equal to the 24 kHz audio converted in one piece; a message without
    a ``context_id`` is a context of its own, ended at once."""
    worker = Worker(redis)
    async with served(make_settings()) as (realtime, _app), connect(url_of(realtime), open_timeout=GUARD_S) as ws:
        ulaw = {"container": "raw", "encoding": "pcm_mulaw", "sample_rate": 8000}
        await say(ws, "a", "Factor two.", more=False, generation_config={"speed": 1.5, "emotion": "calm"})
        await say(ws, "b", "Named fast.", more=False, speed="fast")
        slowest = {"mode": "id", "id": "zh_male", "__experimental_controls": {"speed": -1.0}}
        await say(ws, "c", "Slowest.", more=False, voice=slowest)
        await ws.send(json.dumps(options(None, transcript="Spoken down a telephone line.", output_format=ulaw)))
        tasks = await claim_by_text(worker, 4)
        params = {text: worker.held[task].job.params for text, task in tasks.items()}
        assert params["Factor two."].speed == 6 and params["Named fast."].speed == 7, params
        assert params["Slowest."].speed == 1 and params["Slowest."].voice == "zh_male"
        assert params["Factor two."].voice == "zh_female", "alloy is OpenAI's name for zh_female"
        await worker.speak(tasks["Spoken down a telephone line."], _speech(1))
        heard, said = bytearray(), await reply(ws)
        anonymous = said["context_id"]
        while said["type"] == "chunk":
            assert said["context_id"] == anonymous
            heard += base64.b64decode(said["data"])
            said = await reply(ws)
        assert said == {"type": "done", "context_id": anonymous, "done": True, "status_code": 200}
        assert bytes(heard) == convert_whole(_speech(1), OutputFormat("pcm_mulaw", 8000)), "one µ-law stream"


async def test_malformed_messages_each_get_an_error_and_the_socket_goes_on(redis: Redis, make_settings: Any) -> None:
    worker = Worker(redis)
    config = make_settings(realtime_max_contexts=2)
    async with served(config) as (realtime, _app), connect(url_of(realtime), open_timeout=GUARD_S) as ws:
        refusals: list[tuple[str, str | None, str | bytes | dict[str, Any]]] = [
            ("invalid_message", None, "not json"),
            ("invalid_message", None, b"\x00\x01"),
            ("invalid_message", None, "[1, 2]"),
            ("invalid_message", None, '{"context_id": "x", "context_id": "y"}'),
            ("invalid_message", "x", options("x", transcript="Hi.", **{"continue": "yes"})),
            ("invalid_message", "x", options("x", transcript=5)),
            ("invalid_message", "x", options("x")),
            ("invalid_message", "x", options("x", transcript="Hi.", generation_config={"speed": 9})),
            ("invalid_message", None, {"cancel": True}),
            ("unknown_context", "nobody", {"context_id": "nobody", "cancel": True}),
            ("invalid_context", "x", options("x", transcript="Hi.", voice={"mode": "embedding", "embedding": [0.1]})),
            ("invalid_context", "x", options("x", transcript="Hi.", voice={"mode": "id", "id": "no-such-voice"})),
            ("invalid_context", "x", options("x", transcript="Hi.", voice=None)),
            ("invalid_context", "x", options("x", transcript="Hi.", output_format={"container": "ogg", "sample_rate": 8000})),
            ("invalid_context", "x", options("x", transcript="Hi.", output_format={**RAW, "sample_rate": 7})),
        ]
        for code, context_id, message in refusals:
            await ws.send(message if isinstance(message, str | bytes) else json.dumps(message))
            said = await reply(ws)
            assert said["type"] == "error" and said["error_code"] == code and said["context_id"] == context_id, (message, said)
            assert said["message"] and said["status_code"] >= 400 and said["done"] is False, said
        await say(ws, "a", "Context a.")
        await say(ws, "b", "Context b.")
        await say(ws, "c", "One too many.")
        said = await reply(ws)
        assert said["error_code"] == "too_many_contexts" and said["context_id"] == "c" and said["status_code"] == 429, said
        await say(ws, "a", "", more=False)
        await say(ws, "a", "Text after the end.")
        said = await reply(ws)
        assert (said["error_code"], said["context_id"]) == ("context_closed", "a"), said
        tasks = await claim_by_text(worker, 2)
        await worker.speak(tasks["Context a."], pcm(3))
        assert [(await reply(ws))["type"] for _ in range(2)] == ["chunk", "done"], "the socket went on"


async def test_the_key_comes_in_the_handshake_and_is_checked_before_accepting(redis: Redis, make_settings: Any) -> None:
    async with served(make_settings(auth="on")) as (realtime, _app):
        url = url_of(realtime)
        metrics_only = await new_key(redis, "metrics")
        for headers, status in [({}, 401), ({"X-API-Key": "ttsq_nothing_here"}, 401), ({"X-API-Key": metrics_only}, 403)]:
            with pytest.raises(InvalidStatus) as refused:
                async with connect(url, additional_headers=headers, open_timeout=GUARD_S):
                    pass
            assert refused.value.response.status_code == status, headers
        valid = await new_key(redis, "tts")
        for headers in ({"X-API-Key": valid}, {"Authorization": f"Bearer {valid}", "Cartesia-Version": "2026-08-14"}):
            async with connect(url, additional_headers=headers, open_timeout=GUARD_S) as ws:
                await ws.send(json.dumps({"context_id": "nobody", "cancel": True}))
                assert (await reply(ws))["error_code"] == "unknown_context", "accepted, and answering"


async def test_a_thousand_contexts_opened_and_cancelled_leave_nothing_behind(redis: Redis, make_settings: Any) -> None:
    """Contexts opened and cancelled in a loop (one in 25 with a chunk queued, then abandoned), then a thousand held at
    once: each past ``REALTIME_MAX_CONTEXTS`` gets ``too_many_contexts``; neither the engine nor the adapter ever holds
    more than the limit, and once the client hangs up, nothing is left: contexts, tasks, stream slot, jobs."""
    limit = 4
    config = make_settings(realtime_max_contexts=limit, rate_limit_burst=1000, realtime_inbox_messages=8)
    async with served(config) as (realtime, app):
        sessions = app.state.sessions
        ws = await connect(url_of(realtime), open_timeout=GUARD_S)
        rounds = 1000
        outgoing: list[dict[str, Any]] = []
        for n in range(rounds):
            text = f"Sentence {n}." if n % 25 == 0 else ""
            outgoing.append(options(f"c{n}", transcript=text, flush=n % 25 == 0, **{"continue": True}))
            outgoing.append({"context_id": f"c{n}", "cancel": True})
        outgoing += [options(f"held{n}", transcript="", **{"continue": True}) for n in range(rounds)]
        sending = asyncio.ensure_future(_send_all(ws, outgoing))
        most = {"contexts": 0, "pieces": 0}
        refused = 0
        while refused < rounds - limit:
            said = await reply(ws)
            assert said["type"] == "error" and said["error_code"] == "too_many_contexts", said
            refused += 1
            for connection in sessions.connections:
                most["pieces"] = max(most["pieces"], len(connection.adapter.pieces))
            most["contexts"] = max(most["contexts"], sessions.counts().contexts)
        await sending
        assert sessions.counts().contexts == limit

        ws.transport.abort()  # gone without a word, its contexts open
        await asyncio.wait_for(ws.wait_closed(), GUARD_S)
        slots = app.state.service.listening.stream_slots
        async with asyncio.timeout(GUARD_S):
            while sessions.counts().connections or slots.open:  # noqa: ASYNC110 - the app's own state
                await asyncio.sleep(0.02)
        assert sessions.counts() == type(sessions.counts())(0, 0, 0)
        assert most["contexts"] <= limit and most["pieces"] <= limit, most


async def _send_all(ws: ClientConnection, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        await ws.send(json.dumps(message))


async def test_every_raw_encoding_at_every_rate_is_the_audio_converted_in_one_piece(redis: Redis, make_settings: Any) -> None:
    """Each of Cartesia's raw encodings at each of its rates, a context apiece on one socket: its chunks joined are the
    24 kHz audio converted in one piece (resampled with the converter's filter, then encoded)."""
    worker = Worker(redis)
    speech = _speech(3)
    async with served(make_settings()) as (realtime, _app), connect(url_of(realtime), open_timeout=GUARD_S) as ws:
        for encoding in ("pcm_s16le", "pcm_f32le", "pcm_mulaw", "pcm_alaw"):
            for rate in (8000, 16000, 22050, 24000, 44100, 48000):
                fmt = {"container": "raw", "encoding": encoding, "sample_rate": rate}
                text = f"Spoken as {encoding} at {rate} hertz."
                await say(ws, f"{encoding}-{rate}", text, more=False, output_format=fmt)
                (task,) = (await claim_by_text(worker, 1)).values()
                await worker.speak(task, speech)
                heard = bytearray()
                while (said := await reply(ws))["type"] == "chunk":
                    heard += base64.b64decode(said["data"])
                assert said["type"] == "done" and said["context_id"] == f"{encoding}-{rate}", said
                assert bytes(heard) == convert_whole(speech, OutputFormat(encoding, rate)), (encoding, rate)


def test_every_ignored_option_is_named_in_the_protocols_page() -> None:
    """Options ttsq accepts and does nothing with are said where a client's author looks, never silently dropped."""
    page = (Path(__file__).resolve().parents[3] / "docs" / "protocols" / "cartesia-websocket.md").read_text(encoding="utf-8")
    assert [name for name in IGNORED_OPTIONS if f"`{name}`" not in page] == []


async def test_an_idle_socket_says_what_each_context_never_spoke(make_settings: Any) -> None:
    config = make_settings(realtime_idle_s=0.3, realtime_clause_wait_s=30)
    async with served(config) as (realtime, _app), connect(url_of(realtime), open_timeout=GUARD_S) as ws:
        await say(ws, "tool", "Let me look that up")
        said = await reply(ws)
        assert said["type"] == "error" and said["context_id"] is None and said["error_code"] == "timeout", said
        assert said["unspoken_contexts"] == {"tool": "Let me look that up"} and said["status_code"] == 408, said
        await ws.wait_closed()
    assert ws.close_code == 4408
