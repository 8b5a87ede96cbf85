"""No comment or docstring cites an issue number: it says what the behaviour is and why.

"Issue N's fencing token" means nothing to a reader without the tracker, and nothing at all once the tracker
moves; "the fencing token" says the same to everyone. The issues and their figures belong in RELIABILITY.md and
BENCHMARKS.md, which may cite them. An upstream project's bug (``libsndfile issue 1095``) is a reference a
reader can follow, named by its project, and stays.
"""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CITATION = re.compile(r"(?:([\w.-]+)\s+)?\b([Ii]ssues? #?\d+)\b")
"""An issue number, with the word before it (which names the project for an upstream bug)."""
UPSTREAM = {"libsndfile", "python-soundfile"}
"""Projects whose own trackers a comment may cite (the word right before "issue")."""
COMMENTED = ("Makefile", ".mk", ".sh", ".toml", ".yml", ".yaml")
"""Files whose ``#`` comments are checked, besides Python's."""
SHELL_COMMENT = re.compile(r"(?:^|\s)#.*$")
UNTRACKED = {".venv", "var", ".git", "node_modules"}


def tracked_files() -> list[Path]:
    """The repository's files as git knows them; outside a checkout, the tree less what is never committed."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60)
    except (OSError, subprocess.CalledProcessError):
        return sorted(p for p in ROOT.rglob("*") if p.is_file() and not UNTRACKED & set(p.relative_to(ROOT).parts))
    return [ROOT / name for name in listed.stdout.decode().split("\0") if name and (ROOT / name).is_file()]


def citations(text: str) -> Iterator[tuple[int, str]]:
    """(offset, cited text) of each issue number in ``text`` that is not an upstream project's."""
    for match in CITATION.finditer(text):
        if match.group(1) not in UPSTREAM:
            yield match.start(2), match.group(2)


def python_citations(source: str) -> Iterator[tuple[int, str]]:
    """(line, cited text) in a module's comments and in every string that stands as a statement: the docstrings of
    modules, classes and functions, and those the project writes under an assignment."""
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield from ((token.start[0], cited) for _, cited in citations(token.string))
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            text = node.value.value
            yield from ((node.lineno + text.count("\n", 0, at), cited) for at, cited in citations(text))


def shell_citations(source: str) -> Iterator[tuple[int, str]]:
    """(line, cited text) in the ``#`` comments of a Makefile, shell script or TOML/YAML file."""
    for number, line in enumerate(source.splitlines(), 1):
        comment = SHELL_COMMENT.search(line)
        if comment:
            yield from ((number, cited) for _, cited in citations(comment.group(0)))


def test_no_comment_cites_an_issue_number() -> None:
    found = []
    for path in tracked_files():
        if path.suffix == ".py":
            cited = python_citations(path.read_text(encoding="utf-8"))
        elif path.name.endswith(COMMENTED):
            cited = shell_citations(path.read_text(encoding="utf-8"))
        else:
            continue
        found += [f"{path.relative_to(ROOT).as_posix()}:{line}: {text}" for line, text in cited]
    assert found == [], "say what the behaviour is, not which issue asked for it:\n" + "\n".join(found)


def test_an_upstream_bug_may_be_cited_and_ours_may_not() -> None:
    """The check itself: it finds a citation in a comment and in every kind of docstring, and lets an upstream
    project's bug through, so the empty list above is not an empty check."""
    source = '''"""Module (issue 19)."""
X = 1
"""Attribute: see libsndfile issue 1095 and
python-soundfile issues 233 and 426."""
# comment citing Issue #20


def f() -> None:
    """Function: issues 21 and 22."""
    y = "a string that is no docstring: issue 23"
'''
    assert sorted(python_citations(source)) == [(1, "issue 19"), (5, "Issue #20"), (9, "issues 21")]
    assert list(shell_citations("run: ## the Makefile's line (issue 24)\n\techo 'issue 25'  # an issue 26\n")) == [
        (1, "issue 24"),
        (2, "issue 26"),
    ]
