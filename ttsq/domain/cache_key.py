"""The result-cache key: one hash of everything that changes the audio, and of who may share it.

The key covers the exact text the engine receives (already canonical: see
:func:`ttsq.domain.text.canonical_text`), the speaker identity, every sampling parameter, the output
format, a model identity, the caller's **sharing scope**, and the owner of a tenant's own voice. The scope is what keeps tenants
apart: the cache and single-flight (whose marker is named by the key) find only entries and jobs
of the same scope, so a caller can never test whether another scope synthesised a text. No scope
(``None``: one tenant, or callers without a key) leaves the key as it was before scopes existed.

The speaker is identified by what produces the embedding — a speaker seed on a given model — never
by a voice's *name*, so a voice re-created under the same name with a different speaker cannot hit
the old entry. The model identity comes from settings
(the API loads no model), and it also covers the synthesis settings that shape the audio.

The format in the key is the job's stored format (:data:`ttsq.domain.jobs.AudioFormat`, always at 24 kHz), the format of
the entry's bytes: a listener who asked for another format or rate (µ-law at 8 kHz, mp3 at 44.1 kHz) is answered from an
entry only through :func:`ttsq.domain.audio.stored_as`, which converts it unless it already is that format, so the
key needs no rate and no entry is ever sent as something it is not.

A tenant's own voice adds its owner (``params.voice_owner``): with ``CACHE_SCOPE=global`` the caller's scope is not in
the key, and two tenants' voices made the same way (one seed, or one recording) must still not share audio, so
that no tenant can learn from a cache hit what another synthesised with its voice. A global voice adds nothing.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from ttsq.domain.blends import BlendPart
from ttsq.domain.jobs import TTSParams
from ttsq.domain.segments import Segment, VoiceFields

KEY_VERSION = 1
"""Bumped whenever the meaning of a key changes, so old entries are never misread."""


def speaker_identity(params: VoiceFields) -> str:
    """What produces the speaker embedding: the embedding's own hash, or the seed that draws it; for a reference
    voice, the hash of its prompt and transcript (ChatTTS reads both); for a blend, its components and weights."""
    if params.speaker_blend is not None:
        return blend_identity(params.speaker_blend)
    if params.speaker_prompt is not None:
        material = json.dumps([params.speaker_prompt, params.prompt_text or ""], ensure_ascii=False)
        return "ref:" + hashlib.sha256(material.encode()).hexdigest()
    if params.speaker_embedding is not None:
        return "emb:" + hashlib.sha256(params.speaker_embedding.encode()).hexdigest()
    if params.speaker_seed is None:
        raise ValueError("a job must carry its speaker seed or embedding")
    return f"seed:{params.speaker_seed}"


def blend_identity(parts: Sequence[BlendPart]) -> str:
    """A blend by what makes it: each component's identity and normalised weight, in the blend's (canonical) order.

    The API orders the components and normalises the weights (:meth:`ttsq.api.service.voices.VoiceService.resolve_blend`), so
    ``a*0.7+b*0.3``, ``b*3+a*7`` and a stored blend of the same recipe share a key; other weights give another."""
    material = json.dumps([[part.identity, part.weight] for part in parts])
    return "blend:" + hashlib.sha256(material.encode()).hexdigest()


def engine_input(params: TTSParams) -> dict[str, object]:
    """Everything the engine is handed for this job (and so everything that shapes its audio): the text,
    the speaker, the seed, and every sampling parameter by its name (:mod:`ttsq.domain.sampling`); for a job of
    segments, each segment's (:func:`segment_input`) in place of the text and the speaker."""
    material: dict[str, object] = {"seed": params.seed, **dict(params.sampling)}
    if params.segments is not None:
        material["segments"] = [segment_input(segment) for segment in params.segments]
    else:
        material.update(text=params.text, speaker=speaker_identity(params))
    if params.consistent_voice:  # only when set: every key made before the flag existed stays the same
        material["consistent_voice"] = True
    if params.first_chunk:  # a realtime session's later chunk samples as that chunk of the whole text
        material["first_chunk"] = params.first_chunk
    return material


def segment_input(segment: Segment) -> dict[str, object]:
    """Everything of one segment that shapes the job's audio or its captions: its text and speaker identity (and the
    voice's owner, for a tenant's own voice), its own sampling, pause, gain, speaker label and marks (the captions are
    cached with the audio)."""
    material: dict[str, object] = {"text": segment.text, "speaker": speaker_identity(segment)}
    optional = {
        "sampling": dict(segment.sampling) if segment.sampling is not None else None,
        "consistent_voice": segment.consistent_voice or None,
        "voice_owner": segment.voice_owner,
        "pause_samples": segment.pause_samples,
        "gain_db": segment.gain_db,
        "label": segment.speaker,
        "marks": [[mark.name, mark.offset] for mark in segment.marks] if segment.marks else None,
    }
    material.update((name, value) for name, value in optional.items() if value is not None)
    return material


def cache_key(params: TTSParams, model_identity: str, scope: str | None = None) -> str | None:
    """The sha256 hex key of a deterministic request; None for a random one (never cached).

    ``scope`` names who shares the entry (``key:<id>``, ``tenant:<name>``); None shares it with every
    caller without a scope. Two scopes never compute the same key.
    """
    if not params.deterministic:
        return None
    material: dict[str, object] = {"v": KEY_VERSION, "model": model_identity, "format": params.format, **engine_input(params)}
    if scope is not None:
        material["scope"] = scope
    if params.voice_owner is not None:  # only for a tenant's own voice: every key made before voices had owners stays
        material["voice_owner"] = params.voice_owner
    encoded = json.dumps(material, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()
