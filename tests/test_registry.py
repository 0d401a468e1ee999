"""Guard: every name in ``refimpl.algorithms.NAMES`` has everything docs/adding_an_algorithm.md
asks for (``scripts/dev/new_algorithm.py`` writes all of it for a new name; its ``PLACES`` are
the files below). Adding a name to ``NAMES`` without one of these fails here, naming what is
missing:

* its docs page ``docs/algorithms/<name>.md``, in the site's nav and in the side-by-side table,
  with its sections "What it does to entropy" and "Other implementations" and the
  ``<!-- quick-facts -->`` marker (``tests/test_docs_hooks.py`` checks that the block under
  the marker is what ``python scripts/dev/algorithm_pages.py`` generates from the code now:
  ``docs/_algorithm_blocks.py`` needs no line for a new algorithm);
* its spec test module ``tests/spec/test_<name>.py`` with a ``test_worked_example``, indexed in
  ``docs/spec.md``;
* its API reference entry (``::: refimpl.algorithms.<name>``);
* a colour of its own in the figures (``refimpl.plots.ALGO_COLORS``);
* its row in the README's table;
* its verl registration (``refimpl_<name>`` as advantage estimator and policy loss). TRL has no
  registry: ``RefimplGRPOTrainer`` takes any name in ``NAMES``;
* the BibTeX of the paper it implements (every arXiv id its module docstring names) in
  ``docs/references.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from matplotlib.colors import is_color_like, to_hex

from refimpl import algorithms

ROOT = Path(__file__).resolve().parents[1]
NAMES = algorithms.NAMES


def _text(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


@pytest.mark.parametrize("name", NAMES)
def test_docs_page_in_nav_and_table(name):
    """``docs/algorithms/<name>.md`` exists, is in mkdocs.yml's nav, has a row in the
    side-by-side table of docs/math.md, its Quick facts marker and its sections on
    entropy and on other implementations."""
    page = f"algorithms/{name}.md"
    assert (ROOT / "docs" / page).is_file(), f"docs/{page} is missing"
    assert re.search(rf":\s*{re.escape(page)}\s*$", _text("mkdocs.yml"), re.M), (
        f"{page} is not in mkdocs.yml's nav"
    )
    rows = [line for line in _text("docs/math.md").splitlines() if line.startswith("| [")]
    assert any(f"]({page})" in row for row in rows), f"docs/math.md has no row for {page}"
    assert "<!-- quick-facts -->" in _text(f"docs/{page}"), (
        f"docs/{page}: no <!-- quick-facts --> line under its title "
        "(then run `.venv/bin/python scripts/dev/algorithm_pages.py`)"
    )
    headings = re.findall(r"^## (.+?)\s*$", _text(f"docs/{page}"), re.M)
    for section in ("What it does to entropy", "Other implementations"):
        assert section in headings, f"docs/{page}: no '## {section}' section"


@pytest.mark.parametrize("name", NAMES)
def test_spec_test_module_with_worked_example_indexed(name):
    """``tests/spec/test_<name>.py`` exists, tests the worked example of the page, and
    ``docs/spec.md`` indexes it."""
    module = f"tests/spec/test_{name}.py"
    assert (ROOT / module).is_file(), f"{module} is missing"
    assert "def test_worked_example" in _text(module), f"{module} has no test_worked_example"
    assert f"(../{module})" in _text("docs/spec.md"), f"docs/spec.md does not index {module}"


@pytest.mark.parametrize("name", NAMES)
def test_api_reference_entry(name):
    """docs/api/algorithms.md renders the module's docstrings."""
    entries = re.findall(r"^::: (\S+)\s*$", _text("docs/api/algorithms.md"), re.M)
    assert f"refimpl.algorithms.{name}" in entries


@pytest.mark.parametrize(
    "name",
    NAMES,
)
def test_colour(name):
    """The figures draw the algorithm in a colour of its own: ``ALGO_COLORS`` has an entry
    that matplotlib accepts and that no other algorithm uses."""
    from refimpl.plots import ALGO_COLORS

    assert name in ALGO_COLORS, f"refimpl.plots.ALGO_COLORS has no colour for {name}"
    colour = ALGO_COLORS[name]
    assert is_color_like(colour), colour
    others = {to_hex(ALGO_COLORS[n]) for n in NAMES if n != name and n in ALGO_COLORS}
    assert to_hex(colour) not in others, f"{name} shares its colour {colour}"


@pytest.mark.parametrize("name", NAMES)
def test_readme_row(name):
    """The README's table of algorithms links the file."""
    rows = [line for line in _text("README.md").splitlines() if line.startswith("|")]
    link = f"(refimpl/algorithms/{name}.py)"
    assert any(link in row for row in rows), f"README.md's table has no row linking {link}"


def test_verl_registration():
    """verl finds every algorithm as ``refimpl_<name>``, as advantage estimator and as policy
    loss, and the functions it finds are ours."""
    from verl.trainer.ppo import core_algos

    from refimpl.scaleup import verl as rv

    missing = [n for n in NAMES if n not in rv.REGISTERED]
    assert not missing, f"not registered with verl: {missing}"
    for name in NAMES:
        assert rv.REGISTERED[name] == f"refimpl_{name}"
        assert core_algos.get_adv_estimator_fn(f"refimpl_{name}") is rv.ESTIMATORS[name]
        assert core_algos.get_policy_loss_fn(f"refimpl_{name}") is rv.POLICY_LOSSES[name]


@pytest.mark.parametrize("name", NAMES)
def test_papers_in_references(name):
    """Every arXiv id the algorithm file's docstring cites has its BibTeX entry (an ``eprint``
    field) in docs/references.md."""
    doc = algorithms.get(name).__doc__ or ""
    cited = set(re.findall(r"arXiv (\d{4}\.\d{4,5})", doc))
    assert cited, f"the docstring of {name}.py cites no arXiv id"
    entries = set(re.findall(r"eprint\s*=\s*\{(\d{4}\.\d{4,5})\}", _text("docs/references.md")))
    assert cited <= entries, f"no BibTeX in docs/references.md for {sorted(cited - entries)}"


def test_the_scaffold_writes_every_place_checked_here():
    """``scripts/dev/new_algorithm.py`` (step 1 of the tutorial) touches every file this guard
    reads, so a name it creates passes here before any prose is written."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "new_algorithm", ROOT / "scripts" / "dev" / "new_algorithm.py"
    )
    scaffold = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(scaffold)
    places = {p.replace("{name}", "<name>") for p in scaffold.PLACES}
    read_here = {
        "docs/algorithms/<name>.md", "mkdocs.yml", "docs/math.md",
        "tests/spec/test_<name>.py", "docs/spec.md",
        "docs/api/algorithms.md", "README.md", "refimpl/algorithms/__init__.py",
        "refimpl/algorithms/<name>.py",
    }  # fmt: skip
    assert read_here <= places, sorted(read_here - places)
