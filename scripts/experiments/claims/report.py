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

    python scripts/experiments/claims/report.py               # rewrite the blocks and the figure
    python scripts/experiments/claims/report.py --no-figure   # the blocks only
    python scripts/experiments/claims/report.py --check       # are they current?

The statistics (paired differences, Student's t verdicts at each comparison's degrees of
freedom, minimal detectable differences, seeds for 80 % power, censored times to a
threshold) are defined once, in ``stats.py`` beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent  # scripts/experiments/claims/
sys.path.insert(0, str(HERE))
import stats as st  # noqa: E402
from stats import Comparison, Interval, mean_se, over_seeds, paired, rates  # noqa: E402

ROOT = HERE.parents[2]  # the repository
REAL = HERE / "results" / "real"
CROSS = REAL / "cross_machine"
TOY = HERE / "results" / "toy" / "results.json"
PAGE = ROOT / "docs" / "claims.md"
RESULTS_PAGE = ROOT / "docs" / "results.md"
#: The seeds of the first pass, where every arm ran (later passes add seeds to some arms).
FIRST_SEEDS = (0, 1, 2)
MAIN_ARMS = ("dapo", "gtpo", "grpo_s", "tepo")
#: Real-model arms, in the order of the tables.
REAL_ARMS = ("base", "dapo", "dapo_noshape", "gtpo", "grpo_s", "tepo", "grpo", "gtpo_alpha0",
             "gtpo_batch", "tepo_nomask")  # fmt: skip
#: The two DAPO arms: the DAPO paper's default (overlong shaping on) and without the shaping.
REAL_DAPOS = ("dapo", "dapo_noshape")
TOY_DAPOS = ("dapo", "dapo overlong_shaping=False")
NOSHAPE = "DAPO without overlong shaping"
NAMES = {
    "base": "base model",
    "dapo": "DAPO",
    "dapo_noshape": NOSHAPE,
    "dapo overlong_shaping=False": NOSHAPE,
    "gtpo": "GTPO (α₂ = 0.1)",
    "grpo_s": "GRPO-S",
    "tepo": "TEPO",
    "grpo": "GRPO",
    "gspo": "GSPO",
    "gtpo_alpha0": "GTPO, α₂ = 0",
    "gtpo_batch": "GTPO, stats = batch (Eq. 4 literal)",
    "gtpo alpha_2=0.0": "GTPO, α₂ = 0",
    "gtpo stats=batch": "GTPO, stats = batch (Eq. 4 literal)",
    "tepo kl_mask=False": "TEPO without its mask",
    "tepo_nomask": "TEPO without its mask",
}
#: Real model: a held-out success at least the seed's base success + this counts as reached
#: (docs/claims.md, "Steps to a held-out threshold", says why 0.10).
REAL_THRESHOLD_GAIN = 0.10

#: The first pass's files (2026-12-03): they record only the architecture ("x86_64"), not the
#: CPU, so the page says their machine is unrecorded (issue 47: no machine from outside the
#: file). Named here for the cross-machine reruns of them.
FIRST_PASS_FILES = frozenset(
    {(a, s) for a in ("base", "dapo", "gtpo", "grpo_s", "tepo", "grpo", "gtpo_alpha0",
                      "tepo_nomask") for s in FIRST_SEEDS} | {("gtpo_batch", 0)}
)  # fmt: skip

REAL_CMD = "bash scripts/experiments/claims/run_real.sh"
REAL_CMD_EMPTY = "OUT=/tmp/claims-real bash scripts/experiments/claims/run_real.sh"


# --------------------------------------------------------------------------------------------
# Loading, and the machine of each file
# --------------------------------------------------------------------------------------------
def _read(path: Path) -> dict:
    from refimpl.bench.resultfiles import read_result

    return read_result(path, "docs/claims.md reads it")


def _with_samples(result: dict, path: Path) -> dict:
    """``result`` with each evaluation's ``n_samples`` (the run's ``--eval-samples``); a
    file without evaluations is refused, naming it."""
    from refimpl.bench.resultfiles import expect

    evals = result["evals"]
    expect(isinstance(evals, list) and len(evals) > 0 and all(isinstance(e, dict) for e in evals),
           path, "evals: expected a non-empty list of evaluations")  # fmt: skip
    for e in evals:
        e.setdefault("n_samples", int(result["args"]["eval_samples"]))
    return result


def load_real(directory: Path | None = None) -> dict[tuple[str, int], dict]:
    """``{(arm, seed): result}`` of every ``<arm>_seed<seed>.json`` in ``directory`` (default
    REAL); each evaluation gets its ``n_samples`` (the run's ``--eval-samples``). A directory
    without such files, a damaged file, or an arm's seed without the base file it is compared
    with: ``ResultFileError`` naming it."""
    from refimpl.bench.resultfiles import ResultFileError

    directory = directory or REAL
    if not directory.is_dir():
        raise ResultFileError(f"{directory}: missing (the real-model result files)")
    out = {}
    for path in sorted(directory.glob("*_seed*.json")):
        m = re.fullmatch(r"(.+)_seed(\d+)\.json", path.name)
        if m:
            out[(m.group(1), int(m.group(2)))] = _with_samples(_read(path), path)
    if not out:
        raise ResultFileError(f"{directory}: no <arm>_seed<seed>.json result file")
    for arm, seed in sorted(out):
        if ("base", seed) not in out:
            raise ResultFileError(
                f"{directory / f'base_seed{seed}.json'}: missing ({arm}_seed{seed}.json is "
                "compared with the base model of its seed)"
            )
    return out


def load_cross(directory: Path | None = None) -> dict[str, dict]:
    """``{file name: result}`` of the cross-machine reruns (``<arm>_seed<seed>_<machine>.json``)."""
    from refimpl.bench.resultfiles import ResultFileError

    directory = directory or CROSS
    if not directory.is_dir():
        raise ResultFileError(f"{directory}: missing (the cross-machine result files)")
    out = {}
    for path in sorted(directory.glob("*_seed*_*.json")):
        out[path.name] = _with_samples(_read(path), path)
    return out


def load_toy(path: Path | None = None) -> dict:
    """The collapse benchmark's ``results.json``: ``ResultFileError`` naming it when it is
    missing or damaged (the page's toy tables are built from it)."""
    return _read(path or TOY)


def machine_of(result: dict, key: tuple[str, int] | None = None) -> str:
    """The machine a result file was computed on, from its own record only: the CPU's model
    name (and numeric path, torch, threads where recorded); "unrecorded" where the file does
    not name its CPU model (the first pass's files record only "x86_64")."""
    from refimpl.runs.numerics import names_cpu_model

    m = result.get("machine", {})
    cpu = str(m.get("cpu", ""))
    if not names_cpu_model(cpu):
        return f"unrecorded (the file records only “{cpu or '?'}”)"
    if not m.get("path"):  # a benchmark's machine record: no numeric path in it
        return f"{cpu}, {m.get('cores', '?')} cores, {m.get('date', '?')}, commit {m.get('commit', '?')}"
    threads = m.get("threads", m.get("torch_threads"))
    return (f"{cpu}, {m['path']} path, torch {m.get('torch', '?')}, {threads} "
            f"thread{'' if threads == 1 else 's'}")  # fmt: skip


def seed_list(seeds) -> str:
    """0, 1, 2, 3 → "0–3"; 0, 2 → "0, 2"."""
    s = sorted(seeds)
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}–{s[-1]}"
    return ", ".join(map(str, s))


def machines_block(real: dict, toy: dict | None, cross: dict) -> str:
    """Which machine computed each result file, named from the files' records."""
    groups: dict[str, dict[str, list[int]]] = {}
    for (arm, seed), r in sorted(real.items()):
        groups.setdefault(machine_of(r, (arm, seed)), {}).setdefault(arm, []).append(seed)
    lines = []
    for machine, arms in groups.items():
        files = "; ".join(f"{NAMES.get(a, a)} {seed_list(s)}" for a, s in arms.items())
        lines.append(f"- **{machine}**: {files}.")
    for name, r in cross.items():
        lines.append(f"- `cross_machine/{name}`: {machine_of(r)}.")
    if toy is not None:
        lines.append(f"- The toy file `toy/results.json`: {machine_of(toy)}.")
    return "\n".join(lines) + "\n\n" + cross_machine_sentence(real, cross) + "\n"


def cross_machine_check(real: dict, cross: dict) -> list[dict]:
    """Per cross-machine rerun: does every evaluation give the first pass's correct count on
    every held-out problem, and how far apart are the logged losses?"""
    out = []
    for name, r in cross.items():
        arm, seed = re.fullmatch(r"(.+)_seed(\d+)_\w+\.json", name).groups()
        first = real.get((arm, int(seed)))
        if first is None:
            continue
        pairs = list(zip(r["evals"], first["evals"]))
        same = sum(a["step"] == b["step"] and a["correct"] == b["correct"] for a, b in pairs)
        losses = [abs(a["loss"] - b["loss"]) for a, b in zip(r.get("steps", []),
                                                             first.get("steps", []))]  # fmt: skip
        out.append({"name": name, "arm": arm, "seed": int(seed), "evals": len(pairs),
                    "same": same, "problems": len(r["evals"][0]["correct"]),
                    "steps": [e["step"] for e in r["evals"]],
                    "max_loss_diff": max(losses) if losses else None})  # fmt: skip
    return out


def cross_machine_sentence(real: dict, cross: dict) -> str:
    checks = cross_machine_check(real, cross)
    if not checks:
        return "No first-pass run has been repeated on another machine."
    parts = []
    for c in checks:
        loss = (f"; its logged losses differ by at most {c['max_loss_diff']:.1e}"
                if c["max_loss_diff"] is not None else "")  # fmt: skip
        parts.append(f"{NAMES.get(c['arm'], c['arm'])}, seed {c['seed']} (evaluations after "
                     f"step {', '.join(map(str, c['steps']))}): {c['same']} of {c['evals']} "
                     f"evaluations give the first pass's correct count on every one of the "
                     f"{c['problems']} problems{loss}")  # fmt: skip
    agree = all(c["same"] == c["evals"] for c in checks)
    return ("**The cross-machine check.** First-pass runs repeated on the second machine: "
            + "; ".join(parts) + ". "
            + ("So the two machines give the same held-out outcomes here, and arms run on "
               "different machines pair problem by problem."
               if agree else "The machines disagree: arms from different machines do not pair."))  # fmt: skip


# --------------------------------------------------------------------------------------------
# Formatting
# --------------------------------------------------------------------------------------------
def fmt(x: float | None, se: float | None = None, digits: int = 3, sign: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    s = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return s if se is None or not math.isfinite(se) else f"{s} ± {se:.{digits}f}"


def fmt_df(c: Comparison) -> str:
    return "one seed: normal" if c.one_seed else f"{c.df:.0f}"


def fmt_power(c: Comparison) -> str:
    n = c.seeds_needed
    if c.one_seed or (isinstance(n, float) and math.isnan(n)):
        return "—"
    if n is None:
        return "no n (the mean is 0)"
    return "more than 10⁶" if math.isinf(n) else f"{n}"


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def describe(c: Comparison, label: str, digits: int = 3) -> str:
    """A comparison in the ledger's words: its size, n, df, MDD and seeds for power."""
    if c.n == 0:
        return f"{label}: " + (f"not compared ({left_out_note(c)})" if c.left_out else "not run")
    note = f"; {left_out_note(c)}" if c.left_out else ""
    if c.one_seed:
        ((s, _),) = c.per_seed.items()
        return (f"{label} {fmt(c.diff, c.se, digits, sign=True)} (one seed, {s}: s.e. over "
                f"problems, normal quantile, not the spread between seeds; MDD "
                f"{c.mdd:.{digits}f}{note})")  # fmt: skip
    per = ", ".join(f"{v:+.{digits}f}" for v in c.per_seed.values())
    return (f"{label} {fmt(c.diff, c.se, digits, sign=True)} over {c.n} seeds (df {c.df:.0f}, "
            f"MDD {c.mdd:.{digits}f}, 80 % power at {fmt_power(c)} seeds; per seed {per}{note})")  # fmt: skip


def comparison_cells(c: Comparison, sign: int = +1, digits: int = 3) -> list[str]:
    """The columns every paired table shares: seeds, over seeds, df, bar, MDD, power, verdict."""
    seeds = seed_list(c.per_seed) + (" (one seed)" if c.one_seed else f" (n {c.n})")
    if c.left_out:
        seeds += f"; {left_out_note(c)}"
    return [seeds, fmt(c.diff, c.se, digits, sign=True), fmt_df(c), f"{st.critical(c.df):.2f}",
            fmt(c.mdd, digits=digits), fmt_power(c), c.verdict(sign)]  # fmt: skip


COMPARISON_HEAD = ["seeds", "over seeds (± s.e.)", "df", "t bar (s.e.)", "MDD (80 %)",
                   "seeds for 80 % power", "verdict on “first > second”"]  # fmt: skip


# --------------------------------------------------------------------------------------------
# Real model
# --------------------------------------------------------------------------------------------
def final(result: dict) -> dict:
    return result["evals"][-1]


def eval_at(result: dict, step: int) -> dict | None:
    return next((e for e in result["evals"] if e["step"] == step), None)


def seeds_of(real: dict, arm: str) -> list[int]:
    return sorted(s for a, s in real if a == arm)


def n_samples(real: dict) -> int:
    any_result = next(iter(real.values()))
    return int(any_result["args"]["eval_samples"])


def verdict(diff: float, se: float, df: float, claimed_sign: int = +1) -> str:
    """The verdict rule (``stats.verdict``): Student's t at ``df``."""
    return st.verdict(diff, se, df, claimed_sign)


def cpu_record(result: dict) -> str:
    """The CPU a result file records (``machine.cpu``): a model name ("AMD EPYC"), or the
    first pass's bare "x86_64"."""
    return str(result.get("machine", {}).get("cpu", ""))


def one_machine(real: dict, a: str, b: str, seed: int) -> bool:
    """Both arms of ``seed`` ran on one machine, by their files' own records: the same CPU
    record. The first pass's files all record the same bare "x86_64" (one machine, one
    pass); a file that names a CPU model never pairs with one that does not."""
    return cpu_record(real[(a, seed)]) == cpu_record(real[(b, seed)])


def mixed_seeds(real: dict, a: str, b: str) -> list[int]:
    """The seeds both arms have but ran on different machines: left out of every pair."""
    return [s for s in seeds_of(real, a) if (b, s) in real and not one_machine(real, a, b, s)]


def real_compare(real: dict, a: str, b: str, get: Callable | None = None) -> Comparison:
    """a − b on the seeds both arms have, run on one machine (``one_machine``; the others are
    ``mixed_seeds``, left out): per seed the paired difference of the final held-out
    evaluations (with its s.e. over problems), or of ``get(real, arm, seed)``."""
    seeds = [s for s in seeds_of(real, a) if (b, s) in real and one_machine(real, a, b, s)]
    if get is None:
        per = {s: paired(final(real[(a, s)]), final(real[(b, s)])) for s in seeds}
        c = over_seeds({s: d for s, (d, _) in per.items()}, {s: e for s, (_, e) in per.items()})
    else:
        c = over_seeds({s: get(real, a, s) - get(real, b, s) for s in seeds})
    return dataclasses.replace(c, left_out=tuple(mixed_seeds(real, a, b)))


def left_out_note(c: Comparison) -> str:
    """ "seeds 0–2 left out: …" where a pair's seeds ran on two machines, else ""."""
    if not c.left_out:
        return ""
    return (f"seed{'s' if len(c.left_out) > 1 else ''} {seed_list(c.left_out)} left out: the "
            "two arms ran on different machines")  # fmt: skip


def kept_groups(result: dict) -> float:
    """The mean kept fraction over the steps that log it (a rollout's first step only)."""
    vals = [h["refimpl/kept_groups_frac"] for h in result["steps"]
            if "refimpl/kept_groups_frac" in h]  # fmt: skip
    return float(np.mean(vals)) if vals else math.nan


def _train_cells(real: dict, arm: str, seeds: list[int]) -> list[str]:
    if arm == "base":
        return ["—"] * 5
    tr = [real[(arm, s)]["train"] for s in seeds]

    def m(key, digits=3):
        vals = [t[key] for t in tr if key in t]
        return fmt(float(np.mean(vals)), digits=digits) if vals else "—"

    kept = [kept_groups(real[(arm, s)]) for s in seeds]
    kept = [k for k in kept if math.isfinite(k)]
    minutes = float(np.mean([real[(arm, s)]["train_s"] for s in seeds])) / 60
    return [m("entropy", 2), f"{m('clip_frac_low')} / {m('clip_frac_high')}", m("kl_mask_frac"),
            fmt(float(np.mean(kept)), digits=2) if kept else "—", f"{minutes:.1f}"]  # fmt: skip


def real_arm_table(real: dict) -> str:
    """Held-out success (per seed and over seeds), pass@k, entropy, clip/mask, time."""
    ks = [k for k in (1, 2, 4, 8) if k <= n_samples(real)]
    head = ["arm", "seeds", "success per seed (± s.e.)", "success over seeds (± s.e.)",
            *(f"pass@{k}" for k in ks), "entropy (eval)", "train entropy", "clip low / high",
            "TEPO mask", "kept groups", "train min"]  # fmt: skip
    rows = []
    for arm in REAL_ARMS:
        seeds = seeds_of(real, arm)
        if not seeds:
            continue
        evs = [final(real[(arm, s)]) for s in seeds]
        rows.append([
            NAMES[arm], seed_list(seeds), ", ".join(fmt(e["success"], e["success_se"]) for e in evs),
            fmt(*mean_se(e["success"] for e in evs)) if len(evs) > 1 else "—",
            *(fmt(float(np.mean([e[f"pass@{k}"] for e in evs]))) for k in ks),
            fmt(float(np.mean([e["entropy"] for e in evs])), digits=2),
            *_train_cells(real, arm, seeds),
        ])  # fmt: skip
    return table(head, rows)


#: The real model's paired rows: (a, b); a − b is judged on "a > b".
REAL_PAIRS = (("gtpo", "dapo"), ("gtpo", "dapo_noshape"), ("grpo_s", "dapo"),
              ("grpo_s", "dapo_noshape"), ("dapo_noshape", "dapo"), ("tepo", "dapo"),
              ("tepo", "grpo"), ("gtpo", "gtpo_alpha0"), ("gtpo_alpha0", "dapo"),
              ("gtpo_alpha0", "dapo_noshape"), ("gtpo_batch", "dapo"),
              ("gtpo_batch", "dapo_noshape"), ("tepo", "tepo_nomask"))  # fmt: skip


def real_paired_table(real: dict) -> str:
    head = ["difference", "per seed (± s.e. over problems)", *COMPARISON_HEAD]
    rows = []
    for a, b in REAL_PAIRS:
        c = real_compare(real, a, b)
        if c.n:
            per = ", ".join(fmt(c.per_seed[s], c.per_seed_se[s], sign=True) for s in c.per_seed)
            cells = comparison_cells(c)
            cells[-1] = _real_verdict(c, seeds_note=True)
            rows.append([f"{NAMES[a]} − {NAMES[b]}", per, *cells])
        elif c.left_out:  # every seed of the pair mixes machines: say so, compare nothing
            rows.append([f"{NAMES[a]} − {NAMES[b]}", "—", left_out_note(c),
                         *["—"] * (len(COMPARISON_HEAD) - 2), "not compared"])  # fmt: skip
    for arm in ("dapo", "dapo_noshape", "gtpo", "grpo_s", "tepo"):
        c = real_compare(real, arm, "base")
        if c.n:
            per = ", ".join(fmt(c.per_seed[s], c.per_seed_se[s], sign=True) for s in c.per_seed)
            z = min(d / c.per_seed_se[s] for s, d in c.per_seed.items())
            cells = comparison_cells(c)
            cells[-1] = (
                _real_verdict(c, seeds_note=True)
                + f"; smallest per-seed gain {z:.1f} s.e. over problems"
            )
            rows.append([f"{NAMES[arm]} − base model", per, *cells])
    return table(head, rows)


#: The design's bar for a run long enough to compare algorithms on, set with the 12-step
#: design on DAPO seed 0 (docs/claims.md, "Why 12 steps") and asked of every seed: DAPO's
#: paired gain over the base model at least this many s.e. over problems. The same bar says,
#: per arm, which seeds did not learn.
LEARN_BAR_SE = 4.0
LEARN_ARMS = ("dapo", "dapo_noshape", "gtpo", "grpo_s", "tepo", "grpo", "gtpo_alpha0",
              "gtpo_batch", "tepo_nomask")  # fmt: skip


def learn_gains(real: dict, arm: str) -> dict[int, tuple[float, float, float]]:
    """{seed: (paired gain over the base model, its s.e. over problems, final success)}."""
    out = {}
    for s in seeds_of(real, arm):
        if not one_machine(real, arm, "base", s):
            continue  # left out: the base model's evaluation ran on another machine
        d, se = paired(final(real[(arm, s)]), final(real[("base", s)]))
        out[s] = (d, se, final(real[(arm, s)])["success"])
    return out


def below_bar(real: dict, arm: str) -> dict[int, tuple[float, float, float]]:
    """The seeds whose gain over the base model is below LEARN_BAR_SE s.e. (did not learn)."""
    return {s: g for s, g in learn_gains(real, arm).items() if not g[0] >= LEARN_BAR_SE * g[1]}


def learning_bar(real: dict) -> str:
    """The design's bar over every seed of DAPO, and per arm how often a seed fails to learn."""
    gains = learn_gains(real, "dapo")
    fails = below_bar(real, "dapo")
    verdict = ("**it failed**" if fails else "it held") + (
        " in " + ", ".join(f"seed {s} ({d:+.3f}, {d / se:+.1f} s.e.)" for s, (d, se, _) in fails.items())
        if fails else f" in all {len(gains)}")  # fmt: skip
    rows = []
    for arm in LEARN_ARMS:
        g = learn_gains(real, arm)
        if not g:
            continue
        b = below_bar(real, arm)
        worse = [s for s, (d, se, _) in g.items() if d < 0]
        rows.append([NAMES[arm], seed_list(g), f"{len(b)} of {len(g)}",
                     "; ".join(f"seed {s}: {d:+.3f} ({d / se:+.1f} s.e.), success {y:.3f}"
                               for s, (d, se, y) in b.items()) or "—",
                     f"{len(worse)} of {len(g)}"])  # fmt: skip
    return (
        f"**The design's bar, as it was set.** The 12-step design was chosen on DAPO seed 0 "
        f"alone (above), with a bar for every seed: DAPO's paired gain over the base model at "
        f"least {LEARN_BAR_SE:.0f} s.e. over problems. Over the {len(gains)} seeds the files "
        f"hold ({seed_list(gains)}): {verdict}. Every seed stays in the ledger.\n\n"
        f"**How often a seed fails to learn**, per arm, by the same bar (a seed's gain over the "
        f"base model below {LEARN_BAR_SE:.0f} s.e. over problems):\n\n"
        + table(
            [
                "arm",
                "seeds",
                "below the bar",
                "those seeds: gain (s.e.), final success",
                "worse than the base model",
            ],
            rows,
        )  # fmt: skip
    )


def grid_seeds(real: dict, arms) -> list[int]:
    """Seeds on which every arm of ``arms`` was evaluated at the same several steps (a curve,
    not only the end)."""
    out = []
    for s in sorted({s for _, s in real}):
        grids = [tuple(e["step"] for e in real[(a, s)]["evals"]) for a in arms if (a, s) in real]
        if len(grids) == len(arms) and len(set(grids)) == 1 and len(grids[0]) > 1:
            out.append(s)
    return out


def steps_to(result: dict, base: dict, threshold: float) -> tuple[float, float]:
    """(first evaluated step at or above the threshold, linearly interpolated step); inf if
    never. Step 0 is the base model's evaluation."""
    points = [(0, base["success"])] + [(e["step"], e["success"]) for e in result["evals"]]
    for (s0, y0), (s1, y1) in zip(points, points[1:]):
        if y1 >= threshold:
            frac = (threshold - y0) / (y1 - y0) if y1 > y0 and y0 < threshold else 0.0
            return float(s1), s0 + frac * (s1 - s0)
    return math.inf, math.inf


def real_crossing(result: dict, base: dict, threshold: float) -> Interval:
    """The censored time (in optimizer steps) to the threshold: (previous evaluation, first
    evaluation at or above it], or after the last evaluation."""
    grid = [0] + [e["step"] for e in result["evals"]]
    first = next((i + 1 for i, e in enumerate(result["evals"]) if e["success"] >= threshold),
                 None)  # fmt: skip
    return st.crossing(grid, first)


def real_times(real: dict, arm: str, seeds: list[int]) -> dict[int, Interval]:
    out = {}
    for s in seeds:
        if (arm, s) in real:
            base = final(real[("base", s)])
            out[s] = real_crossing(real[(arm, s)], base, base["success"] + REAL_THRESHOLD_GAIN)
    return out


def fmt_interval(t: Interval, scale: float = 1.0) -> str:
    if not t.reached:
        return f"> {t.lo / scale:.0f}"
    return f"({t.lo / scale:.0f}, {t.hi / scale:.0f}]"


def speed(times: dict[str, dict], base: str, unit: str, scale: float = 1.0) -> tuple[str, str]:
    """TEPO ÷ ``base``: the verdict on "half the time" and the numbers behind it (per-seed
    ratio bounds of the censored times, on the seeds both have, and their median's bounds)."""
    seeds = [s for s in times["tepo"] if s in times.get(base, {})]
    if not seeds:
        return f"against {NAMES[base]}: not measured", ""
    bounds = [st.ratio_bounds(times["tepo"][s], times[base][s]) for s in seeds]
    lo, hi = st.median_bounds(bounds)
    per = ", ".join(f"seed {s} {st.fmt_bounds(*b)}" for s, b in zip(seeds, bounds))
    first = sum(times[base][s].lo == 0 for s in seeds)
    return (
        f"against {NAMES[base]}: {st.speed_verdict(lo, hi)}",
        f"TEPO ÷ {NAMES[base]} ({unit}) per seed: {per}; median {st.fmt_bounds(lo, hi)} over "
        f"{len(seeds)} seeds ({NAMES[base]} there by the first evaluation in {first} of "
        f"{len(seeds)})",
    )


def auc_compare(real: dict, a: str, b: str) -> Comparison:
    """Per seed, a − b of the mean held-out success over every evaluation after the start (an
    area under the learning curve), on the seeds where both have the same several
    evaluations."""
    per = {}
    for s in grid_seeds(real, (a, b)):
        ra = np.mean([rates(e) for e in real[(a, s)]["evals"]], axis=0)
        rb = np.mean([rates(e) for e in real[(b, s)]["evals"]], axis=0)
        per[s] = float((ra - rb).mean())
    return over_seeds(per)


CONVERGENCE_ARMS = ("grpo", "dapo", "dapo_noshape", "tepo", "gtpo", "grpo_s")


def real_convergence_table(real: dict) -> str:
    arms = [a for a in CONVERGENCE_ARMS if seeds_of(real, a)]
    seeds = grid_seeds(real, arms)
    steps = [e["step"] for e in real[(arms[0], seeds[0])]["evals"]] if seeds else []
    head = ["arm", "seed", "threshold", "success at step 0 → " + " → ".join(map(str, steps)),
            "first evaluation ≥ threshold", "time to the threshold (steps)",
            "interpolated step"]  # fmt: skip
    rows, firsts = [], {}
    for arm in arms:
        for s in seeds:
            base = final(real[("base", s)])
            thr = base["success"] + REAL_THRESHOLD_GAIN
            first, interp = steps_to(real[(arm, s)], base, thr)
            t = real_crossing(real[(arm, s)], base, thr)
            firsts.setdefault(arm, []).append(t.lo == 0)
            curve = [base["success"]] + [e["success"] for e in real[(arm, s)]["evals"]]
            rows.append([NAMES[arm], str(s), fmt(thr), " → ".join(fmt(c) for c in curve),
                         "not reached" if math.isinf(first) else str(int(first)),
                         fmt_interval(t), "not reached" if math.isinf(interp)
                         else f"{interp:.1f}"])  # fmt: skip
    if not rows:
        return "(no seed has evaluations at several steps)\n"
    later = sorted({s for _, s in real} - set(seeds))
    firsts_line = "; ".join(f"{NAMES[a]} {sum(v)}/{len(v)}" for a, v in firsts.items())
    times = {a: real_times(real, a, seeds) for a in ("tepo", "grpo", "dapo")}
    ratios = [speed(times, b, "steps")[1] for b in ("grpo", "dapo")]
    areas = [describe(auc_compare(real, "tepo", b), f"TEPO − {NAMES[b]}") for b in ("grpo", "dapo")]
    return (
        table(head, rows)
        + f"\nSeeds {seed_list(seeds)} (evaluated after steps {', '.join(map(str, steps))})"
        + (f"; seeds {seed_list(later)} were evaluated after the last step only and are not "
           "in this table" if later else "")
        + f". Runs at or above the threshold by the first evaluation (step {steps[0]}): "
        + firsts_line + ".\n\n" + ".\n\n".join(r for r in ratios if r)
        + ".\n\nMean held-out success over the evaluations (the area under the curve), "
        + "paired by seed: " + "; ".join(areas) + ".\n"
    )  # fmt: skip


def alpha0_table(real: dict, seed: int = 0, show: int = 24) -> str:
    """DAPO and GTPO with α₂ = 0, step by step on one seed."""
    if ("dapo", seed) not in real or ("gtpo_alpha0", seed) not in real:
        return "(not run yet)\n"
    a, b = real[("dapo", seed)]["steps"], real[("gtpo_alpha0", seed)]["steps"]
    head = ["step", "DAPO loss", "GTPO α₂ = 0 loss", "DAPO grad norm", "GTPO α₂ = 0 grad norm",
            "DAPO mean abs A", "GTPO α₂ = 0 mean abs A", "reward (both)"]  # fmt: skip
    rows = []
    for i, (x, y) in enumerate(zip(a, b)):
        if i >= show:
            break
        rows.append([str(i + 1), f"{x['loss']:+.5f}", f"{y['loss']:+.5f}",
                     f"{x['grad_norm']:.4f}", f"{y['grad_norm']:.4f}",
                     f"{x.get('refimpl/adv_abs_mean', math.nan):.4f}",
                     f"{y.get('refimpl/adv_abs_mean', math.nan):.4f}",
                     f"{x.get('reward', math.nan):.4f} / {y.get('reward', math.nan):.4f}"
                     if "reward" in x else "—"])  # fmt: skip
    same = sum(1 for x, y in zip(a, b) if x["loss"] == y["loss"])
    return (
        table(head, rows) + f"\nIdentical logged losses: {same} of {min(len(a), len(b))} steps.\n"
    )


def alpha0_spread(real: dict) -> str:
    """The α₂ = 0 spread factor √(G(GL−1)/((G−1)GL)) at the runs' G and L, and for long L."""
    args = real[("dapo", 0)]["args"]
    g, length = int(args["group_size"]), int(args["max_new_tokens"])
    at_l = math.sqrt(g * (g * length - 1) / ((g - 1) * g * length)) - 1
    long = math.sqrt(g / (g - 1)) - 1
    return (f"So GTPO's advantages are DAPO's × √(G(GL−1)/((G−1)GL)) when every reply has L "
            f"tokens: with these runs' G = {g}, {100 * at_l:.1f} % larger at L = {length} (the "
            f"budget) and {100 * long:.1f} % for long replies (√(G/(G−1)), L → ∞).\n")  # fmt: skip


def why_twelve_steps(real: dict, step: int = 8) -> str:
    """DAPO seed 0 after ``step`` against the base model, paired problem by problem."""
    dapo, base = eval_at(real[("dapo", 0)], step), final(real[("base", 0)])
    d, se = paired(dapo, base)
    return (f"Why 12 steps: in a first, 24-step DAPO run of seed 0 the held-out success after "
            f"step {step} was already {fmt(dapo['success'], dapo['success_se'])} (base "
            f"{fmt(base['success'], base['success_se'])}), {d / se:.1f} s.e. of the paired "
            f"difference ({fmt(d, se, sign=True)} problem by problem, from the 12-step run's "
            f"file, whose evaluation after step {step} gives the same success, see below); "
            "24-step runs of every arm would not have fitted the session.\n")  # fmt: skip


# --------------------------------------------------------------------------------------------
# Toy testbed (the collapse benchmark)
# --------------------------------------------------------------------------------------------
def toy_runs(toy: dict) -> dict:
    return toy["results"]["countdown"]["runs"]


def toy_final(run: dict) -> float:
    """Held-out greedy success at the end of the token budget, where every run stops and
    evaluates: one point of every run (the benchmark's ``final`` since commit 602cc82; the
    first pass's file averaged the last two or three evaluations)."""
    return float(run["curve_success"][-1])


def toy_value(run: dict, key: str) -> float:
    return toy_final(run) if key == "final" else float(run[key])


def toy_compare(toy: dict | None, a: str, b: str, key: str = "final") -> Comparison:
    """Per-seed a − b (the same seed = the same warm start and RL seed), on the seeds both
    have."""
    if toy is None:
        return over_seeds({})
    ra, rb = toy_runs(toy).get(a, {}), toy_runs(toy).get(b, {})
    seeds = sorted((s for s in ra if s in rb), key=int)
    return over_seeds({int(s): toy_value(ra[s], key) - toy_value(rb[s], key) for s in seeds})


def toy_crossing(run: dict) -> Interval:
    """The censored time, in sampled tokens, to the benchmark's target (the first evaluation
    where the trailing mean of three reaches it): (previous evaluation, that one]."""
    grid = run["curve_tokens"]
    t = run["tokens_to_target"]
    return st.crossing(grid, grid.index(t) if math.isfinite(t) else None)


def toy_table(toy: dict) -> str:
    res = toy["results"]["countdown"]
    head = ["run", "final held-out greedy, per seed", "mean ± s.e.", "entropy start → end",
            "collapsed", "sampled tokens to target (k), per seed", "clip frac", "TEPO mask",
            "pass@16 end"]  # fmt: skip
    rows = []
    old = False
    for label, per_seed in res["runs"].items():
        runs = [per_seed[s] for s in sorted(per_seed, key=int)]
        old |= any("end_evals" in r for r in runs)
        rows.append([
            NAMES.get(label, label),
            ", ".join(f"{toy_final(r):.3f}" for r in runs),
            fmt(*mean_se(toy_final(r) for r in runs)),
            f"{np.mean([r['entropy_start'] for r in runs]):.3f} → "
            f"{np.mean([r['entropy_end'] for r in runs]):.3f}",
            f"{sum(r['collapsed'] for r in runs)}/{len(runs)}",
            ", ".join(fmt_interval(toy_crossing(r), 1e3) for r in runs),
            f"{np.mean([r['clip_frac'] for r in runs]):.4f}",
            "—" if not all(math.isfinite(r["mask_frac"]) for r in runs)
            else f"{np.mean([r['mask_frac'] for r in runs]):.4f}",
            "—" if any("end_evals" in r for r in runs)
            else f"{np.mean([r['pass16_end'] for r in runs]):.3f}",
        ])  # fmt: skip
    note = ("\n*pass@16 end* is not in this file at the budget's end (its runs record the mean "
            "over their last evaluations), so it is left out.\n" if old else "")  # fmt: skip
    return (f"Warm start {res['base']:.3f}; target {res['target']:.3f} (warm start + 0.05); "
            f"budget {res['budget_tokens']:,} sampled tokens.\n\n" + table(head, rows) + note)  # fmt: skip


#: The toy's paired rows: (a, b, run figure).
TOY_PAIRS = (("gtpo", "dapo", "final"), ("gtpo", TOY_DAPOS[1], "final"),
             ("grpo_s", "dapo", "final"), ("grpo_s", TOY_DAPOS[1], "final"),
             (TOY_DAPOS[1], "dapo", "final"), ("gtpo", "gtpo alpha_2=0.0", "final"),
             ("gtpo alpha_2=0.0", "dapo", "final"), ("gtpo alpha_2=0.0", TOY_DAPOS[1], "final"),
             ("gtpo stats=batch", "dapo", "final"), ("gtpo stats=batch", TOY_DAPOS[1], "final"),
             ("tepo", "tepo kl_mask=False", "final"), ("tepo", "dapo", "final"),
             ("gtpo", "dapo", "entropy_end"), ("gtpo", TOY_DAPOS[1], "entropy_end"),
             ("grpo_s", "dapo", "entropy_end"), ("grpo_s", TOY_DAPOS[1], "entropy_end"),
             ("tepo", "dapo", "entropy_end"))  # fmt: skip


def toy_paired_table(toy: dict) -> str:
    head = ["difference (final held-out greedy)", "per seed", *COMPARISON_HEAD]
    rows = []
    for a, b, key in TOY_PAIRS:
        c = toy_compare(toy, a, b, key)
        if c.n:
            what = "" if key == "final" else f" ({key.replace('_', ' ')})"
            rows.append([f"{NAMES.get(a, a)} − {NAMES.get(b, b)}{what}",
                         ", ".join(f"{v:+.3f}" for v in c.per_seed.values()),
                         *comparison_cells(c)])  # fmt: skip
    return table(head, rows)


#: The flags of the toy command, always written out (the rest follow the preset).
TOY_FLAGS = ("seeds", "ablations", "ablation_tasks", "eval_every", "out", "workers")


def toy_command(config: dict) -> str:
    """The ``refimpl bench-learning`` command that wrote a results.json, from its recorded
    settings: the preset, every field that differs from the preset's, and TOY_FLAGS."""
    from refimpl.bench.learning import LearningConfig

    preset = LearningConfig(preset=config["preset"]).with_preset(frozenset())
    parts = [f"--preset {config['preset']}"]
    for field in ("tasks", "algos", "seeds", "ablations", "ablation_tasks", "budget_steps",
                  "lr", "prompts_per_step", "group_size", "eval_every", "eval_problems",
                  "target_gain", "collapse_ratio", "out", "workers"):  # fmt: skip
        value = config[field]
        if field in TOY_FLAGS or value != getattr(preset, field):
            text = f'"{value}"' if " " in str(value) else f"{value}"
            parts.append(f"--{field.replace('_', '-')} {text}")
    return "refimpl bench-learning " + " ".join(parts)


# --------------------------------------------------------------------------------------------
# The ledger: one row per claim, one builder per row
# --------------------------------------------------------------------------------------------
def worst_drop(curve) -> float:
    """The largest fall of held-out success between two consecutive evaluations (0 if none)."""
    c = np.asarray(list(curve), dtype=float)
    return float(max(0.0, np.max(c[:-1] - c[1:]))) if c.size > 1 else 0.0


def real_curve(real: dict, arm: str, seed: int) -> list[float]:
    return [final(real[("base", seed)])["success"]] + [
        e["success"] for e in real[(arm, seed)]["evals"]
    ]


def commands(toy: dict | None, real_arms: tuple[str, ...] = (), real: dict | None = None) -> str:
    """The commands that reproduce a ledger row: the toy's, built from its file, and the real
    model's script with the arms and seeds the row reads."""
    out = []
    if toy is not None:
        out.append(f"toy: `{toy_command(toy['config'])}`")
    if real_arms and real:
        arms = ", ".join(a for a in real_arms if seeds_of(real, a))
        seeds = seed_list({s for a in real_arms for s in seeds_of(real, a)})
        out.append(f"real: `{REAL_CMD_EMPTY}` (every real run, into an empty directory; this "
                   f"row reads {arms} × seeds {seeds})")  # fmt: skip
    return "; ".join(out) or "—"


def _verdicts(cmps: dict[str, Comparison], sign: int = +1, real: bool = False) -> str:
    """ "against DAPO: not shown; against DAPO without overlong shaping: not run"; on the real
    model (``real``) a verdict the CPU cannot decide says how many seeds it needs."""
    return "; ".join(f"against {k}: {_real_verdict(c, sign) if real else c.verdict(sign) if c.n else _not_compared(c)}"
                     for k, c in cmps.items())  # fmt: skip


#: The smallest difference a real-model row should be able to detect (80 % power), and the
#: most paired seeds a row can have on CPU: a real-model run costs about 6 CPU-minutes, so 20
#: seeds of a pair are 40 runs, about 2 hours of a 2-core machine (the α₂ row's 18 seeds are
#: the largest the ledger ran).
MDD_TARGET = 0.05
CPU_SEEDS = 20


def seeds_to_decide(c: Comparison) -> float | None:
    """Paired seeds for an MDD of ``MDD_TARGET`` at the spread the seeds show (None: one
    seed or none, no spread to go by)."""
    if c.n < 2 or not math.isfinite(c.sd):
        return None
    return st.seeds_for_power(MDD_TARGET, c.sd)


def not_decidable(c: Comparison) -> str:
    """ "needs N seeds for an MDD of 0.05; not decidable on CPU" for a real-model comparison
    that would need more than ``CPU_SEEDS`` seeds, else ""."""
    n = seeds_to_decide(c)
    if n is None or n <= CPU_SEEDS:
        return ""
    shown = "more than 10⁶" if math.isinf(n) else f"{n}"
    return f"needs {shown} seeds for an MDD of {MDD_TARGET:g}; not decidable on CPU"


def describe_real(c: Comparison, label: str) -> str:
    """``describe`` of a real-model comparison, with "needs N seeds …; not decidable on CPU"
    where it is "not shown" and would need more than ``CPU_SEEDS`` seeds."""
    note = not_decidable(c) if c.n and c.verdict() == "not shown" else ""
    return describe(c, label) + (f" ({note})" if note else "")


def _real_verdict(c: Comparison, sign: int = +1, seeds_note: bool = False) -> str:
    """The verdict (a ledger cell: the word alone); with ``seeds_note``, a "not shown" that
    the CPU cannot decide says how many seeds it needs (a difference that holds or is
    contradicted is decided, whatever its MDD)."""
    if not c.n:
        return _not_compared(c)
    v = c.verdict(sign)
    note = not_decidable(c) if seeds_note and v == "not shown" else ""
    return v + (f" ({note})" if note else "")


def _not_compared(c: Comparison) -> str:
    return "not compared (its seeds ran on two machines)" if c.left_out else "not run"


def eval_entropy(real: dict, arm: str, seed: int) -> float:
    return final(real[(arm, seed)])["entropy"]


def toy_dapos(toy: dict | None, arm: str, key: str = "final") -> dict[str, Comparison]:
    """{DAPO arm's name: ``arm`` − that DAPO} on the toy."""
    return {NAMES[d]: toy_compare(toy, arm, d, key) for d in TOY_DAPOS}


def real_dapos(real: dict, arm: str, key: str = "final") -> dict[str, Comparison]:
    """{DAPO arm's name: ``arm`` − that DAPO} on the real model (final success, or the
    held-out entropy with ``key="entropy"``)."""
    get = None if key == "final" else eval_entropy
    return {NAMES[d]: real_compare(real, arm, d, get) for d in REAL_DAPOS}


def against_dapos(real: dict, toy: dict | None, arm: str, toy_arm: str,
                  key: str = "final") -> tuple[str, str, str]:  # fmt: skip
    """``arm`` − each DAPO on both testbeds: (toy verdicts, real verdicts, numbers)."""
    toy_c = toy_dapos(toy, toy_arm, "final" if key == "final" else "entropy_end")
    real_c = real_dapos(real, arm, key)
    what = "" if key == "final" else " held-out entropy"
    numbers = [describe(c, f"toy − {k}") for k, c in toy_c.items()]
    numbers += [describe_real(c, f"real{what} − {k}") for k, c in real_c.items()]
    return _verdicts(toy_c), _verdicts(real_c, real=True), "; ".join(numbers)


def _diff_row(real, toy, claim, quote, arm, toy_arm, key="final", extra="") -> list[str]:
    toy_v, real_v, numbers = against_dapos(real, toy, arm, toy_arm, key)
    numbers += f"; {extra}" if extra else ""
    return [claim, quote, toy_v, real_v, numbers,
            commands(toy, (arm, *REAL_DAPOS, "base"), real)]  # fmt: skip


def row_gtpo_beats_dapo(real, toy):
    return _diff_row(real, toy, "GTPO beats DAPO",
                     "“our methods significantly outperform a strong DAPO baseline” (v5 abstract; "
                     "§3.2, Table 1)", "gtpo", "gtpo")  # fmt: skip


def row_grpo_s_beats_dapo(real, toy):
    return _diff_row(real, toy, "GRPO-S beats DAPO",
                     "“consistently and substantially outperforming both the GRPO and DAPO "
                     "baselines across all configurations” (v5 §3.2)", "grpo_s", "grpo_s")  # fmt: skip


def _one_pair_row(real, toy, claim, quote, pair_real, pair_toy, key="final", sign=+1,
                  extra="") -> list[str]:  # fmt: skip
    t = toy_compare(toy, *pair_toy, key)
    r = real_compare(real, *pair_real, None if key == "final" else eval_entropy)
    what = "" if key == "final" else " held-out entropy"
    numbers = f"{describe(t, 'toy')}; {describe_real(r, 'real' + what)}" + (
        f"; {extra}" if extra else ""
    )
    return [claim, quote, t.verdict(sign) if t.n else "not run", _real_verdict(r, sign),
            numbers, commands(toy, (*pair_real, "base"), real)]  # fmt: skip


def row_entropy_driver(real, toy):
    return _one_pair_row(
        real, toy, "The entropy weighting is the driver (GTPO − GTPO with α₂ = 0)",
        "“confirming our entropy-weighting mechanism as the key driver of this performance "
        "boost” (v5 abstract; v5 itself runs no α₂ = 0 arm: §3.4 varies α₂ over 0.1–0.2)",
        ("gtpo", "gtpo_alpha0"), ("gtpo", "gtpo alpha_2=0.0"))  # fmt: skip


def collapsed(toy: dict | None, arms) -> str:
    if toy is None:
        return ""
    runs = toy_runs(toy)
    return "toy runs collapsed (end < 0.5 × start): " + ", ".join(
        f"{NAMES[a]} {sum(x['collapsed'] for x in runs[a].values())}/{len(runs[a])}"
        for a in arms if a in runs
    )  # fmt: skip


def row_gtpo_entropy(real, toy):
    return _diff_row(real, toy,
                     "GTPO keeps entropy from collapsing (GTPO − DAPO, token entropy in nats)",
                     "“Our methods foster sustained exploration and prevent policy collapse” (v5 "
                     "§3.3; the “entropy rebound” of App. D.1)", "gtpo", "gtpo", "entropy",
                     collapsed(toy, ("dapo", TOY_DAPOS[1], "gtpo", "grpo_s")))  # fmt: skip


def row_grpo_s_entropy(real, toy):
    return _diff_row(real, toy, "GRPO-S keeps entropy from collapsing (GRPO-S − DAPO, nats)",
                     "as above (v5 §3.3, App. D.1)", "grpo_s", "grpo_s", "entropy")  # fmt: skip


# --------------------------------------------------------------------------------------------
# Token credit against the oracle (docs/credit.md, scripts/experiments/credit/)
# --------------------------------------------------------------------------------------------
CREDIT = ROOT / "scripts" / "experiments" / "credit" / "results"
CREDIT_CMD = ("`bash scripts/experiments/credit/run.sh` (docs/credit.md; `OUT=/tmp/credit` "
              "reruns it into an empty directory)")  # fmt: skip
#: The batches the credit rows judge: (file, label, K). The toy's are the two warm starts
#: (the policy RL starts from) at the oracle's largest K; the real model's at K = 32, from the
#: first of its files that exists (the 16-prompt batch once it has run; until then the
#: 2-prompt one, which is not testable: stats.MIN_PROMPTS).
CREDIT_TOY = (("longchain_step0", "long chain", "64"), ("countdown_step0", "countdown", "64"))
CREDIT_REAL_FILES = ("real_smollm2_p16_k32", "real_smollm2_k32")
CREDIT_REAL_PROMPTS = 16
CREDIT_REAL_RUN = (f"python scripts/experiments/credit/real_model.py --prompts "
                   f"{CREDIT_REAL_PROMPTS} --rollouts 32 --out "
                   f"scripts/experiments/credit/results/{CREDIT_REAL_FILES[0]}.json")  # fmt: skip


def credit_real() -> tuple[tuple[str, str, str], ...]:
    stem = next((s for s in CREDIT_REAL_FILES if (CREDIT / f"{s}.json").exists()),
                CREDIT_REAL_FILES[-1])  # fmt: skip
    return ((stem, "SmolLM2", "32"),)


@functools.cache
def credit_units(stem: str, k: str) -> dict | None:
    """The credit tests of one batch with the prompt as the unit (stats.py: per prompt, then
    over prompts, df = prompts − 1), recomputed from the file's per-completion record (its
    entropies, the oracle's A* and half-estimates, GTPO's credit) by the same functions that
    wrote the file's per-completion means (refimpl/bench/credit_metrics.py). None: no oracle at K."""
    from refimpl.bench import credit_metrics as cr

    result = _read(CREDIT / f"{stem}.json")
    if k not in result["oracle"]:
        return None
    comps, oracle = result["completions"], result["oracle"][k]
    prompt = {i: c["prompt"] for i, c in enumerate(comps)}
    lengths = np.array([len(c["token"]) for c in comps])

    def grid(rows) -> np.ndarray:
        out = np.zeros((len(comps), int(lengths.max())))
        for i, row in enumerate(rows):
            out[i, : len(row)] = row
        return out

    mask = np.arange(int(lengths.max()))[None, :] < lengths[:, None]
    truth, entropy = grid(oracle["true_advantage"]), grid([c["entropy_old"] for c in comps])
    success = np.array([bool(c["success"]) for c in comps])
    # GTPO's founding hypothesis: Spearman's ρ(H, |A*|) within completions, and the top 20 %
    # of the batch's tokens by entropy against the share of the noise-free ΣA*² a random 20 %
    # gets (the product of the two half-estimates: its expectation is A*²).
    rho, _, _ = cr.within_values(np.where(mask, entropy, 0.0), np.abs(truth), lengths,
                                 [i for i in range(len(comps)) if lengths[i] > 1])  # fmt: skip
    h = entropy[mask]
    halves = [grid(x) for x in oracle["half_advantages"]]
    sq = (halves[0] * halves[1])[mask]
    top = np.zeros(h.size, dtype=bool)
    top[np.argsort(-h, kind="mergesort")[: max(1, int(round(cr.TOP_FRACTION * h.size)))]] = True
    token_prompt = np.array([prompt[i] for i in range(len(comps)) for _ in range(lengths[i])])
    share, f, excess = st.share_excess(sq, top, token_prompt)
    # GTPO's credit: Pearson's r(c, A*) within the completions it trains, and the share of
    # the negative credit of each failed one on its pivot (the token of most negative A*)
    # beyond 1/|o|.
    sig = result["signals"]["gtpo"]
    c = grid(sig["credit"])
    trained = [i for i in range(len(comps)) if sig["trained"][i] and lengths[i] > 0]
    r, _, _ = cr.within_values(c, truth, lengths, trained)
    pivots = cr.pivot_tokens(truth, lengths, [i for i in trained if not success[i]])
    blame = cr.blame_values(c, pivots, lengths)
    return {
        "prompts": len(set(prompt.values())), "completions": len(comps),
        "oracle_s": float(oracle["seconds"]),
        "rho": st.per_unit({i: v[1] for i, v in rho.items()}, prompt),
        "share": share, "share_null": f, "share_excess": excess,
        "r": st.per_unit({i: v[0] for i, v in r.items()}, prompt),
        "blame": st.per_unit({i: v["pivot_excess"] for i, v in blame.items()}, prompt),
    }  # fmt: skip


def unit_test(c: st.Clustered, claimed: int = +1) -> tuple[str, str]:
    """(verdict, ``+0.17 ± 0.02 over 16 prompts (120 completions; df 15, MDD 0.04)``)."""
    if c.units < 2 or not math.isfinite(c.se):
        return "not measured", f"not measured ({c.units} prompt{'s' * (c.units != 1)})"
    return c.verdict(claimed), (f"{c.mean:+.3f} ± {c.se:.3f} over {c.units} prompts ({c.values} "
                                f"completions; df {c.df:.0f}, MDD {c.mdd:.3f})")  # fmt: skip


def both(*verdicts: str) -> str:
    """One verdict from several that must agree (else the weaker, "not shown")."""
    vs = [v for v in verdicts if v not in ("not measured", "not testable")]
    if not vs:
        return "not testable" if "not testable" in verdicts else "not measured"
    return vs[0] if all(v == vs[0] for v in vs) else "not shown"


def real_credit_testable() -> bool:
    stem, _, k = credit_real()[0]
    u = credit_units(stem, k)
    return u is not None and u["prompts"] >= st.MIN_PROMPTS


FEW_PROMPTS = f"not testable (fewer than {st.MIN_PROMPTS} prompts)"


def not_testable(u: dict) -> str:
    minutes = u["oracle_s"] * CREDIT_REAL_PROMPTS / u["prompts"] / 60
    return (f"not testable: {u['prompts']} prompts ({u['completions']} completions), and the "
            f"prompt is the unit; it needs ≥ {st.MIN_PROMPTS} prompts: `{CREDIT_REAL_RUN}` "
            f"(about {minutes:.0f} minutes of oracle on one thread, from this batch's "
            f"{u['oracle_s']:.0f} s for {u['prompts']} prompts)")  # fmt: skip


def _credit_batches(batches, judge) -> tuple[dict[str, list[str]], list[str]]:
    """Each sub-test's verdict per batch ({sub-test: [verdict per batch]}) and the numbers."""
    verdicts: dict[str, list[str]] = {}
    numbers = []
    for stem, label, k in batches:
        u = credit_units(stem, k)
        if u is None:
            numbers.append(f"{label}: not measured")
            continue
        if u["prompts"] < st.MIN_PROMPTS:
            for name in judge(u)[0]:
                verdicts.setdefault(name, []).append("not testable")
            numbers.append(f"{label} (K = {k}): {not_testable(u)}")
            continue
        subs, text = judge(u)
        for name, v in subs.items():
            verdicts.setdefault(name, []).append(v)
        numbers.append(f"{label} (K = {k}, {u['prompts']} prompts × "
                       f"{u['completions'] // u['prompts']} completions): {text}")  # fmt: skip
    return verdicts, numbers


def judge_entropy(u: dict) -> tuple[dict[str, str], str]:
    v_rho, rho = unit_test(u["rho"])
    v_share, share = unit_test(u["share_excess"])
    share = share.replace("completions", "tokens")
    return {"ρ": v_rho, "share": v_share}, (
        f"ρ(H, |A*|) within completions {rho} [{v_rho}]; the top 20 % of tokens by entropy "
        f"carry {u['share']:.2f} of ΣA*² against a random 20 %'s {u['share_null']:.2f}: "
        f"excess {share}, s.e. cluster-robust over prompts [{v_share}]")  # fmt: skip


#: The entropy row's rule, unchanged since the ledger's first version: both sub-tests, on both
#: toy batches, must give the same verdict; else "not shown".
ENTROPY_RULE = ("the row's verdict: the two sub-tests (ρ, share) on every batch must agree, "
                "else not shown (the ledger's rule since its first version)")  # fmt: skip


def _subs(verdicts: dict[str, list[str]], names: dict[str, str]) -> str:
    return "; ".join(f"{names[k]}: {both(*v)}" for k, v in verdicts.items())


def row_entropy_marks_pivots(real, toy):
    toy_v, toy_n = _credit_batches(CREDIT_TOY, judge_entropy)
    real_v, real_n = _credit_batches(credit_real(), judge_entropy)
    names = {"ρ": "ρ within completions", "share": "top-20 % share"}

    def cell(v):
        row = both(*(x for vs in v.values() for x in vs))
        return FEW_PROMPTS if row == "not testable" else f"{row} ({_subs(v, names)})"

    return ["High entropy marks the pivotal tokens (GTPO's founding hypothesis)",
            "“high policy entropy within a reasoning path is a powerful heuristic for "
            "‘cognitive effort’ at pivotal junctures” (v5 abstract)", cell(toy_v), cell(real_v),
            "; ".join([ENTROPY_RULE, *toy_n, *real_n]), CREDIT_CMD]  # fmt: skip


def judge_gtpo_credit(u: dict) -> tuple[dict[str, str], str]:
    v_r, r = unit_test(u["r"])
    v_b, b = unit_test(u["blame"])
    return {"agreement": v_r, "blame": v_b}, (
        f"agreement: GTPO's credit r(c, A*) within completions {r} (a uniform advantage has "
        f"none) [{v_r}]; blame on the pivot beyond 1/|o| {b} [{v_b}]")  # fmt: skip


#: The GTPO credit row's rule, stated before the per-prompt figures were computed (issue 47's
#: proposal): the row's verdict is the agreement test's (does GTPO's token credit track the
#: true advantage inside a completion, where a uniform advantage cannot); the blame-on-the-
#: pivot test is reported beside it with its own verdict, never folded into the row's.
GTPO_CREDIT_RULE = ("the row's verdict is the agreement test's, r(c, A*) within completions; "
                    "the blame-on-the-pivot test is reported beside it with its own verdict")  # fmt: skip


def gtpo_credit_verdict(v: dict[str, list[str]]) -> str:
    """The GTPO credit row's cell by GTPO_CREDIT_RULE, from each sub-test's verdict per batch
    ({"agreement": [...], "blame": [...]}; the batches of a testbed combined by ``both``)."""
    if not v:
        return "not measured"
    if both(*v["agreement"], *v["blame"]) == "not testable":
        return FEW_PROMPTS
    return (f"{both(*v['agreement'])} (the agreement test); blame on the pivot: "
            f"{both(*v['blame'])}")  # fmt: skip


def row_gtpo_credit(real, toy):
    toy_v, toy_n = _credit_batches(CREDIT_TOY, judge_gtpo_credit)
    real_v, real_n = _credit_batches(credit_real(), judge_gtpo_credit)
    cell = gtpo_credit_verdict
    return ["GTPO's token rewards assign credit better than a uniform advantage",
            "GRPO and DAPO are “constrained by a coarse-grained credit assignment paradigm, "
            "where all tokens within the same response receive the identical reward” (v6 "
            "abstract); GTPO “assigns an entropy-weighted reward to each token” (v6 abstract)",
            cell(toy_v), cell(real_v), "; ".join([f"rule: {GTPO_CREDIT_RULE}", *toy_n, *real_n]),
            CREDIT_CMD]  # fmt: skip


def long_chain_runs() -> dict | None:
    from refimpl.bench.resultfiles import expect

    path = CREDIT / "longchain_learning.json"
    results = _read(path)["results"]
    expect(isinstance(results, dict) and results, path, "results: expected a task's results")
    return next(iter(results.values()))["runs"]


LONG_COT_QUOTE = ("“exhibits superior stability in long Chain-of-Thought (CoT) reasoning tasks” "
                  "(v6 abstract); “GRPO-S exhibits higher stability across settings” (v5 §3.4)")  # fmt: skip
LONG_COT_CMD = "`refimpl bench-learning --preset longchain` (" + CREDIT_CMD + ")"


def common_grid(runs: list[dict]) -> np.ndarray:
    """The sampled-token points every run of ``runs`` is read at: from 0 to the earliest last
    evaluation among them, in as many equal steps as the fewest evaluations after the start
    that any of them has. No arm is then read finer than the coarsest arm was evaluated, and
    none past where every arm has an evaluation."""
    end = min(float(r["curve_tokens"][-1]) for r in runs)
    n = min(len(r["curve_tokens"]) - 1 for r in runs)
    return np.linspace(0.0, end, n + 1)


def on_grid(run: dict, grid: np.ndarray) -> np.ndarray:
    """A run's held-out success at the ``grid``'s token points, linear in sampled tokens
    between its two evaluations around each point (its own evaluations where they fall on
    it)."""
    return np.interp(grid, run["curve_tokens"], run["curve_success"])


def long_cot_compare(
    runs: dict, arm: str, base: str, grid: np.ndarray
) -> tuple[Comparison, Comparison]:
    """``arm`` − ``base`` per paired seed on the common ``grid``: (the worst fall between two
    consecutive grid points, the success at the grid's last point)."""
    seeds = [s for s in runs[arm] if s in runs.get(base, {})]
    a = {s: on_grid(runs[arm][s], grid) for s in seeds}
    b = {s: on_grid(runs[base][s], grid) for s in seeds}
    fall = over_seeds({int(s): worst_drop(a[s]) - worst_drop(b[s]) for s in seeds})
    end = over_seeds({int(s): float(a[s][-1] - b[s][-1]) for s in seeds})
    return fall, end


def long_chain_setting() -> tuple[str, float]:
    """("23–37-token chains of a 2-layer model", the learning rate) from the files: the
    warm start's sampled completions (the credit batch at step 0) and its recorded model, and
    the preset's learning rate (chosen with GRPO: results/regime_probes.json)."""
    from refimpl.bench.learning import LearningConfig

    batch = _read(CREDIT / "longchain_step0.json")["completions"]
    lengths = [len(c["token"]) for c in batch]
    layers = _read(CREDIT / "warmstart_longchain.json")["config"]["model"]["n_layer"]
    lr = LearningConfig(preset="longchain").with_preset(frozenset()).train_defaults().lr
    return f"{min(lengths)}–{max(lengths)}-token chains of a {layers}-layer model", float(lr)


def row_long_cot_papers(real, toy):
    """The paper's claim at its own scale: nothing here is a long chain of thought."""
    lengths = [final(v)["mean_tokens"] for v in real.values()]
    what, _ = long_chain_setting()
    return ["GRPO-S is more stable on long chains of thought (the papers' scale)", LONG_COT_QUOTE,
            "not testable here", "not testable here",
            f"the papers' long chains of thought are those of 7B–32B models on math benchmarks; "
            f"here the longest are the toy's {what} and the real model's replies are "
            f"{min(lengths):.1f}–{max(lengths):.1f} tokens (no chain of thought); the next row "
            "is what was run", "—"]  # fmt: skip


def row_long_cot(real, toy):
    runs = long_chain_runs()
    what, lr = long_chain_setting()
    claim = (f"GRPO-S falls less than DAPO and GRPO on {what}, at GRPO's learning rate "
             f"({lr:g}), every arm read on one grid of sampled tokens")  # fmt: skip
    if runs is None or "grpo_s" not in runs:
        return [claim, LONG_COT_QUOTE, "not measured", "not run", "", LONG_COT_CMD]
    arms = [a for a in ("grpo_s", "dapo", "grpo") if a in runs]
    grid = common_grid([r for a in arms for r in runs[a].values()])
    evals = {a: sorted({len(r["curve_tokens"]) - 1 for r in runs[a].values()}) for a in arms}
    kept = [r["kept_group_frac"] for r in runs["grpo_s"].values()]
    verdicts, numbers = [], []
    for base in ("dapo", "grpo"):
        fall, end = long_cot_compare(runs, "grpo_s", base, grid)
        verdicts.append(fall.verdict(-1))
        numbers += [describe(fall, f"worst fall of held-out success on the grid GRPO-S − {NAMES[base]}"),
                    describe(end, f"success at the grid's end GRPO-S − {NAMES[base]}")]  # fmt: skip
    how = (f"the grid: {', '.join(f'{t / 1e3:.0f}k' for t in grid)} sampled tokens (0 to the "
           f"earliest last evaluation of any run, in as many steps as the fewest evaluations "
           f"any run has), each arm read there linearly in sampled tokens between its own "
           f"evaluations; evaluations per run after the start: "
           + ", ".join(f"{NAMES[a]} {'/'.join(map(str, n))}" for a, n in evals.items())
           + f" (GRPO-S keeps {100 * min(kept):.0f}–{100 * max(kept):.0f} % of its groups and "
           "resamples, so one token budget holds fewer of its steps and evaluations)")  # fmt: skip
    return [claim, LONG_COT_QUOTE, both(*verdicts), "not run (no real-model chain)",
            "; ".join([how, *numbers]), LONG_COT_CMD]  # fmt: skip


def row_eq4_literal(real, toy):
    toy_c, real_c = toy_dapos(toy, "gtpo stats=batch"), real_dapos(real, "gtpo_batch")
    numbers = [describe(c, f"toy − {k}") for k, c in toy_c.items()]
    numbers += [describe_real(c, f"real − {k}") for k, c in real_c.items()]
    return ["GTPO as Eq. 4 is written (R⁺, R⁻ pooled over the batch) beats DAPO",
            "Eq. 4: R⁺ and R⁻ “normalized over all tokens in the entire batch” (v5 §2.2); the "
            "project's default normalises per group (gtpo page)",
            _verdicts(toy_c), _verdicts(real_c, real=True), "; ".join(numbers),
            commands(toy, ("gtpo_batch", *REAL_DAPOS, "base"), real)]  # fmt: skip


def toy_speed(toy: dict | None) -> tuple[str, str]:
    """TEPO's time to the toy target against GRPO and DAPO, in sampled tokens (the budget's
    unit: a dynamic-sampling step resamples until its batch is full, about 2.4× a GRPO step's
    tokens), censored as on the real model."""
    if toy is None or "tepo" not in toy_runs(toy):
        return "not measured", ""
    runs = toy_runs(toy)
    times = {a: {int(s): toy_crossing(x) for s, x in runs[a].items()}
             for a in ("grpo", "dapo", "tepo") if a in runs}  # fmt: skip
    parts = [speed(times, b, "sampled tokens") for b in ("grpo", "dapo") if b in times]
    per = "; ".join(f"{NAMES[a]} " + ", ".join(fmt_interval(t, 1e3) for t in v.values())
                    for a, v in times.items())  # fmt: skip
    return ("; ".join(p[0] for p in parts),
            f"toy: sampled tokens (k) to the target per seed, {per}; "
            + "; ".join(p[1] for p in parts))  # fmt: skip


def real_speed(real: dict) -> tuple[str, str]:
    seeds = grid_seeds(real, ("tepo", "grpo", "dapo"))
    if not seeds:
        return "not measured", ""
    times = {a: real_times(real, a, seeds) for a in ("tepo", "grpo", "dapo")}
    parts = [speed(times, b, "optimizer steps") for b in ("grpo", "dapo")]
    steps = [e["step"] for e in real[("tepo", seeds[0])]["evals"]]
    per = "; ".join(f"{NAMES[a]} " + ", ".join(fmt_interval(t) for t in v.values())
                    for a, v in times.items())  # fmt: skip
    areas = "; ".join(describe(auc_compare(real, "tepo", b), f"mean success over the "
                               f"evaluations TEPO − {NAMES[b]}") for b in ("grpo", "dapo"))  # fmt: skip
    return ("; ".join(p[0] for p in parts),
            f"real: steps to base + {REAL_THRESHOLD_GAIN:.2f} per seed (evaluations after steps "
            f"{', '.join(map(str, steps))}), {per}; " + "; ".join(p[1] for p in parts)
            + f"; {areas}")  # fmt: skip


def row_tepo_speed(real, toy):
    toy_v, toy_n = toy_speed(toy)
    real_v, real_n = real_speed(real)
    rule = (
        "a ratio of censored times, judged by the bounds of the median per-seed ratio "
        "(no s.e.: df and MDD do not apply; the evaluation grid sets the resolution)"
    )
    return ["TEPO converges in half the time of GRPO and DAPO",
            "“reducing convergence time by 50% compared with GRPO/DAPO” (TEPO abstract)",
            toy_v, real_v, "; ".join(x for x in (rule, toy_n, real_n) if x),
            commands(toy, ("tepo", "grpo", "dapo", "base"), real)]  # fmt: skip


def row_tepo_stability(real, toy):
    t = over_seeds({})
    extra = []
    if toy is not None and "tepo" in toy_runs(toy):
        runs = toy_runs(toy)
        d = {int(s): worst_drop(x["curve_success"]) - worst_drop(runs["dapo"][s]["curve_success"])
             for s, x in runs["tepo"].items() if s in runs["dapo"]}  # fmt: skip
        t = over_seeds(d)
        sds = {a: float(np.std([toy_final(x) for x in runs[a].values()], ddof=1))
               for a in ("grpo", "dapo", "tepo") if a in runs}  # fmt: skip
        extra.append("toy sd of final over seeds: "
                     + ", ".join(f"{NAMES[a]} {v:.3f}" for a, v in sds.items()))  # fmt: skip
    seeds = grid_seeds(real, ("tepo", "dapo"))
    r = over_seeds({s: worst_drop(real_curve(real, "tepo", s)) - worst_drop(real_curve(real, "dapo", s))
                    for s in seeds})  # fmt: skip
    common = [s for s in seeds_of(real, "tepo") if all((a, s) in real for a in ("grpo", "dapo"))]
    if len(common) > 1:
        sds = {a: float(np.std([final(real[(a, s)])["success"] for s in common], ddof=1))
               for a in ("grpo", "dapo", "tepo")}  # fmt: skip
        extra.append(f"real sd of final over seeds {seed_list(common)}: "
                     + ", ".join(f"{NAMES[a]} {v:.3f}" for a, v in sds.items()))  # fmt: skip
    numbers = [describe(t, "toy worst fall between evaluations TEPO − DAPO"),
               describe(r, "real worst fall TEPO − DAPO"), *extra]  # fmt: skip
    return ["TEPO trains more stably than DAPO (smaller falls of held-out success)",
            "“markedly enhances training stability” (TEPO abstract)",
            t.verdict(-1) if t.n else "not run", r.verdict(-1) if r.n else "not run",
            "; ".join(numbers), commands(toy, ("tepo", "dapo", "grpo", "base"), real)]  # fmt: skip


def row_tepo_entropy(real, toy):
    return _one_pair_row(
        real, toy, "TEPO avoids the entropy collapse (TEPO − DAPO, nats)",
        "prior methods “easily [lead] to entropy collapse or model degradation” (TEPO abstract)",
        ("tepo", "dapo"), ("tepo", "dapo"), key="entropy_end")  # fmt: skip


def row_tepo_mask(real, toy):
    extra = ""
    if toy is not None and "tepo kl_mask=False" in toy_runs(toy):
        runs = toy_runs(toy)
        extra = ("toy clip fraction with / without the mask: "
                 f"{np.mean([x['clip_frac'] for x in runs['tepo'].values()]):.4f} / "
                 f"{np.mean([x['clip_frac'] for x in runs['tepo kl_mask=False'].values()]):.4f}; "
                 f"mask fraction {np.mean([x['mask_frac'] for x in runs['tepo'].values()]):.3f}")  # fmt: skip
    return _one_pair_row(
        real, toy, "TEPO's KL mask helps (TEPO − TEPO with the KL on every token)",
        "a mask “that targets tokens with positive advantages and decreasing entropy to "
        "mitigate abrupt policy updates” (TEPO abstract)",
        ("tepo", "tepo_nomask"), ("tepo", "tepo kl_mask=False"), extra=extra)  # fmt: skip


def row_tepo_sota(real, toy):
    return ["TEPO reaches the state of the art in math",
            "“achieves state-of-the-art performance on mathematical reasoning benchmarks” (TEPO "
            "abstract)", "not testable here", "not testable here",
            "no math benchmark and no model near the papers' sizes here (a 2-layer toy model; "
            "135M); nothing is compared", "—"]  # fmt: skip


# --------------------------------------------------------------------------------------------
# What token credit is worth (docs/credit.md's ceiling; scripts/experiments/ceiling/)
# --------------------------------------------------------------------------------------------
@functools.cache
def ceiling_rows() -> list[list[str]]:
    """The ceiling's three rows, from its own report (loaded by path, as the ceiling reads
    docs/credit.md's generator)."""
    import importlib.util

    path = ROOT / "scripts" / "experiments" / "ceiling" / "ledger.py"
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
                "`bash scripts/experiments/ceiling/run.sh`"]  # fmt: skip
    return ceiling_rows()[i]


def row_ceiling(real, toy):
    return _ceiling_row(0)


def row_forking_vs_random(real, toy):
    return _ceiling_row(1)


def row_gtpo_share(real, toy):
    return _ceiling_row(2)


LEDGER = (row_gtpo_beats_dapo, row_grpo_s_beats_dapo, row_entropy_driver, row_gtpo_entropy,
          row_grpo_s_entropy, row_entropy_marks_pivots, row_gtpo_credit, row_ceiling,
          row_forking_vs_random, row_gtpo_share, row_long_cot_papers, row_long_cot,
          row_eq4_literal, row_tepo_speed, row_tepo_stability, row_tepo_entropy, row_tepo_mask,
          row_tepo_sota)  # fmt: skip


def ledger_rows(real: dict, toy: dict | None) -> list[list[str]]:
    return [build(real, toy) for build in LEDGER]


def ledger_table(real: dict, toy: dict | None) -> str:
    head = ["claim", "the paper's words", "toy verdict", "real-model verdict",
            "numbers (± s.e.; df, MDD, seeds for 80 % power)", "command"]  # fmt: skip
    return table(head, ledger_rows(real, toy))


# --------------------------------------------------------------------------------------------
# In short (docs/claims.md) and the claims paragraph of docs/results.md
# --------------------------------------------------------------------------------------------
def short(c: Comparison) -> str:
    """``+0.037 ± 0.022, 3 seeds, 2 up and 0 down`` (or "one seed")."""
    if c.n == 0:
        return "not run"
    if c.one_seed:
        return f"{fmt(c.diff, c.se, sign=True)}, one seed, s.e. over problems"
    up = sum(v > 0 for v in c.per_seed.values())
    down = sum(v < 0 for v in c.per_seed.values())
    return f"{fmt(c.diff, c.se, sign=True)}, {c.n} seeds, {up} up and {down} down"


def verdict_short(c: Comparison, sign: int = +1) -> str:
    """``not shown (+0.037 ± 0.022, 3 seeds, 2 up and 0 down)``."""
    return f"{c.verdict(sign)} ({short(c)})" if c.n else "not run"


def vs(cmps: dict[str, Comparison]) -> str:
    """``not shown against DAPO (…); not run against DAPO without overlong shaping``."""
    return "; ".join(
        f"{c.verdict()} against {k} ({short(c)})" if c.n else f"not run against {k}"
        for k, c in cmps.items()
    )


def gtpo_spread(real: dict) -> str:
    gd = real_compare(real, "gtpo", "dapo")
    if gd.n < 2:
        return ""
    return (f" On the real model GTPO − DAPO runs from {min(gd.per_seed.values()):+.2f} to "
            f"{max(gd.per_seed.values()):+.2f} over {gd.n} seeds (sd {gd.sd:.2f}); at that sd, "
            f"80 % power against its mean of {gd.diff:+.3f} would need {fmt_power(gd)} seeds. "
            "The seeds differ more than these arms do: the comparison cannot tell them apart "
            "here, which is no evidence that they are equal.")  # fmt: skip


def in_short(real: dict, toy: dict | None) -> str:
    speed_row, stab = row_tepo_speed(real, toy), row_tepo_stability(real, toy)
    toy_shape = toy_compare(toy, TOY_DAPOS[1], "dapo")
    real_shape = real_compare(real, "dapo_noshape", "dapo")
    drv = toy_compare(toy, "gtpo", "gtpo alpha_2=0.0"), real_compare(real, "gtpo", "gtpo_alpha0")
    mask = (toy_compare(toy, "tepo", "tepo kl_mask=False"),
            real_compare(real, "tepo", "tepo_nomask"))  # fmt: skip
    lines = [
        f"- **Does GTPO beat DAPO?** Toy: {vs(toy_dapos(toy, 'gtpo'))}. Real model: "
        f"{vs(real_dapos(real, 'gtpo'))}. **GRPO-S?** Toy: {vs(toy_dapos(toy, 'grpo_s'))}. "
        f"Real model: {vs(real_dapos(real, 'grpo_s'))}.{gtpo_spread(real)} The length penalty "
        f"itself, DAPO without − with overlong shaping: toy {short(toy_shape)}; real model "
        f"{short(real_shape)}.",
        f"- **The entropy weighting as the driver** (GTPO against its own α₂ = 0 control): toy "
        f"{verdict_short(drv[0])}; real model {verdict_short(drv[1])}. No entropy is kept from "
        f"collapsing: {collapsed(toy, ('dapo', TOY_DAPOS[1], 'gtpo', 'grpo_s'))}.",
        f"- **GTPO as Eq. 4 is written**, against DAPO: toy {vs(toy_dapos(toy, 'gtpo stats=batch'))}; "
        f"real model {vs(real_dapos(real, 'gtpo_batch'))}. The batch-wide normalisation removes "
        "the sign of the outcome, which is why the project's default normalises per group.",
        f"- **TEPO's \"50 % faster\"**: toy {speed_row[2]}; real model {speed_row[3]}. A run "
        "there by the first evaluation, or never there, bounds a ratio on one side only. Its "
        f"stability (smaller falls than DAPO's): toy {stab[2]}, real model {stab[3]}.",
        f"- **TEPO's mask** against the same KL on every token: toy {verdict_short(mask[0])}; "
        f"real model {verdict_short(mask[1])}. The ablation keeps the KL and drops the mask; no "
        "arm here drops the KL.",
        "- **Not testable here:** GRPO-S on long chains of thought at the papers' scale (the "
        f"real replies are ≤ {real[('dapo', 0)]['args']['max_new_tokens']} tokens; on the toy's "
        f"{long_chain_setting()[0]}, at GRPO's learning rate, its smaller falls are "
        f"{row_long_cot(real, toy)[2]}); TEPO's state-of-the-art math scores"
        + ("" if real_credit_testable() else "; the credit rows on SmolLM2, until a batch of "
           f"≥ {st.MIN_PROMPTS} prompts has run (`{CREDIT_REAL_RUN}`)") + ".",
    ]  # fmt: skip
    return "\n".join(lines) + "\n"


def results_brief(real: dict, toy: dict | None) -> str:
    """The claims paragraph of docs/results.md: the ledger's verdicts in brief."""
    n_toy = max((len(v) for v in toy_runs(toy).values()), default=0) if toy else 0
    n_real = max((len(seeds_of(real, a)) for a in real_arms_run(real)), default=0)
    speed_row = row_tepo_speed(real, toy)
    drv = toy_compare(toy, "gtpo", "gtpo alpha_2=0.0"), real_compare(real, "gtpo", "gtpo_alpha0")
    lit = toy_compare(toy, "gtpo stats=batch", "dapo"), real_compare(real, "gtpo_batch", "dapo")
    mask = (toy_compare(toy, "tepo", "tepo kl_mask=False"),
            real_compare(real, "tepo", "tepo_nomask"))  # fmt: skip
    return (
        "- **The papers' claims** ([claims.md](claims.md), the claims ledger: the collapse "
        f"benchmark with both DAPO arms and the ablations, up to {n_toy} seeds, and "
        f"SmolLM2-135M through TRL, up to {n_real} paired seeds of 12 steps; each verdict by "
        "Student's t at its comparison's degrees of freedom, beside its minimal detectable "
        f"difference). GTPO beating DAPO, toy: {vs(toy_dapos(toy, 'gtpo'))}; real model: "
        f"{vs(real_dapos(real, 'gtpo'))}. GRPO-S beating DAPO, toy: "
        f"{vs(toy_dapos(toy, 'grpo_s'))}; real model: {vs(real_dapos(real, 'grpo_s'))}. The "
        f"entropy weighting against its α₂ = 0 control: toy {verdict_short(drv[0])}, real "
        f"{verdict_short(drv[1])}. GTPO as Eq. 4 is written against DAPO: toy "
        f"{verdict_short(lit[0])}, real {verdict_short(lit[1])}. TEPO's \"50 % faster\": toy "
        f"{speed_row[2]}; real {speed_row[3]}. Its mask, against the same KL on every token: "
        f"toy {verdict_short(mask[0])}, real {verdict_short(mask[1])}.\n"
    )  # fmt: skip


def real_arms_run(real: dict) -> list[str]:
    return [a for a in REAL_ARMS if a != "base" and seeds_of(real, a)]


# --------------------------------------------------------------------------------------------
# docs/benchmarks.md § 2 and docs/results.md: the collapse benchmark's figures, from the same
# file and the same definition of "final" (toy_final) as the ledger
# --------------------------------------------------------------------------------------------
BENCH_PAGE = ROOT / "docs" / "benchmarks.md"
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


# --------------------------------------------------------------------------------------------
# The figure
# --------------------------------------------------------------------------------------------
FIGURE = ROOT / "docs" / "figures" / "claims_real_curves.png"
COLORS = {"dapo": "C0", "dapo_noshape": "C9", "gtpo": "C1", "grpo_s": "C2", "tepo": "C3",
          "grpo": "C7", "gtpo_alpha0": "C1", "gtpo_batch": "C5", "tepo_nomask": "C3"}  # fmt: skip
DASHED = ("dapo_noshape", "gtpo_alpha0", "gtpo_batch", "tepo_nomask")


def plot_real_curves(real: dict, path: Path = FIGURE) -> Path | None:
    """Held-out success against optimizer steps, one panel per seed with evaluations at
    several steps, one line per arm."""
    seeds = [s for s in sorted({s for _, s in real}) if ("base", s) in real
             and any(len(r["evals"]) > 1 for (_, t), r in real.items() if t == s)]  # fmt: skip
    if not seeds:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(seeds), figsize=(4.2 * len(seeds), 3.4), sharey=True,
                             squeeze=False)  # fmt: skip
    for ax, s in zip(axes[0], seeds):
        base = final(real[("base", s)])
        for arm in REAL_ARMS[1:]:
            if (arm, s) not in real:
                continue
            evs = real[(arm, s)]["evals"]
            x = [0] + [e["step"] for e in evs]
            y = [base["success"]] + [e["success"] for e in evs]
            err = [base["success_se"]] + [e["success_se"] for e in evs]
            style = "--" if arm in DASHED else "-"
            ax.errorbar(x, y, yerr=err, fmt=style + "o", ms=3, capsize=2, color=COLORS[arm],
                        label=NAMES.get(arm, arm))  # fmt: skip
        ax.axhline(base["success"] + REAL_THRESHOLD_GAIN, color="grey", lw=0.8, ls=":")
        ax.set_title(f"seed {s}")
        ax.set_xlabel("optimizer step")
    axes[0][0].set_ylabel("held-out success (± s.e.)")
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}
    fig.legend(list(handles.values()), list(handles), fontsize=7, loc="lower center",
               ncol=min(4, len(handles)), frameon=False)  # fmt: skip
    fig.suptitle("SmolLM2-135M through TRL: held-out success; dotted: base + 0.10", fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    from refimpl.plots import save_figure

    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path


# --------------------------------------------------------------------------------------------
# The pages
# --------------------------------------------------------------------------------------------
def blocks() -> dict[str, dict[str, str]]:
    """Every generated block, per page ("claims": docs/claims.md, "results": docs/results.md)."""
    real, toy, cross = load_real(), load_toy(), load_cross()
    claims = {"ledger": ledger_table(real, toy), "machines": machines_block(real, toy, cross)}
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
        out["benchmarks"] = {"bench-collapse": bench_collapse_tables(toy),
                             "bench-criteria": bench_criteria(toy),
                             "bench-literal": bench_literal(toy),
                             "bench-entropy-verdict": bench_entropy_verdict(toy)}  # fmt: skip
    return out


def render(page: str, tables: dict[str, str]) -> str:
    for name, body in tables.items():
        pattern = re.compile(rf"(<!-- claims:{name} -->\n).*?(<!-- /claims:{name} -->)", re.S)
        if not pattern.search(page):
            raise SystemExit(f"no markers for the block {name!r}")
        page = pattern.sub(lambda m, body=body: m.group(1) + body + m.group(2), page)
    return page


def main(argv: list[str] | None = None) -> int:
    """Exit 0 (written, or current with ``--check``), 1 (stale, with ``--check``) or 2 (a
    result file missing or damaged, named on one line: no page is written)."""
    from refimpl.bench.resultfiles import ResultFileError

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("--print", action="store_true", help="print the blocks")
    parser.add_argument("--no-figure", action="store_true", help="do not redraw the figure")
    args = parser.parse_args(argv)
    pages = {"claims": PAGE, "results": RESULTS_PAGE, "benchmarks": BENCH_PAGE}
    try:
        generated = blocks()
        rendered = {}
        for key, page_blocks in generated.items():  # every page built before one is written
            text = pages[key].read_text()
            rendered[pages[key]] = (text, render(text, page_blocks))
    except ResultFileError as err:
        print(f"report.py: error: {err} (the pages are left as they were)", file=sys.stderr)
        return 2
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as err:
        print(f"report.py: error: a result file under {HERE / 'results'} or {CREDIT} is not "
              f"what the tables read ({type(err).__name__}: {err}); the pages are left as they "
              "were", file=sys.stderr)  # fmt: skip
        return 2
    if args.print:
        for page_blocks in generated.values():
            for name, body in page_blocks.items():
                print(f"## {name}\n\n{body}")
        return 0
    from refimpl.runs.runlog import write_text_atomic

    stale = [path for path, (text, new) in rendered.items() if new != text]
    if args.check:
        for path in stale:
            print(f"{path}: blocks out of date; run python scripts/experiments/claims/report.py")
        return 1 if stale else 0
    for path in stale:
        write_text_atomic(path, rendered[path][1])  # whole or not at all, never through a link
    if not args.no_figure:
        plot_real_curves(load_real())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
