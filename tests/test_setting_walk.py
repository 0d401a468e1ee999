"""A setting's walk stays short (docs/design.md, "A setting's path"): followed from the
trainer's entry, ``refimpl.train.run_training``, to the first ``Trainer.train_step``. The
counts are ``scripts/dev/setting_walk.py``'s, a call graph, the same on every machine:

- call by call (a function entered with a settings object, or an object that holds one,
  counted once), for a new run at the default warm start (its base model the shipped one):
  at most 31 stops in at most 11 files. Issue 48's bound was 30 (it measured 57 stops in 13
  files before the layout it asked for) on a walk whose base model was trained; that walk
  is 31 stops in 10 files, the one stop more being the base model's one room that issue 60
  asks for (``refimpl.warmstart.choose_base``, the call that takes the warm start's settings
  and chooses shipped, cached or trained). Loading the shipped model is one file more
  (``runs/shipped``) and one stop more.
- value by value (every entry of every function a value of the settings goes into): a new
  run at the default warm start, whose base model is the shipped one, at most 45 stops in 16
  files, no file entered from another file more than twice (issue 60's goal; it measured the
  walk at 71 stops in 26 files, and this counter measured 60 stops in 17 files, 6 calls into
  ``contract`` alone, before the change that met it). Counting a return to a file as an entry
  too, no file more than 4 times (``refimpl.train`` and ``runs/rundir``: the Trainer calls out
  from ``__init__`` and ``run``). The same run with a base model trained first: at most 55
  stops in 17 files, 3 entries per file. On it the warm start's identity is computed once,
  and the base model is chosen once, by ``choose_base``."""

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

MAX_STOPS, MAX_FILES = 31, 11
MAX_PATH_STOPS, MAX_PATH_FILES, MAX_ENTRIES_PER_FILE = 45, 16, 2  # the shipped base model
MAX_ENTRIES_WITH_RETURNS = 4  # a return to a file, to call another of its functions, counted
MAX_TRAINED_STOPS, MAX_TRAINED_FILES, MAX_TRAINED_ENTRIES = 55, 17, 3  # base model trained


def test_a_new_runs_setting_reaches_the_step_in_few_stops_and_files(tmp_path):
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

    # value by value: the base model's loading included (the shipped one: a new run's default)
    path, entries = walk.path_stops(), walk.entries()
    assert path[0] == setting_walk.ENTRY and path[-1] == "refimpl.train.Trainer.train_step"
    assert "refimpl.runs.shipped.load" in path and "refimpl.runs.rundir.open_run" in path
    summary = "\n".join(path) + f"\n{entries}"
    assert len(path) <= MAX_PATH_STOPS and len(entries) <= MAX_PATH_FILES, summary
    assert max(entries.values()) <= MAX_ENTRIES_PER_FILE, summary
    assert max(walk.entries_with_returns().values()) <= MAX_ENTRIES_WITH_RETURNS, summary
    # the Config is asked once what the run needs, in one call into the contract
    assert path.count("refimpl.contract.AlgorithmConfig.for_run") == 1
    # the trainer asks the algorithm's Config nothing again: the plan holds the answers
    assert not [p for p in path if p.startswith("refimpl.contract.")
                and path.index(p) > path.index("refimpl.train.Trainer.__init__")]  # fmt: skip


def test_a_trained_base_models_walk_computes_its_identity_and_choice_once(tmp_path):
    threads = torch.get_num_threads()
    try:
        walk = setting_walk.walk(
            ["train", *setting_walk.TINY, *setting_walk.TRAINED_BASE,
             "--runs-dir", str(tmp_path), "--name", "walk"]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    path, entries = walk.path_stops(), walk.entries()
    assert "refimpl.warmstart._train" in path  # the tiny warm start is trained, on the path
    summary = "\n".join(path) + f"\n{entries}"
    assert len(path) <= MAX_TRAINED_STOPS and len(entries) <= MAX_TRAINED_FILES, summary
    assert max(entries.values()) <= MAX_TRAINED_ENTRIES, summary
    # the base model's one room: the identity computed once, the choice made once, and no
    # lookup of the shipped models in run management
    assert path.count("refimpl.settings.warmstart_config.WarmstartConfig.key_inputs") == 1
    assert path.count("refimpl.warmstart.choose_base") == 1
    shipped = [p for p in path if p.startswith("refimpl.runs.shipped.")]
    assert shipped == ["refimpl.runs.shipped.describe_base"], shipped
