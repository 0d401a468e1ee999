"""``make demo``: warm start, then GRPO, DAPO, GTPO and TEPO on the chain task, one figure.

    python -m refimpl.demo               # the README's demo (about 10 minutes on 2 CPU cores)
    python -m refimpl.demo --steps 20    # a quick look

It trains (or reuses) the cached base model, runs ``refimpl compare`` with the settings below,
writes ``runs/demo/compare.png`` and prints a table: held-out success at the start and the
end, the first step at which held-out greedy success reached the target, and the mean token
entropy over the last steps.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

from refimpl.compare import CompareConfig, compare
from refimpl.train import TrainConfig


@dataclass
class DemoConfig:
    """The demo's settings (every one also a flag)."""

    algos: str = "grpo,dapo,gtpo,tepo"
    """algorithms to compare"""
    seeds: str = "0"
    """RL seeds"""
    steps: int = 300
    """RL steps per run"""
    lr: float = 5e-5
    """Adam learning rate"""
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
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(f"--lr: expected a positive learning rate, got {self.lr}")


def main(argv: list[str] | None = None) -> int:
    cfg = tyro.cli(DemoConfig, args=argv, description=__doc__)
    try:
        cfg.check()
    except ValueError as err:
        print(f"demo: error: {err}", file=sys.stderr)
        return 2
    train = dataclasses.replace(
        TrainConfig(),
        steps=cfg.steps,
        lr=cfg.lr,
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
    print(f"\nfigure: {figure}")
    print(f"demo finished in {minutes:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
