"""The ttsq command line: ``python -m ttsq say "你好" --voice zh_female -o hello.mp3``.

Commands: ``say`` (synthesise into a file), ``status TASK_ID``, ``voices``, ``voice-add NAME``,
``voice-rm NAME``. The service's URL comes from ``--url``, else ``TTSQ_URL``, else
``http://127.0.0.1:8000``.

Exit codes: 0 ok, 1 other error (e.g. a timeout), 2 bad input (the server's message is printed),
3 the task failed, 4 the service is busy or unreachable.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import get_args

from tqdm import tqdm

from ttsq.client.sdk import (
    AudioFormat,
    Conflict,
    ConnectionFailed,
    InvalidRequest,
    NotFound,
    ServiceBusy,
    StreamFormat,
    TaskFailed,
    TaskStatus,
    TTSClient,
    TTSError,
)

DEFAULT_URL = "http://127.0.0.1:8000"
FORMATS: dict[str, AudioFormat] = {name: name for name in get_args(AudioFormat)}
PCM_BYTES_PER_S = 24_000 * 2
"""PCM16 mono at 24 kHz, to show streamed progress in seconds of audio."""

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNAVAILABLE = 0, 1, 2, 3, 4


class UsageError(Exception):
    """Bad command-line input found after parsing (exit 2)."""


class Progress:
    """A tqdm bar on stderr: the queue position while queued, then chunks done/total while running."""

    def __init__(self, enabled: bool) -> None:
        self.bar = tqdm(total=None, disable=not enabled, file=sys.stderr, unit="chunk", bar_format="{desc} [{elapsed}]")

    def __call__(self, status: TaskStatus) -> None:
        if status.status == "queued" and status.retry_at is not None:
            description = f"retrying (attempt {status.attempts + 1}/{status.max_attempts})"
        elif status.status == "queued":
            ahead = "?" if status.queue_position is None else status.queue_position
            description = f"queued, {ahead} ahead"
        else:
            description = "synthesising" if status.status == "running" else status.status
        self.bar.set_description_str(description, refresh=False)
        if status.chunks_total:
            if self.bar.total != status.chunks_total:
                self.bar.bar_format = "{desc}: {bar} {n_fmt}/{total_fmt} chunks [{elapsed}]"
                self.bar.reset(total=status.chunks_total)
            self.bar.n = status.chunks_done or 0
        self.bar.refresh()

    def close(self) -> None:
        self.bar.close()


def output_format(output: Path | None, requested: str | None) -> AudioFormat:
    """``--format`` if given, else the output file's extension, else wav."""
    suffix = output.suffix.lower().lstrip(".") if output is not None else ""
    if requested is not None:
        if suffix in FORMATS and suffix != requested:
            print(f"ttsq: warning: writing {requested} audio to {output}", file=sys.stderr)
        return FORMATS[requested]
    if not suffix:
        return "wav"
    if suffix not in FORMATS:
        raise UsageError(f"cannot tell the audio format from {output}; use .wav .mp3 .ogg .flac .opus .pcm or pass --format")
    return FORMATS[suffix]


def show_progress(forced: bool | None) -> bool:
    return forced if forced is not None else sys.stderr.isatty()


def cmd_say(client: TTSClient, args: argparse.Namespace) -> int:
    fmt = output_format(args.output, args.format)
    if args.stream and fmt not in ("wav", "pcm"):
        raise UsageError(f"--stream writes wav or pcm only, not {fmt}")
    if (args.text is None) == (args.file is None):
        raise UsageError("give the text to say, or --file PATH (- for standard input), not both")
    text = args.text if args.file is None else (sys.stdin.read() if str(args.file) == "-" else args.file.read_text("utf-8"))
    submitted = client.submit(
        text,
        document=True if args.document else None,
        text_format="markdown" if args.markdown else None,
        voice=args.voice,
        seed=args.seed,
        speed=args.speed,
        format=fmt,
        temperature=args.temperature,
        top_p=args.top_p,
        top_k=args.top_k,
        refine_text=args.refine,
        priority=args.priority,
        consistent_voice=True if args.consistent_voice else None,
        listen=True if args.stream else None,  # the file is written as the audio is made
    )
    print(f"task   {submitted.task_id}\nseed   {submitted.seed}", flush=True)
    if submitted.notice:
        print(f"note: {submitted.notice}", file=sys.stderr)
    output: Path = args.output or Path(f"{submitted.task_id.split('.')[0]}.{fmt}")
    if args.stream:
        bar = tqdm(
            disable=not show_progress(args.progress),
            file=sys.stderr,
            unit="s",
            desc="streaming",
            bar_format="{desc} {n:.1f} s of audio [{elapsed}]",
        )
        try:
            stream_format: StreamFormat = "pcm" if fmt == "pcm" else "wav"
            client.stream_to_file(
                submitted.task_id, output, format=stream_format, on_data=lambda n: bar.update(n / PCM_BYTES_PER_S)
            )
        finally:
            bar.close()
    else:
        if submitted.status != "done":
            progress = Progress(show_progress(args.progress))
            try:
                client.wait(submitted.task_id, timeout_s=args.timeout, on_progress=progress)
            finally:
                progress.close()
        output.write_bytes(client.result(submitted.task_id))
    print(f"output {output}")
    return EXIT_OK


def cmd_status(client: TTSClient, args: argparse.Namespace) -> int:
    status = client.status(args.task_id)
    for name, value in vars(status).items():
        if isinstance(value, float) and name.endswith("_at"):
            value = datetime.fromtimestamp(value).isoformat(sep=" ", timespec="seconds")
        if value is not None:
            print(f"{name:<17}{value}")
    return EXIT_OK


def cmd_voices(client: TTSClient, args: argparse.Namespace) -> int:
    voices = client.voices()
    width = max([len("NAME"), *(len(voice.name) for voice in voices)])
    print(f"{'NAME':<{width}}  {'KIND':<9}  SEED")
    for voice in voices:
        print(f"{voice.name:<{width}}  {voice.kind:<9}  {'' if voice.seed is None else voice.seed}")
    return EXIT_OK


def cmd_voice_add(client: TTSClient, args: argparse.Namespace) -> int:
    voice = client.create_voice(args.name, seed=args.seed, embedding=args.embedding, shared=args.shared)
    print(f"added voice {voice.name} ({voice.kind}{'' if voice.seed is None else f', seed {voice.seed}'})")
    return EXIT_OK


def cmd_voice_rm(client: TTSClient, args: argparse.Namespace) -> int:
    client.delete_voice(args.name)
    print(f"removed voice {args.name}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--url", default=os.environ.get("TTSQ_URL", DEFAULT_URL), help="the ttsq API (default: $TTSQ_URL or %(default)s)"
    )
    common.add_argument(
        "--api-key",
        default=os.environ.get("TTSQ_API_KEY"),
        help="the API key, for a deployment that requires keys (default: $TTSQ_API_KEY; prefer the variable: "
        "a command line is visible to other users of the machine)",
    )
    parser = argparse.ArgumentParser(prog="python -m ttsq", description="Talk to a ttsq text-to-speech service.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    say = commands.add_parser("say", parents=[common], help="synthesise a text into an audio file")
    say.add_argument("text", nargs="?", help="what to say (or --file)")
    say.add_argument("--file", type=Path, help="read the text from this file (- for standard input)")
    say.add_argument(
        "--document", action="store_true", help="a whole document, up to the server's MAX_DOCUMENT_CHARS (docs/documents.md)"
    )
    say.add_argument("--markdown", action="store_true", help="the text is Markdown, read as a person reads it (docs/markdown.md)")
    say.add_argument("-o", "--output", type=Path, help="output file; its extension picks the format (default: TASK.wav)")
    say.add_argument("--voice", help="a registered voice, e.g. zh_female")
    say.add_argument("--seed", type=int, help="sampling seed; without --voice it also picks the speaker")
    say.add_argument("--speed", type=int, help="1 (slow) to 9 (fast); default 5")
    say.add_argument("--format", choices=list(FORMATS), help="audio format (default: from the output's extension, else wav)")
    say.add_argument("--temperature", type=float)
    say.add_argument("--top-p", type=float)
    say.add_argument("--top-k", type=int)
    say.add_argument("--refine", action="store_true", help="let ChatTTS add oral prosody tokens first (slower)")
    say.add_argument(
        "--priority", choices=["interactive", "batch"], help="queue lane: batch yields to interactive work (default: the key's)"
    )
    say.add_argument(
        "--consistent-voice", action="store_true", help="one voice across a long text (the first chunk's audio conditions the rest)"
    )
    say.add_argument("--stream", action="store_true", help="write the file while the audio is produced (wav or pcm only)")
    say.add_argument("--timeout", type=float, help="give up waiting after this many seconds (not with --stream)")
    say.add_argument(
        "--progress", action=argparse.BooleanOptionalAction, help="show a progress bar (default: when stderr is a terminal)"
    )
    say.set_defaults(handler=cmd_say)

    status = commands.add_parser("status", parents=[common], help="show a task's status")
    status.add_argument("task_id")
    status.set_defaults(handler=cmd_status)

    voices = commands.add_parser("voices", parents=[common], help="list the voices")
    voices.set_defaults(handler=cmd_voices)

    add = commands.add_parser("voice-add", parents=[common], help="register a voice")
    add.add_argument("name")
    source = add.add_mutually_exclusive_group(required=True)
    source.add_argument("--seed", type=int, help="a speaker seed")
    source.add_argument("--embedding", help="a ChatTTS speaker embedding string")
    add.add_argument("--shared", action="store_true", help="a global voice, every tenant's (default: the key's tenant's)")
    add.set_defaults(handler=cmd_voice_add)

    remove = commands.add_parser("voice-rm", parents=[common], help="delete a registered voice")
    remove.add_argument("name")
    remove.set_defaults(handler=cmd_voice_rm)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[TTSClient, argparse.Namespace], int] = args.handler
    try:
        with TTSClient(args.url, api_key=args.api_key) as client:
            return handler(client, args)
    except (UsageError, InvalidRequest, NotFound, Conflict) as exc:
        return fail(EXIT_BAD_INPUT, f"invalid request: {exc}" if isinstance(exc, InvalidRequest) else str(exc))
    except TaskFailed as exc:
        return fail(EXIT_FAILED, str(exc))
    except ServiceBusy as exc:
        return fail(EXIT_UNAVAILABLE, f"service unavailable: {exc}")
    except ConnectionFailed as exc:
        return fail(EXIT_UNAVAILABLE, str(exc))
    except TimeoutError as exc:
        return fail(EXIT_ERROR, f"{exc}; check on it with `python -m ttsq status TASK_ID`")
    except TTSError as exc:
        if exc.status_code == 401 and not args.api_key:
            return fail(EXIT_ERROR, f"{exc} (give the key as $TTSQ_API_KEY or --api-key)")
        return fail(EXIT_ERROR, str(exc))
    except OSError as exc:
        return fail(EXIT_ERROR, str(exc))
    except KeyboardInterrupt:
        return 130


def fail(code: int, message: str) -> int:
    print(f"ttsq: {message}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
