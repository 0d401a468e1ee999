"""Run directories: a new run, ``--overwrite`` and ``--resume`` (the run directory is the
source of truth). ``check_run_dir`` checks them all before anything is written."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path, PurePath
from typing import Any, NamedTuple

from refimpl import numerics
from refimpl.checkpoint import (
    CheckpointError,
    check_deletable,
    check_optimizer_file,
    check_weights_file,
    find_checkpoint,
    read_state,
)
from refimpl.config import TrainConfig, config_dict, resolve
from refimpl.runlog import (
    is_run_dir,
    read_metrics,
    read_run_config,
    versions,
    write_text_atomic,
)

#: The settings a resumed run may change (dotted field names): how long it goes and how it is
#: watched, never what a step computes. Any other difference from the run's config.json is an
#: error naming the flag. The warm-start fields here are those outside its cache key.
RESUME_MAY_CHANGE = frozenset(
    {
        "steps",  # extend the run (not below the step it has reached)
        "max_sampled_tokens",  # extend or set the token budget
        "checkpoint_every",
        "progress",
        "plot",
        "tensorboard",
        "threads",
        "device",
        "runs_dir",  # where the run is now
        "name",
        "resume",
        "overwrite",
        "fresh_optimizer",
        "config",
        "warmstart.runs_dir",
        "warmstart.threads",
        "warmstart.progress",
        "warmstart.force",
        "warmstart.eval_problems",
    }
)
#: Of those, the settings config.json records when a resumed run changes them (they say how
#: long the run is, so that a later --resume or --config gets them back).
RESUME_RECORDED = ("steps", "max_sampled_tokens")


def _flag(dotted: str) -> str:
    return "--" + dotted.replace("_", "-")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def check_resume_settings(cfg: TrainConfig, saved: dict[str, Any], source: Path) -> None:
    """Raise ``ValueError`` naming the first flag whose value differs from the saved run's,
    unless it is one a resumed run may change (``RESUME_MAY_CHANGE``)."""
    now = _flatten(config_dict(cfg))
    defaults = _flatten(config_dict(TrainConfig()))
    was = _flatten(saved)
    for key, value in now.items():
        if key in RESUME_MAY_CHANGE or key.startswith(("warmstart.task",)):
            continue  # warmstart.task/task_args: the trainer uses --task/--task-args
        before = was.get(key, defaults.get(key))
        if value != before:
            raise ValueError(
                f"{_flag(key)}: the run in {source.parent} was made with {before!r}, got "
                f"{value!r}; a resumed run keeps its settings (start a new one with --config "
                f"{source} --name NEW to change them)"
            )


def _writable(path: Path, flag: str, what: str) -> None:
    target = Path(path).absolute()
    while not target.exists() and target != target.parent:
        target = target.parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: {target} is not writable ({what})")


def check_run_dir(cfg: TrainConfig) -> dict[str, Any] | None:
    """Check the run directory before anything is written: a valid ``--name``, ``--resume``
    only of a run (with the same settings, see ``RESUME_MAY_CHANGE``, and a whole
    checkpoint), ``--overwrite`` only of a run, never an existing directory otherwise,
    writable directories. Returns the saved config.json of the run to resume, else None."""
    runs_dir, run_dir = Path(cfg.runs_dir), cfg.run_dir
    if cfg.name is not None:
        parts = cfg.name.replace(os.sep, "/").split("/")
        if (
            not cfg.name.strip()
            or PurePath(cfg.name).is_absolute()
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise ValueError(
                f"--name: expected a directory name inside --runs-dir (no '.', '..' or "
                f"absolute path), got {cfg.name!r}"
            )
    cache_root = (Path(cfg.warmstart.runs_dir) / "warmstart").resolve()
    here = run_dir.resolve()
    if here == cache_root or cache_root in here.parents or here in cache_root.parents:
        raise ValueError(
            f"--name: {run_dir} would hold or sit in the warm-start cache {cache_root}; "
            "choose another name"
        )
    if cfg.resume and cfg.overwrite:
        raise ValueError("--overwrite: cannot be combined with --resume (choose one)")
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--name: {run_dir} exists and is not a directory")
    if cfg.resume:
        if not is_run_dir(run_dir):
            raise ValueError(
                f"--resume: nothing to resume in {run_dir} (no config.json written by refimpl "
                "train); check --name and --runs-dir, or drop --resume to start a new run"
            )
        saved = read_run_config(run_dir)
        check_resume_settings(cfg, saved["train_config"], run_dir / "config.json")
        _writable(run_dir, "--resume", "the resumed run writes its logs and checkpoints there")
        checkpoint = find_checkpoint(run_dir / "checkpoint", warn=False)
        if checkpoint is not None:
            check_weights_file(checkpoint)
            if not cfg.fresh_optimizer:
                check_optimizer_file(checkpoint)
            step = read_state(checkpoint).get("step")
            if not isinstance(step, int):
                raise CheckpointError(f"{checkpoint / 'state.json'}: damaged (no step)")
            if cfg.steps < step:
                raise ValueError(f"--steps: the run is already at step {step}; expected ≥ {step}")
        else:
            logged = max((r["step"] for r in read_metrics(run_dir, missing_ok=True)), default=0)
            every = saved["train_config"].get("checkpoint_every", cfg.checkpoint_every)
            if logged >= every:
                raise CheckpointError(
                    f"{run_dir / 'checkpoint'}: missing, although the run logged step {logged} "
                    f"(a checkpoint every {every} steps); --overwrite starts it again"
                )
        return saved
    if run_dir.exists() and any(run_dir.iterdir()):
        if not cfg.overwrite:
            raise FileExistsError(
                f"run directory {run_dir} already exists: pass --resume to continue it, "
                "--overwrite to start again, or choose another --name"
            )
        if here == runs_dir.resolve():
            raise ValueError(f"--overwrite: {run_dir} is the runs directory itself")
        check_deletable(run_dir, "--overwrite")
        _writable(run_dir.parent, "--overwrite", f"{run_dir} is deleted and written again")
        _writable(run_dir, "--overwrite", f"{run_dir} is deleted and written again")
    else:
        _writable(run_dir, "--runs-dir", f"the run directory {run_dir} is created there")
    return None


class Preflight(NamedTuple):
    """What ``preflight`` checked: ``resolve``'s pieces and the run to resume."""

    algo: Any
    task: Any
    max_new_tokens: int
    algo_cfg: Any
    saved: dict[str, Any] | None
    """the saved config.json of the run to resume, None for a new run"""


def preflight(cfg: TrainConfig) -> Preflight:
    """Every check a run makes before it writes anything or trains its warm start: the
    flags (``resolve``), the run directory (``check_run_dir``) and the warm-start cache."""
    if cfg.resume and is_run_dir(cfg.run_dir):  # a changed setting is the clearest error
        saved_config = read_run_config(cfg.run_dir)["train_config"]
        check_resume_settings(cfg, saved_config, cfg.run_dir / "config.json")
    resolved = resolve(cfg)
    saved = check_run_dir(cfg)
    ws = dataclasses.replace(cfg.warmstart, task=cfg.task, task_args=cfg.task_args)
    ws.check_writable("--warmstart.")
    return Preflight(*resolved, saved)


def write_new_run(run_dir: Path, cfg: TrainConfig, algo_cfg: Any) -> None:
    """config.json of a new run (its settings, the algorithm's, the versions) and empty
    logs."""
    record = {
        "train_config": config_dict(cfg),
        "algo_config": dataclasses.asdict(algo_cfg),
        "versions": versions(),
        "numerics": numerics.describe(),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_text_atomic(run_dir / "config.json", json.dumps(record, indent=2))
    (run_dir / "metrics.jsonl").write_text("")
    (run_dir / "probes.jsonl").write_text("")


def record_resume(run_dir: Path, saved: dict[str, Any], cfg: TrainConfig, step: int) -> None:
    """Record in config.json that the run was resumed at ``step``, with the new values of the
    ``RESUME_RECORDED`` settings (so that a later ``--resume`` or ``--config`` gets them)."""
    now = config_dict(cfg)
    changed = {k: now[k] for k in RESUME_RECORDED if now[k] != saved["train_config"].get(k)}
    saved["train_config"].update(changed)
    saved.setdefault("resumed", []).append(
        {
            "at_step": step,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": versions(),
            "numerics": numerics.describe(),
            **({"changed": changed} if changed else {}),
        }
    )
    write_text_atomic(run_dir / "config.json", json.dumps(saved, indent=2))
