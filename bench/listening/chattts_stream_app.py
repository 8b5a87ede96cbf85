"""The server ChatTTS's examples make: one FastAPI app that runs ``Chat.infer(stream=True)`` per request.

:mod:`bench.listening.realtime` compares ttsq's streaming with this. It is what upstream's examples do with streaming
(``examples/cmd/stream.py``'s ``ChatStreamer`` over ``chat.infer(..., stream=True)``, served like
``examples/api/main.py``): one ``Chat`` in the process, one lock around it (ChatTTS is not thread-safe:
``/work/shared/notes/chattts.md``), and each request's yields written to the response as raw PCM16 as they come.
ChatTTS's stream yields every ``stream_batch`` (24) decode steps but skips the first two yields, re-decodes the whole
prefix at every yield, and sends at most ``stream_speed`` (12,000) samples per yield; the rest comes at the end.

The model is loaded by ttsq's own loader (:class:`ttsq.inference.engines.chattts.ChatTTSEngine`, ``ENGINE_BACKEND=chattts``
semantics): the same checkpoint, dtype and device handling, the same speaker for a seed, so the only difference from
ttsq is how the requests are served. The request names its audio length (``tokens``: ``min_new_token =
max_new_token``), so both servers speak the same number of seconds for the same text.

    MODEL=tiny uvicorn bench.listening.chattts_stream_app:app --loop uvloop --http httptools --no-access-log
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from settings import get_settings
from ttsq.inference.engines.chattts import ChatTTSEngine


class StreamRequest(BaseModel):
    text: str = Field(min_length=1, max_length=2000)
    seed: int = 0
    tokens: int = Field(96, ge=1, le=4096, description="audio tokens to generate (min_new_token = max_new_token)")


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Load and warm the model before serving, as ttsq's worker does before it claims."""
    settings = get_settings()
    if settings.model == "tiny":
        from ttsq.inference.engines.checkpoint import build_tiny_checkpoint

        build_tiny_checkpoint(settings.tiny_checkpoint_dir)
    engine = ChatTTSEngine(settings.engine_config())
    engine.load()
    engine.warm_up()
    app.state.engine = engine
    app.state.chat = engine._loaded_chat()  # the bare Chat, as the examples hold it
    app.state.lock = threading.Lock()
    app.state.speakers = {}
    yield
    engine.release_memory()


app = FastAPI(lifespan=lifespan)


def _pcm16(wav: Any) -> bytes:
    samples = np.asarray(wav, dtype=np.float32).reshape(-1)
    return (np.clip(samples, -1.0, 1.0) * 32767).astype("<i2").tobytes()


def _generate(state: Any, body: StreamRequest) -> Iterator[bytes]:
    """Runs in Starlette's thread pool (a sync iterator): the lock is held from the first step to the last yield, so
    requests are served one at a time, as a single ``Chat`` allows."""
    import torch

    chat = state.chat
    with state.lock:
        if body.seed not in state.speakers:
            state.speakers[body.seed] = state.engine.speaker_from_seed(body.seed)
        torch.manual_seed(body.seed)
        stream = chat.infer(
            [body.text],
            stream=True,
            split_text=False,
            skip_refine_text=True,
            do_text_normalization=True,
            do_homophone_replacement=True,
            params_infer_code=chat.InferCodeParams(
                spk_emb=state.speakers[body.seed],
                manual_seed=body.seed,
                max_new_token=body.tokens,
                min_new_token=body.tokens,
                show_tqdm=False,
            ),
        )
        with torch.inference_mode():
            for wavs in stream:
                if wavs is not None and np.asarray(wavs).size:
                    yield _pcm16(np.asarray(wavs)[0])


@app.post("/stream")
async def stream(body: StreamRequest, request: Request) -> StreamingResponse:
    return StreamingResponse(_generate(request.app.state, body), media_type="audio/pcm")


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
