"""DAPO's own invariants (arXiv 2503.14476; docs/algorithms/dapo.md). One invariant per test."""

from __future__ import annotations

import math
import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl import batch_stages, core
from refimpl.algorithms import dapo
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _two_rows(adv: tuple[float, float], log_ratio: float):
    """Two one-token completions (one group) with given advantages, both at ratio e^log_ratio."""
    batch = RolloutBatch(
        response_ids=torch.zeros(2, 1, dtype=torch.long),
        response_mask=torch.ones(2, 1),
        rewards=torch.tensor([1.0, 0.0]),
        logp_old=torch.full((2, 1), -2.0),
        entropy_old=torch.ones(2, 1),
        group_size=2,
    )
    logp = (batch.logp_old + log_ratio).requires_grad_(True)
    return batch, logp, torch.tensor([[adv[0]], [adv[1]]])


@given(
    log_ratio=st.floats(-1.0, 1.0).filter(
        lambda x: abs(math.exp(x) - 1.28) > 1e-3 and abs(math.exp(x) - 0.8) > 1e-3
    )
)
def test_clip_higher_asymmetry(log_ratio):
    """Clip-higher (Eq. 10): for ``A > 0`` the gradient is switched off once ``w > 1+0.28`` and
    flows (= −A·w/Σm) below it, however small ``w`` is; for ``A < 0`` it is switched off once
    ``w < 1−0.2`` and flows above it, however large ``w`` is.

    Derivation: ``min(w·A, clip(w)·A)``. For ``A > 0`` and ``w > 1+ε_h`` the clipped term
    ``(1+ε_h)·A`` is the smaller, a constant; for ``w < 1+ε_h`` the min is ``w·A`` (``clip``
    only raises w below ``1−ε_l``, making ``clip(w)·A`` larger). Mirror image for ``A < 0``.
    """
    cfg = dapo.Config()
    w = math.exp(log_ratio)
    batch, logp, adv = _two_rows((1.0, -1.0), log_ratio)
    total, _ = dapo.loss(batch, logp, adv, cfg)
    total.backward()
    g_pos, g_neg = logp.grad[0, 0].item(), logp.grad[1, 0].item()
    # token-mean over 2 tokens: ∂/∂logp of −w·A/2 is −A·w/2.
    if w > 1 + cfg.clip_eps_high:
        assert g_pos == 0.0
    else:
        assert g_pos == pytest.approx(-w / 2, rel=1e-5)
    if w < 1 - cfg.clip_eps_low:
        assert g_neg == 0.0
    else:
        assert g_neg == pytest.approx(w / 2, rel=1e-5)


def test_clip_bounds_are_decoupled():
    """The default bounds are ε_low = 0.2, ε_high = 0.28 (§3.1): ``1.28`` is the first ratio at
    which a positive-advantage token stops learning, ``0.8`` for a negative one."""
    for log_ratio, expect_zero in ((math.log(1.25), False), (math.log(1.30), True)):
        batch, logp, adv = _two_rows((1.0, -1.0), log_ratio)
        dapo.loss(batch, logp, adv, dapo.Config())[0].backward()
        assert (logp.grad[0, 0].item() == 0.0) is expect_zero
    for log_ratio, expect_zero in ((math.log(0.82), False), (math.log(0.78), True)):
        batch, logp, adv = _two_rows((1.0, -1.0), log_ratio)
        dapo.loss(batch, logp, adv, dapo.Config())[0].backward()
        assert (logp.grad[1, 0].item() == 0.0) is expect_zero


@given(L_max=st.integers(2, 200))
def test_overlong_shaping_continuous_monotone_bounded(L_max):
    """With DAPO's ``overlong_cache_frac`` the soft punishment (Eq. 13) is in [−1, 0],
    non-increasing in |o|, 0 on ``|o| ≤ L_max − L_cache``, −1 beyond ``L_max``, and
    continuous: neighbouring integer lengths differ by at most ``1/L_cache``."""
    cfg = dapo.Config()
    assert cfg.overlong_shaping
    cache = batch_stages.overlong_cache_len(L_max, cfg.overlong_cache_frac)
    p = batch_stages.overlong_penalty(torch.arange(0, L_max + 3), L_max, cache)
    assert bool(((p >= -1) & (p <= 0)).all())
    d = p[1:] - p[:-1]
    assert bool((d <= 0).all()) and bool((d >= -1.0 / cache - 1e-6).all())
    assert bool((p[: L_max - cache + 1] == 0).all()) and bool((p[L_max:] == -1).all())


@given(batch=rollout_batches(binary_rewards=True))
def test_dynamic_sampling_keeps_exactly_mixed_groups(batch):
    """Dynamic sampling (Eq. 11) keeps a group iff ``0 < #successful < G``; every kept group
    then has non-zero advantages somewhere, every dropped group has all-zero advantages."""
    cfg = dapo.Config()
    assert cfg.dynamic_sampling
    G = batch.group_size
    keep = batch_stages.informative_groups(batch.rewards, G, cfg.success_threshold)
    n_success = (batch.rewards >= 0.5).view(-1, G).sum(1)
    assert keep.tolist() == [0 < int(n) < G for n in n_success]
    A = core.group_normalize(batch.rewards, G).view(-1, G)
    assert ((A != 0).any(dim=1)).tolist() == keep.tolist()


def test_dynamic_sampling_counts_successes_not_reward_spread():
    """After overlong shaping an all-wrong group can have different rewards (0 and −0.5);
    the filter still drops it, because it counts successes (Eq. 11), not reward spread."""
    shaped = torch.tensor([0.0, -0.5, 1.0, 0.75])
    assert batch_stages.informative_groups(shaped, 2, dapo.Config().success_threshold).tolist() == [
        False,
        False,
    ]


@given(batch=rollout_batches())
def test_advantage_is_the_group_zscore(batch):
    """DAPO's advantage is GRPO's (Eq. 9): the z-score of r_i within its group with the
    unbiased std and eps = 1e-6, on every response token; computed here with the standard
    library's ``statistics`` (float64), independently of ``core``."""
    cfg = dapo.Config()
    assert cfg.eps == 1e-6
    adv = dapo.advantages(batch, cfg)
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


def test_hand_computed_group():
    """One group of two, rewards [1, 0], lengths 3 and 1.

    mean 0.5, unbiased std = √((0.5² + 0.5²)/1) = √0.5 = 0.707107, A = ±0.5/0.707107 = ±0.707107.
    On policy (w = 1) the token-mean loss is −Σ m·A/Σm = −(3·0.707107 − 0.707107)/4
    = −0.353553 (a GRPO seq-mean-token-mean would give −(0.707107 − 0.707107)/2 = 0: the
    long correct answer counts three times here).
    With ratio 1.5 on the three tokens of row 0 (A > 0, clipped at 1.28):
    −(3·1.28·0.707107 − 0.707107)/4 = −(2.715290 − 0.707107)/4 = −0.502046.
    """
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    batch = RolloutBatch(
        response_ids=torch.zeros(2, 3, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0]),
        logp_old=torch.full((2, 3), -1.0),
        entropy_old=torch.ones(2, 3),
        group_size=2,
    )
    cfg = dapo.Config()
    adv = dapo.advantages(batch, cfg)
    torch.testing.assert_close(
        adv, torch.tensor([[0.707107] * 3, [-0.707107, 0.0, 0.0]]), rtol=1e-5, atol=1e-5
    )
    assert dapo.loss(batch, batch.logp_old, adv, cfg)[0].item() == pytest.approx(
        -0.353553, abs=1e-5
    )
    logp = batch.logp_old.clone()
    logp[0] += math.log(1.5)
    assert dapo.loss(batch, logp, adv, cfg)[0].item() == pytest.approx(-0.502046, abs=1e-5)


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/dapo.md``: shaping with
    L_max = 4 (o2 uses the whole budget), the shaped advantages, the clip-higher loss and
    its gradient, each derived by hand on the page."""
    batch, logp = worked.batch()
    cfg = dapo.Config()
    lengths = batch.response_mask.sum(1)
    assert batch_stages.informative_groups(batch.rewards, 4, cfg.success_threshold).tolist() == [
        True
    ]
    shaped = batch_stages.shape_rewards(batch.rewards, lengths, 4, cfg)
    assert shaped.tolist() == [1.0, 0.5, 0.0, 0.0]
    batch = batch.replace(rewards=shaped, outcome_rewards=batch.rewards)
    A = [1.305582, 0.261116, -0.783349, -0.783349]
    adv = dapo.advantages(batch, cfg)
    expected = worked.rows([[A[0]] * 2, [A[1]] * 4, [A[2]] * 3, [A[3]]])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)
    total, grad, _ = worked.loss_and_grad(dapo, cfg, batch, logp)
    assert total == pytest.approx(-0.082252, abs=1e-5)
    expected = worked.rows(
        [
            [-0.143614, -0.163198],
            [-0.026112] * 4,
            [0.070501, 0.0, 0.078335],
            [0.117502],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)
