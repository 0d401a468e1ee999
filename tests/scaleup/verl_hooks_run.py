"""``install_hooks`` in a fresh interpreter, then verl's own ``PPOTrainer._compute_advantage``.

Started by ``tests/scaleup/test_verl_hooks.py``: ``python verl_hooks_run.py OUT``.

Plain ``verl`` (no extras) lacks four runtime modules its v1 trainer imports: TransferQueue
(the trainer's key-value store of batch fields), uvicorn and fastapi (the rollout server) and
cachetools (the rollout router). They are provided here as small stand-ins: an in-memory
key-value store with TransferQueue's ``kv_batch_get``/``kv_batch_put`` and empty server
modules. verl's trainer method itself runs unchanged: it reads the fields, pads them, calls
``compute_advantage`` → our registered estimator, and writes the advantages back.

Sequence: import our module with hooks off; run verl's method (GTPO must refuse: no rollout
entropies reach the estimator); ``install_hooks()``; run it again (the hook reads the batch's
``entropy`` field and the advantages equal our estimator called directly with them).
"""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import numpy as np
import torch

os.environ["REFIMPL_VERL_HOOKS"] = "0"  # import without hooks; installed explicitly below


# -- stand-ins for verl's runtime extras ----------------------------------------------------
class KVBatchMeta:
    """The handle verl passes around instead of data: keys of rows in the store."""

    def __init__(self, keys: list[str], partition_id: str = "train") -> None:
        self.keys, self.partition_id, self.extra_info, self.tags = keys, partition_id, {}, []

    def __len__(self) -> int:
        return len(self.keys)


STORE: dict[tuple[str, str], dict] = {}


def kv_batch_get(keys, partition_id, select_fields):
    from verl.utils import tensordict_utils as tu

    rows = [STORE[(partition_id, k)] for k in keys]
    fields = [f for f in select_fields if f in rows[0]]
    return tu.list_of_dict_to_tensordict([{f: row[f] for f in fields} for row in rows])


def kv_batch_put(keys, partition_id, fields):
    for i, key in enumerate(keys):
        for name, value in fields.items():
            STORE[(partition_id, key)][name] = value[i]
    return KVBatchMeta(list(keys), partition_id)


tq = types.ModuleType("transfer_queue")
tq.KVBatchMeta, tq.kv_batch_get, tq.kv_batch_put = KVBatchMeta, kv_batch_get, kv_batch_put
STAND_INS = {"transfer_queue": tq}
for name in ("uvicorn", "fastapi", "cachetools"):
    module = types.ModuleType(name)
    module.Server = module.Config = module.FastAPI = type("Unused", (), {})
    module.LRUCache = dict
    STAND_INS[name] = module
for name, module in STAND_INS.items():
    try:
        __import__(name)
    except ImportError:
        sys.modules[name] = module

# -- verl and our module ------------------------------------------------------------------------
from hydra import compose, initialize_config_dir  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.trainer.ppo.v1 import trainer_base  # noqa: E402
from verl.workers import engine_workers  # noqa: E402
from verl.workers.utils import losses as verl_losses  # noqa: E402

from refimpl.scaleup import verl as rv  # noqa: E402

G = 4
UIDS = [
    "p",
    "q",
    "p",
    "q",
    "p",
    "q",
    "p",
    "q",
]  # groups interleaved, as verl's balancing leaves them
LENGTHS = [3, 5, 2, 4, 5, 1, 4, 3]
REWARDS = [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0]


def fill_store() -> KVBatchMeta:
    gen = torch.Generator().manual_seed(3)
    keys = []
    for i, (uid, n, r) in enumerate(zip(UIDS, LENGTHS, REWARDS)):
        key = f"{uid}_{i}_0"  # verl's {uid}_{session}_{index}
        scores = torch.zeros(n)
        scores[-1] = r  # the outcome reward on the last response token
        STORE[("train", key)] = {
            "uid": uid,
            "response_mask": torch.ones(n, dtype=torch.long),
            "rm_scores": scores,
            "old_log_probs": -torch.rand(n, generator=gen),
            "entropy": 2 * torch.rand(n, generator=gen),
        }
        keys.append(key)
    return KVBatchMeta(keys)


def advantages(meta: KVBatchMeta) -> torch.Tensor:
    return kv_batch_get(meta.keys, "train", ["advantages"]).to_padded_tensor()["advantages"]


def main(out: Path) -> None:
    config_dir = Path(trainer_base.__file__).parents[2] / "config"
    with initialize_config_dir(config_dir=str(config_dir), version_base=None):
        config = compose(
            "ppo_trainer",
            overrides=["algorithm.adv_estimator=gtpo", f"actor_rollout_ref.rollout.n={G}"],
        )
    trainer = types.SimpleNamespace(config=config)  # the method reads only self.config
    original_method = trainer_base.PPOTrainer._compute_advantage
    result: dict = {
        "before": {
            "engine_workers.ppo_loss": engine_workers.ppo_loss is verl_losses.ppo_loss,
            "PPOTrainer._compute_advantage": not hasattr(original_method, "_refimpl_hook"),
        }
    }

    meta = fill_store()
    try:
        trainer_base.PPOTrainer._compute_advantage(trainer, meta, {})
        result["unhooked_error"] = None
    except ValueError as e:
        result["unhooked_error"] = str(e)

    result["installed"] = rv.install_hooks()
    hooked = trainer_base.PPOTrainer._compute_advantage
    result["installed_again"] = rv.install_hooks()
    result["after"] = {
        "engine_workers.ppo_loss": engine_workers.ppo_loss is rv.ppo_loss,
        "verl_losses.ppo_loss untouched": verl_losses.ppo_loss is not rv.ppo_loss,
        "PPOTrainer._compute_advantage": getattr(hooked, "_refimpl_hook", False),
        "idempotent": trainer_base.PPOTrainer._compute_advantage is hooked,
    }

    calls = []
    estimator = core_algos.get_adv_estimator_fn("gtpo")

    def spy(**kwargs):
        calls.append(sorted(kwargs))
        return estimator(**kwargs)

    core_algos.ADV_ESTIMATOR_REGISTRY["gtpo"] = spy
    meta = fill_store()
    trainer_base.PPOTrainer._compute_advantage(trainer, meta, {})
    core_algos.ADV_ESTIMATOR_REGISTRY["gtpo"] = estimator
    result["estimator_calls"] = calls
    result["advantages"] = advantages(meta)

    # Our estimator called directly, with the entropies passed by hand.
    padded = kv_batch_get(meta.keys, "train", ["rm_scores", "response_mask", "entropy"])
    padded = padded.to_padded_tensor()
    expected, _ = estimator(
        token_level_rewards=padded["rm_scores"],
        response_mask=padded["response_mask"],
        index=np.array(UIDS, dtype=object),
        entropy_old=padded["entropy"],
    )
    result["expected"] = expected
    result["mask"] = padded["response_mask"]
    torch.save(result, out / "hooks.pt")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
