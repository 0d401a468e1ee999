"""GSPO: Group Sequence Policy Optimization.

Paper: Zheng et al., "Group Sequence Policy Optimization", arXiv 2507.18071 (v2), §4.
Confidence: [C] throughout (paper; verl's registered ``gspo`` policy loss).

Idea
----
Rewards are given to whole sequences, so importance-correct whole sequences too. GRPO's
per-token ratios are noisy single-sample estimates whose noise accumulates over long answers
(and is what destabilises MoE training); GSPO replaces them with one length-normalised
sequence likelihood ratio per completion and clips that, with a very tight clip range.

Equations
---------
    Advantage (Eq. 6), as GRPO:
        A_i = (r_i − mean_G r) / (std_G r + eps)

    Sequence ratio (Eq. 7), the geometric mean of the token ratios:
        s_i = ( π_θ(o_i | q) / π_old(o_i | q) )^{1/|o_i|}
            = exp( (1/|o_i|) Σ_t (logp − logp_old)[i,t] )

    Per-sequence loss (Eq. 5, negated; no KL):
        ℓ_i = −min( s_i·A_i, clip(s_i, 1−ε_low, 1+ε_high)·A_i ),   ε_low = 3e-4, ε_high = 4e-4

    Aggregation "seq-mean" (Eq. 5's 1/G Σ_i):
        L = mean_i ℓ_i                                    over the B' non-empty completions

    GSPO-token (Eq. 13-14), selected by a token ``loss_agg_mode``:
        s[i,t] = sg[s_i] · π_θ(o_{i,t}) / sg[π_θ(o_{i,t})]
        ℓ[i,t] = −min( s[i,t]·A[i,t], clip(s[i,t], 1−ε_low, 1+ε_high)·A[i,t] )
    s[i,t] has the value of s_i and the gradient ∂s[i,t]/∂logp[i,t] = s_i, so with
    ``seq-mean-token-mean`` and A[i,t] = A_i it equals Eq. 5 in value *and* gradient
    (∂L/∂logp[i,t] = −s_i·A_i / (B'·|o_i|) inside the clip range in both forms).

Relative to GRPO
----------------
The token ratio w[i,t] becomes the sequence ratio s_i (clipped as a whole), the clip range
shrinks from ±0.2 to (3e-4, 4e-4), the aggregation is per sequence, and ``kl_coef`` is 0.
The advantage is GRPO's.

Assumptions
-----------
The sequence form uses A_i = the mean of ``adv`` over the completion's tokens (the advantage
of every GRPO-style advantage function is constant along a completion, so this is A_i
exactly); per-token advantages need the GSPO-token form [C]. When ``kl_coef > 0`` the k3 KL
is averaged per completion and added to ℓ_i (GRPO's Eq. 3/4 form) [A]; GSPO itself has none.

verl 0.9.1's ``compute_policy_loss_gspo`` computes the GSPO-token ratio; its keyword default
is ``loss_agg_mode="seq-mean-token-mean"`` (this file's token form with that mode), while
verl's actor config passes ``token-mean`` unless told otherwise.

Worked example: ``docs/algorithms/gspo.md`` computes one group by hand;
``tests/spec/test_gspo.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "gspo"

#: Aggregations the loss supports: "seq-mean" is Eq. 5, a per-token mode the GSPO-token form.
LOSS_AGG_MODES = ("seq-mean", "seq-mean-token-mean", "token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """GSPO hyper-parameters; defaults from the GSPO paper unless marked."""

    clip_eps_low: contract.ClipLow = 3e-4  # left clip range of s_i (§5.1) [C]
    clip_eps_high: contract.ClipHigh = 4e-4  # right clip range of s_i (§5.1) [C]
    kl_coef: float = 0.0  # β: no KL term (Eq. 5) [C]
    loss_agg_mode: str = "seq-mean"  # Eq. 5: 1/G Σ_i; a token mode selects GSPO-token [C]
    eps: contract.Positive = core.EPS  # in the std denominator (verl's; TRL uses 1e-4) [C]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: the group-normalised outcome reward on every response token."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    # Eq. 6 (= GRPO §4.1.2): A_i = (r_i − mean_G r) / (std_G r + eps), one per completion.
    A_seq = core.group_normalize(batch.rewards, batch.group_size, eps=cfg.eps)
    # Outcome supervision: every token of o_i gets A_i; padding gets exactly 0.
    return core.broadcast_to_tokens(A_seq, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over groups, completions and positions: GRPO's group
    z-score, whose loops the spec writes once (``core.reference_group_zscore``)."""
    return core.reference_group_zscore(batch, cfg.eps)


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """Clipped sequence-ratio surrogate, aggregated seq-mean (Eq. 5), or GSPO-token (Eq. 13).

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration; ``loss_agg_mode="seq-mean"`` is Eq. 5, any token mode
            (``seq-mean-token-mean`` reproduces Eq. 13) is the GSPO-token form.
        entropy: unused by GSPO (part of the shared signature).
    """
    contract.check_config_type(cfg, Config)  # another algorithm's Config: refused
    contract.check_policy_tensor(logp, batch, "logp")
    contract.check_advantages(adv, batch)
    mask = batch.response_mask
    # Loss math in float32 even when the model runs in bf16/fp16.
    logp = logp.float()
    adv = adv.float()

    # Eq. 7: log s_i = (1/|o_i|) Σ_t (logp − logp_old); 0 (s_i = 1) for an empty completion.
    log_s = core.sequence_log_ratio(logp, batch.logp_old, mask)
    sequence_form = cfg.loss_agg_mode == "seq-mean"
    if sequence_form:
        # Eq. 5: one clipped term per completion, s_i against its advantage A_i.
        s = torch.exp(log_s)
        A_seq = core.masked_mean(adv, mask, dim=1)
        seq_loss = -core.clipped_surrogate(s, A_seq, cfg.clip_eps_low, cfg.clip_eps_high)
        w = core.broadcast_to_tokens(s.detach(), mask)  # for the metrics only
    else:
        # Eq. 14: s[i,t] = sg[s_i]·π_θ(o_{i,t})/sg[π_θ(o_{i,t})]: value s_i, gradient through
        # token t alone (the stop-gradients), so per-token advantages can be used.
        w = core.sequence_token_ratio(logp, batch.logp_old, mask)
        token_loss = -core.clipped_surrogate(w, adv, cfg.clip_eps_low, cfg.clip_eps_high)

    metrics: dict[str, float] = {}
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # Not in GSPO; GRPO's Eq. 4 k3 term, added per token with weight β.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        if sequence_form:
            seq_loss = seq_loss + cfg.kl_coef * core.masked_mean(kl, mask, dim=1)
        else:
            token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(seq_loss if sequence_form else token_loss, mask, cfg.loss_agg_mode)
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
