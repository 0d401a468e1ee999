"""``examples/verl_gtpo_tepo.sh`` composes into a config verl accepts, with our algorithms.

The script itself runs (bash), with its exact overrides, into verl's own ``main_ppo`` entry
point (``@hydra.main`` over verl's ``ppo_trainer.yaml``, ``validate_config``); only Ray and
the GPU workers are replaced by ``verl_compose_check.py``, which converts the algorithm, actor
and rollout sections into verl's config dataclasses and looks our names up in verl's
registries. A key that does not exist or a value verl rejects fails here, on a CPU machine.
Cost: four compositions of 15-40 s each on the 2-core CI machine (importing verl's trainer;
the upper figure with the machine loaded)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from tests.scaleup.multiproc import ROOT, TIMEOUT_S, child_env

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

SCRIPT = ROOT / "examples" / "verl_gtpo_tepo.sh"


def compose(
    tmp_path, algo: str, *extra: str, **env: str
) -> tuple[subprocess.CompletedProcess, dict]:
    """Run the launch script with verl's entry point stopped before Ray; the run's folder is
    tmp_path (Hydra writes its outputs/ there)."""
    out = tmp_path / f"{algo}.json"
    run_env = child_env(
        ALGO=algo,
        PYTHON=sys.executable,
        VERL_ENTRY="tests.scaleup.verl_compose_check",
        REFIMPL_COMPOSE_OUT=str(out),
        HYDRA_FULL_ERROR="1",
        **env,
    )
    run_env.pop("VERL_USE_EXTERNAL_MODULES", None)  # the script must set it itself
    run_env.pop("REFIMPL_CONFIG", None)
    proc = subprocess.run(
        [shutil.which("bash") or "bash", str(SCRIPT), *extra],
        cwd=tmp_path,
        env=run_env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    report = json.loads(out.read_text()) if out.exists() else {}
    return proc, report


@pytest.mark.parametrize("algo", ["gtpo", "tepo"])
def test_the_script_composes_and_validates_with_our_algorithm(tmp_path, algo) -> None:
    proc, report = compose(tmp_path, algo)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "All configuration checks passed" in proc.stdout + proc.stderr  # validate_config ran
    assert report["dataclasses"] == {
        "algorithm": "AlgoConfig",
        "actor": "FSDPActorConfig",
        "rollout": "RolloutConfig",
    }
    # verl imported our module through the variable the script exports, and resolves the
    # script's names to our functions.
    assert report["external_module_loaded"]
    assert report["estimator"] == f"compute_refimpl_{algo}_advantage"
    assert report["policy_loss"] == f"compute_policy_loss_refimpl_{algo}"

    config = report["config"]
    actor = config["actor_rollout_ref"]["actor"]
    assert config["algorithm"]["adv_estimator"] == algo
    assert actor["policy_loss"]["loss_mode"] == algo
    assert actor["calculate_entropy"] is True  # entropies for GTPO's rewards / TEPO's mask
    assert (
        config["algorithm"]["rollout_correction"]["rollout_is"] is None
    )  # our losses refuse IS weights
    if algo == "tepo":  # a reference model for ref_log_prob, verl's own KL weighted 0
        assert actor["use_kl_loss"] is True and actor["kl_loss_coef"] == 0.0
    else:
        assert actor["use_kl_loss"] is False
    # The JSON overrides reach the Ray workers as one string, equal to the driver's.
    env_vars = config["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"]
    assert env_vars["REFIMPL_CONFIG"] == report["env"]["REFIMPL_CONFIG"]
    assert json.loads(env_vars["REFIMPL_CONFIG"]) == {"gtpo": {"alpha_2": 0.1}}


def test_a_misspelt_key_fails(tmp_path) -> None:
    proc, _ = compose(tmp_path, "gtpo", "actor_rollout_ref.actor.calculate_entropyy=True")
    assert proc.returncode != 0
    assert "calculate_entropyy" in proc.stderr


def test_a_value_verl_rejects_fails(tmp_path) -> None:
    proc, report = compose(tmp_path, "gtpo", "actor_rollout_ref.actor.loss_agg_mode=token-meen")
    assert proc.returncode != 0
    assert "Invalid loss_agg_mode: token-meen" in proc.stderr


def test_an_unknown_algorithm_is_refused_by_the_script(tmp_path) -> None:
    proc, _ = compose(tmp_path, "gtpp")
    assert proc.returncode == 2 and "ALGO must be gtpo or tepo" in proc.stderr
