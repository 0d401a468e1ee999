"""STEER: Stabilizing Token-level Entropy-changE via Reweighting.

Paper: "Rethinking Entropy Interventions in RLVR: An Entropy Change Perspective",
arXiv 2510.10150 (ACL 2026). Code: the authors' verl fork (repository ``zz-haooo/STEER``),
``verl/trainer/ppo/core_algos.py`` (``compute_token_weights`` and the policy loss registered
as ``entropy_control``), the actor ``verl/workers/actor/dp_actor.py`` that calls it, and the
settings of ``run/*.sh``. Confidence: [C] from the code (the paper's equations were not
read), with the [A] choices below.

Idea
----
Every token's update changes the entropy of its own next-token distribution. STEER estimates
that change per token to first order, ``Ω``, and multiplies each token's clipped surrogate by
a weight ``λ`` that falls as ``|Ω|`` grows: the tokens that would move the entropy most (up or
down) are damped, those that would move it least are amplified, so that no token dominates
the step's entropy change and the change per step stays within a band (the paper's claim;
measured on the toy collapse benchmark, ``docs/benchmarks.md`` § 3: the min–max weights sit
at λ_max for almost every token there, and the band is that of the same loss without them).

Equations
---------
    Advantage, as GRPO (the run scripts' ``algorithm.adv_estimator=grpo``):
        A_i = (r_i − mean_G r) / (std_G r + eps)                broadcast to every token of o_i

    Per-token entropy-change estimate, without gradient (``compute_token_weights``):
        π     = clamp(exp(logp), 1e-8, 1 − 1e-8)        current prob. of the sampled token
        π_old = max(exp(logp_old), 1e-8)                its prob. under the rollout policy
        Ω[i,t] = (A[i,t] / π_old) · π (1 − π)^p · (ln π + H_old[i,t]),     non-finite → 0

    Token weight from |Ω|, with min_S and max_S over a set S of response tokens (the tokens
    of the loss call: the original's micro-batch):
        linear        λ = clamp(λ_max − (|Ω| − min_S|Ω|) · (λ_max − λ_min) / (max_S|Ω| − min_S|Ω|),
                            λ_min, λ_max)          and λ = (λ_min + λ_max)/2 if max_S = min_S
        exponential   k = −ln λ_min / max(max_S|Ω|, 0.02),    λ = clamp(exp(−k·|Ω|), λ_min, 1)

    Per-token loss: dual-clip PPO with clip-higher, weighted after clipping:
        s(w, A) = min(w·A, clip(w, 1−ε_low, 1+ε_high)·A);   for A < 0: max(s, c·A)
        ℓ[i,t] = −λ[i,t] · s(w[i,t], A[i,t]),      w = π_θ/π_old, ε = 0.2/0.28, c = 10

    Aggregation "token-mean", normalised by the token count (not by Σ λ):
        L = Σ_{i,t} m ℓ / Σ_{i,t} m

Relative to GRPO and DAPO
-------------------------
DAPO's clip-higher and token-mean on GRPO's advantages, without DAPO's dynamic sampling and
overlong shaping (the run scripts use neither), with verl's dual clip (``c = 10`` in the
scripts) and one new factor, λ. With ``λ_min = λ_max = 1`` every weight is 1 and, for ratios
below ``c``, the loss is DAPO's exactly. λ is a constant of each loss call: no gradient flows
through Ω.

What Ω is (and is not)
----------------------
For one softmax state with logits z, ``∂H/∂z_j = −π_j (ln π_j + H)``. A step of size η up the
gradient of the token's surrogate ``A·π_a/π_old`` moves the logits by
``η (A/π_old) π_a (e_a − π)``, and to first order

    ΔH = −η (A/π_old) π_a [ π_a (ln π_a + H) − Σ_j π_j² (ln π_j + H) ].

The sampled logit's own share of it is ``−η (A/π_old) π_a² (1 − π_a)(ln π_a + H) =
−η π_a Ω``, with Ω at ``p = 1``: Ω is that state's own-logit first-order entropy change
divided by π, sign reversed (Ω > 0: the token's update lowers its state's entropy;
``tests/spec/test_steer.py::test_own_logit_step_changes_entropy_by_minus_eta_pi_omega``).
``p = 2`` multiplies it by a further ``1 − π``. Ω leaves out the other logits' share (the Σ
above), every other state that the shared network moves, and the optimizer; the trainer's
``entropy_change_pred`` (``refimpl.diagnostics.entropy_attribution``) is the whole network's first-order
change, through the actual parameter step. The loss logs ``omega_sum_p1``, ``omega_sum_p2``
(Σ Ω over its tokens) and ``omega_weighted_sum`` (Σ λΩ);
``scripts/experiments/entropy/steer_omega_prediction.py`` compares them with
``entropy_change_pred`` as predictors of the measured change.

Assumptions
-----------
* ``omega_power`` p = 2 by default. The authors' current source has p = 1; the compiled module
  they committed beside it (``verl/trainer/ppo/__pycache__/core_algos.cpython-310.pyc`` and
  ``-312.pyc``, both stamped 9 Oct 2025, two days before arXiv v1) computes
  ``x·(1 − x)**2``, and the source still names that product ``x_one_minus_x_squared``: the
  paper's runs used p = 2 [C]. The default reproduces what the published results computed;
  ``omega_power=1`` is the current source.
* ``normalise = "micro-batch"`` by default [C]: min and max of |Ω| over the tokens of the loss
  call, as ``compute_token_weights`` takes them over the micro-batch it is given (8
  completions per GPU in the run scripts). The toy trainer calls the loss once per minibatch
  of whole groups (the collapse preset: 16 groups × 8, about 850 tokens), TRL and verl once per
  micro-batch. It is the default because it is the original, because the loss then needs
  nothing but its arguments (the same function on every path: TRL and verl show a loss only
  micro-batches), and because a toy minibatch (128 completions) is already a larger set than
  the authors' (8). ``normalise = "batch"`` [A]: min and max of |Ω| over the whole rollout
  batch at θ_old, fixed for every loss call of that rollout (:meth:`Config.for_update`, which
  the toy trainer, the HF loop and TRL call on the whole batch; verl's loss sees micro-batches
  only and refuses it). Either way a loss called directly on a whole batch normalises over it.
* ``mapping = "linear"``, λ ∈ [0.8, 1.2] [C: the code's default ``linear=True`` and
  ``run/run_linear.sh``, the README's first script];
  ``run/run_exp.sh`` is ``mapping="exponential"``, λ_min = 0.8 (its upper bound is 1, fixed by
  the code; ``lambda_max`` is not read then).
* Clip 0.2 / 0.28, dual clip c = 10, no KL, token-mean, GRPO's advantage, no dynamic sampling
  or overlong shaping [C: ``run/*.sh`` and verl's defaults]; ε = 1e-6 in the std (verl's) [C].

Worked example: ``docs/algorithms/steer.md`` computes one group by hand;
``tests/spec/test_steer.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Annotated

import torch
from jaxtyping import Float, Shaped
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "steer"

#: Aggregations the loss supports (its loss is per token; L_max-normalisation is Dr. GRPO's).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")
#: How |Ω| becomes a weight: ``compute_token_weights``'s ``linear=True`` / ``False``.
MAPPINGS = ("linear", "exponential")
#: The set of tokens whose |Ω| range the map uses: the loss call's tokens, or the rollout's.
NORMALISE_SETS = ("micro-batch", "batch")
#: Clamp of π and floor of π_old in Ω (``compute_token_weights``) [C].
PROB_FLOOR = 1e-8

# The ranges of STEER's own fields (``contract.check_config`` reads them from the annotations):
# with them, as with the contract's ranges, no finite value makes the loss inf or NaN. The token
# weights λ ≤ LAMBDA_LIMIT = 10 multiply a token's surrogate, which the dual clip
# c ≤ CLIP_HIGH_LIMIT + 1 = 11 bounds by c·|A| where A < 0 (and the clip by (1 + ε_high)·|A|
# where A > 0): at most 110·2^120 < 2^127 summed. The |Ω| floor lies in [OMEGA_FLOOR_MIN,
# OMEGA_FLOOR_MAX]: the exponential map's slope −ln λ_min / max(max|Ω|, floor) then stays
# finite in float32 (−ln λ_min < 745 for any λ_min > 0), also on a batch whose every |Ω| is 0;
# the |Ω| range fits in float32. tests/test_safety_library.py computes the loss at these edges.

#: The largest token weight λ (``lambda_min``, ``lambda_max``).
LAMBDA_LIMIT = 10.0
#: The smallest and largest |Ω| floor of the exponential map.
OMEGA_FLOOR_MIN, OMEGA_FLOOR_MAX = 1e-30, 1e30
Lambda = Annotated[float, contract.Range(0.0, LAMBDA_LIMIT, low_open=True)]
DualClip = Annotated[
    float,
    contract.Range(
        1.0,
        contract.CLIP_HIGH_LIMIT + 1,
        low_open=True,
        text=f"a value in (1, {contract.CLIP_HIGH_LIMIT + 1:g}] (the dual clip's c)",
    ),
]
Power = Annotated[int, contract.Range(1, 2, text="1 or 2 (the exponent p of (1 − π)^p)")]
OmegaFloor = Annotated[float, contract.Range(OMEGA_FLOOR_MIN, OMEGA_FLOOR_MAX)]
OmegaAbs = Annotated[
    float, contract.Range(0.0, contract.FLOAT32_MAX, text="a value in [0, 3.4e38] (or None)")
]


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """STEER hyper-parameters; defaults from the authors' code and run scripts unless marked."""

    mapping: str = "linear"  # |Ω| → λ: linear (run_linear.sh) or exponential (run_exp.sh) [C]
    lambda_min: Lambda = 0.8  # λ_min, token_weight_min in run/*.sh [C]
    lambda_max: Lambda = 1.2  # λ_max, token_weight_max in run_linear.sh; exponential: 1 [C]
    omega_power: Power = 2  # p of (1 − π)^p: 2 in the paper's compiled code, 1 in the source [C]
    omega_floor: OmegaFloor = 0.02  # exponential: k = −ln λ_min / max(max|Ω|, 0.02) [C]
    normalise: str = "micro-batch"  # the |Ω| range over the loss call's tokens [C] or the
    #                                 whole rollout's at θ_old ("batch") [A]
    omega_abs_min: OmegaAbs | None = None  # the rollout's min |Ω|: set by for_update when
    omega_abs_max: OmegaAbs | None = None  # normalise="batch"; None: the loss call's tokens [A]
    clip_eps_low: contract.ClipLow = 0.2  # ε_low, clip_ratio_low in run/*.sh [C]
    clip_eps_high: contract.ClipHigh = 0.28  # ε_high, clip_ratio_high in run/*.sh (clip-higher) [C]
    clip_ratio_c: DualClip = 10.0  # c of the dual clip for A < 0, clip_ratio_c in run/*.sh [C]
    kl_coef: float = 0.0  # β: use_kl_loss=False, use_kl_in_reward=False in run/*.sh [C]
    loss_agg_mode: str = "token-mean"  # verl's default, not overridden in run/*.sh [C]
    eps: contract.Positive = core.EPS  # in the std denominator (verl's) [C]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)
        contract.require_choice(self.mapping, "Config.mapping", MAPPINGS)
        contract.require_choice(self.normalise, "Config.normalise", NORMALISE_SETS)
        contract.require(
            self.lambda_min <= self.lambda_max,
            "Config.lambda_min",
            f"λ_min ≤ λ_max, got {self.lambda_min!r} and {self.lambda_max!r}",
        )
        contract.require(
            self.mapping == "linear" or self.lambda_min <= 1.0,
            "Config.lambda_min",
            f"λ_min ≤ 1 for the exponential map (its weights lie in [λ_min, 1]), got "
            f"{self.lambda_min!r}",
        )
        lo, hi = self.omega_abs_min, self.omega_abs_max
        contract.require(
            (lo is None) == (hi is None) and (lo is None or lo <= hi),
            "Config.omega_abs_min",
            f"both None, or 0 ≤ omega_abs_min ≤ omega_abs_max, got {lo!r} and {hi!r}",
        )
        contract.require(
            lo is None or self.normalise == "batch",
            "Config.omega_abs_min",
            'None unless normalise="batch" (for_update sets the rollout\'s |Ω| range)',
        )

    def for_update(self, batch: RolloutBatch, adv: Tensor) -> Config:
        # normalise="batch": the |Ω| range of the whole rollout at θ_old (π = π_old there),
        # fixed for every loss call of the rollout. The loss call's own range otherwise.
        if self.normalise != "batch" or not bool(batch.response_mask.bool().any()):
            return self
        omega_abs = omega(batch, batch.logp_old, adv, self.omega_power).abs()
        active = omega_abs[batch.response_mask.bool()]
        return replace(self, omega_abs_min=float(active.min()), omega_abs_max=float(active.max()))


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: the group-normalised outcome reward on every response token."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config: refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    # GRPO's A_i = (r_i − mean_G r) / (std_G r + eps); one value per completion.
    A_seq = core.group_normalize(batch.rewards, batch.group_size, eps=cfg.eps)
    # Outcome supervision: every token of o_i gets A_i; padding gets exactly 0.
    return core.broadcast_to_tokens(A_seq, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over groups, completions and positions: GRPO's group
    z-score, whose loops the spec writes once (``core.reference_group_zscore``)."""
    return core.reference_group_zscore(batch, cfg.eps)


def omega(
    batch: RolloutBatch, logp: Float[Tensor, "B T"], adv: Float[Tensor, "B T"], power: int
) -> Float[Tensor, "B T"]:
    """``[B, T]`` float32 ``Ω = (A/π_old)·π(1 − π)^p·(ln π + H_old)`` (detached; 0 on padding
    and where it is not finite), π the current probability of the sampled token."""
    mask = batch.response_mask
    with torch.no_grad():
        # π clamped into (0, 1) so that ln π and 1 − π stay finite; π_old floored [C].
        pi = core.masked(torch.exp(logp.detach().float()), mask)
        pi = pi.clamp(PROB_FLOOR, 1.0 - PROB_FLOOR)
        pi_old = torch.exp(core.masked(batch.logp_old.float(), mask)).clamp(min=PROB_FLOOR)
        entropy_old = core.masked(batch.entropy_old.float(), mask)
        # The state's own-logit entropy change, over π (module docstring), times (1 − π)^(p−1).
        value = adv.detach().float() / pi_old * pi * (1.0 - pi) ** power
        value = value * (torch.log(pi) + entropy_old)
        return core.masked(value, mask.bool() & torch.isfinite(value))


def token_weights(
    omega_abs: Float[Tensor, "B T"], mask: Shaped[Tensor, "B T"], cfg: Config
) -> Float[Tensor, "B T"]:
    """``[B, T]`` float32 λ from ``|Ω|`` (the module docstring's linear or exponential map),
    0 on padding. The range is ``cfg.omega_abs_min/max`` when set (``normalise="batch"``, by
    :meth:`Config.for_update`), else that of the response tokens given here."""
    active = mask.bool()
    if not bool(active.any()):
        return torch.zeros_like(omega_abs, dtype=torch.float32)
    x = omega_abs.detach().float()
    if cfg.omega_abs_min is not None and cfg.omega_abs_max is not None:
        lo = torch.tensor(cfg.omega_abs_min, dtype=torch.float32, device=x.device)
        hi = torch.tensor(cfg.omega_abs_max, dtype=torch.float32, device=x.device)
    else:
        lo, hi = x[active].min(), x[active].max()
    if cfg.mapping == "linear":
        span = cfg.lambda_max - cfg.lambda_min
        if hi > lo and span > 0:
            # Smallest |Ω| → λ_max, largest → λ_min, a straight line in between.
            weight = cfg.lambda_max - (x - lo) / (hi - lo) * span
        else:  # all |Ω| equal: the midpoint (λ_min = λ_max: that value)
            weight = torch.full_like(x, (cfg.lambda_min + cfg.lambda_max) / 2)
        # A |Ω| outside the range (a whole-rollout range, normalise="batch") stays in bounds.
        weight = weight.clamp(cfg.lambda_min, cfg.lambda_max)
    else:
        # k puts the largest |Ω| at λ_min (unless it is below the floor: then all lie above).
        k = -math.log(cfg.lambda_min) / torch.clamp(hi, min=cfg.omega_floor)
        weight = torch.exp(-k * x).clamp(cfg.lambda_min, 1.0)
    return core.masked(weight, mask)


def dual_clipped_surrogate(
    ratio: Float[Tensor, "*dims"],
    adv: Float[Tensor, "*dims"],
    clip_eps_low: float,
    clip_eps_high: float,
    clip_ratio_c: float,
) -> Float[Tensor, "*dims"]:
    """Dual-clip PPO (Ye et al. 2020, verl's ``compute_policy_loss_vanilla``; STEER's surrogate,
    and no other algorithm's, so it is written here rather than in ``core``), elementwise:
    ``clipped(x, A)`` for ``A ≥ 0``, ``max(clipped(x, A), c·A)`` for ``A < 0``; the loss is its
    negative.

    For ``A < 0`` the plain clipped surrogate ``x·A`` falls without bound as the ratio grows;
    the dual clip stops it at ``c·A`` (``c > 1``), so a token the policy has already made far
    more likely than ``π_old`` cannot dominate the loss. Above ``x = c`` its gradient is 0.
    """
    surrogate = core.clipped_surrogate(ratio, adv, clip_eps_low, clip_eps_high)
    capped = torch.maximum(surrogate, clip_ratio_c * adv)
    return torch.where(adv < 0, capped, surrogate)


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """The dual-clip, clip-higher surrogate times λ(|Ω|), aggregated token-mean.

    Args:
        batch: the rollout (``logp_old``, ``entropy_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration (from :meth:`Config.for_update` for ``normalise="batch"``).
        entropy: unused: Ω reads the rollout entropy (part of the shared signature).
    """
    contract.check_config_type(cfg, Config)  # another algorithm's Config: refused
    contract.check_policy_tensor(logp, batch, "logp")
    contract.check_advantages(adv, batch)
    mask = batch.response_mask
    # Loss math in float32 even when the model runs in bf16/fp16.
    logp = logp.float()
    adv = adv.float()

    # w[i,t] = π_θ / π_old, the per-token importance ratio.
    w = core.token_ratio(logp, batch.logp_old, mask)
    # −s(w, A): clip-higher, and for A < 0 the dual clip at c·A (verl's vanilla loss).
    surrogate = dual_clipped_surrogate(
        w, adv, cfg.clip_eps_low, cfg.clip_eps_high, cfg.clip_ratio_c
    )
    # λ from |Ω| (no gradient), multiplying each token's loss after clipping.
    omega_now = omega(batch, logp, adv, cfg.omega_power)
    weight = token_weights(omega_now.abs(), mask, cfg)
    token_loss = -weight * surrogate

    metrics = _weight_metrics(batch, logp, adv, omega_now, weight, w, cfg)
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # Off in STEER (β = 0); kept so the KL can be switched back on: GRPO's Eq. 4 k3 term.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    # token-mean divides by Σ m, the token count: the weights are not renormalised.
    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics


def _weight_metrics(batch, logp, adv, omega_now, weight, w, cfg) -> dict[str, float]:
    """λ's mean, min and max over the response tokens; Σ Ω of both variants of p and Σ λΩ (the
    entropy-change estimates ``scripts/experiments/entropy/steer_omega_prediction.py`` reads);
    the fraction of tokens the dual clip stops (A < 0, w > c)."""
    mask = batch.response_mask
    active = mask.bool()
    with torch.no_grad():
        other = omega(batch, logp, adv, 3 - cfg.omega_power)
        by_power = {cfg.omega_power: omega_now, 3 - cfg.omega_power: other}
        dual = (adv < 0) & (w > cfg.clip_ratio_c)
        any_token = bool(active.any())
        return {
            "steer_weight_mean": float(core.masked_mean(weight, mask)),
            "steer_weight_min": float(weight[active].min()) if any_token else 0.0,
            "steer_weight_max": float(weight[active].max()) if any_token else 0.0,
            "omega_abs_mean": float(core.masked_mean(omega_now.abs(), mask)),
            "omega_sum_p1": float(core.masked_sum(by_power[1].double(), mask)),
            "omega_sum_p2": float(core.masked_sum(by_power[2].double(), mask)),
            "omega_weighted_sum": float(core.masked_sum((weight * omega_now).double(), mask)),
            "dual_clip_frac": float(core.masked_mean(dual.float(), mask)),
        }
