"""Dr. GRPO's own invariants (arXiv 2503.20783 §3.2; docs/algorithms/dr_grpo.md)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl.algorithms import dr_grpo
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _onpolicy_grad(batch, cfg):
    adv = dr_grpo.advantages(batch, cfg)
    logp = batch.logp_old.clone().requires_grad_(True)
    dr_grpo.loss(batch, logp, adv, cfg)[0].backward()
    return logp.grad


@given(data=st.data())
def test_loss_weight_independent_of_length(data):
    """Every token weighs ``1/(B'·L_max)`` whatever its completion's length (§3.2): making one
    non-empty completion longer changes the on-policy gradient of no token that was already
    there (under GRPO's 1/|o_i| it would shrink them all), and the new tokens get the same
    per-token gradient ``−A_i/(B'·L_max)`` as the old ones of that completion."""
    batch = data.draw(rollout_batches(allow_empty=False, min_len=2))
    cfg = dr_grpo.Config(max_len=16)
    T = batch.response_mask.shape[1]
    lengths = batch.lengths.long()
    i = data.draw(st.integers(0, batch.batch_size - 1))
    if int(lengths[i]) == T:
        return
    t = int(lengths[i])
    longer = batch.response_mask.clone()
    longer[i, t] = 1.0
    # The new token needs valid contents (padding held garbage).
    logp_old, entropy_old = batch.logp_old.clone(), batch.entropy_old.clone()
    logp_old[i, t], entropy_old[i, t] = -1.0, 1.0
    logp_ref = None if batch.logp_ref is None else batch.logp_ref.clone()
    if logp_ref is not None:
        logp_ref[i, t] = -1.0
    g1 = _onpolicy_grad(batch, cfg)
    g2 = _onpolicy_grad(
        batch.replace(
            response_mask=longer,
            logp_old=logp_old,
            entropy_old=entropy_old,
            logp_ref=logp_ref,
            token_values=None,  # VinePPO's values: not Dr. GRPO's, and garbage at the new token
        ),
        cfg,
    )
    m = batch.response_mask.bool()
    torch.testing.assert_close(g2[m], g1[m], rtol=1e-6, atol=0)
    assert g2[i, t].item() == pytest.approx(g1[i, 0].item(), rel=1e-6)


@given(
    batch=rollout_batches(), a=st.sampled_from([0.5, 2.0, 4.0]), b=st.sampled_from([-3.0, 0.0, 0.5])
)
def test_advantage_shift_invariant_scale_equivariant(batch, a, b):
    """Without the std division, ``A_i = r_i − r̄`` is invariant to ``r → r + b`` and scales
    with ``a``: ``A(a·r + b) = a·A(r)``."""
    cfg = dr_grpo.Config()
    moved = batch.replace(rewards=a * batch.rewards + b)
    torch.testing.assert_close(
        dr_grpo.advantages(moved, cfg), a * dr_grpo.advantages(batch, cfg), rtol=1e-4, atol=1e-4
    )


@given(batch=rollout_batches())
def test_max_len_none_uses_batch_width(batch):
    """With ``max_len=None`` the constant is the batch's padded width ``T`` (documented
    assumption): the loss equals the one with ``max_len=T``."""
    T = batch.response_mask.shape[1]
    adv = dr_grpo.advantages(batch, dr_grpo.Config())
    l_none = dr_grpo.loss(batch, batch.logp_old, adv, dr_grpo.Config())[0]
    l_T = dr_grpo.loss(batch, batch.logp_old, adv, dr_grpo.Config(max_len=T))[0]
    torch.testing.assert_close(l_none, l_T)


def test_hand_computed_group():
    """One group of four, rewards [1, 0, 0, 0], lengths [2, 1, 1, 1], L_max = 4.

    mean = 0.25 → A = [0.75, −0.25, −0.25, −0.25] (no std division).
    On-policy loss = −Σ m·A / (B'·L_max) = −(2·0.75 − 3·0.25)/(4·4) = −0.75/16 = −0.046875.
    Gradient per token = −A_i/16: row 0 → −0.046875 on both tokens, rows 1-3 → +0.015625.
    """
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    batch = RolloutBatch(
        response_ids=torch.zeros(4, 2, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0, 0.0, 0.0]),
        logp_old=torch.full((4, 2), -1.0),
        entropy_old=torch.ones(4, 2),
        group_size=4,
    )
    cfg = dr_grpo.Config(max_len=4)
    adv = dr_grpo.advantages(batch, cfg)
    torch.testing.assert_close(
        adv, torch.tensor([[0.75, 0.75], [-0.25, 0.0], [-0.25, 0.0], [-0.25, 0.0]])
    )
    logp = batch.logp_old.clone().requires_grad_(True)
    total, _ = dr_grpo.loss(batch, logp, adv, cfg)
    assert total.item() == pytest.approx(-0.046875, abs=1e-7)
    total.backward()
    torch.testing.assert_close(
        logp.grad,
        torch.tensor([[-0.046875, -0.046875], [0.015625, 0.0], [0.015625, 0.0], [0.015625, 0.0]]),
    )


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/dr_grpo.md`` (L_max = 4),
    each derived by hand on the page."""
    batch, logp = worked.batch()
    cfg = dr_grpo.Config(max_len=4)
    adv = dr_grpo.advantages(batch, cfg)
    torch.testing.assert_close(adv, worked.rows([[0.5] * 2, [0.5] * 4, [-0.5] * 3, [-0.5]]))
    total, grad, _ = worked.loss_and_grad(dr_grpo, cfg, batch, logp)
    assert total == pytest.approx(-0.065625, abs=1e-6)
    expected = worked.rows([[-0.034375, 0.0], [-0.03125] * 4, [0.028125, 0.0, 0.03125], [0.046875]])
    torch.testing.assert_close(grad, expected, atol=1e-6, rtol=0)
