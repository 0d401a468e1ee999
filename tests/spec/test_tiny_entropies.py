"""GTPO and GRPO-S with zero, subnormal and tiny rollout entropies, on every switch combination.

A one-hot next-token distribution has entropy exactly 0; a near-one-hot one rounds to a float32
subnormal (down to 2⁻¹⁴⁹ ≈ 1.4e-45). Eq. 3 divides by the entropy (its weight is 1/H), so a
careless implementation returns inf or NaN there (textpolicy's issue #62 reports 1/(0 + eps)
= 1e8 absorbing all the blame). Our entropies are floored, H̃ = H + eps_H, and the bound below
holds whatever the entropies, for every ``entropy_eps > 0`` (down to the smallest float64
subnormal, 5e-324, where 1/H̃ itself overflows).

The bound (``gtpo.py``/``grpo_s.py`` docstrings): every advantage is the z-score of a member
of the set S whose statistics it uses (unbiased std), so by Samuelson's inequality
``|A| ≤ (L − 1)/√L`` with ``L = |S|`` (and ``A = 0`` when ``L < 2``); ``L`` is at most the
number of active tokens (GTPO) or non-empty completions (GRPO-S) in the normalisation scope.
The token rewards themselves stay in ``r⁺ ∈ [α₁·r, α₁·r + α₂·d_t]`` and
``r⁻ ∈ [−α₁ − α₂·h_t, −α₁]`` (GRPO-S: with n, m and β).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl import algorithms, contract, core
from tests.spec.strategies import configs, rollout_batches

SMALL_ENTROPIES = ("zero", "tiny", "subnormal", "mixed")
#: ``entropy_eps`` values: the default, smaller ones, and float64's smallest subnormal.
ENTROPY_EPS = (core.EPS, 1e-12, 1e-300, 5e-324)


def _samuelson(L: torch.Tensor) -> torch.Tensor:
    """``(L − 1)/√L`` for ``L ≥ 2``, 0 otherwise (a set of < 2 values normalises to 0)."""
    L = L.to(torch.float64)
    return torch.where(L >= 2, (L - 1) / L.clamp(min=1).sqrt(), torch.zeros_like(L))


def _scope_sizes(batch, cfg, members: torch.Tensor) -> torch.Tensor:
    """``[B, ...]`` size of the normalisation set of each element: the members (active tokens
    or non-empty completions) of its group, of its own subgroup (``stats="subgroup"``), of its
    own outcome in the whole batch (``"batch"``), or its group's members (``"joint"``)."""
    G = batch.group_size
    success = core.successful(batch, cfg.success_threshold)
    shape = (-1,) + (1,) * (members.dim() - 1)
    success = success.reshape(shape).expand_as(members)
    sizes = torch.zeros(members.shape, dtype=torch.float64)
    if cfg.stats == "batch":
        plus, minus = float((members & success).sum()), float((members & ~success).sum())
        return torch.where(success, plus, minus).to(torch.float64)
    for g in range(batch.num_groups):
        rows = slice(g * G, g * G + G)
        m, s = members[rows], success[rows]
        if cfg.stats == "subgroup":
            sizes[rows] = torch.where(s, (m & s).sum(), (m & ~s).sum()).to(torch.float64)
        else:
            sizes[rows] = float(m.sum())
    return sizes


@given(
    cfg=configs("gtpo"),
    regime=st.sampled_from(SMALL_ENTROPIES),
    entropy_eps=st.sampled_from(ENTROPY_EPS),
    data=st.data(),
)
def test_gtpo_finite_and_bounded_with_zero_and_subnormal_entropies(cfg, regime, entropy_eps, data):
    batch = data.draw(rollout_batches(entropy_regime=regime), label="small-entropy batch")
    cfg = dataclasses.replace(cfg, entropy_eps=entropy_eps)
    mod = algorithms.get("gtpo")
    r_plus, r_minus = mod.token_rewards(batch, cfg)
    A = mod.advantages(batch, cfg)
    active = batch.response_mask.bool()
    assert bool(torch.isfinite(r_plus).all() and torch.isfinite(r_minus).all())
    assert bool(torch.isfinite(A).all())
    # Token reward ranges (Eq. 2 and Eq. 2: the arithmetic entropy weights lie in [0, 1]
    # before the factor d_t / h_t; §2.4.1's geometric weights are positive but unbounded, a
    # token's entropy over the set's geometric mean).
    G = batch.group_size
    success = core.successful(batch, cfg.success_threshold)[:, None] & active
    failed = ~core.successful(batch, cfg.success_threshold)[:, None] & active

    def count_at_t(x):  # [B, T]: how many rows of the group are in ``x`` at position t
        n = core.group_view(x, G).sum(dim=1, keepdim=True).to(torch.float64)
        return n.expand(-1, G, -1).reshape(A.shape)

    d_t, h_t = count_at_t(success), count_at_t(failed)
    r = batch.rewards.to(torch.float64)[:, None].expand_as(r_plus)
    tol = 1e-9 * (1 + r.abs() + d_t + h_t)
    lo_plus = cfg.alpha_1 * r
    hi_plus = cfg.alpha_1 * r + cfg.alpha_2 * d_t
    assert bool((r_plus[success] >= lo_plus[success] - tol[success]).all())
    if cfg.entropy_mean == "arithmetic":
        assert bool((r_plus[success] <= hi_plus[success] + tol[success]).all())
    if cfg.negative_shaping == "paper":
        assert bool((r_minus[failed] <= -cfg.alpha_1 + tol[failed]).all())
        low = -cfg.alpha_1 - cfg.alpha_2 * h_t
        if cfg.entropy_mean == "arithmetic":
            assert bool((r_minus[failed] >= low[failed] - tol[failed]).all())
    # |A| ≤ (L − 1)/√L with L the size of the token's normalisation set.
    bound = _samuelson(_scope_sizes(batch, cfg, active))
    assert bool((A.double().abs() <= bound * (1 + 1e-5) + 1e-6).all())


@given(
    cfg=configs("grpo_s"),
    regime=st.sampled_from(SMALL_ENTROPIES),
    entropy_eps=st.sampled_from(ENTROPY_EPS),
    data=st.data(),
)
def test_grpo_s_finite_and_bounded_with_zero_and_subnormal_entropies(
    cfg, regime, entropy_eps, data
):
    batch = data.draw(rollout_batches(entropy_regime=regime), label="small-entropy batch")
    cfg = dataclasses.replace(cfg, entropy_eps=entropy_eps)
    mod = algorithms.get("grpo_s")
    r_plus, r_minus = mod.sequence_rewards(batch, cfg)
    A = mod.advantages(batch, cfg)
    assert bool(torch.isfinite(r_plus).all() and torch.isfinite(r_minus).all())
    assert bool(torch.isfinite(A).all())
    nonempty = batch.response_mask.sum(dim=1) > 0
    bound = _samuelson(_scope_sizes(batch, cfg, nonempty))
    A_seq = core.masked_mean(A.double(), batch.response_mask, dim=1)
    assert bool((A_seq.abs() <= bound * (1 + 1e-5) + 1e-6).all())


@pytest.mark.parametrize("name", ["gtpo", "grpo_s"])
def test_all_zero_entropies_split_the_bonus_uniformly(name):
    """With every entropy exactly 0 (one-hot rollouts), H̃ = eps_H everywhere: the weights of
    Eq. 2/3 are 1/d_t and 1/h_t, so a group of one success and one failure of one token each,
    α₁ = 1, α₂ = 0.1 (β likewise), gets r⁺ = 1 + 0.1 = 1.1 and r⁻ = −1 − 0.1 = −1.1; over the
    group (stats="group", 2 tokens) each is the z-score of {1.1, 0} or {−1.1, 0}:
    ±(1.1 − 0.55)/(std + eps) with std = 1.1/√2, i.e. ±1/√2 up to eps."""
    batch = contract.RolloutBatch(
        response_ids=torch.zeros(2, 1, dtype=torch.long),
        response_mask=torch.ones(2, 1),
        rewards=torch.tensor([1.0, 0.0]),
        logp_old=torch.full((2, 1), -0.1),
        entropy_old=torch.zeros(2, 1),
        group_size=2,
    )
    mod = algorithms.get(name)
    for eps_h in ENTROPY_EPS:
        cfg = mod.Config(entropy_eps=eps_h)
        A = mod.advantages(batch, cfg)
        expected = 0.55 / (1.1 / math.sqrt(2) + cfg.eps)
        torch.testing.assert_close(
            A, torch.tensor([[expected], [-expected]], dtype=torch.float32), rtol=1e-6, atol=0
        )
