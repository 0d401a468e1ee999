"""The claims ledger of docs/claims.md: one row per claim, in the page's order, each built by
a ``row_*`` function of ``outcome_rows``, ``credit_rows``, ``ceiling_rows`` or
``long_chain_rows``.
"""

from __future__ import annotations

import re

from ceiling_rows import row_ceiling, row_forking_vs_random, row_gtpo_share
from credit_rows import row_entropy_marks_pivots, row_gtpo_credit
from long_chain_rows import row_long_cot, row_long_cot_papers
from outcome_rows import (
    row_entropy_driver,
    row_eq4_literal,
    row_grpo_s_beats_dapo,
    row_grpo_s_entropy,
    row_gtpo_beats_dapo,
    row_gtpo_entropy,
    row_tepo_entropy,
    row_tepo_mask,
    row_tepo_sota,
    row_tepo_speed,
    row_tepo_stability,
)
from wording import table

LEDGER = (row_gtpo_beats_dapo, row_grpo_s_beats_dapo, row_entropy_driver, row_gtpo_entropy,
          row_grpo_s_entropy, row_entropy_marks_pivots, row_gtpo_credit, row_ceiling,
          row_forking_vs_random, row_gtpo_share, row_long_cot_papers, row_long_cot,
          row_eq4_literal, row_tepo_speed, row_tepo_stability, row_tepo_entropy, row_tepo_mask,
          row_tepo_sota)  # fmt: skip


def ledger_rows(real: dict, toy: dict | None) -> list[list[str]]:
    return [build(real, toy) for build in LEDGER]


def ledger_table(rows: list[list[str]]) -> str:
    """The ledger's table of ``rows`` (``ledger_rows``)."""
    head = ["claim", "the paper's words", "toy verdict", "real-model verdict",
            "numbers (± s.e.; df, MDD, seeds for 80 % power)", "command"]  # fmt: skip
    return table(head, rows) + looks_note(rows)


def looks_note(rows: list[list[str]]) -> str:
    """The sentence under the ledger naming the rows whose comparisons are corrected for
    looks (a comparison's numbers say "N looks"), by how many; "" where none is."""
    by: dict[int, list[str]] = {}
    for row in rows:
        for n in sorted({int(n) for n in re.findall(r", (\d+) looks", row[4])}):
            by.setdefault(n, []).append(row[0].split(" (")[0].split(", ")[0])
    if not by:
        return ""
    parts = "; ".join(f"{', '.join(claims)}: {n} looks" for n, claims in sorted(by.items()))
    return (
        "\nCorrected for looks (seeds added after a comparison had been read, counted in "
        "`claims_study.py`; each bar and MDD at α / looks, Bonferroni): the comparisons "
        f"marked “N looks” in the rows {parts}.\n"
    )
