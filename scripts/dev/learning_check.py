"""Does GRPO learn in the default regime? The check that was ``tests/test_train.py``'s
``test_rl_improves_success_on_the_default_task``, moved out of the suite (it took 140 s of
the suite's ~10 minutes on 2 cores; docs/benchmarks.md, "The test suite").

    .venv/bin/python scripts/dev/learning_check.py            # ≈ 2.5 min on one core
    .venv/bin/python scripts/dev/learning_check.py --runs-dir /tmp/check

GRPO in the default regime (``TrainConfig``'s defaults: 64 prompts × 8, 4 minibatches per
rollout) from the default warm start, 50 steps. Two measures, each far above its noise:
held-out pass@1 (16 samples on each of 200 fixed problems; standard error ≈ 0.015) rises by
≥ 0.04, and training success over steps 41-50 beats steps 1-10 by ≥ 0.04 (640 sampled
prompts each). Seeded, so the run is the same every time on a given machine. Prints both
and exits 1 when either falls short.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import refimpl  # noqa: F401  (the numeric path is pinned before torch runs)
from refimpl.runs.runlog import read_metrics
from refimpl.settings.train_config import TrainConfig
from refimpl.settings.warmstart_config import WarmstartConfig
from refimpl.train import run_training

#: The bars, as the test stated them before any run: a rise of 0.04 in each measure.
MIN_RISE = 0.04


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs-dir", type=Path, default=None,
                        help="where the warm start and the run go (default: a new temporary "
                             "directory, removed afterwards)")  # fmt: skip
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        runs = args.runs_dir or Path(tmp)
        cfg = TrainConfig(
            algo="grpo", steps=50, eval_every=50, probe_every=0, checkpoint_every=50,
            runs_dir=runs, name="learns", overwrite=True, progress=True, plot=False,
            warmstart=WarmstartConfig(runs_dir=runs, progress=True),
        )  # fmt: skip
        records = read_metrics(run_training(cfg))
    start, end = records[0], records[-1]
    early = [r["success_rate_all"] for r in records[1:11]]
    late = [r["success_rate_all"] for r in records[41:51]]
    rise_pass1 = end["heldout_pass@1"] - start["heldout_pass@1"]
    rise_train = sum(late) / len(late) - sum(early) / len(early)
    print(f"held-out pass@1 {start['heldout_pass@1']:.3f} → {end['heldout_pass@1']:.3f} "
          f"(rise {rise_pass1:+.3f}, bar {MIN_RISE})")  # fmt: skip
    print(f"training success, steps 1-10 → 41-50: rise {rise_train:+.3f} (bar {MIN_RISE})")
    ok = rise_pass1 >= MIN_RISE and rise_train >= MIN_RISE
    print("learns" if ok else "does NOT learn by the bars above")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
