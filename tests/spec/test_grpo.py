"""GRPO's own invariants (DeepSeekMath §4.1; docs/algorithms/grpo.md). One invariant per test."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl.algorithms import grpo
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _per_sequence(adv: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
    """``A_i`` read back from ``[B, T]`` advantages: the first position (prefix masks), which
    is a response token whenever ``|o_i| ≥ 1``."""
    return adv[:, 0]


@given(batch=rollout_batches(allow_empty=False))
def test_zero_mean_unit_std_per_group(batch):
    """Within every group with non-equal rewards the advantages have mean 0 and unbiased std
    ``s/(s+eps)`` (≈ 1), where ``s`` is the rewards' std: ``A_i = (r_i − r̄)/(s + eps)`` is a
    z-score, so ``Σ_i A_i = 0`` and ``std(A) = s/(s+eps)``. All-equal groups are all 0."""
    cfg = grpo.Config()
    G = batch.group_size
    A = _per_sequence(grpo.advantages(batch, cfg), batch).double().view(-1, G)
    r = batch.rewards.double().view(-1, G)
    for g in range(A.shape[0]):
        if bool((r[g] == r[g, 0]).all()):
            assert bool((A[g] == 0).all())
            continue
        s = float(r[g].std())
        assert abs(float(A[g].mean())) < 1e-5
        assert float(A[g].std()) == pytest.approx(s / (s + cfg.eps), rel=1e-5)


@given(
    batch=rollout_batches(),
    a=st.sampled_from([0.5, 2.0, 3.0, 10.0]),
    b=st.sampled_from([-3.0, 0.0, 0.25, 7.0]),
)
def test_invariant_to_affine_reward_map(batch, a, b):
    """``r → a·r + b`` with ``a > 0`` leaves the advantages unchanged up to eps:
    ``(a·r_i + b − (a·r̄ + b)) / (a·s + eps) = (r_i − r̄)/(s + eps/a)``. The generated rewards
    are 0.01 apart at least (``s ≥ 0.005``), so the eps difference is below 1e-3 relative."""
    cfg = grpo.Config()
    moved = batch.replace(rewards=a * batch.rewards + b)
    torch.testing.assert_close(
        grpo.advantages(moved, cfg), grpo.advantages(batch, cfg), rtol=1e-3, atol=1e-3
    )


@given(batch=rollout_batches(allow_empty=False))
def test_advantage_constant_along_completion(batch):
    """Outcome supervision (§4.1.2): every response token of ``o_i`` carries the same ``A_i``."""
    adv = grpo.advantages(batch, grpo.Config())
    A = _per_sequence(adv, batch)
    m = batch.response_mask.bool()
    assert torch.equal(adv[m], A[:, None].expand_as(adv)[m])


def test_hand_computed_group():
    """One group of four, rewards [1, 0, 0, 0].

    mean = 0.25; unbiased var = (0.75² + 3·0.25²)/3 = 0.75/3 = 0.25, std = 0.5;
    A = [0.75, −0.25, −0.25, −0.25]/0.5 = [1.5, −0.5, −0.5, −0.5] (eps = 1e-6 negligible).

    Loss with one token per completion and kl_coef = 0: row 0 has ratio w = 1.5 (A > 0, so
    clipped at 1 + 0.2: min(1.5·1.5, 1.2·1.5) = 1.8), rows 1-3 have w = 1 (term −0.5 each).
    seq-mean-token-mean = −(1.8 − 0.5 − 0.5 − 0.5)/4 = −0.3/4 = −0.075.
    """
    batch = RolloutBatch(
        response_ids=torch.zeros(4, 1, dtype=torch.long),
        response_mask=torch.ones(4, 1),
        rewards=torch.tensor([1.0, 0.0, 0.0, 0.0]),
        logp_old=torch.full((4, 1), -1.0),
        entropy_old=torch.ones(4, 1),
        group_size=4,
    )
    cfg = grpo.Config(kl_coef=0.0)
    adv = grpo.advantages(batch, cfg)
    torch.testing.assert_close(
        adv[:, 0], torch.tensor([1.5, -0.5, -0.5, -0.5]), rtol=1e-5, atol=1e-5
    )
    logp = batch.logp_old.clone()
    logp[0, 0] += torch.log(torch.tensor(1.5))
    total, metrics = grpo.loss(batch, logp, adv, cfg)
    assert total.item() == pytest.approx(-0.075, abs=1e-5)
    assert metrics["clip_frac_high"] == pytest.approx(0.25)


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/grpo.md`` (group in
    ``tests/spec/worked.py``), each derived by hand on the page."""
    batch, logp = worked.batch()
    cfg = grpo.Config()
    adv = grpo.advantages(batch, cfg)
    a = 0.866025
    torch.testing.assert_close(
        adv, worked.rows([[a] * 2, [a] * 4, [-a] * 3, [-a]]), atol=1e-5, rtol=0
    )
    total, grad, metrics = worked.loss_and_grad(grpo, cfg, batch, logp)
    assert total == pytest.approx(0.055215, abs=1e-5)
    expected = worked.rows(
        [
            [-0.118624, 0.001000],
            [-0.053627, -0.054127, -0.054127, -0.054127],
            [0.064582, -0.001111, 0.072169],
            [0.328093],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)
    assert metrics["clip_frac_high"] == pytest.approx(1 / 10)  # o1's second token
    assert metrics["clip_frac_low"] == pytest.approx(1 / 10)  # o3's second token
