"""The loss that runs is ours: in the TRL and verl paths, each training step calls the
algorithm's own ``loss`` and its gradient is the only one that moves the weights.

A minimal integration can ship a loss that is never called: unsloth's compiled GRPO loss, for
one, bypasses TRL's ``_compute_loss``, so reward shaping placed there silently trains plain
GRPO. These tests replace ``refimpl.algorithms.<name>.loss`` by a counting wrapper (the
trainers look the function up on the module at every call) and check, for every algorithm:

* TRL (``RefimplGRPOTrainer``, two optimizer steps on a tiny Qwen2): every step called our
  loss; on the first step the wrapper returns our loss times 0 and no weight moves (so no
  other loss term reaches the optimizer), on the second it returns our loss and the weights
  move. Cost: about 2-3 s per algorithm on 2 CPU cores.
* verl (``verl.workers.utils.losses.ppo_loss``, the micro-batch loss of verl's engine
  training step, behind our ``refimpl.scaleup.verl.ppo_loss`` hook): one call of verl's loss
  is one call of ours, with verl's global token count, and returns our value with our
  gradient. (``test_verl_worker.py`` runs the full two-process training step, slow.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import TrainerCallback

import toy_envs
from refimpl import algorithms
from refimpl.contract import RolloutBatch
from refimpl.scaleup.hf import char_tokenizer
from refimpl.scaleup.trl import RefimplGRPOTrainer
from tests.scaleup.test_trl import grpo_args, parity_reward, tiny_qwen2


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer(toy_envs.TOKENIZER)


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    problems = toy_envs.get_task("addition").sample(4, 0)
    return Dataset.from_list([{"prompt": p.prompt} for p in problems])


class _Counter:
    """Wraps ``module.loss``: counts calls; ``scale`` multiplies the returned loss."""

    def __init__(self, module) -> None:
        self.original = module.loss
        self.calls = 0
        self.scale = 1.0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        total, metrics = self.original(*args, **kwargs)
        return total * self.scale, metrics


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_trl_every_step_runs_our_loss_and_only_ours(
    name, monkeypatch, tokenizer, dataset, tmp_path
) -> None:
    module = algorithms.get(name)
    counter = _Counter(module)
    monkeypatch.setattr(module, "loss", counter)
    model = tiny_qwen2(tokenizer)
    snapshots: list[tuple[int, dict]] = []

    class Steps(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            counter.scale = 0.0 if state.global_step == 0 else 1.0

        def on_step_end(self, args, state, control, **kwargs):
            params = {k: v.detach().clone() for k, v in model.named_parameters()}
            snapshots.append((counter.calls, params))

    cfg = module.Config()
    if getattr(cfg, "dynamic_sampling", False):  # keep every group (G = 4 may be all-even)
        cfg = dataclasses.replace(cfg, dynamic_sampling=False)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    make = dict(model=model, reward_funcs=parity_reward,
                args=grpo_args(tmp_path, weight_decay=0.0), train_dataset=dataset,
                processing_class=tokenizer, algorithm=name, algorithm_config=cfg,
                callbacks=[Steps()])  # fmt: skip
    if cfg.values_needed() is not None:  # VinePPO: refused before any step (test_trl.py)
        with pytest.raises(ValueError, match="docs/scaleup.md"):
            RefimplGRPOTrainer(**make)
        assert counter.calls == 0
        return
    trainer = RefimplGRPOTrainer(**make)
    trainer.train()
    assert len(snapshots) == 2
    (calls_1, after_1), (calls_2, after_2) = snapshots
    assert calls_1 >= 1 and calls_2 > calls_1, "a training step ran without our loss"
    # Step 1, our loss × 0: nothing else produced a gradient, so Adam did not move.
    assert all(torch.equal(before[k], after_1[k]) for k in before)
    # Step 2, our loss: the weights move.
    assert any(not torch.equal(after_1[k], after_2[k]) for k in before)


# ---------------------------------------------------------------------------------------------
# verl: the engine worker's micro-batch loss.
# ---------------------------------------------------------------------------------------------

G, P = 4, 2  # group size; prompt length of every row


def _verl_call(name: str):
    """One call of verl's engine ``ppo_loss`` (through our hook) on a hand batch of 2 groups;
    returns (verl's loss, d loss/d logp, our RolloutBatch, logp, adv, entropy)."""
    from tensordict import TensorDict
    from verl.utils import tensordict_utils as tu
    from verl.workers.config import ActorConfig

    from refimpl.scaleup import verl as rv

    gen = torch.Generator().manual_seed(3)
    lengths = [3, 1, 4, 2, 4, 4, 1, 3]
    B, T = len(lengths), max(lengths)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).float()
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0])
    logp_old = -torch.rand(B, T, generator=gen) * mask
    logp = (logp_old + 0.1 * torch.randn(B, T, generator=gen)).clamp(max=0.0) * mask
    entropy_old = torch.rand(B, T, generator=gen) * mask
    entropy = torch.rand(B, T, generator=gen) * mask
    logp_ref = (logp_old - 0.1 * torch.rand(B, T, generator=gen)) * mask
    uid = np.array([f"g{i // G}" for i in range(B)], dtype=object)
    tlr = torch.zeros(B, T)
    tlr[torch.arange(B), mask.sum(1).long() - 1] = rewards
    adv, _ = rv.ESTIMATORS[name](
        token_level_rewards=tlr, response_mask=mask, index=uid, entropy_old=entropy_old
    )

    def nested(rows):
        return torch.nested.as_nested_tensor(rows, layout=torch.jagged)

    def per_row(x):
        return nested([x[i, :n] for i, n in enumerate(lengths)])

    def packed(x):
        # Model output over prompt + response: position j predicts token j + 1, so the
        # response token k of a row sits at position P − 1 + k; the last position is unused.
        rows = []
        for i, n in enumerate(lengths):
            row = torch.zeros(P + n)
            row = row.index_put((torch.arange(P - 1, P - 1 + n),), x[i, :n])
            rows.append(row)
        return nested(rows)

    logp_leaf = logp.clone().requires_grad_(True)
    data = TensorDict(
        {
            "prompts": nested([torch.ones(P, dtype=torch.long)] * B),
            "responses": nested([torch.ones(n, dtype=torch.long) for n in lengths]),
            "response_mask": nested([torch.ones(n, dtype=torch.long) for n in lengths]),
            "old_log_probs": per_row(logp_old),
            "advantages": per_row(adv),
            "entropy": per_row(entropy_old),
            "ref_log_prob": per_row(logp_ref),
        },
        batch_size=[B],
    )
    tu.assign_non_tensor(
        data, dp_size=1, batch_num_tokens=int(mask.sum()), global_batch_size=B, temperature=1.0
    )
    actor = ActorConfig(
        strategy="fsdp",
        ppo_mini_batch_size=B // G,
        ppo_micro_batch_size_per_gpu=B,
        rollout_n=G,
        use_kl_loss=name == "tepo",
        kl_loss_coef=0.0,
        entropy_coeff=0.0,
        policy_loss={"loss_mode": f"refimpl_{name}"},
    )
    output = {"log_probs": packed(logp_leaf), "entropy": packed(entropy)}
    loss, _ = rv.ppo_loss(actor, output, data)
    (grad,) = torch.autograd.grad(loss, logp_leaf)
    # As the engine paths call ``loss`` (refimpl.scaleup.hf.loss_batch): a micro-batch is one
    # pseudo-group with zero rewards (GPG's α is already folded into verl's advantages).
    batch = RolloutBatch(
        response_ids=torch.ones(B, T, dtype=torch.long),
        response_mask=mask,
        rewards=torch.zeros(B),
        logp_old=logp_old,
        entropy_old=entropy_old,
        group_size=B,
        logp_ref=logp_ref,
    )
    return loss, grad, batch, logp, adv, entropy


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_verl_training_loss_calls_ours_once_per_micro_batch(name, monkeypatch) -> None:
    module = algorithms.get(name)
    counter = _Counter(module)
    monkeypatch.setattr(module, "loss", counter)
    if module.Config().values_needed() is not None:  # VinePPO: refused (test_verl.py)
        with pytest.raises(ValueError, match="docs/scaleup.md"):
            _verl_call(name)
        assert counter.calls == 0
        return
    loss, grad, batch, logp, adv, entropy = _verl_call(name)
    assert counter.calls == 1, "verl's loss did not call ours exactly once"
    # Our loss on the same batch, called directly (unwrapped), gives verl's value and gradient.
    cfg = module.Config()
    if name == "dr_grpo" and cfg.max_len is None:
        cfg = dataclasses.replace(cfg, max_len=batch.response_mask.shape[1])
    leaf = logp.clone().requires_grad_(True)
    ours, _ = counter.original(batch, leaf, adv.float(), cfg, entropy=entropy)
    (our_grad,) = torch.autograd.grad(ours, leaf)
    torch.testing.assert_close(loss.detach(), ours.detach(), rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(grad, our_grad, rtol=1e-5, atol=1e-8)
    assert float(our_grad.abs().sum()) > 0
