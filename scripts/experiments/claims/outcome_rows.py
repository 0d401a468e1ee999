"""The ledger's rows judged on the trained runs of both testbeds: GTPO and GRPO-S against
both DAPO arms (success and entropy), the entropy weighting against its α₂ = 0 control, Eq. 4
read literally, and TEPO's claims (speed, stability, entropy, mask, state of the art).

Each ``row_*(real, toy)`` returns the ledger's six cells: the claim, the paper's words, the toy
verdict, the real-model verdict, the numbers and the command.
"""

from __future__ import annotations

import numpy as np
from arms import NAMES, REAL_DAPOS, TOY_DAPOS
from claims_results import REAL_CMD_EMPTY
from learning_curves import real_curve, real_speed, toy_speed, worst_drop
from real_runs import (
    eval_entropy,
    final,
    grid_seeds,
    looks,
    real_compare,
    real_dapos,
    seeds_of,
)
from toy_testbed import collapsed, toy_command, toy_compare, toy_dapos, toy_final, toy_runs
from wording import describe, describe_real, not_compared, real_verdict, seed_list

from refimpl.bench.stats import Comparison, common_grid, on_grid, over_seeds


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
    return "; ".join(f"against {k}: {real_verdict(c, sign) if real else c.verdict(sign) if c.n else not_compared(c)}"
                     for k, c in cmps.items())  # fmt: skip


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
    return [claim, quote, t.verdict(sign) if t.n else "not run", real_verdict(r, sign),
            numbers, commands(toy, (*pair_real, "base"), real)]  # fmt: skip


def row_entropy_driver(real, toy):
    return _one_pair_row(
        real, toy, "The entropy weighting is the driver (GTPO − GTPO with α₂ = 0)",
        "“confirming our entropy-weighting mechanism as the key driver of this performance "
        "boost” (v5 abstract; v5 itself runs no α₂ = 0 arm: §3.4 varies α₂ over 0.1–0.2)",
        ("gtpo", "gtpo_alpha0"), ("gtpo", "gtpo alpha_2=0.0"))  # fmt: skip


def row_gtpo_entropy(real, toy):
    return _diff_row(real, toy,
                     "GTPO keeps entropy from collapsing (GTPO − DAPO, token entropy in nats)",
                     "“Our methods foster sustained exploration and prevent policy collapse” (v5 "
                     "§3.3; the “entropy rebound” of App. D.1)", "gtpo", "gtpo", "entropy",
                     collapsed(toy, ("dapo", TOY_DAPOS[1], "gtpo", "grpo_s")))  # fmt: skip


def row_grpo_s_entropy(real, toy):
    return _diff_row(real, toy, "GRPO-S keeps entropy from collapsing (GRPO-S − DAPO, nats)",
                     "as above (v5 §3.3, App. D.1)", "grpo_s", "grpo_s", "entropy")  # fmt: skip


def row_eq4_literal(real, toy):
    toy_c, real_c = toy_dapos(toy, "gtpo stats=batch"), real_dapos(real, "gtpo_batch")
    numbers = [describe(c, f"toy − {k}") for k, c in toy_c.items()]
    numbers += [describe_real(c, f"real − {k}") for k, c in real_c.items()]
    return ["GTPO as Eq. 4 is written (R⁺, R⁻ pooled over the batch) beats DAPO",
            "Eq. 4: R⁺ and R⁻ “normalized over all tokens in the entire batch” (v5 §2.2); the "
            "project's default normalises per group (gtpo page)",
            _verdicts(toy_c), _verdicts(real_c, real=True), "; ".join(numbers),
            commands(toy, ("gtpo_batch", *REAL_DAPOS, "base"), real)]  # fmt: skip


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
        # One grid for both arms (the DAPO family is evaluated at fewer points of its token
        # budget than TEPO): the worst fall between consecutive points of the common grid.
        seeds = [s for s in runs["tepo"] if s in runs["dapo"]]
        grid = common_grid([runs[a][s] for a in ("tepo", "dapo") for s in seeds])
        d = {int(s): worst_drop(on_grid(runs["tepo"][s], grid))
             - worst_drop(on_grid(runs["dapo"][s], grid)) for s in seeds}  # fmt: skip
        t = over_seeds(d)
        extra.append("the toy row compared TEPO's 6 evaluations with DAPO's 3 until 2026-12-07, "
                     "when it read contradicted (+0.029 ± 0.007); on one grid it does not")  # fmt: skip
        sds = {a: float(np.std([toy_final(x) for x in runs[a].values()], ddof=1))
               for a in ("grpo", "dapo", "tepo") if a in runs}  # fmt: skip
        extra.append("toy sd of final over seeds: "
                     + ", ".join(f"{NAMES[a]} {v:.3f}" for a, v in sds.items()))  # fmt: skip
    seeds = grid_seeds(real, ("tepo", "dapo"))
    r = over_seeds({s: worst_drop(real_curve(real, "tepo", s)) - worst_drop(real_curve(real, "dapo", s))
                    for s in seeds}, looks=looks("tepo", "dapo", seeds))  # fmt: skip
    common = [s for s in seeds_of(real, "tepo") if all((a, s) in real for a in ("grpo", "dapo"))]
    if len(common) > 1:
        sds = {a: float(np.std([final(real[(a, s)])["success"] for s in common], ddof=1))
               for a in ("grpo", "dapo", "tepo")}  # fmt: skip
        extra.append(f"real sd of final over seeds {seed_list(common)}: "
                     + ", ".join(f"{NAMES[a]} {v:.3f}" for a, v in sds.items()))  # fmt: skip
    numbers = [describe(t, "toy worst fall on the arms' common grid of sampled tokens TEPO − DAPO"),
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
