"""GPG's own invariants (arXiv 2504.02546 §3; docs/algorithms/gpg.md)."""

from __future__ import annotations

import statistics

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl.algorithms import gpg
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import concat_batches, rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _full(batch: RolloutBatch) -> RolloutBatch:
    """The batch with every completion as long as ``T`` (former padding becomes tokens with
    log-prob −1 and entropy 1; VinePPO's values, which GPG does not read, are dropped)."""
    m = batch.response_mask.bool()
    return batch.replace(
        response_mask=torch.ones_like(batch.response_mask),
        logp_old=torch.where(m, batch.logp_old, torch.tensor(-1.0)),
        entropy_old=torch.where(m, batch.entropy_old, torch.tensor(1.0)),
        logp_ref=None,
        token_values=None,
    )


def _grad(batch, cfg):
    adv = gpg.advantages(batch, cfg)
    logp = batch.logp_old.clone().requires_grad_(True)
    total, metrics = gpg.loss(batch, logp, adv, cfg)
    total.backward()
    return logp.grad, metrics


@given(batch=rollout_batches())
def test_alpha_is_batch_over_informative_rows(batch):
    """``α = B / (B − M)`` with ``M`` the rows of zero-variance groups (§3), and 1 when every
    group is degenerate (then every advantage, hence the loss, is 0)."""
    G = batch.group_size
    r = batch.rewards.view(-1, G)
    M = int((r.max(1).values == r.min(1).values).sum()) * G
    B = batch.batch_size
    _, metrics = _grad(batch, gpg.Config())
    assert metrics["alpha"] == pytest.approx(B / (B - M) if B > M else 1.0)


@given(data=st.data())
def test_alpha_cancels_degenerate_groups(data):
    """The point of α: with equal lengths ``ℓ`` everywhere, the gradient on an informative row
    is ``−α·A_i/(B·ℓ) = −A_i/((B − M)·ℓ)``, so appending groups with all-equal rewards (which
    add ``M`` rows and ``M·ℓ`` tokens but no signal) leaves it unchanged."""
    informative = _full(data.draw(rollout_batches(equal_groups=False, binary_rewards=False)))
    r = informative.rewards.view(-1, informative.group_size)
    if bool((r.max(1).values == r.min(1).values).any()):
        return  # a group equal by chance: not the situation this invariant is about
    G, T = informative.group_size, informative.response_mask.shape[1]
    degenerate = _full(
        data.draw(
            rollout_batches(
                equal_groups=True, min_group_size=G, max_group_size=G, min_len=T, max_len=T
            )
        )
    )
    cfg = gpg.Config()
    g_alone, _ = _grad(informative, cfg)
    g_mixed, metrics = _grad(concat_batches(informative, degenerate), cfg)
    B_inf = informative.batch_size
    assert metrics["alpha"] > 1.0
    torch.testing.assert_close(g_mixed[:B_inf], g_alone, rtol=1e-5, atol=1e-7)
    assert bool((g_mixed[B_inf:] == 0).all())


@given(batch=rollout_batches())
def test_advantage_centred_or_normalised(batch):
    """F_norm = 1 (default): the advantage is the centred reward ``r_i − r̄``; with
    ``normalize_std`` (F_norm = std + eps) it is GRPO's z-score. Both computed here with the
    standard library's ``statistics`` (float64), independently of ``core``; all-equal groups
    give exactly 0 in both."""
    G, r = batch.group_size, batch.rewards.tolist()
    plain = gpg.advantages(batch, gpg.Config())
    scaled = gpg.advantages(batch, gpg.Config(normalize_std=True))
    for g in range(batch.num_groups):
        group = r[g * G : (g + 1) * G]
        for i in range(g * G, (g + 1) * G):
            tokens = batch.response_mask[i].bool()
            if max(group) == min(group):
                assert bool((plain[i] == 0).all()) and bool((scaled[i] == 0).all())
                continue
            centred = r[i] - statistics.mean(group)
            z = centred / (statistics.stdev(group) + 1e-6)
            assert torch.allclose(
                plain[i][tokens].double(), torch.tensor(centred).double(), atol=1e-5
            )
            assert torch.allclose(scaled[i][tokens].double(), torch.tensor(z).double(), atol=1e-5)


@given(batch=rollout_batches(), shift=st.floats(-3.0, 0.0))
def test_gradient_not_ratio_dependent(batch, shift):
    """No ratio and no clip: the gradient ``−α·A_i/Σ|o|`` does not depend on how far ``logp``
    has moved from ``logp_old`` (a PPO-style surrogate would scale by ``w`` or clip). The
    shift is downwards: a log-prob above 0 is refused by the loss."""
    cfg = gpg.Config()
    adv = gpg.advantages(batch, cfg)
    grads = []
    for delta in (0.0, shift):
        logp = (batch.logp_old + delta).requires_grad_(True)
        gpg.loss(batch, logp, adv, cfg)[0].backward()
        grads.append(logp.grad)
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)


def test_hand_computed_batch():
    """Two groups of two, one token each: rewards [1, 0 | 1, 1], logp = [−0.5, −1.0, −0.2, −0.3].

    A = r − r̄ = [0.5, −0.5 | 0, 0]; group 2 is degenerate, M = 2, α = 4/(4 − 2) = 2.
    Loss = −α/Σ|o| · Σ A·logp = −(2/4)·(0.5·(−0.5) + (−0.5)·(−1.0)) = −0.5·0.25 = −0.125.
    Gradient = −α·A/Σ|o| = −0.5·A = [−0.25, 0.25, 0, 0].
    """
    batch = RolloutBatch(
        response_ids=torch.zeros(4, 1, dtype=torch.long),
        response_mask=torch.ones(4, 1),
        rewards=torch.tensor([1.0, 0.0, 1.0, 1.0]),
        logp_old=torch.tensor([[-0.5], [-1.0], [-0.2], [-0.3]]),
        entropy_old=torch.ones(4, 1),
        group_size=2,
    )
    cfg = gpg.Config()
    adv = gpg.advantages(batch, cfg)
    torch.testing.assert_close(adv[:, 0], torch.tensor([0.5, -0.5, 0.0, 0.0]))
    logp = batch.logp_old.clone().requires_grad_(True)
    total, metrics = gpg.loss(batch, logp, adv, cfg)
    assert metrics["alpha"] == 2.0
    assert total.item() == pytest.approx(-0.125, abs=1e-7)
    total.backward()
    torch.testing.assert_close(logp.grad[:, 0], torch.tensor([-0.25, 0.25, 0.0, 0.0]))


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/gpg.md``, derived by hand on
    the page, and its remark: one more group of equal rewards doubles α."""
    batch, logp = worked.batch()
    cfg = gpg.Config()
    adv = gpg.advantages(batch, cfg)
    torch.testing.assert_close(adv, worked.rows([[0.5] * 2, [0.5] * 4, [-0.5] * 3, [-0.5]]))
    total, grad, metrics = worked.loss_and_grad(gpg, cfg, batch, logp)
    assert metrics["alpha"] == 1.0
    assert total == pytest.approx(0.054013, abs=1e-6)
    expected = worked.rows([[-0.05] * 2, [-0.05] * 4, [0.05] * 3, [0.05]])
    torch.testing.assert_close(grad, expected, atol=1e-6, rtol=0)
    doubled = concat_batches(batch, batch.replace(rewards=torch.ones(4)))
    _, metrics = gpg.loss(doubled, doubled.logp_old, gpg.advantages(doubled, cfg), cfg)
    assert metrics["alpha"] == 2.0
