"""The scheduler's GPT decoders: one for audio codes, and one for ``refine_text``'s text tokens over the same weights
(a cache of its own), built once.

The text decoder is built before serving where asked (a worker's batcher: built, and on CUDA captured, before the
worker reports ready, not mid-serving where it would stall every row), else at the first row that needs it (scripts
and warm-up: its cache is memory spent for nothing otherwise). A build that fails is logged and kept: refine_text
requests then fail with its reason, every other request is served.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ttsq.inference.base import PermanentError
from ttsq.inference.gpt.slot_decoder import SlotDecoder
from ttsq.inference.sched.requests import RowState

__all__ = ["Decoders"]

log = logging.getLogger("ttsq.inference.sched.scheduler")  # the scheduler's story, one logger


class Decoders:
    """The code decoder, and the refine-text decoder once built."""

    def __init__(self, code: SlotDecoder, make_text: Callable[[], SlotDecoder] | None) -> None:
        self.code = code
        self.text: SlotDecoder | None = None
        self._make_text = make_text
        self._text_error: str | None = None
        """Why the refine-text decoder could not be built."""

    def live(self) -> list[SlotDecoder]:
        """The decoders there are: the code decoder, and the text decoder once built."""
        return [self.code] if self.text is None else [self.code, self.text]

    def build_text(self) -> None:
        """Make the refine-text decoder, once (a later call does nothing)."""
        make, self._make_text = self._make_text, None
        if make is None:
            return
        try:
            self.text = make()
        except Exception as exc:  # the code decoder serves on; refine requests get the reason
            log.exception("the refine-text decoder could not be built; refine_text requests will fail")
            self._text_error = f"{type(exc).__name__}: {exc}"

    def wants_text(self) -> bool:
        """Whether a refine_text row would build the text decoder now (none built, none failed)."""
        return self.text is None and self._make_text is not None

    def of(self, row: RowState) -> SlotDecoder:
        """The decoder ``row`` runs in; PermanentError for a refine row where there is no text decoder."""
        if row.phase == "code":
            return self.code
        if self.text is None:
            reason = f": its decoder could not be built ({self._text_error})" if self._text_error else " with this engine"
            raise PermanentError(f"refine_text is not available{reason}")
        return self.text
