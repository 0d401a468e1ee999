"""KL-Cov's own invariants (Cui et al., arXiv 2505.22617; verl's ``kl_cov`` loss).
One invariant per test; covariances, ranks and the loss are recomputed here in float64,
independently of ``core``."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl import core
from refimpl.algorithms import kl_cov
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import batch_and_policy

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _covariances(batch: RolloutBatch, logp, adv) -> dict:
    """{(i, t): cov} over the response tokens, centred over them, float64 loops."""
    m = batch.response_mask
    cells = [(i, t) for i in range(m.shape[0]) for t in range(m.shape[1]) if m[i, t] == 1]
    if not cells:
        return {}
    mean_a = sum(float(adv[c]) for c in cells) / len(cells)
    mean_lp = sum(float(logp[c]) for c in cells) / len(cells)
    return {c: (float(adv[c]) - mean_a) * (float(logp[c]) - mean_lp) for c in cells}


def _random_adv(batch: RolloutBatch, seed: int) -> torch.Tensor:
    adv = 2 * torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(seed))
    return torch.where(batch.response_mask.bool(), adv, 0.0)


@settings(max_examples=max(60, settings().max_examples))
@given(x=batch_and_policy(), seed=st.integers(0, 2**31 - 1), k=st.sampled_from([2e-4, 0.1, 0.5]))
def test_penalised_tokens_are_the_top_n_by_covariance(x, seed, k):
    """K holds exactly n = max(1, ⌊k·N⌋) response tokens, and every one of them has a
    covariance at least as large as every token outside K (up to float32 rounding)."""
    batch, logp, _ = x
    adv = _random_adv(batch, seed)
    cfg = dataclasses.replace(kl_cov.Config(), kl_cov_ratio=k)
    cov = _covariances(batch, logp, adv)
    K = kl_cov.kl_cov_mask(batch, logp, adv, cfg)
    chosen = {tuple(c) for c in torch.nonzero(K).tolist()}
    assert chosen <= set(cov)
    if not cov:
        assert not chosen
        return
    assert len(chosen) == max(1, math.floor(k * len(cov)))
    rest = set(cov) - chosen
    if rest:
        tol = 1e-5 * max(1.0, max(abs(v) for v in cov.values()))
        assert min(cov[c] for c in chosen) >= max(cov[c] for c in rest) - tol


@given(x=batch_and_policy(max_log_ratio=1.0), seed=st.integers(0, 2**31 - 1))
def test_loss_is_unclipped_surrogate_plus_penalty(x, seed):
    """L = Σ m·(−w·A + β·|logp − logp_old|·K) / Σ m, with no clip however far w is from 1:
    value and gradient −A·w/Σm + β·sign(Δ)·K/Σm, computed here in float64."""
    batch, logp, _ = x
    adv = _random_adv(batch, seed)
    cfg = kl_cov.Config()
    K = kl_cov.kl_cov_mask(batch, logp, adv, cfg).double()
    m = batch.response_mask.double()
    n = max(float(m.sum()), 1.0)
    delta = torch.where(m.bool(), logp.double() - batch.logp_old.double(), 0.0)
    a = adv.double()
    lp = logp.clone().requires_grad_(True)
    total, _ = kl_cov.loss(batch, lp, adv, cfg)
    total.backward()
    expected = float((m * (-a * torch.exp(delta) + cfg.kl_cov_coef * delta.abs() * K)).sum()) / n
    assert float(total.detach()) == pytest.approx(expected, rel=1e-4, abs=1e-5)
    grad = m * (-a * torch.exp(delta) + cfg.kl_cov_coef * torch.sign(delta) * K) / n
    torch.testing.assert_close(lp.grad.double(), grad, rtol=1e-4, atol=1e-6)


def test_no_clip_far_from_the_old_policy():
    """Where DAPO's clip would stop the gradient (A > 0, w = 2), KL-Cov's −w·A still pulls.

    Four one-token rows: A = (1, −1, 0, 0), logp − logp_old = (ln 2, −1, 0, 0), logp_old = −2.
    mean A = 0, mean logp = (−2 + ln 2 − 3 − 2 − 2)/4 = −2.076713; cov = (0.769860, 0.923287,
    0, 0), so K = {row 1}. Gradients (Σm = 4): row 0: −A·w/4 = −0.5 (unclipped);
    row 1: (−A·w + β·sign(Δ))/4 = (e^{−1} − 1)/4 = −0.158030.
    """
    batch = RolloutBatch(
        response_ids=torch.zeros(4, 1, dtype=torch.long),
        response_mask=torch.ones(4, 1),
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        logp_old=torch.full((4, 1), -2.0),
        entropy_old=torch.ones(4, 1),
        group_size=2,
    )
    logp = torch.tensor([[-2.0 + math.log(2.0)], [-3.0], [-2.0], [-2.0]], requires_grad=True)
    adv = torch.tensor([[1.0], [-1.0], [0.0], [0.0]])
    cfg = kl_cov.Config()
    assert kl_cov.kl_cov_mask(batch, logp, adv, cfg).flatten().tolist() == [0, 1, 0, 0]
    kl_cov.loss(batch, logp, adv, cfg)[0].backward()
    assert logp.grad[0, 0].item() == pytest.approx(-0.5, rel=1e-6)
    assert logp.grad[1, 0].item() == pytest.approx((math.exp(-1) - 1) / 4, rel=1e-6)


def test_penalty_vanishes_on_policy():
    """At logp = logp_old the penalty |Δ| is 0 and so is its gradient (sign 0): the loss is
    −Σ m·A / Σ m and the gradient −A/Σm, whatever K holds."""
    batch, _ = worked.batch()
    cfg = kl_cov.Config()
    total, grad, metrics = worked.loss_and_grad(kl_cov, cfg, batch, batch.logp_old)
    adv = kl_cov.advantages(batch, cfg)
    assert metrics["cov_selected"] == 1.0
    assert total == pytest.approx(-float(adv.sum()) / 10, abs=1e-6)
    torch.testing.assert_close(grad, -adv / 10)


def test_toy_scale_penalises_one_token():
    """k = 2e-4 on 4000 response tokens: ⌊0.8⌋ = 0, raised to one token."""
    assert core.covariance_selection_count(kl_cov.Config().kl_cov_ratio, torch.ones(40, 100)) == 1


def test_paper_defaults():
    """k = 2e-4 (verl's default), β = 1 (the paper's); DAPO's token-mean and no reference KL."""
    cfg = kl_cov.Config()
    assert (cfg.kl_cov_ratio, cfg.kl_cov_coef) == (2e-4, 1.0)
    assert (cfg.loss_agg_mode, cfg.kl_coef) == ("token-mean", 0.0)


@pytest.mark.parametrize(
    ("field", "value"), [("kl_cov_ratio", 0.0), ("kl_cov_ratio", 2.0), ("kl_cov_coef", -1.0)]
)
def test_config_rejects_bad_values(field, value):
    """Config validation: k outside (0, 1], a negative β raise a ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        kl_cov.Config(**{field: value})


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/kl_cov.md``."""
    batch, logp = worked.batch()
    cfg = kl_cov.Config()
    adv = kl_cov.advantages(batch, cfg)
    K = kl_cov.kl_cov_mask(batch, logp, adv, cfg)
    assert torch.nonzero(K).tolist() == [[2, 1]]  # o3's second token, cov 0.333353
    total, grad, metrics = worked.loss_and_grad(kl_cov, cfg, batch, logp)
    assert metrics["cov_selected"] == 1.0
    assert total == pytest.approx(-0.161757, abs=1e-5)
    expected = worked.rows(
        [
            [-0.095263, -0.108253],
            [-0.086603] * 4,
            [0.077942, -0.035048, 0.086603],
            [0.129904],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)
    # With k = 0.3: n = 3, K = {o3 t2, o3 t1, o1 t2} (0.333, 0.144, 0.132).
    toy = dataclasses.replace(cfg, kl_cov_ratio=0.3)
    K = kl_cov.kl_cov_mask(batch, logp, adv, toy)
    assert sorted(map(tuple, torch.nonzero(K).tolist())) == [(0, 1), (2, 0), (2, 1)]
    total, _, _ = worked.loss_and_grad(kl_cov, toy, batch, logp)
    assert total == pytest.approx(-0.128907, abs=1e-5)
