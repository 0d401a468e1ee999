"""The tables of docs/claims.md, computed from the committed result files.

Reads, in ``results/`` beside it, ``real/*.json`` (``run_real.py``, one file per arm and seed),
``real/cross_machine/*.json`` (first-pass runs repeated on a second machine) and
``toy/results.json`` (the collapse benchmark; the command that wrote it is printed in the
ledger, built from the file's own settings), and writes each table into docs/claims.md
between its markers ``<!-- claims:NAME -->`` and ``<!-- /claims:NAME -->`` (and, from the same
files and code, the claims paragraphs of docs/results.md and the collapse benchmark's tables and
verdicts in docs/benchmarks.md § 2, between their own, so a figure reads the same on every
page), and draws
``docs/figures/claims_real_curves.png``. Nothing is trained: it takes seconds. ``--check``
writes nothing and exits 1 when a block in any of these pages differs from what the files give
(``tests/test_claims.py`` runs it).

    python scripts/experiments/claims/claims_page.py               # rewrite the blocks and the figure
    python scripts/experiments/claims/claims_page.py --no-figure   # the blocks only
    python scripts/experiments/claims/claims_page.py --check       # are they current?

The statistics (paired differences, Student's t verdicts at each comparison's degrees of
freedom, minimal detectable differences, seeds for 80 % power, censored times to a
threshold) are defined once, in ``refimpl/bench/stats.py``, the one statistics module
every page uses. The blocks are built by the modules
beside it (README.md's file table says which holds what: ``claims_results`` reads the files,
``ledger`` builds the ledger, ``real_tables`` and ``toy_testbed`` the tables, ...); this file
gathers them, writes the pages and draws the figure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the modules beside it, by name
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the lab's page writer

import page_writer  # noqa: E402
from benchmark_blocks import (  # noqa: E402
    bench_collapse_tables,
    bench_criteria,
    bench_entropy_verdict,
    bench_literal,
    bench_literal_entropy,
    bench_pass16,
    bench_tepo_verdicts,
    results_literal,
)
from claims_ledger import ledger_rows, ledger_table  # noqa: E402
from claims_results import ROOT, load_cross, load_real, load_toy  # noqa: E402
from curves_figure import plot_real_curves  # noqa: E402
from learning_curves import real_convergence_table  # noqa: E402
from real_tables import (  # noqa: E402
    alpha0_spread,
    alpha0_table,
    learning_bar,
    machines_block,
    real_arm_table,
    real_paired_table,
    why_twelve_steps,
)
from summaries import in_short, results_brief  # noqa: E402
from toy_testbed import toy_command, toy_paired_table, toy_table  # noqa: E402

#: The pages whose blocks this report writes.
PAGE = ROOT / "docs" / "claims.md"
RESULTS_PAGE = ROOT / "docs" / "results.md"
BENCH_PAGE = ROOT / "docs" / "benchmarks.md"


def blocks() -> dict[str, dict[str, str]]:
    """Every generated block, per page ("claims": docs/claims.md, "results": docs/results.md)."""
    real, toy, cross = load_real(), load_toy(), load_cross()
    rows = ledger_rows(real, toy)  # every verdict of the ledger, computed once
    claims = {"ledger": ledger_table(rows), "machines": machines_block(real, toy, cross)}
    if real:
        claims |= {
            "in-short": in_short(real, toy),
            "why-12-steps": why_twelve_steps(real),
            "real-arms": real_arm_table(real),
            "real-paired": real_paired_table(real),
            "learning-bar": learning_bar(real),
            "real-convergence": real_convergence_table(real),
            "real-alpha0": alpha0_table(real),
            "alpha0-spread": alpha0_spread(real),
        }
    if toy:
        claims |= {"toy-command": f"```bash\n{toy_command(toy['config'])}\n```\n",
                   "toy-runs": toy_table(toy), "toy-paired": toy_paired_table(toy)}  # fmt: skip
    out = {"claims": claims}
    if real:
        out["results"] = {"results-brief": results_brief(real, toy)}
    if toy:
        out.setdefault("results", {})["results-literal"] = results_literal(toy)
        speed = next(r for r in rows if r[0].startswith("TEPO converges"))
        out["benchmarks"] = {"bench-collapse": bench_collapse_tables(toy),
                             "bench-criteria": bench_criteria(toy),
                             "bench-literal": bench_literal(toy),
                             "bench-literal-entropy": bench_literal_entropy(toy),
                             "bench-entropy-verdict": bench_entropy_verdict(toy),
                             "bench-tepo": bench_tepo_verdicts(toy, speed[2]),
                             "bench-pass16": bench_pass16(toy)}  # fmt: skip
    return out


def missing_declared() -> list[Path]:
    """The real-model result files the claims declaration (``claims_study.py``) lists that are
    not in ``claims_results.REAL``: a missing one would silently leave its seed out of every
    comparison, so the report refuses (the pages then keep the figures of the complete set)."""
    import importlib.util

    import claims_results

    driver = sys.modules.get("run_experiment")  # the lab's one driver, which reads declarations
    if driver is None:
        spec = importlib.util.spec_from_file_location(
            "run_experiment", Path(__file__).resolve().parents[1] / "run_experiment.py"
        )
        driver = sys.modules["run_experiment"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(driver)
    decl = driver.load(Path(__file__).resolve().parent / "claims_study.py")
    out = Path("/declared")
    names = [u.result.relative_to(out / "real") for u in driver.units(decl, runs="runs", out=out)
             if u.result.is_relative_to(out / "real")]  # fmt: skip
    return [claims_results.REAL / n for n in names if not (claims_results.REAL / n).is_file()]


def _build(args: argparse.Namespace) -> dict[Path, dict[str, str]]:
    """Every block of every page, from the result files (read here, before any page)."""
    from refimpl.bench.result_header import ResultFileError

    if missing := missing_declared():
        raise ResultFileError(f"{missing[0]}: missing ({len(missing)} of the result files "
                              "claims_study.py declares are missing)")  # fmt: skip
    pages = {"claims": PAGE, "results": RESULTS_PAGE, "benchmarks": BENCH_PAGE}
    return {pages[key]: page_blocks for key, page_blocks in blocks().items()}


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-figure", action="store_true", help="do not redraw the figure")


def _figure(args: argparse.Namespace) -> None:
    if not args.no_figure:
        plot_real_curves(load_real())


def main(argv: list[str] | None = None) -> int:
    """Exit 0 (written, or current with ``--check``), 1 (stale, with ``--check``) or 2 (a
    result file missing or damaged, named on one line: no page is written); the lab's page
    writer (``scripts/experiments/page_writer.py``) holds these guarantees."""
    return page_writer.main(
        argv, prog="scripts/experiments/claims/claims_page.py", description=__doc__.splitlines()[0],
        prefix="claims", build=_build, add_arguments=_arguments, after_write=_figure,
        inputs=lambda _args: [sys.modules["claims_results"].REAL.parent],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
