"""What an OpenAI speech request's going away cancels (:meth:`TaskService.abandon`), through the real app on a real Redis.

The disconnect itself is driven over real uvicorn with a real worker in ``tests/e2e/test_openai.py``; here, each rule
of what may be cancelled: the job nobody else wants, never one a webhook waits for, one a submit joined, or one that
has ended already.
"""

from __future__ import annotations

from typing import Any, cast

from redis.asyncio import Redis

from tests.conftest import api_client
from tests.integration.api.test_security import submit
from ttsq.api.auth import Principal
from ttsq.api.service import TTSService
from ttsq.store.replies import Cancelled

WEBHOOKS = {"webhook_secret": "0123456789abcdef0123", "public_url": "https://tts.test"}


async def test_only_a_job_nobody_else_waits_for_is_cancelled(redis: Redis, make_settings: Any) -> None:
    async with api_client(make_settings(**WEBHOOKS)) as (client, app):
        service = cast(TTSService, app.state.service).tasks
        caller = Principal(None, "127.0.0.1")  # the in-process client's address: the submits' owner

        alone = (await submit(client, None, text="Nobody else wants this.")).json()["task_id"]
        assert await service.abandon(alone, caller) is Cancelled.CANCELLED
        assert (await client.get(f"/v1/tts/tasks/{alone}")).json()["status"] == "cancelled"

        hooked = (await submit(client, None, text="A webhook waits.", callback_url="https://hooks.example/tts")).json()
        assert await service.abandon(hooked["task_id"], caller) is None
        assert (await client.get(f"/v1/tts/tasks/{hooked['task_id']}")).json()["status"] == "queued"

        first = (await submit(client, None, text="Asked for twice.", voice="zh_female")).json()["task_id"]
        again = (await submit(client, None, text="Asked for twice.", voice="zh_female")).json()
        assert again["joined"] is True and again["task_id"] == first
        assert await service.abandon(first, caller) is Cancelled.KEPT
        assert (await client.get(f"/v1/tts/tasks/{first}")).json()["status"] == "queued"

        assert await service.abandon(alone, caller) is None, "ended already: nothing to do"
        assert await service.abandon("no-such-task", caller) is None
