"""The diagnostics plug into the Trainer through one interface (``refimpl.diagnostics.observers``): an
observer sees every stage of a step in the documented order, its metrics land in the step's
record, and a Trainer without observers trains the same weights and logs no diagnostic."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from refimpl.diagnostics.observers import Observer, TrainerState
from refimpl.runs.runlog import read_metrics
from refimpl.settings.train_config import TrainConfig
from refimpl.train import Trainer
from tests.tiny import tiny_train

DIAGNOSTICS = ("cov_logp_adv", "cov_logp_update", "entropy_change", "entropy_change_pred")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("observers")


def tiny(runs: Path, **changes) -> TrainConfig:
    """Two steps of 4 groups × 4 one-operation chains in two minibatches."""
    return tiny_train(runs, **{**dict(steps=2, eval_problems=8, threads=1), **changes})


class Recorder(Observer):
    """Writes down each hook it is shown and returns one metric from three of them."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def _seen(self, name: str) -> None:
        self.calls.append(name)

    def start(self, state):
        # the hooks see the run's state, never its settings (those are given when it is made)
        assert isinstance(state, TrainerState) and state.step == 0 and not state.finished
        assert not any(hasattr(state, name) for name in ("cfg", "plan", "algo_cfg"))
        self._seen("start")
        return {"recorded_start": 1.0}

    def before_step(self, state):
        self._seen("before_step")

    def before_update(self, state, batch, samples, adv):
        self._seen("before_update")

    def after_forward(self, state, rows, logp, entropy, loss_entropy):
        assert entropy.requires_grad and not loss_entropy.requires_grad  # GRPO's: detached
        self._seen("after_forward")

    def before_optimizer_step(self, state, rows, logp, loss_entropy, grad_norm):
        assert all(p.grad is not None for p in state.model.parameters())
        self._seen("before_optimizer_step")

    def after_optimizer_step(self, state, minibatch, logp):
        self._seen("after_optimizer_step")
        return {"recorded_per_optimizer_step": float(len(self.calls))}

    def after_update(self, state):
        self._seen("after_update")

    def measure(self, state, samples, batch, adv):
        self._seen("measure")
        return {"recorded_measure": 2.0}

    def after_step(self, state, metrics):
        assert metrics["step"] == state.step
        self._seen("after_step")

    def end(self, state):
        assert state.step == 2 and state.finished  # the run's two steps are done
        self._seen("end")


def test_an_observer_sees_each_stage_in_order_and_its_metrics_are_logged(runs):
    recorder = Recorder()
    run_dir = Trainer(tiny(runs, name="recorded"), observers=[recorder]).run()
    optimizer_step = ["after_forward", "before_optimizer_step", "after_optimizer_step"]
    step = ["before_step", "before_update", *optimizer_step * 2, "after_update", "measure"]
    assert recorder.calls == ["start", *(step + ["after_step"]) * 2, "end"]
    records = read_metrics(run_dir)
    assert records[0] == {"step": 0, "sampled_tokens": 0, "recorded_start": 1.0}
    for r in records[1:]:
        assert r["recorded_measure"] == 2.0
        assert "recorded_per_optimizer_step" in r  # averaged over the step's two updates
        assert not any(key in r for key in DIAGNOSTICS) and "heldout_greedy" not in r


def test_the_default_diagnostics_change_nothing_that_is_trained(runs):
    bare = Trainer(tiny(runs, name="bare"), observers=[])
    bare.run()
    watched = Trainer(tiny(runs, name="watched", diag_every=1, probe_every=1))
    watched.run()
    records = read_metrics(watched.run_dir)
    assert all(key in records[-1] for key in DIAGNOSTICS) and "heldout_greedy" in records[-1]
    assert any(k.startswith("entropy_attr/") for k in records[-1])
    losses = [r["loss"] for r in read_metrics(bare.run_dir) if "loss" in r]
    assert losses and losses == [r["loss"] for r in records if "loss" in r]
    a, b = bare.model.state_dict(), watched.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
