"""``refimpl/loop.py`` is the Trainer's loop: on the same settings and the same warm start,
a seeded run through each gives the same loss at every step and the same final weights, bit
for bit, whatever mechanisms the algorithm's Config switches on. The Trainer runs with its
diagnostics on (every step attributed, held-out evaluations, probes), so this also shows
that none of them changes what is trained."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch

from refimpl import algorithms, loop
from refimpl.runs.runlog import read_metrics
from refimpl.settings.plan import run_warmstart
from refimpl.settings.train_config import TrainConfig
from refimpl.train import Trainer
from refimpl.warmstart import train_warmstart
from tests.tiny import tiny_train

#: (algorithm, Config changes): plain GRPO; DAPO with every mechanism of its Config (dynamic
#: sampling, overlong shaping and filter); TEPO (a reference model, the current entropy);
#: the entropy bonus (gradient through the entropy); Dr. GRPO (the generation budget L_max,
#: a KL term); VinePPO (the credit oracle's values of π_old, at its step starts).
CASES = [
    ("grpo", {}),
    ("dapo", {"overlong_filter": True}),
    ("tepo", {}),
    ("entropy_bonus", {}),
    ("dr_grpo", {"kl_coef": 0.01}),
    ("vineppo", {"rollouts": 4}),
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("loop")


def settings(runs: Path, algo: str, changes: dict) -> TrainConfig:
    """Three steps of 4 groups × 4 one-operation chains, two epochs of two minibatches (the
    ratios move off 1), a small gradient clip (so that it acts), a completion budget short
    enough that some rows are truncated."""
    return tiny_train(
        runs,
        algo=algo,
        algo_args=tuple(f"{key}={value}" for key, value in changes.items()),
        steps=3,
        ppo_epochs=2,
        grad_clip=0.5,
        max_new_tokens=6,
        resample_rounds=2,
        eval_every=2,
        eval_problems=8,
        probe_every=1,
        probe_prompts=2,
        diag_every=1,
        threads=1,
        name=f"{algo}-trainer",
    )


def loop_settings(cfg: TrainConfig, changes: dict) -> loop.LoopConfig:
    """The same settings for ``refimpl/loop.py`` (its algorithm Config built here)."""
    return loop.LoopConfig(
        algo=cfg.algo,
        algo_cfg=algorithms.get(cfg.algo).Config(**changes),
        task=cfg.task,
        task_knobs={"num_ops": 1},
        **{
            f.name: getattr(cfg, f.name)
            for f in dataclasses.fields(loop.LoopConfig)
            if f.name not in ("algo", "algo_cfg", "task", "task_knobs")
        },
    )


def run_both(runs: Path, algo: str, changes: dict):
    """The Trainer's logged steps and model, and the loop's steps and model."""
    cfg = settings(runs, algo, changes)
    trainer = Trainer(cfg)
    trainer.run()
    logged = [r for r in read_metrics(cfg.run_dir) if r["step"] > 0]
    model = train_warmstart(run_warmstart(cfg), prefix="--warmstart.")
    history = loop.train(model, loop_settings(cfg, changes), log=lambda line: None)
    return logged, trainer.model, history, model


def same_weights(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.mark.parametrize("algo, changes", CASES, ids=[c[0] for c in CASES])
def test_loop_and_trainer_train_the_same_steps_and_weights(runs, algo, changes):
    logged, trained, history, looped = run_both(runs, algo, changes)
    trained_steps = [(r["step"], r["loss"]) for r in logged if "loss" in r]
    assert trained_steps, "every step was skipped: the comparison would be empty"
    assert [(h["step"], h["loss"]) for h in history] == trained_steps
    assert [h["grad_norm"] for h in history] == [r["grad_norm"] for r in logged if "loss" in r]
    assert any(r["grad_norm"] > 0.5 for r in logged if "loss" in r), "the clip never acted"
    assert same_weights(looped, trained)


def test_the_comparison_sees_a_loop_without_the_gradient_clip(runs, monkeypatch):
    """The test above can fail: the loop with its gradient clip skipped (a one-line change of
    loop.py, made here by replacing the clip for the loop's run only) trains other weights."""
    cfg = dataclasses.replace(settings(runs, "grpo", {}), name="grpo-noclip")
    trainer = Trainer(cfg)
    trainer.run()
    model = train_warmstart(run_warmstart(cfg), prefix="--warmstart.")

    def no_clip(parameters, max_norm):
        parameters = [p for p in parameters if p.grad is not None]
        return torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in parameters]))

    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", no_clip)
    history = loop.train(model, loop_settings(cfg, {}), log=lambda line: None)
    assert history
    assert not same_weights(model, trainer.model)
