"""The floor a Redis-backed submit endpoint is judged against: FastAPI that LPUSHes the body.

``POST /submit`` parses the JSON body (any real endpoint must) and does one ``LPUSH`` of it into
``REDIS_URL``, answering ``202`` with the new list length. No validation, no job record, no task
id: it is the least work an endpoint that queues into Redis can do on this HTTP stack. The Redis
client is built by :func:`ttsq.store.connection.create_redis`, as ttsq's is, so the two endpoints
differ in what they do, not in how they talk to Redis.

    uvicorn bench.service.lpush_app:app --loop uvloop --http httptools --no-access-log
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request, status

from settings import Settings
from ttsq.store.connection import create_redis

QUEUE_KEY = "bench:lpush"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    app.state.redis = create_redis(Settings().redis_config())
    try:
        yield
    finally:
        await app.state.redis.aclose()


app = FastAPI(lifespan=lifespan)


@app.post("/submit", status_code=status.HTTP_202_ACCEPTED)
async def submit(body: dict[str, Any], request: Request) -> dict[str, int]:
    depth = await request.app.state.redis.lpush(QUEUE_KEY, json.dumps(body))
    return {"queued": int(depth)}


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
