"""The README is a page a newcomer finishes: it opens with the two commands, stays within
``MAX_LINES``, links only files that exist, and sends the reader to the docs pages that hold
what it no longer says itself (run safety, numerics, the measured results), which the site's
nav lists. The site build does not read the README, so its links are checked here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

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


#: How much of the README a newcomer sees first (a laptop screen and a scroll).
FIRST_SCREEN = 50


def test_states_no_count_that_goes_stale():
    """No count a change elsewhere makes wrong: the README says "GRPO and the algorithms
    that modify it" (the table lists them, so a new algorithm is one row, docs/
    adding_an_algorithm.md), and no number of tests."""
    text = " ".join(_text().split())
    numbers = r"\b(\d[\d,]*|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty)"
    assert not re.search(r"GRPO and " + numbers, text, re.I), "a count of the algorithms"
    assert not re.search(numbers + r" (other )?algorithms (that|besides|here)\b", text, re.I)
    assert not re.search(r"\b\d[\d,]* (tests|passed)\b", text)


def test_first_screen_is_about_the_project():
    """The first screen holds the two commands, the figure, the table of algorithms and
    where to start, and no machine, commit or date (those live on docs/benchmarks.md and
    docs/numerics.md, which it links)."""
    lines = _text().splitlines()
    first = "\n".join(lines[:FIRST_SCREEN])
    assert "![" in first and "(docs/figures/" in first, "no figure on the first screen"
    assert "(refimpl/algorithms/grpo.py)" in first, "the table of algorithms starts lower"
    assert "## What to read first" in "\n".join(lines), "no 'What to read first'"
    text = _text()
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a date: it belongs in docs/"
    assert not re.search(r"\bcommit [0-9a-f]{7,40}\b", text), "a commit: it belongs in docs/"
    assert not re.search(r"\b(Xeon|EPYC|Ryzen|Core i\d)\b", text), "a machine: docs/numerics.md"


def test_what_to_read_first_lists_every_notebook():
    """Every notebook of notebooks/ is in the reading order, by its number."""
    section = _text().split("## What to read first", 1)[1].split("\n## ", 1)[0]
    numbers = sorted(p.name[:2] for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert numbers, "no notebooks found"
    missing = [n for n in numbers if not re.search(rf"\b{n}\b", section)]
    assert missing == [], f"'What to read first' leaves out notebooks {missing}"


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
