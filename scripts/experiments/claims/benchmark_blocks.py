"""docs/benchmarks.md § 2 and docs/results.md's "GTPO read literally": the collapse
benchmark's tables and verdicts, from the claims ledger's toy file and its definition of
"final" (``toy_testbed.toy_final``), so that a figure reads the same on every page.
"""

from __future__ import annotations

from toy_testbed import toy_command, toy_compare, toy_final

from refimpl.bench.stats import Comparison

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
        f"`python scripts/experiments/claims/claims_page.py`. Warm start {res['base']:.3f}; budget "
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
    """§ 2's criteria of the regime: GRPO's entropy collapses (end ≤ 0.5 × start), pass@16
    ends below its start in every arm, and GRPO gains ≥ 0.20 in every seed (the regime's
    design asked all three)."""
    s = toy_summaries(toy)
    grpo, n = s["grpo"], s["grpo"]["seeds"]
    ratio = grpo["entropy_ratio"]["mean"]
    falls = [a for a, v in s.items() if v["pass16_end"]["mean"] < v["pass16_start"]["mean"]]
    g = grpo["gain"]
    return (f"* **GRPO's entropy falls to ≤ 50 % of its start: "
            f"{'holds' if ratio <= 0.5 else 'does not hold'}.** "
            f"{grpo['entropy_start']['mean']:.3f} → {grpo['entropy_end']['mean']:.3f}, × {ratio:.2f} "
            f"({grpo['collapsed']}/{n} seeds collapsed).\n"
            f"* **pass@16 ends below its start: {'holds' if len(falls) == len(s) else 'does not hold'}**, "
            f"for {len(falls)} of the {len(s)} arms (table).\n"
            f"* **GRPO gains ≥ 0.20 over the warm start in every seed: "
            f"{'holds' if g['min'] >= 0.20 else 'does not hold'}.** {g['mean']:+.3f} "
            f"mean, {g['min']:+.3f} worst seed, from a warm start at "
            f"{toy['results']['countdown']['base']:.3f} (the demo starts from a weaker base model "
            "for this reason, § 0).\n")  # fmt: skip


def _lower(c: Comparison) -> str:
    """In how many seeds the first arm is below the second: "k/n"."""
    return f"{sum(v < 0 for v in c.per_seed.values())}/{c.n}"


def bench_literal_entropy(toy: dict) -> str:
    """§ 2's "Its entropy stays up" figures: the literal reading's entropy against the default's."""
    s = toy_summaries(toy)
    lit, gtpo = s["gtpo stats=batch"], s["gtpo"]
    return (f"* **Its entropy stays up, for the wrong reason.** "
            f"{lit['entropy_start']['mean']:.3f} → {lit['entropy_end']['mean']:.3f} "
            f"(× {lit['entropy_ratio']['mean']:.2f}, {lit['collapsed']}/{lit['seeds']} seeds "
            f"collapsed) against the default's {gtpo['entropy_start']['mean']:.3f} → "
            f"{gtpo['entropy_end']['mean']:.3f}.\n")  # fmt: skip


def bench_tepo_verdicts(toy: dict, speed_verdict: str) -> str:
    """§ 2's verdicts on TEPO: does its mask keep entropy or pass@16 above GRPO's and DAPO's
    ("No" when TEPO's mean is below both on both), and does it converge faster (the claims
    ledger's row, ``speed_verdict``)."""
    s = toy_summaries(toy)
    tepo = s["tepo"]
    ent = {b: toy_compare(toy, "tepo", b, "entropy_end") for b in ("grpo", "dapo")}
    p16 = {b: toy_compare(toy, "tepo", b, "pass16_end") for b in ("grpo", "dapo")}
    auc = {b: toy_compare(toy, "tepo", b, "auc") for b in ("grpo", "dapo")}
    below = all(c.diff < 0 for c in (*ent.values(), *p16.values()))
    return (
        f"* **Does TEPO's mask keep entropy or pass@k up? {'No' if below else 'Not shown'}.** The "
        f"mask acts on {100 * tepo['mask_frac']['mean']:.1f} % of the tokens; TEPO ends with "
        f"entropy {tepo['entropy_end']['mean']:.3f} against GRPO {s['grpo']['entropy_end']['mean']:.3f} "
        f"and DAPO {s['dapo']['entropy_end']['mean']:.3f} (lower in {_lower(ent['grpo'])} and "
        f"{_lower(ent['dapo'])} seeds), pass@16 {tepo['pass16_end']['mean']:.3f} against "
        f"{s['grpo']['pass16_end']['mean']:.3f} and {s['dapo']['pass16_end']['mean']:.3f} (lower "
        f"in {_lower(p16['grpo'])} and {_lower(p16['dapo'])}); its AUC is below GRPO's in "
        f"{_lower(auc['grpo'])} seeds and below DAPO's in {_lower(auc['dapo'])}. Against the "
        "same KL on every token (`tepo kl_mask=False`), see the claims ledger.\n"
        "* **Does TEPO converge faster than GRPO/DAPO?** By the claims ledger's rule "
        "([claims.md](claims.md): per seed, TEPO's sampled tokens to the target ÷ the "
        "baseline's, each time censored by the evaluation grid, and the bounds of the median of "
        f"those ratios; holds at or below 0.5, contradicted at or above 1): {speed_verdict}.\n"
    )  # fmt: skip


def bench_pass16(toy: dict) -> str:
    """§ 2's pass@16 verdict: the mean change of pass@16 per arm, and pass@1's rise."""
    s = toy_summaries(toy)
    change = {a: v["pass16_end"]["mean"] - v["pass16_start"]["mean"] for a, v in s.items()}
    kept = [a for a in change if change[a] >= 0]
    learn = [v["pass1_end"]["mean"] - v["pass1_start"]["mean"] for v in s.values()
             if v["gain"]["mean"] > 0]  # fmt: skip
    order = ", ".join(f"{a} {d:+.3f}" for a, d in sorted(change.items(), key=lambda kv: -kv[1]))
    return (f"* **Does any method preserve pass@16? {', '.join(kept) if kept else 'None'}.** "
            f"Mean change of pass@16: {order}. pass@1 rises by {min(learn):.2f}–{max(learn):.2f} "
            "in every arm that learns.\n")  # fmt: skip


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
