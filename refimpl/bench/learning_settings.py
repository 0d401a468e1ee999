"""The learning benchmark's settings: ``LearningConfig`` (the ``refimpl bench-learning``
flags, a preset's values filled in), the variants of ``--ablations`` (``parse_variant``) and
one planned ``Run``. The benchmark itself (the run matrix, the training, the files) is
``refimpl.bench.learning``; its summaries and report read these settings too, which is why
they live apart."""

from __future__ import annotations

import dataclasses
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refimpl import algorithms
from refimpl.settings.limits import parse_seeds
from refimpl.settings.presets import PresetName


def parse_variant(label: str) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """``"tepo kl_mask=False minibatches=1"`` → ``("tepo", ("kl_mask=False",),
    {"minibatches": 1})``: the algorithm, its Config overrides (``--algo-args``) and the
    ``TrainConfig`` overrides (any FIELD=VALUE whose field belongs to TrainConfig)."""
    from refimpl.settings.overrides import parse_overrides
    from refimpl.settings.train_config import TrainConfig

    algo, *pairs = label.split()
    algorithms.get(algo)  # ValueError listing the names
    train_fields = typing.get_type_hints(TrainConfig)
    algo_args = tuple(p for p in pairs if p.split("=", 1)[0] not in train_fields)
    train_pairs = tuple(p for p in pairs if p.split("=", 1)[0] in train_fields)
    train_args = parse_overrides(train_pairs, train_fields, f"--ablations ({label!r})")
    return algo, algo_args, train_args


@dataclass
class LearningConfig:
    """Learning benchmark: every algorithm × seeds × tasks at the same sampled-token budget."""

    preset: PresetName = "default"
    """a named regime from preset (default, onpolicy, collapse, longchain: docs/benchmarks.md): it sets the training
    settings and the benchmark's tasks, algorithms, seeds, ablations and budget that you leave
    at their defaults"""
    tasks: str = "countdown"
    """comma-separated tasks (default knobs): countdown, the demo's task, by default"""
    algos: str = ",".join(algorithms.NAMES)
    """comma-separated algorithms"""
    seeds: str = "0,1,2"
    """comma-separated RL seeds"""
    ablations: str = ""
    """comma-separated variants "ALGO FIELD=VALUE ...", each field an algorithm Config field or
    a refimpl train flag ("" for none; left out, the preset's)"""
    ablation_tasks: str = "countdown"
    """tasks the ablations run on"""
    budget_steps: int = 150
    """sampled-token budget, in steps of one batch of reference-length completions"""
    lr: float | None = None
    """Adam learning rate (None: the preset's, else refimpl train's default)"""
    lr_warmup: int | None = None
    """optimizer updates of the learning-rate warm-up (None: refimpl train's default; 0: none, as the
    runs committed before the warm-up existed trained)"""
    prompts_per_step: int | None = None
    """N (None: the preset's)"""
    group_size: int | None = None
    """G (None: the preset's)"""
    eval_every: int = 25
    """steps between held-out evaluations"""
    eval_problems: int = 200
    """held-out problems per evaluation"""
    target_gain: float = 0.05
    """target held-out success = the warm start's + this"""
    collapse_ratio: float = 0.5
    """entropy collapsed when end entropy < this × start entropy"""
    workers: int = 0
    """parallel runs, one torch thread each (0: one per core, at most 4)"""
    quick: bool = False
    """a few-minute size: tiny model, 1 seed, a few steps (checks the report is produced)"""
    out: Path | None = None
    """runs go to <out>/<task>/<label>-s<seed>; report.md, results.json, figures/ next to them
    (None: runs/bench/learning-<preset>)"""
    runs_dir: Path = Path("runs")
    """where the warm-start cache lives"""
    overwrite: bool = False
    """retrain runs that already finished (off: reuse them, so a rerun only reports)"""
    report_only: bool = False
    """train nothing: report the runs under --out that have finished (an interrupted
    benchmark reports its finished runs; seeds then differ between variants)"""

    def __post_init__(self) -> None:
        if self.quick:
            self.seeds = "0"
            self.budget_steps = min(self.budget_steps, 3)
            self.prompts_per_step = 4
            self.group_size = 4
            self.eval_every = 1
            self.eval_problems = 20
        for name in ("budget_steps", "eval_every", "eval_problems"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')}: expected a positive integer")
        if self.workers < 0:
            raise ValueError(
                f"--workers: expected an integer ≥ 0 (0: one per core), got {self.workers}"
            )
        cores = os.cpu_count() or 1
        if self.workers > cores:  # as compare --workers
            raise ValueError(
                f"--workers: expected at most {cores} (the CPU cores of this machine: each "
                f"worker is a process training one run on one thread), got {self.workers}"
            )
        if not (math.isfinite(self.target_gain) and -1 < self.target_gain <= 1):
            raise ValueError(
                "--target-gain: expected a finite gain in (-1, 1] of held-out success (a "
                f"success rate is in [0, 1]), got {self.target_gain}"
            )
        if not (math.isfinite(self.collapse_ratio) and 0 < self.collapse_ratio <= 1):
            raise ValueError(
                "--collapse-ratio: expected a ratio in (0, 1] (collapsed: the end entropy "
                "below this × the start entropy; above 1 an entropy that rose would count), "
                f"got {self.collapse_ratio}"
            )
        if self.prompts_per_step is not None and self.prompts_per_step <= 0:
            raise ValueError("--prompts-per-step: expected a positive integer")
        if self.group_size is not None and self.group_size < 2:
            raise ValueError("--group-size: expected ≥ 2")

    def with_preset(self, explicit: frozenset[str] | None = None) -> LearningConfig:
        """This config with its preset's benchmark settings on the fields the command line did
        not set (``explicit``: ``presets.explicit_fields`` of the argv; None: the fields still
        at their default)."""
        from refimpl.settings import presets

        return presets.fill_defaults(self, presets.get_preset(self.preset).bench, explicit)

    def train_defaults(self):
        """The TrainConfig every run starts from: the preset's regime plus --lr/-N/-G."""
        from refimpl.settings import presets
        from refimpl.settings.train_config import TrainConfig

        train = presets.fill_defaults(TrainConfig(), presets.get_preset(self.preset).train)
        changes = {
            k: getattr(self, k)
            for k in ("lr", "lr_warmup", "prompts_per_step", "group_size")
            if getattr(self, k) is not None
        }
        n = changes.get("prompts_per_step", train.prompts_per_step)
        if n % train.minibatches:
            changes["minibatches"] = 1  # e.g. the quick size's 4 prompts: one minibatch
        if self.quick:
            changes["diag_every"] = 1  # a few steps: attribute every one
        return dataclasses.replace(train, **changes)

    def out_dir(self) -> Path:
        return self.out or Path("runs/bench") / f"learning-{self.preset}"

    def ablation_list(self) -> list[str]:
        return self._list(self.ablations, "ablations") if self.ablations.strip() else []

    def _list(self, text: str, flag: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        if not items:
            raise ValueError(f"--{flag}: expected a comma-separated list")
        repeated = sorted({i for i in items if items.count(i) > 1})
        if repeated:  # two runs would share one run directory
            raise ValueError(f"--{flag}: {text!r} repeats {', '.join(repeated)}")
        return items

    def task_list(self) -> list[str]:
        from toy_envs import TASK_NAMES

        tasks = self._list(self.tasks, "tasks")
        for t in tasks:
            if t not in TASK_NAMES:
                raise ValueError(f"--tasks: expected names from {', '.join(TASK_NAMES)}, got {t!r}")
        return tasks

    def algo_list(self) -> list[str]:
        names = self._list(self.algos, "algos")
        for a in names:
            algorithms.get(a)
        return names

    def seed_list(self) -> list[int]:
        seeds = parse_seeds(self.seeds)
        return [int(s) for s in self._list(",".join(map(str, seeds)), "seeds")]


@dataclass
class Run:
    task: str
    label: str
    algo: str
    algo_args: tuple[str, ...]
    seed: int
    train: Any = field(repr=False)
