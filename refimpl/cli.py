"""The ``refimpl`` command line (tyro: every dataclass field is a flag, with its docstring).

refimpl tasks                                  the tasks and their knobs
refimpl algos                                  the algorithms and their Config fields
refimpl warmstart [--task chain]               train (or reuse) the cached base model
refimpl train --algo gtpo --task chain         one RL run → runs/<task>-<algo>-s<seed>/
refimpl compare --algos grpo,dapo,gtpo,grpo_s,tepo --seeds 0,1
refimpl plot RUN_DIR [RUN_DIR ...]             redraw figures of finished runs
refimpl bench-learning [--quick]               learning benchmark (docs/benchmarks.md)
refimpl bench-speed [--quick]                  speed benchmark (docs/benchmarks.md)
"""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro

from refimpl import algorithms
from refimpl.bench.learning import LearningConfig
from refimpl.bench.speed import SpeedConfig
from refimpl.compare import CompareConfig, compare
from refimpl.train import NonFiniteLossError, TrainConfig, train
from refimpl.warmstart import WarmstartConfig, train_warmstart


@dataclass
class ListTasks:
    """List the tasks, their knobs and one example each."""


@dataclass
class ListAlgos:
    """List the algorithms and the Config fields settable with --algo-args FIELD=VALUE."""


@dataclass
class PlotConfig:
    """Redraw the figures of finished (or interrupted) runs."""

    run_dirs: tyro.conf.Positional[tuple[Path, ...]]
    """run directories (each with metrics.jsonl)"""
    out: Path | None = None
    """comparison figure path when several runs are given (default: compare.png next to them)"""


def _list_tasks() -> None:
    from toy_envs import TASK_NAMES, get_task

    for name in TASK_NAMES:
        task = get_task(name)
        p = task.sample(1, 0)[0]
        knobs = ", ".join(f"{k}={v}" for k, v in task.knobs().items())
        print(f"{name:<15} {p.prompt}{task.reference_solution(p)}    knobs: {knobs}")


def _list_algos() -> None:
    for name in algorithms.NAMES:
        module = algorithms.get(name)
        summary = (module.__doc__ or "").strip().splitlines()[0]
        print(f"{name:<8} {summary}")
        fields = ", ".join(
            f"{f.name}={getattr(module.Config(), f.name)!r}"
            for f in dataclasses.fields(module.Config)
        )
        print(f"         {fields}")


def _plot(cfg: PlotConfig) -> None:
    from refimpl.plots import plot_compare, plot_run

    for d in cfg.run_dirs:
        if not (Path(d) / "metrics.jsonl").exists():
            raise ValueError(f"run_dirs: {d} has no metrics.jsonl")
        print(plot_run(d))
    if len(cfg.run_dirs) > 1:
        out = cfg.out or Path(cfg.run_dirs[0]).parent / "compare.png"
        print(plot_compare(cfg.run_dirs, out))


def main(argv: list[str] | None = None) -> int:
    cmd = tyro.extras.subcommand_cli_from_dict(
        {
            "tasks": ListTasks,
            "algos": ListAlgos,
            "warmstart": WarmstartConfig,
            "train": TrainConfig,
            "compare": CompareConfig,
            "plot": PlotConfig,
            "bench-learning": LearningConfig,
            "bench-speed": SpeedConfig,
        },
        args=argv,
        description=__doc__,
    )
    try:
        if isinstance(cmd, ListTasks):
            _list_tasks()
        elif isinstance(cmd, ListAlgos):
            _list_algos()
        elif isinstance(cmd, WarmstartConfig):
            train_warmstart(cmd)
        elif isinstance(cmd, TrainConfig):
            print(f"run directory: {train(cmd)}")
        elif isinstance(cmd, CompareConfig):
            dirs, figure, table = compare(cmd)
            print(table)
            print(f"figure: {figure}")
        elif isinstance(cmd, PlotConfig):
            _plot(cmd)
        elif isinstance(cmd, LearningConfig):
            from refimpl.bench.learning import main as bench_learning

            bench_learning(cmd)
        elif isinstance(cmd, SpeedConfig):
            from refimpl.bench.speed import main as bench_speed

            bench_speed(cmd)
    except (ValueError, FileExistsError, NonFiniteLossError) as err:
        print(f"refimpl: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
