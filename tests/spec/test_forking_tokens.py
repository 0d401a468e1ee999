"""Forking-token training's own invariants (Wang et al., arXiv 2506.01939). One invariant
per test; the entropy threshold is recomputed here from its definition (a quantile with
linear interpolation, in float64), independently of ``torch.quantile``."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl.algorithms import dapo, forking_tokens
from tests.spec import worked
from tests.spec.strategies import batch_and_policy

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (position
    q·(n − 1) in the sorted list)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


@given(x=batch_and_policy(), rho=st.sampled_from([0.05, 0.2, 0.5, 1.0]))
def test_mask_is_the_top_rho_entropy_tokens_of_the_batch(x, rho):
    """F[i,t] = 1 exactly on the response tokens whose rollout entropy is ≥ τ_ρ, the
    (1 − ρ)-quantile of the batch's response-token entropies (0 on padding; all response
    tokens when ρ = 1). The order statistics at and above position (1 − ρ)(N − 1) are ≥ τ_ρ,
    so at least ρ·(N − 1) tokens train; more than ρ·N only through ties at τ_ρ."""
    batch, _, _ = x
    m = batch.response_mask.bool()
    F = forking_tokens.forking_mask(batch.entropy_old, batch.response_mask, rho)
    assert bool((F[~m] == 0).all())
    H = batch.entropy_old[m].double().tolist()
    if not H:
        assert not bool(F.any())
        return
    tau = _quantile(H, 1.0 - rho)
    h = batch.entropy_old.double()
    tol = 1e-6 * max(1.0, abs(tau))
    clear = m & ((h - tau).abs() > tol)  # tokens not within rounding of τ_ρ
    assert torch.equal(F.bool()[clear], (h >= tau)[clear])
    assert float(F.sum()) >= math.floor(rho * (len(H) - 1))
    if rho == 1.0:
        assert torch.equal(F.bool(), m)


@given(x=batch_and_policy(max_log_ratio=0.5))
def test_rho_one_is_dapo(x):
    """With ρ = 1 every response token trains: loss and gradient are DAPO's, bit for bit."""
    batch, logp, _ = x
    cfg = dataclasses.replace(forking_tokens.Config(), top_entropy_frac=1.0)
    adv = dapo.advantages(batch, dapo.Config())
    a = logp.clone().requires_grad_(True)
    b = logp.clone().requires_grad_(True)
    la, _ = forking_tokens.loss(batch, a, adv, cfg)
    lb, _ = dapo.loss(batch, b, adv, dapo.Config())
    la.backward()
    lb.backward()
    assert torch.equal(la.detach(), lb.detach())
    assert torch.equal(a.grad, b.grad)


@given(x=batch_and_policy(max_log_ratio=0.5))
def test_only_forking_tokens_train_with_dapo_weight(x):
    """The gradient is DAPO's on the forking tokens (the normaliser is Σm over *all* response
    tokens, not the forking count: no 1/ρ rescaling) and exactly 0 on the others."""
    batch, logp, _ = x
    cfg = forking_tokens.Config()
    adv = dapo.advantages(batch, dapo.Config())
    F = forking_tokens.forking_mask(batch.entropy_old, batch.response_mask, 0.2).bool()
    a = logp.clone().requires_grad_(True)
    b = logp.clone().requires_grad_(True)
    forking_tokens.loss(batch, a, adv, cfg)[0].backward()
    dapo.loss(batch, b, adv, dapo.Config())[0].backward()
    torch.testing.assert_close(a.grad[F], b.grad[F], rtol=1e-6, atol=0)
    assert bool((a.grad[~F] == 0).all())


def test_reads_the_rollout_entropy_not_the_current_one():
    """The mask comes from ``batch.entropy_old``: passing any current entropy changes nothing;
    changing the rollout entropy moves the mask."""
    batch, logp = worked.batch()
    cfg = forking_tokens.Config()
    l1, g1, _ = worked.loss_and_grad(forking_tokens, cfg, batch, logp)
    l2, g2, _ = worked.loss_and_grad(
        forking_tokens, cfg, batch, logp, entropy=torch.rand(batch.response_mask.shape)
    )
    assert l1 == l2 and torch.equal(g1, g2)
    flipped = batch.replace(entropy_old=3.5 - batch.entropy_old)
    l3, _, _ = worked.loss_and_grad(forking_tokens, cfg, flipped, logp)
    assert l3 != l1


def test_paper_default():
    """ρ = 0.2 (the paper's "20 %"), on DAPO's settings."""
    cfg = forking_tokens.Config()
    assert cfg.top_entropy_frac == 0.2
    d = dapo.Config()
    assert (cfg.clip_eps_low, cfg.clip_eps_high, cfg.loss_agg_mode, cfg.dynamic_sampling) == (
        d.clip_eps_low,
        d.clip_eps_high,
        d.loss_agg_mode,
        d.dynamic_sampling,
    )


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5])
def test_config_rejects_bad_values(value):
    """Config validation: ρ outside (0, 1] raises a ValueError naming `top_entropy_frac`."""
    with pytest.raises(ValueError, match="top_entropy_frac"):
        forking_tokens.Config(top_entropy_frac=value)


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/forking_tokens.md``."""
    batch, logp = worked.batch()
    cfg = forking_tokens.Config()
    F = forking_tokens.forking_mask(batch.entropy_old, batch.response_mask, 0.2)
    # Sorted entropies 0.5 0.5 0.5 1 1 1 2 2 2 3: position 0.8·9 = 7.2 → τ = 2 (a tie).
    expected = worked.rows([[0.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0]])
    assert torch.equal(F, expected)
    total, grad, metrics = worked.loss_and_grad(forking_tokens, cfg, batch, logp)
    assert metrics["forking_frac"] == pytest.approx(0.4)
    assert total == pytest.approx(-0.151554, abs=1e-5)
    expected = worked.rows(
        [
            [0.0, -0.108253],
            [-0.086603, -0.086603, 0.0, 0.0],
            [0.0, 0.0, 0.0],
            [0.129904],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)
