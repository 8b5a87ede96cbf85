"""A row's audio in pieces from a window of states each: the benchmarks' comparison for the streamed decode
(``bench.engine.streaming_audio``, ``bench.engine.lookahead``); serving streams with
:class:`ttsq.inference.audio.lead.LeadThenExact` instead, which decodes every state once.

ChatTTS turns a row's GPT states into audio with a decoder (ConvNeXt blocks over two mel frames per token) and
Vocos (more ConvNeXt blocks, then an inverse STFT). Every one of their convolutions is centred: a sample depends on
states a fixed number of tokens before it and after it, its receptive field (:class:`AudioField`). So the samples
of tokens ``[start, end)`` can be decoded from a window of states ``[start - left, end + right)`` alone and are
then the very samples a decode of the whole row gives (within float rounding: a convolution may pick another
algorithm for another length). That is what :class:`PieceDecoder` does: it hands out the audio of each ``piece``
tokens as soon as ``lookahead`` more tokens exist, decoding ``piece + left + lookahead`` tokens for it, so the work
per row grows linearly with its length (ChatTTS's ``stream=True`` decodes the whole prefix again at every yield).

The field is measured, not assumed (:func:`measure_field`): a state is changed and the samples that move are the
ones it reaches. With ``lookahead`` below the field's right side the pieces are an approximation, at their right
edge; ``bench.engine.lookahead`` reports how far from the whole decode each look-ahead is, which is how a default is
chosen.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["AudioField", "PieceDecoder", "chat_decode", "measure_field"]

Decode = Callable[[npt.NDArray[np.float32]], npt.NDArray[np.float32]]
"""States ``[tokens, hidden]`` to the waveform a whole decode of them gives (``samples_per_token`` each)."""


def chat_decode(chat: Any) -> Decode:
    """A loaded ``ChatTTS.Chat``'s audio decode of one row's states, as :class:`ttsq.inference.chattts_rows.ChatTTSRows`
    decodes a finished row (``Chat._decode_to_wavs``, decoder then Vocos), before near-silent samples are dropped."""
    import torch

    device = next(chat.decoder.parameters()).device  # ChatTTS builds its batch on its input's device

    def decode(states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        with torch.inference_mode():
            wavs = chat._decode_to_wavs([torch.from_numpy(states).to(device)], True)
        return np.asarray(wavs[0], dtype=np.float32).reshape(-1)

    return decode


@dataclass(frozen=True)
class AudioField:
    """How far a sample's dependence on the states reaches, in tokens, each side of its own token."""

    left: int
    """Earlier tokens a sample depends on."""
    right: int
    """Later tokens a sample depends on: the look-ahead an exact piece needs."""
    samples_per_token: int


def measure_field(decode: Decode, hidden: int, *, tokens: int = 400, seed: int = 0) -> AudioField:
    """The receptive field of ``decode``, measured: one state in the middle of ``tokens`` random ones is changed and
    the samples that change, bit for bit, are the ones it reaches."""
    rng = np.random.default_rng(seed)
    states = rng.standard_normal((tokens, hidden)).astype(np.float32)
    whole = decode(states)
    per_token = whole.size - decode(states[:-1]).size  # Vocos's inverse STFT gives the last token half a hop less
    middle = tokens // 2
    changed = states.copy()
    changed[middle] += 1.0
    moved = np.flatnonzero(decode(changed) != whole)
    if moved.size == 0:
        raise ValueError("changing a state changed no sample")
    first_token, last_token = int(moved[0]) // per_token, int(moved[-1]) // per_token
    if first_token == 0 or last_token == tokens - 1:
        raise ValueError(f"the field reaches the ends of {tokens} tokens: measure with more")
    return AudioField(left=last_token - middle, right=middle - first_token, samples_per_token=per_token)


class PieceDecoder:
    """One row's audio, ``piece`` tokens at a time, as its states arrive.

    :meth:`add` takes the row's new states and returns the audio that is ready: the samples of every whole piece
    that has ``lookahead`` tokens after it. :meth:`finish` (the row ended) returns the rest. Joined, the pieces are
    the whole decode's samples (within float rounding) when ``lookahead >= field.right``.
    """

    def __init__(self, decode: Decode, field: AudioField, piece: int, lookahead: int) -> None:
        if piece < 1 or lookahead < 1:
            # A window's last token has only half its samples (the inverse STFT's edge): one token after it at least.
            raise ValueError(f"piece and lookahead must be at least 1 token; got {piece}, {lookahead}")
        self.decode = decode
        self.field = field
        self.piece = piece
        self.lookahead = lookahead
        self.states: list[npt.NDArray[np.float32]] = []
        self.done = 0
        """Tokens whose audio has been handed out."""
        self.decoded_tokens = 0
        """Tokens run through ``decode`` so far (the work, against the row's length)."""

    def add(self, states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        self.states.extend(states)
        pieces = []
        while self.done + self.piece + self.lookahead <= len(self.states):
            pieces.append(self._samples(self.done, self.done + self.piece, self.done + self.piece + self.lookahead))
            self.done += self.piece
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.float32)

    def finish(self, states: npt.NDArray[np.float32] | None = None) -> npt.NDArray[np.float32]:
        if states is not None:
            self.states.extend(states)
        if self.done >= len(self.states):
            return np.zeros(0, dtype=np.float32)
        rest = self._samples(self.done, len(self.states), len(self.states))
        self.done = len(self.states)
        return rest

    def _samples(self, start: int, end: int, until: int) -> npt.NDArray[np.float32]:
        """The samples of tokens ``[start, end)``, from a decode of ``[start - left, until)``."""
        begin = max(0, start - self.field.left)
        window = np.stack(self.states[begin:until])
        self.decoded_tokens += len(window)
        audio = self.decode(window)
        per_token = self.field.samples_per_token
        return audio[(start - begin) * per_token : (end - begin) * per_token]
