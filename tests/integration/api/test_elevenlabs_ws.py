"""ElevenLabs' ``multi-stream-input`` and ``stream-input`` WebSockets on the session engine, against the real app under
a real uvicorn in the test's own process, a real redis-server and a real WebSocket client speaking as LiveKit's and
Pipecat's ElevenLabs services do. No worker: the test plays it through the queue's own calls (tests/api/
test_realtime_contexts.py's ``Worker``), so it decides whose audio comes when and sees each chunk's text and speed.

What each test would catch: audio in binary frames or without its camelCase ``contextId``, an ``isFinal`` sharing a
message with audio, Pipecat's sentences run together ("answer.It"), an interruption that goes on speaking, an ending
that drops the last sentence, a malformed message or an unknown context that ends the socket instead of an error, a
keep-alive that speaks or errs, a refusal after the accept instead of at the handshake, and anything left behind.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import pytest
from redis.asyncio import Redis
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidStatus

from tests.integration.api.test_realtime_contexts import Worker, pcm
from tests.integration.api.test_realtime_session import GUARD_S, served
from tests.integration.api.test_security import new_key
from ttsq.api.sessions.elevenlabs_protocol import ElevenLabsProtocol
from ttsq.domain.converter import convert_whole
from ttsq.domain.output_formats import parse_elevenlabs
from ttsq.domain.sampling import speed_level

VOICE = "zh_female"
NO_ALIGNMENT = {"alignment": None, "normalizedAlignment": None}
"""ChatTTS makes no alignment: both fields null on every audio reply."""
QUERY = "model_id=eleven_turbo_v2_5&output_format=pcm_24000&inactivity_timeout=180&sync_alignment=true&auto_mode=true"


def multi(realtime_url: str, voice: str = VOICE, query: str = QUERY) -> str:
    root = realtime_url.removesuffix("/v1/tts/realtime")
    return f"{root}/v1/text-to-speech/{voice}/multi-stream-input?{query}"


async def say(ws: ClientConnection, **message: Any) -> None:
    await ws.send(json.dumps(message))


async def reply(ws: ClientConnection) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.recv(), GUARD_S)
    assert isinstance(message, str), "ElevenLabs' clients read text frames only"
    return dict(json.loads(message))


class Jobs(Worker):
    """The worker's side, finding a chunk by its text."""

    async def by_text(self, count: int) -> dict[str, str]:
        """Claim ``count`` more jobs, waiting for each to be queued (a context queues its next chunk once the one before
        it has audio out: ``REALTIME_AHEAD``); every job claimed so far, by its text."""
        async with asyncio.timeout(GUARD_S):
            wanted = len(self.held) + count
            while len(self.held) < wanted:
                held = await self.queue.leases.claim("w", block_s=0.1)
                if held is not None:
                    self.held[held.job.id] = held
        return {held.job.params.text: job_id for job_id, held in self.held.items()}

    def speed(self, task_id: str) -> int:
        return self.held[task_id].job.params.speed


async def test_two_contexts_on_one_socket_as_livekit_and_pipecat_use_them(redis: Redis, make_settings: Any) -> None:
    """LiveKit's context (init, a sentence with flush, the end-of-input flush, close_context) is spoken to its end;
    Pipecat's (sentences without the space after them, interrupted by a bare close_context) stops at once and its job
    is abandoned; each gets its own ``isFinal``, in a message of its own; the keep-alive says nothing."""
    jobs = Jobs(redis)
    async with served(make_settings()) as (url, app), connect(multi(url), open_timeout=GUARD_S) as ws:
        await say(ws, text=" ", voice_settings={}, context_id="lk")
        await say(ws, text="Hello there, this is the first sentence. ", context_id="lk", flush=True)
        await say(ws, text=" ", voice_settings={"speed": 2.0, "stability": 0.5}, context_id="pc")
        await say(ws, text="Hello there.", context_id="pc")
        await say(ws, text="It will be interrupted.", context_id="pc")
        await say(ws, text="")  # Pipecat's keep-alive: nothing back
        await say(ws, text="", context_id="pc")  # and its context's
        queued = await jobs.by_text(2)
        assert set(queued) == {"Hello there, this is the first sentence.", "Hello there."}
        assert jobs.speed(queued["Hello there."]) == speed_level(2.0) == 7
        assert jobs.speed(queued["Hello there, this is the first sentence."]) == 5

        await jobs.speak(queued["Hello there."], pcm(2))
        audio = await reply(ws)
        assert audio == {"audio": base64.b64encode(pcm(2)).decode(), "contextId": "pc", **NO_ALIGNMENT}
        queued = await jobs.by_text(1)
        assert "It will be interrupted." in queued, "Pipecat's sentences are cut apart, a space between them"
        await say(ws, context_id="pc", close_context=True)  # the listener barged in: no flush before it
        assert await reply(ws) == {"isFinal": True, "contextId": "pc"}
        assert await jobs.stopped(queued["It will be interrupted."]), "the interrupted context's unspoken chunk is abandoned"

        await say(ws, text="And the second sentence comes. ", context_id="lk", flush=True)
        await say(ws, text="", context_id="lk", flush=True)
        await say(ws, context_id="lk", close_context=True)
        await jobs.speak(queued["Hello there, this is the first sentence."], pcm(4))
        first = await reply(ws)
        assert first["contextId"] == "lk" and base64.b64decode(first["audio"]) == pcm(4)
        second_text = await jobs.by_text(1)
        await jobs.speak(second_text["And the second sentence comes."], pcm(6))
        gap, spoken = await reply(ws), await reply(ws)
        assert set(base64.b64decode(gap["audio"])) == {0} and base64.b64decode(spoken["audio"]) == pcm(6)
        assert await reply(ws) == {"isFinal": True, "contextId": "lk"}, "closed after a flush: spoken to its end"

        await say(ws, text=" ", context_id="lk")  # an id may be opened again after its isFinal
        await say(ws, close_socket=True)
        assert await reply(ws) == {"isFinal": True, "contextId": "lk"}
        await asyncio.wait_for(ws.wait_closed(), GUARD_S)
        assert ws.close_code == 1000
        sessions, slots = app.state.sessions, app.state.service.listening.stream_slots
        async with asyncio.timeout(GUARD_S):
            while sessions.counts().connections or slots.open:  # noqa: ASYNC110 - the app's own state
                await asyncio.sleep(0.01)
        assert sessions.counts() == type(sessions.counts())(0, 0, 0)


async def test_in_auto_mode_a_sentence_that_ends_a_piece_is_queued_at_once(redis: Redis, make_settings: Any) -> None:
    """``auto_mode``: the client sends whole sentences (Pipecat, without flush), so its sentence is spoken before the next
    piece comes; without ``auto_mode`` pieces are tokens, and a sentence end that ends one waits for what follows."""
    jobs = Jobs(redis)
    # No timed way out meanwhile: what is queued is what the text's own cuts make.
    async with served(make_settings(realtime_clause_wait_s=60)) as (url, _app):
        async with connect(multi(url), open_timeout=GUARD_S) as ws:
            await say(ws, text=" ", voice_settings={}, context_id="pc")
            await say(ws, text="Nothing follows this yet.", context_id="pc")
            assert set(await jobs.by_text(1)) == {"Nothing follows this yet."}
        tokens = QUERY.replace("auto_mode=true", "auto_mode=false")
        async with connect(multi(url, query=tokens), open_timeout=GUARD_S) as ws:
            await say(ws, text=" ", voice_settings={}, context_id="tk")
            await say(ws, text="A token stream waits.", context_id="tk")
            await say(ws, text='"', context_id="tk")
            await say(ws, text=" Then", context_id="tk")
            assert 'A token stream waits."' in await jobs.by_text(1), "the quote stayed with its sentence"


async def test_malformed_messages_and_unknown_contexts_get_an_error_and_the_socket_goes_on(
    redis: Redis, make_settings: Any
) -> None:
    jobs = Jobs(redis)
    async with served(make_settings()) as (url, _app), connect(multi(url), open_timeout=GUARD_S) as ws:
        for bad, said, context in [
            ("not json", "JSON", None),
            ("[1, 2]", "JSON object", None),
            ('{"text": "Hi.", "context_id": "a", "flsuh": true}', "flsuh", "a"),
            ('{"text": 5, "context_id": "b"}', "text", "b"),
            ('{"text": "Hi.", "voice_settings": {"speed": 9}, "context_id": "c"}', "speed", "c"),
        ]:
            await ws.send(bad)
            error = await reply(ws)
            assert error["error"] == "invalid_message" and said in error["message"], (bad, error)
            assert error.get("contextId") == context, (bad, error)
        await ws.send(b"\x00\x01")
        assert (await reply(ws))["error"] == "invalid_message"
        await say(ws, context_id="nobody", close_context=True)
        assert await reply(ws) == {
            "error": "unknown_context",
            "message": "no context 'nobody' is open: start it first",
            "contextId": "nobody",
        }
        await say(ws, text="Still here. ", context_id="a", flush=True)  # the socket goes on
        queued = await jobs.by_text(1)
        await jobs.speak(queued["Still here."], pcm(3))
        assert (await reply(ws))["contextId"] == "a"
        await say(ws, context_id="a", close_context=True)
        assert await reply(ws) == {"isFinal": True, "contextId": "a"}


async def test_formats_are_converted_and_stream_input_ends_with_its_empty_text(redis: Redis, make_settings: Any) -> None:
    """µ-law at 8 kHz: the context's audio is ttsq's converter fed its PCM, one stream. ``stream-input``: one context,
    audio without an id, ``{"text": ""}`` ends it (``isFinal``, then 1000)."""
    jobs = Jobs(redis)
    async with served(make_settings()) as (url, _app):
        async with connect(multi(url, query="output_format=ulaw_8000&auto_mode=true"), open_timeout=GUARD_S) as ws:
            await say(ws, text="A phone call speaks.", context_id="t", close_context=True)  # its whole text, and the end
            queued = await jobs.by_text(1)
            await jobs.speak(queued["A phone call speaks."], pcm(9, 4800))
            heard = bytearray()
            while "isFinal" not in (message := await reply(ws)):
                heard += base64.b64decode(message["audio"])
            assert bytes(heard) == convert_whole(pcm(9, 4800), parse_elevenlabs("ulaw_8000"))

        single = multi(url).replace("multi-stream-input", "stream-input")
        async with connect(single, open_timeout=GUARD_S) as ws:
            await say(ws, text=" ", voice_settings={"speed": 0.5})
            await say(ws, text="One context only. ")
            await say(ws, text="")
            queued = await jobs.by_text(1)
            assert jobs.speed(queued["One context only."]) == 3
            await jobs.speak(queued["One context only."], pcm(5))
            assert await reply(ws) == {"audio": base64.b64encode(pcm(5)).decode(), **NO_ALIGNMENT}
            assert await reply(ws) == {"isFinal": True}
            await asyncio.wait_for(ws.wait_closed(), GUARD_S)
            assert ws.close_code == 1000


async def test_refusals_are_answered_at_the_handshake(redis: Redis, make_settings: Any) -> None:
    """A bad key, a key without ``tts``, an unknown voice, a format or timeout ttsq cannot take: the HTTP status, never a
    socket (both stock clients give up at once on a 4xx); a good key in ``xi-api-key`` is let in."""
    async with served(make_settings(auth="on")) as (url, _app):
        key = await new_key(redis, "tts")
        metrics_only = await new_key(redis, "metrics")
        for target, headers, status, said in [
            (multi(url), {"xi-api-key": "sk_not_a_key"}, 401, "not valid"),
            (multi(url), {}, 401, ""),
            (multi(url), {"xi-api-key": metrics_only}, 403, "'tts' scope"),
            (multi(url, voice="21m00Tcm4TlvDq8EDAcm"), {"xi-api-key": key}, 404, "voice_id"),
            (multi(url, query="output_format=flac_44100"), {"xi-api-key": key}, 422, "output_format"),
            (multi(url, query="inactivity_timeout=-1"), {"xi-api-key": key}, 422, "inactivity_timeout"),
            (multi(url, query="auto_mode=maybe"), {"xi-api-key": key}, 422, "auto_mode"),
        ]:
            with pytest.raises(InvalidStatus) as refused:
                async with connect(target, additional_headers=headers, open_timeout=GUARD_S):
                    pass
            response = refused.value.response
            assert response.status_code == status and said in json.loads(response.body)["detail"], (target, response.body)
        async with connect(multi(url), additional_headers={"xi-api-key": key}, open_timeout=GUARD_S) as ws:
            await say(ws, close_socket=True)
            await asyncio.wait_for(ws.wait_closed(), GUARD_S)
            assert ws.close_code == 1000


def test_inactivity_timeout_is_the_clients_within_the_servers_most() -> None:
    assert ElevenLabsProtocol._inactivity(None, 30.0) == 20.0, "ElevenLabs' default"
    assert ElevenLabsProtocol._inactivity("180", 30.0) == 30.0, "at most REALTIME_IDLE_S"
    assert ElevenLabsProtocol._inactivity("5", 30.0) == 5.0
    for bad in ("0", "nan", "soon"):
        with pytest.raises(ValueError, match="inactivity_timeout"):
            ElevenLabsProtocol._inactivity(bad, 30.0)


async def test_contexts_past_the_limit_are_refused_by_id_and_a_loop_of_interruptions_leaves_nothing(
    redis: Redis, make_settings: Any
) -> None:
    """Contexts opened and interrupted in a loop each get their ``isFinal``; past ``REALTIME_MAX_CONTEXTS`` open at once,
    each further one gets ``too_many_contexts`` with its id (and the socket goes on); once the client hangs up, the
    engine holds no connection, context, task or stream slot."""
    limit = 3
    async with served(make_settings(realtime_max_contexts=limit)) as (url, app):
        sessions, slots = app.state.sessions, app.state.service.listening.stream_slots
        async with connect(multi(url), open_timeout=GUARD_S) as ws:
            for n in range(50):
                await say(ws, text=" ", context_id=f"loop{n}")
                await say(ws, context_id=f"loop{n}", close_context=True)
                assert await reply(ws) == {"isFinal": True, "contextId": f"loop{n}"}
            for n in range(limit + 20):
                await say(ws, text=" ", context_id=f"held{n}")
            for n in range(limit, limit + 20):
                refused = await reply(ws)
                assert refused["error"] == "too_many_contexts" and refused["contextId"] == f"held{n}", refused
            assert sessions.counts().contexts == limit
            await say(ws, text="Still served. ", context_id="held0", flush=True)
            ws.transport.abort()  # gone without a word, its contexts open
        async with asyncio.timeout(GUARD_S):
            while sessions.counts().connections or slots.open:  # noqa: ASYNC110 - the app's own state
                await asyncio.sleep(0.01)
        assert sessions.counts() == type(sessions.counts())(0, 0, 0)
