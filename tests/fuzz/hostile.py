"""The hostile-JSON corpus: what schemathesis never sends, sent to every route of a running API.

schemathesis generates valid JSON from the schema, and mutates it within JSON. An attacker writes bytes:
``NaN`` and ``Infinity`` (which Python's reader accepts), ``1e400`` (infinite once read), numbers thousands of
digits long, lone surrogates (``"\\ud800"``) in any string, NUL, nesting thousands deep, duplicate keys, bytes
that are not UTF-8, and bodies labelled with another ``Content-Type``. Each must get a 4xx that names the field
(or ``body``, or ``Content-Type``), never a 5xx, and nothing may be logged above WARNING (the caller checks the
logs: :func:`log_lines_above_warning`).

Every operation in the API's ``/openapi.json`` is covered: an operation with a request body gets each hostile
value in each of its fields, the whole-body cases and the content types; every operation gets hostile path and
query parameters (raw percent-encoded bytes among them) and a hostile body it may ignore. :func:`cases` is the
fixed corpus (``make test`` sends it all); :func:`random_cases` draws combinations — several hostile values at
once, nested at random depths, beside unknown fields — ``make fuzz`` sends many.

:func:`abuse_cases` are the inputs that cost the API work rather than break its parser: recordings whose
header claims 1 Hz to 10 MHz, 64 channels or an hour of FLAC, truncated files, a form over
``MAX_VOICE_BODY_BYTES``, dictionary regexes that compile to gigabytes or match nothing, and texts of digits that
read aloud for minutes. Each must be refused with a 4xx naming its field. :func:`unsent_bodies` declares bodies it
never finishes sending, on raw sockets (a live server only): each must be answered (401, 403 or 408), never held.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import re
import socket
from collections import Counter
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import httpx

VALUES: dict[str, str] = {
    "NaN": "NaN",
    "Infinity": "Infinity",
    "-Infinity": "-Infinity",
    "1e400": "1e400",
    "-1e400": "-1e400",
    "an integer of 5000 digits": "1" * 5000,
    "a fraction of 5000 digits": "0." + "1" * 5000,
    "an exponent of 70 digits": "1e" + "9" * 70,
    "a lone high surrogate": '"\\ud800"',
    "a lone low surrogate inside text": '"hello \\udfff world"',
    "a high surrogate at the end": '"hello\\udbff"',
    "a reversed surrogate pair": '"\\udc00\\ud800"',
    "NUL": '"\\u0000"',
    "NUL inside text": '"hi\\u0000there"',
    "an array nested 40 deep": "[" * 40 + "]" * 40,
    "an array nested 20000 deep": "[" * 20_000 + "]" * 20_000,
    "an object nested 40 deep": '{"a":' * 40 + "1" + "}" * 40,
    "an array of 2000 numbers": "[" + "0," * 1999 + "0]",
    "an object of 1500 keys": "{" + ",".join(f'"k{index}":null' for index in range(1500)) + "}",
    "NaN inside an array": "[1, NaN]",
    "a lone surrogate inside an object": '{"x": "\\ud800"}',
    "a lone surrogate as a key": '{"\\ud800": 1}',
    "a duplicate key inside an object": '{"a": 1, "a": 2}',
}
"""Hostile JSON values, as the raw text of a body (most are not JSON; each is something Python's reader took)."""

BASE_BODIES: dict[tuple[str, str], dict[str, Any]] = {
    ("post", "/v1/tts/submit"): {"text": "Hostile input.", "voice": "zh_female", "format": "wav", "seed": 1, "temperature": 0.3},
    ("post", "/v1/voices"): {"name": "hostile", "seed": 1},
    ("post", "/v1/audio/speech"): {"model": "tts-1", "input": "Hostile input.", "voice": "alloy", "speed": 1.0},
    ("post", "/v1/voices/draw"): {"n": 1, "language": "en"},
    ("post", "/v1/admin/pronunciation"): {"kind": "word", "match": "hostile", "replacement": "friendly", "scope": "global"},
    ("post", "/v1/tts/refine"): {"text": "Hostile input.", "oral": 2, "laugh": 0, "break": 4, "seed": 1, "style": "chat"},
    ("post", "/v1/styles"): {"name": "hostile", "speed": 4, "oral": 2, "break": 5, "temperature": 0.3},
    **{
        ("post", f"/v1/text-to-speech/{{voice_id}}{tail}"): {"text": "Hostile input.", "seed": 1, "voice_settings": {"speed": 1.0}}
        for tail in ("", "/stream", "/with-timestamps", "/stream/with-timestamps")
    },
    ("post", "/v1/tts/dialogue"): {"lines": [{"speaker": "A", "text": "Hostile."}], "voices": {"A": "zh_female"}, "gap_ms": 250},
    ("post", "/v1/text-to-dialogue"): {"inputs": [{"text": "Hostile input.", "voice_id": "zh_female"}], "seed": 1},
    ("post", "/v1/text-to-dialogue/stream"): {"inputs": [{"text": "Hostile input.", "voice_id": "zh_female"}], "seed": 1},
    ("post", "/tts/bytes"): {
        "model_id": "sonic-3",
        "transcript": "Hostile input.",
        "voice": {"mode": "id", "id": "alloy"},
        "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": 24000},
    },
    ("post", "/v1/text:synthesize"): {
        "input": {"text": "Hostile input."},
        "voice": {"name": "alloy"},
        "audioConfig": {"audioEncoding": "LINEAR16"},
    },
}
"""A valid body of every operation that takes one; an operation with a body missing here fails the run."""

PARAMETER_VALUES = [
    "%ED%A0%80",  # a lone surrogate, as UTF-8 would write it (which it never may)
    "%00",
    "a%00b",
    "%FF%FE",
    "%C0%80",  # an overlong NUL
    "NaN",
    "Infinity",
    "-1e400",
    "9" * 2000,
    "%5B" * 500,
]
"""Hostile path and query values, already percent-encoded (sent as they are)."""

CONTENT_TYPES = [
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/xml",
    "application/json; charset=utf-16",
    None,
]
"""A valid JSON body sent under these must be refused (415): only ``application/json`` in UTF-8 is read."""


class Case(NamedTuple):
    """One request of the corpus, and what its answer must name when it refuses the request."""

    name: str
    """What the case sends, in words (for the report)."""
    method: str
    path: str
    """The operation's method (lower case, as in the schema) and its path, parameters filled in (percent-encoded)."""
    content: bytes | None = None
    content_type: str | None = "application/json"
    """The body, sent as it is (None: no body), and its ``Content-Type`` (None: the header is left out)."""
    query: str = ""
    names: tuple[str, ...] = ()
    """The answer must name one of these (a field, ``body`` or ``Content-Type``); empty: any 4xx (or 2xx) will do."""
    must_refuse: bool = False
    """The request may not succeed: it must get a 4xx."""
    documented: frozenset[str] = frozenset()
    """The statuses the operation documents (its answer must be one of them)."""


def _body(fields: Iterable[tuple[str, str]]) -> bytes:
    """An object from (key, raw value text) pairs, written as sent: keys JSON-escaped, values as they are."""
    text = "{" + ",".join(f"{json.dumps(key)}:{value}" for key, value in fields) + "}"
    return text.encode("utf-8", "surrogatepass")


def _raw(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(key, json.dumps(value)) for key, value in body.items()]


def _printable(key: str) -> str:
    return key.encode("utf-8", "backslashreplace").decode("utf-8")


def _body_cases(method: str, path: str, base: dict[str, Any], forms: bool = False) -> list[Case]:
    """``forms``: the route takes a multipart form too, so JSON labelled as one is an unreadable form (``body``)."""
    fields = _raw(base)
    found: list[Case] = []
    for field_name in [*base, "unknown_field"]:
        for value_name, value in VALUES.items():
            changed = [(key, value if key == field_name else text) for key, text in fields]
            if field_name not in base:
                changed.append((field_name, value))
            found.append(Case(f"{value_name} in {field_name}", method, path, _body(changed), names=(field_name,), must_refuse=True))
    for key, _ in fields:
        twice = _body([*fields, (key, json.dumps(base[key]))])
        found.append(Case(f"{key} twice", method, path, twice, names=(key,), must_refuse=True))
    valid = _body(fields)
    whole = {
        "bytes that are not UTF-8": valid[:-1] + b',"x":"\xff\xfe"}',
        "UTF-16": json.dumps(base).encode("utf-16"),
        "a byte-order mark": b"\xef\xbb\xbf" + valid,
        "NaN alone": b"NaN",
        "a truncated object": valid[:-1],
        "an array for an object": b"[" + valid + b"]",
        "a lone surrogate as a key": _body([("\ud800", "1"), *fields]),
    }
    for name, content in whole.items():
        names = ("body", _printable("\ud800")) if "surrogate" in name else ("body",)
        found.append(Case(name, method, path, content, names=names, must_refuse=True))
    for content_type in CONTENT_TYPES:
        label = ("body",) if forms and content_type is not None and content_type.startswith("multipart/") else ("Content-Type",)
        found.append(Case(f"JSON as {content_type}", method, path, valid, content_type, names=label, must_refuse=True))
    return found


def _parameter_cases(method: str, path: str, parameters: list[dict[str, Any]]) -> list[Case]:
    found: list[Case] = []
    in_path = [p["name"] for p in parameters if p.get("in") == "path"]
    in_query = [p["name"] for p in parameters if p.get("in") == "query"]
    for value in PARAMETER_VALUES:
        filled = path
        for name in in_path:
            filled = filled.replace("{" + name + "}", value)
        if in_path:
            found.append(Case(f"path {value[:12]}", method, filled, content=None, content_type=None))
        for name in in_query:
            concrete = re.sub(r"\{[^}]+\}", "x", path)
            found.append(Case(f"query {name}={value[:12]}", method, concrete, None, None, f"{name}={value}", names=(name,)))
    # A hostile body to an operation that takes none: it is not read, and must not matter.
    concrete = re.sub(r"\{[^}]+\}", "x", path)
    found.append(Case("an unread hostile body", method, concrete, _body([("x", "NaN"), ("y", '"\\ud800"')])))
    return found


def operations(spec: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(method, path, operation) for every operation the schema documents."""
    methods = ("get", "post", "put", "patch", "delete")
    return [(m, path, op) for path, item in spec["paths"].items() for m, op in item.items() if m in methods]


def _documented(operation: dict[str, Any], found: list[Case]) -> list[Case]:
    statuses = frozenset(operation.get("responses", {}))
    return [case._replace(documented=statuses) for case in found]


def cases(spec: dict[str, Any]) -> list[Case]:
    """The fixed corpus for every operation in ``spec``."""
    found: list[Case] = []
    for method, path, operation in operations(spec):
        if "requestBody" in operation:
            if (method, path) not in BASE_BODIES:
                raise KeyError(f"{method.upper()} {path} takes a body: give it a valid one in BASE_BODIES")
            forms = "multipart/form-data" in operation["requestBody"].get("content", {})
            found += _documented(operation, _body_cases(method, path, BASE_BODIES[(method, path)], forms))
        found += _documented(operation, _parameter_cases(method, path, operation.get("parameters", [])))
    return found


def _multipart(fields: dict[str, str], files: dict[str, bytes], boundary: str = "hostile-boundary") -> tuple[bytes, str]:
    """A ``multipart/form-data`` body and its ``Content-Type``."""
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    for name, data in files.items():
        head = f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{name}.wav"\r\n'
        parts.append(head.encode() + b"Content-Type: audio/wav\r\n\r\n" + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


def abuse_cases(spec: dict[str, Any], max_voice_body_bytes: int = 8 * 2**20) -> list[Case]:
    """Inputs that cost work rather than break parsing, on the operations of ``spec`` that take them (see the module's
    docstring); each must be refused naming its field (a 413 for the oversize form)."""
    from tests.unit.domain.test_reference_audio import long_flac, wav

    documented = {(method, path): frozenset(op.get("responses", {})) for method, path, op in operations(spec)}
    found: list[Case] = []
    voices = ("post", "/v1/voices")
    if voices in documented:
        transcript = "今天天气很好，我们一起去公园散步吧。"
        recordings = {
            **{f"a WAV whose header says {rate} Hz": wav(rate, 120_000) for rate in (1, 100, 7_999, 192_001, 10_000_000)},
            "a WAV whose header says 64 channels": wav(16_000, 2_000, channels=64),
            "an hour of FLAC": long_flac(3_600),
            "a WAV cut inside its header": wav(16_000, 80_000)[:30],
            "a WAV claiming 18 hours": wav(16_000, 80_000, declared=2**31)[:40_000],
        }
        for name, audio in recordings.items():
            body = json.dumps({"name": "hostile_audio", "audio": base64.b64encode(audio).decode(), "transcript": transcript})
            found.append(Case(name, *voices, body.encode(), names=("audio",), must_refuse=True, documented=documented[voices]))
        ints = b"[" + b"0," * (4 * 2**20 - 2) + b"0]"  # 8 MiB: it once held the event loop 8 s, parsed and walked
        found.append(
            Case("an 8 MiB array of integers", *voices, ints, names=("body",), must_refuse=True, documented=documented[voices])
        )
        form, form_type = _multipart({"name": "big", "transcript": transcript}, {"audio": b"\0" * (max_voice_body_bytes + 1)})
        found.append(
            Case("a form over MAX_VOICE_BODY_BYTES", *voices, form, form_type, must_refuse=True, documented=documented[voices])
        )
    entries = ("post", "/v1/admin/pronunciation")
    if entries in documented:
        for pattern in ("a{100000000}", "(?:a{1000}){1000}", r"\b", "(?=x)", "(?<=x)", "x?", "(unclosed"):
            body = json.dumps({"kind": "regex", "match": pattern, "replacement": "y", "scope": "global"})
            found.append(
                Case(
                    f"the regex {pattern}",
                    *entries,
                    body.encode(),
                    names=("match",),
                    must_refuse=True,
                    documented=documented[entries],
                )
            )
    texts = {("post", "/v1/tts/submit"): "text", ("post", "/v1/audio/speech"): "input"}
    for (method, path), field_name in texts.items():
        if (method, path) in documented:
            digits = json.dumps({**BASE_BODIES[(method, path)], field_name: "9" * 4096}).encode()
            found.append(
                Case(
                    "4096 digits",
                    method,
                    path,
                    digits,
                    names=(field_name,),
                    must_refuse=True,
                    documented=documented[(method, path)],
                )
            )
    return found


@dataclass(frozen=True)
class Unsent:
    """A body declared in ``Content-Length`` and never finished: the answer's status (None: the connection closed
    without one) and whether the server closed the connection after it (rather than waiting for the rest)."""

    path: str
    status: int | None
    closed: bool


def unsent_bodies(host: str, port: int, key: str | None, *, declared: int = 60_000, wait_s: float = 120) -> list[Unsent]:
    """Declare a ``declared``-byte JSON body to every operation in :data:`BASE_BODIES`, send half of it, and wait for
    the server (blocking; ``wait_s`` only guards against a hang, the server must answer by ``BODY_READ_TIMEOUT_S``).

    Every operation on its own connection, all at once: each answer comes only when the server's read timeout ends,
    so one after another they would wait that long for every operation, and together they wait it once (a client
    holding many such connections is also what the timeout is for). In :data:`BASE_BODIES`'s order."""
    paths = [path for _, path in BASE_BODIES]
    with ThreadPoolExecutor(max_workers=len(paths), thread_name_prefix="unsent-body") as pool:
        return list(pool.map(lambda path: _unsent_body(host, port, key, path, declared, wait_s), paths))


def _unsent_body(host: str, port: int, key: str | None, path: str, declared: int, wait_s: float) -> Unsent:
    """One body declared to ``path`` and half sent; what the server answered, and whether it closed the connection."""
    head = [f"POST {path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json", f"Content-Length: {declared}"]
    if key is not None:
        head.append(f"Authorization: Bearer {key}")
    with socket.create_connection((host, port), timeout=wait_s) as conn:
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + b'{"text":"' + b"x" * (declared // 2))
        received = b""
        try:
            while chunk := conn.recv(65536):
                received += chunk
            closed = True
        except TimeoutError:
            closed = False
    status = int(received.split(b" ", 2)[1]) if received.startswith(b"HTTP/1.1 ") else None
    return Unsent(path, status, closed)


def _nested(value: str, rng: random.Random) -> str:
    for _ in range(rng.randint(0, 3)):
        value = rng.choice([f"[{value}]", f'{{"k": {value}}}', f'[1, "ok", {value}]'])
    return value


def random_cases(spec: dict[str, Any], count: int, seed: int) -> list[Case]:
    """``count`` drawn cases per operation with a body: one to three hostile values at once, nested at random,
    in known or unknown fields, some beside a duplicated key."""
    rng = random.Random(seed)
    found: list[Case] = []
    for method, path, operation in operations(spec):
        if "requestBody" not in operation:
            continue
        base = BASE_BODIES[(method, path)]
        for index in range(count):
            fields = dict(_raw(base))
            hit = rng.sample([*base, "extra", "more"], rng.randint(1, 3))
            for key in hit:
                fields[key] = _nested(rng.choice(list(VALUES.values())), rng)
            pairs = list(fields.items())
            if rng.random() < 0.2:
                pairs.append((rng.choice(list(base)), json.dumps("again")))
                hit.append(pairs[-1][0])
            rng.shuffle(pairs)
            drawn = Case(f"draw {index}: {', '.join(hit)}", method, path, _body(pairs), names=tuple(hit), must_refuse=True)
            found += _documented(operation, [drawn])
    return found


@dataclass
class Outcome:
    """What the corpus got back: how many answers of each status, and every answer that broke a rule."""

    statuses: Counter[int] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    sent: int = 0
    dropped: int = 0
    """Requests whose connection the server closed without an answer."""

    @property
    def server_errors(self) -> int:
        """5xx answers and dropped connections."""
        return self.dropped + sum(count for status, count in self.statuses.items() if status >= 500)


def _named(answer: httpx.Response) -> set[str]:
    """Every field, parameter or header an error answer names."""
    try:
        body = answer.json()
    except ValueError:
        return set()
    names: set[str] = set()
    if isinstance(body, dict) and isinstance(body.get("detail"), list):
        for error in body["detail"]:
            names |= {str(part) for part in error.get("loc", [])}
    if isinstance(body, dict) and isinstance(body.get("detail"), str) and "Content-Type" in body["detail"]:
        names.add("Content-Type")
    if isinstance(body, dict) and isinstance(body.get("detail"), dict):  # ElevenLabs' {"detail": {"status", "message"}}
        names |= {"Content-Type"} if "Content-Type" in str(body["detail"].get("message", "")) else set()
    if isinstance(body, dict) and "error_code" in body:  # Cartesia's shape, with ttsq's param
        names |= _and_parents(str(body["param"])) if body.get("param") else set()
        names |= {"Content-Type"} if "Content-Type" in str(body.get("message", "")) else set()
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        for detail in error.get("details") or []:  # Google's shape: a BadRequest detail names each field
            for violation in detail.get("fieldViolations", []) if isinstance(detail, dict) else []:
                names |= _and_parents(str(violation.get("field", "")))
        if error.get("param"):
            names.add(str(error["param"]))
        message = str(error.get("message", ""))
        names |= {"Content-Type"} if "Content-Type" in message else set()
        names |= {"body"} if "body" in message else set()
    return names


def _and_parents(path: str) -> set[str]:
    """A dotted field path (``voice.id``, as Cartesia's and Google's routes name nested fields) and each field above it."""
    parts = path.split(".")
    return {".".join(parts[:end]) for end in range(1, len(parts) + 1)}


def judge(case: Case, answer: httpx.Response) -> str | None:
    """Why ``answer`` breaks the rules for ``case`` (None: it keeps them)."""
    status = answer.status_code
    if status >= 500:
        return f"{status}: {answer.text[:200]}"
    if case.must_refuse and not 400 <= status < 500:
        return f"{status}: the hostile request was not refused"
    if status in (401, 403):
        return f"{status}: the corpus must be sent with a valid admin key where keys are required, to reach every check"
    if case.documented and str(status) not in case.documented and f"{str(status)[0]}XX" not in case.documented:
        return f"{status} is not an answer the operation documents ({', '.join(sorted(case.documented))})"
    if case.names and status in (400, 415, 422) and not (set(case.names) & _named(answer)):
        return f"{status} names {sorted(_named(answer))}, not {list(case.names)}: {answer.text[:200]}"
    return None


async def send(client: httpx.AsyncClient, corpus: list[Case], *, key: str | None, concurrency: int = 4) -> Outcome:
    """Send every case of ``corpus`` (with ``key`` as a bearer token, when given) and judge each answer."""
    outcome = Outcome()
    slots = asyncio.Semaphore(concurrency)

    async def one(case: Case) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        if case.content_type is not None:
            headers["Content-Type"] = case.content_type
        url = case.path + (f"?{case.query}" if case.query else "")
        async with slots:  # the path and query are sent as written: httpx keeps their percent-escapes
            try:
                answer = await client.request(case.method.upper(), url, content=case.content, headers=headers)
            except httpx.TransportError as exc:  # the server dropped the connection: as bad as a 500
                outcome.sent += 1
                outcome.dropped += 1
                outcome.problems.append(f"{case.method.upper()} {case.path[:80]} [{case.name}] -> no answer: {exc!r}")
                return
        outcome.sent += 1
        outcome.statuses[answer.status_code] += 1
        problem = judge(case, answer)
        if problem is not None:
            outcome.problems.append(f"{case.method.upper()} {case.path[:80]} [{case.name}] -> {problem}")

    await asyncio.gather(*(one(case) for case in corpus))
    return outcome


LOG_LEVEL_ABOVE_WARNING = re.compile(r"\b(ERROR|CRITICAL)\b|Traceback \(most recent call last\)")


def log_lines_above_warning(log: str) -> list[str]:
    """Lines of a process's log (text format) logged above WARNING, or tracebacks."""
    return [line for line in log.splitlines() if LOG_LEVEL_ABOVE_WARNING.search(line)]
