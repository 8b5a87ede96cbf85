"""Print the requirements of pyproject.toml extras, one per line, for the image build.

The images install ttsq's dependencies only and run the source tree from /app (see the
Dockerfile for why), so the build needs the extras' requirement lists without installing the
project itself. Self-references such as ``ttsq[api]`` inside an extra are expanded.

    python requirements.py pyproject.toml worker > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

SELF_REFERENCE = re.compile(r"^\s*(?P<name>[A-Za-z0-9_.-]+)\s*\[(?P<extras>[^\]]+)\]\s*$")


def requirements(pyproject: Path, extras: list[str]) -> list[str]:
    project = tomllib.loads(pyproject.read_text())["project"]
    name: str = project["name"]
    optional: dict[str, list[str]] = project.get("optional-dependencies", {})
    seen: set[str] = set()
    result: list[str] = list(project.get("dependencies", []))

    def expand(extra: str) -> None:
        if extra in seen:
            return
        if extra not in optional:
            raise SystemExit(f"{pyproject}: no extra named {extra!r} (have: {', '.join(sorted(optional))})")
        seen.add(extra)
        for requirement in optional[extra]:
            match = SELF_REFERENCE.match(requirement.split(";")[0])
            if match and match["name"].lower() == name.lower():
                for inner in match["extras"].split(","):
                    expand(inner.strip())
            elif requirement not in result:
                result.append(requirement)

    for extra in extras:
        expand(extra)
    return result


def main(argv: list[str]) -> None:
    if len(argv) < 3:
        raise SystemExit("usage: requirements.py PYPROJECT EXTRA [EXTRA ...]")
    print("\n".join(requirements(Path(argv[1]), argv[2:])))


if __name__ == "__main__":
    main(sys.argv)
