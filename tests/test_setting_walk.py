"""A setting's walk stays short (docs/design.md, "A setting's path"): followed call by call
from the trainer's entry, ``refimpl.train.run_training``, to the first ``Trainer.train_step``, a new
run's settings enter at most 30 functions in at most 10 files (issue 48's bound; it measured
57 stops in 13 files before the layout it asked for). The count is
``scripts/dev/setting_walk.py``'s: a call graph, the same on every machine."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "setting_walk", ROOT / "scripts" / "dev" / "setting_walk.py"
)
setting_walk = importlib.util.module_from_spec(_spec)
sys.modules["setting_walk"] = setting_walk
_spec.loader.exec_module(setting_walk)

MAX_STOPS, MAX_FILES = 30, 10


def test_a_new_runs_setting_reaches_the_step_in_at_most_30_stops_in_10_files(tmp_path):
    threads = torch.get_num_threads()
    try:
        walk = setting_walk.walk(
            ["train", *setting_walk.TINY, "--runs-dir", str(tmp_path), "--name", "walk"]
        )
    finally:
        torch.set_num_threads(threads)  # the tiny run pins one thread
    stops = walk.stop_list()
    # the counter sees the walk it claims to count: from the entry, through the checks, to
    # the step
    assert stops[0] == setting_walk.ENTRY
    assert stops[-1] == "refimpl.train.Trainer.train_step"
    assert "refimpl.settings.train_config.check_train_config" in stops
    assert "refimpl.settings.warmstart_config.WarmstartConfig.check" in stops
    n_stops, n_files = walk.stops()
    assert n_stops == len(stops)
    assert n_stops <= MAX_STOPS and n_files <= MAX_FILES, "\n".join(stops)
