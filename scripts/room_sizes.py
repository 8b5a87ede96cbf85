"""How big the rooms are: no class in ``ttsq/`` or the top-level processes with more than ``--max-methods`` methods
(25) and no module longer than ``--max-lines`` lines (600). A class at the limit is a sign to split it by concept, not
to cut a file off: the limits leave room for what a concept gains later. Part of ``make lint``; exits 1 past a limit.

Two kinds of exception, each named below with its reason: registries, which only name things and grow with what they
name (``Keys``: one method a Redis key; ``settings.py``: one field a setting, and the configs each process reads), and
rooms known to be too big, to split (each says so; the check fails once one fits, so that its line goes too).

    .venv/bin/python scripts/room_sizes.py [--all]
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

REGISTRIES = {
    "ttsq/store/keys.py:Keys": "a Redis key name per method",
    "settings.py": "the field registry: one field a setting, each with its description, and the config each process reads",
    "settings.py:Settings": "the field registry's validators and the configs it projects",
}
"""What only names things: allowed past the limits."""

TO_SPLIT: dict[str, str] = {}
"""Known to be over a limit and left for their own change: each one is to be split by concept (none now)."""


def rooms() -> tuple[dict[str, int], dict[str, int]]:
    """Each module's line count, and each class's count of the methods defined in its own body: the package and the
    process modules at the top (``app.py``, the routers, ``worker.py``, ``settings.py``)."""
    modules: dict[str, int] = {}
    classes: dict[str, int] = {}
    for path in sorted([*ROOT.glob("*.py"), *(ROOT / "ttsq").rglob("*.py")]):
        name = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        modules[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                methods = [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
                classes[f"{name}:{node.name}"] = len(methods)
    return modules, classes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-methods", type=int, default=25)
    parser.add_argument("--max-lines", type=int, default=600)
    parser.add_argument("--all", action="store_true", help="list the ten largest of each, not only those over")
    args = parser.parse_args()
    modules, classes = rooms()
    failures: list[str] = []
    limits = (("modules", modules, args.max_lines, "lines"), ("classes", classes, args.max_methods, "methods"))
    for title, sizes, limit, unit in limits:
        ranked = sorted(sizes.items(), key=lambda item: -item[1])
        if args.all:
            print(f"largest {title} (limit {limit} {unit}):")
            for name, size in ranked[:10]:
                print(f"  {size:5d}  {name}{'  OVER' if size > limit else ''}")
        for name, size in ranked:
            if size > limit and name not in REGISTRIES and name not in TO_SPLIT:
                failures.append(f"{name}: {size} {unit}, over {limit}: split it by concept")
        for name in TO_SPLIT:
            if name in sizes and sizes[name] <= limit:
                failures.append(f"{name}: {sizes[name]} {unit}, within {limit} now: take it off TO_SPLIT")
            elif name in sizes and not args.all:
                print(f"known, {TO_SPLIT[name]}: {name} ({sizes[name]} {unit})")
    for name in [*REGISTRIES, *TO_SPLIT]:
        if name not in modules and name not in classes:
            failures.append(f"{name}: named as an exception, but there is no such module or class")
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
