"""The entropy bonus's own invariants (DAPO plus −β_H·H_θ on every response token). One
invariant per test; the expected values are computed here in float64 from the definition."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given

from refimpl.algorithms import dapo, entropy_bonus
from tests.spec import worked
from tests.spec.strategies import batch_and_policy

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


@given(x=batch_and_policy())
def test_loss_is_dapo_minus_beta_times_mean_entropy(x):
    """L = L_DAPO − β_H·Σ m·H_θ / Σ m (token-mean), and ∂L/∂logp is DAPO's exactly: the bonus
    reaches the policy only through H_θ."""
    batch, logp, entropy = x
    cfg = entropy_bonus.Config()
    adv = dapo.advantages(batch, dapo.Config())
    a = logp.clone().requires_grad_(True)
    b = logp.clone().requires_grad_(True)
    la, _ = entropy_bonus.loss(batch, a, adv, cfg, entropy=entropy)
    lb, _ = dapo.loss(batch, b, adv, dapo.Config())
    la.backward()
    lb.backward()
    m = batch.response_mask.bool()
    n = max(int(m.sum()), 1)
    mean_h = float(torch.where(m, entropy.double(), 0.0).sum()) / n
    assert float(la.detach()) == pytest.approx(float(lb.detach()) - 1e-3 * mean_h, abs=1e-6)
    assert torch.equal(a.grad, b.grad)


@given(x=batch_and_policy())
def test_entropy_gradient_is_minus_beta_over_n(x):
    """∂L/∂H_θ[i,t] = −β_H / Σ m on every response token and 0 on padding (even when the
    padding of H_θ holds NaN): descending L raises every token's entropy at the same rate."""
    batch, logp, entropy = x
    cfg = entropy_bonus.Config()
    adv = dapo.advantages(batch, dapo.Config())
    m = batch.response_mask.bool()
    H = torch.where(m, entropy, float("nan")).requires_grad_(True)
    entropy_bonus.loss(batch, logp, adv, cfg, entropy=H)[0].backward()
    n = max(int(m.sum()), 1)
    expected = torch.where(m, torch.tensor(-1e-3 / n), torch.tensor(0.0))
    torch.testing.assert_close(H.grad, expected, rtol=1e-6, atol=0)


def test_descending_the_bonus_raises_a_real_entropy():
    """End to end on a softmax policy: with zero advantages only the bonus acts, and one
    gradient step on the logits raises the entropy of every position (a sign slip, +β_H·H,
    would lower it)."""
    gen = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(2, 3, 5, generator=gen)).requires_grad_(True)
    batch, _ = worked.batch()
    batch = batch.replace(
        response_mask=torch.ones(2, 3),
        response_ids=torch.zeros(2, 3, dtype=torch.long),
        rewards=torch.tensor([1.0, 1.0]),
        logp_old=torch.full((2, 3), -1.0),
        entropy_old=torch.ones(2, 3),
        group_size=2,
        logp_ref=None,
        token_values=None,  # the worked batch's values are for its own 4 × 4 shape
    )

    def entropy_of(z):
        logq = torch.log_softmax(z, dim=-1)
        return -(logq.exp() * logq).sum(-1)

    before = entropy_of(logits).detach()
    logp = torch.log_softmax(logits, dim=-1)[..., 0]
    total, _ = entropy_bonus.loss(
        batch, logp, torch.zeros(2, 3), entropy_bonus.Config(), entropy=entropy_of(logits)
    )
    total.backward()
    with torch.no_grad():
        after = entropy_of(logits - 100.0 * logits.grad)
    assert bool((after > before).all())


def test_beta_zero_is_dapo_and_needs_no_entropy():
    """β_H = 0: the loss and gradient are DAPO's and no entropy is needed."""
    batch, logp = worked.batch()
    cfg = dataclasses.replace(entropy_bonus.Config(), entropy_coef=0.0)
    l1, g1, _ = worked.loss_and_grad(entropy_bonus, cfg, batch, logp)
    l2, g2, _ = worked.loss_and_grad(dapo, dapo.Config(), batch, logp)
    assert l1 == l2 and torch.equal(g1, g2)


def test_requires_the_current_entropy():
    """β_H > 0 without a current entropy is a ValueError naming ``entropy``."""
    batch, logp = worked.batch()
    cfg = entropy_bonus.Config()
    with pytest.raises(ValueError, match="entropy"):
        entropy_bonus.loss(batch, logp, entropy_bonus.advantages(batch, cfg), cfg)


def test_trainers_pass_the_entropy_with_gradient_only_for_the_bonus():
    """``Config.differentiates_entropy()``: true for the entropy bonus (β_H > 0), false for every
    other algorithm and for β_H = 0, so TEPO's mask keeps a detached H_θ."""
    from refimpl import algorithms

    for name in algorithms.NAMES:
        cfg = algorithms.get(name).Config()
        assert cfg.differentiates_entropy() is (name == "entropy_bonus")
    off = dataclasses.replace(entropy_bonus.Config(), entropy_coef=0.0)
    assert not off.differentiates_entropy()


def test_default_coefficient():
    """β_H = 1e-3 (the middle of Cui et al.'s entropy-loss coefficients), on DAPO's settings."""
    cfg = entropy_bonus.Config()
    assert cfg.entropy_coef == 1e-3
    assert (cfg.clip_eps_high, cfg.loss_agg_mode) == (0.28, "token-mean")


@pytest.mark.parametrize("value", [-1e-3, float("inf"), float("nan")])
def test_config_rejects_bad_values(value):
    """Config validation: a negative or non-finite β_H raises a ValueError naming `entropy_coef`."""
    with pytest.raises(ValueError, match="entropy_coef"):
        entropy_bonus.Config(entropy_coef=value)


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/entropy_bonus.md``."""
    batch, logp = worked.batch()
    cfg = entropy_bonus.Config()
    H = worked.rows(worked.ENTROPY_NOW).requires_grad_(True)
    total, grad, metrics = worked.loss_and_grad(entropy_bonus, cfg, batch, logp, entropy=H)
    assert metrics["entropy_current"] == pytest.approx(1.27, abs=1e-6)
    assert total == pytest.approx(-0.187466, abs=1e-5)
    expected = worked.rows(
        [
            [-0.095263, -0.108253],
            [-0.086603] * 4,
            [0.077942, 0.0, 0.086603],
            [0.129904],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(
        H.grad, worked.rows([[-1e-4] * 2, [-1e-4] * 4, [-1e-4] * 3, [-1e-4]])
    )
