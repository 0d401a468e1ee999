"""The group of the worked examples in ``docs/algorithms/*.md``, as tensors.

Every page works through the same group by hand: ``G = 4`` completions of 2, 4, 3 and 1
tokens, rewards 1, 1, 0, 0, every token sampled with ``p_old = 0.5``, the current policy's
ratios ``w = p_θ/p_old`` below, the reference's ``p_ref`` (0.5, except 0.4 at ``o2``'s first
token), the rollout entropies ``H``, (for TEPO) the current entropies ``H_θ`` and (for
VinePPO) the Monte-Carlo values ``V̂(q, o_<t)`` at the step starts (NaN inside a step). The
``test_worked_example`` of each algorithm builds it here and compares the code with the
numbers printed on its page. Rows are right-padded to ``T = 4``.
"""

from __future__ import annotations

import math

import torch

from refimpl.contract import RolloutBatch

REWARDS = [1.0, 1.0, 0.0, 0.0]
RATIOS = [[1.1, 1.25], [1.0, 1.0, 1.0, 1.0], [0.9, 0.75, 1.0], [1.5]]
ENTROPY = [[1.0, 2.0], [3.0, 2.0, 1.0, 0.5], [0.5, 1.0, 0.5], [2.0]]
ENTROPY_NOW = [[1.0, 1.5], [2.9, 2.0, 1.0, 0.5], [0.3, 1.0, 0.5], [2.0]]
P_REF = [[0.5, 0.5], [0.4, 0.5, 0.5, 0.5], [0.5, 0.5, 0.5], [0.5]]
P_OLD = 0.5
NAN = float("nan")
#: V̂(q, o_<t) of π_old from K = 4 continuations, at the step starts (V̂(q) = 0.5 is one
#: estimate, shared by the group); NaN where the prefix is inside a step.
VALUES = [[0.5, 0.75], [0.5, NAN, 0.25, NAN], [0.5, 0.75, NAN], [0.5]]
T = 4


def rows(values: list[list[float]], fill: float = 0.0) -> torch.Tensor:
    """``[4, T]`` float32 from ragged rows, padded with ``fill``."""
    return torch.tensor([row + [fill] * (T - len(row)) for row in values], dtype=torch.float32)


def batch(ratios: list[list[float]] = RATIOS) -> tuple[RolloutBatch, torch.Tensor]:
    """``(batch, logp)``: the worked example's rollout and the current policy's log-probs
    ``ln(p_old·w)`` (float32, padding 0)."""
    lengths = [len(r) for r in ratios]
    mask = rows([[1.0] * n for n in lengths])
    logp_old = rows([[math.log(P_OLD)] * n for n in lengths])
    logp = rows([[math.log(P_OLD * w) for w in r] for r in ratios])
    b = RolloutBatch(
        response_ids=torch.zeros(4, T, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor(REWARDS),
        logp_old=logp_old,
        entropy_old=rows(ENTROPY),
        group_size=4,
        logp_ref=rows([[math.log(p) for p in r] for r in P_REF]),
        token_values=rows(VALUES).double(),
    )
    return b, logp


def loss_and_grad(mod, cfg, b: RolloutBatch, logp: torch.Tensor, entropy=None):
    """``(loss, ∂loss/∂logp, metrics)`` of ``mod.loss`` with the algorithm's own advantages."""
    adv = mod.advantages(b, cfg)
    lp = logp.clone().requires_grad_(True)
    total, metrics = mod.loss(b, lp, adv, cfg, entropy=entropy)
    total.backward()
    return float(total.detach()), lp.grad, metrics
