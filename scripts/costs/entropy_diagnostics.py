"""What the per-step entropy diagnostics cost, as a share of a default-regime step.

    .venv/bin/python scripts/costs/entropy_diagnostics.py                # ≈ 5 min on 1 thread
    .venv/bin/python scripts/costs/entropy_diagnostics.py --repeats 3    # quicker, noisier

One trainer (GRPO on countdown in the default regime: 64 prompts × G = 8, 4 minibatches,
lr 1e-4, one torch thread) runs the *same* RL step under each mode in turn: its weights and
Adam state are restored before every run, and the step's prompts and completions are seeded by
the step index, so every mode does the same work. The modes are interleaved (A, B, C, D, A, B,
…) so that load from other processes hits them alike; each figure is a median over
``--repeats`` rounds of ``--steps`` distinct steps.

    none        no entropy diagnostic: no entropy_change, no covariances, no prediction
    main        the diagnostics as they were before entropy_change_pred (today's baseline):
                entropy_change on the first 16 groups × 8 completions and the two covariances
                (cov_logp_adv, cov_logp_update)
    before      the same on today's measured rows (one completion from each of the first 32
                groups), without the prediction
    pred        the default step: ``before`` + entropy_change_pred
    attribute   an attribution step (every --diag-every steps): ``pred`` + entropy_attr/* and
                entropy_change_pred_path

The share of a step is (mode − none) / none, a median over the (round, step) pairs. Alongside,
the CPU time spent inside the diagnostics themselves (the observers' ``measure`` of the entropy
change, the covariances and every ``EntropyPredictor`` call) is summed within each step and divided by the
rest of that step: a second, less noisy estimate of the same share. With attribution every k
steps, the mean cost per step is pred + (attribute − pred) / k, printed for a few k.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import torch
import tyro

from refimpl import core
from refimpl.bench import format_machine, machine_info
from refimpl.diagnostics import entropy_attribution, observers
from refimpl.diagnostics.observers import Covariance, EntropyChange
from refimpl.settings.train_config import TrainConfig
from refimpl.train import Trainer


@dataclass
class CostConfig:
    """Interleaved timing of the entropy diagnostics on the default regime."""

    steps: int = 3
    """distinct RL steps per round (each is timed once per mode per round)"""
    repeats: int = 5
    """rounds; the figures are medians over them"""
    warmup_steps: int = 3
    """RL steps trained first, so that Adam has a state and the step is a typical one"""
    algo: str = "grpo"
    """algorithm"""
    runs_dir: Path = Path("runs")
    """where the warm-start cache lives (a run directory is written under it)"""


class _NoPredictor:
    """An EntropyPredictor that does nothing (the ``none`` and ``before`` modes)."""

    attribute = False

    def forward_done(self, *_a) -> None:
        pass

    def before_step(self, *_a) -> None:
        pass

    def after_step(self) -> None:
        pass

    def finish(self) -> dict:
        return {}


class _ChangeWithoutPrediction(EntropyChange):
    """``entropy_change`` on today's measured rows, without the prediction (``before``)."""

    def before_update(self, state, batch, samples, adv) -> None:
        self.predictor = _NoPredictor()


class _Change16x8(_ChangeWithoutPrediction):
    """``entropy_change`` as it was before the measured rows changed: the first 16 groups
    with all their completions (``main``)."""

    @torch.no_grad()
    def measure(self, state, samples, batch, adv) -> dict:
        measured = slice(0, min(batch.num_groups, 16) * self.group_size)
        with torch.autocast(state.device.type, dtype=torch.bfloat16, enabled=self.bfloat16):
            _, after = samples.policy_logprobs(
                state.model, measured, temperature=self.temperature, with_entropy=True
            )
        mask = batch.response_mask[measured]
        change = core.masked_mean(after.float() - batch.entropy_old[measured], mask)
        return {"entropy_change": float(change)}


#: The observers of each mode, made with the run's settings of the entropy change (the
#: held-out evaluation and the probes do not run in a step).
MODES = {
    "none": lambda settings: [],
    "main": lambda settings: [Covariance(), _Change16x8(**settings)],
    "before": lambda settings: [Covariance(), _ChangeWithoutPrediction(**settings)],
    "pred": lambda settings: [Covariance(), EntropyChange(**settings)],
    "attribute": lambda settings: [Covariance(), EntropyChange(**settings)],
}


def _mode(trainer: Trainer, name: str):
    """A context that makes ``trainer.train_step`` compute the diagnostics of mode ``name``."""
    every = 1 if name == "attribute" else 0  # 0: never an attribution step
    default = next(o for o in trainer.observers if type(o) is EntropyChange)
    observers = MODES[name]({**default.settings, "diag_every": every})
    return [mock.patch.object(trainer, "observers", observers)]


class _Clock:
    """CPU time spent inside the wrapped diagnostic calls, summed until ``take``."""

    def __init__(self) -> None:
        self.spent = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            c0 = time.process_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self.spent += time.process_time() - c0

        return timed

    def take(self) -> float:
        spent, self.spent = self.spent, 0.0
        return spent


def _clocked(trainer: Trainer, clock: _Clock):
    """Patches that time every diagnostic call of a step (they must be the outermost ones)."""
    predictor_cls = entropy_attribution.EntropyPredictor
    patches = [
        mock.patch.object(
            observers,
            "logp_advantage_covariance",
            clock.wrap(observers.logp_advantage_covariance),
        ),
    ]
    for observer in trainer.observers:
        if isinstance(observer, EntropyChange):
            patches.append(mock.patch.object(observer, "measure", clock.wrap(observer.measure)))
    for name in ("__init__", "forward_done", "before_step", "after_step", "finish"):
        patches.append(
            mock.patch.object(predictor_cls, name, clock.wrap(getattr(predictor_cls, name)))
        )
    return patches


def measure(cfg: CostConfig) -> dict[str, dict[str, list[float]]]:
    torch.set_num_threads(1)
    base = TrainConfig(
        algo=cfg.algo,
        task="countdown",
        runs_dir=cfg.runs_dir,
        name="diagnostics-cost",
        overwrite=True,
        progress=False,
        plot=False,
        threads=1,
        probe_every=0,
    )
    trainer = Trainer(base)
    for _ in range(cfg.warmup_steps):
        trainer.train_step()
        trainer.step += 1
    start_step = trainer.step
    saved = [
        (copy.deepcopy(trainer.model.state_dict()), copy.deepcopy(trainer.optimizer.state_dict()))
    ]
    # The start of each timed step: train the steps once (default mode) and save the state.
    for _ in range(cfg.steps - 1):
        trainer.train_step()
        trainer.step += 1
        saved.append(
            (
                copy.deepcopy(trainer.model.state_dict()),
                copy.deepcopy(trainer.optimizer.state_dict()),
            )
        )
    modes = ("none", "main", "before", "pred", "attribute")
    times: dict[str, list[float]] = {m: [] for m in modes}
    cpu: dict[str, list[float]] = {m: [] for m in modes}
    inside: dict[str, list[float]] = {m: [] for m in modes}
    clock = _Clock()
    for _round in range(cfg.repeats):
        for i, (weights, adam) in enumerate(saved):
            for name in modes:
                trainer.model.load_state_dict(weights)
                trainer.optimizer.load_state_dict(adam)
                trainer.step = start_step + i
                patches = _mode(trainer, name)
                for p in patches:
                    p.start()
                timers = _clocked(trainer, clock)  # around what the mode left in place
                for p in timers:
                    p.start()
                patches += timers
                try:
                    clock.take()
                    t0, c0 = time.perf_counter(), time.process_time()
                    trainer.train_step()
                    times[name].append(time.perf_counter() - t0)
                    cpu[name].append(time.process_time() - c0)
                    spent = clock.take()
                    inside[name].append(spent / (cpu[name][-1] - spent))
                finally:
                    for p in reversed(patches):
                        p.stop()
    return {"wall": times, "cpu": cpu, "inside": inside}


def _shares(times: dict[str, list[float]]) -> dict[str, float]:
    """Per mode: the median over (round, step) of its time / the same step's ``none`` − 1."""
    none = times["none"]
    return {m: statistics.median(t / n - 1 for t, n in zip(v, none)) for m, v in times.items()}


def report(
    cfg: CostConfig, times: dict[str, dict[str, list[float]]], info: dict, wall: float
) -> str:
    wall_share, cpu_share = _shares(times["wall"]), _shares(times["cpu"])
    lines = [
        f"Machine: {format_machine(info)}. Wall time {wall:.0f} s; {cfg.algo}, default regime "
        f"on countdown, one torch thread, {cfg.repeats} rounds × {cfg.steps} steps per mode, "
        "interleaved. Cost: median over the (round, step) pairs of the step's time in that "
        "mode over the same step's time without diagnostics, minus 1; CPU time is the "
        "process's own (other processes' load does not enter it), wall time is what a user "
        "waits.",
        "",
        "| mode | median s/step (wall) | median s/step (CPU) | cost, share of a step (CPU) | "
        "cost (wall) | CPU inside the diagnostics / rest of the step |",
        "|---|---|---|---|---|---|",
    ]
    inside = {m: statistics.median(v) for m, v in times["inside"].items()}
    for m in times["wall"]:
        row = [
            f"{statistics.median(times['wall'][m]):.3f}",
            f"{statistics.median(times['cpu'][m]):.3f}",
        ]
        row += ["-", "-"] if m == "none" else [f"{cpu_share[m]:+.1%}", f"{wall_share[m]:+.1%}"]
        row.append(f"{inside[m]:.1%}")
        lines.append(f"| {m} | " + " | ".join(row) + " |")
    lines += [
        "",
        "| attribution every k steps | mean cost per step (CPU) | (wall) | (CPU inside) |",
        "|---|---|---|---|",
    ]
    for k in (1, 5, 10, 20, 25, 50):
        c = cpu_share["pred"] + (cpu_share["attribute"] - cpu_share["pred"]) / k
        w = wall_share["pred"] + (wall_share["attribute"] - wall_share["pred"]) / k
        i = inside["pred"] + (inside["attribute"] - inside["pred"]) / k
        lines.append(f"| {k} | {c:+.1%} | {w:+.1%} | {i:.1%} |")
    return "\n".join(lines)


def main(cfg: CostConfig) -> None:
    info = machine_info()
    start = time.perf_counter()
    times = measure(cfg)
    print(report(cfg, times, info, time.perf_counter() - start))


if __name__ == "__main__":
    main(tyro.cli(CostConfig))
