"""The tiny warm start the trainer-level tests share: a 1-layer d=32 GPT trained 200 steps on
one-operation chains, which solves about half of them (so groups hold right and wrong answers
and every algorithm has a gradient). One definition, so the tests train (and cache) one model."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from refimpl.settings.train import TrainConfig
from refimpl.settings.warmstart import ModelConfig, WarmstartConfig


def tiny_warmstart(runs: Path) -> WarmstartConfig:
    return WarmstartConfig(
        steps=200,
        batch_size=64,
        lr=3e-3,
        runs_dir=runs,
        eval_problems=20,
        progress=False,
        model=ModelConfig(n_layer=1, n_embd=32, n_head=2),
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
