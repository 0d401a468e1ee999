"""verl's own ``main_ppo`` entry point, stopped where it would start Ray.

``tests/scaleup/test_verl_launch.py`` runs ``examples/verl_gtpo_tepo.sh`` with
``VERL_ENTRY=tests.scaleup.verl_compose_check``: the script's exact overrides reach verl's
``@hydra.main`` (its config folder, ``ppo_trainer.yaml``, struct mode: an unknown key is an
error), then verl's ``auto_set_device`` and ``validate_config``; only ``run_ppo`` (Ray, the
workers, the GPUs) is replaced. The replacement resolves the config, converts every section
verl's trainer converts into its config dataclasses (whose ``__post_init__`` validate values),
looks the algorithm names up in verl's registries, and writes what it found as JSON to
``$REFIMPL_COMPOSE_OUT`` (exit status 1 if a section does not convert).
"""

from __future__ import annotations

import json
import os
import sys
import traceback

from omegaconf import OmegaConf
from verl.trainer import main_ppo
from verl.trainer.ppo import core_algos
from verl.utils.config import omega_conf_to_dataclass

# Sections the v1 trainer and its workers turn into dataclasses with ``omega_conf_to_dataclass``.
# (``actor_rollout_ref.model`` becomes an ``HFModelConfig``, which loads the tokenizer: it needs
# the model, so it is not checked here.)
SECTIONS = {
    "algorithm": "algorithm",
    "actor": "actor_rollout_ref.actor",
    "rollout": "actor_rollout_ref.rollout",
}


def capture(config, task_runner_class) -> None:  # noqa: ANN001 (verl's run_ppo signature)
    OmegaConf.resolve(config)
    report: dict = {"task_runner": str(task_runner_class)}
    report["dataclasses"] = {}
    for name, path in SECTIONS.items():
        try:
            report["dataclasses"][name] = type(
                omega_conf_to_dataclass(OmegaConf.select(config, path))
            ).__name__
        except Exception:  # reported, the test fails on it
            report["dataclasses"][name] = "ERROR " + traceback.format_exc(limit=3)
    estimator = core_algos.get_adv_estimator_fn(config.algorithm.adv_estimator)
    loss = core_algos.get_policy_loss_fn(config.actor_rollout_ref.actor.policy_loss.loss_mode)
    report["estimator"] = estimator.__name__
    report["policy_loss"] = loss.__name__
    report["external_module_loaded"] = "refimpl.scaleup.verl" in sys.modules
    report["config"] = OmegaConf.to_container(config, resolve=True)
    report["env"] = {k: os.environ.get(k) for k in ("VERL_USE_EXTERNAL_MODULES", "REFIMPL_CONFIG")}
    with open(os.environ["REFIMPL_COMPOSE_OUT"], "w") as f:
        json.dump(report, f, default=str)
    failed = [k for k, v in report["dataclasses"].items() if v.startswith("ERROR")]
    if failed:
        print("\n".join(report["dataclasses"][k] for k in failed), file=sys.stderr)
        raise SystemExit(f"verl rejects the config sections {failed}")


if __name__ == "__main__":
    main_ppo.run_ppo = capture
    main_ppo.main()
