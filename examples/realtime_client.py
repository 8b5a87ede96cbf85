"""Speak text into a ttsq realtime session a word at a time, as an LLM writes it, and save the audio as it comes.

    python examples/realtime_client.py ws://127.0.0.1:8000 "Hello there. This is spoken while it is written." out.wav

Prints when the first audio came and each segment's timing. Needs only ``websockets`` (installed with uvicorn).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import wave

from websockets.sync.client import connect


def main(url: str, text: str, path: str) -> None:
    with connect(f"{url}/v1/tts/realtime") as ws, wave.open(path, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        ws.send(json.dumps({"type": "session.start", "voice": "zh_female", "seed": 7}))
        started = json.loads(ws.recv())
        out.setframerate(started["sample_rate"])
        began, first = time.perf_counter(), None

        def write() -> None:  # beside the reading below, as an LLM's tokens arrive
            for word in text.split():
                ws.send(json.dumps({"type": "text", "text": word + " "}))
                time.sleep(0.05)  # an LLM's pace
            ws.send(json.dumps({"type": "close"}))

        threading.Thread(target=write, daemon=True).start()
        for message in ws:
            if isinstance(message, bytes):
                first = first or time.perf_counter() - began
                out.writeframes(message)
            else:
                print(json.loads(message))
        print(f"first audio after {first:.3f} s; closed with {ws.close_code}")


if __name__ == "__main__":
    main(*sys.argv[1:4])
