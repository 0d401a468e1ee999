"""The papers' claims, read off a ``refimpl bench-learning`` run: its report's "Verdicts".

``refimpl bench-learning`` measures (tables, figures, ``results.json``) and judges no paper's
claim. This script reads the benchmark's ``results.json`` and tests, per task, in measured
terms:

* **TEPO converges ≥ 50 % faster than GRPO/DAPO**: TEPO's median sampled tokens to the
  target at most half of each baseline's (and its AUC against theirs, paired by seed);
* **GTPO / GRPO-S keep entropy higher than DAPO while learning**: their end entropy minus
  DAPO's, paired by seed, by the t rule, while the arm learns (final success above the warm
  start by 0.02); its final success against DAPO's, paired, is shown beside it;
* the testbed regime's questions: **GRPO lifts held-out greedy success by ≥ 0.20** in every
  seed; **does TEPO's mask keep entropy or pass@16 higher** than GRPO, DAPO and TEPO without
  its mask (paired by seed, by the t rule); **which methods preserve pass@16** (mean change ≥
  ``PASS_AT_16_TOLERANCE``).

A comparison of two arms is their paired difference over the seeds both ran, judged by the
one verdict rule every page applies (``refimpl.bench.stats.verdict``: Student's t at n − 1
degrees of freedom, 95 % two-sided: holds, contradicted or not shown); the thresholds above
(0.5 ×, 0.20, −0.02, 0.02) are the regime's criteria, not comparisons.

A claim whose algorithms the run did not train is left out. The section is written at the end
of the run's ``report.md`` under "### Verdicts" (replacing one written before), or printed:

    python scripts/experiments/learning/verdicts.py runs/bench/learning-default
    python scripts/experiments/learning/verdicts.py runs/bench/learning-collapse --print
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "experiments"))  # the lab's page writer

from page_writer import PageError, finite, read_page  # noqa: E402

from refimpl.bench import stats  # noqa: E402  (the one statistics module)
from refimpl.bench.result_header import ResultFileError, expect, read_result  # noqa: E402
from refimpl.runs.runlog import write_text_atomic  # noqa: E402

#: pass@16 is "preserved" when its mean change over seeds (end − start) is at least this:
#: one standard error of pass@16 on 200 problems near 0.8 is about 0.03.
PASS_AT_16_TOLERANCE = -0.02
#: The heading the section starts with in report.md (everything from it on is replaced).
HEADING = "### Verdicts"


def _name(label: str) -> str:
    return label.upper().replace("_", "-")


def _paired(task_res: dict[str, Any], a: str, b: str, key: str) -> stats.Comparison:
    """a's ``key`` minus b's, paired over the seeds both labels ran (``stats``)."""
    ra, rb = task_res["runs"].get(a, {}), task_res["runs"].get(b, {})
    return stats.paired_over_seeds({s: r[key] for s, r in ra.items()},
                                   {s: r[key] for s, r in rb.items()})  # fmt: skip


def _said(c: stats.Comparison, digits: int = 3) -> str:
    """A paired comparison and its verdict: "+0.012 ± 0.004 over 3 seeds, holds"."""
    if c.n == 0:
        return "no paired seed"
    return f"{c.diff:+.{digits}f} ± {c.se:.{digits}f} over {c.n} seeds, {c.verdict()}"


def tepo_converges_faster(task: str, res: dict[str, Any]) -> list[str]:
    """Claim 1: TEPO reduces convergence time by 50 % compared with GRPO / DAPO."""
    summ = res["summary"]
    if "tepo" not in summ:
        return []
    t = summ["tepo"]["tokens_to_target"]
    parts, holds = [], []
    for ref in ("grpo", "dapo"):
        if ref not in summ:
            continue
        r = summ[ref]["tokens_to_target"]
        if math.isfinite(t["median"]) and math.isfinite(r["median"]):
            ratio = t["median"] / r["median"]
            holds.append(ratio <= 0.5)
            parts.append(
                f"median tokens to target {ratio:.2f}× {ref.upper()}'s "
                f"({t['median'] / 1e3:.0f}k vs {r['median'] / 1e3:.0f}k)"
            )
        else:
            holds.append(False)
            parts.append(
                f"reached the target in {t['reached']}/{summ['tepo']['seeds']} seeds, "
                f"{ref.upper()} in {r['reached']}/{summ[ref]['seeds']}"
            )
        parts[-1] += f" (AUC − {ref.upper()}'s: {_said(_paired(res, 'tepo', ref, 'auc'))})"
    verdict = "holds" if holds and all(holds) else "not supported"
    return [
        f"**{task} — TEPO converges ≥ 50 % faster than GRPO/DAPO: {verdict}.** "
        f"TEPO: " + "; ".join(parts) + "."
    ]


def entropy_higher_than_dapo(task: str, res: dict[str, Any]) -> list[str]:
    """Claim 2: GTPO / GRPO-S keep entropy higher than DAPO while learning."""
    summ, out = res["summary"], []
    if "dapo" not in summ:
        return out
    d = summ["dapo"]
    for algo in ("gtpo", "grpo_s"):
        if algo not in summ:
            continue
        a = summ[algo]
        ent = _paired(res, algo, "dapo", "entropy_end")
        learns = a["final"]["mean"] > res["base"] + 0.02
        verdict = ent.verdict() if learns else "not shown (it does not learn)"
        out.append(
            f"**{task} — {algo.upper().replace('_', '-')} keeps entropy higher than "
            f"DAPO while learning: {verdict}.** End entropy {a['entropy_end']['mean']:.3f}"
            f" vs DAPO {d['entropy_end']['mean']:.3f} nats (paired: {_said(ent)}; end/start "
            f"{a['entropy_ratio']['mean']:.2f} vs {d['entropy_ratio']['mean']:.2f}); final "
            f"success {a['final']['mean']:.3f} vs {d['final']['mean']:.3f} (paired: "
            f"{_said(_paired(res, algo, 'dapo', 'final'))}; base {res['base']:.3f})."
        )
    return out


def grpo_gain(task: str, res: dict[str, Any]) -> list[str]:
    """The testbed regime's first question: does GRPO gain ≥ 0.20 in every seed?"""
    summ = res["summary"]
    if "grpo" not in summ:
        return []
    g = summ["grpo"]["gain"]
    verdict = "holds" if g["min"] >= 0.20 else "does not hold"
    return [
        f"**{task} — GRPO lifts held-out greedy success by ≥ 0.20 in every seed: "
        f"{verdict}.** Gain {g['mean']:+.3f} mean, {g['min']:+.3f} worst seed "
        f"({summ['grpo']['seeds']} seeds; base {res['base']:.3f})."
    ]


def tepo_mask_keeps_entropy(task: str, res: dict[str, Any]) -> list[str]:
    """Does TEPO's mask keep entropy or pass@16 up, against GRPO, DAPO and TEPO without its
    mask, in every seed?"""
    summ = res["summary"]
    if "tepo" not in summ:
        return []
    t = summ["tepo"]
    parts, better = [], []
    for ref in ("grpo", "dapo", "tepo kl_mask=False"):
        if ref not in summ:
            continue
        r = summ[ref]
        ent = _paired(res, "tepo", ref, "entropy_end")
        p16 = _paired(res, "tepo", ref, "pass16_end")
        better.append("holds" in (ent.verdict(), p16.verdict()))
        parts.append(
            f"vs {_name(ref)}: end entropy {t['entropy_end']['mean']:.3f} vs "
            f"{r['entropy_end']['mean']:.3f} (paired: {_said(ent)}), end pass@16 "
            f"{t['pass16_end']['mean']:.3f} vs {r['pass16_end']['mean']:.3f} (paired: "
            f"{_said(p16)})"
        )
    if not parts:
        return []
    verdict = "yes" if better and all(better) else "no"
    return [
        f"**{task} — does TEPO (its KL mask acting on {t['mask_frac']['mean']:.3f} of "
        f"the tokens) keep entropy or pass@16 higher than every baseline (t rule)? "
        f"{verdict}.** " + "; ".join(parts) + "."
    ]


def pass16_preserved(task: str, res: dict[str, Any]) -> list[str]:
    """Which methods preserve pass@16 (mean change over seeds ≥ PASS_AT_16_TOLERANCE)?"""
    kept = []
    for label, a in res["summary"].items():
        change = a["pass16_end"]["mean"] - a["pass16_start"]["mean"]
        kept.append((label, change, change >= PASS_AT_16_TOLERANCE))
    if not kept:
        return []
    held = [f"{_name(lab)} ({c:+.3f})" for lab, c, ok in kept if ok]
    lost = [f"{_name(lab)} ({c:+.3f})" for lab, c, ok in kept if not ok]
    return [
        f"**{task} — which methods preserve pass@16 (mean change ≥ "
        f"{PASS_AT_16_TOLERANCE})? {', '.join(held) if held else 'none'}.** "
        f"Lost it: {', '.join(lost) if lost else 'none'}."
    ]


def verdicts(results: dict[str, Any]) -> list[str]:
    """The claims, tested in measured terms, per task (``results``: results.json's
    ``"results"``)."""
    out = []
    for task, res in results.items():
        out += tepo_converges_faster(task, res) + entropy_higher_than_dapo(task, res)
        out += grpo_gain(task, res) + tepo_mask_keeps_entropy(task, res)
        out += pass16_preserved(task, res)
    return out


def section(results: dict[str, Any]) -> str:
    """The report's section: the heading, then one bullet per verdict."""
    lines = [HEADING, "", *(f"- {v}" for v in verdicts(results)), ""]
    return "\n".join(lines)


def with_section(report: str, text: str) -> str:
    """``report`` with its verdict section (from ``HEADING`` to the end) replaced by
    ``text``, or ``text`` appended when it has none."""
    head = report.split("\n" + HEADING + "\n", 1)[0].rstrip("\n")
    return head + "\n\n" + text


#: What the verdicts read of each run and of each arm's summary over seeds: finite numbers.
RUN_FIGURES = ("auc", "entropy_end", "final", "pass16_end")
SUMMARY_FIGURES = (
    "entropy_end",
    "entropy_ratio",
    "final",
    "pass16_start",
    "pass16_end",
    "gain",
)  # fmt: skip  (and TEPO's mask_frac: NaN for an arm without a mask)


def checked(results: object, path: Path) -> dict[str, Any]:
    """``results`` (results.json's "results") when every figure the verdicts read is there
    and finite; else ``ResultFileError`` naming the file and the place (a NaN, a string, a
    missing key or the wrong shape), so that nothing is written from it."""
    expect(isinstance(results, dict) and results, path, "results: expected the tasks' results")
    for task, res in results.items():
        expect(isinstance(res, dict) and all(isinstance(res.get(k), dict) for k in ("runs", "summary")),
               path, f"results.{task}: expected its runs and summary")  # fmt: skip
        finite(res.get("base"), path, f"results.{task}.base")
        for label, runs in res["runs"].items():
            expect(isinstance(runs, dict), path, f"results.{task}.runs.{label}: expected seeds")
            for seed, run in runs.items():
                where = f"results.{task}.runs.{label}.{seed}"
                expect(isinstance(run, dict), path, f"{where}: expected a run's figures")
                for key in RUN_FIGURES:
                    finite(run.get(key), path, f"{where}.{key}")
        for label, summ in res["summary"].items():
            for key in SUMMARY_FIGURES + (("mask_frac",) if label == "tepo" else ()):
                figure = summ.get(key) if isinstance(summ, dict) else None
                expect(
                    isinstance(figure, dict), path, f"results.{task}.summary.{label}.{key}: missing"
                )
                for stat in ("mean", "min") if key == "gain" else ("mean",):
                    finite(figure.get(stat), path, f"results.{task}.summary.{label}.{key}.{stat}")
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the benchmark's --out directory")
    parser.add_argument("--print", action="store_true", help="print the section, write nothing")
    args = parser.parse_args(argv)
    report = args.out / "report.md"
    path = args.out / "results.json"
    try:  # every input read and checked before report.md is touched
        results = read_result(path, "refimpl bench-learning's results")
        expect("results" in results, path, "results: missing (refimpl bench-learning's file?)")
        text = section(checked(results["results"], path))
        old = None if args.print else read_page(report)  # a regular file: no link, no folder
    except (ResultFileError, PageError) as err:
        print(f"verdicts: {err} (nothing was written)", file=sys.stderr)
        return 2
    if args.print:
        print(text)
        return 0
    write_text_atomic(report, with_section(old, text))
    print(f"verdicts: wrote the section of {report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
