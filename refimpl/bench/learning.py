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
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from refimpl.bench import machine_info
from refimpl.bench.learning_report import format_report, task_figures
from refimpl.bench.learning_settings import LearningConfig, Run, parse_variant
from refimpl.bench.learning_summary import collect, run_metrics
from refimpl.bench.result_header import base_models_of, command_line, make_header
from refimpl.runs.runlog import check_output_file, read_json, read_metrics, write_text_atomic

# ---------------------------------------------------------------------------------------------
# The run matrix, and running it.
# ---------------------------------------------------------------------------------------------


def _task_args(cfg: LearningConfig, task: str) -> tuple[str, ...]:
    """The task knobs of ``task``'s runs: the preset's ``--task-args`` when the preset is about
    that task (``longchain``: chain with 10 to 12 operators), else the task's defaults."""
    train = cfg.train_defaults()
    return tuple(train.task_args) if task == train.task else ()


def _warmstart(cfg: LearningConfig, task: str):
    from refimpl.settings.warmstart_config import ModelSize, WarmstartConfig

    # The preset's warm start (its steps, its model) on the runs' task and knobs.
    preset_ws = dataclasses.asdict(cfg.train_defaults().warmstart)
    preset_ws.pop("runs_dir")
    preset_ws["model"] = ModelSize(**preset_ws["model"])
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
            model=ModelSize(n_layer=1, n_embd=32, n_head=2),
        )
    return ws


def token_budget(cfg: LearningConfig, task_name: str) -> tuple[int, float]:
    """``(budget, ℓ)``: tokens per run, and the mean reference completion length ℓ."""
    from refimpl.problem_streams import held_out_rng
    from refimpl.settings.warmstart_config import parse_task_args
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

    for task in cfg.task_list():  # each task's base model, said once here (trained if need be)
        train_warmstart(_warmstart(cfg, task))
    # Seed-major order: an interrupted benchmark leaves whole seeds of every task and variant.
    todo = sorted((r for r in runs if cfg.overwrite or not finished(r)), key=lambda r: r.seed)
    workers = cfg.workers or min(4, os.cpu_count() or 1)
    start = time.perf_counter()
    with progress(len(todo), "bench learning", unit="run") as bar:
        # quiet: the runs load the base models said above, and do not say them once per run
        run_in_workers([r.train for r in todo], workers, lambda n: bar.update(n - bar.n),
                       quiet=True)  # fmt: skip
    return time.perf_counter() - start


# ---------------------------------------------------------------------------------------------
# The files: results.json, report.md, figures.
# ---------------------------------------------------------------------------------------------


def _base_record(run: Run) -> dict | None:
    """The base model a run started from, as its config.json records it (None: unreadable)."""
    try:
        return read_json(run.train.run_dir / "config.json").get("base_model")
    except (OSError, ValueError, AttributeError):
        return None


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
        "header": make_header(
            "learning benchmark",
            command=command_line(),
            seeds=cfg.seed_list(),
            base_models=base_models_of([_base_record(r) for r in runs]),
            evaluation_grid={
                "eval_every_steps": cfg.eval_every,
                "budget_steps": cfg.budget_steps,
                "eval_problems": cfg.eval_problems,
            },
        ),  # fmt: skip
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
