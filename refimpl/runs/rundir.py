"""Run directories: a new run, ``--overwrite`` and ``--resume`` (the run directory is the
source of truth). A run is resolved from its settings before run management runs
(``refimpl.train.preflight``: ``refimpl.settings.plan.resolve``, then ``check_run_dir``); this
file is handed the resolved plan and reads it as values (its ``cfg``, its records): it imports
nothing of ``refimpl.settings``.

The run directory is the Trainer's: ``check_run_dir`` checks it once; ``open_run`` creates and
locks it, checks again only what another process can have changed meanwhile, then writes a
new run's config.json or restores a resumed run's checkpoint, and holds it while the run
trains; ``save_run`` saves the checkpoint after the logs. The checks
this file calls live beside it: the run's place (``refimpl.runs.paths``), its lock
(``refimpl.runs.lock``), and what a resumed run's logs and checkpoint must satisfy
(``refimpl.runs.resume``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

from refimpl.runs import cpu_kernels
from refimpl.runs.checkpoint import (
    CheckpointError,
    check_deletable,
    check_replaceable,
    find_checkpoint,
    load_checkpoint,
    read_state,
    save_checkpoint,
)
from refimpl.runs.lock import RunLock, check_not_locked
from refimpl.runs.paths import check_name, check_not_a_link, check_runs_dir
from refimpl.runs.resume import check_made_with, check_run_length, verify_resume
from refimpl.runs.runlog import (
    LOCK_FILE,
    TornLineWarning,
    fsync_file,
    is_run_dir,
    nearest_existing,
    read_metrics,
    read_probes,
    read_run_config,
    refuse_links,
    run_dir_damage,
    versions,
    write_jsonl,
    write_text_atomic,
)
from refimpl.types.flags import RESUME_RECORDED

# ---------------------------------------------------------------------------------------------
# Checks before anything is written.
# ---------------------------------------------------------------------------------------------


def check_run_dir(plan) -> None:
    """Check the run directory against the run ``plan`` before anything is written: a valid
    ``--runs-dir`` and ``--name``, no link, not in use by another process, ``--resume`` only
    of a run (with the same settings, see ``RESUME_MAY_CHANGE``, and a whole checkpoint,
    ``verify_resume``), ``--overwrite`` only of a run, never an existing directory otherwise,
    writable directories, away from the warm-start cache. (Whether that cache is written, and
    can be, is the base model's choice, ``refimpl.warmstart.choose_base``, which preflight
    makes next.) ``open_run`` checks again, under the lock, what another process can change
    meanwhile.

    ``plan.saved``: the run to resume, as ``read_saved_run`` read it (None: a new run, or one
    that is not a run, which ``--resume`` refuses; its settings were checked against the
    flags by ``resolve``); its config.json is not read again, only checked to be the same file
    (``config_unchanged``)."""
    cfg, run_dir = plan.cfg, plan.run_dir
    runs_dir = Path(cfg.runs_dir)
    check_runs_dir(runs_dir)
    if cfg.warmstart.runs_dir is not None:
        check_runs_dir(Path(cfg.warmstart.runs_dir), "--warmstart.runs-dir")
    check_name(cfg.name, runs_dir)
    check_not_a_link(run_dir)
    # a run in use by another process: refused before the rest
    check_not_locked(run_dir, _flag_of(cfg.resume, cfg.overwrite))
    cache_root = (Path(plan.warmstart.runs_dir) / "warmstart").resolve()
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
    with warnings.catch_warnings():  # a torn last line: the trainer warns when it reads it
        warnings.simplefilter("ignore", TornLineWarning)
        if cfg.resume:
            _check_resumed(plan)
        elif not run_dir.exists() or not _held(run_dir):  # nothing, or a lock file only
            _writable(run_dir, "--runs-dir", f"the run directory {run_dir} is created there")
        else:
            _check_replaced(run_dir, runs_dir, cfg.overwrite)


def _check_resumed(plan) -> None:
    """``check_run_dir``'s checks of a run to resume, and of what it will write there."""
    run_dir, saved = plan.run_dir, plan.saved
    if saved is None:
        check_resumable(run_dir)  # raises: nothing, or a damaged run, to resume
        raise ValueError(f"--resume: {run_dir}: the run's config.json was not read")
    config_unchanged(run_dir, saved)
    _writable(run_dir, "--resume", "the resumed run writes its logs and checkpoints there")
    refuse_links(run_dir, "--resume")  # the run writes, renames and replaces its files
    try:  # checkpoint/, .tmp/ and .old/: the saves replace them whole
        check_replaceable(run_dir / "checkpoint")
    except CheckpointError as err:
        raise ValueError(f"--resume: {err}") from None
    verify_resume(plan)


def _check_replaced(run_dir: Path, runs_dir: Path, overwrite: bool) -> None:
    """``check_run_dir``'s checks of a new run in a directory that holds something: refused,
    unless ``overwrite`` and it is a run that may be deleted."""
    damage = run_dir_damage(run_dir)
    if not overwrite:
        if damage is not None:
            how = f"is a damaged run ({damage}): pass --overwrite to start it again"
        elif is_run_dir(run_dir):
            how = "already exists: pass --resume to continue it, --overwrite to start again"
        else:  # someone else's directory: neither flag would touch it
            how = "already exists and is not a run (no config.json written by refimpl train)"
        raise FileExistsError(f"run directory {run_dir} {how}, or choose another --name")
    if run_dir.resolve() == runs_dir.resolve():
        raise ValueError(f"--overwrite: {run_dir} is the runs directory itself")
    check_deletable(run_dir, "--overwrite")
    _writable(run_dir.parent, "--overwrite", f"{run_dir} is deleted and written again")
    _writable(run_dir, "--overwrite", f"{run_dir} is deleted and written again")


def _held(run_dir: Path) -> list[Path]:
    """What ``run_dir`` holds besides its lock file (a run that never started holds only
    that)."""
    return sorted(p for p in run_dir.iterdir() if p.name != LOCK_FILE)


def _writable(path: Path, flag: str, what: str) -> None:
    target = nearest_existing(path)
    if not os.access(target, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: {target} is not writable ({what})")


def _flag_of(resume: bool, overwrite: bool) -> str:
    """The flag that says what the run does to its directory."""
    return "--resume" if resume else "--overwrite" if overwrite else "--name"


# ---------------------------------------------------------------------------------------------
# The run to resume: its config.json, read once.
# ---------------------------------------------------------------------------------------------


class SavedRun(NamedTuple):
    """The run to resume, as ``read_saved_run`` read it: the one read of its config.json."""

    config: dict[str, Any]
    """its config.json"""
    stamp: tuple[int, int, int]
    """config.json's inode, size and modification time before it was read: a later check
    compares them (``config_unchanged``) instead of reading the file again"""


def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


def read_saved_run(run_dir: Path) -> SavedRun:
    """The config.json of the run to resume in ``run_dir``, read once: ``ValueError`` unless
    it is a run (``check_resumable``'s message says how to recover a damaged one), and
    ``CheckpointError`` naming the file when its length is no positive integer (edited: no
    flag is to blame). When config.json has lost its ``algo_config``, the last checkpoint's is
    taken once the checkpoint is found to belong to the run (``check_made_with``): the run
    continues with the settings it was made with."""
    path = Path(run_dir) / "config.json"
    try:
        stamp = _stamp(path)  # before the read: a file replaced after it no longer matches
        config = read_run_config(run_dir)
    except (ValueError, OSError):
        check_resumable(run_dir)  # raises, saying what is wrong
        raise
    check_run_length(config["train_config"], path)
    checkpoint = find_checkpoint(Path(run_dir) / "checkpoint", warn=False)
    if not isinstance(config.get("algo_config"), dict) and checkpoint is not None:
        try:  # fills config["algo_config"] with the checkpoint's, when it is this run's
            check_made_with(read_state(checkpoint), config, checkpoint / "state.json", path)
        except CheckpointError:
            pass  # not this run's, or damaged: check_run_dir refuses it, naming the file
    return SavedRun(config, stamp)


def read_saved_if_run(run_dir: Path) -> SavedRun | None:
    """The config.json of the run to resume in ``run_dir``, read once (``read_saved_run``);
    None for a directory that is not a run, which ``check_run_dir`` refuses once the flags
    are checked. ``CheckpointError`` (config.json edited) is raised whatever the flags."""
    try:
        return read_saved_run(run_dir)
    except CheckpointError:
        raise
    except ValueError:
        return None


def check_resumable(run_dir: Path) -> None:
    """``ValueError`` unless ``run_dir`` holds a run to resume, saying how to recover a
    damaged one."""
    if is_run_dir(run_dir):
        return
    damage = run_dir_damage(run_dir)
    if damage is not None:
        raise ValueError(
            f"--resume: {run_dir} is a damaged run ({damage}), which cannot be resumed: "
            "restore its config.json, or start it again with --overwrite (which deletes it)"
        )
    raise ValueError(
        f"--resume: nothing to resume in {run_dir} (no config.json written by refimpl "
        "train); check --name and --runs-dir, or drop --resume to start a new run"
    )


def config_unchanged(run_dir: Path, saved: SavedRun) -> None:
    """``ValueError`` when the run's config.json is not the file ``saved`` was read from
    (another process resumed or replaced the run since)."""
    path = Path(run_dir) / "config.json"
    try:
        now = _stamp(path)
    except OSError:
        now = None
    if now != saved.stamp:
        raise ValueError(
            f"--resume: {path} changed since it was read (another process resumed or "
            "replaced the run?); run the command again"
        )


# ---------------------------------------------------------------------------------------------
# The Trainer's side: claim the run directory, open it, save its checkpoint.
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def open_run(plan, model, optimizer) -> Iterator[tuple[int, int]]:
    """The run directory of ``plan``, held for the ``with`` block: created (one atomic
    ``mkdir``) when it does not exist and locked (no other refimpl process changes it until
    the block ends), then checked again for what another process can have changed since
    ``check_run_dir`` (the warm start may have taken minutes): still no link; a new run's
    directory still holds nothing (``--overwrite``: still a run, deleted), a resumed run's
    config.json is still the file that was read (every refimpl process that changes a run
    writes it). Then opened: a new run's config.json is written (``write_new_run``); a resumed
    run's checkpoint is restored into ``model`` and ``optimizer`` (``restore_run``), and
    config.json records the new length of the run (``RESUME_RECORDED``) and when it was
    resumed. Yields ``(step, sampled_tokens)``, where the run continues from."""
    cfg, run_dir = plan.cfg, plan.run_dir
    if not cfg.resume:
        try:
            run_dir.mkdir(parents=True)
        except FileExistsError:
            pass  # already there (an empty one, a run, or another process was first)
    with RunLock(run_dir, _flag_of(cfg.resume, cfg.overwrite)):
        check_not_a_link(run_dir)
        if plan.saved is None:
            write_new_run(
                run_dir, plan.record, dataclasses.asdict(plan.algo_cfg),
                getattr(model, "base_record", None), overwrite=cfg.overwrite,
            )  # fmt: skip
            yield 0, 0
        else:
            config_unchanged(run_dir, plan.saved)
            step, sampled_tokens = restore_run(run_dir, model, optimizer, cfg.fresh_optimizer)
            record_resume(run_dir, plan.saved.config, plan.record, step)
            yield step, sampled_tokens


def restore_run(run_dir: Path, model, optimizer, fresh_optimizer: bool) -> tuple[int, int]:
    """Load the run directory's last checkpoint (``checkpoint.old`` when a save was cut
    short) into ``model`` and ``optimizer``; ``(0, 0)`` when the run stopped before its first
    checkpoint. The logs lose the lines written after the checkpoint (the resumed run writes
    them again). Everything is read before anything is rewritten."""
    checkpoint = find_checkpoint(run_dir / "checkpoint")
    step, sampled_tokens = 0, 0
    if checkpoint is not None:
        state = load_checkpoint(checkpoint, model, optimizer, fresh_optimizer=fresh_optimizer)
        try:
            step, sampled_tokens = int(state["step"]), int(state["sampled_tokens"])
        except (KeyError, TypeError, ValueError):
            raise CheckpointError(
                f"{checkpoint / 'state.json'}: damaged (no step or sampled_tokens)"
            ) from None
    metrics = read_metrics(run_dir, missing_ok=True)
    probes = read_probes(run_dir) if checkpoint else []
    logged = max((r["step"] for r in metrics), default=0)
    if checkpoint is None:
        metrics = []  # step 0 is logged again, by the resumed run
        if logged > 0:  # its first save was cut short (verify_resume allowed it)
            warnings.warn(
                f"{run_dir / 'checkpoint'}: missing (the run stopped during or before its "
                f"first save: a kill, a crash?); the run resumes from step 0, its warm start, "
                f"the last whole state: the metrics of steps 1…{logged} are discarded and "
                "trained again",
                stacklevel=2,
            )
    if step > logged:  # lines a power cut took (verify_resume allowed how many)
        one = step == logged + 1
        lost = f"line of step {step} was" if one else f"lines of steps {logged + 1}…{step} were"
        warnings.warn(
            f"{run_dir / 'metrics.jsonl'}: the metrics {lost} lost (not on the disk when the "
            f"run stopped: a power cut?); the run continues from the checkpoint of step {step}",
            stacklevel=2,
        )
    # Lines logged after the checkpoint are written again by the resumed run.
    write_jsonl(run_dir / "metrics.jsonl", [r for r in metrics if r["step"] <= step])
    write_jsonl(run_dir / "probes.jsonl", [r for r in probes if r.get("step", 0) < step])
    return step, sampled_tokens


def save_run(plan, model, optimizer, step: int, sampled_tokens: int) -> None:
    """The run's atomic checkpoint after ``step``, with what a resume checks it against,
    after the log lines up to it are on the disk: a power cut then never leaves a checkpoint
    ahead of its log (one fsync per checkpoint, not per line: ``scripts/costs/log_fsync.py``
    measures it)."""
    for log in ("metrics.jsonl", "probes.jsonl"):
        if (plan.run_dir / log).exists():
            fsync_file(plan.run_dir / log)
    state = {
        "step": step,
        "sampled_tokens": sampled_tokens,
        "train_config": plan.record,
        "algo_config": dataclasses.asdict(plan.algo_cfg),
    }
    save_checkpoint(plan.run_dir / "checkpoint", model, optimizer, state)


def write_new_run(run_dir: Path, train_config: dict[str, Any], algo_config: dict[str, Any],
                  base: dict[str, Any] | None = None, *, overwrite: bool = False
                  ) -> None:  # fmt: skip
    """A new run in ``run_dir``, whose lock the caller holds: the directory must hold nothing
    but its lock (another process may have made a run there since it was checked), unless
    ``overwrite``, which deletes the run there, and only a run (``check_deletable``: a
    ``config.json`` of ``refimpl train`` and nothing but the files a run holds, at every depth;
    the lock file stays). Then its config.json (its settings as recorded, ``config_dict``; the
    algorithm's Config's fields; the versions; and ``base``: which base model it started from,
    ``refimpl.runs.shipped.describe_base``) and empty logs."""
    held = _held(run_dir)
    if held and not overwrite:
        raise FileExistsError(
            f"run directory {run_dir} already exists: pass --resume to continue it, "
            "--overwrite to start again, or choose another --name"
        )
    if held:
        check_deletable(run_dir, "--overwrite")
        for entry in held:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    record = {
        "train_config": train_config,
        "algo_config": algo_config,
        "versions": versions(),
        "numerics": cpu_kernels.describe(),
        **({"base_model": base} if base is not None else {}),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    write_text_atomic(run_dir / "config.json", json.dumps(record, indent=2))
    (run_dir / "metrics.jsonl").write_text("")
    (run_dir / "probes.jsonl").write_text("")


def record_resume(run_dir: Path, saved: dict[str, Any], now: dict[str, Any], step: int) -> None:
    """Record in config.json that the run was resumed at ``step``, with the new values of the
    ``RESUME_RECORDED`` settings (so that a later ``--resume`` or ``--config`` gets them).
    ``now``: the resumed run's settings as recorded (``Plan.record``)."""
    changed = {k: now[k] for k in RESUME_RECORDED if now[k] != saved["train_config"].get(k)}
    saved["train_config"].update(changed)
    saved.setdefault("resumed", []).append(
        {
            "at_step": step,
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "versions": versions(),
            "numerics": cpu_kernels.describe(),
            **({"changed": changed} if changed else {}),
        }
    )
    write_text_atomic(run_dir / "config.json", json.dumps(saved, indent=2))
