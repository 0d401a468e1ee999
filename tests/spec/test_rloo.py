"""RLOO's own invariants (``refimpl/algorithms/rloo.py``; arXiv 2402.14740; docs/algorithms/rloo.md).

The invariants every algorithm honours (``advantages == reference_advantages``, padding,
permutations, the on-policy gradient of ``token-mean``, …) are in ``test_common.py``, which
runs over every name in ``refimpl.algorithms.NAMES``. The cross-check against verl's own
``rloo`` estimator is in ``tests/scaleup/test_verl.py`` (it needs verl imported).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl.algorithms import dr_grpo, grpo, rloo
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import batch_and_policy, rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _per_sequence(adv: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
    """``A_i`` of each row (advantages are constant along a completion; 0 for empty rows)."""
    mask = batch.response_mask
    return (adv * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1)


def _one_token_group(rewards: list[float]) -> RolloutBatch:
    G = len(rewards)
    return RolloutBatch(
        response_ids=torch.zeros(G, 1, dtype=torch.long),
        response_mask=torch.ones(G, 1),
        rewards=torch.tensor(rewards),
        logp_old=torch.full((G, 1), -1.0),
        entropy_old=torch.ones(G, 1),
        group_size=G,
    )


@pytest.mark.parametrize(("G", "k"), [(2, 1), (4, 1), (4, 3), (8, 2), (8, 5)], ids=lambda v: str(v))
def test_binary_group_values_by_hand(G, k):
    """With ``k`` of ``G`` completions correct (reward 1, the rest 0), a correct one's baseline
    is the other correct ones' share ``(k−1)/(G−1)``, so ``A = (G−k)/(G−1)``; a wrong one's
    baseline is ``k/(G−1)``, so ``A = −k/(G−1)``."""
    batch = _one_token_group([1.0] * k + [0.0] * (G - k))
    adv = rloo.advantages(batch, rloo.Config())[:, 0]
    expected = torch.tensor([(G - k) / (G - 1)] * k + [-k / (G - 1)] * (G - k))
    torch.testing.assert_close(adv, expected, rtol=1e-6, atol=1e-7)


@given(data=st.data())
def test_baseline_leaves_the_completion_out(data):
    """The baseline of completion ``i`` does not depend on ``r_i``: raising ``r_i`` by ``δ``
    raises ``A_i`` by exactly ``δ`` and lowers every sibling's advantage by ``δ/(G−1)``
    (its share of their baselines). Groups that are all-equal before or after are skipped:
    their advantage is 0 by convention."""
    batch = data.draw(rollout_batches(binary_rewards=False, allow_empty=False))
    G = batch.group_size
    i = data.draw(st.integers(0, batch.batch_size - 1))
    delta = data.draw(st.sampled_from([-1.5, -0.25, 0.5, 2.0]))
    rewards = batch.rewards.clone()
    rewards[i] += delta
    moved = batch.replace(rewards=rewards)
    g = i // G
    rows = slice(g * G, g * G + G)
    for r in (batch.rewards[rows], moved.rewards[rows]):
        if bool((r == r[0]).all()):
            return
    cfg = rloo.Config()
    before = _per_sequence(rloo.advantages(batch, cfg), batch).double()
    after = _per_sequence(rloo.advantages(moved, cfg), moved).double()
    expected = before.clone()
    expected[rows] -= delta / (G - 1)
    expected[i] += delta + delta / (G - 1)
    torch.testing.assert_close(after, expected, rtol=1e-5, atol=1e-5)


@given(batch=rollout_batches(allow_empty=False))
def test_zero_sum_in_every_group(batch):
    """``Σ_i A_i = Σ_i r_i − Σ_i (Σ_j r_j − r_i)/(G−1) = 0`` in every group."""
    adv = _per_sequence(rloo.advantages(batch, rloo.Config()), batch).double()
    sums = adv.view(-1, batch.group_size).sum(dim=1)
    torch.testing.assert_close(sums, torch.zeros_like(sums), rtol=0, atol=1e-4)


@given(batch=rollout_batches())
def test_is_dr_grpo_advantage_times_g_over_g_minus_1(batch):
    """``r_i − (Σ_j r_j − r_i)/(G−1) = G/(G−1)·(r_i − mean_G r)``: RLOO's advantage is Dr.
    GRPO's (the centred reward) scaled by ``G/(G−1)``, token by token."""
    G = batch.group_size
    ours = rloo.advantages(batch, rloo.Config())
    centred = dr_grpo.advantages(batch, dr_grpo.Config())
    torch.testing.assert_close(ours, centred * (G / (G - 1)), rtol=1e-5, atol=1e-6)


@given(
    batch=rollout_batches(), a=st.sampled_from([0.5, 2.0, 4.0]), b=st.sampled_from([-3.0, 0.0, 0.5])
)
def test_advantage_shift_invariant_scale_equivariant(batch, a, b):
    """No std division: ``A(a·r + b) = a·A(r)`` (a shift cancels in ``r_i −`` the others' mean)."""
    cfg = rloo.Config()
    moved = batch.replace(rewards=a * batch.rewards + b)
    torch.testing.assert_close(
        rloo.advantages(moved, cfg), a * rloo.advantages(batch, cfg), rtol=1e-4, atol=1e-4
    )


@pytest.mark.parametrize("G", [2, 3])
def test_gradient_estimator_unbiased_exactly(G):
    """The point of the leave-one-out baseline: for a policy ``p = softmax(θ)`` over three
    one-token answers with rewards ``(1, 0, 0.5)``, the expectation over all ``3^G`` groups of
    ``(1/G) Σ_i A_i ∇θ log p(o_i)`` equals the true gradient ``∇θ Σ_k p_k r_k`` (enumerated
    exactly, no sampling). GRPO's mean baseline, which includes the completion's own reward,
    gives ``(G−1)/G`` of it: that second check shows the first one can fail."""
    theta = torch.tensor([0.3, -0.2, 0.1], dtype=torch.float64, requires_grad=True)
    reward_of = torch.tensor([1.0, 0.0, 0.5], dtype=torch.float64)
    p = torch.softmax(theta, dim=0)
    (true_grad,) = torch.autograd.grad((p * reward_of).sum(), theta)

    def expected_estimate(advantage_fn) -> torch.Tensor:
        total = torch.zeros(3, dtype=torch.float64)
        for answers in itertools.product(range(3), repeat=G):
            probability = torch.prod(p.detach()[list(answers)])
            batch = _one_token_group([float(reward_of[a]) for a in answers])
            adv = advantage_fn(batch)[:, 0].double()
            logp = torch.log_softmax(theta, dim=0)[list(answers)]
            (score,) = torch.autograd.grad((adv * logp).sum() / G, theta)
            total += probability * score
        return total

    rloo_estimate = expected_estimate(lambda b: rloo.advantages(b, rloo.Config()))
    torch.testing.assert_close(rloo_estimate, true_grad, rtol=1e-6, atol=1e-9)
    mean_baseline = expected_estimate(lambda b: dr_grpo.advantages(b, dr_grpo.Config()))
    torch.testing.assert_close(mean_baseline, true_grad * (G - 1) / G, rtol=1e-5, atol=1e-9)


@given(data=batch_and_policy())
def test_loss_is_grpo_loss_with_token_mean_and_no_kl(data):
    """Only the advantage is RLOO's own: for any advantages and any current policy, the loss
    and its gradient equal GRPO's loss with ``loss_agg_mode="token-mean"`` and ``β = 0``
    (verl's RLOO recipe: its PPO loss on the leave-one-out advantages)."""
    batch, logp, _ = data
    adv = rloo.advantages(batch, rloo.Config())
    grpo_cfg = grpo.Config(kl_coef=0.0, loss_agg_mode="token-mean")
    logp_a = logp.clone().requires_grad_(True)
    logp_b = logp.clone().requires_grad_(True)
    ours, _ = rloo.loss(batch, logp_a, adv, rloo.Config())
    theirs, _ = grpo.loss(batch, logp_b, adv, grpo_cfg)
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    ours.backward()
    theirs.backward()
    m = batch.response_mask.bool()
    torch.testing.assert_close(logp_a.grad[m], logp_b.grad[m], rtol=1e-6, atol=1e-9)


def test_config_rejects_a_sequence_mode():
    """RLOO's loss is per token: ``loss_agg_mode="seq-mean"`` is a ``ValueError`` naming the
    field."""
    with pytest.raises(ValueError, match="loss_agg_mode"):
        rloo.Config(loss_agg_mode="seq-mean")


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/rloo.md``, each derived by hand
    on the page: ``A = ±2/3``, ``L = −0.14``, and the per-token gradient."""
    batch, logp = worked.batch()
    cfg = rloo.Config()
    adv = rloo.advantages(batch, cfg)
    a = 2.0 / 3.0
    torch.testing.assert_close(adv, worked.rows([[a] * 2, [a] * 4, [-a] * 3, [-a]]))
    total, grad, metrics = worked.loss_and_grad(rloo, cfg, batch, logp)
    assert total == pytest.approx(-0.14, abs=1e-6)
    expected = worked.rows([[-0.073333, 0.0], [-0.066667] * 4, [0.06, 0.0, 0.066667], [0.1]])
    torch.testing.assert_close(grad, expected, atol=1e-6, rtol=0)
    assert metrics["clip_frac_high"] == pytest.approx(0.1)
    assert metrics["clip_frac_low"] == pytest.approx(0.1)
