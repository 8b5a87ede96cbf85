"""How big the rooms of ``ttsq/`` are: every class with more than ``--max-methods`` methods and every module longer than
``--max-lines`` lines (issue 29's limits: 30 and 800). A class of Redis key names (``ttsq/store/keys.py``) is a
registry, not a room, and is left out. Prints what exceeds; exits 1 if anything does.

    .venv/bin/python scripts/room_sizes.py [--all]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REGISTRIES = {("ttsq/store/keys.py", "Keys")}
"""Classes that only name things (one method a Redis key), allowed past the method limit."""


def rooms(package: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Each module's line count, and each class's count of the methods defined in its own body."""
    modules: dict[str, int] = {}
    classes: dict[str, int] = {}
    for path in sorted(package.rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef) and (name, node.name) not in REGISTRIES:
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
                classes[f"{name}:{node.name}"] = len(methods)
    return modules, classes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-methods", type=int, default=30)
    parser.add_argument("--max-lines", type=int, default=800)
    parser.add_argument("--all", action="store_true", help="list the ten largest of each, not only those over")
    args = parser.parse_args()
    modules, classes = rooms(ROOT / "ttsq")
    over = 0
    limits = (("modules", modules, args.max_lines, "lines"), ("classes", classes, args.max_methods, "methods"))
    for title, sizes, limit, unit in limits:
        ranked = sorted(sizes.items(), key=lambda item: -item[1])
        shown = ranked[:10] if args.all else [item for item in ranked if item[1] > limit]
        over += sum(1 for _, size in ranked if size > limit)
        print(f"{title} over {limit} {unit}:" if not args.all else f"largest {title} (limit {limit} {unit}):")
        for name, size in shown:
            print(f"  {size:5d}  {name}{'  OVER' if size > limit else ''}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
