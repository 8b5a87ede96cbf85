"""ChatTTS's own pieces around the decode loop, one row at a time.

ttsq's decoder (:mod:`ttsq.inference.gpt.slot_decoder`) replaces only ChatTTS's generation loop. What goes
in and what comes out stays ChatTTS's: its tokenizer and prompt decoration, its embeddings and
speaker encoding, its refine-text token filter, and its decoder + Vocos for the audio. Each call
here handles one row alone (no padding, no batch-mates), which is what ChatTTS does at batch 1 —
so a row's prompt and audio never depend on what else is in flight.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ttsq.domain.audio import SAMPLE_RATE

if TYPE_CHECKING:
    import torch

__all__ = ["SILENCE_THRESHOLD", "ChatTTSRows", "Prompt", "audible"]

SILENCE_THRESHOLD = np.float32(1e-5)
"""``Chat.infer`` drops every sample with ``|x| <= 1e-5`` from its output; so does ttsq, to sound the same."""


@dataclass(frozen=True)
class Prompt:
    embeddings: torch.Tensor
    """(positions, hidden): what the GPT is prefilled with."""

    @property
    def length(self) -> int:
        return int(self.embeddings.shape[0])


class ChatTTSRows:
    """Builds prompts and decodes results with a loaded ``ChatTTS.Chat``'s modules."""

    def __init__(self, chat: Any) -> None:
        self.chat = chat
        self.num_vq = int(chat.config.gpt.num_vq)
        self.code_eos = int(chat.config.gpt.num_audio_tokens) - 1
        self.text_eos = int(chat.tokenizer.eos_token)
        self.device = chat.gpt.device_gpt

    def normalize(self, text: str, lang: str) -> str:
        """ChatTTS's own per-text normalisation, as ``Chat.infer`` applies it (punctuation, homophones)."""
        normalized: str = self.chat.normalizer(text, True, True, lang)
        return normalized

    def code_prompt(
        self, text: str, speed: int, speaker: str | None, speaker_prompt: str | None = None, prompt_text: str | None = None
    ) -> Prompt:
        """The prompt of ``infer_code`` for one text: ``[Stts][spk_emb][speed_N]text[Ptts]`` embedded,
        with the speaker embedding written over the ``[spk_emb]`` position.

        With a speaker prompt (ChatTTS's ``spk_smp``: a recording's DVAE codes) and its text (``txt_smp``), exactly
        as ``Chat._infer_code`` builds it: ``[Stts][spk_emb or empty_spk]{txt_smp}[speed_N]text[Ptts]`` followed by
        the prompt's codes, whose positions take the code embeddings (the text mask is off there)."""
        import torch

        chat = self.chat
        with torch.inference_mode():
            decorated = chat.speaker.decorate_code_prompts([text], f"[speed_{speed}]", prompt_text, speaker)
            codes = chat.speaker.decode_prompt(speaker_prompt) if speaker_prompt is not None else None
            input_ids, _mask, text_mask = chat.tokenizer.encode(decorated, self.num_vq, prompt=codes, device=self.device)
            embeddings = chat.embed(input_ids, text_mask)
            if speaker is not None:
                chat.speaker.apply(embeddings, speaker, input_ids, chat.tokenizer.spk_emb_ids, self.device)
        return Prompt(embeddings[0])

    def text_prompt(self, text: str, prompt: str = "") -> Prompt:
        """The prompt of ``refine_text`` for one text: ``[Sbreak]text[Pbreak]`` and the refine prompt (``RefineTextParams.
        prompt``: ``[oral_N][laugh_N][break_N]``, or nothing) embedded, as ``Chat._refine_text`` builds it."""
        import torch

        chat = self.chat
        with torch.inference_mode():
            decorated = chat.speaker.decorate_text_prompts([text], prompt)
            input_ids, _mask, text_mask = chat.tokenizer.encode(decorated, self.num_vq, device=self.device)
            embeddings = chat.embed(input_ids, text_mask)
        return Prompt(embeddings[0])

    def refined_text(self, tokens: torch.Tensor) -> str:
        """A refine row's tokens as text, as ``Chat.infer`` turns them into the code step's input:
        the control tokens from ``[break_0]`` up are dropped, the rest decoded."""
        kept = tokens[tokens.less(self.chat.tokenizer.break_0_ids)]
        decoded: list[str] = self.chat.tokenizer.decode([kept])
        return decoded[0]

    def audio(self, hiddens: torch.Tensor) -> npt.NDArray[np.float32]:
        """One row's audio from the GPT states that produced its codes (ChatTTS decodes audio from
        the states, not the codes), decoded alone, with ChatTTS's near-silence samples dropped."""
        return audible(self._wav(hiddens))

    def audio_and_prompt(self, hiddens: torch.Tensor, max_seconds: float) -> tuple[npt.NDArray[np.float32], str]:
        """:meth:`audio`, and the speaker prompt made of it as ``Chat._infer`` makes one for ``split_text``:
        ``sample_audio_speaker`` of the decoded wave as it comes (near-silent samples kept), cut to ``max_seconds``
        (the room the decoder keeps for a prompt)."""
        wav = self._wav(hiddens)
        return audible(wav), self.speaker_prompt(wav, max_seconds)

    def speaker_prompt(self, wav: npt.NDArray[np.float32], max_seconds: float) -> str:
        """The speaker prompt of a decoded wave as it comes (near-silent samples kept), cut to ``max_seconds``: what
        :meth:`audio_and_prompt` makes, for a wave decoded in pieces (:mod:`ttsq.inference.audio.handoff`)."""
        import torch

        with torch.inference_mode():
            cut = np.ascontiguousarray(wav[: int(max_seconds * SAMPLE_RATE)])
            prompt: str = self.chat.sample_audio_speaker(torch.from_numpy(cut))
        return prompt

    def _wav(self, hiddens: torch.Tensor) -> npt.NDArray[np.float32]:
        import torch

        if hiddens.shape[0] == 0:
            return np.zeros(0, dtype=np.float32)
        with torch.inference_mode():
            wavs = self.chat._decode_to_wavs([hiddens], True)
        return np.asarray(wavs[0], dtype=np.float32).reshape(-1)


def audible(wav: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
    """``wav`` without its near-silent samples, each judged alone: applied piece by piece it drops what it drops from
    the whole."""
    kept: npt.NDArray[np.float32] = wav[np.abs(wav) > SILENCE_THRESHOLD]
    return kept
