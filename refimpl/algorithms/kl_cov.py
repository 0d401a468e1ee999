"""KL-Cov: a KL penalty on the few tokens with the highest covariance, no PPO clip.

Paper: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv 2505.22617 (its KL-Cov method). Code: the authors' adaptation in verl,
``compute_policy_loss_kl_cov`` (``loss_mode="kl_cov"``). Confidence: [C] (paper and code
agree), with the [A] choices below.

Idea
----
The covariance between a token's log-probability and its advantage drives the entropy down
(``docs/entropy_mechanism.md``). Instead of detaching the high-covariance tokens (Clip-Cov),
KL-Cov ranks the batch's tokens by that covariance and puts a KL penalty towards the rollout
policy on the top fraction k: exactly the tokens that would sharpen the policy most are held
near π_old. The PPO clip is gone: the penalty takes its place.

Equations
---------
    Advantage: DAPO's (Eq. 9); ratio w[i,t] = π_θ / π_old
        A_i = (r_i − mean_G r) / (std_G r + eps)

    Centred covariance of each token (means over the batch's N = Σ m response tokens):
        cov[i,t] = (A[i,t] − mean A) · (log π_θ[i,t] − mean log π_θ)           (detached)
    Penalised: the n tokens with the largest cov,
        K = top_n { cov[i,t] : m = 1 },   n = max(1, ⌊k·N⌋),   k = 2e-4

    Per-token loss (no clip), with β = 1:
        ℓ[i,t] = −w·A_i + β·|log π_θ[i,t] − log π_old[i,t]|·1[(i,t) ∈ K]

    Aggregation "token-mean":
        L = Σ_{i,t} m ℓ / Σ_{i,t} m

Relative to DAPO
----------------
Same advantage, same aggregation, same batch mechanisms; the clipped surrogate becomes the
unclipped −w·A, and the few tokens of K get the penalty β·|Δ log π|. Its gradient is
β·sign(log π_θ − log π_old) / Σ m at those tokens: 0 at θ = θ_old, so the penalty acts
only once the policy has moved (``ppo_epochs > 1`` or ``minibatches > 1``).

Assumptions
-----------
* At least one token: n = max(1, ⌊k·N⌋) [C: the code]. The toy minibatches have under a
  thousand response tokens, so ⌊2e-4·N⌋ = 0 and KL-Cov penalises exactly one token per loss
  call (the paper's batches have millions of tokens: k·N is hundreds). ``kl_cov_ratio`` is
  the field to raise for a visible effect at toy scale.
* k = 2e-4 [C: verl's default]; the paper's 7B runs are reported with 2e-3 and its 32B runs
  with 2e-4 [S: secondary summaries; the full text was not checked here].
* β = ``kl_cov_coef`` = 1 [C: the authors' code, verl's fallback when it is not set; verl's
  ``PolicyLossConfig.ppo_kl_coef`` defaults to 0.1, so pass 1 explicitly to match].
* The KL is |log π_θ − log π_old| [C: the code], the absolute log-ratio; the paper writes a
  KL towards π_old.
* Ties in cov are broken by position (row-major, first wins) [A]; verl's ``torch.topk`` does
  not specify an order.
* The covariance uses the log-probs of the policy being trained (the code's ``log_prob``),
  which equal the rollout's on the first minibatch of a step [C].
* DAPO's batch mechanisms (dynamic sampling, soft overlong punishment) and its reference
  KL switch (``kl_coef = 0``) as in ``dapo.py`` [A].

Worked example: ``docs/algorithms/kl_cov.md`` computes one group by hand;
``tests/spec/test_kl_cov.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "kl_cov"

#: Aggregations the loss supports (its loss is per token; L_max-normalisation is Dr. GRPO's).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """KL-Cov hyper-parameters: DAPO's without the clip, plus k and β; from the paper/verl."""

    kl_cov_ratio: contract.Fraction = 2e-4  # k, fraction of the batch's tokens penalised [C]
    kl_cov_coef: contract.Coef = 1.0  # β, weight of |log π_θ − log π_old| on those tokens [C]
    kl_coef: float = 0.0  # β: the KL term is removed (§2.3) [C]
    loss_agg_mode: str = "token-mean"  # token-level policy gradient loss (§3.3, Eq. 12) [C]
    eps: contract.Positive = core.EPS  # in the std denominator (verl's; TRL uses 1e-4) [C]
    dynamic_sampling: bool = True  # keep groups with 0 < #successful < G (§3.2, Eq. 11) [C]
    overlong_shaping: bool = True  # soft overlong punishment added to r (§3.4, Eq. 13) [C]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: the group-normalised outcome reward on every response token."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    # §4.1.2: A_i = (r_i − mean_G r) / (std_G r + eps); one value per completion.
    A_seq = core.group_normalize(batch.rewards, batch.group_size, eps=cfg.eps)
    # Outcome supervision: every token of o_i gets A_i; padding gets exactly 0.
    return core.broadcast_to_tokens(A_seq, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over groups, completions and positions: GRPO's group
    z-score, whose loops the spec writes once (``core.reference_group_zscore``)."""
    return core.reference_group_zscore(batch, cfg.eps)


def kl_cov_mask(
    batch: RolloutBatch, logp: Float[Tensor, "B T"], adv: Float[Tensor, "B T"], cfg: Config
) -> Bool[Tensor, "B T"]:
    """``[B, T]`` bool ``K``: the ``max(1, ⌊k·N⌋)`` response tokens with the largest
    covariance (ties: the earlier token in row-major order), 0 on padding."""
    mask = batch.response_mask
    # cov[i,t] = (A − mean A)(log π_θ − mean log π_θ), over the batch's response tokens.
    cov = core.token_covariance(logp, adv, mask)
    active = torch.nonzero(mask.bool())  # row-major order
    n = core.covariance_selection_count(cfg.kl_cov_ratio, mask)
    order = torch.sort(cov[active[:, 0], active[:, 1]], descending=True, stable=True).indices
    chosen = active[order[:n]]
    selected = torch.zeros_like(mask, dtype=torch.bool)
    selected[chosen[:, 0], chosen[:, 1]] = True
    return selected


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """Unclipped −w·A plus β·|Δ log π| on the top-covariance tokens, aggregated token-mean.

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by KL-Cov (part of the shared signature).
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
    # No clip: −w·A for every token (the penalty below replaces the trust region).
    token_loss = -w * adv
    # K[i,t]: the top-k covariance tokens get β·|log π_θ − log π_old|.
    selected = kl_cov_mask(batch, logp, adv, cfg)
    abs_log_ratio = core.masked(logp - batch.logp_old.float(), mask).abs()
    token_loss = token_loss + cfg.kl_cov_coef * core.masked(abs_log_ratio, selected)

    metrics: dict[str, float] = {
        "cov_selected": float(selected.sum()),
        "cov_selected_frac": float(core.masked_mean(selected.float(), mask)),
    }
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # Off in DAPO (β = 0); kept so the KL can be switched back on: GRPO's Eq. 4 k3 term.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)
    # No clip, so no clipped token: both clip fractions are 0 by construction.
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, 1.0, math.inf))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
