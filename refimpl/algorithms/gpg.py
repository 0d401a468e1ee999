"""GPG: Group Policy Gradient.

Paper: Chu et al., "GPG: A Simple and Strong Reinforcement Learning Baseline for Model
Reasoning", arXiv 2504.02546 (v3; ICLR 2026), §3. Confidence: [C] (paper and the authors'
AMAP-ML/GPG code). verl registers a ``gpg`` estimator and loss with a *different* α (see
Assumptions).

Idea
----
Drop the surrogate: no importance ratio, no clipping, no KL, no reference model, no critic.
Optimise the plain policy-gradient objective with the group mean as baseline. One correction
keeps the gradient estimate unbiased in scale: rows of groups whose rewards are all equal
contribute nothing, so the loss is scaled up by ``α = B / (B − M)`` to average over the rows
that do carry signal ("accurate gradient estimation").

Equations
---------
    Advantage (§3, F_norm = 1 by default, or the group std with ``normalize_std``):
        A_i = (r_i − mean_G r) / F_norm                      broadcast to every token of o_i

    Gradient-estimation correction (§3):
        α = B / (B − M),   M = number of rows whose group has zero reward variance
        (α = 1 when B = M: every advantage is 0 then, and so is the loss)

    Loss (§3, the policy-gradient objective, negated):
        ℓ[i,t] = −α · A_i · logp[i,t]

    Aggregation "token-mean" (1/Σ_i|o_i| Σ_i Σ_t):
        L = Σ_{i,t} m[i,t] ℓ[i,t] / Σ_{i,t} m[i,t]
    On policy its gradient is ∂L/∂logp[i,t] = −α·A_i / Σ|o|, the same as a token-mean
    surrogate w·A at w = 1, scaled by α.

Relative to GRPO
----------------
The advantage is not divided by the std (by default), the clipped ratio surrogate is replaced
by ``logp · A`` (so there are no clip fields), every token is scaled by α, the aggregation is
``token-mean`` and ``kl_coef`` is 0.

Assumptions
-----------
``M`` counts rows of zero-variance groups in the batch passed to the loss (the trainer does
not filter groups for GPG: ``dynamic_sampling`` is off) [C]. α is computed from
``batch.rewards``; the paper's optional threshold on the fraction of such rows is not
implemented. The loss value depends on ``logp`` itself (it is not 0 on policy); only its
gradient is meaningful. Ratio metrics are reported for monitoring; nothing is clipped, so the
clip fractions are 0 by construction.

verl 0.9.1's ``gpg`` estimator differs: it folds ``α = B / count_nonzero(r)`` into the
advantages, counting rows with a *non-zero reward* over the whole batch (with {0, 1} rewards:
B over the number of correct answers), not rows of groups with non-zero variance; ours is
``B/(B − M)`` on the batch the loss sees (a minibatch, in the toy trainer).
``tests/spec/test_peers.py`` pins the difference when verl is installed.

Worked example: ``docs/algorithms/gpg.md`` computes one group by hand;
``tests/spec/test_gpg.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxtyping import Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "gpg"

#: Aggregations the loss supports (its loss is per token; L_max-normalisation is Dr. GRPO's).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """GPG hyper-parameters; defaults from the GPG paper unless marked."""

    kl_coef: float = 0.0  # β: no KL and no reference model (§3) [C]
    loss_agg_mode: str = "token-mean"  # 1/Σ|o_i| Σ_i Σ_t (§3; verl's gpg loss) [C]
    normalize_std: bool = False  # F_norm = std_G r instead of 1 (§3, off by default) [C]
    eps: contract.Positive = core.EPS  # std denominator when normalize_std is on (verl's) [C]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)

    def advantage_std_set(self) -> str | None:
        # §3: F_norm = 1 (no std division) unless normalize_std divides by the group's std.
        return "group" if self.normalize_std else None

    def advantage_scale(self, batch: RolloutBatch) -> float:
        """§3: α = B / (B − M), M = rows of zero-variance groups (they carry no gradient)."""
        return alpha(batch.rewards, batch.group_size)


def alpha(rewards: Float[Tensor, " B"], group_size: int) -> float:
    """``α = B / (B − M)`` (§3), ``M`` the rows whose group has all-equal rewards (they carry
    no gradient); 1 when every group is flat (every advantage is 0 then)."""
    n_rows = rewards.shape[0]
    n_flat = int(core.group_degenerate(rewards, group_size).sum())
    return n_rows / (n_rows - n_flat) if n_rows > n_flat else 1.0


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: the group-centred outcome reward on every response token."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    # §3: A_i = (r_i − mean_G r) / F_norm with F_norm = 1 (or std_G r + eps).
    A_seq = core.group_normalize(
        batch.rewards, batch.group_size, scale_by_std=cfg.normalize_std, eps=cfg.eps
    )
    # Outcome supervision: every token of o_i gets A_i; padding gets exactly 0.
    return core.broadcast_to_tokens(A_seq, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over groups, completions and positions: GRPO's group
    loops with F_norm = 1, or the group std with ``normalize_std``
    (``core.reference_group_zscore``, written once for the spec)."""
    return core.reference_group_zscore(batch, cfg.eps, scale_by_std=cfg.normalize_std)


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """Policy gradient ``−α·A·logp`` (plus k3 KL when ``kl_coef > 0``), aggregated token-mean.

    Args:
        batch: the rollout (``rewards`` for α; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by GPG (part of the shared signature).
    """
    contract.check_config_type(cfg, Config)  # another algorithm's Config: refused
    contract.check_policy_tensor(logp, batch, "logp")
    contract.check_advantages(adv, batch)
    mask = batch.response_mask
    # Loss math in float32 even when the model runs in bf16/fp16.
    logp = logp.float()
    adv = adv.float()

    # w[i,t] = π_θ / π_old, reported for monitoring only: GPG has no ratio in its loss.
    w = core.token_ratio(logp, batch.logp_old, mask)
    # §3: α = B / (B − M), M = rows of zero-variance groups (they carry no gradient).
    alpha = cfg.advantage_scale(batch)
    # §3: −α·A_i·logp[i,t] for every token (the policy-gradient objective, no surrogate).
    token_loss = -alpha * adv * core.masked(logp, mask)

    metrics: dict[str, float] = {"alpha": alpha}
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # Not in GPG; GRPO's Eq. 4 k3 term, added per token with weight β.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)
    # Nothing is clipped: an infinite trust region makes both clip fractions 0.
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, 1.0, float("inf")))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
