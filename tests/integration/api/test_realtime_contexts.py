"""Several contexts on one realtime session (``context.start``, ``context_id``), against the real app under a real
uvicorn in the test's own process, a real redis-server and a real WebSocket client. No worker: the test plays the
worker through the queue's own calls (claim, publish, complete), so it decides whose audio comes when.

What each test would catch: a context's audio tagged with another's id or sent out of its order, a cancel that stops
more than its own context, contexts past ``REALTIME_MAX_CONTEXTS``, and anything a connection leaves behind — its
contexts, its tasks, its stream slot, its subscriptions to the listener, its jobs — asserted on the engine's own counts
(``app.state.sessions``) and the process's.
"""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
from redis.asyncio import Redis
from websockets.asyncio.client import ClientConnection, connect

from tests.conftest import claimed, queue_config
from tests.integration.api.test_realtime_session import GUARD_S, drain, next_event, served, started
from ttsq.domain.audio import SAMPLE_RATE
from ttsq.domain.converter import convert_whole
from ttsq.domain.output_formats import OutputFormat
from ttsq.store.leases import Claim
from ttsq.store.queue import JobQueue
from ttsq.store.streams import AudioStreams


class Worker:
    """The worker's side, played by the test: claim the session's jobs, speak a job's audio when told."""

    def __init__(self, redis: Redis) -> None:
        self.queue = JobQueue(redis, queue_config())
        self.streams = AudioStreams(redis, self.queue.shards, 60)
        self.held: dict[str, Claim] = {}

    async def claim(self, count: int) -> None:
        for _ in range(count):
            held = await claimed(self.queue)
            self.held[held.job.id] = held

    async def speak(self, task_id: str, pcm: bytes) -> None:
        held = self.held[task_id]
        assert await self.streams.publish(task_id, held.token, 0, 1, pcm, at=0)
        await self.queue.leases.complete(held.job, pcm, "audio/pcm", len(pcm) / 2 / SAMPLE_RATE, 0.1, cache_key=None)

    async def stopped(self, task_id: str) -> bool:
        """Whether the job was cancelled: before it ran, or (running) with its worker told to stop."""
        if await self.status(task_id) == "cancelled":
            return True
        _, notices = await self.queue.leases.cancel_notices(self.queue.shards.of(task_id), "0-0", 0.01)
        return task_id in {notice.job_id for notice in notices}

    async def status(self, task_id: str) -> str:
        job = await self.queue.get(task_id)
        assert job is not None
        return job.status.value


async def send(ws: ClientConnection, kind: str, **fields: Any) -> None:
    await ws.send(json.dumps({"type": kind, **fields}))


async def event(ws: ClientConnection) -> dict[str, Any]:
    message = await asyncio.wait_for(ws.recv(), GUARD_S)
    assert isinstance(message, str), "no binary frame on this session"
    return dict(json.loads(message))


def pcm(value: int, samples: int = 2400) -> bytes:
    return bytes([value, 0]) * samples


async def test_each_contexts_audio_comes_tagged_as_it_comes_and_a_cancel_stops_only_its_own(
    redis: Redis, make_settings: Any
) -> None:
    """JSON transport: two contexts on one session, the second's audio first (its worker is faster): it comes at once,
    tagged with its id; cancelling the first abandons its job alone, and the second is spoken to its end."""
    worker = Worker(redis)
    async with served(make_settings()) as (url, _app), connect(url, open_timeout=GUARD_S) as ws:
        assert (await started(ws, seed=3, audio_transport="json"))["audio_transport"] == "json"
        for name in ("a", "b"):
            await send(ws, "context.start", context_id=name)
            assert await event(ws) == {"type": "context.started", "context_id": name}
        for name, text in [("a", "Alpha speaks first here."), ("b", "Bravo speaks second here.")]:
            await send(ws, "text", context_id=name, text=text)
            await send(ws, "flush", context_id=name)
        queued = {}
        for _ in range(2):
            said = await event(ws)
            assert said["type"] == "segment.queued" and said["index"] == 0, said
            queued[said["context_id"]] = said["task_id"]
        assert queued.keys() == {"a", "b"} and queued["a"] != queued["b"]
        await worker.claim(2)

        await worker.speak(queued["b"], pcm(2))
        audio = await event(ws)
        assert audio["type"] == "audio" and audio["context_id"] == "b" and base64.b64decode(audio["audio"]) == pcm(2)
        done = await event(ws)
        assert done["type"] == "segment.done" and done["context_id"] == "b" and done["start_s"] == 0
        assert done["end_s"] == 2400 / SAMPLE_RATE

        await send(ws, "cancel", context_id="a")
        cancelled = await event(ws)
        assert cancelled == {"type": "context.done", "context_id": "a", "cancelled": True, "segments": 1, "audio_s": 0, "chars": 24}
        assert await worker.stopped(queued["a"]), "its own job is abandoned"
        assert await worker.status(queued["b"]) == "done"

        await send(ws, "text", context_id="b", text="Then Bravo ends.")
        await send(ws, "close", context_id="b")
        second = await event(ws)
        assert second["type"] == "segment.queued" and second["context_id"] == "b" and second["index"] == 1
        await worker.claim(1)
        await worker.speak(second["task_id"], pcm(4))
        kinds = [await event(ws) for _ in range(4)]
        assert [k["type"] for k in kinds] == ["audio", "audio", "segment.done", "context.done"], kinds
        gap, spoken = (base64.b64decode(k["audio"]) for k in kinds[:2])
        assert set(gap) == {0} and spoken == pcm(4), "the pause between its sentences, then its second"
        assert kinds[2]["start_s"] == (2400 + len(gap) // 2) / SAMPLE_RATE, "timing within its own context"
        assert kinds[3] == {
            "type": "context.done",
            "context_id": "b",
            "cancelled": False,
            "segments": 2,
            "audio_s": (4800 + len(gap) // 2) / SAMPLE_RATE,
            "chars": 41,
        }

        await send(ws, "text", text="The default context speaks too.")
        await send(ws, "close")
        third = await event(ws)
        assert third["type"] == "segment.queued" and "context_id" not in third and third["index"] == 0
        await worker.claim(1)
        await worker.speak(third["task_id"], pcm(6))
        audio = await event(ws)
        assert audio == {"type": "audio", "audio": base64.b64encode(pcm(6)).decode()}, "the default context's: no id"
        rest, events, code = await drain(ws)
    assert rest == b"" and code == 1000
    assert [e["type"] for e in events] == ["segment.done", "session.done"], events
    assert events[-1]["segments"] == 4 and events[-1]["cancelled"] is False


async def test_binary_audio_comes_context_by_context_in_the_order_they_were_opened(redis: Redis, make_settings: Any) -> None:
    """A binary frame cannot say whose audio it is: the second context's audio, ready first, waits until the first
    context is over, and its events say where one ends and the next begins."""
    worker = Worker(redis)
    async with served(make_settings()) as (url, _app), connect(url, open_timeout=GUARD_S) as ws:
        await started(ws, seed=4)
        for name in ("first", "second"):
            await send(ws, "context.start", context_id=name)
            await send(ws, "text", context_id=name, text=f"The {name} context speaks.")
            await send(ws, "flush", context_id=name)
        order: list[str] = []
        queued: dict[str, str] = {}
        while len(queued) < 2:
            said = await event(ws)
            order.append(said["type"])
            if said["type"] == "segment.queued":
                queued[said["context_id"]] = said["task_id"]
        await worker.claim(2)
        await worker.speak(queued["second"], pcm(2))  # ready first
        await send(ws, "keepalive")
        await worker.speak(queued["first"], pcm(1))
        await send(ws, "close", context_id="first")
        await send(ws, "close")
        audio = bytearray()
        while True:
            message = await asyncio.wait_for(ws.recv(), GUARD_S)
            if isinstance(message, bytes):
                order.append(f"audio {message[0]}")
                audio += message
                continue
            said = json.loads(message)
            order.append(f"{said['type']} {said.get('context_id')}")
            if said["type"] == "session.done":
                break
    assert audio == pcm(1) + pcm(2), "the first context's audio, then the second's"
    assert all(held.job.params.listened for held in worker.held.values()), "a session's jobs are heard as they are made"
    heard = [step for step in order if step.startswith(("audio", "context.done"))]
    assert heard == ["audio 1", "context.done first", "audio 2", "context.done second"], order


async def test_bad_context_messages_each_get_an_error_and_the_session_goes_on(make_settings: Any) -> None:
    async with served(make_settings(realtime_max_contexts=3)) as (url, _app), connect(url, open_timeout=GUARD_S) as ws:
        await started(ws)
        refusals: list[tuple[str, dict[str, Any] | str]] = [
            ("unknown_context", {"type": "text", "context_id": "nobody", "text": "Hello."}),
            ("unknown_context", {"type": "flush", "context_id": "nobody"}),
            ("unknown_context", {"type": "cancel", "context_id": "nobody"}),
            ("invalid_message", {"type": "text", "context_id": "", "text": "Hello."}),
            ("invalid_message", {"type": "text", "context_id": 5, "text": "Hello."}),
            ("invalid_message", {"type": "close", "context_id": "x" * 129}),
            ("invalid_message", {"type": "context.start"}),
            ("invalid_message", {"type": "context.start", "context_id": "a", "volume": 11}),
            ("invalid_message", '{"type": "context.start", "context_id": "a", "context_id": "b"}'),
            ("invalid_context", {"type": "context.start", "context_id": "a", "voice": "nobody"}),
        ]
        for expected, message in refusals:
            await ws.send(message if isinstance(message, str) else json.dumps(message))
            said = await event(ws)
            assert said["type"] == "error" and said["code"] == expected and said["message"], (message, said)
        for name in ("a", "b", "c"):
            await send(ws, "context.start", context_id=name, speed=3)
            assert (await event(ws))["type"] == "context.started"
        await send(ws, "context.start", context_id="a")
        said = await event(ws)
        assert said == {"type": "error", "context_id": "a", "code": "context_exists", "message": said["message"]}
        await send(ws, "context.start", context_id="d")
        said = await event(ws)
        assert said["code"] == "too_many_contexts" and "REALTIME_MAX_CONTEXTS" in said["message"], said
        await send(ws, "close", context_id="c")  # nothing to speak: over at once, and its place is free again
        assert (await event(ws))["type"] == "context.done"
        await send(ws, "context.start", context_id="d")
        assert await event(ws) == {"type": "context.started", "context_id": "d"}
        await send(ws, "close")
        _, events, code = await drain(ws)
    assert code == 1000 and [e["type"] for e in events] == ["context.done"] * 3 + ["session.done"], events
    assert {e["context_id"] for e in events[:3]} == {"a", "b", "d"}


async def test_a_thousand_contexts_opened_and_cancelled_on_one_socket_leave_nothing_behind(
    redis: Redis, make_settings: Any
) -> None:
    """A client opens and cancels contexts in a loop (one in 25 with a chunk queued and then abandoned), then asks for a
    thousand more at once: each gets its answer or ``too_many_contexts``, the engine never holds more than
    ``REALTIME_MAX_CONTEXTS`` of them, and once the client hangs up its contexts, tasks, stream slot, subscriptions
    and jobs are all gone."""
    limit = 4
    config = make_settings(realtime_max_contexts=limit, rate_limit_burst=1000, realtime_inbox_messages=8)
    worker = Worker(redis)
    async with served(config) as (url, app):
        sessions = app.state.sessions
        most = {"contexts": 0, "tasks": 0}
        ws = await connect(url, open_timeout=GUARD_S)
        await started(ws)
        rounds = 1000
        outgoing = []
        for n in range(rounds):
            outgoing.append({"type": "context.start", "context_id": f"c{n}"})
            if n % 25 == 0:
                outgoing.append({"type": "text", "context_id": f"c{n}", "text": f"Sentence {n}."})
                outgoing.append({"type": "flush", "context_id": f"c{n}"})
            outgoing.append({"type": "cancel", "context_id": f"c{n}"})
        outgoing += [{"type": "context.start", "context_id": f"held{n}"} for n in range(rounds)]
        outgoing.append({"type": "text", "context_id": "held0", "text": "Held while the client goes."})
        outgoing.append({"type": "flush", "context_id": "held0"})
        sending = asyncio.ensure_future(_send_all(ws, outgoing))
        said: dict[str, int] = {}
        queued: list[str] = []
        while len(queued) < rounds // 25 + 1 or said.get("too_many_contexts", 0) < rounds - limit:
            reply = await event(ws)
            key = reply.get("code", reply["type"])
            said[key] = said.get(key, 0) + 1
            if reply["type"] == "segment.queued":
                queued.append(reply["task_id"])
            counts = sessions.counts()  # what the engine holds, at every answer
            most["contexts"] = max(most["contexts"], counts.contexts)
            most["tasks"] = max(most["tasks"], counts.tasks)
        await sending
        assert said["context.started"] == rounds + limit and said["too_many_contexts"] == rounds - limit, said
        assert sessions.counts().contexts == limit

        ws.transport.abort()  # gone without a word, its contexts open
        await asyncio.wait_for(ws.wait_closed(), GUARD_S)
        listener = app.state.service.listening.listener
        slots = app.state.service.listening.stream_slots
        async with asyncio.timeout(GUARD_S):
            while sessions.counts().connections or slots.open or listener.listening():  # noqa: ASYNC110 - the app's own state
                await asyncio.sleep(0.02)
        assert sessions.counts() == type(sessions.counts())(0, 0, 0)
        assert most["contexts"] <= limit and most["tasks"] <= limit + 2, most
        assert [await worker.stopped(task) for task in queued] == [True] * len(queued), "every chunk abandoned"


async def _send_all(ws: ClientConnection, messages: list[dict[str, Any]]) -> None:
    for message in messages:
        await ws.send(json.dumps(message))


async def test_an_idle_session_says_what_each_context_never_spoke(make_settings: Any) -> None:
    async with served(make_settings(realtime_clause_wait_s=30)) as (url, _app), connect(url, open_timeout=GUARD_S) as ws:
        await started(ws, idle_s=0.3)
        await send(ws, "context.start", context_id="tool")
        await send(ws, "text", context_id="tool", text="Let me look that up")
        await send(ws, "text", text="And meanwhile")
        await send(ws, "context.start", context_id="quiet")
        _, events, code = await drain(ws)
    assert code == 4408, events
    ending = events[-1]
    assert ending["unspoken"] == "And meanwhile" and ending["unspoken_contexts"] == {"tool": "Let me look that up"}, ending
    assert "32 characters were not spoken" in ending["message"]


async def test_a_session_closed_with_contexts_open_speaks_each_to_its_end(redis: Redis, make_settings: Any) -> None:
    worker = Worker(redis)
    async with served(make_settings()) as (url, _app), connect(url, open_timeout=GUARD_S) as ws:
        await started(ws, seed=5)
        await send(ws, "context.start", context_id="a", seed=6)
        await send(ws, "text", context_id="a", text="Context a has its own seed")
        await send(ws, "close")
        queued = await next_event(ws, "segment.queued")
        assert queued["context_id"] == "a" and queued["text"] == "Context a has its own seed"
        await send(ws, "text", context_id="a", text="too late")
        assert (await next_event(ws, "error"))["code"] == "closing"
        await worker.claim(1)
        assert worker.held[queued["task_id"]].job.params.seed == 6
        await worker.speak(queued["task_id"], pcm(7))
        audio, events, code = await drain(ws)
    assert code == 1000 and audio == pcm(7)
    assert [e["type"] for e in events] == ["segment.done", "context.done", "session.done"], events


async def test_a_flush_with_a_mark_is_acknowledged_once_all_it_cut_is_spoken(redis: Redis, make_settings: Any) -> None:
    """``flush.done`` comes after the last ``segment.done`` of what the flush cut, not at its first audio; a flush with
    nothing to speak is acknowledged at once."""
    worker = Worker(redis)
    async with served(make_settings()) as (url, _app), connect(url, open_timeout=GUARD_S) as ws:
        await started(ws, seed=8)
        await send(ws, "flush", mark="nothing")
        assert await event(ws) == {"type": "flush.done", "mark": "nothing"}
        await send(ws, "context.start", context_id="c")
        assert (await event(ws))["type"] == "context.started"
        await send(ws, "text", context_id="c", text="The first part is here. The second part follows it.")
        await send(ws, "flush", context_id="c", mark="both")
        await send(ws, "keepalive", mark="x")
        assert (await event(ws))["type"] == "segment.queued"
        assert (await event(ws))["code"] == "invalid_message", "only a flush takes a mark"
        await worker.claim(1)
        first = next(iter(worker.held))
        await worker.speak(first, pcm(1))
        order = []
        while "segment.done 1" not in order:
            message = await asyncio.wait_for(ws.recv(), GUARD_S)
            said = {"type": "audio"} if isinstance(message, bytes) else json.loads(message)
            order.append(f"{said['type']} {said.get('index', '')}".strip())
            if said["type"] == "segment.queued":
                await worker.claim(1)
                await worker.speak(said["task_id"], pcm(2))
        assert await event(ws) == {"type": "flush.done", "context_id": "c", "mark": "both"}
        await send(ws, "cancel")
        _, events, code = await drain(ws)
    assert order[:3] == ["audio", "segment.queued 1", "segment.done 0"] and "flush.done" not in " ".join(order), order
    assert code == 1000 and [e["type"] for e in events] == ["context.done", "session.done"], events


async def test_a_sessions_output_format_is_each_contexts_one_stream(redis: Redis, make_settings: Any) -> None:
    """``output_format``/``sample_rate``: every context's audio is one stream in that format, through a converter of its
    own (µ-law at 8 kHz in binary frames; mp3 as JSON events, each context's with its own header), equal to the same
    audio converted in one piece; a format ttsq cannot make refuses the session."""
    worker = Worker(redis)
    async with served(make_settings()) as (url, _app):
        async with connect(url, open_timeout=GUARD_S) as ws:
            await ws.send(json.dumps({"type": "session.start", "output_format": "opus", "sample_rate": 44_100}))
            _, events, code = await drain(ws)
        assert code == 4400 and "output_format" in events[-1]["message"] and "44100" in events[-1]["message"], events

        async with connect(url, open_timeout=GUARD_S) as ws:
            said = await started(ws, seed=2, output_format="mulaw")
            assert (said["encoding"], said["sample_rate"], said["output_format"]) == ("pcm_mulaw", 8000, "mulaw")
            await send(ws, "text", text="Spoken down a telephone line.")
            await send(ws, "close")
            queued = await next_event(ws, "segment.queued")
            await worker.claim(1)
            await worker.speak(queued["task_id"], _speech(1))
            audio, events, code = await drain(ws)
        assert code == 1000 and audio == convert_whole(_speech(1), OutputFormat("pcm_mulaw", 8000)), "one µ-law stream"
        assert events[-2]["type"] == "segment.done" and events[-2]["end_s"] == len(_speech(1)) / 2 / SAMPLE_RATE

        async with connect(url, open_timeout=GUARD_S) as ws:
            await started(ws, seed=2, output_format="mp3", audio_transport="json")
            for name in ("x", "y"):
                await send(ws, "context.start", context_id=name)
                await send(ws, "text", context_id=name, text=f"Context {name} is spoken as mp3.")
                await send(ws, "close", context_id=name)
            await send(ws, "close")
            queued = {}
            while len(queued) < 2:
                said = await event(ws)
                if said["type"] == "segment.queued":
                    queued[said["context_id"]] = said["task_id"]
            await worker.claim(2)
            for value, name in enumerate(("x", "y")):
                await worker.speak(queued[name], _speech(value + 2))
            _, events, code = await drain(ws)
        assert code == 1000
        for value, name in enumerate(("x", "y")):
            heard = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "audio" and e["context_id"] == name)
            assert heard == convert_whole(_speech(value + 2), OutputFormat("mp3")), f"context {name}: one mp3 stream"


def _speech(seed: int) -> bytes:
    """Half a second of a tone, as PCM16 at 24 kHz (something an encoder does not reduce to nothing)."""
    samples = (np.sin(np.arange(SAMPLE_RATE // 2) * 2 * np.pi * 220 * seed / SAMPLE_RATE) * 8000).astype("<i2")
    return samples.tobytes()
