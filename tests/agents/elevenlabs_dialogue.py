"""The ``elevenlabs`` SDK's ``text_to_dialogue``, unmodified but for its base URL and key, run in the frameworks'
virtual environment (var/agents-venv) by tests/e2e/test_dialogue.py.

    var/agents-venv/bin/python tests/agents/elevenlabs_dialogue.py BASE_URL KEY OUT_DIR VOICE:TEXT...

Calls ``text_to_dialogue.convert`` with ``output_format="pcm_24000"`` (written to OUT_DIR/convert.pcm), ``.stream``
with the same (OUT_DIR/stream.pcm), ``convert`` with no format (ElevenLabs' default, mp3: OUT_DIR/default.mp3) and
``convert`` with ``ulaw_8000`` (OUT_DIR/ulaw.raw), each with ``seed=7``; prints one JSON line with each call's byte
count or error. ``ElevenLabs(base_url=...)`` joins ``/v1/...`` itself, so the base URL has no ``/v1``. This file
imports only the SDK (never the ttsq package): it stands for an application's process.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def main(base_url: str, key: str, out: Path, pairs: list[str]) -> int:
    from elevenlabs import DialogueInput
    from elevenlabs.client import ElevenLabs

    client = ElevenLabs(base_url=base_url, api_key=key)
    inputs = [DialogueInput(voice_id=voice, text=text) for voice, _, text in (pair.partition(":") for pair in pairs)]
    calls: dict[str, tuple[str, Callable[[], Iterator[bytes]]]] = {
        "convert": ("convert.pcm", lambda: client.text_to_dialogue.convert(inputs=inputs, output_format="pcm_24000", seed=7)),
        "stream": ("stream.pcm", lambda: client.text_to_dialogue.stream(inputs=inputs, output_format="pcm_24000", seed=7)),
        "default": ("default.mp3", lambda: client.text_to_dialogue.convert(inputs=inputs, seed=7)),
        "ulaw": ("ulaw.raw", lambda: client.text_to_dialogue.convert(inputs=inputs, output_format="ulaw_8000", seed=7)),
    }
    found: dict[str, Any] = {}
    for name, (file, call) in calls.items():
        try:
            audio = b"".join(call())
        except Exception as exc:  # noqa: BLE001  (report whatever the stock client raises)
            found[name] = {"error": f"{type(exc).__name__}: {str(exc)[:500]}"}
            continue
        (out / file).write_bytes(audio)
        found[name] = {"bytes": len(audio)}
    print(json.dumps(found))
    return 0 if all("error" not in value for value in found.values()) else 1


if __name__ == "__main__":
    if len(sys.argv) < 5:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4:]))
