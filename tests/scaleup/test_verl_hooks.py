"""``install_hooks`` in fresh interpreters: what it patches with plain verl, what it patches
when verl's runtime modules are present, and that verl's own advantage step then hands the
rollout entropies to our estimator. Cost: two interpreters, about 25 s on the 2-core CI."""

from __future__ import annotations

import pytest
import torch

from tests.scaleup.multiproc import HERE, child_env, launch

pytestmark = [pytest.mark.multiprocess]


def test_with_plain_verl_nothing_is_patched() -> None:
    """Plain verl cannot import engine_workers (no uvicorn) nor the v1 trainer (no
    TransferQueue): install_hooks patches nothing and says so; the registries still work."""
    code = (
        "import refimpl.scaleup.verl as rv\n"
        "from verl.workers.utils import losses\n"
        "from verl.trainer.ppo import core_algos as c\n"
        "print('HOOKS', rv.install_hooks())\n"
        "print('LOSS', losses.ppo_loss is rv.ppo_loss)\n"
        "print('EST', c.get_adv_estimator_fn('gtpo').__name__)\n"
    )
    out, _ = launch(["-c", code], child_env())
    assert "HOOKS []" in out
    assert "LOSS False" in out
    assert "EST compute_refimpl_gtpo_advantage" in out


@pytest.fixture(scope="module")
def hooked(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("verl_hooks")
    launch([str(HERE / "verl_hooks_run.py"), str(out)], child_env())
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
