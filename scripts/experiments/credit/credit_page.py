"""The tables and figures of docs/credit.md, from the committed result files.

Reads ``results/*.json`` next to this file (``refimpl credit`` and ``real_model.py`` write
them; ``credit_study.py`` declares every one the page uses) and ``results/longchain_learning.json`` (the
long-chain learning benchmark, ``refimpl bench-learning --preset longchain``), and writes each
table into docs/credit.md between its markers ``<!-- credit:NAME -->`` and
``<!-- /credit:NAME -->``, and the figures into docs/figures/. Nothing is trained or sampled.
``--check`` writes nothing and exits 1 when a table differs from what the files give
(``tests/test_credit.py`` runs it).

    python scripts/experiments/credit/credit_page.py            # rewrite the tables and figures
    python scripts/experiments/credit/credit_page.py --check    # are they current?
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[2]
RESULTS = HERE / "results"
PAGE = ROOT / "docs" / "credit.md"
FIGURES = ROOT / "docs" / "figures"
sys.path.insert(0, str(HERE.parent))
import page_writer  # noqa: E402  (the lab's one page writer)

from refimpl.bench import stats  # noqa: E402  (the one statistics module)

#: The K every headline table and sentence reads: the largest, which every toy batch has
#: (the real model, whose largest is 32, is read at its largest); the sensitivity table shows
#: the others.
MAIN_K = "64"
#: The batches, in the order of the page: (file stem, label).
BATCHES = (
    ("longchain_step0", "long chain, warm start"),
    ("longchain_step40", "long chain, GRPO step 40"),
    ("longchain_step100", "long chain, GRPO step 100"),
    ("countdown_step0", "countdown, warm start"),
    ("countdown_step50", "countdown, GRPO step 50"),
    ("countdown_step200", "countdown, GRPO step 200"),
)
REALS = (
    ("real_smollm2", "SmolLM2-135M, untrained"),
    ("real_smollm2_k32", "SmolLM2-135M, untrained"),
)
#: Algorithms drawn in the token figure (the issue's four: the baseline and the three papers').
FIGURE_ALGOS = ("grpo", "gtpo", "grpo_s", "tepo")
LEARNING_ALGOS = ("grpo", "dapo", "gtpo", "gtpo alpha_2=0.0", "grpo_s", "tepo", "forking_tokens")


#: The result files the page may go without ("Not measured yet"): calibrate.py writes
#: calibration.json, which is not committed yet. Every other file the page reads is required:
#: one missing is an error naming it, and the page is left as it was.
OPTIONAL = frozenset({"calibration"})
_LOADED: dict[str, dict | None] = {}


def load(stem: str) -> dict | None:
    """The result file ``<stem>.json`` under ``--results`` (None for a missing optional one),
    read once; ``ResultFileError`` naming the file when it is missing, not JSON, or lacks a
    key the tables read (``refimpl.bench.result_header``)."""
    from refimpl.bench.result_header import read_result

    path = RESULTS / f"{stem}.json"  # RESULTS: --results (set by main)
    if str(path) not in _LOADED:
        if stem in OPTIONAL and not path.exists():
            _LOADED[str(path)] = None
        else:
            _LOADED[str(path)] = read_result(path, "docs/credit.md reads it")
    return _LOADED[str(path)]


_METRICS: dict[tuple[int, str], dict] = {}


def current(m: dict) -> bool:
    """Whether stored metrics hold every analysis of the current code (the outcome split,
    the noise-free share's null)."""
    signals = [v for n, v in m["signals"].items() if not n.startswith("_")]
    return "random20_share_sq" in m["entropy"] and all(
        "within_success" in v["credit"] and "pivot_excess" in v["credit"]["blame_pivot"]
        for v in signals
    )


def main_k(d: dict) -> str:
    """The K a batch's headline figures are read at: ``MAIN_K``, or the largest it has."""
    return MAIN_K if MAIN_K in d["oracle"] else max(d["oracle"], key=int)


def metrics(d: dict, k: str) -> dict:
    """The metrics of one oracle estimate: the file's own (computed from the exact values when
    it was written), or, for a file written before an analysis existed, recomputed from its
    values (``refimpl.bench.credit_records.rescore``; it needs the oracle's half-estimates). Analyses
    added since (the ``ΣA*²`` share by prompt, the noise-free correlation, the value at the
    first wrong token) are computed from the file's per-token arrays when it lacks them, and
    leave the stored figures as they are."""
    key = (id(d), k)
    if key not in _METRICS:
        try:
            stored = d["metrics"][k]
            if current(stored) or "half_advantages" not in d["oracle"][k]:
                m = stored
            else:
                from refimpl.bench.credit_records import rescore

                m = rescore(d, k)
            _METRICS[key] = supplemented(d, k, m)
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as err:
            from refimpl.bench.result_header import ResultFileError

            path = next((p for p, v in _LOADED.items() if v is d), "a result file")
            raise ResultFileError(f"{path}: not what the tables read at K = {k} "
                                  f"({type(err).__name__}: {err})") from None  # fmt: skip
    return _METRICS[key]


def supplemented(d: dict, k: str, m: dict) -> dict:
    """``m`` with the analyses of issue 46 that a file written before it lacks, computed from
    the file's own per-token arrays with the functions that write them now."""
    from refimpl.bench import credit_metrics, credit_records

    entropy, oracle = dict(m["entropy"]), dict(m["signals"]["_oracle"])
    o = d["oracle"][k]
    if "share_sq_by_prompt" not in entropy and "half_advantages" in o:
        entropy |= credit_metrics.entropy_extras(
            [c["entropy_old"] for c in d["completions"]], o["true_advantage"],
            (o["half_advantages"][0], o["half_advantages"][1]), credit_records.prompt_indices(d),
            d["settings"]["seed"],
        )  # fmt: skip
    if "first_wrong_value" not in oracle:
        first_wrong = credit_records.stored_first_wrong(d)
        oracle["first_wrong_value"] = (
            credit_metrics.first_wrong_values(credit_records.stored_values(d, k), first_wrong)
            if first_wrong else None
        )  # fmt: skip
    return {**m, "entropy": entropy, "signals": {**m["signals"], "_oracle": oracle}}


def batches() -> list[tuple[str, dict]]:
    """The batches that exist, with their labels (real model last)."""
    both = (*BATCHES, *REALS)
    return [(label, d) for stem, label in both if (d := load(stem)) is not None]


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------


def fmt(x: float | None, digits: int = 3, sign: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "–"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def fmt_mse(m: dict | None, sign: bool = True) -> str:
    """``mean ± s.e. (n)`` of a ``mean_se`` record."""
    if not m or not m.get("n"):
        return "–"
    se = f" ± {m['se']:.3f}" if math.isfinite(m.get("se", math.nan)) else ""
    return f"{fmt(m['mean'], sign=sign)}{se} (n = {m['n']})"


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows]) + "\n"


def within_text(w: dict, key: str = "pearson") -> str:
    """A within-completion correlation, or what the signal is when it has none."""
    if w["no_within_credit"]:
        return "none (constant)"
    text = fmt_mse(w[key])
    if w["constant"]:
        text += f"; constant in {w['constant']}/{w['completions']}"
    return text


# --------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------


def calibration_table() -> str:
    """The long-chain warm start (calibrate.py) and the RL regime (the regime probes)."""
    cal, probes = load("calibration"), load("regime_probes")
    warm = load("warmstart_longchain")  # the preset's own warm start: its cache's state.json
    out = []
    if warm is not None:
        c, r = warm["config"], warm["report"]
        m = c["model"]
        out.append(table(
            ["warm start", "task", "steps", "held-out greedy / sampled success",
             "training seconds", "machine"],
            [[f"{m['n_layer']} × {m['n_embd']}, block {m['block_size']}",
              f"{c['task']} {' '.join(c['task_args'])}",
              f"{c['steps']:,} of a {c['schedule_steps']:,}-step schedule",
              f"{r['greedy_success']:.3f} / {r['sampled_success']:.3f}",
              f"{r['train_seconds']:,.0f}", warm["numerics"]["cpu"]]]))  # fmt: skip
    if cal is not None:
        rows = []
        for m in cal["models"].values():
            for e in m["evaluations"]:
                cells = [f"{e[r]['greedy']:.3f} / {e[r]['sampled']:.3f}"
                         for r in ("10-12", "8-12", "10-10", "12-12")]  # fmt: skip
                rows.append([f"{m['n_layer']} × {m['n_embd']} ({m['params'] / 1e3:.0f}k)",
                             f"{e['step']:,} of {m['steps']:,}", f"{e['loss']:.3f}", *cells,
                             f"{e['train_s']:,.0f}"])  # fmt: skip
        out.append(table(
            ["model", "steps", "loss", "10–12 operators (greedy / sampled)", "8–12", "10", "12",
             "training seconds"], rows))  # fmt: skip
    if probes is not None:
        rows = []
        for name, p in probes.items():
            if name == "header":  # the result header (refimpl.bench.result_header), not a probe
                continue
            s = p["settings"]
            curve = ", ".join(f"{g:.3f}" for g in p["heldout_greedy"])
            rows.append([f"N = {s['prompts_per_step']}, lr {s['lr']:g}", str(s["steps"]),
                         curve, f"{p['heldout_pass@1'][0]:.3f} → {p['heldout_pass@1'][-1]:.3f}"])  # fmt: skip
        out.append(table(["GRPO, seed 0", "steps", "held-out greedy success at each evaluation",
                          "pass@1 start → end"], rows))  # fmt: skip
    return "\n".join(out) if out else "*Not measured yet.*\n"


def oracle_table() -> str:
    rows = []
    for label, d in batches():
        comps = d["completions"]
        lengths = [len(c["token"]) for c in comps]
        success = np.mean([c["success"] for c in comps])
        for k, o in sorted(d["oracle"].items(), key=lambda kv: int(kv[0])):
            noise = metrics(d, k)["noise"]
            share = o.get("peak_share")
            rows.append([
                label, k, str(len(comps)), f"{min(lengths)}–{max(lengths)}", f"{success:.2f}",
                str(o["prefixes"]), f"{o['sampled_tokens']:,}", f"{o['seconds']:.1f}",
                f"{o['tokens_per_s']:,.0f}", f"{share:.1%}" if share else "–",
                fmt(noise["split_half_r"], 2), fmt(noise["ceiling"], 2),
            ])  # fmt: skip
    return table(
        ["batch", "K", "completions", "tokens", "success", "prefixes", "sampled tokens",
         "seconds", "tokens/s", "of matmul peak", "split-half r of A*", "ceiling"],
        rows,
    )  # fmt: skip


def agreement_table(stem: str, label: str, k: str | None = None) -> str:
    """Criteria 1 and 2 for every algorithm on one batch (at ``main_k`` unless ``k``)."""
    d = load(stem)
    k = k or (main_k(d) if d is not None else MAIN_K)
    if d is None or k not in d["oracle"]:
        return f"*{label}: not measured yet.*\n"
    sig = metrics(d, k)["signals"]
    rows = []
    for name, m in sig.items():
        if name.startswith("_"):
            continue
        a, c = m["advantages"], m["credit"]
        fw = c["blame_first_wrong"]
        rows.append([
            name, f"{m['trained_completions']}", within_text(a["within"]),
            within_text(a["within_success"]) if "within_success" in a else "–",
            within_text(a["within_failure"]) if "within_failure" in a else "–",
            within_text(c["within"]), within_text(c["within"], "spearman"),
            fmt(c["pooled"]["pearson"], 2) if c["pooled"] else "–",
            fmt_mse(c["blame_pivot"]["pivot"], sign=False),
            fmt_mse(fw["pivot"], sign=False) if fw else "–",
        ])  # fmt: skip
    oracle = sig["_oracle"]
    uniform = oracle["blame_pivot"]["uniform_pivot"]
    rows.append(
        ["*a constant signal*", "", "", "", "", "", "", "", fmt_mse(uniform, sign=False), ""]
    )
    rows.append(["*A\\* itself*", "", "", "", "", "", "", "", fmt_mse(oracle["blame_pivot"]["pivot"], sign=False),
                 fmt_mse(oracle["blame_first_wrong"]["pivot"], sign=False)
                 if oracle.get("blame_first_wrong") else ""])  # fmt: skip
    return table(
        ["algorithm", "completions trained", "advantage: r within", "on successes",
         "on failures", "credit: r within", "credit: ρ within", "credit: pooled r",
         "blame on the pivot", "blame on the first wrong token"],
        rows,
    )  # fmt: skip


def _null(r: dict | None, share: float) -> list[str]:
    """A share's random-20 % null: its mean (sd) and how often a random subset reaches the
    share (– where the share is undefined: a total mass ≤ 0)."""
    if not r or not math.isfinite(share):
        return ["–", "–"]
    return [f"{r['mean']:.2f} (sd {r['sd']:.2f})", f"{r['p_at_least']:.3f}"]


def _by_prompt(b: dict | None) -> str:
    """A share's s.e. by prompt and its 90 % bootstrap interval (– under 4 prompts)."""
    if not b or b["prompts"] < 4 or not math.isfinite(b["sd"]):
        return "–"
    return f"± {b['sd']:.2f} [{b['lo']:.2f}, {b['hi']:.2f}]"


def entropy_table() -> str:
    """Criterion 3 at each batch's main K: the correlations, then the two shares, each with
    its own random-20 % null and the noise-free one with its interval by prompt."""
    corr, shares = [], []
    for label, d in batches():
        k = main_k(d)
        e = metrics(d, k)["entropy"]
        corr.append([
            label, k, fmt(e["pooled_pearson"], 2), fmt(e.get("pooled_pearson_sq"), 2),
            fmt(e.get("pooled_pearson_half_product"), 2), fmt(e["pooled_spearman"], 2),
            fmt_mse(e["within"]["spearman"]),
        ])  # fmt: skip
        shares.append([
            label, k, fmt(e["top20_share_abs"], 2),
            *_null(e["random20_share_abs"], e["top20_share_abs"]),
            fmt(e["top20_share_sq"], 2), _by_prompt(e.get("share_sq_by_prompt")),
            *_null(e.get("random20_share_sq"), e["top20_share_sq"]),
            fmt(e["oracle_top20_share_abs"], 2),
        ])  # fmt: skip
    return table(
        ["batch", "K", "r(H, \\|A*\\|)", "r(H, A*²)", "r(H, A*₁·A*₂) (noise-free)",
         "ρ(H, \\|A*\\|)", "ρ(H, \\|A*\\|) within completions"],
        corr,
    ) + "\n" + table(
        ["batch", "K", "top-20 % H: share of Σ\\|A*\\|", "random 20 %", "P(random ≥)",
         "share of ΣA*² (noise-free)", "± by prompt [90 %]", "random 20 %", "P(random ≥)",
         "top-20 % by \\|A*\\| (the most possible)"],
        shares,
    )  # fmt: skip


def first_wrong_table() -> str:
    """What ``V̂`` does at the first token off the reference scratchpad of a failed long-chain
    completion (main K)."""
    rows = []
    for label, d in batches():
        k = main_k(d)
        fw = metrics(d, k)["signals"]["_oracle"].get("first_wrong_value")
        if not fw:
            continue
        n = fw["completions"]
        rows.append([
            label, k, str(n), fmt(fw["before"]["mean"]), fmt(fw["after"]["mean"]),
            fmt_mse(fw["change"]), f"{fw['recovers']} ({fw['recovers'] / n:.0%})",
            f"{fw['pivot_at']} ({fw['pivot_at'] / n:.0%})",
            f"{fw['pivot_later']} ({fw['pivot_later'] / n:.0%})",
        ])  # fmt: skip
    return table(
        ["batch", "K", "failed completions", "V̂ before the first wrong token", "V̂ after it",
         "A* of the first wrong token", "a later V̂ ≥ 0.5", "pivot at it", "pivot after it"],
        rows,
    )  # fmt: skip


SENSITIVITY = (
    ("gtpo", "advantages"), ("gtpo", "credit"), ("grpo_s", "credit"), ("forking_tokens", "credit"),
    ("steer", "credit"), ("tepo", "credit"), ("grpo", "credit"),
)  # fmt: skip


def sensitivity_table() -> str:
    """Within-completion Pearson r of the signals that vary within completions (and GTPO's
    advantage on failures), the noise-free entropy share with its own null, and the value at
    the first wrong token, per batch and K: does a verdict hold across them?"""
    rows = []
    for label, d in batches():
        for k in sorted(d["oracle"], key=int):
            sig = metrics(d, k)["signals"]
            e = metrics(d, k)["entropy"]
            cells = []
            for name, kind in SENSITIVITY:
                w = sig.get(name, {}).get(kind, {}).get("within") if name in sig else None
                if w is None or w["no_within_credit"]:
                    cells.append("none")
                else:
                    m = w["pearson"]
                    cells.append(f"{fmt(m['mean'], 2, True)} ± {fmt(m['se'], 2)}")
            fail = sig["gtpo"]["advantages"].get("within_failure") if "gtpo" in sig else None
            cells.append(f"{fmt(fail['pearson']['mean'], 3, True)} ± {fmt(fail['pearson']['se'], 3)}"
                         if fail and not fail["no_within_credit"] else "–")  # fmt: skip
            p_sq = _null(e.get("random20_share_sq"), e["top20_share_sq"])[1]
            cells.append(f"{fmt(e['top20_share_sq'], 2)} ({p_sq})")
            fw = sig["_oracle"].get("first_wrong_value")
            cells.append(f"{fmt(fw['before']['mean'], 3)} → {fmt(fw['after']['mean'], 3)}; "
                         f"{fw['recovers'] / fw['completions']:.0%}" if fw else "–")  # fmt: skip
            rows.append([label, k, *cells])
    head = [f"{n} {'adv.' if k == 'advantages' else 'credit'}" for n, k in SENSITIVITY]
    return table(["batch", "K", *head, "gtpo adv. on failures",
                  "top-20 % H share of ΣA*² (P(random ≥))",
                  "V̂ at the first wrong token; a later V̂ ≥ 0.5"], rows)  # fmt: skip


def learning_rows() -> list[dict] | None:
    """Per benchmark variant: its learning figures over seeds and its credit agreement on the
    long-chain warm-start batch (an ablation's own Config is not scored by the oracle run:
    its credit cells are empty)."""
    learn, d = load("longchain_learning"), load("longchain_step0")
    if learn is None or d is None:
        return None
    from refimpl.bench.result_header import expect

    path = RESULTS / "longchain_learning.json"
    expect(isinstance(learn["results"], dict) and learn["results"], path,
           "results: expected the benchmark's task (refimpl bench-learning's results.json)")  # fmt: skip
    res = next(iter(learn["results"].values()))
    sig = metrics(d, main_k(d))["signals"]
    rows = []
    for label in LEARNING_ALGOS:
        if label not in res["summary"]:
            continue
        per_seed = res["runs"][label]
        gain_mean, gain_se = stats.mean_se([r["gain"] for r in per_seed.values()])
        credit = None if " " in label else sig[label]["credit"]
        rows.append({"label": label, "summary": res["summary"][label], "credit": credit,
                     "gain_mean": gain_mean, "gain_se": gain_se,
                     "seeds": sorted(per_seed, key=int)})  # fmt: skip
    return rows


def credit_r(row: dict) -> float:
    """The within-completion Pearson r of a variant's credit (0 where it is constant)."""
    w = row["credit"]["within"]
    return 0.0 if w["no_within_credit"] else float(w["pearson"]["mean"])


def learning_table() -> str:
    """Does credit agreement predict learning speed? The long-chain benchmark's learning
    figures beside each algorithm's credit agreement on the long-chain warm-start batch."""
    rows_in = learning_rows()
    if rows_in is None:
        return "*Not measured yet.*\n"
    rows = []
    for row in rows_in:
        s, c = row["summary"], row["credit"]
        t = s["tokens_to_target"]
        reached = (f"{t['median'] / 1e3:.0f}k ({t['reached']}/{s['seeds']})"
                   if math.isfinite(t["median"]) else f"not reached ({t['reached']}/{s['seeds']})")  # fmt: skip
        rows.append([
            row["label"], str(s["seeds"]), f"{s['final']['mean']:.3f} ± {s['final']['std']:.3f}",
            f"{row['gain_mean']:+.3f} ± {row['gain_se']:.3f}", f"{s['auc']['mean']:.3f}", reached,
            f"{s['pass1_end']['mean']:.3f}", f"{s['pass16_end']['mean']:.3f}",
            f"{s['entropy_start']['mean']:.3f} → {s['entropy_end']['mean']:.3f}",
            within_text(c["within"]) if c else "(ablation: not scored)",
            fmt_mse(c["blame_pivot"]["pivot"], sign=False) if c else "",
            f"{s['time_s']['mean'] / 60:.1f}",
        ])  # fmt: skip
    scored = [r for r in rows_in if r["credit"]]
    xs, ys = [credit_r(r) for r in scored], [r["gain_mean"] for r in scored]
    rho, p = stats.exact_spearman(xs, ys)
    text = (f"\nAcross the {len(scored)} algorithms the oracle scored, Spearman's ρ between the "
            f"credit's within-completion r and the mean gain is {rho:+.2f} (exact permutation "
            f"p = {p:.2f}, two-sided, over all {math.factorial(len(scored)):,} orderings).\n")  # fmt: skip
    return table(
        ["algorithm", "seeds", "final greedy (mean ± sd)", "gain (mean ± s.e.)", "AUC",
         "tokens to target, median", "pass@1 end", "pass@16 end", "entropy start → end",
         "credit: r within (warm start)", "blame on the pivot", "minutes per run"],
        rows,
    ) + text  # fmt: skip


def learning_figure(out: Path) -> Path | None:
    """The scatter of the learning table: credit agreement (x) against gain (y, ± s.e.)."""
    rows = [r for r in learning_rows() or [] if r["credit"]]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        x = credit_r(r)
        ax.errorbar(x, r["gain_mean"], yerr=r["gain_se"], fmt="o", capsize=3)
        ax.annotate(r["label"], (x, r["gain_mean"]), textcoords="offset points", xytext=(5, 4))
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_xlabel("credit: within-completion r with A* (warm start; 0 = constant)")
    ax.set_ylabel(f"held-out greedy gain over the budget (± s.e., {len(rows[0]['seeds'])} seeds)")
    ax.set_title("Long chain: does credit agreement predict learning?")
    from refimpl.plots import save_figure

    save_figure(fig, out, dpi=130, bbox_inches="tight")
    plt.close(fig)
    return out


# --------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------


def token_figure(d: dict, out: Path, k: str | None = None) -> Path:
    """One failed and one successful completion of a batch, every token coloured by A* and by
    the advantages of GRPO, GTPO, GRPO-S and TEPO (each row its own symmetric scale)."""
    from refimpl.notebook_figures import plot_completion_credit
    from refimpl.plots import save_figure

    fig = plot_completion_credit(d, k=k or main_k(d), algos=FIGURE_ALGOS)
    return save_figure(fig, out, dpi=130, bbox_inches="tight")


def blocks() -> dict[str, str]:
    out = {"calibration": calibration_table(), "oracle": oracle_table(), "entropy": entropy_table(),
           "first-wrong": first_wrong_table(), "sensitivity": sensitivity_table(),
           "learning": learning_table()}  # fmt: skip
    for stem, label in BATCHES:
        out[f"agreement-{stem}"] = agreement_table(stem, label)
    out["agreement-real_smollm2"] = agreement_table("real_smollm2_k32", REALS[1][1], "32")
    return out


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-figure", action="store_true", help="leave the figures alone")
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="the result files (default: the committed ones next to this script)",
    )


def _build(args: argparse.Namespace) -> dict[Path, dict[str, str]]:
    """Every block of the page from the files under ``--results`` (read here, before the
    page writer touches the page)."""
    from refimpl.bench.result_header import ResultFileError

    global RESULTS
    RESULTS = args.results
    _LOADED.clear()
    _METRICS.clear()
    if not RESULTS.is_dir():
        raise ResultFileError(f"--results: {RESULTS} is not a directory of result files")
    return {PAGE: blocks()}


def _figures(args: argparse.Namespace) -> None:
    if not args.no_figure and (d := load("longchain_step0")) is not None:
        print(token_figure(d, FIGURES / "credit_tokens_longchain.png"))
    if not args.no_figure and (f := learning_figure(FIGURES / "credit_learning_longchain.png")):
        print(f)


def main(argv: list[str] | None = None) -> int:
    """Exit 0 (written, or current with ``--check``), 1 (stale, with ``--check``) or 2 (a
    result file missing or damaged, named on one line: nothing is written); the lab's page
    writer (``scripts/experiments/page_writer.py``) holds these guarantees."""
    return page_writer.main(
        argv, prog="scripts/experiments/credit/credit_page.py", description=__doc__.splitlines()[0],
        prefix="credit", build=_build, add_arguments=_arguments, after_write=_figures,
        inputs=lambda args: [args.results],
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
