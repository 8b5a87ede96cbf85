"""The 2noise-style baseline: one FastAPI app that runs the engine inside its request handler.

This is how upstream ChatTTS's API example serves the model (``examples/api/main.py``): an
``async def`` POST handler calls ``chat.infer`` synchronously and returns the audio. Here the
handler calls the *same* engine ttsq's worker uses (:func:`bench.fixed_worker.make_bench_engine`:
the fixed-cost model of GPU time, or real ChatTTS code on a checkpoint via ``worker.chattts_engine``),
with the same speaker, text normalization and WAV encoding, so the only thing that differs from
ttsq is the serving architecture: no queue, no batching, and the event loop blocked for every
synthesis, which is exactly what the benchmark compares. Clients just POST and wait.

    BENCH_ENGINE=fixed|chattts uvicorn bench.service.baseline_app:app --loop uvloop --http httptools --no-access-log
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from fastapi import FastAPI, HTTPException, Request, Response
from pydantic import BaseModel

from bench.fixed_worker import make_bench_engine
from settings import get_settings
from ttsq.domain.audio import encode_audio
from ttsq.domain.jobs import DEFAULT_SAMPLING_SEED
from ttsq.domain.voices import BUILTIN_VOICES
from ttsq.inference.base import SynthesisRequest, synthesize

if TYPE_CHECKING:
    from ttsq.inference.base import Engine


class BaselineRequest(BaseModel):
    """The subset of ttsq's submit body the benchmark sends: the same JSON goes to both."""

    text: str
    voice: str | None = None
    seed: int | None = None
    format: str = "wav"


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Load and warm the engine before serving, as ttsq's worker does before it claims."""
    engine = make_bench_engine(get_settings())
    engine.load()
    engine.warm_up()
    app.state.engine = engine
    app.state.speakers = {}
    yield
    engine.release_memory()


app = FastAPI(lifespan=lifespan)


@app.post("/tts")
async def tts(body: BaselineRequest, request: Request) -> Response:
    """Synthesise in the handler, blocking the event loop, like upstream's example."""
    engine: Engine = request.app.state.engine
    speakers: dict[int, str] = request.app.state.speakers
    if body.voice is not None and body.voice not in BUILTIN_VOICES:
        raise HTTPException(422, f"unknown voice {body.voice!r}")
    speaker_seed = BUILTIN_VOICES[body.voice] if body.voice is not None else (body.seed or 0)
    if speaker_seed not in speakers:
        speakers[speaker_seed] = engine.speaker_from_seed(speaker_seed)
    seed = body.seed if body.seed is not None else DEFAULT_SAMPLING_SEED
    samples = synthesize(engine, SynthesisRequest(text=body.text, speaker=speakers[speaker_seed], seed=seed))
    return Response(encode_audio(samples, "wav"), media_type="audio/wav")


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}
