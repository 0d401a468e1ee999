"""Run directories: a new run, ``--overwrite`` and ``--resume`` (the run directory is the
source of truth). ``preflight`` is a run's two steps before anything is written: the run
resolved from its settings (``refimpl.settings.plan.resolve``), then the run directory and the
warm-start cache checked against that plan (``check_run_dir``).

A run directory is owned by one process at a time. ``refimpl train`` takes an exclusive OS
lock (``flock``) on ``<run>/run.lock`` before it writes anything there and holds it until the
run ends; the kernel releases it when the process dies, however it dies (``kill -9``, a power
cut: no stale lock to clean up). A second ``train``, ``--resume`` or ``--overwrite`` of a
locked run is refused with one line, before it changes anything. A new run directory is
created with one ``mkdir`` (atomic: of two processes, one creates it) and is checked again
once its lock is held, so there is no window between a check and the write it allows.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import socket
import stat
import time
import warnings
from pathlib import Path, PurePath
from typing import Any, NamedTuple

import torch

from refimpl.runs import numerics, shipped
from refimpl.runs.cache import check_cache_writable
from refimpl.runs.checkpoint import (
    CheckpointError,
    check_deletable,
    check_replaceable,
    find_checkpoint,
    load_checkpoint,
    prepare_run_dir,
    read_state,
    save_checkpoint,
    verify_checkpoint,
)
from refimpl.runs.runlog import (
    LOCK_FILE,
    JSONFileError,
    TornLineWarning,
    check_regular_file,
    fsync_file,
    is_run_dir,
    nearest_existing,
    read_json,
    read_metrics,
    read_probes,
    read_run_config,
    read_text_bounded,
    refuse_links,
    run_dir_damage,
    versions,
    write_jsonl,
    write_text_atomic,
)
from refimpl.settings.limits import flag
from refimpl.settings.plan import RESUME_RECORDED, Plan, flatten, may_differ, resolve
from refimpl.settings.record import config_from_record
from refimpl.settings.train import TrainConfig, config_dict

try:  # POSIX
    import fcntl
except ImportError:  # Windows: a lock on the file's first byte
    fcntl = None  # type: ignore[assignment]
    import msvcrt

# ---------------------------------------------------------------------------------------------
# Paths: a name is one directory inside --runs-dir, and --runs-dir is a directory.
# ---------------------------------------------------------------------------------------------


def _name_max(directory: Path) -> int:
    """The longest file name the file system of ``directory`` (or its nearest existing
    parent) takes, in bytes (255 where the platform does not say)."""
    try:
        return os.pathconf(nearest_existing(directory), "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        return 255


#: The name of the warm-start cache inside a runs directory (``<runs_dir>/warmstart/``):
#: never a run's, in any runs directory (a later run there would put its cache inside it).
WARMSTART_DIR = "warmstart"


def unprintable(text: str) -> str | None:
    """The first character of ``text`` that a terminal does not print as itself (a newline,
    a tab, an escape, a control or format character: ``str.isprintable``), or None."""
    return next((c for c in text if not c.isprintable()), None)


def check_name(name: str | None, runs_dir: Path, flag: str = "--name") -> None:
    """``ValueError`` naming ``flag`` unless ``name`` is one path component: not empty, not
    ``.`` or ``..``, no ``/`` (or the platform's separator), printable (no newline or escape:
    it is printed), not the warm-start cache's, short enough for the file system. None (the
    default name) passes."""
    if name is None:
        return
    bad = unprintable(name)
    if bad is not None:
        raise ValueError(
            f"{flag}: expected a name of printable characters (it is printed, and a newline or "
            f"an escape would reach the terminal), got {name!r} (with {bad!r})"
        )
    if name.casefold() == WARMSTART_DIR:
        raise ValueError(
            f"{flag}: expected another name: {name!r} is the warm-start cache's directory in "
            "every runs directory (<runs_dir>/warmstart/)"
        )
    separators = {"/", os.sep, os.altsep} - {None}
    if (
        not name.strip()
        or name in (".", "..")
        or any(s in name for s in separators)
        or "\0" in name
        or PurePath(name).is_absolute()
    ):
        raise ValueError(
            f"{flag}: expected a directory name inside --runs-dir (one name: no '/', not "
            f"'.' or '..'), got {name!r}"
        )
    longest = _name_max(Path(runs_dir))
    if len(name.encode()) > longest:
        raise ValueError(
            f"{flag}: expected a name of at most {longest} bytes (the file system's limit), "
            f"got {len(name.encode())}"
        )


def check_runs_dir(runs_dir: Path, flag: str = "--runs-dir") -> None:
    """``ValueError`` naming ``flag`` when ``runs_dir`` (or the nearest part of it that
    exists) is a file, or a part of it is too long a name."""
    bad = unprintable(str(runs_dir))
    if bad is not None:
        raise ValueError(
            f"{flag}: expected a path of printable characters (it is printed, and a newline or "
            f"an escape would reach the terminal), got {str(runs_dir)!r} (with {bad!r})"
        )
    path = Path(runs_dir).absolute()
    longest = _name_max(path)
    for part in path.parts[1:]:
        if len(part.encode()) > longest:
            raise ValueError(
                f"{flag}: {part[:40]}… is longer than {longest} bytes (the file system's limit)"
            )
    try:
        path.resolve()
    except (RuntimeError, OSError):  # RuntimeError: Python < 3.13's "Symlink loop"
        raise ValueError(
            f"{flag}: {runs_dir} cannot be resolved (a loop of symbolic links?)"
        ) from None
    existing = nearest_existing(path)
    if not existing.is_dir():
        raise ValueError(f"{flag}: {existing} is a file, not a directory")


def check_not_a_link(run_dir: Path, flag: str = "--name") -> None:
    """``ValueError`` naming ``flag`` when the run directory itself is a symbolic link: a
    run would write, and ``--overwrite`` delete, whatever it points to (outside
    ``--runs-dir``). A link among the parents of ``--runs-dir`` is followed as usual."""
    run_dir = Path(run_dir)
    if not run_dir.is_symlink():
        return
    try:
        target = run_dir.resolve(strict=True)
        how = f"; to use the run it points to, pass --runs-dir {target.parent} --name {target.name}"
    except (RuntimeError, OSError):
        how = " (a broken link or a loop)"
    raise ValueError(
        f"{flag}: {run_dir} is a symbolic link (to {os.readlink(run_dir)}), which refimpl never "
        f"writes or deletes through{how}"
    )


def _writable(path: Path, flag: str, what: str) -> None:
    target = nearest_existing(path)
    if not os.access(target, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: {target} is not writable ({what})")


# ---------------------------------------------------------------------------------------------
# The lock.
# ---------------------------------------------------------------------------------------------


#: How often ``RunLock.acquire`` tries, 50 ms apart, before it reports the run as in use.
ACQUIRE_TRIES = 5


class RunDirLocked(ValueError):
    """Another process holds the lock of the run directory (the message names it)."""


def _try_lock(fd: int) -> bool:
    try:
        if fcntl is not None:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        else:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
    except OSError:  # BlockingIOError (EWOULDBLOCK) where another process holds it
        return False
    return True


def _holder(path: Path) -> str:
    """Who holds the lock file ``path``, as its holder wrote it (``pid N on HOST since T``)."""
    try:
        text = read_text_bounded(path, 4096).strip()
    except (OSError, UnicodeDecodeError):
        text = ""
    return text or "a process that did not say which"


class RunLock:
    """The exclusive OS lock on a run directory's ``run.lock``, held until ``release`` (or
    the process's end: the kernel releases it on any exit). The holder writes its pid, host
    and start time into the file, for the message of a process it keeps out."""

    def __init__(self, run_dir: Path, fd: int):
        self.run_dir, self.path, self._fd = Path(run_dir), Path(run_dir) / LOCK_FILE, fd

    @classmethod
    def acquire(cls, run_dir: Path, flag: str) -> RunLock:
        """Lock ``run_dir`` (which must exist), creating its lock file if need be; a
        ``RunDirLocked`` naming ``flag`` when another process holds it."""
        path = Path(run_dir) / LOCK_FILE
        fd = _open_lock_file(path, os.O_RDWR | os.O_CREAT, flag)
        # A few tries: another process's ``check_not_locked`` holds the lock for a moment;
        # a run holds it for as long as it trains.
        for attempt in range(ACQUIRE_TRIES):
            if _try_lock(fd):
                break
            if attempt == ACQUIRE_TRIES - 1:
                os.close(fd)
                raise _locked_error(Path(run_dir), flag)
            time.sleep(0.05)
        os.ftruncate(fd, 0)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        os.write(fd, f"pid {os.getpid()} on {socket.gethostname()} since {stamp}\n".encode())
        return cls(run_dir, fd)

    def release(self) -> None:
        """Unlock (the lock file stays: deleting it while another process waits on it would
        let two processes in)."""
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor releases the flock
            self._fd = None

    def __del__(self) -> None:
        self.release()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _open_lock_file(path: Path, flags: int, flag: str) -> int:
    """A descriptor of the lock file ``path``: never through a symbolic link (the holder
    writes its pid into the file), never blocking (a FIFO), and only of a regular file;
    ``ValueError`` naming ``flag`` and the file otherwise."""
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP or path.is_symlink():
            raise ValueError(
                f"{flag}: {path} is a symbolic link (to {os.readlink(path)}), which refimpl "
                "never writes through: remove it (a run's lock file is its own)"
            ) from None
        raise
    try:
        check_regular_file(path)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    except OSError as err:
        os.close(fd)
        raise ValueError(
            f"{flag}: {path} is not a regular file ({err.strerror or err}): remove it"
        ) from None
    return fd


def _locked_error(run_dir: Path, flag: str) -> RunDirLocked:
    return RunDirLocked(
        f"{flag}: {run_dir} is in use by another refimpl process ({_holder(run_dir / LOCK_FILE)}); "
        "wait for it to end, or stop it (Ctrl-C writes a checkpoint) and --resume"
    )


def _flag_of(cfg: TrainConfig) -> str:
    return "--resume" if cfg.resume else "--overwrite" if cfg.overwrite else "--name"


def check_not_locked(plan: Plan) -> None:
    """``RunDirLocked`` when another process holds the run directory's lock; changes
    nothing (the lock file is opened read-only and only if it exists)."""
    path = plan.run_dir / LOCK_FILE
    if not (path.exists() or path.is_symlink()):
        return  # no lock file (a new run, or one of an older version): not locked
    fd = _open_lock_file(path, os.O_RDONLY, _flag_of(plan.cfg))
    try:
        if not _try_lock(fd):
            raise _locked_error(plan.run_dir, _flag_of(plan.cfg))
    finally:
        os.close(fd)  # also releases the probe's own lock


def is_locked(run_dir: Path) -> bool:
    """Whether a process holds ``run_dir``'s lock now (a run in progress); changes nothing.
    An unreadable lock file counts as not locked (``refimpl runs`` only reports it)."""
    path = Path(run_dir) / LOCK_FILE
    if not path.is_file() or path.is_symlink():
        return False
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError:
        return False
    try:
        return not _try_lock(fd)
    finally:
        os.close(fd)  # also releases the probe's own lock


def claim_run_dir(plan: Plan) -> RunLock:
    """Create the run directory (one atomic ``mkdir``) when it does not exist, lock it, and
    check it again under the lock (``check_run_dir``): what the plan says may be written is
    what this process may write, and no other refimpl process changes it until ``release``
    (``with claim_run_dir(plan): ...`` releases it at the end of the block)."""
    cfg, run_dir = plan.cfg, plan.run_dir
    if not cfg.resume:
        try:
            run_dir.mkdir(parents=True)
        except FileExistsError:
            pass  # already there (an empty one, a run, or another process was first)
    lock = RunLock.acquire(run_dir, _flag_of(cfg))
    try:
        with warnings.catch_warnings():  # the trainer warns when it reads the files
            warnings.simplefilter("ignore")
            check_run_dir(plan, locked=True)
    except BaseException:
        lock.release()
        raise
    return lock


# ---------------------------------------------------------------------------------------------
# Checks before anything is written.
# ---------------------------------------------------------------------------------------------


def _holds_nothing(run_dir: Path) -> bool:
    """``run_dir`` is missing, empty, or holds only a lock file (a run that never started)."""
    return not run_dir.exists() or all(p.name == LOCK_FILE for p in run_dir.iterdir())


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
    taken once the checkpoint is found to belong to the run (``_check_made_with``): the run
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
            _check_made_with(read_state(checkpoint), config, checkpoint / "state.json", path)
        except CheckpointError:
            pass  # not this run's, or damaged: check_run_dir refuses it, naming the file
    return SavedRun(config, stamp)


def load_config_file(path: Path | str, flag: str = "--config", *, algo_config: bool = True):
    """The settings in a config.json (a run's, or a bare ``train_config`` object), as a
    ``TrainConfig`` with ``resume``, ``overwrite`` and ``config`` reset: a saved file never
    deletes anything (``refimpl.settings.record.config_from_record``). ``flag``: the flag that
    names the file in error messages (``--resume`` for a run's own config.json).
    ``algo_config``: read the file's ``algo_config`` section too; a resumed run reads it from
    its checkpoint instead."""
    try:
        data = read_json(path)
    except JSONFileError as err:
        raise ValueError(f"{flag}: {err}") from None
    return config_from_record(data, f"{flag}: {path}", algo_config=algo_config)


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


def verify_resume(plan: Plan) -> None:
    """Read everything the resumed run ``plan`` depends on before it changes anything: the
    logs, and the whole checkpoint against ``config.json``: its files (checksums, finite
    weights), its step (within the run and the logs), its algorithm and settings.
    ``CheckpointError`` naming the file that is wrong."""
    cfg, run_dir, saved = plan.cfg, plan.run_dir, plan.saved.config
    tc = saved["train_config"]
    metrics = _read_logs(run_dir)
    logged = max((r["step"] for r in metrics), default=0)
    checkpoint = find_checkpoint(run_dir / "checkpoint", warn=False)
    if checkpoint is None:
        every = tc.get("checkpoint_every", cfg.checkpoint_every)
        if logged >= every:
            raise CheckpointError(
                f"{run_dir / 'checkpoint'}: missing, although the run logged step {logged} "
                f"(a checkpoint every {every} steps); --overwrite starts it again"
            )
        # Nothing to check the settings against: each must be in config.json (the run starts
        # again from step 0 with them; a key removed would silently become its default).
        defaults = flatten(config_dict(TrainConfig()))
        _check_no_setting_missing(defaults, tc, run_dir, "its default is")
        _check_steps_within(metrics, tc, run_dir)
        return
    state_file = checkpoint / "state.json"
    made_with = read_state(checkpoint).get("train_config")
    if isinstance(made_with, dict):  # first: a setting lost would make the rest look wrong
        _check_no_setting_missing(flatten(made_with), tc, run_dir, "the checkpoint was made with")
    with torch.device("meta"):  # the run's model, its shapes only: no memory, no random draw
        model = cfg.warmstart.model.build()
    state = verify_checkpoint(checkpoint, optimizer=not cfg.fresh_optimizer, model=model)
    step, tokens = state.get("step"), state.get("sampled_tokens")
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointError(f"{state_file}: damaged (no step)")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise CheckpointError(f"{state_file}: damaged (sampled_tokens {tokens!r})")
    made_with = state.get("train_config")
    made_with = made_with if isinstance(made_with, dict) else {}
    _check_checkpoint_step(step, state_file, tc, made_with, run_dir / "config.json")
    _check_log_reaches(run_dir / "metrics.jsonl", logged, step, tc)
    if cfg.steps < step:
        raise ValueError(f"--steps: the run is already at step {step}; expected ≥ {step}")
    _check_made_with(state, saved, state_file, run_dir / "config.json")
    _check_steps_within(metrics, tc, run_dir)


def verify_run_checkpoint(run_dir: Path, cfg: TrainConfig, flag: str) -> tuple[Path, dict]:
    """The last checkpoint of the run ``run_dir`` (made with ``cfg``, its config.json's
    settings) and its state, checked as ``--resume`` checks it before anything else is
    loaded or trained: ``ValueError`` naming ``flag`` when there is none, ``CheckpointError``
    naming the file when it is damaged, does not fit the run's model, or was made with other
    settings than config.json's (another task: a checkpoint copied in from another run)."""
    run_dir = Path(run_dir)
    config_file = run_dir / "config.json"
    checkpoint = find_checkpoint(run_dir / "checkpoint", warn=False)
    if checkpoint is None:
        raise ValueError(f"{flag}: {run_dir} has no checkpoint (nothing to score)")
    saved = read_run_config(run_dir)
    state_file = checkpoint / "state.json"
    made_with = read_state(checkpoint).get("train_config")
    if isinstance(made_with, dict):
        _check_no_setting_missing(
            flatten(made_with), saved["train_config"], run_dir, "the checkpoint was made with"
        )
    with torch.device("meta"):  # shapes only: no memory, no random draw
        model = cfg.warmstart.model.build()
    state = verify_checkpoint(checkpoint, optimizer=False, model=model)
    _check_made_with(state, saved, state_file, config_file)
    return checkpoint, state


def _read_logs(run_dir: Path) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl``, after reading both logs whole."""
    try:
        metrics = read_metrics(run_dir, missing_ok=True)
        read_probes(run_dir)
    except ValueError as err:  # garbage lines, steps out of order: the history is not readable
        raise CheckpointError(f"{err}; {_LOG_WAY_OUT}") from None
    return metrics


_LOG_WAY_OUT = (
    "the run cannot be resumed from it: repair or restore the file, or --overwrite starts "
    "the run again"
)


def _check_steps_within(metrics: list[dict[str, Any]], tc: dict[str, Any], run_dir: Path) -> None:
    try:
        steps_outside(metrics, tc.get("steps", TrainConfig.steps), run_dir / "metrics.jsonl")
    except ValueError as err:
        raise CheckpointError(f"{err}; {_LOG_WAY_OUT}") from None


def steps_outside(records: list[dict[str, Any]], length: Any, path: Path) -> None:
    """``ValueError`` naming ``path`` and the record when a step of ``records`` lies outside
    the run's ``0 … length`` (a run logs step 0's evaluation and steps 1 … its ``--steps``;
    config.json records a resumed run's new length before it logs a step past the old one):
    such a line was edited or damaged, and a resume would drop it without a word."""
    if not isinstance(length, int) or isinstance(length, bool):
        return  # config.json's length is checked on its own (check_run_length)
    for n, record in enumerate(records, 1):
        step = record["step"]
        if not 0 <= step <= length:
            raise ValueError(
                f"{path}: record {n} has step {step}, outside the run's 0…{length} (edited or "
                "damaged?)"
            )


def _check_no_setting_missing(
    expected: dict[str, Any], tc: dict[str, Any], run_dir: Path, known: str
) -> None:
    """``CheckpointError`` naming config.json and the first key of ``expected`` (dotted) that
    its ``train_config`` lacks, among those a resumed run may not change: ``--resume`` would
    otherwise take that setting's default, silently. ``known``: what ``expected``'s values
    are, for the message."""
    now = flatten(tc)
    for key, value in expected.items():
        if not may_differ(key) and key not in now:
            raise CheckpointError(
                f"{run_dir / 'config.json'}: train_config.{key} is missing (removed by hand?); "
                f"restore it ({known} {value!r}), or --overwrite starts the run again"
            )


def _check_checkpoint_step(
    step: int, state_file: Path, tc: dict[str, Any], made_with: dict[str, Any], config_file: Path
) -> None:
    """The checkpoint's step lies within the run (1 … its length). A length in config.json
    that is no positive integer, or shorter than a step the checkpoint (made by a run at
    least that long) reached, was edited: config.json is named, not the checkpoint."""
    check_run_length(tc, config_file, _made_with_steps(made_with))
    length = tc.get("steps", TrainConfig.steps)  # absent: the default, as --resume reads it
    made_steps = made_with.get("steps")
    if not (isinstance(made_steps, int) and made_steps >= step):
        made_steps = length  # the checkpoint's own record of the length is missing or short
    if step < 1 or step > made_steps:
        raise CheckpointError(
            f"{state_file}: damaged (step {step}, outside the run's 1…{length}); "
            "--overwrite starts the run again"
        )
    if step > length:
        raise CheckpointError(
            f"{config_file}: train_config.steps is {length}, before the checkpoint's step "
            f"{step} (edited?); restore it{_made_with_steps(made_with)}"
        )


def check_run_length(tc: dict[str, Any], config_file: Path, hint: str = "") -> None:
    """``CheckpointError`` naming ``config_file`` and the field when the run's length
    (``train_config.steps``) is there but no positive integer: config.json was edited, and
    no flag is to blame (``hint``: what the checkpoint says)."""
    if "steps" not in tc:  # absent: the default, as --resume reads it
        return
    length = tc["steps"]
    if not (isinstance(length, int) and not isinstance(length, bool) and length >= 1):
        raise CheckpointError(
            f"{config_file}: train_config.steps is {json.dumps(length)}, expected a positive "
            f"integer (edited?); restore it{hint}"
        )


def _made_with_steps(made_with: dict[str, Any]) -> str:
    steps = made_with.get("steps")
    return f" (the checkpoint was saved by a run of {steps} steps)" if steps else ""


def _check_log_reaches(metrics: Path, logged: int, step: int, tc: dict[str, Any]) -> None:
    """``metrics.jsonl`` may end before the checkpoint's step by the lines a power cut can
    take (written since the previous checkpoint: at most ``checkpoint_every`` steps; the
    trainer warns which steps' lines were lost when it resumes). A log that ends earlier
    was cut short or replaced."""
    every = tc.get("checkpoint_every")
    lost_at_most = every if isinstance(every, int) and every >= 1 else 1
    if step - logged > lost_at_most:
        raise CheckpointError(
            f"{metrics}: ends at step {logged}, {step - logged} steps before the checkpoint's "
            f"step {step} (more than the {lost_at_most} since the previous checkpoint that a "
            "power cut can lose: cut short or replaced?); restore it, or --overwrite starts "
            "the run again"
        )


#: A key absent from a settings dict (``None`` is a value a setting can have).
_ABSENT = object()


def _check_made_with(
    state: dict[str, Any], saved: dict[str, Any], state_file: Path, config_file: Path
) -> None:
    """The settings and the algorithm Config the checkpoint was made with are config.json's
    (those a resumed run may change aside); fills in a lost ``saved["algo_config"]``."""
    made_with = state.get("train_config")
    if isinstance(made_with, dict):
        now = flatten(saved["train_config"])
        for key, value in flatten(made_with).items():
            if not may_differ(key) and key in now and now[key] != value:
                raise CheckpointError(
                    f"{state_file}: the checkpoint was made with {flag(key)} {value!r}, but "
                    f"{config_file} says {now[key]!r} (edited?): restore config.json, or "
                    "start the run again with --overwrite"
                )
    algo_config = state.get("algo_config")
    if isinstance(algo_config, dict):
        if not isinstance(saved.get("algo_config"), dict):
            saved["algo_config"] = algo_config  # config.json lost it: the checkpoint's
        elif saved["algo_config"] != algo_config:
            key = next(
                k
                for k in sorted({*algo_config, *saved["algo_config"]})
                if algo_config.get(k, _ABSENT) != saved["algo_config"].get(k, _ABSENT)
            )
            if key not in saved["algo_config"]:  # a key removed: not a value to compare
                raise CheckpointError(
                    f"{config_file}: algo_config.{key} is missing (removed by hand?); restore "
                    f"it (the checkpoint was made with {key}={algo_config[key]!r}), or start "
                    "the run again with --overwrite"
                )
            raise CheckpointError(
                f"{state_file}: the checkpoint was made with the algorithm setting {key}="
                f"{algo_config.get(key)!r}, but {config_file} says "
                f"{saved['algo_config'].get(key)!r} (edited?): restore config.json, or start "
                "the run again with --overwrite"
            )


def check_run_dir(plan: Plan, *, locked: bool = False) -> None:
    """Check the run directory against the run ``plan`` before anything is written: a valid
    ``--runs-dir`` and ``--name``, no link, not in use by another process, ``--resume`` only
    of a run (with the same settings, see ``RESUME_MAY_CHANGE``, and a whole checkpoint,
    ``verify_resume``), ``--overwrite`` only of a run, never an existing directory otherwise,
    writable directories, away from the warm-start cache, and a warm-start cache that can be
    written when its model has to be trained (``refimpl.runs.cache.check_cache_writable``).

    ``plan.saved``: the run to resume, as ``read_saved_run`` read it (None: a new run, or one
    that is not a run, which ``--resume`` refuses; its settings were checked against the
    flags by ``resolve``); its config.json is not read again, only checked to be the same file
    (``config_unchanged``). ``locked``: the caller holds the run's lock (``claim_run_dir``,
    after the warm start), which checks everything again on purpose: the directory may have
    changed while it was not locked."""
    cfg, run_dir = plan.cfg, plan.run_dir
    check_runs_dir(Path(cfg.runs_dir))
    if cfg.warmstart.runs_dir is not None:
        check_runs_dir(Path(cfg.warmstart.runs_dir), "--warmstart.runs-dir")
    check_name(cfg.name, Path(cfg.runs_dir))
    check_not_a_link(run_dir)
    if not locked:
        check_not_locked(plan)  # a run in use by another process: refused before the rest
    with warnings.catch_warnings():  # a torn last line: the trainer warns when it reads it
        warnings.simplefilter("ignore", TornLineWarning)
        _check_contents(plan)
    if not locked and not shipped.supplies(plan.warmstart):  # under the lock: trained already
        check_cache_writable(plan.warmstart, "--warmstart.")


def _check_contents(plan: Plan) -> None:
    """``check_run_dir``'s checks of what the run directory holds, and of what the run will
    write there."""
    cfg, run_dir, saved = plan.cfg, plan.run_dir, plan.saved
    runs_dir = Path(cfg.runs_dir)
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
    if cfg.resume:
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
        return
    if not _holds_nothing(run_dir):
        damage = run_dir_damage(run_dir)
        if not cfg.overwrite:
            if damage is not None:
                how = f"is a damaged run ({damage}): pass --overwrite to start it again"
            elif is_run_dir(run_dir):
                how = "already exists: pass --resume to continue it, --overwrite to start again"
            else:  # someone else's directory: neither flag would touch it
                how = "already exists and is not a run (no config.json written by refimpl train)"
            raise FileExistsError(f"run directory {run_dir} {how}, or choose another --name")
        if here == runs_dir.resolve():
            raise ValueError(f"--overwrite: {run_dir} is the runs directory itself")
        check_deletable(run_dir, "--overwrite")
        _writable(run_dir.parent, "--overwrite", f"{run_dir} is deleted and written again")
        _writable(run_dir, "--overwrite", f"{run_dir} is deleted and written again")
    else:
        _writable(run_dir, "--runs-dir", f"the run directory {run_dir} is created there")


def preflight(cfg: TrainConfig, saved: SavedRun | None = None) -> Plan:
    """Every check a run makes before it writes anything or trains its warm start, in two
    steps: the run resolved once from its settings (``refimpl.settings.plan.resolve``: every
    flag), then its run directory and warm-start cache checked against that plan
    (``check_run_dir``). ``saved``: a resumed run's config.json when the caller has read it
    already (``read_saved_run``; the command line does, to take the run's settings as its
    flags' defaults): it is not read again."""
    if cfg.resume and saved is None:
        try:
            saved = read_saved_run(cfg.run_dir)
        except CheckpointError:
            raise  # its config.json was edited: named, whatever the flags
        except ValueError:
            pass  # not a run: check_run_dir refuses it, after the flags
    plan = resolve(cfg, saved)
    check_run_dir(plan)
    return plan


def write_new_run(run_dir: Path, cfg: TrainConfig, algo_cfg: Any,
                  base: dict[str, Any] | None = None) -> None:  # fmt: skip
    """config.json of a new run (its settings, the algorithm's, the versions, and ``base``:
    which base model it started from, ``refimpl.runs.shipped.describe_base``) and empty
    logs."""
    record = {
        "train_config": config_dict(cfg),
        "algo_config": dataclasses.asdict(algo_cfg),
        "versions": versions(),
        "numerics": numerics.describe(),
        **({"base_model": base} if base is not None else {}),
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


# ---------------------------------------------------------------------------------------------
# The Trainer's side: open the run directory, save and restore its checkpoint.
# ---------------------------------------------------------------------------------------------


def open_run_dir(plan: Plan, model, optimizer) -> tuple[int, int]:
    """A new run: create the directory (``--overwrite``: delete the old run first) and write
    config.json. A resumed run: restore its checkpoint into ``model`` and ``optimizer``
    (``restore_run``), then record in config.json the new length of the run
    (``RESUME_RECORDED``) and when it was resumed. Returns ``(step, sampled_tokens)``, where
    the run continues from."""
    cfg, run_dir = plan.cfg, plan.run_dir
    if plan.saved is None:
        # Checked again here: the warm start may have taken minutes since preflight.
        prepare_run_dir(run_dir, resume=False, overwrite=cfg.overwrite)
        write_new_run(run_dir, cfg, plan.algo_cfg, getattr(model, "base_record", None))
        return 0, 0
    step, sampled_tokens = restore_run(run_dir, model, optimizer, cfg.fresh_optimizer)
    record_resume(run_dir, plan.saved.config, cfg, step)
    return step, sampled_tokens


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
    metrics = read_metrics(run_dir, missing_ok=True) if checkpoint else []
    probes = read_probes(run_dir) if checkpoint else []
    logged = max((r["step"] for r in metrics), default=0)
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


def save_run(plan: Plan, model, optimizer, step: int, sampled_tokens: int) -> None:
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
        "train_config": config_dict(plan.cfg),
        "algo_config": dataclasses.asdict(plan.algo_cfg),
    }
    save_checkpoint(plan.run_dir / "checkpoint", model, optimizer, state)
