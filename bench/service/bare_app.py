"""A bare FastAPI app for side-by-side comparisons: the ceiling of this machine's HTTP stack.

``POST /bare/submit`` answers a small JSON body like ttsq's submit; ``GET /bare/result`` returns
``BARE_AUDIO_BYTES`` bytes like a download. No Redis, no validation: nothing but FastAPI/uvicorn.
"""

from __future__ import annotations

import os

from fastapi import FastAPI, Response

app = FastAPI()
_AUDIO = b"\0" * int(os.environ.get("BARE_AUDIO_BYTES", "50000"))


@app.post("/bare/submit")
async def submit(body: dict[str, object]) -> dict[str, object]:
    return {"task_id": "bare", "status": "done", "cached": True, "seed": 1}


@app.get("/bare/result")
async def result() -> Response:
    return Response(_AUDIO, media_type="audio/wav")
