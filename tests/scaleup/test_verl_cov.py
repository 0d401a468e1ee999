"""Peer parity: our Clip-Cov and KL-Cov equal verl 0.9.1's ``clip_cov`` and ``kl_cov`` policy
losses (the authors' code) on the same inputs, value and gradient.

Clip-Cov draws a random subset. verl draws it with ``torch.randperm`` on torch's global
generator over the candidates in row-major order; ours does the same with ``seed=None``, so
seeding the global generator identically before each call gives the same draw. The tests
through verl's registry (whose rows our wrapper reorders into groups) use inputs where the
selection is unambiguous: every candidate is selected (Clip-Cov with r = 1), or the
covariances are distinct (KL-Cov).
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

pytest.importorskip("verl")
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.workers.config import ActorConfig, PolicyLossConfig  # noqa: E402

from refimpl.algorithms import clip_cov, kl_cov  # noqa: E402
from refimpl.contract import RolloutBatch  # noqa: E402
from refimpl.scaleup import verl as rv  # noqa: E402

B, T = 8, 12


def _inputs(seed: int = 0):
    """Ragged rows, old log-probs in [−4, 0], the current policy moved by N(0, 0.3) and kept ≤ 0 (some
    ratios leave the clip range), advantages ±N(1, 0.5) per row (as GRPO's, one per row):
    many tokens have |cov| above 1."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T)
    for i, n in enumerate([12, 7, 12, 3, 9, 12, 5, 10]):
        mask[i, n:] = 0
    old = -4 * torch.rand(B, T, generator=gen)
    new = (old + 0.3 * torch.randn(B, T, generator=gen)).clamp(max=0.0)  # log-probs ≤ 0
    sign = torch.tensor([1.0, -1.0] * (B // 2))
    adv = (sign * (1 + 0.5 * torch.randn(B, generator=gen).abs()))[:, None].expand(B, T)
    adv = torch.where(mask.bool(), adv, 0.0).contiguous()
    return mask, old, new, adv


def _batch(mask, old) -> RolloutBatch:
    """The same rows, in verl's order (the loss does not use the groups)."""
    return RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=mask,
        rewards=torch.zeros(B),
        logp_old=old,
        entropy_old=torch.ones(B, T),
        group_size=B,
    )


def _verl_config(**policy_loss) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=B,
        clip_ratio=0.2,
        clip_ratio_low=0.2,
        clip_ratio_high=0.28,
        policy_loss=PolicyLossConfig(**policy_loss),
    )


def _theirs(fn, mask, old, new, adv, cfg, seed=None):
    lp = new.clone().requires_grad_(True)
    if seed is not None:
        torch.manual_seed(seed)
    loss, _ = fn(
        old_log_prob=old,
        log_prob=lp,
        advantages=adv,
        response_mask=mask,
        loss_agg_mode="token-mean",
        config=cfg,
    )
    loss.backward()
    return loss.detach(), lp.grad


def _ours(module, cfg, mask, old, new, adv, seed=None):
    lp = new.clone().requires_grad_(True)
    if seed is not None:
        torch.manual_seed(seed)
    loss, metrics = module.loss(_batch(mask, old), lp, adv, cfg)
    loss.backward()
    return loss.detach(), lp.grad, metrics


@pytest.mark.parametrize("ratio", [2e-4, 0.05, 1.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_clip_cov_equals_verl_with_the_same_draw(ratio, seed):
    """Same inputs, same band, same clip, the global generator seeded identically: the same
    tokens are switched off and loss and gradient agree. At r = 2e-4 one token of the ~70
    is switched off (the minimum of one), at 0.05 three, at 1 every candidate."""
    mask, old, new, adv = _inputs(seed)
    ours_cfg = dataclasses.replace(clip_cov.Config(), clip_cov_ratio=ratio, seed=None)
    theirs_cfg = _verl_config(loss_mode="clip_cov", clip_cov_ratio=ratio)
    l_t, g_t = _theirs(core_algos.compute_policy_loss_clip_cov, mask, old, new, adv, theirs_cfg, 7)
    l_o, g_o, metrics = _ours(clip_cov, ours_cfg, mask, old, new, adv, 7)
    n_tokens = int(mask.sum())
    expected_n = max(1, int(ratio * n_tokens))
    candidates = clip_cov.clip_cov_mask(
        _batch(mask, old), new, adv, dataclasses.replace(ours_cfg, clip_cov_ratio=1.0)
    )
    assert int(candidates.sum()) >= 5  # the draw has a choice to make
    assert metrics["cov_selected"] == min(expected_n, int(candidates.sum()))
    torch.testing.assert_close(l_o, l_t)
    torch.testing.assert_close(g_o, g_t)


def test_clip_cov_draws_differ_across_seeds():
    """The parity above is not vacuous: other seeds switch off other tokens (here, with
    r = 0.05, at least two different gradients among five seeds)."""
    mask, old, new, adv = _inputs(0)
    cfg = dataclasses.replace(clip_cov.Config(), clip_cov_ratio=0.05, seed=None)
    grads = [_ours(clip_cov, cfg, mask, old, new, adv, s)[1] for s in range(5)]
    assert any(not torch.equal(grads[0], g) for g in grads[1:])


@pytest.mark.parametrize("ratio", [2e-4, 0.05, 0.3])
@pytest.mark.parametrize("seed", [0, 1])
def test_kl_cov_equals_verl(ratio, seed):
    """Same inputs (distinct covariances, so the top-n is unambiguous), k and β = 1 passed to
    verl explicitly (its config default is 0.1): same loss and gradient, no clip on either
    side."""
    mask, old, new, adv = _inputs(seed)
    ours_cfg = dataclasses.replace(kl_cov.Config(), kl_cov_ratio=ratio)
    theirs_cfg = _verl_config(loss_mode="kl_cov", kl_cov_ratio=ratio, ppo_kl_coef=1.0)
    l_t, g_t = _theirs(core_algos.compute_policy_loss_kl_cov, mask, old, new, adv, theirs_cfg)
    l_o, g_o, metrics = _ours(kl_cov, ours_cfg, mask, old, new, adv)
    assert metrics["cov_selected"] == max(1, int(ratio * int(mask.sum())))
    torch.testing.assert_close(l_o, l_t)
    torch.testing.assert_close(g_o, g_t)
    # The penalty matters here: without it (β = 0) the loss differs.
    l_0, _, _ = _ours(kl_cov, dataclasses.replace(ours_cfg, kl_cov_coef=0.0), mask, old, new, adv)
    assert not torch.allclose(l_0, l_t)


def _registered(name, overrides, mask, old, new, adv):
    os.environ["REFIMPL_CONFIG"] = overrides
    try:
        lp = new.clone().requires_grad_(True)
        loss, _ = core_algos.get_policy_loss_fn(f"refimpl_{name}")(
            old_log_prob=old,
            log_prob=lp,
            advantages=adv,
            response_mask=mask,
            loss_agg_mode="token-mean",
            config=_verl_config(),
        )
    finally:
        del os.environ["REFIMPL_CONFIG"]
    loss.backward()
    return loss.detach(), lp.grad


def test_registered_clip_cov_equals_verl_when_every_candidate_is_selected():
    """Through verl's registry (``refimpl_clip_cov``; the wrapper reorders verl's rows into
    groups, so the draw would differ): with r = 1 every candidate is switched off, no
    randomness is left, and the losses agree."""
    mask, old, new, adv = _inputs(3)
    ours = _registered("clip_cov", '{"clip_cov": {"clip_cov_ratio": 1.0}}', mask, old, new, adv)
    theirs = _theirs(
        core_algos.compute_policy_loss_clip_cov,
        mask,
        old,
        new,
        adv,
        _verl_config(loss_mode="clip_cov", clip_cov_ratio=1.0),
    )
    torch.testing.assert_close(ours[0], theirs[0])
    torch.testing.assert_close(ours[1], theirs[1])


def test_registered_kl_cov_equals_verl():
    """Through verl's registry, our defaults (k = 2e-4, β = 1) against verl's function with
    the same k and β."""
    mask, old, new, adv = _inputs(4)
    ours = _registered("kl_cov", "{}", mask, old, new, adv)
    theirs = _theirs(
        core_algos.compute_policy_loss_kl_cov,
        mask,
        old,
        new,
        adv,
        _verl_config(loss_mode="kl_cov", ppo_kl_coef=1.0),
    )
    torch.testing.assert_close(ours[0], theirs[0])
    torch.testing.assert_close(ours[1], theirs[1])


def test_plain_names_verl_lacks_and_keeps():
    """forking_tokens and entropy_bonus (which verl lacks) are also registered under their
    plain names; clip_cov and kl_cov stay verl's own functions."""
    for name in ("forking_tokens", "entropy_bonus"):
        assert core_algos.get_policy_loss_fn(name) is rv.POLICY_LOSSES[name]
        assert core_algos.get_adv_estimator_fn(name) is rv.ESTIMATORS[name]
    assert core_algos.get_policy_loss_fn("clip_cov") is core_algos.compute_policy_loss_clip_cov
    assert core_algos.get_policy_loss_fn("kl_cov") is core_algos.compute_policy_loss_kl_cov
