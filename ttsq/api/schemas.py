"""HTTP request and response bodies of the v1 API (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ttsq.domain.jobs import MAX_SEED, AudioFormat, Job, Status


class SubmitRequest(BaseModel):
    """A text to speak. Unknown fields are refused so that a typo is not silently ignored."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={"examples": [{"text": "你好，欢迎使用 ttsq。[uv_break]", "voice": "zh_female", "format": "mp3"}]},
    )

    text: str = Field(
        description="Text to speak. Prosody tokens [uv_break], [laugh], [lbreak], [break_N], [laugh_N], [oral_N] are allowed.",
        examples=["Hello from ttsq."],
    )
    voice: str | None = Field(None, description="A registered voice name; fixes the speaker.")
    seed: int | None = Field(None, ge=0, le=MAX_SEED, description="Sampling seed; without a voice it also picks the speaker.")
    speed: int = Field(5, ge=1, le=9, description="ChatTTS speed 1 (slow) to 9 (fast).")
    temperature: float = Field(0.3, ge=0.01, le=1.0)
    top_p: float = Field(0.7, ge=0.1, le=1.0)
    top_k: int = Field(20, ge=1, le=100)
    format: AudioFormat = "wav"
    refine_text: bool = Field(False, description="Let ChatTTS add oral prosody tokens first (slower).")


class SubmitResponse(BaseModel):
    task_id: str
    status: Status
    queue_position: int | None = Field(description="Jobs ahead of this one (0 = next).")
    estimate_s: float = Field(description="Rough seconds until the result is ready.")
    seed: int = Field(description="The sampling seed used; resubmit it to keep a randomly drawn voice.")
    deterministic: bool = Field(description="True when the request names a voice or a seed.")
    cached: bool = Field(False, description="Served from the result cache: the audio is ready now.")
    joined: bool = Field(False, description="An identical request was already queued or running; this is its task.")
    notice: str | None = Field(None, description="A warning about the model, e.g. random weights.")


class TaskStatus(BaseModel):
    task_id: str
    status: Status
    queue_position: int | None = None
    attempts: int
    max_attempts: int
    error: str | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    retry_at: float | None = Field(None, description="When a failed attempt will be retried.")
    audio_duration_s: float | None = None
    format: AudioFormat
    content_type: str | None = None
    result_bytes: int | None = None
    seed: int
    voice: str | None = None
    chunks_done: int | None = Field(None, description="Sentence chunks synthesised so far (current attempt).")
    chunks_total: int | None = None

    @classmethod
    def of(cls, job: Job, position: int | None, progress: tuple[int, int] | None = None) -> TaskStatus:
        return cls(
            task_id=job.id,
            status=job.status,
            queue_position=position,
            attempts=job.attempts,
            max_attempts=job.max_attempts,
            error=job.error,
            created_at=job.created_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            retry_at=job.not_before,
            audio_duration_s=job.duration_s,
            format=job.params.format,
            content_type=job.content_type,
            result_bytes=job.result_bytes,
            seed=job.params.seed,
            voice=job.params.voice,
            chunks_done=progress[0] if progress else None,
            chunks_total=progress[1] if progress else None,
        )


class ErrorBody(BaseModel):
    """Every non-422 error: a sentence a person can act on."""

    detail: str


class ValidationErrorBody(BaseModel):
    detail: list[dict[str, Any]]


class OpenAIError(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorBody(BaseModel):
    """Errors on the OpenAI-compatible routes, in OpenAI's shape."""

    error: OpenAIError
