"""The job record: what a submitted task is, as stored in Redis and shown to clients.

A job is stored as one JSON document so that every state change is a single atomic Lua script
in :mod:`ttsq.store.queue`; nothing outside that module writes a job.
"""

from __future__ import annotations

import json
import secrets
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, Field, PrivateAttr, ValidationError

from ttsq.domain.captions import Cue
from ttsq.domain.sampling import SamplingFields
from ttsq.domain.segments import Part, Segment, VoiceFields, parts
from ttsq.domain.stored import StoredList, salvaged, unreadable_reason

AudioFormat = Literal["wav", "mp3", "ogg", "flac", "opus", "aac", "pcm"]
Priority = Literal["interactive", "batch"]
"""A job's lane in its shard's queue: ``interactive`` is served first, ``batch`` gets a bounded share
(``INTERACTIVE_BURST``; docs/fairness.md). Older job records have none and count as interactive."""
PRIORITIES: tuple[Priority, ...] = ("interactive", "batch")
Lane = Literal["continuation", "interactive", "batch"]
"""Where a job waits in its shard's queue: its priority's lane, or ``continuation`` for an interactive job that
continues a stream whose listener is already playing (:attr:`TTSParams.stream`), served before both (docs/fairness.md)."""
LANES: tuple[Lane, ...] = ("continuation", "interactive", "batch")
"""Every lane, in the order a claim looks at them (the scripts' ``LANES``, ``fair.lua``)."""
ANONYMOUS_TENANT = "anonymous"
"""The one tenant of every caller without an API key (AUTH=off or auto on loopback)."""

DEFAULT_SAMPLING_SEED = 42
"""Sampling seed of a request that names a voice but no seed, so that it stays deterministic."""

MAX_SEED = 2**31 - 1


class Status(StrEnum):
    """Lifecycle of a job: queued → running → done | failed | cancelled (running → queued on retry)."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_final(self) -> bool:
        return self in (Status.DONE, Status.FAILED, Status.CANCELLED)


class StreamPlace(BaseModel):
    """A job's place in a stream a listener hears from its first audio to its last (a realtime session's context):
    which stream, which of its chunks, and how much audio the listener had left when the job was queued."""

    id: str = Field(description="The stream's opaque id (a session's and context's ids): the same on every chunk of it.")
    chunk: int = Field(ge=0, description="Its place among the stream's chunks: 0 for the first, which starts the stream.")
    buffered_s: float = Field(
        default=0.0,
        description="Seconds of audio the listener still had to play when the job was queued (as the API counted what "
        "it had sent; negative: it had run dry that long). With the record's ``created_at`` (Redis's clock), when the "
        "listener runs out: a worker that has not seen the stream before starts its account from it.",
    )

    @property
    def continues(self) -> bool:
        """Whether it continues a stream already playing (every chunk but the first)."""
        return self.chunk > 0


class TTSParams(VoiceFields, SamplingFields):
    """Everything the worker needs to synthesise a job, already validated by the API.

    The sampling parameters are inherited (:class:`~ttsq.domain.sampling.SamplingFields`), so a job
    stores them flat, as it always has: a job written by an older release loads, and one written now
    loads in an older worker (``.sampling`` is the record alone). So is the voice
    (:class:`~ttsq.domain.segments.VoiceFields`): the job's voice, or, for a job of :attr:`segments`, none of its own.
    """

    text: str = Field(description="What it says; for a job of segments, their texts joined by new lines (for display).")
    segments: StoredList[Segment] | None = Field(
        default=None,
        description="Runs of text each in a voice and with sampling of their own (a dialogue's lines): the job speaks "
        "these, in order, instead of ``text`` in its own voice (:mod:`ttsq.domain.segments`).",
    )
    seed: int = Field(description="Sampling seed (always set: drawn by the API when absent).")
    first_chunk: int = Field(
        default=0,
        ge=0,
        description="Where this job's chunks stand in a longer text (a realtime session's later sentences): chunk i "
        "samples as chunk first_chunk + i of that text would, so a session's audio equals the text submitted whole.",
    )
    stream: StreamPlace | None = Field(
        default=None,
        description="Its place in a live listener's stream (a realtime session's chunks): a chunk after the first waits "
        "in the queue's continuation lane and is due when the listener runs out of audio (docs/fairness.md).",
    )
    format: AudioFormat = "wav"
    deterministic: bool = True
    cache_key: str | None = Field(default=None, description="Result-cache key; None for random requests.")
    callback_url: str | None = Field(default=None, description="Where to POST the outcome (a signed webhook), if anywhere.")
    record_speaker: bool = Field(
        default=False,
        description="A voice draw's preview: the worker records the speaker embedding it used on the job (Job.speaker), "
        "so the API, which has no model, can compare voices (docs/api.md#draw).",
    )
    document: bool = Field(
        default=False,
        description="A whole document (docs/documents.md): its segments go to the engine a few at a time, finished ones "
        "stay in its audio stream across a worker's death, and its audio is served from that stream "
        "(:mod:`ttsq.runtime.documents`).",
    )
    refine_only: bool = Field(
        default=False,
        description="A refine job (``POST /v1/tts/refine``): the worker runs ChatTTS's refine pass alone and stores the "
        "refined text (:mod:`ttsq.domain.refine`), not audio (docs/prosody.md).",
    )
    listened: bool = Field(
        default=False,
        description="Somebody hears it as it is made (a realtime session, a streamed answer, a submit with ``listen``): "
        "each chunk's audio comes in pieces as its codes are generated. Otherwise (and in a record written before this "
        "field) each chunk is decoded whole at its end, the cheapest exact way, and its stream gets it chunk by chunk "
        '(docs/decoder.md, "Which chunks are decoded in pieces"). Not part of the cache key: both ways give the same '
        "audio to float rounding.",
    )

    def spoken_segments(self) -> list[Segment]:
        """What the job speaks, as segments: its :attr:`segments`, or its text in its own voice as the one segment."""
        if self.segments is not None:
            return self.segments
        voice = {name: getattr(self, name) for name in VoiceFields.model_fields}
        return [Segment.model_construct(text=self.text, **voice)]

    def parts(self) -> list[Part]:
        """What the engine is asked to speak, in order: one request per part (:func:`ttsq.domain.segments.parts`)."""
        return parts(self.spoken_segments(), self.seed, self.first_chunk)


class Job(BaseModel):
    """The stored job record. Timestamps are Unix seconds (float)."""

    id: str
    status: Status = Status.QUEUED
    params: TTSParams
    attempts: int = 0
    max_attempts: int
    error: str | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    worker: str | None = None
    duration_s: float | None = None
    captions: StoredList[Cue] | None = None
    """One cue per synthesised chunk (:mod:`ttsq.domain.captions`), recorded with the result."""
    speaker: str | None = None
    """The speaker embedding the worker used, recorded with the result of a job that asked (``params.record_speaker``)."""
    content_type: str | None = None
    result_bytes: int | None = None
    not_before: float | None = Field(default=None, description="Set while a failed attempt waits out its retry backoff.")
    owner: str | None = Field(default=None, description="Who submitted it (an API key id or a client address): counted per owner.")
    readers: StoredList[str] | None = Field(
        default=None, description="API key ids that may read or cancel it (None: anyone holding its id)."
    )
    isolate: bool = Field(
        default=False,
        description="Its worker was lost during an attempt: it runs alone until it succeeds, so a job that "
        "crashes its process cannot take batch-mates down with it.",
    )
    requeues: int = Field(default=0, description="Times an operator put it back from the dead letters.")
    holders: StoredList[str] | None = Field(
        default=None,
        description="Owners who asked for it (submitter, single-flight joiners): a cancel by one of several only detaches it.",
    )
    joins: int = Field(
        default=0,
        description="Submits that joined it in flight (single-flight), its own submitter's again included: a request that "
        "queued it and went away cancels it only while this is 0.",
    )
    cancel_requested: bool = Field(
        default=False, description="Cancelled while running: its result is discarded when its batch ends."
    )
    claim: int | None = Field(
        default=None,
        description="The fencing token of its latest claim (a number that only grows): only the worker holding this "
        "claim may renew its lease, stream its audio, complete or fail it.",
    )
    tenant: str | None = Field(
        default=None,
        description="Whose fair share of the workers it is queued under (docs/fairness.md); None on records older than "
        "fair queuing, which wait under one tenant of their own.",
    )
    priority: Priority = Field(
        default="interactive", description="Its lane: interactive is served first, batch gets a bounded share."
    )
    _unreadable: str | None = PrivateAttr(default=None)

    @property
    def lane(self) -> Lane:
        """The lane it waits in (``fair.lua``'s ``lane_of``): ``continuation`` for an interactive job that continues a
        live stream, else its priority's."""
        stream = self.params.stream
        if self.priority == "interactive" and stream is not None and stream.continues:
            return "continuation"
        return self.priority

    @property
    def unreadable(self) -> str | None:
        """Why its stored record did not load as it is, for a person; None when it did. This job is then a stand-in
        (:meth:`stored`): a worker that claimed it fails it for good with this reason, and never runs it."""
        return self._unreadable

    @classmethod
    def stored(cls, raw: str | bytes) -> Job:
        """A job record as stored in Redis.

        A record that does not load as it is (written by a newer or older release; a field of a type this one does not
        take) still loads, as a stand-in made of the fields that did, with :attr:`unreadable` saying why: a worker that
        claimed it must be able to fail it (its id, claim, owner and single-flight key end it through the queue's one
        failure path) and go on with the others, and the API must answer its status rather than a 500. A field that
        did not load takes its default, except an access list, which takes an empty one (the task is then readable by
        no key but an admin's: a list that cannot be read must not open the task to everyone), and the parameters,
        which keep what of them did load. Raises only for what is no job record at all: not a JSON object, or one
        without a string ``id``.
        """
        try:
            return cls.model_validate_json(raw)
        except ValidationError as exc:
            error = exc
        data = json.loads(raw)
        stored_params = data.get("params") if isinstance(data, dict) else None
        try:
            params = salvaged(TTSParams, stored_params, {"text": "", "seed": 0})
        except ValidationError:
            params = TTSParams(text="", seed=0)
        fallbacks = {"params": params, "readers": [], "holders": [], "created_at": 0.0, "max_attempts": 0}
        try:
            job = salvaged(cls, data, fallbacks)
        except ValidationError:
            raise error from None
        job._unreadable = unreadable_reason("the job record", error)
        return job


def draw_seed() -> int:
    """A fresh seed for a request that names neither voice nor seed (the "gacha" draw)."""
    return secrets.randbelow(MAX_SEED) + 1
