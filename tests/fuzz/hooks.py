"""The project's own schemathesis checks, loaded by the fuzzing CLI through ``SCHEMATHESIS_HOOKS``.

* :func:`no_internal_details`: no answer may carry a stack trace or a path inside this machine
  (docs/security.md's promise: an unexpected error is a sentence and a request id, the trace goes to the log).
* :func:`schema_valid_requests_are_served`: schemathesis's ``positive_data_acceptance`` (a request
  the schema calls valid must not be refused as invalid), except for the refusals no schema can
  state because they depend on the deployment's state, on what a text says once cleaned or on what a recording holds: a voice
  name (or style name) that is not registered, a speaker embedding that does not decode, a text with nothing left to
  speak or with a forbidden control token (or made too long, or stopped, by the pronunciation dictionary), a
  dictionary entry whose pattern does not compile or is longer than the deployment allows; and an integer
  written ``6.0``, which JSON Schema cannot tell from ``6`` but the API's strict types refuse. Every other
  400/422 to a schema-valid request still fails.
* :func:`deleted_resources_are_gone`: schemathesis's ``use_after_free`` (after a successful DELETE, reading
  the resource must answer 404), except for a task's status: ``DELETE /v1/tts/tasks/{id}`` cancels the task
  and keeps its record readable ("cancelled", or "running" until the worker notices) until ``RESULT_TTL_S``,
  as documented. A deleted voice must still be gone.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import schemathesis
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.specs.openapi.checks import positive_data_acceptance, use_after_free

ROOT = Path(__file__).resolve().parents[2]

_TRACE_MARKERS = [
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(r'File \\?"[^"]+?\\?", line \d+'),  # also as a JSON string, its quotes escaped
    re.compile(r"\b\w+(Error|Exception): .*\n\s+at "),
]
_PATH_MARKERS = sorted({str(ROOT), sys.prefix, sys.base_prefix, "site-packages", "/usr/lib/python3"}, key=len, reverse=True)

_TEXTUAL = ("application/json", "text/", "application/problem+json")


def _sent(case: Any) -> str:
    """Everything the request carried, to tell an echo of the input from a leak."""
    return json.dumps([case.body, case.path_parameters, case.query, case.headers], default=str, ensure_ascii=False)


def internal_details(text: str, sent: str) -> str | None:
    """What in ``text`` shows a stack trace or an internal path (None: nothing), unless ``sent`` (the request) holds it too."""
    for pattern in _TRACE_MARKERS:
        found = pattern.search(text)
        if found and found.group(0) not in sent:
            return f"a stack trace ({found.group(0)!r}); it belongs in the log"
    for marker in _PATH_MARKERS:
        if marker and marker in text and marker not in sent:
            return f"an internal path ({marker!r})"
    return None


@schemathesis.check
def no_internal_details(ctx: Any, response: Any, case: Any) -> bool | None:
    """No body or header may show a stack trace or an internal file path (unless the request itself sent that text)."""
    content_type = ",".join(response.headers.get("content-type", []))
    parts = [f"{name}: {value}" for name, values in response.headers.items() for value in values]
    if any(kind in content_type for kind in _TEXTUAL) or "event-stream" in content_type:
        parts.append(response.content.decode("utf-8", errors="replace"))
    found = internal_details("\n".join(parts), _sent(case))
    if found is not None:
        raise AssertionError(f"the answer shows {found}")
    return None


INTEGRAL_FLOAT = "integral float"
"""JSON Schema calls ``6.0`` an integer and cannot say otherwise; the API takes integers only as ``6`` (strict types)."""


_TEXT_REFUSALS = ("text is empty", "nothing", "control token", "pronunciation", "read aloud")
"""What a refusal of a text may say once it is cleaned (its words, the dictionary, its spoken length)."""
_VOICE_REFUSALS = ("unknown voice", "is not supported", "blend", "weight", "the same voice")
"""What a refusal of a voice name may say: whether it is registered, and what a blend names, are the registry's."""

SEMANTIC_REFUSALS: dict[str, tuple[str, ...]] = {
    "voice": _VOICE_REFUSALS,
    "style": ("unknown style",),
    "components": ("unknown voice", "blend", "the same voice"),
    "audio": ("audio", "recording", "not base64"),
    "transcript": ("transcript",),  # a recording's (and Cartesia's text, whose refusals say `transcript: ...`)
    "embedding": ("not a ChatTTS speaker embedding", "empty or truncated", "non-finite", "this model's speakers have"),
    "text": _TEXT_REFUSALS,
    "input": (*_TEXT_REFUSALS, "exactly one of", "not supported"),  # and Google's input: text, ssml, markup, …
    # A dialogue's lines (`lines.N.text`, the ElevenLabs route's `inputs.N.text`, a script): each text as cleaned, and
    # the whole as it reads aloud against MAX_DIALOGUE_CHARS; a script's shape is read by the server, not the schema.
    # (A line's own text, `lines.N.text`, is read as `text`; the dialogue's whole is refused as `lines` or `inputs`.)
    "lines": (*_TEXT_REFUSALS, "the limit is"),
    "inputs": (*_TEXT_REFUSALS, "the limit is"),
    "script": (*_TEXT_REFUSALS, "the limit is", "names no speaker", "has no lines"),
    # An SSML document: whether it is well-formed XML, what its elements and attributes are, the voices it names and
    # what it says once read are the reader's (its length as sent, MAX_SSML_CHARS, is the schema's maxLength).
    "ssml": ("ssml is not well-formed", "ssml must not", "ssml has ", "ssml nests", "line ", "the document's"),
    # Cartesia's and Google's routes: which voice is a ttsq voice, what a transcript says once cleaned, and which of the
    # formats their schemas allow ttsq makes are no schema's either (their refusals name the field by its path).
    "input.text": _TEXT_REFUSALS,
    "input.ssml": ("not supported",),
    "input.markup": ("not supported",),
    "input.multiSpeakerMarkup": ("not supported",),
    "input.prompt": ("not supported",),
    "voice.id": (*_VOICE_REFUSALS, "needs an id"),
    "voice.mode": ("embeddings are not ttsq's",),
    "voice.name": _VOICE_REFUSALS,
    "voice.customVoice": ("not ttsq's",),
    "voice.voiceClone": ("not ttsq's",),
    "audioConfig.audioEncoding": ("is not supported", "sampleRateHertz"),
    # A dictionary entry: whether a pattern compiles, what it matches and how long it may be (settings) are no schema's.
    "match": (
        "not a valid regular expression",
        "empty string",
        "zero characters",
        "repetition counts",
        "whitespace",
        "the limit is",
        "ran past its time limit",
    ),
    "replacement": ("refers to a group", "control token", "the limit is"),
    # The rates a format is made at depend on the format asked for beside it (opus has fewer): the schema lists every
    # rate some format takes.
    "sample_rate": ("is not supported", "have no sample rate"),
    # A sample_rate alone converts the stored file in its own format, which only the task knows (ogg has none to keep).
    "format": ("name the format to convert it to",),
    # ElevenLabs' names (and Cartesia's output_format object): the schema states their shape; which rate and bit rate
    # each encoding is made at is ttsq's.
    "output_format": ("is not supported", "take a bit rate", "cannot be made", "has no bit rate", "WAV container"),
    # A dialogue's speakers' voices: whether `voices` names every speaker of the lines is no schema's (a speaker's own
    # voice, `voices.<speaker>`, is read as `voice`).
    "voices": (*_VOICE_REFUSALS, "every speaker needs one", "no voice for"),
    INTEGRAL_FLOAT: (INTEGRAL_FLOAT,),
}
"""Field → what a refusal of a schema-valid value may say: it depends on the registry, or on the text once cleaned;
or on what a recording holds once decoded (length, silence: a reference voice's recording), or on the voices a blend names."""


def _reasons(body: Any) -> list[tuple[str, str]] | None:
    """(field, message) of each problem named by a native 422 or an OpenAI-shaped 400, or None if it is neither."""
    if isinstance(body, dict) and isinstance(body.get("detail"), list):
        reasons = []
        for error in body["detail"]:
            if not isinstance(error, dict) or not error.get("loc"):
                return None
            value = error.get("input")
            if error.get("type") == "int_type" and isinstance(value, float) and value.is_integer():
                reasons.append((INTEGRAL_FLOAT, INTEGRAL_FLOAT))
                continue
            reasons.append((_field_name(str(error["loc"][-1])), str(error.get("msg", ""))))
        return reasons
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and body["error"].get("details"):  # Google's
        violations = [v for d in body["error"]["details"] if isinstance(d, dict) for v in d.get("fieldViolations", [])]
        return [
            (INTEGRAL_FLOAT, INTEGRAL_FLOAT)  # the strict-integer refusal, in Google's shape
            if _OPENAI_INTEGRAL_FLOAT.search(str(v.get("description", "")))
            else (str(v.get("field")), str(v.get("description", "")))
            for v in violations
        ] or None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        message = str(body["error"].get("message", ""))
        if _OPENAI_INTEGRAL_FLOAT.search(message):  # the same strict-integer refusal, in OpenAI's shape
            return [(INTEGRAL_FLOAT, INTEGRAL_FLOAT)]
        return [(str(body["error"].get("param")), message)]
    if isinstance(body, dict) and "error_code" in body and body.get("param"):  # Cartesia's, with ttsq's param
        return [(str(body["param"]), str(body.get("message", "")))]
    return None


def _field_name(place: str) -> str:
    """The field a dotted place in a body is (a dialogue's ``lines.0.style``, ``inputs.0.text``: its last name), a
    speaker's voice (``voices.Bob``) as ``voice``; a plain field name as it is."""
    head, dot, _ = place.partition(".")
    if not dot:
        return place
    return "voice" if head == "voices" else place.rsplit(".", 1)[-1]


_OPENAI_INTEGRAL_FLOAT = re.compile(r"expected an integer .*, got the number -?\d+\.0$")
"""An OpenAI-shaped 400 for an integer written with a fraction of zero (``ttsq.api.errors`` words it so)."""


def is_semantic_refusal(status: int, body: Any) -> bool:
    """Whether an answer refuses a request only for reasons the schema cannot state (see :data:`SEMANTIC_REFUSALS`)."""
    if status not in (400, 422):
        return False
    reasons = _reasons(body)
    return bool(reasons) and all(any(words in message for words in _refusals(field)) for field, message in reasons or ())


def _refusals(field: str) -> tuple[str, ...]:
    """What a refusal of ``field`` may say: its own entry, else its dotted path's first or last part's (``voices.Alice``
    is a voice, ``inputs.0.text`` a text)."""
    for name in (field, field.split(".")[0], field.split(".")[-1]):
        if name in SEMANTIC_REFUSALS:
            return SEMANTIC_REFUSALS[name]
    return ()


@schemathesis.check
def schema_valid_requests_are_served(ctx: Any, response: Any, case: Any) -> bool | None:
    """``positive_data_acceptance``, less the refusals listed in :data:`SEMANTIC_REFUSALS`."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except RejectedPositiveData:
        try:
            body = json.loads(response.content)
        except ValueError:
            raise
        if is_semantic_refusal(response.status_code, body):
            return None
        raise


CANCELLED_NOT_DELETED = frozenset({"GET /v1/tts/tasks/{task_id}"})
"""Reads that still answer 200 after a successful DELETE of the same path, by design: that DELETE is a cancel."""


def is_cancel_read(label: str) -> bool:
    """Whether an operation reads what a DELETE cancels rather than deletes (see :data:`CANCELLED_NOT_DELETED`)."""
    return label in CANCELLED_NOT_DELETED


@schemathesis.check
def deleted_resources_are_gone(ctx: Any, response: Any, case: Any) -> bool | None:
    """``use_after_free``, less the status of a cancelled task (see :data:`CANCELLED_NOT_DELETED`)."""
    if is_cancel_read(case.operation.label):
        return None
    return use_after_free(ctx, response, case)
