"""GSPO's own invariants (arXiv 2507.18071; docs/algorithms/gspo.md)."""

from __future__ import annotations

import dataclasses
import math
import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl import core
from refimpl.algorithms import gspo
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import batch_and_policy

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _loss_and_grad(batch, logp, adv, cfg):
    logp = logp.clone().requires_grad_(True)
    total, metrics = gspo.loss(batch, logp, adv, cfg)
    total.backward()
    return total, logp.grad


def _shuffle_response_tokens(x: torch.Tensor, mask: torch.Tensor, seed: int) -> torch.Tensor:
    """Permute each row's response positions among themselves (prefix masks)."""
    gen = torch.Generator().manual_seed(seed)
    out = x.clone()
    for i, n in enumerate(mask.sum(1).long().tolist()):
        out[i, :n] = x[i, :n][torch.randperm(n, generator=gen)]
    return out


@given(x=batch_and_policy(max_log_ratio=1e-3), seed=st.integers(0, 1000))
def test_sequence_ratio_independent_of_token_order(x, seed):
    """``s_i = exp((1/|o_i|) Σ_t (logp − logp_old))`` (Eq. 7) is a mean over the tokens of
    ``o_i``: shuffling which position holds which (logp, logp_old) pair inside a completion
    changes neither ``s_i`` nor the loss (up to summation-order rounding)."""
    batch, logp, _ = x
    m = batch.response_mask
    cfg = gspo.Config()
    adv = gspo.advantages(batch, cfg)
    joint = torch.stack([logp, batch.logp_old], dim=-1)
    shuffled = torch.stack(
        [_shuffle_response_tokens(joint[..., k], m, seed) for k in (0, 1)], dim=-1
    )
    s1 = core.sequence_log_ratio(logp, batch.logp_old, m)
    s2 = core.sequence_log_ratio(shuffled[..., 0], shuffled[..., 1], m)
    torch.testing.assert_close(s2, s1, rtol=1e-5, atol=1e-6)
    l1 = gspo.loss(batch, logp, adv, cfg)[0]
    l2 = gspo.loss(batch.replace(logp_old=shuffled[..., 1]), shuffled[..., 0], adv, cfg)[0]
    torch.testing.assert_close(l2, l1, rtol=1e-5, atol=1e-6)


@given(x=batch_and_policy(max_log_ratio=1e-3))
def test_gspo_token_form_same_value_and_gradient(x):
    """GSPO-token (Eq. 13-14), ``s[i,t] = sg[s_i]·π_θ(o_{i,t})/sg[π_θ(o_{i,t})]``, has the
    value ``s_i`` at every token, so with a per-sequence advantage and ``seq-mean-token-mean``
    it gives the same loss as Eq. 5; its gradient ``∂s[i,t]/∂logp[i,t] = s_i`` times the
    weight ``1/(B'|o_i|)`` equals Eq. 5's ``s_i/|o_i| · 1/B'``, and the clip decision (made on
    the same value) agrees, so the gradients are equal too."""
    batch, logp, _ = x
    cfg = gspo.Config()
    token_cfg = dataclasses.replace(cfg, loss_agg_mode="seq-mean-token-mean")
    adv = gspo.advantages(batch, cfg)
    l1, g1 = _loss_and_grad(batch, logp, adv, cfg)
    l2, g2 = _loss_and_grad(batch, logp, adv, token_cfg)
    torch.testing.assert_close(l2, l1, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(g2, g1, rtol=1e-4, atol=1e-7)


@given(x=batch_and_policy(max_log_ratio=1e-3))
def test_clip_acts_on_whole_sequences(x):
    """Clipping is per sequence (Eq. 5): the gradient of a completion with ``A_i > 0`` is 0 on
    *all* its tokens once ``s_i > 1+ε_high``, and on none of them otherwise (likewise
    ``A_i < 0`` with ``s_i < 1−ε_low``); the tokens of one completion are never split."""
    batch, logp, _ = x
    cfg = gspo.Config()
    adv = gspo.advantages(batch, cfg)
    _, grad = _loss_and_grad(batch, logp, adv, cfg)
    s = torch.exp(core.sequence_log_ratio(logp, batch.logp_old, batch.response_mask))
    A = adv[:, 0]
    for i in range(batch.batch_size):
        n = int(batch.lengths[i])
        if n == 0 or A[i] == 0:
            continue
        clipped = (A[i] > 0 and s[i] > 1 + cfg.clip_eps_high) or (
            A[i] < 0 and s[i] < 1 - cfg.clip_eps_low
        )
        row = grad[i, :n]
        assert bool((row == 0).all()) if clipped else bool((row != 0).all())


@given(x=batch_and_policy())
def test_advantage_is_the_group_zscore(x):
    """GSPO's advantage is GRPO's (Eq. 6): the z-score of r_i within its group, unbiased std,
    eps = 1e-6, on every response token (computed with ``statistics``, independently)."""
    batch = x[0]
    cfg = gspo.Config()
    assert cfg.eps == 1e-6
    adv = gspo.advantages(batch, cfg)
    G, r = batch.group_size, batch.rewards.tolist()
    for g in range(batch.num_groups):
        group = r[g * G : (g + 1) * G]
        for i in range(g * G, (g + 1) * G):
            if max(group) == min(group):
                expected = 0.0
            else:
                expected = (r[i] - statistics.mean(group)) / (statistics.stdev(group) + 1e-6)
            row = adv[i][batch.response_mask[i].bool()]
            assert torch.allclose(row.double(), torch.tensor(expected).double(), atol=1e-5)


@given(x=batch_and_policy(max_log_ratio=1e-3, logp_regime="very_negative"))
def test_gspo_token_form_exact_at_large_logp(x):
    """At |logp| ≈ 45 both forms equal Eq. 5 computed in float64 from the same inputs, to
    float32 rounding of the loss terms (4e-7 of their mean size |A_i|·s_i; the terms nearly
    cancel across a group, so the loss itself is ~1e-4 and a relative tolerance would be
    meaningless). The GSPO-token ratio's value is exactly s_i (``core.sequence_token_ratio``).
    Evaluated as ``log s_i + logp − logp``, its exponent picked up float32's 3.8e-6 spacing
    at 45 and the loss moved by ~1e-6 of the term size: the 4.6 % gap between the two forms in
    the counterexample the thorough hypothesis profile found."""
    batch, logp, _ = x
    cfg = gspo.Config()
    token_cfg = dataclasses.replace(cfg, loss_agg_mode="seq-mean-token-mean")
    adv = gspo.advantages(batch, cfg)
    m = batch.response_mask.bool()
    n = m.sum(1)
    rows = n > 0
    if not bool(rows.any()):
        return
    delta = torch.where(m, logp.double() - batch.logp_old.double(), 0.0)
    s_i = torch.exp(delta.sum(1)[rows] / n[rows])
    A_i = torch.where(m, adv.double(), 0.0).sum(1)[rows] / n[rows]
    lo, hi = 1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high
    terms = -torch.minimum(s_i * A_i, s_i.clamp(lo, hi) * A_i)
    expected = float(terms.mean())
    scale = float((A_i.abs() * s_i).mean())
    for c in (cfg, token_cfg):
        total, _ = _loss_and_grad(batch, logp, adv, c)
        assert abs(float(total.detach()) - expected) <= 4e-7 * scale + 1e-12, c.loss_agg_mode


def test_hand_computed_group():
    """One group of two, rewards [1, 0] → A = ±0.5/√0.5 = ±0.707107.

    Row 0: two tokens, log-ratios [5e-4, 1.5e-3] → log s_0 = 1e-3, s_0 = 1.0010005 > 1 + 4e-4,
    A > 0 → clipped term (1.0004)·0.707107 = 0.707390.
    Row 1: one token, log-ratio 1e-3 → s_1 = 1.0010005, A < 0 → min(s·A, clip(s)·A) = s·A
    = −0.707814 (a high ratio is not clipped for a negative advantage).
    seq-mean loss = −(0.707390 − 0.707814)/2 = +0.000212.
    """
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    batch = RolloutBatch(
        response_ids=torch.zeros(2, 2, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0]),
        logp_old=torch.full((2, 2), -1.0),
        entropy_old=torch.ones(2, 2),
        group_size=2,
    )
    cfg = gspo.Config()
    adv = gspo.advantages(batch, cfg)
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.707107, -0.707107]))
    logp = batch.logp_old + torch.tensor([[5e-4, 1.5e-3], [1e-3, 0.0]])
    total, metrics = gspo.loss(batch, logp, adv, cfg)
    expected = -(1.0004 * 0.7071068 - math.exp(1e-3) * 0.7071068) / 2
    assert expected == pytest.approx(0.000212, abs=1e-6)
    assert total.item() == pytest.approx(expected, abs=2e-6)


@pytest.mark.parametrize("mode", ["seq-mean-token-mean", "token-mean"])
def test_gspo_token_gradient_follows_each_token_s_advantage(mode):
    """GSPO-token (Eq. 13-14) is what a per-token advantage needs: ``∂s[i,t]/∂logp[i,u] =
    s_i·[t = u]`` (the stop-gradients keep ``s_i``'s own ``1/|o_i|`` coupling out), so the
    gradient at token ``u`` carries ``A[i,u]``. The plain sequence ratio ``s_i`` broadcast to
    the tokens (no stop-gradient) has ``∂s_i/∂logp[i,u] = s_i/|o_i|`` for every ``u``: the
    gradient of each token then carries the row's mean advantage. The two agree when ``A`` is
    constant along a completion, as every other test here has it; not here.

    Row 0: two tokens, log-ratios [2e-4, 0] → s_0 = e^(1e-4) (inside the clip), A = [1, 3];
    row 1: one token, log-ratio 0 → s_1 = 1, A = −1. B' = 2 completions, 3 tokens.
    seq-mean-token-mean: ∂L/∂logp[i,u] = −s_i·A[i,u]/(B'·|o_i|) → row 0: −s_0·[1, 3]/4,
    row 1: +1/2. token-mean: −s_i·A[i,u]/3."""
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    batch = RolloutBatch(
        response_ids=torch.zeros(2, 2, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0]),
        logp_old=torch.full((2, 2), -1.0),
        entropy_old=torch.ones(2, 2),
        group_size=2,
    )
    adv = torch.tensor([[1.0, 3.0], [-1.0, 0.0]])
    logp = batch.logp_old + torch.tensor([[2e-4, 0.0], [0.0, 0.0]])
    s0 = math.exp(1e-4)
    _, grad = _loss_and_grad(batch, logp, adv, gspo.Config(loss_agg_mode=mode))
    weight = [[1 / 4, 1 / 4], [1 / 2, 0.0]] if mode == "seq-mean-token-mean" else [[1 / 3] * 2] * 2
    expected = [[-s0 * 1.0 * weight[0][0], -s0 * 3.0 * weight[0][1]], [weight[1][0], 0.0]]
    torch.testing.assert_close(grad, torch.tensor(expected), rtol=1e-5, atol=1e-7)


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/gspo.md``: the ratios there
    move by at most 10⁻³; the loss and gradient of both forms, derived by hand on the page."""
    ratios = [[1.0002, 1.0004], [1.001] * 4, [0.9995, 0.9999, 1.0], [0.999]]
    batch, logp = worked.batch(ratios)
    a = 0.8660254
    for cfg in (gspo.Config(), gspo.Config(loss_agg_mode="seq-mean-token-mean")):
        s = torch.exp(core.sequence_log_ratio(logp, batch.logp_old, batch.response_mask))
        torch.testing.assert_close(
            s, torch.tensor([1.0003, 1.001, 0.99979998, 0.999]), atol=2e-7, rtol=0
        )
        total, grad, metrics = worked.loss_and_grad(gspo, cfg, batch, logp)
        adv = gspo.advantages(batch, cfg)
        torch.testing.assert_close(adv[:, 0], torch.tensor([a, a, -a, -a]), atol=2e-6, rtol=0)
        assert total == pytest.approx(-0.00025981, abs=5e-7)
        expected = worked.rows([[-0.10828565] * 2, [0.0] * 4, [0.07215435] * 3, [0.0]])
        torch.testing.assert_close(grad, expected, atol=1e-6, rtol=0)
