"""What crosses from one part of a scheduler's step to the next: the rows one decoder's GPT step ran, and which of
them ended (what the scheduler then hands out as codes, text to refine, and audio)."""

from __future__ import annotations

from dataclasses import dataclass

from ttsq.inference.gpt.slot_decoder import Finished, SlotDecoder
from ttsq.inference.sched.requests import RowState

__all__ = ["StepOutput"]


@dataclass(frozen=True)
class StepOutput:
    """One decoder's step: the rows it advanced by a token (compacted into its lowest slots) and those that ended."""

    decoder: SlotDecoder
    rows: list[RowState]
    finished: list[Finished]
