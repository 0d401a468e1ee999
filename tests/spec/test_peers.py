"""What the docs say about peers (verl 0.9.1, TRL 1.16), checked against the installed peers.

Each claim in ``docs/fidelity.md`` and the module docstrings about how verl or TRL computes
something is pinned here, on the version the ``verl`` / ``scaleup`` extras install. Without
those extras the tests are skipped (the claims are then only as good as the pinned version
named next to them).
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import inspect
from pathlib import Path

import numpy as np
import pytest
import torch

from refimpl import core
from refimpl.algorithms import gpg, gspo
from refimpl.contract import RolloutBatch

pytestmark = pytest.mark.filterwarnings("ignore")


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        pytest.skip(f"{package} is not installed (extra not selected)")


def test_trl_normalises_advantages_with_std_plus_1e_4():
    """TRL 1.16 divides by ``std_rewards + 1e-4``, not our (and verl's) ``+ 1e-6``: read from
    the installed source (no import: TRL takes ~10 s to import)."""
    assert _version("trl").startswith("1.16.")
    spec = importlib.util.find_spec("trl")
    source = (Path(spec.origin).parent / "trainer" / "grpo_trainer.py").read_text()
    assert "advantages = advantages / (std_rewards + 1e-4)" in source
    assert (
        "1e-6" not in source.split("def _generate_and_score_completions")[1].split("\n    def ")[0]
    )


@pytest.fixture(scope="module")
def core_algos():
    _version("verl")
    from verl.trainer.ppo import core_algos

    return core_algos


def test_verl_gspo_defaults_seq_mean_token_mean_and_actor_config_token_mean(core_algos):
    """verl 0.9.1's ``compute_policy_loss_gspo`` has the keyword default
    ``loss_agg_mode="seq-mean-token-mean"``; its actor config passes ``"token-mean"``. So
    "TEPO = verl gspo with token-mean" holds when token-mean is passed (the actor config's
    default, not the function's)."""
    from verl.workers.config import ActorConfig

    assert _version("verl") == "0.9.1"
    signature = inspect.signature(core_algos.compute_policy_loss_gspo)
    assert signature.parameters["loss_agg_mode"].default == "seq-mean-token-mean"
    field = {f.name: f for f in dataclasses.fields(ActorConfig)}["loss_agg_mode"]
    assert field.default == "token-mean"


def _random_loss(seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    loss = torch.randn(6, 5, generator=gen)
    mask = torch.ones(6, 5)
    mask[1, 2:] = 0
    mask[3, 1:] = 0
    mask[4] = 0  # an empty completion: every mode skips it
    return loss, mask


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_verl_agg_loss_same_formulas(core_algos, mode):
    """The three aggregation modes whose names we borrow compute what verl 0.9.1's
    ``agg_loss`` computes, ``seq-mean-token-sum-norm`` with ``loss_scale_factor = L_max``
    (verl's seq-mean of token sums, then ``/ L_max``: ``Σ/(B'·L_max)``)."""
    loss, mask = _random_loss()
    kwargs = {"loss_scale_factor": 16} if mode == "seq-mean-token-sum-norm" else {}
    theirs = core_algos.agg_loss(loss_mat=loss, loss_mask=mask, loss_agg_mode=mode, **kwargs)
    ours = core.aggregate(loss, mask, mode, max_len=16)
    torch.testing.assert_close(ours, theirs.to(ours.dtype), rtol=1e-6, atol=1e-7)


def test_verl_gpg_alpha_counts_nonzero_rewards_not_informative_rows(core_algos):
    """verl 0.9.1's GPG estimator folds ``α = B / count_nonzero(r)`` into the advantages;
    ours is ``B / (B − M)``, M = rows of zero-variance groups. Two groups of four,
    r = [1, 0, 0, 0 | 1, 1, 1, 1]: verl's α = 8/5 = 1.6, so its advantage of the correct
    answer of group 1 is 1.6·(1 − 0.25) = 1.2; ours is α = 8/(8 − 4) = 2 times 0.75 = 1.5
    (and 0 for the all-correct group in both)."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    mask = torch.ones(8, 3)
    token_level = torch.zeros(8, 3)
    token_level[:, -1] = rewards
    index = np.array([0] * 4 + [1] * 4)
    theirs, _ = core_algos.compute_gpg_outcome_advantage(
        token_level_rewards=token_level, response_mask=mask, index=index
    )
    torch.testing.assert_close(theirs[:, 0], torch.tensor([1.2, -0.4, -0.4, -0.4, 0, 0, 0, 0.0]))
    batch = RolloutBatch(
        response_ids=torch.zeros(8, 3, dtype=torch.long),
        response_mask=mask,
        rewards=rewards,
        logp_old=-torch.ones(8, 3),
        entropy_old=torch.ones(8, 3),
        group_size=4,
    )
    cfg = gpg.Config()
    adv = gpg.advantages(batch, cfg)
    _, metrics = gpg.loss(batch, batch.logp_old.clone(), adv, cfg)
    assert metrics["alpha"] == 2.0
    torch.testing.assert_close(
        metrics["alpha"] * adv[:, 0], torch.tensor([1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0.0])
    )


def test_verl_gspo_token_ratio_same_order_of_operations(core_algos):
    """verl 0.9.1 writes the GSPO-token exponent as ``logp − sg[logp] + sg[log s_i]``: the
    stop-gradient difference first, as ``core.sequence_token_ratio``, so its value is
    exactly ``log s_i`` too. At |logp| ≈ 45 our GSPO-token loss with verl's default
    ``seq-mean-token-mean`` equals verl's to float32 rounding."""
    from verl.workers.config import ActorConfig

    gen = torch.Generator().manual_seed(1)
    old = -45.0 - torch.rand(4, 3, generator=gen)
    logp = old + 1e-3 * (2 * torch.rand(4, 3, generator=gen) - 1)
    mask = torch.ones(4, 3)
    adv = torch.tensor([1.0, -1.0, 0.5, -0.5])[:, None].expand(4, 3).contiguous()
    cfg = ActorConfig(
        strategy="fsdp",
        ppo_micro_batch_size_per_gpu=1,
        rollout_n=2,
        clip_ratio_low=3e-4,
        clip_ratio_high=4e-4,
    )
    theirs, _ = core_algos.compute_policy_loss_gspo(
        old_log_prob=old, log_prob=logp, advantages=adv, response_mask=mask, config=cfg
    )
    batch = RolloutBatch(
        response_ids=torch.zeros(4, 3, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        logp_old=old,
        entropy_old=torch.ones(4, 3),
        group_size=2,
    )
    ours, _ = gspo.loss(batch, logp, adv, gspo.Config(loss_agg_mode="seq-mean-token-mean"))
    torch.testing.assert_close(ours, theirs.to(ours.dtype), rtol=0, atol=1e-7)
