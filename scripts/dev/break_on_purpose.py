"""Break the math on purpose, one slip at a time, and check that a spec test fails.

    .venv/bin/python scripts/dev/break_on_purpose.py            # every slip below
    .venv/bin/python scripts/dev/break_on_purpose.py --only dapo-clip-high,grpo-bessel

The property tests are this project's specification, so each should catch the slips it is
about: a sign, a clip bound, a normaliser, a stop-gradient, a paper default. Each entry of
``SLIPS`` replaces one exact piece of source text (a missing piece is an error, so the list
cannot silently rot when the code changes), runs the test files named next to it with
``pytest -x``, and restores the file whatever happens. It prints one table row per slip:
caught (a test failed, and which) or MISSED.

It edits files in place: run it in a checkout where nothing else is running the tests.

Not in the list, because it is not a slip: removing ``group_normalize``'s forcing of all-equal
groups to 0 changes nothing, since in float64 the mean of G equal float32 rewards is exact
(checked for 20,000 random values and G up to 16); the line stays as a guard.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file: scripts/dev/)


@dataclass(frozen=True)
class Slip:
    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    what: str


ALG = "refimpl/algorithms/"
SPEC = "tests/spec/"
CORE_TESTS = (SPEC + "test_core.py", SPEC + "test_common.py")

SLIPS: list[Slip] = [
    # --- core: normalisers, the clip, the KL estimator, the stop-gradient ---
    Slip(
        "grpo-bessel",
        "refimpl/core.py",
        "unbiased=True",
        "unbiased=False",
        (SPEC + "test_grpo.py", SPEC + "test_core.py"),
        "biased group std (÷G, not ÷(G−1))",
    ),
    Slip(
        "std-eps-sign",
        "refimpl/core.py",
        "centred / (std + eps)",
        "centred / (std - eps)",
        (SPEC + "test_grpo.py", SPEC + "test_core.py"),
        "sign of eps in the std denominator",
    ),
    Slip(
        "clip-min-max",
        "refimpl/core.py",
        "return torch.minimum(unclipped, clipped)",
        "return torch.maximum(unclipped, clipped)",
        CORE_TESTS,
        "pessimistic min of the PPO surrogate replaced by max",
    ),
    Slip(
        "clip-bound-sign",
        "refimpl/core.py",
        "1.0 - clip_eps_low, 1.0 + clip_eps_high",
        "1.0 - clip_eps_high, 1.0 + clip_eps_low",
        CORE_TESTS,
        "clip bounds swapped",
    ),
    Slip(
        "k3-sign",
        "refimpl/core.py",
        "delta = logp_ref.float() - logp.float()",
        "delta = logp.float() - logp_ref.float()",
        CORE_TESTS,
        "k3 KL with the ratio inverted (k3 of the reverse direction)",
    ),
    Slip(
        "token-mean-normaliser",
        "refimpl/core.py",
        "return masked_sum(loss, mask) / mask.sum()",
        "return masked_sum(loss, mask) / mask.shape[0]",
        CORE_TESTS,
        "token-mean divided by the number of sequences",
    ),
    Slip(
        "seq-mean-token-mean-normaliser",
        "refimpl/core.py",
        "per_seq = masked_sum(loss, mask, dim=1) / lengths.clamp(min=1)",
        "per_seq = masked_sum(loss, mask, dim=1) / mask.shape[1]",
        CORE_TESTS,
        "per-sequence mean over the padded length, not |o_i|",
    ),
    Slip(
        "dr-grpo-lmax",
        "refimpl/core.py",
        "return masked_sum(loss, mask) / (n_seq * max_len)",
        "return masked_sum(loss, mask) / (n_seq * mask.shape[1])",
        (SPEC + "test_dr_grpo.py", SPEC + "test_core.py"),
        "Dr. GRPO's constant L_max replaced by the batch's padded length",
    ),
    Slip(
        "gspo-token-stopgrad",
        "refimpl/core.py",
        "log_ratio = log_s.detach()[:, None] + (logp - logp.detach())",
        "log_ratio = log_s[:, None] + (logp - logp.detach())",
        (SPEC + "test_gspo.py", SPEC + "test_tepo.py"),
        "GSPO-token ratio without the stop-gradient on log s_i",
    ),
    # --- the algorithm files: paper defaults and their own terms ---
    Slip(
        "dapo-clip-high",
        ALG + "dapo.py",
        "clip_eps_high: contract.ClipHigh = 0.28",
        "clip_eps_high: contract.ClipHigh = 0.2",
        (SPEC + "test_dapo.py",),
        "DAPO's clip-higher default (0.28) lost",
    ),
    Slip(
        "dapo-token-mean",
        ALG + "dapo.py",
        'loss_agg_mode: str = "token-mean"',
        'loss_agg_mode: str = "seq-mean-token-mean"',
        (SPEC + "test_dapo.py",),
        "DAPO's token-level loss (Eq. 12) replaced by GRPO's",
    ),
    Slip(
        "dapo-dynamic-sampling",
        ALG + "dapo.py",
        "dynamic_sampling: bool = True",
        "dynamic_sampling: bool = False",
        (SPEC + "test_dapo.py",),
        "DAPO's dynamic sampling default off",
    ),
    Slip(
        "drgrpo-std",
        ALG + "dr_grpo.py",
        "core.group_normalize(batch.rewards, batch.group_size, scale_by_std=False)",
        "core.group_normalize(batch.rewards, batch.group_size)",
        (SPEC + "test_dr_grpo.py",),
        "Dr. GRPO divides by the std again",
    ),
    Slip(
        "gspo-eps",
        ALG + "gspo.py",
        "clip_eps_low: contract.ClipLow = 3e-4",
        "clip_eps_low: contract.ClipLow = 0.2",
        (SPEC + "test_gspo.py",),
        "GSPO's sequence clip range (3e-4) replaced by PPO's",
    ),
    Slip(
        "gspo-seq-mean",
        ALG + "gspo.py",
        "A_seq = core.masked_mean(adv, mask, dim=1)",
        "A_seq = core.masked_sum(adv, mask, dim=1)",
        (SPEC + "test_gspo.py",),
        "GSPO's per-sequence advantage summed over tokens",
    ),
    Slip(
        "gpg-alpha",
        ALG + "gpg.py",
        "alpha = cfg.advantage_scale(batch)",
        "alpha = 1.0",
        (SPEC + "test_gpg.py",),
        "GPG's α rescaling dropped",
    ),
    Slip(
        "gpg-sign",
        ALG + "gpg.py",
        "token_loss = -alpha * adv * core.masked(logp, mask)",
        "token_loss = alpha * adv * core.masked(logp, mask)",
        (SPEC + "test_gpg.py",),
        "sign of GPG's policy-gradient loss",
    ),
    Slip(
        "gtpo-alpha2",
        ALG + "gtpo.py",
        "alpha_2: contract.Coef = 0.1",
        "alpha_2: contract.Coef = 0.0",
        (SPEC + "test_gtpo.py",),
        "GTPO's entropy weight α₂ default",
    ),
    Slip(
        "gtpo-negative-split",
        ALG + "gtpo.py",
        "A = torch.where(success, A_plus, A_minus)",
        "A = torch.where(success, A_minus, A_plus)",
        (SPEC + "test_gtpo.py",),
        "O⁺ and O⁻ advantages swapped",
    ),
    Slip(
        "gtpo-failed-rewards",
        ALG + "gtpo.py",
        # the vectorised advantages (4-space indent), not the reference loop's copy
        '\n    failed_rewards = r_minus if cfg.negative_shaping == "paper" else r_plus',
        "\n    failed_rewards = r_plus",
        (SPEC + "test_gtpo.py",),
        "failed tokens normalised on r⁺ instead of r⁻ (Eq. 3 lost)",
    ),
    Slip(
        "gtpo-eq4-set",
        ALG + "gtpo.py",
        '    if cfg.stats == "group":\n        set_plus, set_minus = active, active',
        '    if cfg.stats in ("group", "batch"):\n        set_plus, set_minus = active, active',
        (SPEC + "test_gtpo.py",),
        "Eq. 4's batch set computed with the default's set (the other sign's zeros included)",
    ),
    Slip(
        "gtpo-stats-default",
        ALG + "gtpo.py",
        'stats: str = "group"',
        'stats: str = "batch"',
        (SPEC + "test_gtpo.py",),
        "GTPO's default normalisation set swapped for the literal Eq. 4",
    ),
    Slip(
        "gtpo-geometric-keeps-count",
        ALG + "gtpo.py",
        "weight_plus_d = torch.exp(log_h - log_gm_plus)",
        "weight_plus_d = torch.exp(log_h - log_gm_plus) * d_t",
        (SPEC + "test_gtpo.py",),
        "§2.4.1's geometric weight times d_t (the arithmetic form's count kept)",
    ),
    Slip(
        "grpo-s-swap",
        ALG + "grpo_s.py",
        "A_hat = torch.where(success, A_plus, A_minus)",
        "A_hat = torch.where(success, A_minus, A_plus)",
        (SPEC + "test_grpo_s.py",),
        "GRPO-S: O⁺ and O⁻ sequence advantages swapped",
    ),
    Slip(
        "grpo-s-stats-default",
        ALG + "grpo_s.py",
        'stats: str = "joint"',
        'stats: str = "group"',
        (SPEC + "test_grpo_s.py",),
        "GRPO-S's default normalisation: separate R̂⁺/R̂⁻ instead of §2.3's joint z-score",
    ),
    Slip(
        "grpo-s-ratio-default",
        ALG + "grpo_s.py",
        'ratio: str = "geometric"',
        'ratio: str = "arithmetic"',
        (SPEC + "test_grpo_s.py",),
        "GRPO-S's importance weight: Eq. 8's arithmetic mean instead of §2.4.1's geometric",
    ),
    Slip(
        "grpo-s-geometric-is-arithmetic",
        ALG + "grpo_s.py",
        '    if ratio == "arithmetic":\n        return core.masked_mean(',
        "    if True:\n        return core.masked_mean(",
        (SPEC + "test_grpo_s.py",),
        "GRPO-S's geometric ratio computed as the arithmetic mean",
    ),
    Slip(
        "grpo-s-geometric-entropy",
        ALG + "grpo_s.py",
        "weight_plus_n = torch.exp(log_h - log_gm_plus)",
        "weight_plus_n = torch.exp(log_h - log_gm_plus) * n",
        (SPEC + "test_grpo_s.py",),
        "§2.4.1's geometric sequence weight times n",
    ),
    Slip(
        "tepo-tau",
        ALG + "tepo.py",
        "entropy_decrease_tol: contract.NonNegative = 1e-4",
        "entropy_decrease_tol: contract.NonNegative = 0.0",
        (SPEC + "test_tepo.py",),
        "TEPO's mask tolerance τ default",
    ),
    Slip(
        "clip-cov-ratio",
        ALG + "clip_cov.py",
        "clip_cov_ratio: contract.Fraction = 2e-4",
        "clip_cov_ratio: contract.Fraction = 2e-3",
        (SPEC + "test_clip_cov.py",),
        "Clip-Cov's published ratio r = 2e-4",
    ),
    Slip(
        "kl-cov-penalty-sign",
        ALG + "kl_cov.py",
        "token_loss = token_loss + cfg.kl_cov_coef * core.masked(abs_log_ratio, selected)",
        "token_loss = token_loss - cfg.kl_cov_coef * core.masked(abs_log_ratio, selected)",
        (SPEC + "test_kl_cov.py",),
        "sign of KL-Cov's penalty",
    ),
    Slip(
        "forking-rho",
        ALG + "forking_tokens.py",
        "top_entropy_frac: contract.Fraction = 0.2",
        "top_entropy_frac: contract.Fraction = 0.8",
        (SPEC + "test_forking_tokens.py",),
        "the 80/20 rule's ρ = 0.2",
    ),
    Slip(
        "forking-inverted",
        ALG + "forking_tokens.py",
        "    token_loss = core.masked(token_loss, forks)",
        "    token_loss = core.masked(token_loss, ~forks)",
        (SPEC + "test_forking_tokens.py",),
        "trains the low-entropy tokens instead of the forking ones",
    ),
    Slip(
        "forking-random-by-entropy",
        ALG + "forking_tokens.py",
        "return random_mask(batch.response_mask, cfg.top_entropy_frac, generator)",
        "return forking_mask(batch.entropy_old, batch.response_mask, cfg.top_entropy_frac)",
        (SPEC + "test_forking_tokens.py",),
        "the random-20 % control selects by entropy",
    ),
    Slip(
        "entropy-bonus-sign",
        ALG + "entropy_bonus.py",
        "token_loss = token_loss - cfg.entropy_coef * H",
        "token_loss = token_loss + cfg.entropy_coef * H",
        (SPEC + "test_entropy_bonus.py",),
        "sign of the entropy bonus (a penalty)",
    ),
    Slip(
        "steer-map-sign",
        ALG + "steer.py",
        "weight = cfg.lambda_max - (x - lo) / (hi - lo) * span",
        "weight = cfg.lambda_min + (x - lo) / (hi - lo) * span",
        (SPEC + "test_steer.py",),
        "STEER's linear map sends the smallest |Ω| to λ_min (the map reversed)",
    ),
    Slip(
        "steer-clamp",
        ALG + "steer.py",
        "weight = weight.clamp(cfg.lambda_min, cfg.lambda_max)",
        "weight = weight",
        (SPEC + "test_steer.py",),
        "STEER's linear weights not clamped to [λ_min, λ_max]",
    ),
    Slip(
        "steer-power",
        ALG + "steer.py",
        "pi * (1.0 - pi) ** power",
        "pi * (1.0 - pi)",
        (SPEC + "test_steer.py",),
        "STEER's Ω with p = 1 whatever omega_power says",
    ),
    Slip(
        "steer-weight-normaliser",
        ALG + "steer.py",
        "total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)",
        "total = core.masked_sum(token_loss, mask) / core.masked_sum(weight, mask)",
        (SPEC + "test_steer.py",),
        "STEER's token-mean divided by Σ λ instead of the token count",
    ),
    Slip(
        "steer-dual-clip",
        ALG + "steer.py",
        "w, adv, cfg.clip_eps_low, cfg.clip_eps_high, cfg.clip_ratio_c",
        "w, adv, cfg.clip_eps_low, cfg.clip_eps_high, float('inf')",
        (SPEC + "test_steer.py",),
        "STEER without the dual clip (c = ∞)",
    ),
    Slip(
        "steer-current-pi",
        ALG + "steer.py",
        "pi = core.masked(torch.exp(logp.detach().float()), mask)",
        "pi = core.masked(torch.exp(batch.logp_old.float()), mask)",
        (SPEC + "test_steer.py",),
        "STEER's Ω read at π_old instead of the current π",
    ),
    Slip(
        "steer-exp-floor",
        ALG + "steer.py",
        "torch.clamp(hi, min=cfg.omega_floor)",
        "hi",
        (SPEC + "test_steer.py",),
        "STEER's exponential map without the 0.02 floor on max |Ω|",
    ),
    # --- the loop a reader reads first: refimpl/loop.py against the Trainer ---
    Slip(
        "loop-no-clip",
        "refimpl/loop.py",
        "clip_grad_norm_(model.parameters(), cfg.grad_clip)",
        'clip_grad_norm_(model.parameters(), float("inf"))',
        ("tests/test_loop.py",),
        "loop.py skips the gradient clip",
    ),
    # --- the stage order every driver calls (refimpl/batch_stages.py: prepare_update) ---
    Slip(
        "stages-no-overlong-filter",
        "refimpl/batch_stages.py",
        "        loss_mask = overlong_filter(loss_mask, truncated, cfg)\n",
        "        pass\n",
        ("tests/test_stage_order.py",),
        "every loop trains truncated rows that DAPO's overlong filter masks out",
    ),
    Slip(
        "stages-filter-before-advantages",
        "refimpl/batch_stages.py",
        "    if keep is None:  # 2. the advantages, every row of the rollout counted\n",
        "    if truncated is not None:\n"
        "        batch = batch.replace(response_mask=overlong_filter(batch.response_mask, truncated, cfg))\n"
        "    if keep is None:\n",
        ("tests/test_stage_order.py",),
        "the overlong filter applied before the advantages (a truncated row leaves its group)",
    ),
    # --- the credit oracle (refimpl/sampling/monte_carlo_values.py): a measuring device ---
    Slip(
        "oracle-temperature",
        "refimpl/sampling/monte_carlo_values.py",
        'sampling={"temperature": temperature, "top_k": top_k, "top_p": top_p}',
        'sampling={"temperature": 1.0, "top_k": top_k, "top_p": top_p}',
        ("tests/test_credit_oracle.py",),
        "the oracle's rollouts at temperature 1 instead of the policy's",
    ),
    Slip(
        "oracle-off-by-one",
        "refimpl/sampling/monte_carlo_values.py",
        "            key = (g, tuple(tokens[:t]))",
        "            key = (g, tuple(tokens[: max(t - 1, 0)]))",
        ("tests/test_credit_oracle.py",),
        "the value before token t read from the prefix one token shorter",
    ),
    # Issue 46 § 0: the rollouts' sampling settings, a finished completion's value, and the
    # independence of the rollouts across prefixes.
    Slip(
        "oracle-drops-top-k",
        "refimpl/sampling/monte_carlo_values.py",
        'sampling={"temperature": temperature, "top_k": top_k, "top_p": top_p}',
        'sampling={"temperature": temperature, "top_k": None, "top_p": top_p}',
        ("tests/test_credit_oracle.py",),
        "the oracle's rollouts without the run's top-k",
    ),
    Slip(
        "oracle-drops-top-p",
        "refimpl/sampling/monte_carlo_values.py",
        'sampling={"temperature": temperature, "top_k": top_k, "top_p": top_p}',
        'sampling={"temperature": temperature, "top_k": top_k, "top_p": None}',
        ("tests/test_credit_oracle.py",),
        "the oracle's rollouts without the run's top-p",
    ),
    Slip(
        "oracle-training-values-top-k",
        "refimpl/sampling/monte_carlo_values.py",
        "temperature=temperature, top_k=top_k, top_p=top_p,",
        "temperature=temperature, top_k=None, top_p=top_p,",
        ("tests/test_credit_oracle.py",),
        "training_values (what a loop gets) drops the run's top-k",
    ),
    Slip(
        "oracle-training-values-temperature",
        "refimpl/sampling/monte_carlo_values.py",
        "temperature=temperature, top_k=top_k, top_p=top_p,",
        "temperature=1.0, top_k=top_k, top_p=top_p,",
        ("tests/test_credit_oracle.py",),
        "training_values (what a loop gets) samples at temperature 1",
    ),
    Slip(
        "oracle-success-strict",
        "refimpl/sampling/monte_carlo_values.py",
        "(outcome >= success_threshold).tolist()",
        "(outcome > success_threshold).tolist()",
        ("tests/test_credit_oracle.py",),
        "a reward equal to the threshold counted as a failure",
    ),
    Slip(
        "oracle-reward-as-outcome",
        "refimpl/sampling/monte_carlo_values.py",
        "(outcome >= success_threshold).tolist()",
        "outcome.tolist()",
        ("tests/test_credit_oracle.py",),
        "the reward itself taken as the outcome (a partial reward below the threshold succeeds)",
    ),
    Slip(
        "oracle-continues-finished",
        "refimpl/sampling/monte_carlo_values.py",
        "for t in range(len(tokens)) if positions is None else positions[i]:",
        "for t in range(len(tokens) + 1) if positions is None else positions[i]:",
        ("tests/test_credit_oracle.py",),
        "rollouts sampled after a completion's last token",
    ),
    Slip(
        "oracle-one-stream",
        "refimpl/sampling/monte_carlo_values.py",
        "seeded_generator(seed, ORACLE_STREAM, t, chunk_index, device=device)",
        "seeded_generator(seed, ORACLE_STREAM, device=device)",
        ("tests/test_credit_oracle.py",),
        "every prefix length and chunk reseeded with the same stream",
    ),
    Slip(
        "oracle-stream-per-length",
        "refimpl/sampling/monte_carlo_values.py",
        "seeded_generator(seed, ORACLE_STREAM, t, chunk_index, device=device)",
        "seeded_generator(seed, ORACLE_STREAM, t, device=device)",
        ("tests/test_credit_oracle.py",),
        "the chunks of one prefix length share a stream",
    ),
    Slip(
        "oracle-stream-per-step",
        "refimpl/sampling/monte_carlo_values.py",
        "np.random.default_rng([seed, step, ORACLE_STREAM])",
        "np.random.default_rng([seed, ORACLE_STREAM])",
        ("tests/test_credit_oracle.py",),
        "training_values reuses one stream at every training step",
    ),
]


def run_slip(slip: Slip, python: str) -> tuple[str, str, float]:
    path = ROOT / slip.path
    source = path.read_text()
    count = source.count(slip.old)
    if count != 1:
        return "ERROR", f"the text to replace occurs {count} times in {slip.path}", 0.0
    start = time.perf_counter()
    try:
        path.write_text(source.replace(slip.old, slip.new))
        proc = subprocess.run(
            [
                python,
                "-m",
                "pytest",
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                *slip.tests,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
    finally:
        path.write_text(source)
    seconds = time.perf_counter() - start
    if proc.returncode == 0:
        return "MISSED", "every test passed", seconds
    failed = [line.split(" ")[1] for line in proc.stdout.splitlines() if line.startswith("FAILED")]
    return "caught", failed[0] if failed else proc.stdout.strip().splitlines()[-1], seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated slip names")
    parser.add_argument("--list", action="store_true", help="print the slips and exit")
    args = parser.parse_args(argv)
    names = {s.name for s in SLIPS}
    only = [n for n in args.only.split(",") if n]
    unknown = sorted(set(only) - names)
    if unknown:
        print(f"--only: unknown slip(s) {unknown}; --list shows them", file=sys.stderr)
        return 2
    if args.list:
        for s in SLIPS:
            print(f"{s.name:<32} {s.what}")
        return 0
    slips = [s for s in SLIPS if not only or s.name in only]
    print("| slip | what | result | first failing test | s |")
    print("|---|---|---|---|---|")
    missed = 0
    for slip in slips:
        result, detail, seconds = run_slip(slip, sys.executable)
        missed += result != "caught"
        print(f"| {slip.name} | {slip.what} | {result} | {detail} | {seconds:.0f} |", flush=True)
    print(f"\n{len(slips) - missed}/{len(slips)} slips caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
