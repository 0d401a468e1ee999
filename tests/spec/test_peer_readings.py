"""Peer readings of GTPO and GRPO-S that are plausible readings of the paper are switches; each
switch reproduces the peer's numbers on a small hand batch.

The peers' computations are re-implemented here in plain numpy from the descriptions in
``docs/fidelity.md`` ("Peer readings of GTPO and GRPO-S"), independently of our code:

* a verl fork's GTPO estimator: Eq. 3/5 per prompt group and position, success = score > 0,
  ``H/(ΣH + ε)`` and ``(1/(H + ε))/(Σ 1/(H + ε) + ε)``; then ``masked_whiten`` of all correct
  tokens of the batch as one set and all incorrect tokens as another (unbiased variance,
  ``(x − mean)/√(var + 1e-8)``) → our ``gtpo.Config(stats="batch")``;
* the same fork's GRPO-S estimator: the sequence analogues, then one z-score of the shaped
  rewards over each group (``torch.std``, unbiased; ``/(std + ε)``) →
  ``grpo_s.Config(stats="joint")``;
* textpolicy's GTPO transform on a batch of one prompt: Eq. 3/5 over the batch, success =
  reward > 0.5, each sign normalised over the batch with the *population* variance,
  ``(x − mean)/√(var + ε)`` → our ``stats="subgroup"`` times ``√(L/(L − 1))``, ``L`` the
  size of the sign's set (the one difference left without a switch: the std convention).

The small ``ε`` of each side differ (1e-6/1e-8 against our eps_H = eps = 1e-6), hence rtol
1e-4 and atol 1e-5 (a token at its set's mean is 0 on one side and ~1e-6 on the other).
"""

from __future__ import annotations

import numpy as np
import torch

from refimpl import algorithms
from refimpl.contract import RolloutBatch

EPS = 1e-6

# Two groups of G = 4, ragged lengths (T = 3), binary rewards, entropies of ordinary size.
G = 4
LENGTHS = [3, 2, 3, 1, 2, 3, 3, 1]
REWARDS = [1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0]
ENTROPY = [
    [0.5, 1.0, 2.0],
    [1.5, 0.3, 0.0],
    [0.2, 0.8, 1.1],
    [0.9, 0.0, 0.0],
    [1.2, 0.4, 0.0],
    [0.6, 1.4, 0.7],
    [0.3, 2.2, 0.5],
    [1.7, 0.0, 0.0],
]


def _batch(group_size: int = G) -> RolloutBatch:
    B, T = len(LENGTHS), 3
    mask = (torch.arange(T)[None, :] < torch.tensor(LENGTHS)[:, None]).float()
    entropy = torch.tensor(ENTROPY) * mask
    return RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor(REWARDS),
        logp_old=-0.5 * mask,
        entropy_old=entropy,
        group_size=group_size,
    )


def _np(batch: RolloutBatch):
    m = batch.response_mask.numpy().astype(bool)
    return m, batch.entropy_old.numpy().astype(np.float64), batch.rewards.numpy()


def _shape_tokens(m, H, success, a1, a2, eps, plus_eps_in_sum):
    """Eq. 3 / Eq. 5 on one set of rows (a group, or textpolicy's whole batch)."""
    r = np.zeros_like(H)
    for t in range(H.shape[1]):
        plus = m[:, t] & success
        minus = m[:, t] & ~success
        d_t, h_t = plus.sum(), minus.sum()
        sum_h = H[plus, t].sum()
        inv = 1.0 / (H[:, t] + eps)
        sum_inv = inv[minus].sum()
        for i in range(H.shape[0]):
            if plus[i]:
                denom = sum_h + eps if plus_eps_in_sum else max(sum_h, eps)
                r[i, t] = a1 * 1.0 + a2 * H[i, t] / denom * d_t
            elif minus[i]:
                denom = sum_inv + eps if plus_eps_in_sum else max(sum_inv, eps)
                r[i, t] = -a1 - a2 * inv[i] / denom * h_t
    return r


def verl_fork_gtpo(batch: RolloutBatch, a1=1.0, a2=0.1, eps=EPS) -> np.ndarray:
    m, H, rewards = _np(batch)
    success = rewards > 0
    r = np.zeros_like(H)
    for g in range(len(rewards) // G):
        rows = slice(g * G, g * G + G)
        r[rows] = _shape_tokens(m[rows], H[rows], success[rows], a1, a2, eps, True)
    A = np.zeros_like(H)
    for sign in (success, ~success):
        S = m & sign[:, None]
        x = r[S]
        mean = x.mean()
        var = ((x - mean) ** 2).sum() / (len(x) - 1)  # masked_var, unbiased
        A[S] = (x - mean) / np.sqrt(var + 1e-8)  # masked_whiten
    return A


def verl_fork_grpo_s(batch: RolloutBatch, b1=1.0, b2=0.1, eps=EPS) -> np.ndarray:
    m, H, rewards = _np(batch)
    H_seq = (H * m).sum(1) / m.sum(1)
    A = np.zeros_like(H)
    for g in range(len(rewards) // G):
        rows = np.arange(g * G, g * G + G)
        s, h = rewards[rows] > 0, H_seq[rows]
        inv = 1.0 / (h + eps)
        shaped = np.where(
            s,
            b1 + b2 * h / (h * s).sum() * s.sum(),
            -b1 - b2 * inv / (inv * ~s).sum() * (~s).sum(),
        )
        z = (shaped - shaped.mean()) / (shaped.std(ddof=1) + eps)
        A[rows] = z[:, None] * m[rows]
    return A


def textpolicy_gtpo(batch: RolloutBatch, a1=1.0, a2=0.1, eps=1e-8) -> np.ndarray:
    m, H, rewards = _np(batch)
    success = rewards > 0.5
    r = _shape_tokens(m, H, success, a1, a2, eps, False)  # the whole batch as one set of rows
    A = np.zeros_like(H)
    for sign in (success, ~success):
        S = m & sign[:, None]
        x = r[S]
        var = ((x - x.mean()) ** 2).mean()  # population variance
        A[S] = (x - x.mean()) / np.sqrt(var + eps)
    return A


def test_gtpo_batch_scope_reproduces_the_verl_fork():
    batch = _batch()
    ours = algorithms.get("gtpo").advantages(batch, algorithms.get("gtpo").Config(stats="batch"))
    peer = verl_fork_gtpo(batch)
    m = batch.response_mask.bool().numpy()
    np.testing.assert_allclose(ours.numpy()[m], peer[m], rtol=1e-4, atol=1e-5)
    # The scope matters: per-group statistics give different numbers on this batch.
    group = algorithms.get("gtpo").advantages(
        batch, algorithms.get("gtpo").Config(stats="subgroup")
    )
    assert np.abs(group.numpy()[m] - peer[m]).max() > 1e-2


def test_grpo_s_joint_reproduces_the_verl_fork():
    batch = _batch()
    mod = algorithms.get("grpo_s")
    ours = mod.advantages(batch, mod.Config(stats="joint"))
    peer = verl_fork_grpo_s(batch)
    m = batch.response_mask.bool().numpy()
    np.testing.assert_allclose(ours.numpy()[m], peer[m], rtol=1e-4, atol=1e-5)
    other = mod.advantages(batch, mod.Config(stats="group"))
    assert np.abs(other.numpy()[m] - peer[m]).max() > 1e-2


def test_textpolicy_is_subgroup_scope_with_the_population_std():
    """One prompt per batch (textpolicy shapes and normalises over the batch it is handed):
    its numbers are ours with stats="subgroup" on a group of all 8 rows, scaled per sign by
    √(L/(L − 1)), the ratio of the unbiased to the population std."""
    batch = _batch(group_size=len(LENGTHS))
    mod = algorithms.get("gtpo")
    ours = mod.advantages(batch, mod.Config(stats="subgroup")).numpy().astype(np.float64)
    same = mod.advantages(batch, mod.Config(stats="batch")).numpy()
    m, _, rewards = _np(batch)
    np.testing.assert_array_equal(ours.astype(np.float32), same)  # one group: batch = subgroup
    peer = textpolicy_gtpo(batch)
    for sign in (rewards > 0.5, rewards <= 0.5):
        S = m & sign[:, None]
        L = S.sum()
        np.testing.assert_allclose(ours[S] * np.sqrt(L / (L - 1)), peer[S], rtol=1e-4, atol=1e-5)


def test_success_threshold_reproduces_textpolicy_strict_split():
    """textpolicy puts a completion in O⁺ when its reward is > 0.5; we when the outcome reward
    is ≥ ``success_threshold`` (0.5). On binary rewards the two agree; a reward of exactly 0.5
    splits differently, and ``success_threshold = 0.5 + 1e-6`` gives textpolicy's split (on
    one prompt, up to the std convention of the test above). Both sides use α₁·r_i in Eq. 3."""
    rewards = [1.0, 0.5, 0.0, 0.5, 1.0, 0.0, 1.0, 0.0]
    batch = _batch(group_size=len(LENGTHS)).replace(rewards=torch.tensor(rewards))
    mod = algorithms.get("gtpo")
    strict = mod.Config(stats="subgroup", success_threshold=0.5 + 1e-6)
    ours = mod.advantages(batch, strict).numpy().astype(np.float64)
    m = batch.response_mask.bool().numpy()
    peer = textpolicy_gtpo(batch)
    success = np.array(rewards) > 0.5
    for sign in (success, ~success):
        S = m & sign[:, None]
        L = S.sum()
        np.testing.assert_allclose(ours[S] * np.sqrt(L / (L - 1)), peer[S], rtol=1e-4, atol=1e-5)
    # The default threshold puts the two 0.5 completions in O⁺: another split, other numbers.
    default = mod.advantages(batch, mod.Config(stats="subgroup")).numpy()
    assert np.abs(default[m] - peer[m]).max() > 1e-2
