"""The Python client and the ``python -m ttsq`` command line against a real service.

Real processes throughout (``tests/support/service.py``): redis-server, ``uvicorn app:app`` and
``python worker.py`` on the tiny random-weight checkpoint. One worker per test, since each start
costs seconds.
"""

from __future__ import annotations

import asyncio
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import soundfile as sf

from tests.support.redis_server import free_port
from tests.support.service import ROOT, Service
from ttsq.client.sdk import (
    AsyncTTSClient,
    Conflict,
    InvalidRequest,
    NotReady,
    ServiceBusy,
    TaskFailed,
    TaskNotFound,
    TaskStatus,
    TTSClient,
    TTSError,
    VoiceNotFound,
)

pytestmark = pytest.mark.e2e

SAMPLE_RATE = 24_000
UNKNOWN_TASK = "00000000-0000-4000-8000-000000000000.AAAAAAAAAAAAAAAA"


def decode(audio: bytes) -> tuple[int, int]:
    """(frames, sample rate) of encoded audio."""
    samples, rate = sf.read(io.BytesIO(audio))
    return len(samples), int(rate)


def test_sync_client_synthesizes_streams_and_reports_errors(service: Service, tmp_path: Path) -> None:
    service.start_worker("w", FAULT_MODE="raise", FAULT_MATCH="BOOM", RETRY_BASE_S="1")
    with TTSClient(service.api_url) as tts:
        seen: list[TaskStatus] = []
        two_chunks = "这是客户端发来的第一句话，它比较长，足够长了。第二句话也在这里，同样不短，还有更多内容。"
        audio = tts.synthesize(two_chunks, seed=11, format="flac", on_progress=seen.append)
        frames, rate = decode(audio)
        assert rate == SAMPLE_RATE and frames > 0, service.logs()
        assert seen and seen[-1].status == "done" and seen[-1].format == "flac"
        assert seen[-1].chunks_total is not None and seen[-1].chunks_total >= 2, "progress reports the chunks"
        assert seen[-1].chunks_done == seen[-1].chunks_total

        submitted = tts.submit("Streamed to a file, sentence by sentence. 再来一句。", seed=12)
        path = tmp_path / "streamed.wav"
        audio_bytes = tts.stream_to_file(submitted.task_id, path)
        streamed, streamed_rate = sf.read(path)
        frames, rate = decode(tts.result(submitted.task_id))
        assert streamed_rate == rate == SAMPLE_RATE
        assert len(streamed) == frames == audio_bytes // 2 > 0
        assert tts.stream_to_file(submitted.task_id, tmp_path / "raw.pcm", format="pcm") == audio_bytes
        assert (tmp_path / "raw.pcm").read_bytes() == path.read_bytes()[-audio_bytes:]

        failing = tts.submit("This one goes BOOM.", seed=13)
        with pytest.raises(TaskFailed, match="injected fault"):
            tts.stream_to_file(failing.task_id, tmp_path / "failing.wav")
        with pytest.raises(TaskFailed, match="injected fault") as failed:
            tts.wait(failing.task_id, poll_s=0.2)
        assert failed.value.status is not None and failed.value.status.attempts == failed.value.status.max_attempts
        with pytest.raises(TaskFailed):
            tts.result(failing.task_id)

        with pytest.raises(InvalidRequest) as invalid:
            tts.submit("Too fast.", speed=12)
        assert invalid.value.fields == ["speed"] and str(invalid.value).startswith("speed: ")
        with pytest.raises(TaskNotFound):
            tts.status(UNKNOWN_TASK)
        with pytest.raises(TaskNotFound):
            tts.result(UNKNOWN_TASK)


async def test_async_client_waits_with_progress_and_backs_off_when_busy(service: Service) -> None:
    busy_url = service.start_api("busy-api", MAX_QUEUE_DEPTH="1", RETRY_AFTER_S="1")
    async with AsyncTTSClient(service.api_url) as tts:
        queued = await tts.submit("Queued before any worker exists.", voice="zh_female", format="ogg")
        assert queued.status == "queued" and queued.queue_position == 0 and not queued.cached
        with pytest.raises(NotReady) as not_ready:
            await tts.result(queued.task_id)
        assert not_ready.value.status is not None and not_ready.value.status.status == "queued"

        async with AsyncTTSClient(busy_url, retries=1, max_retry_wait_s=0.1) as busy:
            with pytest.raises(ServiceBusy) as full:
                await busy.submit("The queue is full.", seed=21)
        assert full.value.status_code == 429 and full.value.retry_after_s == 1.0

        await asyncio.to_thread(service.start_worker, "w")
        seen: list[str] = []

        async def on_progress(status: TaskStatus) -> None:
            seen.append(status.status)

        final = await tts.wait(queued.task_id, poll_s=0.2, on_progress=on_progress)
        assert final.status == "done" and final.voice == "zh_female", service.logs()
        assert seen[-1] == "done" and set(seen) <= {"queued", "running", "done"}
        frames, rate = decode(await tts.result(queued.task_id))
        assert rate == SAMPLE_RATE and frames > 0

        again = await tts.synthesize("Queued before any worker exists.", voice="zh_female", format="ogg")
        assert decode(again) == (frames, rate)

        created = await tts.create_voice("narrator", seed=1234)
        assert (created.name, created.kind, created.seed, created.builtin) == ("narrator", "seed", 1234, False)
        voices = {voice.name: voice for voice in await tts.voices()}
        assert voices["narrator"] == created and voices["zh_female"].builtin
        with pytest.raises(Conflict):
            await tts.create_voice("narrator", seed=1)
        with pytest.raises(InvalidRequest) as invalid:
            await tts.create_voice("bad name!", seed=1)
        assert invalid.value.fields == ["name"]
        with pytest.raises(Conflict):
            await tts.delete_voice("zh_female")
        await tts.delete_voice("narrator")
        with pytest.raises(VoiceNotFound):
            await tts.delete_voice("narrator")


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ttsq", *args],
        cwd=ROOT,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_says_into_files_and_explains_bad_input(service: Service, tmp_path: Path) -> None:
    url = service.api_url
    bad = run_cli("say", "Too slow.", "--speed", "0", "-o", str(tmp_path / "x.wav"), "--url", url)
    assert bad.returncode == 2 and "speed:" in bad.stderr, bad.stderr
    unknown_voice = run_cli("say", "Who?", "--voice", "nobody", "--url", url)
    assert unknown_voice.returncode == 2 and "voice:" in unknown_voice.stderr and "zh_female" in unknown_voice.stderr

    service.start_worker("w")
    mp3 = tmp_path / "hello.mp3"
    said = run_cli("say", "你好，欢迎使用 ttsq。", "--voice", "zh_female", "-o", str(mp3), "--url", url, "--progress")
    assert said.returncode == 0, said.stderr + service.logs()
    assert f"output {mp3}" in said.stdout and "seed   42" in said.stdout
    task_id = said.stdout.split()[1]
    samples, rate = sf.read(mp3)
    assert rate == SAMPLE_RATE and len(samples) > 0

    streamed = tmp_path / "streamed.wav"
    said = run_cli("say", "Streamed by the command line.", "--seed", "31", "-o", str(streamed), "--stream", TTSQ_URL=url)
    assert said.returncode == 0, said.stderr + service.logs()
    assert sf.info(str(streamed)).samplerate == SAMPLE_RATE and sf.info(str(streamed)).frames > 0

    book = tmp_path / "book.md"
    book.write_text("# A short book\n\nIts first paragraph is here.\n\n- an item\n- another item\n", "utf-8")
    read = tmp_path / "book.wav"
    said = run_cli("say", "--file", str(book), "--document", "--markdown", "-o", str(read), TTSQ_URL=url)
    assert said.returncode == 0, said.stderr + service.logs()
    assert sf.info(str(read)).samplerate == SAMPLE_RATE and sf.info(str(read)).frames > 0
    document = run_cli("status", said.stdout.split()[1], TTSQ_URL=url)
    assert "done" in document.stdout, document.stdout
    both = run_cli("say", "text", "--file", str(book), TTSQ_URL=url)
    assert both.returncode == 2 and "not both" in both.stderr

    status = run_cli("status", task_id, TTSQ_URL=url)
    assert status.returncode == 0 and "done" in status.stdout
    added = run_cli("voice-add", "narrator", "--seed", "77", "--url", url)
    assert added.returncode == 0 and "narrator" in added.stdout, added.stderr
    voices = run_cli("voices", "--url", url)
    assert voices.returncode == 0 and "zh_female" in voices.stdout
    assert any(line.split() == ["narrator", "seed", "77"] for line in voices.stdout.splitlines()), voices.stdout
    assert run_cli("voice-rm", "narrator", "--url", url).returncode == 0
    builtin = run_cli("voice-rm", "zh_male", "--url", url)
    assert builtin.returncode == 2 and builtin.stderr.startswith("ttsq: "), builtin.stderr
    unreachable = run_cli("voices", "--url", f"http://127.0.0.1:{free_port()}")
    assert unreachable.returncode == 4 and "cannot reach" in unreachable.stderr


def test_the_client_and_the_command_line_send_an_api_key_where_keys_are_required(service: Service, tmp_path: Path) -> None:
    """Found by a tester: neither could send a key, so ``python -m ttsq say`` failed against any keyed deployment.
    ``AUTH=auto`` requires keys on a public bind: without one the command line says how to give it."""
    public = service.start_api("api-public", host="0.0.0.0")
    created = subprocess.run(
        [sys.executable, "-m", "ttsq", "keys", "create", "--name", "cli", "--scopes", "tts"],
        cwd=ROOT, env=service.env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    key = created.stdout.splitlines()[0]

    anonymous = run_cli("voices", "--url", public)
    assert anonymous.returncode != 0 and "401" in anonymous.stderr and "TTSQ_API_KEY" in anonymous.stderr
    from_env = run_cli("voices", "--url", public, TTSQ_API_KEY=key)
    assert from_env.returncode == 0 and "zh_female" in from_env.stdout, from_env.stderr
    from_option = run_cli("voices", "--url", public, "--api-key", key)
    assert from_option.returncode == 0 and "zh_female" in from_option.stdout, from_option.stderr
    with TTSClient(public, api_key=key) as client:
        assert "zh_female" in {voice.name for voice in client.voices()}
    with TTSClient(public) as client, pytest.raises(TTSError) as refused:
        client.voices()
    assert refused.value.status_code == 401
