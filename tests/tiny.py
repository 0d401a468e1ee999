"""The tiny warm start the trainer-level tests share: a 1-layer d=32 GPT trained 200 steps on
one-operation chains, which solves about half of them (so groups hold right and wrong answers
and every algorithm has a gradient). One definition, so the tests train (and cache) one model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from refimpl.settings.train_config import TrainConfig
from refimpl.settings.warmstart_config import ModelSize, WarmstartConfig


def tiny_warmstart(runs: Path) -> WarmstartConfig:
    return WarmstartConfig(
        steps=200,
        batch_size=64,
        lr=3e-3,
        runs_dir=runs,
        eval_problems=20,
        progress=False,
        model=ModelSize(n_layer=1, n_embd=32, n_head=2),
    )


def tiny_train(runs: Path, **changes) -> TrainConfig:
    """The trainer-level tests' common settings: 4 groups × 4 one-operation chains per step in
    two minibatches, lr 1e-3 from :func:`tiny_warmstart`, nothing printed or plotted, no probes;
    each test passes what it varies (steps, evaluations, epochs, ...)."""
    base = TrainConfig(
        task_args=("num_ops=1",),
        prompts_per_step=4,
        group_size=4,
        minibatches=2,
        lr=1e-3,
        eval_samples=2,
        probe_every=0,
        runs_dir=runs,
        progress=False,
        plot=False,
        warmstart=tiny_warmstart(runs),
    )
    return dataclasses.replace(base, **changes)


def enumerable_batch(runs_dir: Path, budget: int, temperature: float):
    """``(model, task, problems, samples, outcome)``: a policy that solves some one-digit
    additions (1 layer, d = 32, 150 warm-start steps; greedy ≈ 0.3), 3 prompts × 2 completions
    sampled at ``temperature`` within ``budget`` tokens, their outcomes: small enough that
    every continuation can be enumerated (``credit_oracle.reference_values``)."""
    import numpy as np
    import torch

    from refimpl.sampling.groups import sample_groups, seeded_generator
    from refimpl.warmstart import train_warmstart
    from toy_envs import TOKENIZER, get_task

    ws = WarmstartConfig(
        task="addition", task_args=("digits=1",), steps=150, batch_size=64, eval_problems=20,
        model=ModelSize(n_layer=1, n_embd=32, n_head=2, block_size=16),
        runs_dir=runs_dir, progress=False,
    )  # fmt: skip
    model = train_warmstart(ws)
    task = get_task("addition", digits=1)
    problems = task.sample(3, np.random.default_rng(5))
    samples = sample_groups(
        model, [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems], group_size=2,
        max_new_tokens=budget, eos_id=TOKENIZER.eos_id, pad_id=TOKENIZER.pad_id,
        temperature=temperature, generator=seeded_generator(0, 1),
    )  # fmt: skip
    texts = [TOKENIZER.decode(r.tolist()) for r in samples.response_ids]
    outcome = torch.tensor(task.score([p for p in problems for _ in range(2)], texts))
    return model, task, problems, samples, outcome
