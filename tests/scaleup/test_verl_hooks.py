"""``install_hooks``: what it patches with plain verl, and in a fresh interpreter what it
patches when verl's runtime modules are present, and that verl's own advantage step then
hands the rollout entropies to our estimator. Cost: one interpreter, 15-40 s on the 2-core
CI machine (importing verl's trainer; the upper figure with the machine loaded)."""

from __future__ import annotations

import pytest
import torch

from tests.scaleup.multiproc import HERE, child_env, launch, run_once

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]


def test_with_plain_verl_nothing_is_patched() -> None:
    """Plain verl cannot import engine_workers (no uvicorn) nor the v1 trainer (no
    TransferQueue): install_hooks patches nothing and says so; the registries still work.
    (This interpreter has plain verl: the stand-ins below live in a child process only.)"""
    from verl.trainer.ppo import core_algos
    from verl.workers.utils import losses

    from refimpl.scaleup import verl as rv

    assert rv.install_hooks() == []
    assert losses.ppo_loss is not rv.ppo_loss
    assert core_algos.get_adv_estimator_fn("gtpo") is rv.ESTIMATORS["gtpo"]


@pytest.fixture(scope="module")
def hooked(tmp_path_factory) -> dict:
    def produce(out):
        launch([str(HERE / "verl_hooks_run.py"), str(out)], child_env())

    out = run_once(tmp_path_factory, "verl_hooks", produce)
    return torch.load(out / "hooks.pt", weights_only=False)


def test_install_hooks_patches_the_worker_loss_and_the_trainer_advantage_step(hooked) -> None:
    assert all(hooked["before"].values())  # verl's own functions before the call
    assert hooked["installed"] == ["engine_workers.ppo_loss", "PPOTrainer._compute_advantage"]
    assert hooked["installed_again"] == hooked["installed"]
    assert hooked["after"] == {
        "engine_workers.ppo_loss": True,
        "verl_losses.ppo_loss untouched": True,  # wrapped where the worker looks it up
        "PPOTrainer._compute_advantage": True,
        "idempotent": True,  # a second install does not wrap the wrapper
    }


def test_without_the_hook_verl_cannot_give_gtpo_its_entropies(hooked) -> None:
    assert hooked["unhooked_error"] is not None
    assert "entropy_old" in hooked["unhooked_error"]


def test_verl_advantage_step_calls_our_estimator_with_the_batch_entropies(hooked) -> None:
    """verl calls the estimator with rewards, mask, uids and config only (no entropy keyword);
    the hook makes the batch's ``entropy`` field visible, so the advantages verl writes back
    equal our estimator called directly with those entropies."""
    (call,) = hooked["estimator_calls"]
    assert "entropy_old" not in call and {"token_level_rewards", "index"} <= set(call)
    mask = hooked["mask"].bool()
    assert bool(hooked["advantages"][~mask].eq(0).all())
    assert float(hooked["expected"].abs().max()) > 0.1
    torch.testing.assert_close(hooked["advantages"], hooked["expected"])
