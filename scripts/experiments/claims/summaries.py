"""The ledger's verdicts in brief: docs/claims.md's "In short" block and the claims paragraph
of docs/results.md, from the same comparisons and rows as the ledger.
"""

from __future__ import annotations

from arms import REAL_ARMS, TOY_DAPOS
from credit_rows import CREDIT_REAL_RUN, real_credit_testable
from long_chain_rows import long_chain_setting, row_long_cot
from outcome_rows import row_tepo_speed, row_tepo_stability
from real_runs import real_compare, real_dapos, seeds_of
from toy_testbed import collapsed, toy_compare, toy_dapos, toy_runs
from wording import fmt_power, short, verdict_short, vs

from refimpl.bench import stats as st


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


def real_arms_run(real: dict) -> list[str]:
    return [a for a in REAL_ARMS if a != "base" and seeds_of(real, a)]


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
