"""``make demo``: GRPO, DAPO, GTPO and TEPO on the countdown task from the shipped base model.

    python -m refimpl.demo                # the README's demo (about 90 s on 2 idle cores)
    python -m refimpl.demo --train-base   # train the base model here first (36 s more)
    python -m refimpl.demo --steps 20     # a quick look

It loads the base model shipped with refimpl (``refimpl/base_models/countdown-300``; with
``--train-base`` it trains it here and says whether this machine computed the shipped bits),
names it once, runs ``refimpl compare`` for 60 steps in the default regime at half its prompts per step
(``--prompts-per-step`` 32 × G = 8, 4 minibatches: several optimizer steps per rollout, so
the clip and TEPO's mask act), two runs at a time on one torch thread each (two cores: two
processes × one thread, never more threads than cores), writes ``runs/demo/compare.png`` and
prints two tables. The runs log what the table and the figure read and nothing else (no probe
snapshots, no per-step entropy attribution, no per-run figure): those are the trainer's
diagnostics, ``refimpl train`` keeps them.

1. The comparison's: held-out greedy success at the start and the end (mean of the last three
   evaluations on the runs' 200 held-out problems) and the gain, pass@1 and pass@16, mean
   token entropy, the clip and mask fractions, and the first step at which held-out greedy
   success reached the target (0.40; its legend explains every column).
2. The demo's result, measured to about ±0.012: greedy success of the warm start and of each
   run's last checkpoint on ``--final-problems`` (2000) held-out problems, the same problems
   before and after, and the gain with its standard error. One evaluation on 200 problems has
   a standard error of about 0.035, the size of the differences between algorithms; on 2000
   the paired standard error of the gain is about 0.012. It covers the choice of problems, not
   the RL seed: ``--seeds 0,1,2`` averages over seeds.

Every number is the same run after run on one machine (each run trains on one torch thread);
another CPU rounds differently and prints other digits (``refimpl/runs/cpu_kernels.py``):
docs/benchmarks.md § 0 gives the spread over seeds, which is what carries to any machine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import tyro

from refimpl.compare import CompareConfig, compare
from refimpl.evaluate import solved
from refimpl.plots import group_runs
from refimpl.problem_streams import held_out_rng
from refimpl.runs.checkpoint import load_model_weights
from refimpl.settings.plan import build_task, run_warmstart
from refimpl.settings.train_config import TrainConfig
from refimpl.warmstart import train_warmstart


@dataclass
class DemoConfig:
    """The demo's settings (every one also a flag); the rest are TrainConfig's defaults."""

    algos: str = "grpo,dapo,gtpo,tepo"
    """algorithms to compare"""
    task: str = "countdown"
    """task: countdown (many right answers, so entropy and pass@k move most; docs/benchmarks.md)"""
    seeds: str = "0"
    """RL seeds"""
    steps: int = 60
    """RL steps per run (60 of 32 prompts: the four runs fit 90 s on two cores,
    docs/benchmarks.md § 0)"""
    prompts_per_step: int = 32
    """prompts (groups of G = 8) per rollout: half TrainConfig's 64, for the 90-second budget;
    the learning rate and the four minibatches stay the default regime's"""
    base_steps: int = 300
    """supervised steps of the demo's base model (300: greedy success 0.28 on countdown, room
    to learn; from the default 600-step base, at 0.46, GRPO gains only about +0.10 in 80-100
    steps; docs/benchmarks.md § 0)"""
    eval_every: int = 15
    """steps between held-out evaluations (15: five, at steps 0 to 60)"""
    target: float = 0.4
    """held-out greedy success the table reports the first-reach step of (0.40: from the base
    model's 0.27, within reach of some algorithms in 60 steps, not of all)"""
    runs_dir: Path = Path("runs")
    """where the warm start cache and the runs go"""
    name: str = "demo"
    """comparison directory under runs_dir"""
    workers: int = 0
    """parallel runs (0: one per core, at most 4)"""
    train_base: bool = False
    """train the base model here (36 s) instead of loading the one shipped with refimpl; on
    the machine that trained the shipped one it is the same model, bit for bit (the demo then
    says so); on another CPU its digits may differ (docs/numerics.md)"""
    final_problems: int = 2000
    """held-out problems of the final evaluation (warm start against each run's last
    checkpoint, greedy): the gain's standard error is about 0.012 at 2000"""

    def check(self) -> None:
        """The demo's own flags (compare checks the rest before anything runs)."""
        for name in ("steps", "eval_every", "final_problems", "base_steps", "prompts_per_step"):
            if getattr(self, name) <= 0:
                raise ValueError(
                    f"--{name.replace('_', '-')}: expected a positive integer, "
                    f"got {getattr(self, name)}"
                )


def main(argv: list[str] | None = None) -> int:
    cfg = tyro.cli(DemoConfig, args=argv, description=__doc__)
    try:
        cfg.check()
    except ValueError as err:
        print(f"demo: error: {err}", file=sys.stderr)
        return 2
    train = dataclasses.replace(
        TrainConfig(),
        task=cfg.task,
        steps=cfg.steps,
        prompts_per_step=cfg.prompts_per_step,
        eval_every=cfg.eval_every,
        # What the tables and the figure read, nothing more: no probe snapshots, no entropy
        # attribution, no per-run figure (they change no number of the runs).
        probe_every=0,
        diag_every=0,
        plot=False,
        runs_dir=cfg.runs_dir,
        overwrite=True,
        # One thread per run, in a worker or not: a sum split across threads rounds
        # differently, and the table must not depend on the core count.
        threads=1,
    )
    train = dataclasses.replace(
        train,
        # The shipped base model (countdown-300), the same on every machine; --train-base
        # trains it here instead and says whether this machine computed the shipped bits.
        warmstart=dataclasses.replace(
            train.warmstart,
            runs_dir=cfg.runs_dir,
            steps=cfg.base_steps,
            shipped=not cfg.train_base,
        ),  # fmt: skip
    )
    start = time.perf_counter()
    try:
        base = announce_base_model(train, cfg.train_base)
        with contextlib.redirect_stdout(io.StringIO()):  # the base model is announced above
            _dirs, figure, table = compare(
                CompareConfig(
                    algos=cfg.algos,
                    seeds=cfg.seeds,
                    name=cfg.name,
                    workers=cfg.workers,
                    target=cfg.target,
                    train=train,
                )
            )
    except (ValueError, FileExistsError) as err:
        print(f"demo: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:  # a read-only or full disk
        print(f"demo: error: {err.strerror or err}: {err.filename or ''}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("demo: interrupted (the runs keep their checkpoints)", file=sys.stderr)
        return 130
    trained = time.perf_counter()
    rows = final_gains(_dirs, train, cfg.final_problems, base)
    seconds = time.perf_counter() - start
    print()
    print(table)
    print(TABLE_LEGEND)
    print()
    print(format_gains(rows, cfg.final_problems))
    print(f"\nfigure: {figure}")
    print(
        f"demo finished in {seconds:.0f} s (final evaluation {time.perf_counter() - trained:.0f} s)"
    )
    return 0


#: What the comparison's legend (``plots.format_table``) leaves to the reader.
TABLE_LEGEND = (
    "seeds: runs per algorithm, one per RL seed (the other columns are their mean); gain: "
    "greedy end − greedy start"
)


def announce_base_model(train: TrainConfig, trained_here: bool):
    """The base model every run starts from, loaded (or, with ``--train-base``, trained) once,
    and one line naming it. What loading it prints is dropped (the compare and every run load
    it again, silently); training it is not silent: its notice and whether this machine
    computed the shipped bits are said once, before this line."""
    ws = dataclasses.replace(run_warmstart(train), progress=trained_here)
    if trained_here:
        base = train_warmstart(ws, prefix="--train.warmstart.")
    else:
        with contextlib.redirect_stdout(io.StringIO()):
            base = train_warmstart(ws, prefix="--train.warmstart.")
    print(base_model_line(base.base_record, base.base_report, ws.steps, train.task), flush=True)
    return base


def base_model_line(record: dict, report: dict, steps: int, task: str) -> str:
    """The demo's one line about its base model: which (shipped, trained here or reused from
    this machine's cache), its sha256, where it was trained, its success."""
    where = {
        "shipped": f"the shipped base model {record.get('name', '')}",
        "trained": "a base model trained here",
        "cache": f"a base model this machine trained earlier ({record.get('cache', '')})",
    }.get(record.get("source"), f"a base model ({record.get('source')})")
    success = (
        f"greedy success {report['greedy_success']:.2f} on its check problems"
        if "greedy_success" in report
        else "no success recorded"
    )
    return (
        f"base model: {where} ({steps} supervised steps on {task}; sha256 "
        f"{str(record.get('sha256', ''))[:12]}…, trained on {record.get('trained_on', 'unrecorded')}; "
        f"{success}); every run starts from it"
    )


def greedy_correct(model, task, problems: Sequence, max_new_tokens: int) -> np.ndarray:
    """Per problem, 1.0 when the greedy completion earns reward ≥ 0.5, else 0.0 (what
    ``refimpl.evaluate.success_rate`` averages)."""
    return solved(model, task, problems, greedy=True, max_new_tokens=max_new_tokens)


def paired_gain(before: np.ndarray, after: Sequence[np.ndarray]) -> dict[str, float]:
    """Success before and after (``after``: one 0/1 vector per seed, mean over seeds), the
    gain and its standard error over the problems, std(after − before) / √n (the same
    problems were scored twice, so only the problems that changed add to it)."""
    after = np.asarray(after, dtype=np.float64)
    end = np.mean(after, axis=0)
    diff = end - np.asarray(before, dtype=np.float64)
    n = diff.size
    return {
        "start": float(np.mean(before)),
        "end": float(end.mean()),
        "gain": float(diff.mean()),
        "se": float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan"),
        # Each seed's own gain: their spread is the RL seed's share of the uncertainty, the
        # part the paired standard error (the choice of problems) does not cover.
        "seed_gains": [float(g) for g in after.mean(axis=1) - np.mean(before)],
    }


def final_gains(run_dirs: Sequence[Path], train: TrainConfig, n: int, base=None) -> list[dict]:
    """Per algorithm: greedy success of the warm start and of the runs' last checkpoints
    (mean over seeds) on ``n`` held-out problems, the gain, and its standard error over the
    problems. The problems are the same before and after, so the error is the paired one,
    std(after − before) / √n: smaller than two independent evaluations', and what the gain's
    uncertainty is. One torch thread, so that the numbers do not depend on the core count.
    ``base``: the warm start already loaded (None: load it, silently)."""
    task = build_task(train.task, train.task_args)
    budget = train.max_new_tokens or task.max_new_tokens
    # The runs' held-out set is the first eval_problems of this sequence (same generator).
    problems = task.sample(n, held_out_rng())
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        if base is None:
            with contextlib.redirect_stdout(io.StringIO()):
                base = train_warmstart(
                    dataclasses.replace(run_warmstart(train), progress=False),
                    prefix="--train.warmstart.",
                )
        before = greedy_correct(base, task, problems, budget)
        rows = []
        for label, dirs in group_runs(run_dirs).items():
            after = []
            for d in dirs:
                model = train.warmstart.model.build()
                load_model_weights(Path(d) / "checkpoint", model)
                after.append(greedy_correct(model.eval(), task, problems, budget))
            rows.append({"algo": label, "seeds": len(dirs), **paired_gain(before, after)})
    finally:
        torch.set_num_threads(previous)
    return rows


def format_gains(rows: Sequence[dict], n: int) -> str:
    """The demo's result table: start, end, gain ± standard error; with several seeds, also
    the gain's spread over them (its standard deviation, and the lowest and highest seed)."""
    several = any(r["seeds"] > 1 for r in rows)
    head = f"{'algorithm':<22}{'seeds':>6}{'start':>8}{'end':>8}{'gain ± s.e.':>17}"
    head += f"{'over seeds: sd':>17}{'min … max':>18}" if several else ""
    lines = [
        f"held-out greedy success on {n} problems, warm start → last checkpoint "
        "(± paired standard error over the problems):",
        head,
        "-" * len(head),
    ]
    for r in rows:
        line = (
            f"{r['algo']:<22}{r['seeds']:>6}{r['start']:>8.3f}{r['end']:>8.3f}"
            f"{r['gain']:>+10.3f} ± {r['se']:.3f}"
        )
        if several and len(r["seed_gains"]) > 1:
            gains = r["seed_gains"]
            line += f"{np.std(gains, ddof=1):>17.3f}{min(gains):>+10.3f} … {max(gains):+.3f}"
        lines.append(line)
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
