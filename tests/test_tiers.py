"""The two tiers of the suite: `make test` (the first) and `make test-all` (both, what CI runs).

tests/conftest.py's ``SECOND_TIER`` names what waits for the second tier. These checks keep it
honest: every entry names a test that exists (a renamed test would otherwise silently move
back into the first tier, or a deleted one leave a dead line), no test the break-on-purpose
slips rely on is in the second tier (the first tier alone must catch every slip), and the
Makefile and CI run what the README says.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _conftest_table(name: str):
    """tests/conftest.py's table ``name``, read from its source (pytest has already imported the
    conftest; importing it a second time would install the shape checks again)."""
    tree = ast.parse((ROOT / "tests" / "conftest.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == name:
            return ast.literal_eval(node.value)
    raise AssertionError(f"tests/conftest.py defines no {name}")


SECOND_TIER: dict[str, str] = _conftest_table("SECOND_TIER")
#: The tests that open the run (tests/conftest.py, for pytest-xdist's schedule).
LONGEST: tuple[str, ...] = _conftest_table("LONGEST")


def _defined_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}


def _names_a_test_that_exists(key: str) -> None:
    if key.startswith("fixture:"):
        name = key.removeprefix("fixture:")
        users = [
            p
            for p in (ROOT / "tests").rglob("test_*.py")
            if re.search(rf"def test_\w+\([^)]*\b{name}\b", p.read_text(encoding="utf-8"))
        ]
        assert users, f"no test uses the fixture {name!r}"
        return
    path, _, test = key.partition("::")
    assert (ROOT / path).is_file(), f"{path} does not exist"
    if test:
        assert test in _defined_functions(ROOT / path), f"{path} defines no {test}"


@pytest.mark.parametrize("key", sorted(SECOND_TIER))
def test_every_second_tier_entry_names_a_test_that_exists(key):
    _names_a_test_that_exists(key)
    assert SECOND_TIER[key].strip(), f"{key}: no reason given"


@pytest.mark.parametrize("key", LONGEST)
def test_every_longest_entry_names_a_test_that_exists(key):
    """A renamed long test would silently lose its place at the front of the run."""
    _names_a_test_that_exists(key)
    assert LONGEST.count(key) == 1, f"{key} is in LONGEST twice"


def test_the_slips_are_caught_by_the_first_tier():
    """Every test file a slip of scripts/dev/break_on_purpose.py runs is wholly first-tier."""
    source = (ROOT / "scripts" / "dev" / "break_on_purpose.py").read_text(encoding="utf-8")
    files = set(re.findall(r'"(tests/[\w/]+\.py)"', source))
    files |= {"tests/spec/" + f for f in re.findall(r'SPEC \+ "(\w+\.py)"', source)}
    assert files, "found no test file in break_on_purpose.py"
    for f in files:
        assert (ROOT / f).is_file(), f
        assert not any(key == f or key.startswith(f + "::") for key in SECOND_TIER), f


def test_make_test_is_the_first_tier_and_ci_runs_both():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    test = re.search(r"^test: .*\n\t(.+)$", makefile, re.M).group(1)
    test_all = re.search(r"^test-all: .*\n\t(.+)$", makefile, re.M).group(1)
    assert '-m "not second_tier"' in test
    assert "second_tier" not in test_all and '-m "' not in test_all  # no marker deselects
    ci = [
        line
        for line in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert "make test-all" in ci


def test_the_readme_says_what_each_tier_covers():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "make test-all" in readme
    assert "second tier" in readme.lower()
