"""The engine's own batch gain, with no service around it: 8 single calls vs one batch of 8.

The end-to-end ratio (ttsq vs the in-handler baseline) cannot exceed what batching gives the
engine itself, so :mod:`bench.service.throughput` measures that ceiling in the same run, in a separate
process (so its model memory is returned), with the same texts, voice and token count:

    python -m bench.engine.raw_batch MODEL_DIR TOKENS   # prints one JSON line
"""

from __future__ import annotations

import argparse
import json
import time

from settings import Settings
from ttsq.domain.voices import BUILTIN_VOICES
from ttsq.inference.base import SynthesisRequest, synthesize
from ttsq.inference.engines.chattts import ChatTTSEngine

TEXTS = (
    "你好，欢迎使用这个语音服务。",
    "今天天气很好，我们出去走走吧。",
    "请在听到提示音之后留言。",
    "这是一段用于测试吞吐量的文字。",
)
"""The benchmarks' texts: this one, `bench.service.throughput` (its end-to-end and submit sections) and the GPU benchmark
post them."""


def measure(model_source: str, tokens: int, batch: int = 8) -> dict[str, float]:
    """Seconds for ``batch`` single calls, one call with all of them, and the ratio."""
    config = Settings(_env_file=None, model=model_source, device="cpu", cpu_threads=1, max_new_token=tokens, min_new_token=tokens)
    engine = ChatTTSEngine(config.engine_config())
    engine.load()
    engine.warm_up()
    speaker = engine.speaker_from_seed(BUILTIN_VOICES["zh_female"])
    requests = [SynthesisRequest(text=TEXTS[n % len(TEXTS)], speaker=speaker, seed=n + 1) for n in range(batch)]
    started = time.perf_counter()
    for request in requests:
        synthesize(engine, request)
    singles_s = time.perf_counter() - started
    started = time.perf_counter()
    for _ in engine.synthesize_batch(requests):
        pass
    batch_s = time.perf_counter() - started
    return {"batch": batch, "tokens": tokens, "singles_s": singles_s, "batch_s": batch_s, "gain": singles_s / batch_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model_source")
    parser.add_argument("tokens", type=int)
    args = parser.parse_args()
    print(json.dumps(measure(args.model_source, args.tokens)))


if __name__ == "__main__":
    main()
