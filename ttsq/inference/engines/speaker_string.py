"""A speaker embedding as ChatTTS writes it (``Speaker._encode``), made without ChatTTS's costly compressor setup.

ChatTTS stores a speaker as its float16 vector, LZMA2-compressed (raw, preset ``9 | PRESET_EXTREME``) and written in
base16384. That preset's 64 MiB dictionary is set up for every call, and for a vector of a few kilobytes setting it up
costs far more than compressing (BENCHMARKS.md, "Where a session's CPU goes"): the worker draws a voice for every new
seed, beside the steps of the streams it serves. A dictionary larger than the input finds the same matches, so the
same preset with a 64 KiB dictionary writes the same bytes (``tests/unit/inference/engines/test_speaker_string.py``
checks it against ChatTTS's own ``_encode`` on random vectors of every size ChatTTS uses), and any LZMA2 decoder,
ChatTTS's ``_decode`` with its 64 MiB dictionary included, reads it back.
"""

from __future__ import annotations

import lzma

import numpy as np
import numpy.typing as npt
import pybase16384 as b14

__all__ = ["encode_speaker"]

_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9 | lzma.PRESET_EXTREME, "dict_size": 1 << 16}]


def encode_speaker(vector: npt.NDArray[np.floating]) -> str:
    """``vector`` (any float dtype) as ChatTTS's speaker string: ``Speaker._encode``'s bytes, for vectors up to 64 KiB
    as float16 (ChatTTS's are 768 dimensions, 1.5 KiB)."""
    raw = np.asarray(vector, dtype=np.float16).tobytes()
    if len(raw) > 1 << 16:
        raise ValueError(f"a speaker vector of {len(raw)} bytes is larger than the dictionary that keeps ChatTTS's bytes")
    encoded: str = b14.encode_to_string(lzma.compress(raw, format=lzma.FORMAT_RAW, filters=_FILTERS))
    return encoded
