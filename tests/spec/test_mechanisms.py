"""The batch-level mechanisms every training loop applies through one function each (the toy
trainer, ``refimpl.scaleup.trl``, ``refimpl.scaleup.verl``): dynamic sampling's group filter,
the overlong filter, GPG's ``α`` and the advantages of the kept groups, Dr. GRPO's ``L_max``.
The expected values are worked out by hand in each test."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from refimpl import algorithms, batch_stages, contract, core
from refimpl.algorithms import dapo, gpg, grpo

G = 2


def make_batch(rewards: list[float], T: int = 3, seed: int = 0) -> contract.RolloutBatch:
    gen = torch.Generator().manual_seed(seed)
    B = len(rewards)
    lengths = torch.tensor([1 + (i % T) for i in range(B)])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    return contract.RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor(rewards),
        logp_old=-torch.rand(B, T, generator=gen) * mask,
        entropy_old=torch.rand(B, T, generator=gen) * mask,
        group_size=G,
    )


def test_keep_groups_is_dynamic_sampling_only_when_asked():
    """Groups (1,0), (1,1), (0,0), (0.6,0.8): with the filter on at threshold 0.7, only the
    mixed ones stay (the last is mixed: 0.6 fails, 0.8 succeeds); off, every group stays."""
    outcome = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.6, 0.8])
    on = dapo.Config(success_threshold=0.7)
    assert batch_stages.keep_groups(outcome, G, on).tolist() == [True, False, False, True]
    off = dataclasses.replace(on, dynamic_sampling=False)
    assert batch_stages.keep_groups(outcome, G, off).tolist() == [True] * 4


@pytest.mark.parametrize("name", ["gtpo", "grpo_s"])
def test_a_reward_exactly_at_the_threshold_is_a_success(name):
    """``r ≥ success_threshold`` is a success (every Config's comment, GTPO's O⁺ = {i : r_i ≥
    threshold}): a reward of exactly 0.5 at the default threshold 0.5 succeeds, one float32
    step below it fails. Dynamic sampling then keeps (0.5, 0.5⁻) and drops (0.5, 0.5), whose
    both succeed; GTPO's and GRPO-S's O⁺/O⁻ split agrees with their reference loops, which
    write ``≥`` literally. A slip to ``>`` changes every one of these."""
    below = torch.nextafter(torch.tensor(0.5), torch.tensor(0.0)).item()
    rewards = torch.tensor([0.5, below, 0.5, 0.5])
    assert core.successful(make_batch(rewards.tolist()), 0.5).tolist() == [True, False, True, True]
    assert batch_stages.keep_groups(rewards, G, dapo.Config()).tolist() == [True, False]
    module = algorithms.get(name)
    cfg = module.Config()
    assert cfg.success_threshold == 0.5
    b = make_batch(rewards.tolist())
    torch.testing.assert_close(
        module.advantages(b, cfg), module.reference_advantages(b, cfg), rtol=1e-5, atol=1e-6
    )
    flipped = module.Config(success_threshold=below)  # the same batch, every reward a success
    assert not torch.equal(module.advantages(b, cfg), module.advantages(b, flipped))


def test_overlong_filter_removes_truncated_rows_only_when_asked():
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    truncated = torch.tensor([False, True, False])
    on = dapo.Config(overlong_filter=True)
    out = batch_stages.overlong_filter(mask, truncated, on)
    assert out.tolist() == [[1.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert batch_stages.overlong_filter(mask, truncated, dapo.Config()) is mask  # off by default


@pytest.mark.parametrize(
    ("rewards", "alpha"),
    [
        ([1, 0, 1, 1, 0, 0, 0, 1], 8 / 4),  # two flat groups of four: M = 4
        ([1, 0, 0, 1, 1, 0], 1.0),  # none flat
        ([1, 1, 0, 0], 1.0),  # all flat: α = 1 (every advantage is 0)
        ([1, 0, 1, 1, 1, 1], 6 / 2),  # M = 4 of B = 6
    ],
)
def test_gpg_alpha_by_hand(rewards, alpha):
    assert gpg.alpha(torch.tensor(rewards, dtype=torch.float32), G) == alpha


def test_kept_group_advantages_zero_the_dropped_groups():
    """The kept groups get the algorithm's advantages of the kept batch, the others 0."""
    batch = make_batch([1.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    keep = torch.tensor([True, False, True])
    adv = batch_stages.kept_group_advantages(grpo, batch, keep, grpo.Config())
    rows = keep.repeat_interleave(G)
    expected = grpo.advantages(batch.select_groups(keep), grpo.Config())
    torch.testing.assert_close(adv[rows], expected, rtol=0, atol=0)
    assert (adv[~rows] == 0).all()
    nothing = batch_stages.kept_group_advantages(
        grpo, batch, torch.zeros(3, dtype=torch.bool), grpo.Config()
    )
    assert (nothing == 0).all()


def test_gpg_alpha_folded_into_the_advantages_gives_the_same_gradient():
    """Groups (1,0), (1,1), (0,1): α = 6/4. GPG's loss on the batch with its rewards equals
    its loss with α folded into A and no rewards (flat: α = 1), in value and gradient."""
    batch = make_batch([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    keep = torch.ones(3, dtype=torch.bool)
    cfg = gpg.Config()
    folded = batch_stages.kept_group_advantages(gpg, batch, keep, cfg)
    plain = gpg.advantages(batch, cfg)
    torch.testing.assert_close(folded, plain * 1.5, rtol=0, atol=0)

    logp1 = batch.logp_old.clone().requires_grad_(True)
    loss1, m1 = gpg.loss(batch, logp1, plain, cfg)
    loss1.backward()
    no_rewards = batch.replace(rewards=torch.zeros(6))
    logp2 = batch.logp_old.clone().requires_grad_(True)
    loss2, m2 = gpg.loss(no_rewards, logp2, folded, cfg)
    loss2.backward()
    assert m1["alpha"] == 1.5 and m2["alpha"] == 1.0
    torch.testing.assert_close(loss1, loss2)
    torch.testing.assert_close(logp1.grad, logp2.grad)


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_shape_rewards_is_the_identity_unless_asked(name):
    """``shape_rewards`` changes rewards only with ``overlong_shaping`` (DAPO's default)."""
    cfg = algorithms.get(name).Config()
    rewards, lengths = torch.tensor([1.0, 0.0]), torch.tensor([10, 10])
    shaped = batch_stages.shape_rewards(rewards, lengths, 10, cfg)
    if cfg.overlong_shaping:
        # L_max = 10, L_cache = 2: |o| = 10 is 2 past L_max − L_cache → R_len = −1, × 0.5.
        assert shaped.tolist() == [0.5, -0.5]
    else:
        assert shaped is rewards
