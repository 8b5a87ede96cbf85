"""README and docs/ point at things that exist: every relative link leads to a file (and, with a ``#``,
to a heading in it), and every repository path they name is in the tree.

README is an index into docs/, and the pages name modules, scripts and manifests by path; a file moved or
a heading renamed would otherwise leave a reader at a dead end that no other test notices.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
"""A Markdown inline link's target."""
TREE_PATH = re.compile(r"(?<![\w/.-])((?:ttsq|tests|scripts|deploy|k8s|bench|loadtest|static|docs)/[\w./@-]*\w)")
"""A path into one of the repository's folders, as the pages write them (``ttsq/store/queue.py``); it stops
before a brace, so ``ttsq/store/lua/{a,b}.lua`` is checked as its folder."""
CODE_BLOCK = re.compile(r"^```.*?^```", re.M | re.S)


def page_id(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces to hyphens."""
    text = CODE_BLOCK.sub("", page.read_text(encoding="utf-8"))
    slugs = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, re.M):
        slugs.add(re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-"))
    return slugs


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(CODE_BLOCK.sub("", page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto: — not ours to check
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading #{anchor} in {linked.relative_to(ROOT).as_posix()}")
    return broken


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_relative_link_leads_somewhere(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_path_named_is_in_the_tree(page: Path) -> None:
    named = set(TREE_PATH.findall(page.read_text(encoding="utf-8")))
    assert sorted(path for path in named if not (ROOT / path).exists()) == []


def test_readme_links_every_page_of_docs() -> None:
    """README is the index: a page under docs/ that it does not link is a page nobody finds."""
    linked = {target.partition("#")[0] for target in LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))}
    assert sorted(page_id(page) for page in PAGES[1:] if page_id(page) not in linked) == []
