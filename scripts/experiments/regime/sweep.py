"""Sweep training regimes of GRPO on the toy task and print one markdown table.

    .venv/bin/python scripts/experiments/regime/sweep.py --variants base,lr2e-4 --seeds 0 \\
        --steps 150
    .venv/bin/python scripts/experiments/regime/sweep.py --list

This is how the default regime (``refimpl.train.TrainConfig`` and the demo) was chosen; the
table it prints is in docs/benchmarks.md. Each variant is a set of changes to a base
``TrainConfig`` (and its warm start); every run is a normal trainer run under
``<out>/<variant>-s<seed>``, so ``refimpl plot`` works on it and a finished run is reused.

Columns: held-out greedy success of the warm start and at the end (mean of the last three
evaluations), the gain, pass@1 and pass@16 at the start and the end, mean token entropy over
the first five steps and the last 10 % of steps, the mean clip fraction (low + high) and
TEPO's mask fraction where logged, steps, and the run's own seconds (training + evaluation,
from ``time_step``/``time_eval``; with ``--workers 2`` two runs share the two cores).
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tyro

from refimpl.compare import run_in_workers
from refimpl.settings.plan import run_warmstart
from refimpl.settings.train_config import TrainConfig
from refimpl.settings.warmstart_config import ModelSize, WarmstartConfig


def _ws(**changes) -> WarmstartConfig:
    return dataclasses.replace(WarmstartConfig(progress=False), **changes)


#: name -> changes to the base TrainConfig (``warmstart`` replaces the whole warm start).
VARIANTS: dict[str, dict] = {
    # the first wave's regime: one update per rollout, 16 × 8, lr 5e-5
    "onpolicy-16x8-lr5e-5": dict(prompts_per_step=16, lr=5e-5, minibatches=1),
    "16x8-lr1e-4-mb4": dict(prompts_per_step=16, lr=1e-4, minibatches=4),
    "32x8-lr1e-4-mb4": dict(prompts_per_step=32, lr=1e-4, minibatches=4),
    "32x8-lr2e-4-mb4": dict(prompts_per_step=32, lr=2e-4, minibatches=4),
    "64x8-lr1e-4-mb4": dict(prompts_per_step=64, lr=1e-4, minibatches=4),
    "64x8-lr2e-4-mb4": dict(prompts_per_step=64, lr=2e-4, minibatches=4),
    "32x8-lr1e-4-mb4-ep2": dict(prompts_per_step=32, lr=1e-4, minibatches=4, ppo_epochs=2),
    "32x8-lr1e-4-mb2": dict(prompts_per_step=32, lr=1e-4, minibatches=2),
    "32x8-lr3e-4-mb4": dict(prompts_per_step=32, lr=3e-4, minibatches=4),
    "ws300-32x8-lr1e-4-mb4": dict(
        prompts_per_step=32, lr=1e-4, minibatches=4, warmstart=_ws(steps=300)
    ),
    "ws300-32x8-lr2e-4-mb4": dict(
        prompts_per_step=32, lr=2e-4, minibatches=4, warmstart=_ws(steps=300)
    ),
    "ws1200-32x8-lr1e-4-mb4": dict(
        prompts_per_step=32, lr=1e-4, minibatches=4, warmstart=_ws(steps=1200)
    ),
    "d64-32x8-lr2e-4-mb4": dict(
        prompts_per_step=32,
        lr=2e-4,
        minibatches=4,
        warmstart=_ws(model=ModelSize(n_embd=64)),
    ),
    "k4-32x8-lr1e-4-mb4": dict(
        prompts_per_step=32, lr=1e-4, minibatches=4, task_args=("num_ops=4",)
    ),
    "ws300-64x8-lr1e-4-mb4": dict(
        prompts_per_step=64, lr=1e-4, minibatches=4, warmstart=_ws(steps=300)
    ),
    "ws300-32x8-lr1e-4-mb2": dict(
        prompts_per_step=32, lr=1e-4, minibatches=2, warmstart=_ws(steps=300)
    ),
    "32x8-lr1e-4-mb2-ep2": dict(prompts_per_step=32, lr=1e-4, minibatches=2, ppo_epochs=2),
    "64x8-lr2e-4-mb2": dict(prompts_per_step=64, lr=2e-4, minibatches=2),
    "dapo-64x8-lr1e-4-mb4": dict(algo="dapo", prompts_per_step=64, lr=1e-4, minibatches=4),
    "k2-64x8-lr1e-4-mb4": dict(
        prompts_per_step=64, lr=1e-4, minibatches=4, task_args=("num_ops=2",)
    ),
    "32x16-lr1e-4-mb4": dict(prompts_per_step=32, group_size=16, lr=1e-4, minibatches=4),
    "ws1200-64x8-lr1e-4-mb4": dict(
        prompts_per_step=64, lr=1e-4, minibatches=4, warmstart=_ws(steps=1200)
    ),
    "countdown-64x8-lr1e-4-mb4": dict(
        task="countdown", prompts_per_step=64, lr=1e-4, minibatches=4
    ),
    "countdown-onpolicy-16x8-lr5e-5": dict(
        task="countdown", prompts_per_step=16, lr=5e-5, minibatches=1
    ),
    "countdown-32x8-lr1e-4-mb4": dict(
        task="countdown", prompts_per_step=32, lr=1e-4, minibatches=4
    ),
    "countdown-64x8-lr1e-4-mb2": dict(
        task="countdown", prompts_per_step=64, lr=1e-4, minibatches=2
    ),
    "countdown-ep2-64x8-lr1e-4-mb4": dict(
        task="countdown", prompts_per_step=64, lr=1e-4, minibatches=4, ppo_epochs=2
    ),
    "ep2-64x8-lr1e-4-mb4": dict(prompts_per_step=64, lr=1e-4, minibatches=4, ppo_epochs=2),
    "ws900-64x8-lr1e-4-mb4": dict(
        prompts_per_step=64, lr=1e-4, minibatches=4, warmstart=_ws(steps=900)
    ),
}


@dataclass
class SweepConfig:
    """Train GRPO (or --algo) under several regimes and print a table."""

    variants: str = "onpolicy-16x8-lr5e-5,32x8-lr1e-4-mb4"
    """comma-separated names from VARIANTS (--list prints them)"""
    algo: str = "grpo"
    """algorithm"""
    seeds: str = "0"
    """comma-separated seeds"""
    steps: int = 150
    """RL steps per run"""
    eval_every: int = 25
    """steps between held-out evaluations"""
    workers: int = 2
    """parallel runs (one torch thread each)"""
    out: Path = Path("runs/regime_sweep")
    """where the runs go"""
    list: bool = False
    """print the variants and exit"""
    report_only: bool = False
    """train nothing: tabulate the runs already under --out (finished or not)"""
    time_steps: int = 0
    """> 0: also time each variant alone for this many steps (one torch thread, no other run;
    on an idle machine) and add the idle seconds per step and the minutes its run would take"""


def summarise(run_dir: Path) -> dict:
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    evals = [r for r in records if "heldout_greedy" in r]
    steps = [r for r in records if "time_step" in r]
    n_end = max(1, len(steps) // 10)

    def mean(rs, key):
        vals = [r[key] for r in rs if key in r]
        return float(np.mean(vals)) if vals else float("nan")

    end = evals[-3:]
    at100 = [r["heldout_greedy"] for r in evals if r["step"] == 100]
    return {
        "at100": at100[0] - evals[0]["heldout_greedy"] if at100 else float("nan"),
        "start": evals[0]["heldout_greedy"],
        "end": mean(end, "heldout_greedy"),
        "p1": (evals[0].get("heldout_pass@1"), mean(end, "heldout_pass@1")),
        "p16": (evals[0].get("heldout_pass@16"), mean(end, "heldout_pass@16")),
        "H": (mean(steps[:5], "entropy_mean"), mean(steps[-n_end:], "entropy_mean")),
        "clip": float(
            np.mean([r.get("clip_frac_low", 0) + r.get("clip_frac_high", 0) for r in steps])
        ),
        "mask": mean(steps, "kl_mask_frac"),
        "steps": len(steps),
        "seconds": sum(r["time_step"] for r in steps) + sum(r.get("time_eval", 0) for r in evals),
    }


def idle_seconds(run_dir: Path) -> tuple[float, float]:
    """(median seconds per RL step, median seconds per evaluation) of a timing run."""
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x]
    steps = [r["time_step"] for r in records if "time_step" in r]
    evals = [r["time_eval"] for r in records if "time_eval" in r]
    return float(np.median(steps)), float(np.median(evals)) if evals else 0.0


def idle_minutes(idle: tuple[float, float], steps: float, cfg: SweepConfig) -> float:
    """Minutes a run of ``steps`` steps takes alone: steps and its evaluations."""
    per_step, per_eval = idle
    return (steps * per_step + (steps // cfg.eval_every + 1) * per_eval) / 60


def plan_runs(cfg: SweepConfig, names: list[str], seeds: list[int]):
    """The runs still to train (finished ones are reused) and, with ``--time-steps``, the
    timing run of each variant: ``(runs, {variant: timing run})``."""
    runs, timed = [], {}
    for name in names:
        changes = dict(VARIANTS[name])
        ws = changes.pop("warmstart", _ws())
        algo = changes.pop("algo", cfg.algo)
        ws = dataclasses.replace(ws, runs_dir=Path("runs"))  # share the warm-start cache
        changes.setdefault("lr_warmup", 0)  # the committed tables ran before the warm-up existed
        for seed in seeds:
            run = TrainConfig(
                algo=algo,
                seed=seed,
                steps=cfg.steps,
                eval_every=cfg.eval_every,
                probe_every=0,
                runs_dir=cfg.out,
                name=f"{name}-s{seed}",
                progress=False,
                plot=False,
                warmstart=ws,
                **changes,
            )
            run = dataclasses.replace(
                run, warmstart=dataclasses.replace(ws, task=run.task, task_args=run.task_args)
            )
            if cfg.time_steps and seed == seeds[0]:
                timed[name] = dataclasses.replace(
                    run,
                    steps=cfg.time_steps,
                    eval_every=cfg.time_steps,
                    runs_dir=cfg.out / "_timing",
                    overwrite=True,
                    threads=1,
                )
            done = run.run_dir / "metrics.jsonl"
            if cfg.report_only:
                continue
            if done.exists() and any(
                json.loads(x)["step"] >= cfg.steps and "heldout_greedy" in json.loads(x)
                for x in done.read_text().splitlines()[-1:]
                if x
            ):
                continue
            runs.append(dataclasses.replace(run, overwrite=True))
    return runs, timed


def train_runs(cfg: SweepConfig, runs: list, timed: dict) -> dict[str, tuple[float, float]]:
    """Train the warm starts, then the runs in ``cfg.workers`` workers, then each timing run
    alone; return each timed variant's :func:`idle_seconds`."""
    # warm starts first, in this process, so the workers only load them
    import torch

    from refimpl.warmstart import train_warmstart

    torch.set_num_threads(1)

    for r in [*runs, *timed.values()]:
        train_warmstart(run_warmstart(r))
    if runs:
        start = time.perf_counter()
        load = os.getloadavg()
        run_in_workers(runs, cfg.workers)
        print(
            f"\n{len(runs)} runs in {time.perf_counter() - start:.0f} s; load average before "
            f"{load[0]:.1f}, after {os.getloadavg()[0]:.1f}\n"
        )
    idle = {}
    if timed:
        load = os.getloadavg()
        for name, run in timed.items():  # one at a time: each has the machine to itself
            run_in_workers([run], 1)
            idle[name] = idle_seconds(run.run_dir)
        print(f"timed {len(timed)} variants alone; load average before {load[0]:.1f}\n")
    return idle


def print_table(cfg: SweepConfig, names: list[str], seeds: list[int], idle: dict) -> None:
    """The markdown table: one row per variant, means over its finished seeds."""
    extra = " idle s/step | idle min/run |" if idle else ""
    print(
        "| variant | seeds | greedy start → end | gain | gain at step 100 | pass@1 start → end | "
        "pass@16 start → end | entropy start → end | clip frac | mask frac | steps | s/run |"
        + extra
    )
    print("|---|" + "---|" * (11 + (2 if idle else 0)))
    for name in names:
        dirs = [cfg.out / f"{name}-s{s}" for s in seeds]
        rows = [summarise(d) for d in dirs if (d / "metrics.jsonl").exists()]
        if not rows:
            continue

        def m(f, rows=rows):
            return float(np.mean([f(r) for r in rows]))

        print(
            f"| {name} | {len(rows)} | {m(lambda r: r['start']):.3f} → {m(lambda r: r['end']):.3f}"
            f" | {m(lambda r: r['end'] - r['start']):+.3f} | {m(lambda r: r['at100']):+.3f}"
            f" | {m(lambda r: r['p1'][0] or 0):.3f} → {m(lambda r: r['p1'][1]):.3f}"
            f" | {m(lambda r: r['p16'][0] or 0):.3f} → {m(lambda r: r['p16'][1]):.3f}"
            f" | {m(lambda r: r['H'][0]):.3f} → {m(lambda r: r['H'][1]):.3f}"
            f" | {m(lambda r: r['clip']):.4f} | {m(lambda r: r['mask']):.4f}"
            f" | {m(lambda r: r['steps']):.0f} | {m(lambda r: r['seconds']):.0f} |"
            + (
                f" {idle[name][0]:.2f} | {idle_minutes(idle[name], m(lambda r: r['steps']), cfg):.1f} |"
                if name in idle
                else (" - | - |" if idle else "")
            )
        )


def main(argv: list[str] | None = None) -> int:
    cfg = tyro.cli(SweepConfig, args=argv, description=__doc__)
    if cfg.list:
        for name, changes in VARIANTS.items():
            print(f"{name:<28} {changes}")
        return 0
    names = [v.strip() for v in cfg.variants.split(",") if v.strip()]
    for n in names:
        if n not in VARIANTS:
            print(f"--variants: unknown {n!r}; --list shows them", file=sys.stderr)
            return 2
    seeds = [int(s) for s in cfg.seeds.split(",")]
    runs, timed = plan_runs(cfg, names, seeds)
    idle = train_runs(cfg, runs, timed)
    print_table(cfg, names, seeds, idle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
