"""The README is a page a newcomer finishes: it opens with the two commands, stays within
``MAX_LINES``, links only files that exist, and sends the reader to the docs pages that hold
what it no longer says itself (run safety, numerics, the measured results), which the site's
nav lists. The site build does not read the README, so its links are checked here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from refimpl import algorithms

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_LINES = 150

# [text](target) and ![alt](target); the target up to a space, a closing bracket or an anchor.
LINK = re.compile(r"\]\(([^)\s#]+)[^)]*\)")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")

# The README's former sections and the docs page each one now lives on (its heading there).
MOVED = {
    "docs/safety.md": "## Runs are safe to leave overnight",
    "docs/numerics.md": "# Numbers and machines: what reproduces where",
    "docs/results.md": "# Measured",
}


def _text() -> str:
    return README.read_text(encoding="utf-8")


def relative_links(text: str) -> list[str]:
    """The targets of the markdown links and images in ``text`` that name a repository path
    (no URL scheme, no anchor-only link), without their anchors."""
    return [t for t in LINK.findall(text) if not SCHEME.match(t) and not t.startswith("/")]


def test_opens_with_the_two_commands():
    """The first code block, right under the title, is ``make demo`` then ``make test``."""
    lines = _text().splitlines()
    assert lines[0].startswith("# refimpl")
    block = lines[lines.index("```bash") + 1 : lines.index("```")]
    assert lines.index("```bash") <= 3, "the commands come first, under the title"
    assert [line.split("#")[0].strip() for line in block] == ["make demo", "make test"]


def test_the_algorithm_count_is_the_registrys():
    """The opening says how many algorithms there are besides GRPO, and the number is the
    registry's (``refimpl.algorithms.NAMES``), so a new algorithm fails here until it is
    counted."""
    words = "ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen".split()
    m = re.search(r"GRPO and (\w+) algorithms that modify it", " ".join(_text().split()))
    assert m, "README.md no longer says 'GRPO and <n> algorithms that modify it'"
    others = len(algorithms.NAMES) - 1
    assert m.group(1) in words, f"{m.group(1)!r}: a number word from ten to eighteen"
    assert words.index(m.group(1)) + 10 == others, (
        f"README.md says GRPO and {m.group(1)} others; the registry has {others} besides GRPO"
    )


def test_is_short():
    n = len(_text().splitlines())
    assert n <= MAX_LINES, f"README.md has {n} lines; the limit is {MAX_LINES}"


def test_every_linked_file_exists():
    """A link the code host would show as broken fails here (the strict site build never
    sees the README)."""
    missing = sorted({t for t in relative_links(_text()) if not (ROOT / t).exists()})
    assert missing == [], f"README.md links files that do not exist: {missing}"


def test_the_link_check_sees_a_missing_file():
    text = (
        "[a](refimpl/core.py#x), [b](refimpl/nope.py), ![c](docs/figures/x.png), [d](https://e.org)"
    )
    assert relative_links(text) == ["refimpl/core.py", "refimpl/nope.py", "docs/figures/x.png"]
    assert not (ROOT / "refimpl/nope.py").exists()


@pytest.mark.parametrize("page", sorted(MOVED))
def test_moved_sections_are_docs_pages_it_links(page):
    """What the README no longer holds is on a docs page with its old heading, the README
    links that page, and the site's nav lists it."""
    lines = (ROOT / page).read_text(encoding="utf-8").splitlines()
    assert any(line.startswith(MOVED[page]) for line in lines), f"{page}: no {MOVED[page]!r}"
    assert page in relative_links(_text()), f"README.md does not link {page}"
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(rf":\s*{re.escape(page.removeprefix('docs/'))}\s*$", nav, re.M), page
