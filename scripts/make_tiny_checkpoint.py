"""Generate the tiny random-weight ChatTTS checkpoint (offline, a few MB, seconds).

Usage: ``python scripts/make_tiny_checkpoint.py OUT_DIR [--seed N]``. Reuses an intact
checkpoint already in OUT_DIR. See :mod:`ttsq.tiny_checkpoint`.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ttsq.tiny_checkpoint import build_tiny_checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate a tiny random-weight ChatTTS checkpoint.")
    parser.add_argument("out_dir", type=Path, help="directory to create (reused when already complete)")
    parser.add_argument("--seed", type=int, default=0, help="weight seed; the same seed gives identical files")
    args = parser.parse_args(argv)
    started = time.monotonic()
    path = build_tiny_checkpoint(args.out_dir, seed=args.seed)
    print(f"tiny checkpoint ready at {path} ({time.monotonic() - started:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
