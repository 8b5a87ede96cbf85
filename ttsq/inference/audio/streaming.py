"""A row's audio decoded as its states arrive, every state through the decoder and Vocos exactly once.

Decoding each piece from a window of states (``bench.engine.piecewise``, kept as the benchmarks' comparison) decodes
the left context again for every piece, several times the CPU of one whole decode (docs/decoder.md).
:class:`StreamingDecoder` keeps, instead, each convolution's own left context between calls, which is how a
streaming convolution works: a layer of kernel ``k`` and dilation ``d`` keeps its last ``d * (k - 1)`` input frames,
starts from the zeros the model's ``padding`` puts before the row, emits an output only once the inputs to its
right exist, and at :meth:`~StreamingDecoder.finish` is flushed with the zeros the padding puts after the row. A
ConvNeXt block's residual is the input frame its output is centred on; layer norms, linear layers, activations,
the decoder's ``coef`` and Vocos's magnitude/phase are per frame and need no state. Vocos's inverse STFT ("center"
padding, as ChatTTS configures it) is streamed by overlap-add: each frame's windowed inverse FFT is added in as it
comes, a sample is divided by its window envelope (the sum of the squared windows that cover it) once no later
frame can reach it, and the first ``n_fft // 2`` samples and, at the end, those past ``n_fft // 2 + hop * (frames
- 1)`` are trimmed, as ``torch.istft(center=True)`` does. Joined, the output is the whole decode's samples (within
float rounding: a convolution or matrix product of another length may sum in another order), and the work per
row is one whole decode plus a fixed overhead per run, whatever the run's size.

The price of exactness is latency: a sample needs every state its receptive field reaches, :attr:`delay` tokens
after its own (from the layers' shapes: 9 on the tiny checkpoint, 52 on ChatTTS's real one, whose trained
ConvNeXt blocks use their whole field; random weights with ChatTTS's initial layer scale of 1e-6 only *measure*
19, ``bench.engine.piecewise.measure_field``). So ``add`` returns the samples of tokens up to ``delay`` before the
newest one, and ``finish`` the rest.

Interface (:class:`~ttsq.inference.audio.handoff.AudioPieces`): ``decoder = streaming_decoder(chat)`` for a loaded
``ChatTTS.Chat`` (its own ``decoder`` and ``vocos`` modules, their weights shared, not copied; one decoder per
row), then ``decoder.add(states)`` with the row's new GPT states ``[tokens, hidden]`` returns the new samples
(float32, possibly none), and ``decoder.finish()`` the rest once the row ended. A *run* is the layers going over the
states waiting: one once ``run_tokens`` (:data:`RUN_TOKENS`) new states wait (fewer, larger runs: less overhead;
``add`` returns nothing until then). :attr:`decoded_tokens` is the work done (states through the decoder, each once)
and :attr:`calls` how many runs there were. :func:`add_together` is ``add`` for several rows of one ``Chat`` at once:
each layer's convolution runs row by row and what follows it (layer norms, matrix products: most of the weights) over
all of their frames at once, so a run reads those weights once for all of them (a run's fixed cost is mostly that
read), and each row's samples are bit for bit those it gets alone; :func:`step_together` also ends rows, and
:func:`run_together` and :func:`preview_together` are :meth:`~StreamingDecoder.run_now` and
:meth:`~StreamingDecoder.preview` likewise. Serving decodes the rows due in the same step this way
(:func:`~ttsq.inference.audio.lead.leads_together`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
import torch.nn.functional as functional
from torch import nn

from ttsq.domain.audio import SAMPLES_PER_TOKEN

__all__ = [
    "RUN_TOKENS",
    "StreamingDecoder",
    "add_together",
    "preview_together",
    "run_together",
    "step_together",
    "streaming_decoder",
]

RUN_TOKENS = 64
"""States a row's streamed decode gathers before it runs its layers. Its samples are needed only once a lead's have
played (:mod:`ttsq.inference.audio.lead`), and fewer, larger runs cost less CPU per state (docs/decoder.md, "Streaming
audio decode", has the runs' measured cost by size)."""

Pointwise = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
"""What follows a convolution up to the next one, per frame: ``(conv output, residual) -> next input``."""


class _StreamingConv:
    """One ``nn.Conv1d`` (stride 1, symmetric padding) run over a stream of frames ``[1, channels, frames]``.

    The cache holds the input frames the next outputs still need; it starts as the ``padding`` zeros the module
    puts before the sequence. ``then`` is applied to each output with the input frame it is centred on (a
    ConvNeXt block's residual)."""

    def __init__(self, conv: nn.Conv1d, then: Pointwise | None = None) -> None:
        (kernel,), (dilation,), (stride,) = conv.kernel_size, conv.dilation, conv.stride
        padding = conv.padding
        if stride != 1 or not isinstance(padding, tuple) or 2 * padding[0] != dilation * (kernel - 1):
            raise ValueError(f"not a centred stride-1 convolution: {conv}")
        self.conv = conv
        self.then = then
        self.padding = padding[0]
        self.span = dilation * (kernel - 1)
        self.cache: torch.Tensor | None = None
        self.outputs = 0
        """Output frames made so far (the next one's index)."""

    def take(self, frames: torch.Tensor, *, last: bool) -> torch.Tensor:
        """The input window ``frames`` give this layer (cache, frames and, with ``last``, the closing padding);
        the cache becomes what the next outputs will still need. ``span`` fewer outputs than the window's frames."""
        if self.cache is None:
            self.cache = frames.new_zeros((1, frames.size(1), self.padding))
        parts = [self.cache, frames]
        if last:
            parts.append(frames.new_zeros((1, frames.size(1), self.padding)))
        window = torch.cat(parts, dim=2)
        self.cache = window[:, :, max(window.size(2) - self.span, 0) :]
        return window

    def ahead_window(self, exact: torch.Tensor, rest: torch.Tensor, until: int | None) -> tuple[torch.Tensor, int, int]:
        """One layer of a preview, its input side: ``exact`` input frames (final: kept, as :meth:`take` keeps them)
        followed by ``rest`` frames that hold only if the row ends after them, closed by the end's padding. Returns the
        window to convolve, how many output frames to make of it (up to ``until``, an output frame index, but at least
        every frame of the exact inputs alone) and how many of those are the exact inputs' own. Only the exact inputs
        change the cache; the rest leaves no trace."""
        if self.cache is None:
            self.cache = exact.new_zeros((1, exact.size(1), self.padding))
        kept = torch.cat([self.cache, exact], dim=2)
        final = max(kept.size(2) - self.span, 0)
        window = torch.cat([kept, rest, kept.new_zeros((1, kept.size(1), self.padding))], dim=2)
        count = max(window.size(2) - self.span, 0)
        if until is not None:
            count = min(count, max(until - self.outputs, final))
        self.cache = kept[:, :, max(kept.size(2) - self.span, 0) :]
        self.outputs += final
        return window[:, :, : count + self.span], count, final


def _run_layer(layers: Sequence[_StreamingConv], inputs: Sequence[torch.Tensor], last: Sequence[bool]) -> list[torch.Tensor]:
    """One layer of several rows (the same module, each row its own cache), what follows its convolution in one pass
    for all of them (:func:`_convolve`)."""
    windows = [row.take(frames, last=end) for row, frames, end in zip(layers, inputs, last, strict=True)]
    counts = [max(window.size(2) - layers[0].span, 0) for window in windows]
    for row, count in zip(layers, counts, strict=True):
        row.outputs += count
    return _convolve(layers[0], windows, counts)


def _convolve(layer: _StreamingConv, windows: Sequence[torch.Tensor], counts: Sequence[int]) -> list[torch.Tensor]:
    """``layer`` over several rows' input ``windows`` (each ``count + span`` frames, or any where its count is 0): the
    convolution row by row, what follows it (its per-frame layer norms and matrix products, where most of the weights
    are) in one pass over all of their frames, so a run of many rows reads those weights once. Each row's frames come
    out bit for bit as decoded alone: a per-frame operation gives a frame the same bits whatever frames are beside it,
    while a convolution over a longer input may sum in another order (oneDNN picks its kernel by the input's shape)."""
    empty = windows[0].new_zeros((1, layer.conv.out_channels, 0))
    ready = [window for window, count in zip(windows, counts, strict=True) if count]
    if not ready:
        return [empty for _ in windows]
    conv = layer.conv
    outs = [functional.conv1d(window, conv.weight, conv.bias, 1, 0, conv.dilation, conv.groups) for window in ready]
    out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
    if layer.then is not None:
        residual = torch.cat([window[:, :, layer.padding : window.size(2) - layer.padding] for window in ready], dim=2)
        out = layer.then(out, residual)
    parts = iter(torch.split(out, [count for count in counts if count], dim=2))
    return [next(parts) if count else empty for count in counts]


def _ahead_layer(
    layers: Sequence[_StreamingConv], exact: Sequence[torch.Tensor], rest: Sequence[torch.Tensor], until: Sequence[int | None]
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """One layer of several rows' previews (:meth:`_StreamingConv.ahead_window`), as :func:`_run_layer` runs it: each
    row's output frames of its exact inputs alone, and those past them."""
    shaped = [row.ahead_window(now, after, end) for row, now, after, end in zip(layers, exact, rest, until, strict=True)]
    out = _convolve(layers[0], [window for window, _, _ in shaped], [count for _, count, _ in shaped])
    finals = [final for _, _, final in shaped]
    return [part[:, :, :final] for part, final in zip(out, finals, strict=True)], [
        part[:, :, final:] for part, final in zip(out, finals, strict=True)
    ]


def _convnext(block: Any) -> _StreamingConv:
    """A ConvNeXt block (ChatTTS's decoder copy, scale ``weight``, or Vocos's, scale ``gamma``), as they compute it."""
    if getattr(block, "adanorm", False):
        raise ValueError("Vocos's adaptive layer norm needs a bandwidth id; ChatTTS does not configure it")
    scale = block.gamma if hasattr(block, "gamma") else block.weight

    def rest(y: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        y = block.pwconv2(block.act(block.pwconv1(block.norm(y.transpose(1, 2)))))
        if scale is not None:
            y = y * scale
        return residual + y.transpose(1, 2)

    return _StreamingConv(block.dwconv, rest)


class _StreamingISTFT:
    """``torch.istft(spec, n_fft, hop, n_fft, window, center=True)`` over frames as they come."""

    def __init__(self, n_fft: int, hop: int, window: torch.Tensor) -> None:
        self.n_fft, self.hop, self.window = n_fft, hop, window
        self.squared = window.square()
        self.frames = 0
        self.sum = window.new_zeros(0)
        """Windowed overlap-add from sample ``base`` on, its window envelope alongside."""
        self.envelope = window.new_zeros(0)
        self.base = 0
        self.emitted = n_fft // 2
        """Samples before this one are out (or trimmed: "center" padding puts ``n_fft // 2`` before the row)."""

    def run(self, spec: torch.Tensor, *, last: bool) -> torch.Tensor:
        """The samples final once ``spec`` ``[1, bins, frames]`` is added (with ``last``, every sample left)."""
        new = spec.size(2)
        if new:
            frames = torch.fft.irfft(spec[0], self.n_fft, dim=0) * self.window[:, None]
            end = (self.frames + new - 1) * self.hop + self.n_fft - self.base
            if end > self.sum.numel():
                grow = end - self.sum.numel()
                self.sum = torch.cat([self.sum, self.sum.new_zeros(grow)])
                self.envelope = torch.cat([self.envelope, self.envelope.new_zeros(grow)])
            at = self.frames * self.hop - self.base
            self.sum[at:end] += self._overlap_add(frames)
            self.envelope[at:end] += self._overlap_add(self.squared[:, None].expand(-1, new))
            self.frames += new
        if last:
            until = self.n_fft // 2 + self.hop * (self.frames - 1) if self.frames else self.emitted
        else:
            until = self.frames * self.hop  # a later frame starts at or after this sample
        if until <= self.emitted:
            return self.sum[:0]
        begin, stop = self.emitted - self.base, until - self.base
        envelope = self.envelope[begin:stop]
        if not bool((envelope > 1e-11).all()):
            raise ValueError("window overlap-add has a zero (NOLA): the ISTFT cannot invert it")
        samples = self.sum[begin:stop] / envelope
        self.sum, self.envelope, self.base, self.emitted = self.sum[stop:], self.envelope[stop:], until, until
        return samples

    def _overlap_add(self, frames: torch.Tensor) -> torch.Tensor:
        """Frames ``[n_fft, count]`` a hop apart, summed where they overlap (what ``torch.istft`` folds)."""
        length = (frames.size(1) - 1) * self.hop + self.n_fft
        folded = functional.fold(frames[None], (1, length), kernel_size=(1, self.n_fft), stride=(1, self.hop))
        return folded.reshape(-1)


class StreamingDecoder:
    """One row's ``Chat._decode_to_wavs`` (``decoder`` then ``vocos``), streamed: see the module docstring."""

    def __init__(self, decoder: Any, vocos: Any, *, run_tokens: int = RUN_TOKENS) -> None:
        if run_tokens < 1:
            raise ValueError(f"a run is at least 1 token; got {run_tokens}")
        if getattr(decoder, "vq_layer", None) is not None:
            raise ValueError("the DVAE with a quantizer decodes codes; stream the decoder that decodes GPT states")
        self.decoder, self.vocos, self.run_tokens = decoder, vocos, run_tokens
        self.parameter: torch.Tensor = next(decoder.parameters())
        head = vocos.head
        istft = head.istft
        if istft.padding != "center":
            raise ValueError(f"Vocos's ISTFT padding is {istft.padding!r}; only ChatTTS's 'center' is streamed")
        if 2 * int(istft.hop_length) != SAMPLES_PER_TOKEN:
            raise ValueError(f"Vocos hops {istft.hop_length} samples a frame: {SAMPLES_PER_TOKEN // 2} expected")
        dec, backbone = decoder.decoder, vocos.backbone
        if getattr(backbone, "adanorm", False):
            raise ValueError("Vocos's adaptive layer norm needs a bandwidth id; ChatTTS does not configure it")

        def gelu(y: torch.Tensor, _residual: torch.Tensor) -> torch.Tensor:
            activated: torch.Tensor = dec.conv_in[1](y)
            return activated

        def coef(y: torch.Tensor, _residual: torch.Tensor) -> torch.Tensor:
            scaled: torch.Tensor = y * decoder.coef
            return scaled

        def norm(y: torch.Tensor, _residual: torch.Tensor) -> torch.Tensor:
            normed: torch.Tensor = backbone.norm(y.transpose(1, 2))
            return normed.transpose(1, 2)

        self.layers = [
            _StreamingConv(dec.conv_in[0], gelu),
            _StreamingConv(dec.conv_in[2]),
            *(_convnext(block) for block in dec.decoder_block),
            _StreamingConv(dec.conv_out),
            _StreamingConv(decoder.out_conv, coef),
            _StreamingConv(backbone.embed, norm),
            *(_convnext(block) for block in backbone.convnext),
        ]
        self.istft = _StreamingISTFT(istft.n_fft, istft.hop_length, istft.window)
        frames_right = sum(layer.span - layer.padding for layer in self.layers)
        samples_per_frame = istft.hop_length
        # A token's last sample is at 2 * hop * (token + 1) - 1 after the trim, so in ISTFT frame
        # (2 * hop * (token + 1) - 1 + n_fft // 2) // hop, which waits for the layers' right field in frames.
        last_frame = (2 * samples_per_frame - 1 + istft.n_fft // 2) // samples_per_frame + frames_right
        self.delay: int = int(last_frame // 2)
        """Tokens after a token's own that its samples need: ``add`` holds its samples back until they exist."""
        self.pending: list[npt.NDArray[np.float32]] = []
        self.decoded_tokens = 0
        """States run through the layers so far: each once, so the row's length once it is finished."""
        self.calls = 0
        """Times the layers ran (each costs a fixed overhead on top of its states' share of a whole decode)."""
        self.finished = False

    @property
    def width(self) -> int:
        """The size of one GPT state it takes (``hidden``): two mel frames' channels."""
        return 2 * int(self.decoder.decoder.conv_in[0].in_channels)

    def add(self, states: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        """The row's next GPT states ``[tokens, hidden]``; returns the samples they complete (maybe none)."""
        return step_together([self], [states], [False])[0]

    def run_now(self) -> npt.NDArray[np.float32]:
        """Run the states waiting through the layers without waiting for a whole run: the samples they complete.
        For a caller that knows the next samples are due sooner than the usual cadence would bring them."""
        self._check_open()
        if not self.pending:
            return np.zeros(0, dtype=np.float32)
        return run_together([self])[0]

    def preview(self, tokens: int | None = None) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """Run the states waiting now (as :meth:`run_now`), and with them what :meth:`finish` would add if the row
        ended here, keeping only the first: ``(exact samples, the rest as if the row ended now)``. The second part is
        the whole decode of the states so far from where the first stops, within float rounding: what a first audio
        decoded from a window of them would be, for the work of the layers' right field only (the states before it
        have been through the layers already). Both come from one pass through the layers: each layer's exact frames
        and the frames past them that only a row ending here would have, in one convolution, of which the layer keeps
        the exact ones' context, as a run would. With ``tokens``, the rest stops once the samples of the row's first
        ``tokens`` tokens are out (at least those; each layer makes only the frames they need)."""
        return preview_together([self], [tokens])[0]

    def _frames_until(self, tokens: int) -> list[int]:
        """Per layer, the output frames that the samples of the first ``tokens`` tokens need: the ISTFT frames that
        cover the last of those samples (after the "center" trim), and before each layer, its right reach more."""
        hop, n_fft = self.istft.hop, self.istft.n_fft
        needed = (tokens * 2 * hop - 1 + n_fft // 2) // hop + 1
        until = [needed]
        for layer in reversed(self.layers[1:]):
            until.append(until[-1] + layer.span - layer.padding)
        return until[::-1]

    @property
    def states_added(self) -> int:
        """States handed over so far (decoded or still waiting)."""
        return self.decoded_tokens + sum(len(part) for part in self.pending)

    def finish(self, states: npt.NDArray[np.float32] | None = None) -> npt.NDArray[np.float32]:
        """The row ended, its last ``states`` (if any) with it: the samples not yet returned, in one run."""
        return step_together([self], [states], [True])[0]

    def _check_open(self) -> None:
        if self.finished:
            raise RuntimeError("the row is finished")

    def _take_pending(self) -> torch.Tensor:
        """The states waiting, as the decoder's input frames; counted as decoded."""
        states = np.concatenate(self.pending) if self.pending else np.zeros((0, 0), dtype=np.float32)
        self.pending = []
        self.calls += 1
        self.decoded_tokens += len(states)
        return self._frames(states)

    def _frames(self, states: npt.NDArray[np.float32]) -> torch.Tensor:
        """States ``[tokens, hidden]`` to the decoder's input ``[1, hidden / 2, 2 * tokens]``, as DVAE lays them out:
        each token's two halves are its two mel frames."""
        half: int = self.decoder.decoder.conv_in[0].in_channels
        if not len(states):
            return self.parameter.new_zeros((1, half, 0))
        x = torch.from_numpy(states).to(self.parameter.device, self.parameter.dtype).T.unsqueeze(0)
        return x.reshape(1, 2, half, x.size(2)).permute(0, 2, 3, 1).flatten(2)

    def _empty_spectrum(self) -> torch.Tensor:
        bins = self.istft.n_fft // 2 + 1
        return torch.zeros((1, bins, 0), dtype=torch.complex64, device=self.parameter.device)

    def _spectrum(self, x: torch.Tensor) -> torch.Tensor:
        """The backbone's last layer norm and Vocos's head up to its ISTFT: frames to a complex spectrum."""
        x = self.vocos.backbone.final_layer_norm(x.transpose(1, 2))
        x = self.vocos.head.out(x).transpose(1, 2)
        magnitude, phase = x.chunk(2, dim=1)
        magnitude = torch.clip(torch.exp(magnitude), max=1e2)
        return magnitude * (torch.cos(phase) + 1j * torch.sin(phase))


def add_together(decoders: Sequence[StreamingDecoder], states: Sequence[npt.NDArray[np.float32]]) -> list[npt.NDArray[np.float32]]:
    """:meth:`StreamingDecoder.add` for several rows of the same ``Chat`` at once (:func:`step_together`)."""
    return step_together(decoders, states, [False] * len(decoders))


def step_together(
    decoders: Sequence[StreamingDecoder], states: Sequence[npt.NDArray[np.float32] | None], ends: Sequence[bool]
) -> list[npt.NDArray[np.float32]]:
    """:meth:`StreamingDecoder.add` (``end`` False) or :meth:`StreamingDecoder.finish` (``end`` True) for several rows
    of the same ``Chat`` at once: the rows whose run is due (and those that end) go through the layers together, each
    layer's per-frame part (its layer norms and matrix products) in one pass for all of them, so those weights are read
    once per run instead of once per row (:func:`_convolve`). Returns each row's new samples, in order, bit for bit
    what each gets alone."""
    empty = np.zeros(0, dtype=np.float32)
    for decoder, new, end in zip(decoders, states, ends, strict=True):
        decoder._check_open()
        if new is not None and len(new):
            decoder.pending.append(np.asarray(new, dtype=np.float32))
        decoder.finished = end
    due = [
        (decoder, end)
        for decoder, end in zip(decoders, ends, strict=True)
        if (decoder.decoded_tokens or decoder.pending)  # an empty row has no audio (a whole decode of it is an error)
        and (end or sum(len(part) for part in decoder.pending) >= decoder.run_tokens)
    ]
    if not due:
        return [empty for _ in decoders]
    out = dict(zip((id(decoder) for decoder, _ in due), _run_rows(*zip(*due, strict=True)), strict=True))
    return [out.get(id(decoder), empty) for decoder in decoders]


def run_together(decoders: Sequence[StreamingDecoder]) -> list[npt.NDArray[np.float32]]:
    """:meth:`StreamingDecoder.run_now` for several rows at once: the states waiting, each row's, in one run."""
    for decoder in decoders:
        decoder._check_open()
    waiting = [decoder for decoder in decoders if decoder.pending]
    empty = np.zeros(0, dtype=np.float32)
    if not waiting:
        return [empty for _ in decoders]
    out = dict(zip(map(id, waiting), _run_rows(waiting, [False] * len(waiting)), strict=True))
    return [out.get(id(decoder), empty) for decoder in decoders]


def preview_together(
    decoders: Sequence[StreamingDecoder], tokens: Sequence[int | None]
) -> list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]]:
    """:meth:`StreamingDecoder.preview` for several rows of the same ``Chat`` at once, their layers in one pass."""
    for decoder in decoders:
        decoder._check_open()
    empty = np.zeros(0, dtype=np.float32)
    rows = [
        (decoder, wanted) for decoder, wanted in zip(decoders, tokens, strict=True) if decoder.decoded_tokens or decoder.pending
    ]
    if not rows:
        return [(empty, empty) for _ in decoders]
    first = rows[0][0]
    _same_modules([decoder for decoder, _ in rows])
    untils = [None if wanted is None else decoder._frames_until(wanted) for decoder, wanted in rows]
    results: list[tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]] = []
    with torch.inference_mode():
        exact = [
            decoder._take_pending() if decoder.pending else decoder._frames(np.zeros((0, 0), dtype=np.float32))
            for decoder, _ in rows
        ]
        rest = [frames[:, :, :0] for frames in exact]
        for depth in range(len(first.layers)):
            reach = [None if until is None else until[depth] for until in untils]
            exact, rest = _ahead_layer([decoder.layers[depth] for decoder, _ in rows], exact, rest, reach)
        sizes = [size for now, after in zip(exact, rest, strict=True) for size in (now.size(2), after.size(2))]
        joined = torch.cat([frames for pair in zip(exact, rest, strict=True) for frames in pair], dim=2)
        spectra = iter(torch.split(first._spectrum(joined), sizes, dim=2))
        for (decoder, _), now_spectrum, after_spectrum in zip(rows, spectra, spectra, strict=False):
            istft = decoder.istft
            now = istft.run(now_spectrum, last=False)
            saved = (istft.sum.clone(), istft.envelope.clone(), istft.base, istft.emitted, istft.frames)
            try:
                after = istft.run(after_spectrum, last=True)
            finally:
                istft.sum, istft.envelope, istft.base, istft.emitted, istft.frames = saved
            results.append((now.float().cpu().numpy().reshape(-1), after.float().cpu().numpy().reshape(-1)))
    out = dict(zip((id(decoder) for decoder, _ in rows), results, strict=True))
    return [out.get(id(decoder), (empty, empty)) for decoder in decoders]


def _same_modules(rows: Sequence[StreamingDecoder]) -> None:
    first = rows[0]
    if any(row.decoder is not first.decoder or row.vocos is not first.vocos for row in rows):
        raise ValueError("rows decoded together must share the Chat's decoder and Vocos")


def _run_rows(rows: Sequence[StreamingDecoder], ends: Sequence[bool]) -> list[npt.NDArray[np.float32]]:
    """The waiting states of ``rows`` through the layers in one run (with ``ends``, a row's closing padding too); each
    row's samples that became final."""
    _same_modules(rows)
    first = rows[0]
    with torch.inference_mode():
        frames = [row._take_pending() for row in rows]
        for depth in range(len(first.layers)):
            frames = _run_layer([row.layers[depth] for row in rows], frames, ends)
        counts = [x.size(2) for x in frames]
        joined = first._spectrum(torch.cat(frames, dim=2)) if sum(counts) else None
        spectra = torch.split(joined, counts, dim=2) if joined is not None else [None] * len(rows)
        samples = [
            row.istft.run(spectrum if spectrum is not None else first._empty_spectrum(), last=end)
            for row, spectrum, end in zip(rows, spectra, ends, strict=True)
        ]
    return [part.float().cpu().numpy().reshape(-1) for part in samples]


def streaming_decoder(chat: Any, *, run_tokens: int = RUN_TOKENS) -> StreamingDecoder:
    """A streaming decoder of one row for a loaded ``ChatTTS.Chat``, on its own modules (weights shared). Its samples
    go out as soon as they are exact, :attr:`StreamingDecoder.delay` tokens after their own (a lead brings the first
    ones sooner: :class:`~ttsq.inference.audio.lead.LeadThenExact`)."""
    return StreamingDecoder(chat.decoder, chat.vocos, run_tokens=run_tokens)
