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

#: Section title (before the first " (") → the algorithms its table describes.
SECTIONS = {
    "Shared by every algorithm": algorithms.NAMES,
    "GRPO": ("grpo",),
    "DAPO": ("dapo",),
    "Dr. GRPO": ("dr_grpo",),
    "GSPO": ("gspo",),
    "GPG": ("gpg",),
    "GTPO": ("gtpo",),
    "GRPO-S": ("grpo_s",),
    "TEPO": ("tepo",),
    "Clip-Cov": ("clip_cov",),
    "KL-Cov": ("kl_cov",),
    "Forking tokens": ("forking_tokens",),
    "Entropy bonus": ("entropy_bonus",),
}


def table_rows() -> list[tuple[str, list[str]]]:
    """``(section title, [element, source, mark, switch])`` for every body row of every
    table on the page."""
    rows, section = [], None
    for line in PAGE.read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].split(" (")[0].strip()
        elif line.startswith("|") and section is not None:
            # Cells split on "|" not escaped as "\\|" (GitHub's way to write | in a cell).
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip()[1:-1])]
            if cells[0] in ("element", "---") or set(cells[0]) <= {"-", " "}:
                continue
            rows.append((section, cells))
    return rows


def test_page_has_every_section_and_four_columns():
    """The parser sees one table per algorithm plus the shared one, each row with 4 cells
    (a row with a stray ``|`` inside a cell would shift the mark and switch columns)."""
    rows = table_rows()
    assert {section for section, _ in rows} == set(SECTIONS)
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
