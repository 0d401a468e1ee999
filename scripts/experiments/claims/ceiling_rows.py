"""The ledger's three rows on what token credit is worth (docs/credit.md's ceiling): written
by ``scripts/experiments/ceiling/ceiling_claims.py`` from the ceiling's own result files, and "not
measured" while those are not committed.
"""

from __future__ import annotations

import functools

from claims_results import ROOT


@functools.cache
def ceiling_rows() -> list[list[str]]:
    """The ceiling's three rows, from its own report (loaded by path, as the ceiling reads
    docs/credit.md's generator)."""
    import importlib.util

    path = ROOT / "scripts" / "experiments" / "ceiling" / "ceiling_claims.py"
    spec = importlib.util.spec_from_file_location("ceiling_ledger", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ledger_rows()


CEILING_RUNS = ROOT / "scripts" / "experiments" / "ceiling" / "results" / "runs.json"

#: The ceiling's three claims, named here only for when its result file is not there yet (its
#: report writes the rows, with the papers' words, once it is).
CEILING_CLAIMS = (
    "Accurate credit (VinePPO's Monte-Carlo values) learns faster than a uniform advantage",
    "Training on the top-20 % entropy tokens beats a random 20 % (forking tokens − random)",
    "GTPO's token credit drives learning (GTPO − GRPO, and its share of the ceiling)",
)


def _ceiling_row(i: int) -> list[str]:
    """Row ``i`` of the ceiling's rows; "not measured" while its result file is not committed
    (a damaged file still stops the report, naming it)."""
    if not CEILING_RUNS.exists():
        where = CEILING_RUNS.relative_to(ROOT)
        return [CEILING_CLAIMS[i], "(the ceiling's report quotes the papers once it has run)",
                "not measured", "not measured",
                f"not measured: `{where}` is not committed",
                "`python scripts/experiments/run_experiment.py scripts/experiments/ceiling/ceiling_study.py`"]  # fmt: skip
    return ceiling_rows()[i]


def row_ceiling(real, toy):
    return _ceiling_row(0)


def row_forking_vs_random(real, toy):
    return _ceiling_row(1)


def row_gtpo_share(real, toy):
    return _ceiling_row(2)
