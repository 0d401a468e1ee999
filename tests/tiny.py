"""The tiny warm start the trainer-level tests share: a 1-layer d=32 GPT trained 200 steps on
one-operation chains, which solves about half of them (so groups hold right and wrong answers
and every algorithm has a gradient). One definition, so the tests train (and cache) one model."""

from __future__ import annotations

from pathlib import Path

from refimpl.runs.settings import ModelConfig, WarmstartConfig


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
