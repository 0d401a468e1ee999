"""Measurements that explain a run: pass@k and the covariance that drives entropy.

Neither changes training; the trainer logs both (and the entropy percentiles of
``entropy_stats``), the plots and notebooks read them back.

pass@k (Chen et al., "Evaluating Large Language Models Trained on Code", arXiv 2107.03374)
--------------------------------------------------------------------------------------------
Draw ``n`` completions of a problem, ``c`` of them correct. The probability that at least one
of ``k`` completions drawn *without replacement* from those ``n`` is correct is

    pass@k = 1 − C(n−c, k) / C(n, k)                                    (Chen et al., Eq. 1)

an unbiased estimator of the probability that ``k`` fresh samples contain a right answer.
``pass@1`` is the mean success of one sample; large ``k`` measures how much of the problem set
the policy can reach at all. RL that only *sharpens* the policy raises pass@1 and can lower
pass@k for large ``k`` (Yue et al., arXiv 2504.13837): the curve of pass@k against ``k``
flattens.

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

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from refimpl.core import masked_mean, require

#: The k of every pass@k the trainer logs (the evaluation draws at least max(K) samples).
PASS_AT_K: tuple[int, ...] = (1, 2, 4, 8, 16)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al., Eq. 1).

    ``1 − C(n−c, k)/C(n, k)``, computed as ``1 − Π_{j=n−c+1}^{n} (1 − k/j)``, the product form
    that never builds a large binomial coefficient. Requires ``0 ≤ c ≤ n`` and ``1 ≤ k ≤ n``.
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        require(
            isinstance(value, int) and not isinstance(value, bool),
            name,
            f"an int, got {value!r}",
        )
    require(n >= 1, "n", f"at least one sample, got {n}")
    require(0 <= c <= n, "c", f"a count in [0, n={n}], got {c}")
    require(1 <= k <= n, "k", f"1 ≤ k ≤ n={n} (pass@k needs at least k samples), got {k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    # C(n−c, k)/C(n, k) = Π_{j=n−c+1}^{n} (j − k)/j
    miss = 1.0
    for j in range(n - c + 1, n + 1):
        miss *= 1.0 - k / j
    return 1.0 - miss


def mean_pass_at_k(
    correct_counts: Sequence[int], n: int, ks: Sequence[int] = PASS_AT_K
) -> dict[int, float]:
    """Mean pass@k over problems, each with ``n`` samples and ``correct_counts[p]`` correct."""
    require(len(correct_counts) > 0, "correct_counts", "at least one problem")
    return {
        k: math.fsum(pass_at_k(n, int(c), k) for c in correct_counts) / len(correct_counts)
        for k in ks
    }


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
