"""``make demo``: warm start, then GRPO, DAPO, GTPO and TEPO on the countdown task, one figure.

    python -m refimpl.demo               # the README's demo (under 5 minutes on 2 idle cores)
    python -m refimpl.demo --steps 20    # a quick look

It trains (or reuses) the cached base model, runs ``refimpl compare`` in the default regime
(``TrainConfig``'s defaults: several optimizer steps per rollout, so the clip and TEPO's mask
act), writes ``runs/demo/compare.png`` and prints a table: held-out greedy success at the
start and the end and the gain, pass@1 and pass@16, mean token entropy, the clip and mask
fractions, and the first step at which held-out greedy success reached the target.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

from refimpl.compare import CompareConfig, compare
from refimpl.plots import summary_table
from refimpl.train import TrainConfig


@dataclass
class DemoConfig:
    """The demo's settings (every one also a flag); the rest are TrainConfig's defaults."""

    algos: str = "grpo,dapo,gtpo,tepo"
    """algorithms to compare"""
    task: str = "countdown"
    """task: countdown (many right answers, so entropy and pass@k move most; docs/benchmarks.md)"""
    seeds: str = "0"
    """RL seeds"""
    steps: int = 80
    """RL steps per run (80: four runs in two workers fit the 5-minute budget; docs/benchmarks.md)"""
    eval_every: int = 20
    """steps between held-out evaluations"""
    target: float = 0.5
    """held-out greedy success the table reports the first-reach step of"""
    runs_dir: Path = Path("runs")
    """where the warm start cache and the runs go"""
    name: str = "demo"
    """comparison directory under runs_dir"""
    workers: int = 0
    """parallel runs (0: one per core, at most 4)"""

    def check(self) -> None:
        """The demo's own flags (compare checks the rest before anything runs)."""
        for name in ("steps", "eval_every"):
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
        eval_every=cfg.eval_every,
        runs_dir=cfg.runs_dir,
        overwrite=True,
    )
    train = dataclasses.replace(
        train, warmstart=dataclasses.replace(train.warmstart, runs_dir=cfg.runs_dir)
    )
    start = time.perf_counter()
    try:
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
    minutes = (time.perf_counter() - start) / 60
    print()
    print(table)
    for row in summary_table(_dirs, cfg.target):
        print(
            f"{row['algo']}: held-out greedy success {row['start']:.3f} → {row['final']:.3f}, "
            f"gain {row['gain']:+.3f} over the warm start"
        )
    print(f"\nfigure: {figure}")
    print(f"demo finished in {minutes:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
