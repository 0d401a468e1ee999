"""``docs/fidelity.md`` against the code: every assumption [A] is a switch that exists.

The page has one table per algorithm (plus one shared by all) with the columns
``element | source | mark | switch``. An [A] row must name, in backticks, at least one field
of the ``Config`` of its algorithm (of every algorithm for the shared table); a name written
``field="value"`` names ``field``, and the value must then be one the field accepts.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from refimpl import algorithms

PAGE = Path(__file__).resolve().parents[2] / "docs" / "fidelity.md"


def algorithm_title(name: str) -> str:
    """The title an algorithm goes by: its module docstring's first line, up to the first
    ":" ("GRPO", "Dr. GRPO", "Forking tokens"; a new algorithm's, from the title
    ``scripts/dev/new_algorithm.py`` was given)."""
    doc = algorithms.get(name).__doc__ or ""
    return doc.strip().splitlines()[0].split(":")[0].strip()


#: Section title (before the first " (") → the algorithms its table describes: the shared
#: table, and one table per algorithm under the algorithm's title (read off the registry, so
#: a new algorithm's section is known without a line here).
SECTIONS = {
    "Shared by every algorithm": algorithms.NAMES,
    **{algorithm_title(name): (name,) for name in algorithms.NAMES},
}

#: Algorithms the page has no table for (every other one must have its table).
WITHOUT_TABLE = ("rloo",)


#: Sections that are not an algorithm's element table (their tables have other columns).
PEER_SECTION = "Peer readings of GTPO and GRPO-S"


def section_titles() -> list[str]:
    return [
        line[3:].split(" (")[0].strip()
        for line in PAGE.read_text().splitlines()
        if line.startswith("## ")
    ]


def table_rows(wanted: object = SECTIONS) -> list[tuple[str, list[str]]]:
    """``(section title, cells)`` for every body row of every table in the ``wanted``
    sections (by default the algorithm tables: ``[element, source, mark, switch]``)."""
    rows, section = [], None
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].split(" (")[0].strip()
        elif line.startswith("|") and section in wanted:
            # Cells split on "|" not escaped as "\\|" (GitHub's way to write | in a cell).
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if cells[0] in ("element", "difference", "---") or set(cells[0]) <= {"-", " "}:
                continue
            rows.append((section, cells))
    return rows


def test_page_has_every_section_and_four_columns():
    """The parser sees one table per algorithm (all but ``WITHOUT_TABLE``) plus the shared
    one, and no section it cannot place; each row with 4 cells (a row with a stray ``|``
    inside a cell would shift the mark and switch columns)."""
    assert len(SECTIONS) == len(algorithms.NAMES) + 1  # no two algorithms share a title
    assert set(WITHOUT_TABLE) <= set(algorithms.NAMES)
    wanted = {"Shared by every algorithm"} | {
        algorithm_title(name) for name in algorithms.NAMES if name not in WITHOUT_TABLE
    }
    assert set(section_titles()) == wanted | {PEER_SECTION}
    rows = table_rows()
    assert {section for section, _ in rows} == wanted
    for section, cells in rows:
        assert len(cells) == 4, (section, cells)


def _assumption_rows():
    return [(s, c) for s, c in table_rows() if "[A]" in c[2]]


def test_there_are_assumption_rows():
    """The check below is not vacuous: the page lists assumptions for most algorithms."""
    sections = {s for s, _ in _assumption_rows()}
    assert {"Shared by every algorithm", "DAPO", "GTPO", "GRPO-S", "TEPO"} <= sections


@pytest.mark.parametrize(
    ("section", "cells"),
    _assumption_rows(),
    ids=lambda v: v if isinstance(v, str) else re.sub(r"\W+", "_", v[0])[:40],
)
def test_every_assumption_names_an_existing_switch(section, cells):
    """The switch column of an [A] row names at least one Config field of its algorithm(s);
    ``field="value"`` must be a value the Config accepts."""
    names = re.findall(r"`([^`]+)`", cells[3])
    assert names, f"{section}: [A] row without a switch: {cells[0]}"
    for name in names:
        field, _, value = name.partition("=")
        for algo in SECTIONS[section]:
            cls = algorithms.get(algo).Config
            assert field in {f.name for f in dataclasses.fields(cls)}, (
                f"{section}: `{field}` is not a field of {algo}.Config ({cells[0]})"
            )
            if value:
                cls(**{field: value.strip("\"'")})  # raises ValueError if not accepted


PEER_FILE = Path(__file__).resolve().parent / "test_peer_readings.py"
VERDICTS = ("follows the text", "plausible", "misreading", "numerical", "not a reading")


def test_peer_table_every_row_has_a_source_and_a_verdict():
    """Each row of the peer-readings table names a peer (repository or file) and starts its
    verdict with one of the verdict words; the table covers the three peers of the page."""
    rows = table_rows((PEER_SECTION,))
    assert len(rows) >= 8
    for _, cells in rows:
        assert len(cells) == 5, cells
        difference, peer, _, verdict, _ = cells
        assert any(p in peer for p in ("textpolicy", "verl fork", "TRL/unsloth")), difference
        assert verdict.startswith(VERDICTS), (difference, verdict)
    peers = " ".join(cells[1] for _, cells in rows)
    assert all(p in peers for p in ("textpolicy", "verl fork", "TRL/unsloth"))


def test_every_plausible_peer_reading_is_a_switch_with_a_test():
    """A plausible row, and a row whose peer follows the paper's text, names a
    ``field="value"`` (or ``field``) of GTPO's or GRPO-S's Config that accepts the value, and a
    test function that exists in test_peer_readings.py."""
    tests = set(re.findall(r"^def (test_\w+)", PEER_FILE.read_text(), flags=re.M))
    configs = [algorithms.get("gtpo").Config, algorithms.get("grpo_s").Config]
    plausible = [
        c
        for _, c in table_rows((PEER_SECTION,))
        if c[3].startswith(("plausible", "follows the text"))
    ]
    assert len(plausible) >= 3
    for cells in plausible:
        switch = cells[4]
        names = [n for n in re.findall(r"`([^`]+)`", switch) if not n.startswith("test_")]
        assert names, cells[0]
        field, _, value = names[0].partition("=")
        owners = [c for c in configs if field in {f.name for f in dataclasses.fields(c)}]
        assert owners, f"`{field}` is not a GTPO/GRPO-S switch ({cells[0]})"
        if value:
            assert any(_accepts(c, field, value.strip("\"'")) for c in owners), names[0]
        named_tests = re.findall(r"`(test_\w+)`", switch)
        assert named_tests and set(named_tests) <= tests, (cells[0], named_tests)


def _accepts(cls, field: str, value: str) -> bool:
    try:
        cls(**{field: value})
    except ValueError:
        return False
    return True
