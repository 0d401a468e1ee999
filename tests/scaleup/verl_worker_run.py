"""Run verl's own TrainingWorker + FSDP engine on CPU, with our losses, in two gloo processes.

Started by ``tests/scaleup/test_verl_worker.py`` through ``torch.distributed.run``::

    python -m torch.distributed.run --nproc_per_node 2 tests/scaleup/verl_worker_run.py OUT_DIR

Each rank builds ``verl.workers.engine_workers.TrainingWorker`` (FSDP2 engine, SGD), installs
our hooks, and trains one mini-batch per algorithm on its half of a global batch in verl's
no-padding layout (jagged nested tensors, as the v1 trainer writes them). Rank 0 also computes
the reference without verl: our algorithm's loss on the whole batch, log-probs and entropies
from ``refimpl.scaleup.hf.token_logprobs_and_entropy`` on a plain copy of the same weights.
Rank 0 saves both to ``OUT_DIR/results.pt``; the test asserts on them.

What is not verl's code here, and why (each is named in docs/scaleup.md):

* a CPU platform registered through verl's own ``PlatformRegistry`` (verl ships cuda, npu and
  rocm only; without one its platform falls back to CUDA and ``init_device_mesh("cuda")``
  fails), and ``VERL_ENGINE_DEVICE=cuda`` so that ``EngineRegistry`` hands out the FSDP engine
  (registered for cuda and npu) on that platform;
* ``monkey_patch.is_trl_available`` answers False: verl 0.9.1 then imports
  ``AutoModelForCausalLMWithValueHead`` from TRL, which TRL 1.16 no longer has (a value-head
  patch the actor does not use);
* empty ``uvicorn``/``fastapi`` modules when they are not installed: ``engine_workers``
  imports the rollout server module, which the training path never calls.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types
from functools import partial
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

# -- 1. the CPU shims, before verl resolves its platform ---------------------------------------
os.environ["VERL_PLATFORM"] = "cpu"
os.environ["VERL_ENGINE_DEVICE"] = "cuda"  # the key the FSDP engine is registered under
os.environ.setdefault("REFIMPL_VERL_HOOKS", "0")  # installed explicitly below, and checked
for _missing in ("uvicorn", "fastapi"):
    try:
        __import__(_missing)
    except ImportError:
        _stub = types.ModuleType(_missing)
        _stub.Server = _stub.Config = _stub.FastAPI = type("Unused", (), {})
        sys.modules[_missing] = _stub

from verl.plugin.platform import PlatformBase, PlatformRegistry  # noqa: E402


class _CPUDeviceModule:
    """``torch.cpu`` plus the memory queries verl's logging makes on its device module."""

    def __getattr__(self, name: str):
        return getattr(torch.cpu, name)

    @staticmethod
    def mem_get_info(*_a, **_k):
        return (0, 1)

    max_memory_allocated = max_memory_reserved = memory_allocated = memory_reserved = staticmethod(
        lambda *_a, **_k: 0
    )
    empty_cache = staticmethod(lambda: None)
    is_available = staticmethod(lambda: True)
    get_device_name = staticmethod(lambda *_a: "CPU")  # verl's flops table: unknown → inf


@PlatformRegistry.register("cpu")
class PlatformCPU(PlatformBase):
    device_name = "cpu"
    vendor_name = "cpu"
    device_module = _CPUDeviceModule()

    def is_available(self):
        return True

    def current_device(self):
        return torch.device("cpu")

    def device_count(self):
        return 1

    def set_device(self, device_index):
        pass

    def synchronize(self, device_index=None):
        pass

    def manual_seed(self, seed):
        torch.manual_seed(seed)

    def manual_seed_all(self, seed):
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings):
        pass

    def empty_cache(self):
        pass

    def get_device_capability(self, device_index=0):
        return (None, None)

    def communication_backend_name(self):
        return "gloo"

    def visible_devices_envvar(self):
        return "CUDA_VISIBLE_DEVICES"

    @contextlib.contextmanager
    def nvtx_range(self, msg):
        yield

    def profiler_start(self):
        pass

    def profiler_stop(self):
        pass

    def ray_resource_name(self):
        return "CPU"

    def ray_noset_envvars(self):
        return []

    def is_ipc_supported(self):
        return False

    def cudart(self):
        return None


import verl.models.transformers.monkey_patch as _verl_monkey_patch  # noqa: E402

_verl_monkey_patch.is_trl_available = lambda: False

# -- 2. verl's worker, our hooks ---------------------------------------------------------------
from tensordict import TensorDict  # noqa: E402
from transformers import AutoModelForCausalLM  # noqa: E402
from verl.trainer.config import CheckpointConfig  # noqa: E402
from verl.trainer.ppo import core_algos  # noqa: E402
from verl.utils import tensordict_utils as tu  # noqa: E402
from verl.workers import engine_workers  # noqa: E402
from verl.workers.config import (  # noqa: E402
    ActorConfig,
    FSDPEngineConfig,
    FSDPOptimizerConfig,
    HFModelConfig,
    TrainingWorkerConfig,
)

from refimpl import algorithms  # noqa: E402
from refimpl.contract import RolloutBatch  # noqa: E402
from refimpl.scaleup import hf  # noqa: E402
from refimpl.scaleup import verl as rv  # noqa: E402

ALGORITHMS = ("grpo", "dapo", "gtpo", "tepo", "gpg")
G = 4  # group size
N_GROUPS = 3  # 12 rows: rank 0 gets rows 0-5, rank 1 rows 6-11, so group 1 spans both
MICRO = 2  # rows per micro-batch: 3 micro-batches per rank
LR = 0.5  # SGD, no momentum or decay: Δθ = −LR·∇θ exactly


def global_batch(vocab: int, eos: int) -> dict:
    """A deterministic batch of 3 groups × G rows with ragged prompt and response lengths."""
    gen = torch.Generator().manual_seed(11)
    rows = []
    for i in range(N_GROUPS * G):
        p_len = int(torch.randint(2, 6, (1,), generator=gen))
        r_len = int(torch.randint(1, 7, (1,), generator=gen))
        prompt = torch.randint(3, vocab, (p_len,), generator=gen)
        response = torch.randint(3, vocab, (r_len,), generator=gen)
        if i % 3 == 0:
            response[-1] = eos
        rows.append((prompt, response))
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0])
    return {"rows": rows, "rewards": rewards}


def padded(rows: list[tuple[torch.Tensor, torch.Tensor]]):
    """Right-padded prompt+response ids for the HF reference, prompts right-aligned."""
    P = max(len(p) for p, _ in rows)
    T = max(len(r) for _, r in rows)
    B = len(rows)
    ids = torch.zeros(B, P + T, dtype=torch.long)
    attn = torch.zeros(B, P + T, dtype=torch.long)
    mask = torch.zeros(B, T)
    for i, (p, r) in enumerate(rows):
        ids[i, P - len(p) : P] = p
        ids[i, P : P + len(r)] = r
        attn[i, P - len(p) : P + len(r)] = 1
        mask[i, : len(r)] = 1
    return ids, attn, mask, P, T


def reference(model, batch: dict, name: str) -> dict:
    """Our loss on the whole batch, without verl: log-probs/entropies from hf."""
    ids, attn, mask, P, T = padded(batch["rows"])
    logp, entropy = hf.token_logprobs_and_entropy(model, ids, attn, P)
    rb = RolloutBatch(
        response_ids=ids[:, P:],
        response_mask=mask,
        rewards=batch["rewards"],
        logp_old=batch["logp_old"],
        entropy_old=batch["entropy_old"],
        group_size=G,
        logp_ref=batch["logp_ref"],
    )
    module = algorithms.get(name)
    cfg = module.Config()
    loss, _ = module.loss(rb, logp, batch["advantages"], cfg, entropy=entropy.detach())
    model.zero_grad()
    loss.backward()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
    return {"loss": loss.detach(), "grads": grads, "logp": logp.detach(), "entropy": entropy}


def nested(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(tensors, layout=torch.jagged)


def rank_tensordict(batch: dict, rows: range) -> TensorDict:
    """This rank's rows in verl's no-padding layout: one jagged nested tensor per field, as the
    v1 trainer's agent loop and advantage step write them to TransferQueue."""
    prompts, responses, resp_mask, input_ids, position_ids = [], [], [], [], []
    per_token = {"old_log_probs": [], "advantages": [], "entropy": [], "ref_log_prob": []}
    for i in rows:
        p, r = batch["rows"][i]
        n = len(r)
        prompts.append(p)
        responses.append(r)
        resp_mask.append(torch.ones(n, dtype=torch.long))
        input_ids.append(torch.cat([p, r]))
        position_ids.append(torch.arange(len(p) + n))
        per_token["old_log_probs"].append(batch["logp_old"][i, :n])
        per_token["advantages"].append(batch["advantages"][i, :n])
        per_token["entropy"].append(batch["entropy_old"][i, :n])
        per_token["ref_log_prob"].append(batch["logp_ref"][i, :n])
    fields = {
        "prompts": nested(prompts),
        "responses": nested(responses),
        "response_mask": nested(resp_mask),
        "loss_mask": nested(resp_mask),
        "input_ids": nested(input_ids),
        "position_ids": nested(position_ids),
        **{k: nested(v) for k, v in per_token.items()},
    }
    td = TensorDict(fields, batch_size=[len(rows)])
    # What PPOTrainer._update_actor puts in extra_info (global_batch_size = mini-batch · n).
    tu.assign_non_tensor(
        td,
        calculate_entropy=True,
        global_batch_size=N_GROUPS * G,
        mini_batch_size=N_GROUPS * G,
        epochs=1,
        seed=0,
        dataloader_kwargs={"shuffle": False},
        temperature=1.0,
    )
    return td


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def main(out_dir: str) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    model_path = str(Path(out_dir) / "model")
    hooks = rv.install_hooks()
    assert engine_workers.ppo_loss is rv.ppo_loss

    config = TrainingWorkerConfig(
        model_type="language_model",
        model_config=HFModelConfig(
            path=model_path,
            use_remove_padding=False,  # packed sequences need flash-attention varlen
            override_config={"attn_implementation": "eager"},
        ),
        engine_config=FSDPEngineConfig(
            strategy="fsdp2",
            mixed_precision={"param_dtype": "fp32", "reduce_dtype": "fp32"},
            use_torch_compile=False,
            use_dynamic_bsz=False,
            micro_batch_size_per_gpu=MICRO,
        ),
        optimizer_config=FSDPOptimizerConfig(
            optimizer="SGD", lr=LR, weight_decay=0.0, clip_grad=1e9, total_training_steps=10
        ),
        checkpoint_config=CheckpointConfig(),
    )
    worker = engine_workers.TrainingWorker(config)
    worker.reset()
    engine = worker.engine

    plain = AutoModelForCausalLM.from_pretrained(model_path, attn_implementation="eager")
    plain = plain.float()
    vocab, eos = plain.config.vocab_size, plain.config.eos_token_id

    # Spy on what the registered losses receive (verl calls them by registry name).
    seen: list[dict] = []

    results: dict = {"hooks": hooks, "world": world, "algorithms": {}}
    for name in ALGORITHMS:
        # The engine's current weights → the plain reference model.
        state = {k: full(v).detach().clone() for k, v in engine.module.state_dict().items()}
        plain.load_state_dict(state, strict=False)

        batch = global_batch(vocab, eos)
        ids, attn, mask, P, T = padded(batch["rows"])
        with torch.no_grad():
            logp0, ent0 = hf.token_logprobs_and_entropy(plain, ids, attn, P)
        gen = torch.Generator().manual_seed(5)
        batch["logp_old"] = (logp0 + 0.2 * torch.randn(logp0.shape, generator=gen)) * mask
        batch["logp_old"] = batch["logp_old"].clamp(max=0.0)
        batch["entropy_old"] = ent0 * mask
        batch["logp_ref"] = (logp0 - 0.1 * torch.rand(logp0.shape, generator=gen)) * mask
        # Advantages from our estimator, called the way verl's compute_advantage calls it.
        uid = [f"g{i // G}" for i in range(N_GROUPS * G)]
        tlr = torch.zeros_like(mask)
        tlr[torch.arange(len(uid)), mask.sum(1).long() - 1] = batch["rewards"]
        adv, _ = core_algos.get_adv_estimator_fn(f"refimpl_{name}")(
            token_level_rewards=tlr,
            response_mask=mask,
            index=np.array(uid, dtype=object),
            entropy_old=batch["entropy_old"],
        )
        batch["advantages"] = adv

        actor = ActorConfig(
            strategy="fsdp2",
            ppo_mini_batch_size=N_GROUPS,
            ppo_micro_batch_size_per_gpu=MICRO,
            rollout_n=G,
            use_kl_loss=name == "tepo",  # keeps ref_log_prob in the batch (TEPO's own KL)
            kl_loss_coef=0.0,
            entropy_coeff=0.0,
            policy_loss={"loss_mode": f"refimpl_{name}"},
        )
        # As ActorRolloutRefWorker.init_model builds it: engine_workers' ppo_loss, looked up at
        # call time, which install_hooks replaced by ours.
        worker.set_loss_fn(partial(engine_workers.ppo_loss, config=actor))

        original = core_algos.POLICY_LOSS_REGISTRY[f"refimpl_{name}"]

        def spy(*args, _original=original, **kwargs):
            extra = rv._LOSS_INPUTS[-1] if rv._LOSS_INPUTS else {}
            seen.append(
                {
                    "log_prob": kwargs["log_prob"].detach().clone(),
                    "entropy": None if extra.get("entropy") is None else extra["entropy"].clone(),
                    "mask": kwargs["response_mask"].clone(),
                    "info": dict(kwargs["config"].global_batch_info),
                }
            )
            return _original(*args, **kwargs)

        core_algos.POLICY_LOSS_REGISTRY[f"refimpl_{name}"] = spy
        seen.clear()
        ref = reference(plain, batch, name) if rank == 0 else None

        per_rank = len(uid) // world
        rows = range(rank * per_rank, (rank + 1) * per_rank)
        td = rank_tensordict(batch, rows)
        before = {k: full(p).detach().clone() for k, p in engine.module.named_parameters()}
        output = worker.train_mini_batch(td)
        core_algos.POLICY_LOSS_REGISTRY[f"refimpl_{name}"] = original

        after = {k: full(p).detach().clone() for k, p in engine.module.named_parameters()}
        # Every rank's view of the losses it was handed, for the entropy/log-prob check.
        gathered: list = [None] * world
        dist.all_gather_object(gathered, {"rows": list(rows), "seen": seen})
        if rank == 0:
            results["algorithms"][name] = {
                "ref": ref,
                "before": before,
                "after": after,
                "metrics": tu.get(output, "metrics") if output is not None else None,
                "seen": gathered,
                "batch": batch,
            }
    if rank == 0:
        torch.save(results, Path(out_dir) / "results.pt")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
