"""The speed benchmark's settings (``refimpl bench-speed``): ``SpeedConfig`` and the sizes it
fills in. The benchmark is ``refimpl.bench.speed``; its parts (``speed_sampling``,
``speed_step``, ``speed_trl``) read these settings too, which is why they live apart."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from refimpl.settings.limits import check_threads

#: The sizes ``SpeedConfig`` fills in when they are not given: (full, ``--quick``).
FULL_AND_QUICK_SIZES: dict[str, tuple[Any, Any]] = {
    "repeats": (5, 2),
    "rl_steps": (10, 2),
    "trl_steps": (8, 2),
    "lengths": ((32, 128), (8, 16)),
    "big_batch": ((512, 128), (64, 32)),
    # prefixes × K rollouts, prefix tokens, new tokens: the oracle-sized sampling batch
    "oracle_batch": ((32, 32, 56, 32), (4, 8, 12, 8)),
}


@dataclass
class SpeedConfig:
    """Speed benchmark (figures are medians over repeats; ratios are measured in one run)."""

    repeats: int | None = None
    """timings per figure, the median is reported (None: 5, or 2 with --quick)"""
    threads: int = 1
    """torch CPU threads for every measurement (ours and TRL's alike)"""
    rl_steps: int | None = None
    """RL steps timed for the step breakdown, after one warm-up step (None: 10, or 2 with
    --quick)"""
    trl_steps: int | None = None
    """steps timed for each trainer in the TRL comparison, after one warm-up step (None: 8,
    or 2 with --quick)"""
    trl: bool = True
    """run the TRL comparison (needs the scaleup extra: trl, transformers, datasets)"""
    lengths: tuple[int, ...] | None = None
    """response lengths of the sampling benchmark (None: 32 128, or 8 16 with --quick)"""
    big_batch: tuple[int, int] | None = None
    """B, T of the vectorised-vs-reference comparison (None: 512 128, or 64 32 with --quick)"""
    oracle_batch: tuple[int, int, int, int] | None = None
    """prefixes, K, prefix length, new tokens of the oracle-sized sampling (None: 32 32 56 32,
    i.e. 1,024 rows, or 4 8 12 8 with --quick)"""
    commands: bool = False
    """also time the README's two jobs end to end, once each: the demo (``python -m
    refimpl.demo`` into an empty runs directory) and the test suite (``pytest -n auto`` in the
    repository); about 8 minutes on 2 cores"""
    quick: bool = False
    """tiny sizes (1-layer d = 32 model, few repeats) for what is not typed: checks the report
    is produced"""
    out: Path = Path("runs/bench/speed")
    """where report.md and results.json go"""
    runs_dir: Path = Path("runs")
    """where the warm-start cache lives"""

    def __post_init__(self) -> None:
        # What is not given takes the full size, or the quick one: a size that was typed is
        # kept, --quick or not.
        for name, (full, quick) in FULL_AND_QUICK_SIZES.items():
            if getattr(self, name) is None:
                setattr(self, name, quick if self.quick else full)
        for name in ("repeats", "threads", "rl_steps", "trl_steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')}: expected a positive integer")
        check_threads(self.threads, "--threads")
