"""RLOO: REINFORCE Leave-One-Out.

Paper: Ahmadian et al., "Back to Basics: Revisiting REINFORCE Style Optimization for Learning
from Human Feedback in LLMs", arXiv 2402.14740 (ACL 2024), the RLOO estimator, after Kool,
van Hoof and Welling, "Buy 4 REINFORCE Samples, Get a Baseline for Free!" (ICLR 2019
workshop). Confidence: [C] for the advantage; [S] for the loss, which follows verl's ``rloo``
recipe rather than the paper's plain REINFORCE (see Assumptions).

Idea
----
Sample ``G`` completions per prompt and give each one the mean reward of the *other* ``G − 1``
as its baseline. A baseline that does not depend on the completion it is subtracted from keeps
the policy-gradient estimate unbiased; GRPO's group mean contains the completion's own reward,
which shrinks the estimate by ``(G − 1)/G``. There is no division by the std: the advantage
stays in reward units.

Equations
---------
    Advantage (the leave-one-out baseline):
        A_i = r_i − (1/(G−1)) Σ_{j≠i} r_j  =  G/(G−1) · (r_i − mean_G r)
        broadcast to every token of o_i

    Token ratio:
        w[i,t] = π_θ(o_{i,t} | q, o_{i,<t}) / π_old(o_{i,t} | q, o_{i,<t})

    Per-token loss (verl's recipe: the advantage in PPO's clipped surrogate; β = 0 by default):
        ℓ[i,t] = −min( w·A_i, clip(w, 1−ε_low, 1+ε_high)·A_i ) + β·kl[i,t]
        kl[i,t] = exp(logp_ref − logp) − (logp_ref − logp) − 1          (k3, only when β > 0)

    Aggregation "token-mean" (verl's default ``loss_agg_mode``):
        L = Σ_{i,t} m[i,t] ℓ[i,t] / Σ_{i,t} m[i,t]

Relative to GRPO
----------------
The advantage leaves the completion itself out of its baseline and is not divided by the std
(it is Dr. GRPO's centred reward times ``G/(G−1)``); the aggregation is ``token-mean`` and
``kl_coef`` is 0. The ratio, the clip and the loss code are GRPO's.

Assumptions
-----------
The paper optimises REINFORCE on whole completions (the gradient of ``A_i · Σ_t logp[i,t]``,
on policy, no clip) and folds a KL penalty into the reward. This file follows verl's
``adv_estimator=rloo`` recipe so that it honours the same contract as every other file: PPO's
token ratio and clip, ``token-mean`` aggregation [S]. With one update per rollout (every ratio
1) the gradient is the leave-one-out REINFORCE gradient with every token weighted
``1/Σ|o|``. No KL by default [A]; ``kl_coef > 0`` adds GRPO's k3 term to the loss, not to the
reward. A group whose rewards are all equal has ``A_i = 0`` exactly [C].

Worked example: ``docs/algorithms/rloo.md`` computes one group by hand;
``tests/spec/test_rloo.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "rloo"

#: Aggregations the loss supports (its loss is per token).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """RLOO hyper-parameters; the advantage from the paper, the loss from verl's recipe."""

    clip_eps_low: contract.ClipLow = 0.2  # ε, symmetric clip (verl's default clip_ratio) [S]
    clip_eps_high: contract.ClipHigh = 0.2  # ε [S]
    kl_coef: float = 0.0  # β: no KL term in the loss (the paper puts it in the reward) [A]
    loss_agg_mode: str = "token-mean"  # verl's default loss_agg_mode [S]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)

    def advantage_std_set(self) -> str | None:
        # No std division: r_i minus the mean of the other rewards (Eq. 1).
        return None


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: each reward minus the mean of its siblings' rewards."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    G = batch.group_size
    # Leave-one-out: r_i − (1/(G−1)) Σ_{j≠i} r_j = G/(G−1)·(r_i − mean_G r). The centred
    # reward comes from group_normalize, which makes an all-equal group exactly 0.
    A_seq = core.group_normalize(batch.rewards, G, scale_by_std=False) * (G / (G - 1))
    contract.check_advantage_values(A_seq)  # the factor may overflow float32: refused
    # Outcome supervision: every token of o_i gets A_i; padding gets exactly 0.
    return core.broadcast_to_tokens(A_seq, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops: each baseline is the mean of the *other* rewards."""
    B, T = batch.response_mask.shape
    G = batch.group_size
    A = torch.zeros(B, T, dtype=torch.float32)
    r = batch.rewards.tolist()
    for g in range(batch.num_groups):
        rows = range(g * G, g * G + G)
        rewards = [r[i] for i in rows]
        for i in rows:
            baseline = sum(r[j] for j in rows if j != i) / (G - 1)  # leave o_i out
            A_i = 0.0 if max(rewards) == min(rewards) else r[i] - baseline
            for t in range(T):
                if batch.response_mask[i, t] == 1:
                    A[i, t] = A_i
    return A


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """Clipped surrogate (plus k3 KL when ``kl_coef > 0``), aggregated token-mean.

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by RLOO (part of the shared signature).
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
    # verl's recipe: −min(w·A, clip(w, 1−ε, 1+ε)·A) for every token.
    token_loss = -core.clipped_surrogate(w, adv, cfg.clip_eps_low, cfg.clip_eps_high)

    metrics: dict[str, float] = {}
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # k3 estimate of KL(π_θ ‖ π_ref), added per token with weight β (GRPO's Eq. 4) [A].
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
