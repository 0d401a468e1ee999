"""refimpl.scaleup.verl: found by verl's getters, called with verl's arguments, equal to our
modules called directly and to verl's own GRPO advantage and vanilla (DAPO) loss."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from verl.trainer.ppo import core_algos
from verl.workers.config import ActorConfig

from refimpl import algorithms
from refimpl.contract import RolloutBatch
from refimpl.scaleup import verl as rv

B, T, G = 8, 5, 4


def _inputs(seed: int = 0) -> dict:
    """verl-shaped inputs: outcome reward on the last response token, groups *interleaved*
    (verl reorders rows by sequence length), a uid per row."""
    gen = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T)
    mask[1, 3:] = 0
    mask[6, 1:] = 0
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    tlr = torch.zeros(B, T)
    tlr[torch.arange(B), mask.sum(1).long() - 1] = rewards
    index = np.array(["p", "q", "p", "q", "p", "q", "p", "q"], dtype=object)
    old = -torch.rand(B, T, generator=gen) * 2
    # the current policy's log-probs stay log-probs (≤ 0): the losses refuse others
    new = (old + 0.2 * torch.randn(B, T, generator=gen)).clamp(max=0.0)
    return {
        "tlr": tlr,
        "mask": mask,
        "index": index,
        "rewards": rewards,
        "old": old,
        "new": new,
        "entropy": torch.rand(B, T, generator=gen) * 2,
        "entropy_now": torch.rand(B, T, generator=gen) * 2,
        "ref": old - 0.1 * torch.rand(B, T, generator=gen),
    }


def _grouped(x: dict) -> tuple[torch.Tensor, RolloutBatch]:
    """Our own view: rows sorted into consecutive groups (p…, q…)."""
    order = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])
    batch = RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=x["mask"][order],
        rewards=x["rewards"][order],
        logp_old=x["old"][order],
        entropy_old=x["entropy"][order],
        group_size=G,
        logp_ref=x["ref"][order],
    )
    return order, batch


def _actor_config(**changes) -> ActorConfig:
    return ActorConfig(
        strategy="fsdp", ppo_micro_batch_size_per_gpu=1, rollout_n=G, clip_ratio=0.2, **changes
    )


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_getters_find_ours_under_refimpl_names(name: str) -> None:
    assert core_algos.get_adv_estimator_fn(f"refimpl_{name}") is rv.ESTIMATORS[name]
    assert core_algos.get_policy_loss_fn(f"refimpl_{name}") is rv.POLICY_LOSSES[name]


def test_plain_aliases_for_what_verl_lacks_and_verl_own_names_untouched() -> None:
    for name in ("gtpo", "grpo_s", "tepo"):
        assert core_algos.get_adv_estimator_fn(name) is rv.ESTIMATORS[name]
        assert core_algos.get_policy_loss_fn(name) is rv.POLICY_LOSSES[name]
    assert core_algos.get_adv_estimator_fn("grpo") is core_algos.compute_grpo_outcome_advantage
    assert core_algos.get_policy_loss_fn("vanilla") is core_algos.compute_policy_loss_vanilla


def test_registering_twice_is_harmless() -> None:
    rv.register()
    assert core_algos.get_adv_estimator_fn("refimpl_gtpo") is rv.ESTIMATORS["gtpo"]


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_estimators_agree_with_our_modules(name: str) -> None:
    """Called as verl calls them (rewards on one token, uid index, shuffled rows), the
    registered estimator returns our module's advantages in verl's row order."""
    x = _inputs()
    fn = core_algos.get_adv_estimator_fn(f"refimpl_{name}")
    if algorithms.get(name).Config().values_needed() is not None:
        # Monte-Carlo values of π_old (VinePPO): verl's rollout side samples none, so the
        # estimator refuses rather than train on made-up values.
        with pytest.raises(ValueError, match=rf"^refimpl_{name}: expected .*docs/scaleup\.md"):
            fn(token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"],
               config=None, entropy_old=x["entropy"])  # fmt: skip
        return
    adv, returns = fn(
        token_level_rewards=x["tlr"],
        response_mask=x["mask"],
        index=x["index"],
        config=None,
        entropy_old=x["entropy"],
    )
    order, batch = _grouped(x)
    module = algorithms.get(name)
    cfg = module.Config()
    expected = module.advantages(batch, cfg)
    if name == "gpg":
        expected = expected * 1.0  # both groups have mixed rewards: α = B/(B−0) = 1
    torch.testing.assert_close(adv[order], expected)
    assert torch.equal(adv, returns)
    assert bool((adv[x["mask"] == 0] == 0).all())


def test_entropy_reaches_the_estimator_through_the_context() -> None:
    x = _inputs()
    fn = core_algos.get_adv_estimator_fn("gtpo")
    with pytest.raises(ValueError, match="entropy_old"):
        fn(token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"])
    with rv.rollout_entropy(x["entropy"]):
        via_context, _ = fn(
            token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"], config=None
        )
    direct, _ = fn(
        token_level_rewards=x["tlr"],
        response_mask=x["mask"],
        index=x["index"],
        entropy_old=x["entropy"],
    )
    torch.testing.assert_close(via_context, direct)
    # And the entropies matter: other entropies, other GTPO advantages.
    other, _ = fn(
        token_level_rewards=x["tlr"],
        response_mask=x["mask"],
        index=x["index"],
        entropy_old=x["entropy"].flip(1),
    )
    assert not torch.allclose(other, direct)


def test_grpo_advantages_equal_verl_compute_grpo_outcome_advantage() -> None:
    x = _inputs()
    ours, _ = core_algos.get_adv_estimator_fn("refimpl_grpo")(
        token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"]
    )
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"]
    )
    torch.testing.assert_close(ours, theirs)
    # Dr. GRPO = verl's GRPO without the std division.
    ours, _ = core_algos.get_adv_estimator_fn("refimpl_dr_grpo")(
        token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"]
    )
    theirs, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=x["tlr"],
        response_mask=x["mask"],
        index=x["index"],
        norm_adv_by_std_in_grpo=False,
    )
    torch.testing.assert_close(ours, theirs)


def test_rloo_advantages_equal_verl_compute_rloo_outcome_advantage() -> None:
    """verl ships RLOO: our registered ``refimpl_rloo`` gives the advantages of verl's own
    ``rloo`` estimator, which keeps its name (no alias replaces it)."""
    x = _inputs()
    ours, _ = core_algos.get_adv_estimator_fn("refimpl_rloo")(
        token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"]
    )
    assert core_algos.get_adv_estimator_fn("rloo") is core_algos.compute_rloo_outcome_advantage
    theirs, _ = core_algos.compute_rloo_outcome_advantage(
        token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"]
    )
    torch.testing.assert_close(ours, theirs)


def test_bad_groups_fail_loudly() -> None:
    x = _inputs()
    index = np.array(["p", "p", "p", "q", "q", "q", "q", "q"], dtype=object)
    with pytest.raises(ValueError, match="index"):
        core_algos.get_adv_estimator_fn("refimpl_grpo")(
            token_level_rewards=x["tlr"], response_mask=x["mask"], index=index
        )


def _loss_args(x: dict, adv: torch.Tensor) -> dict:
    return {
        "old_log_prob": x["old"],
        "log_prob": x["new"].clone().requires_grad_(),
        "advantages": adv,
        "response_mask": x["mask"],
    }


def test_dapo_loss_equals_verl_vanilla_with_token_mean() -> None:
    """Same inputs, same ε_low/ε_high: our DAPO loss and gradient equal verl's vanilla loss
    with token-mean aggregation. verl's dual clip (clip_ratio_c = 3) caps −A·w for A < 0 at
    ratios above 3, which DAPO does not have; the inputs keep ratios below 3, and a second
    check shows the difference appears above it."""
    x = _inputs()
    adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"]
    )
    cfg = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28)
    a = _loss_args(x, adv)
    theirs, _ = core_algos.compute_policy_loss_vanilla(**a, loss_agg_mode="token-mean", config=cfg)
    theirs.backward()
    b = _loss_args(x, adv)
    ours, metrics = core_algos.get_policy_loss_fn("refimpl_dapo")(
        **b, loss_agg_mode="token-mean", config=cfg
    )
    ours.backward()
    assert float((x["new"] - x["old"]).exp().max()) < 3.0
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(b["log_prob"].grad, a["log_prob"].grad)
    assert "actor/refimpl/clip_frac_high" in metrics

    x["old"] = x["old"] - 2.0  # room below 0 for the move up
    x["new"] = x["old"] + 2.0 * (adv < 0)  # ratio e² ≈ 7.4 on negative-advantage tokens
    theirs, _ = core_algos.compute_policy_loss_vanilla(
        **_loss_args(x, adv), loss_agg_mode="token-mean", config=cfg
    )
    ours, _ = core_algos.get_policy_loss_fn("refimpl_dapo")(**_loss_args(x, adv), config=cfg)
    assert float(ours.detach()) > float(
        theirs.detach()
    )  # no dual-clip cap: the unclipped −A·w is larger


def test_tepo_policy_term_equals_verl_gspo_with_token_mean() -> None:
    """docs/algorithms/tepo.md: TEPO = verl's gspo loss + token-mean + the KL mask. With β = 0 the
    mask plays no part and the two must agree (value and gradient)."""
    x = _inputs()
    adv, _ = core_algos.compute_grpo_outcome_advantage(
        token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"]
    )
    cfg = _actor_config(clip_ratio_low=0.2, clip_ratio_high=0.28)
    a = _loss_args(x, adv)
    theirs, _ = core_algos.compute_policy_loss_gspo(**a, loss_agg_mode="token-mean", config=cfg)
    theirs.backward()
    b = _loss_args(x, adv)
    os.environ["REFIMPL_CONFIG"] = '{"tepo": {"kl_coef": 0.0}}'
    try:
        ours, _ = core_algos.get_policy_loss_fn("tepo")(**b, config=cfg)
    finally:
        del os.environ["REFIMPL_CONFIG"]
    ours.backward()
    torch.testing.assert_close(ours, theirs)
    torch.testing.assert_close(b["log_prob"].grad, a["log_prob"].grad)


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_policy_losses_agree_with_our_modules(name: str) -> None:
    """With the entropies and reference log-probs given through loss_inputs (as the ppo_loss
    hook does), every registered loss equals our module's loss on the same rows."""
    x = _inputs()
    module = algorithms.get(name)
    cfg = module.Config()
    if cfg.values_needed() is not None:
        # VinePPO: refused by the loss as by the estimator (the path cannot run it at all).
        adv = torch.zeros_like(x["mask"])
        with rv.loss_inputs(entropy=x["entropy_now"], entropy_old=x["entropy"], logp_ref=x["ref"]):
            with pytest.raises(ValueError, match=rf"^refimpl_{name}: expected .*scaleup\.md"):
                core_algos.get_policy_loss_fn(f"refimpl_{name}")(
                    **_loss_args(x, adv), config=_actor_config()
                )
        return
    adv, _ = core_algos.get_adv_estimator_fn(f"refimpl_{name}")(
        token_level_rewards=x["tlr"],
        response_mask=x["mask"],
        index=x["index"],
        entropy_old=x["entropy"],
    )
    with rv.loss_inputs(entropy=x["entropy_now"], entropy_old=x["entropy"], logp_ref=x["ref"]):
        ours, _ = core_algos.get_policy_loss_fn(f"refimpl_{name}")(
            **_loss_args(x, adv), config=_actor_config()
        )
    order, batch = _grouped(x)
    if name == "dr_grpo":
        cfg = dataclasses.replace(cfg, max_len=T)
    expected, _ = module.loss(
        batch, x["new"][order], adv[order], cfg, entropy=x["entropy_now"][order]
    )
    torch.testing.assert_close(ours, expected)


@pytest.mark.parametrize("name", ["dapo", "grpo", "gspo", "tepo"])
def test_micro_batches_with_global_counts_sum_to_the_full_batch_loss(name: str) -> None:
    """verl passes global counts (config.global_batch_info) so that micro-batch losses add up
    to the mini-batch loss; ours rescale the same way, for every aggregation mode."""
    x = _inputs()
    adv, _ = core_algos.get_adv_estimator_fn(f"refimpl_{name}")(
        token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"]
    )
    fn = core_algos.get_policy_loss_fn(f"refimpl_{name}")
    full_cfg = _actor_config()
    with rv.loss_inputs(entropy=x["entropy_now"], entropy_old=x["entropy"], logp_ref=x["ref"]):
        full, _ = fn(**_loss_args(x, adv), config=full_cfg)
    total = torch.zeros(())
    for rows in (slice(0, 3), slice(3, 4), slice(4, 8)):
        cfg = _actor_config()
        cfg.global_batch_info.update(
            dp_size=1, batch_num_tokens=x["mask"].sum(), global_batch_size=B
        )
        part = {k: (v[rows] if isinstance(v, torch.Tensor) else v) for k, v in x.items()}
        with rv.loss_inputs(
            entropy=part["entropy_now"], entropy_old=part["entropy"], logp_ref=part["ref"]
        ):
            loss, _ = fn(**_loss_args(part, adv[rows]), config=cfg)
        total = total + loss
    torch.testing.assert_close(total, full)


def test_steer_plain_name_and_whole_rollout_range_refused(monkeypatch) -> None:
    """STEER, which verl lacks, is also registered as ``steer``. Its default normalises over
    the loss call's tokens, which a micro-batch has; ``normalise="batch"`` needs the whole
    rollout's |Ω| range, which no verl policy loss sees: refused, naming the setting."""
    assert core_algos.get_policy_loss_fn("steer") is rv.POLICY_LOSSES["steer"]
    assert core_algos.get_adv_estimator_fn("steer") is rv.ESTIMATORS["steer"]
    x = _inputs()
    adv, _ = core_algos.get_adv_estimator_fn("refimpl_steer")(
        token_level_rewards=x["tlr"], response_mask=x["mask"], index=x["index"]
    )
    fn = core_algos.get_policy_loss_fn("refimpl_steer")
    with rv.loss_inputs(entropy_old=x["entropy"]):
        loss, metrics = fn(**_loss_args(x, adv), config=_actor_config())
    assert torch.isfinite(loss) and "actor/refimpl/steer_weight_mean" in metrics
    monkeypatch.setenv("REFIMPL_CONFIG", '{"steer": {"normalise": "batch"}}')
    with rv.loss_inputs(entropy_old=x["entropy"]), pytest.raises(ValueError, match="normalise"):
        fn(**_loss_args(x, adv), config=_actor_config())


def test_rollout_correction_weights_are_refused() -> None:
    x = _inputs()
    with pytest.raises(ValueError, match="rollout_is_weights"):
        core_algos.get_policy_loss_fn("refimpl_grpo")(
            **_loss_args(x, torch.zeros(B, T)),
            config=_actor_config(),
            rollout_is_weights=torch.ones(B, T),
        )


def test_loadable_through_verl_use_external_modules() -> None:
    """A fresh interpreter with VERL_USE_EXTERNAL_MODULES finds our names right after
    `import verl`, as a Ray worker would."""
    code = (
        "import verl; from verl.trainer.ppo import core_algos as c; "
        "print(c.get_adv_estimator_fn('gtpo').__name__, "
        "c.get_policy_loss_fn('refimpl_tepo').__name__)"
    )
    env = {**os.environ, "VERL_USE_EXTERNAL_MODULES": "refimpl.scaleup.verl"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "compute_refimpl_gtpo_advantage compute_policy_loss_refimpl_tepo" in out.stdout
