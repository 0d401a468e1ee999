"""Measurements that explain a run: the covariance that drives entropy, entropy percentiles.

Neither changes training; the trainer logs both (``entropy_stats``), the plots and notebooks
read them back. pass@k, the evaluation's own measure, is ``refimpl.evaluate``'s.

Entropy covariance (Cui et al., "The Entropy Mechanism of RL for Reasoning LMs", arXiv 2505.22617)
----------------------------------------------------------------------------------------------------
For a softmax policy ``π(a|s) ∝ exp(z_{s,a})`` updated by a policy-gradient step, the first-order
change of the entropy at state ``s`` is (their Lemma 1 and Theorem 1, in our notation)

    H(π_{k+1}|s) − H(π_k|s) ≈ −Cov_{a∼π_k}( log π_k(a|s),  z_{k+1,s,a} − z_{k,s,a} )

and a policy-gradient step moves the logit of an action by ``η·π(a|s)·A(s,a)`` (vanilla) or
``η·A(s,a)`` (natural gradient). So entropy falls when actions that are already likely get
positive advantage, and rises when unlikely actions do. The batch estimator logged here is the
token-level one of their Clip-Cov/KL-Cov code: over the response tokens of a batch,

    cov = mean_{i,t} ( logp[i,t] − mean logp ) · ( A[i,t] − mean A )

with ``logp`` the log-probability of the sampled token under the rollout policy and ``A`` the
advantage it is trained with. A positive ``cov`` predicts falling entropy.
"""

from __future__ import annotations

import torch
from torch import Tensor

from refimpl.contract import require
from refimpl.core import masked_mean


def logp_advantage_covariance(logp: Tensor, adv: Tensor, mask: Tensor) -> float:
    """Token-level ``Cov(logp, A)`` over the response tokens of a batch (Cui et al.).

    ``mean_{i,t} (logp − mean logp)(A − mean A)`` over the tokens where ``mask`` is 1; the means
    are over the same tokens. 0 when the batch has no response token.
    """
    require(
        logp.shape == adv.shape == mask.shape,
        "logp, adv, mask",
        f"equal shapes, got {list(logp.shape)}, {list(adv.shape)}, {list(mask.shape)}",
    )
    logp = logp.detach().double()
    adv = adv.detach().double()
    centred_logp = logp - masked_mean(logp, mask)
    centred_adv = adv - masked_mean(adv, mask)
    return float(masked_mean(centred_logp * centred_adv, mask))


def entropy_stats(entropies: Tensor, prefix: str) -> dict[str, float]:
    """Mean and 10/50/90th percentiles of a flat tensor of token entropies."""
    h = entropies.detach().float().cpu()
    if h.numel() == 0:
        return {
            f"{prefix}_mean": 0.0,
            f"{prefix}_p10": 0.0,
            f"{prefix}_p50": 0.0,
            f"{prefix}_p90": 0.0,
        }
    q = torch.quantile(h, torch.tensor([0.1, 0.5, 0.9]))
    return {
        f"{prefix}_mean": float(h.mean()),
        f"{prefix}_p10": float(q[0]),
        f"{prefix}_p50": float(q[1]),
        f"{prefix}_p90": float(q[2]),
    }


def step_metrics(samples, batch, rewards: Tensor, outcome: Tensor, adv: Tensor, algo_cfg) -> dict:
    """What an RL step trained on (the Trainer logs it): rewards, the outcome's success rate
    (``algo_cfg.success_threshold``), entropies, lengths, advantages."""
    mask = batch.response_mask.bool()
    return {
        "reward_mean": float(rewards.mean()),
        "success_rate": float((outcome >= algo_cfg.success_threshold).float().mean()),
        # entropy_* (from rollout) covers every sampled completion: the policy's entropy,
        # comparable across algorithms. The trained groups alone (after dynamic sampling
        # kept the informative ones) are biased towards uncertain prompts:
        **entropy_stats(samples.entropy_old[samples.response_mask.bool()], "entropy_trained"),
        "length_mean": float(samples.response_mask.sum(1).float().mean()),
        "truncated_frac": float(samples.truncated.float().mean()),
        "adv_token_mean": float(adv[mask].mean()) if mask.any() else 0.0,
        "adv_token_std": float(adv[mask].std()) if mask.sum() > 1 else 0.0,
        "adv_token_abs_max": float(adv[mask].abs().max()) if mask.any() else 0.0,
    }
