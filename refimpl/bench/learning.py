"""``refimpl bench-learning``: does token-level credit assignment help, at toy scale?

Every algorithm × seeds × tasks, plus ablations (``--ablations``: an algorithm with some of
its Config's or the trainer's fields changed), each run starting from the task's one warm
start and stopped when it has **sampled the same number of completion tokens**: dynamic
sampling draws more tokens per step, so a step budget would favour it.

The budget of a task is ``budget_steps × N × G × ℓ``, with ``ℓ`` the mean length (``<eos>``
included) of the reference solutions of its held-out problems: about ``budget_steps`` steps of
an algorithm that samples one batch per step.

This module holds the command: its settings, the run matrix (``plan``), the training
(``run_all``) and the files it writes (``run_learning``). What is computed of the runs is in
``refimpl.bench.learning_summary`` (each run's figures, their summary over seeds), the report
in ``refimpl.bench.learning_report``. The benchmark measures; the papers' claims are read off
its ``results.json`` by ``scripts/experiments/learning/verdicts.py``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from refimpl import algorithms
from refimpl.bench import machine_info
from refimpl.bench.learning_report import format_report, task_figures
from refimpl.bench.learning_summary import collect, run_metrics
from refimpl.runs.runlog import check_output_file, read_metrics, write_text_atomic
from refimpl.settings.presets import PresetName


def parse_variant(label: str) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """``"tepo kl_mask=False minibatches=1"`` → ``("tepo", ("kl_mask=False",),
    {"minibatches": 1})``: the algorithm, its Config overrides (``--algo-args``) and the
    ``TrainConfig`` overrides (any FIELD=VALUE whose field belongs to TrainConfig)."""
    from refimpl.settings.overrides import parse_overrides
    from refimpl.settings.train import TrainConfig

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
    """a named regime from refimpl.settings.presets (default, onpolicy, collapse): it sets the training
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
    a TrainConfig field ("" for none; left out, the preset's: refimpl.settings.presets)"""
    ablation_tasks: str = "countdown"
    """tasks the ablations run on"""
    budget_steps: int = 150
    """sampled-token budget, in steps of one batch of reference-length completions"""
    lr: float | None = None
    """Adam learning rate (None: the preset's, i.e. TrainConfig's)"""
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
    """retrain runs that already finished (default: reuse them, so a rerun only reports)"""
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

        return presets.fill_defaults(self, presets.get(self.preset).bench, explicit)

    def train_defaults(self):
        """The TrainConfig every run starts from: the preset's regime plus --lr/-N/-G."""
        from refimpl.settings import presets
        from refimpl.settings.train import TrainConfig

        train = presets.fill_defaults(TrainConfig(), presets.get(self.preset).train)
        changes = {
            k: getattr(self, k)
            for k in ("lr", "prompts_per_step", "group_size")
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
        try:
            seeds = [int(s) for s in self.seeds.split(",") if s.strip()]
        except ValueError:
            raise ValueError(
                f"--seeds: expected comma-separated integers, got {self.seeds!r}"
            ) from None
        return [int(s) for s in self._list(",".join(map(str, seeds)), "seeds")]


@dataclass
class Run:
    task: str
    label: str
    algo: str
    algo_args: tuple[str, ...]
    seed: int
    train: Any = field(repr=False)


# ---------------------------------------------------------------------------------------------
# The run matrix, and running it.
# ---------------------------------------------------------------------------------------------


def _task_args(cfg: LearningConfig, task: str) -> tuple[str, ...]:
    """The task knobs of ``task``'s runs: the preset's ``--task-args`` when the preset is about
    that task (``longchain``: chain with 10 to 12 operators), else the task's defaults."""
    train = cfg.train_defaults()
    return tuple(train.task_args) if task == train.task else ()


def _warmstart(cfg: LearningConfig, task: str):
    from refimpl.settings.warmstart import ModelConfig, WarmstartConfig

    # The preset's warm start (its steps, its model) on the runs' task and knobs.
    preset_ws = dataclasses.asdict(cfg.train_defaults().warmstart)
    preset_ws.pop("runs_dir")
    preset_ws["model"] = ModelConfig(**preset_ws["model"])
    ws = WarmstartConfig(
        **{**preset_ws, "task": task, "task_args": _task_args(cfg, task)},
        runs_dir=cfg.runs_dir,
    )
    ws = dataclasses.replace(ws, progress=False)
    if cfg.quick:
        ws = dataclasses.replace(
            ws,
            steps=60,
            batch_size=32,
            eval_problems=20,
            model=ModelConfig(n_layer=1, n_embd=32, n_head=2),
        )
    return ws


def token_budget(cfg: LearningConfig, task_name: str) -> tuple[int, float]:
    """``(budget, ℓ)``: tokens per run, and the mean reference completion length ℓ."""
    from refimpl.settings.warmstart import parse_task_args
    from refimpl.streams import held_out_rng
    from toy_envs import TOKENIZER, get_task

    task = get_task(task_name, **dict(parse_task_args(task_name, _task_args(cfg, task_name))))
    train = cfg.train_defaults()
    problems = task.sample(cfg.eval_problems, held_out_rng())
    mean_len = float(
        np.mean([len(TOKENIZER.encode(task.reference_solution(p), add_eos=True)) for p in problems])
    )
    size = train.prompts_per_step * train.group_size
    return int(round(cfg.budget_steps * size * mean_len)), mean_len


def plan(cfg: LearningConfig) -> tuple[list[Run], dict[str, int]]:
    """Every run of the benchmark (not yet trained), and each task's token budget."""
    from refimpl.settings.plan import resolve

    tasks, algos, seeds = cfg.task_list(), cfg.algo_list(), cfg.seed_list()
    ablation_tasks = (
        set(cfg._list(cfg.ablation_tasks, "ablation-tasks")) if cfg.ablations else set()
    )
    ablations = [(label, *parse_variant(label)) for label in cfg.ablation_list()]
    base = cfg.train_defaults()
    budgets, runs = {}, []
    for task in tasks:
        budgets[task] = token_budget(cfg, task)[0]
        variants = [(a, a, (), {}) for a in algos]
        if task in ablation_tasks:
            variants += [v for v in ablations if v[1] in algos]
        for seed in seeds:
            for label, algo, algo_args, train_args in variants:
                name = label.replace(" ", "-").replace("=", "") + f"-s{seed}"
                train = dataclasses.replace(
                    base,
                    algo=algo,
                    task=task,
                    task_args=_task_args(cfg, task),
                    algo_args=algo_args,
                    seed=seed,
                    steps=20 * cfg.budget_steps,
                    max_sampled_tokens=budgets[task],
                    eval_every=cfg.eval_every,
                    eval_problems=cfg.eval_problems,
                    probe_every=cfg.eval_every,  # token-entropy snapshots for notebook 03
                    checkpoint_every=10_000,
                    runs_dir=cfg.out_dir() / task,
                    name=name,
                    overwrite=True,
                    threads=1,
                    progress=False,
                    plot=False,
                    warmstart=_warmstart(cfg, task),
                )
                train = dataclasses.replace(train, **train_args)
                resolve(train)  # fail fast on a bad flag, before any training
                runs.append(Run(task, label, algo, algo_args, seed, train))
    return runs, budgets


def finished(run: Run) -> bool:
    """The run reached its token budget (its last logged step did)."""
    records = read_metrics(run.train.run_dir, missing_ok=True)
    return (
        bool(records)
        and records[-1].get("sampled_tokens", 0) >= run.train.max_sampled_tokens
        and "heldout_greedy" in records[-1]
    )


def run_all(cfg: LearningConfig, runs: list[Run]) -> float:
    """Train the runs that have not finished (in parallel); return the wall time."""
    from refimpl.compare import run_in_workers
    from refimpl.runs.progress import progress
    from refimpl.warmstart import train_warmstart

    for task in cfg.task_list():
        train_warmstart(_warmstart(cfg, task))
    # Seed-major order: an interrupted benchmark leaves whole seeds of every task and variant.
    todo = sorted((r for r in runs if cfg.overwrite or not finished(r)), key=lambda r: r.seed)
    workers = cfg.workers or min(4, os.cpu_count() or 1)
    start = time.perf_counter()
    with progress(len(todo), "bench learning", unit="run") as bar:
        run_in_workers([r.train for r in todo], workers, lambda n: bar.update(n - bar.n))
    return time.perf_counter() - start


# ---------------------------------------------------------------------------------------------
# The files: results.json, report.md, figures.
# ---------------------------------------------------------------------------------------------


def run_learning(
    cfg: LearningConfig, explicit: frozenset[str] | None = None
) -> tuple[dict[str, Any], Path]:
    """Train (or reuse) every run, then write ``report.md``, ``results.json`` and figures.
    ``explicit``: the fields the command line set, which the preset leaves alone."""
    cfg = cfg.with_preset(explicit)
    runs, budgets = plan(cfg)
    for path in output_files(cfg):  # before any run: a link or a file in the way
        check_output_file(path, "--out")
    info = machine_info()
    if cfg.report_only:
        runs = [r for r in runs if finished(r)]
        if not runs:
            raise ValueError(f"--report-only: no finished run under {cfg.out_dir()}")
        wall = sum(
            run_metrics(read_metrics(r.train.run_dir), budgets[r.task], 0.0, 0.5)["time_s"]
            for r in runs
        ) / (cfg.workers or min(4, os.cpu_count() or 1))
    else:
        wall = run_all(cfg, runs)
    results = collect(cfg, runs, budgets)
    figures = task_figures(cfg, runs, budgets, results)
    info_after = machine_info()
    info["load_1_5_15_after"] = info_after["load_1_5_15"]
    payload = {
        "machine": info,
        "wall_s": wall,
        "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()
        },
        "results": results,
    }
    cfg.out_dir().mkdir(parents=True, exist_ok=True)
    write_text_atomic(cfg.out_dir() / "results.json", json.dumps(payload, indent=2, default=str))
    report = cfg.out_dir() / "report.md"
    write_text_atomic(report, format_report(cfg, results, info, wall, figures))
    return payload, report


def output_files(cfg: LearningConfig) -> list[Path]:
    """The files the benchmark writes beside its runs (``--out``): the report, the results,
    the figures of each task (checked before any run is trained)."""
    figures = cfg.out_dir() / "figures"
    return [cfg.out_dir() / "results.json", cfg.out_dir() / "report.md"] + [
        figures / f"bench_{kind}_{task}.png"
        for task in cfg.task_list()
        for kind in ("learning", "ablation")
    ]


def main(cfg: LearningConfig, explicit: frozenset[str] | None = None) -> Path:
    _payload, report = run_learning(cfg, explicit)
    print(report.read_text())
    print(f"report: {report}")
    return report
