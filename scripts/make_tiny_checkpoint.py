"""Generate a random-weight ChatTTS checkpoint (offline).

Usage: ``python scripts/make_tiny_checkpoint.py OUT_DIR [--size tiny|full] [--seed N]``.

``tiny`` (the default) is a few MB and builds in seconds; ``full`` has ChatTTS's real dimensions
(about 1.1 GB, ~10 s, ~0.75 GB of memory above the imports) and stands in for the real model's
cost on CPU. Both speak noise. Reuses an intact checkpoint already in OUT_DIR. See
:mod:`ttsq.inference.engines.checkpoint`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ttsq.inference.engines.checkpoint import ASSET_FILES, CHECKPOINT_SIZES, build_random_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate a random-weight ChatTTS checkpoint.")
    parser.add_argument("out_dir", type=Path, help="directory to create (reused when already complete)")
    parser.add_argument(
        "--size", choices=CHECKPOINT_SIZES, default="tiny", help="tiny (a few MB) or full (ChatTTS's real dims, ~1.1 GB)"
    )
    parser.add_argument("--seed", type=int, default=0, help="weight seed; the same seed gives identical files")
    args = parser.parse_args(argv)
    started = time.monotonic()
    path = build_random_checkpoint(args.out_dir, size=args.size, seed=args.seed)
    size_mb = sum((path / rel).stat().st_size for rel in ASSET_FILES) / 1e6
    print(f"{args.size} checkpoint ready at {path} ({size_mb:,.1f} MB, {time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
