"""docs/benchmarks.md § 2 and docs/results.md's "GTPO read literally": the collapse
benchmark's tables and verdicts, from the claims ledger's toy file and its definition of
"final" (``toy_testbed.toy_final``), so that a figure reads the same on every page.
"""

from __future__ import annotations

from stats import Comparison
from toy_testbed import toy_command, toy_compare, toy_final

#: The order of § 2's rows (the arms the toy file holds; its ablations after them).
BENCH_ORDER = ("grpo", "dapo", "gspo", "gtpo", "grpo_s", "tepo")


def toy_summaries(toy: dict) -> dict[str, dict]:
    """Per arm, the benchmark's own summary over seeds (refimpl.bench.learning_summary), with
    each run's final and gain read as the ledger reads them (toy_final: the evaluation at the
    end of the token budget)."""
    from refimpl.bench.learning_summary import summarize_seeds

    res = toy["results"]["countdown"]
    labels = sorted(res["runs"], key=lambda a: (a not in BENCH_ORDER,
                                                BENCH_ORDER.index(a) if a in BENCH_ORDER else 0))  # fmt: skip
    out = {}
    for label in labels:
        runs = [dict(r, final=toy_final(r), gain=toy_final(r) - r["base"])
                for _, r in sorted(res["runs"][label].items(), key=lambda kv: int(kv[0]))]  # fmt: skip
        out[label] = summarize_seeds(runs)
    return out


def bench_collapse_tables(toy: dict) -> str:
    """§ 2's two tables (outcome, mechanisms) in the benchmark's own columns and formats."""
    from refimpl.bench import markdown_table
    from refimpl.bench.learning_report import (
        MECHANISM_COLUMNS,
        RESULT_COLUMNS,
        mechanism_row,
        result_row,  # fmt: skip
    )

    res, m = toy["results"]["countdown"], toy["machine"]
    summaries = toy_summaries(toy)
    missing = [a for a in BENCH_ORDER if a not in summaries]
    old = any("end_evals" in r for runs in res["runs"].values() for r in runs.values())
    return (
        f"From `scripts/experiments/claims/results/toy/results.json` (the claims ledger's toy "
        f"file: `{toy_command(toy['config'])}`; {m['cpu']}, {m.get('cores', '?')} cores, "
        f"{m.get('date', '?')}, commit {m.get('commit', '?')}), written by "
        f"`python scripts/experiments/claims/report.py`. Warm start {res['base']:.3f}; budget "
        f"{res['budget_tokens']:,} sampled tokens.\n\n"
        + markdown_table(RESULT_COLUMNS, [result_row(a, s) for a, s in summaries.items()])
        + "\n\n"
        + markdown_table(MECHANISM_COLUMNS, [mechanism_row(a, s) for a, s in summaries.items()])
        + "\n\n"
        + (f"Not in the file: {', '.join(missing)} (its runs of 2026-12-02 are not committed; "
           "the text below quotes them where it says so). " if missing else "")
        + ("*pass@1 end* and *pass@16 end* are, in this file, the mean over each run's last "
           "two or three evaluations (the benchmark's reading before commit 602cc82); *final* "
           "and *gain* are read at the budget's end, as defined above.\n" if old else "")
    )  # fmt: skip


def _mean_sd(s: dict, key: str) -> str:
    return f"{s[key]['mean']:.3f} ± {s[key]['std']:.3f}"


def bench_literal(toy: dict) -> str:
    """§ 2's "It unlearns" bullet: GTPO read literally against the default, at the budget's end."""
    s = toy_summaries(toy)
    lit, gtpo, base = s["gtpo stats=batch"], s["gtpo"], toy["results"]["countdown"]["base"]
    return (
        f"* **It unlearns, in every seed.** Held-out greedy success {base:.3f} → "
        f"{_mean_sd(lit, 'final')} at the budget's end (worst seed {lit['gain']['min']:+.3f}); "
        f"pass@1 {lit['pass1_start']['mean']:.3f} → {lit['pass1_end']['mean']:.3f}; pass@16 "
        f"{lit['pass16_start']['mean']:.3f} → {lit['pass16_end']['mean']:.3f}. The default "
        f"reaches {_mean_sd(gtpo, 'final')}.\n"
    )


def bench_entropy_verdict(toy: dict) -> str:
    """§ 2's first verdict: do GTPO and GRPO-S keep entropy higher than DAPO (the ledger's
    rule), with their final success, paired by seed."""
    s = toy_summaries(toy)
    arms = ("gtpo", "grpo_s")
    ent = {a: toy_compare(toy, a, "dapo", "entropy_end") for a in arms}
    fin = {a: toy_compare(toy, a, "dapo") for a in arms}
    verdicts = {c.verdict() for c in ent.values()}
    word = verdicts.pop() if len(verdicts) == 1 else " / ".join(c.verdict() for c in ent.values())
    pct = {a: 100 * ent[a].diff / s["dapo"]["entropy_end"]["mean"] for a in arms}

    def up(c: Comparison) -> str:
        return f"{sum(v > 0 for v in c.per_seed.values())}/{c.n}"

    return (
        f"* **Do GTPO and GRPO-S keep entropy higher than DAPO? {word[0].upper() + word[1:]}** "
        f"(by Student's t over the seeds, the claims ledger's rule, [claims.md](claims.md)). "
        f"End entropy {s['gtpo']['entropy_end']['mean']:.3f} (GTPO, {pct['gtpo']:+.1f} % paired, "
        f"higher in {up(ent['gtpo'])} seeds) and {s['grpo_s']['entropy_end']['mean']:.3f} (GRPO-S, "
        f"{pct['grpo_s']:+.1f} %, higher in {up(ent['grpo_s'])} seeds) vs DAPO "
        f"{s['dapo']['entropy_end']['mean']:.3f}; end/start × "
        f"{s['gtpo']['entropy_ratio']['mean']:.2f}, × {s['grpo_s']['entropy_ratio']['mean']:.2f} "
        f"and × {s['dapo']['entropy_ratio']['mean']:.2f}. Final success "
        f"{s['gtpo']['final']['mean']:.3f} and {s['grpo_s']['final']['mean']:.3f} vs "
        f"{s['dapo']['final']['mean']:.3f} (paired {fin['gtpo'].diff:+.3f} and "
        f"{fin['grpo_s'].diff:+.3f}, the ledger's figures); pass@16 "
        f"{s['gtpo']['pass16_end']['mean']:.3f} and {s['grpo_s']['pass16_end']['mean']:.3f} vs "
        f"{s['dapo']['pass16_end']['mean']:.3f}.\n"
    )  # fmt: skip


def bench_criteria(toy: dict) -> str:
    """§ 2's criterion on GRPO's gain at the budget's end (the regime's design asked ≥ 0.20)."""
    g = toy_summaries(toy)["grpo"]["gain"]
    word = "holds" if g["min"] >= 0.20 else "does not hold"
    return (f"* **GRPO gains ≥ 0.20 over the warm start in every seed: {word}.** {g['mean']:+.3f} "
            f"mean, {g['min']:+.3f} worst seed, from a warm start at "
            f"{toy['results']['countdown']['base']:.3f} (the demo starts from a weaker base model "
            "for this reason, § 0).\n")  # fmt: skip


def results_literal(toy: dict) -> str:
    """docs/results.md's "GTPO read literally" paragraph."""
    s = toy_summaries(toy)
    lit, gtpo = s["gtpo stats=batch"], s["gtpo"]
    return (
        "- **GTPO read literally** (Eq. 4's batch-wide normalisation, `--algo-args stats=batch`, "
        "the same benchmark): the outcome cancels out of the advantages and GTPO *unlearns*, "
        f"{toy['results']['countdown']['base']:.3f} → {lit['final']['mean']:.3f} held-out at the "
        f"budget's end (sd {lit['final']['std']:.3f} over the {lit['seeds']} seeds; default "
        f"reading {gtpo['final']['mean']:.3f}), while its entropy stays near its start "
        f"(× {lit['entropy_ratio']['mean']:.2f}). refimpl's default keeps the outcome; the GTPO "
        "page argues it.\n"
    )
