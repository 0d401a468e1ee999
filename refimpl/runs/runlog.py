"""What a run directory holds, read in one place.

A run directory (``runs/<name>/``) is written by ``refimpl train``:

    config.json      the run's settings (``train_config``, ``algo_config``) and the versions
                     of refimpl, torch, numpy and Python (and the git commit) that made it
    metrics.jsonl    one JSON line per step (plus step 0's evaluation), flushed every step
                     and on the disk (fsync) before each checkpoint
    probes.jsonl     entropy snapshots along completions of fixed probe prompts
    checkpoint/      the last checkpoint (``checkpoint.old``/``.tmp`` only while one is saved)
    curves.png       the run's figure; tensorboard/ with ``--tensorboard``

``read_metrics`` is the one reader of ``metrics.jsonl``: the trainer's resume, ``plot``,
``compare``, ``runs`` and the benchmarks all go through it. A crash in the middle of a write
can leave a torn last line, a power cut a zero-filled one; it is dropped with a warning (the
step it belonged to is simply not logged). Garbage anywhere else, or steps out of order, is
an error naming the file and the line.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import stat
import subprocess
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The lock file of a run directory: ``refimpl train`` holds an OS lock on it (``flock``)
#: for as long as it writes there (see ``refimpl.runs.lock.RunLock``). It is never deleted, not
#: even by ``--overwrite``: a lock file deleted while held would let a second process in.
LOCK_FILE = "run.lock"

#: The files of a checkpoint directory (``checkpoint/``, ``checkpoint.tmp/``, ``checkpoint.old/``).
CHECKPOINT_FILES = frozenset({"model.safetensors", "optimizer.pt", "state.json"})

#: Everything the trainer and ``plot`` write into a run directory, at every depth: the
#: top-level names, and for each subdirectory what it may hold (TensorBoard's event files are
#: named ``events.out.tfevents.<time>.<host>...``). ``--overwrite`` deletes a directory only
#: when it holds a run's ``config.json`` and nothing outside this tree.
RUN_FILES = frozenset(
    {
        "config.json",
        "config.json.tmp",
        "metrics.jsonl",
        "metrics.jsonl.tmp",
        "probes.jsonl",
        "probes.jsonl.tmp",
        "checkpoint",
        "checkpoint.tmp",
        "checkpoint.old",
        "curves.png",
        "tensorboard",
        LOCK_FILE,
    }
)
RUN_SUBDIRS: dict[str, Callable[[str], bool]] = {
    "checkpoint": CHECKPOINT_FILES.__contains__,
    "checkpoint.tmp": CHECKPOINT_FILES.__contains__,
    "checkpoint.old": CHECKPOINT_FILES.__contains__,
    "tensorboard": lambda name: name.startswith("events.out.tfevents."),
}


#: The most bytes a reader takes of a run's log (``metrics.jsonl``, ``probes.jsonl``): a step
#: writes a few kB, so this is some 300,000 steps; a larger file (a 20 GB sparse one, a link
#: to ``/dev/zero``) is refused before it is read, not read until the kernel kills refimpl.
MAX_LOG_BYTES = 1 << 30
#: The most bytes a reader takes of a settings file (``config.json``, ``--config``,
#: ``state.json``, the lock file): they hold a few kB.
MAX_SETTINGS_BYTES = 16 << 20


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def _check_regular(st: os.stat_result, path: Path, limit: int | None) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not stat.S_ISREG(st.st_mode):
        kind = _file_kind(st.st_mode)
        raise OSError(errno.EINVAL, f"not a regular file: {kind}", str(path))
    if limit is not None and st.st_size > limit:
        raise OSError(
            errno.EFBIG,
            f"{st.st_size:,} bytes, more than the {limit:,} refimpl reads of such a file",
            str(path),
        )


def check_regular_file(path: Path | str, limit: int | None = None) -> None:
    """``OSError`` (its ``strerror`` says why) unless ``path`` is a regular file (after links)
    of at most ``limit`` bytes: a FIFO would block the reader forever, a device
    (``/dev/zero``) never ends. ``FileNotFoundError`` when it is missing."""
    _check_regular(os.stat(path), Path(path), limit)


def read_bytes_bounded(path: Path | str, limit: int) -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them, else ``OSError``
    (``check_regular_file``'s): opened without blocking (a FIFO is refused, not waited on)
    and checked on the open descriptor, so what is read is what was checked."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        _check_regular(os.fstat(fd), Path(path), limit)
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew since the check
        raise OSError(errno.EFBIG, f"more than the {limit:,} bytes refimpl reads", str(path))
    return data


def read_text_bounded(path: Path | str, limit: int) -> str:
    """``read_bytes_bounded`` decoded as UTF-8 (``UnicodeDecodeError`` when it is not text)."""
    return read_bytes_bounded(path, limit).decode("utf-8")


def open_no_follow(path: Path | str, mode: str = "a"):
    """``open(path, mode)`` for writing (``"a"``, ``"w"`` or ``"wb"``) that refuses, naming it, a
    symbolic link in the last component: a run never writes through a link (the file it
    points to may be anyone's)."""
    flags = os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    flags |= os.O_APPEND if mode.startswith("a") else os.O_TRUNC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP or Path(path).is_symlink():
            raise OSError(
                errno.ELOOP, "a symbolic link, which refimpl never writes through", str(path)
            ) from None
        raise
    return os.fdopen(fd, mode)


def links_in(run_dir: Path | str) -> list[str]:
    """Every symbolic link in ``run_dir``, at any depth (links are not followed), as sorted
    paths relative to it: a run's writers and renames would act on what they point to."""
    run_dir = Path(run_dir)
    found: list[str] = []
    for top, dirs, files in os.walk(run_dir):
        for name in [*dirs, *files]:
            if (Path(top) / name).is_symlink():
                found.append(str((Path(top) / name).relative_to(run_dir)))
    return sorted(found)


def refuse_links(run_dir: Path | str, flag: str) -> None:
    """``ValueError`` naming ``flag`` and the first link ``links_in`` finds in ``run_dir``."""
    links = links_in(run_dir)
    if links:
        link = Path(run_dir) / links[0]
        more = f" (and {len(links) - 1} more)" if len(links) > 1 else ""
        raise ValueError(
            f"{flag}: {link} is a symbolic link (to {os.readlink(link)}){more}, which refimpl "
            "never writes, renames or deletes through: replace it by the file itself, or "
            "remove it"
        )


def check_output_file(path: Path | str, flag: str, overwrite: bool = True) -> None:
    """``ValueError`` naming ``flag`` unless a command can write the file ``path`` (through
    ``write_text_atomic``) when it ends; checked before the command does any work, and
    changing nothing. Refused: a symbolic link at ``path`` or at its temporary ``path.tmp``
    (refimpl never writes through one), ``path`` that is not a regular file, an existing
    ``path`` without ``overwrite``, and a directory that cannot be made or written (a file
    in its place, a read-only or virtual file system such as ``/proc``)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    for p in (path, tmp):
        if p.is_symlink():
            raise ValueError(
                f"{flag}: {p} is a symbolic link (to {os.readlink(p)}), which refimpl never "
                "writes through: remove it, or choose another path"
            )
    if path.exists() and not overwrite:
        raise ValueError(f"{flag}: {path} exists (--overwrite replaces it)")
    for p in (path, tmp):
        if p.exists() and not p.is_file():
            raise ValueError(f"{flag}: {p} exists and is not a regular file")
    parent = path.parent if str(path.parent) else Path(".")
    ancestor = parent
    while not ancestor.exists() and not ancestor.is_symlink():
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ValueError(f"{flag}: {ancestor} is not a directory, so {path} cannot be written")
    if not os.access(ancestor, os.W_OK | os.X_OK) or _read_only(ancestor):
        raise ValueError(
            f"{flag}: {ancestor} is not writable (permissions, or a read-only or virtual file "
            f"system), so {path} cannot be written"
        )


def _read_only(directory: Path) -> bool:
    """Whether ``directory`` is on a file system that takes no new files although
    ``os.access`` says yes (root on a read-only mount, ``/proc``, ``/sys``)."""
    try:
        st = os.statvfs(directory)
    except OSError:
        return False
    if st.f_flag & getattr(os, "ST_RDONLY", 1):
        return True
    # proc and sysfs report no blocks at all: nothing can be created there.
    return st.f_blocks == 0 and st.f_files == 0


class TornLineWarning(UserWarning):
    """The last line of a JSON-lines log was cut by a crash mid-write (or zero-filled by a
    power cut) and is ignored."""


def parse_json(text: str) -> Any:
    """``json.loads(text)``, with JSON nested too deeply for the parser (``[[[[…`` ten
    thousand deep: Python's decoder recurses) a ``ValueError`` like any invalid JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply") from None


class JSONFileError(ValueError):
    """``read_json`` could not read a file: one line naming it and why. ``kind`` is
    ``"missing"``, ``"invalid"`` (not valid JSON, or not text) or ``"unreadable"`` (a
    directory, a FIFO, too large, no permission: ``detail`` says which), for a caller that
    words its own message."""

    def __init__(self, path: Path | str, kind: str, detail: str = "") -> None:
        self.path, self.kind, self.detail = Path(path), kind, detail
        why = {"missing": "no such file", "invalid": "not valid JSON"}.get(
            kind, f"not readable ({detail})"
        )
        super().__init__(f"{path}: {why}")


def read_json(path: Path | str, limit: int = MAX_SETTINGS_BYTES) -> Any:
    """The JSON value in the regular file ``path`` (at most ``limit`` bytes, read as
    ``read_text_bounded`` reads: a FIFO or a device is refused, not waited on), else a
    ``JSONFileError``: the one reader of the settings files (config.json, ``--config``, a
    checkpoint's state.json)."""
    try:
        return parse_json(read_text_bounded(path, limit))
    except FileNotFoundError:
        raise JSONFileError(path, "missing") from None
    except (ValueError, UnicodeDecodeError):
        raise JSONFileError(path, "invalid") from None
    except OSError as err:  # a directory, a FIFO, too large, unreadable
        raise JSONFileError(path, "unreadable", str(err.strerror or err)) from None


def fsync_file(path: Path | str) -> None:
    """Flush ``path``'s bytes to the disk (what a power cut cannot take back)."""
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def read_jsonl(path: Path | str, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    """The records of a JSON-lines log written by the trainer, one dict per line.

    A last line that is not valid JSON (a write cut short by a crash) is dropped with a
    ``TornLineWarning``; an invalid line anywhere else raises ``ValueError`` naming the file
    and the line. ``missing_ok``: a missing file reads as no records."""
    path = Path(path)
    try:
        text = read_text_bounded(path, MAX_LOG_BYTES)
    except FileNotFoundError:
        if missing_ok:
            return []
        raise ValueError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not a text file (damaged?)") from None
    except OSError as err:  # a directory where the log should be, unreadable, ...
        raise ValueError(f"{path}: not readable ({err.strerror or err}; damaged?)") from None
    lines = text.split("\n")
    last = max((i for i, line in enumerate(lines) if line.strip()), default=-1)
    records: list[dict[str, Any]] = []
    for i, line in enumerate(lines):
        zeros = "\0" in line
        if zeros and not (i == last and records):
            # Zeros before the last line, or nothing but zeros: blocks a crash or a full disk
            # never wrote, and the log from there on is lost (not one torn write).
            raise ValueError(
                f"{path}: line {i + 1} holds NUL bytes (zero-filled by a crash or a full disk), "
                f"so the log from there on is lost"
            )
        if not line.strip():
            continue
        try:
            record = parse_json(line)
            if zeros or not isinstance(record, dict):
                raise ValueError("not an object")
        except ValueError:
            if i == last:
                how = "zero-filled" if zeros else "torn"
                warnings.warn(
                    f"{path}: dropped a {how} last line (line {i + 1}, cut when the run was "
                    f"stopped mid-write or the machine lost power); the {len(records)} lines "
                    "before it are kept",
                    TornLineWarning,
                    stacklevel=2,
                )
                break
            raise ValueError(f"{path}: line {i + 1} is not a JSON object (damaged?)") from None
        records.append(record)
    return records


def read_metrics(run: Path | str, *, missing_ok: bool = False) -> list[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl`` (``run``: the run directory or the file).

    One record per step, plus step 0's evaluation; every record has an integer ``step``."""
    path = Path(run)
    if path.is_dir() or path.name != "metrics.jsonl":
        path = path / "metrics.jsonl"
    records = read_jsonl(path, missing_ok=missing_ok)
    for n, r in enumerate(records):
        step = r.get("step")
        if not isinstance(step, int) or isinstance(step, bool):
            raise ValueError(f"{path}: record {n + 1} has no integer 'step' (damaged?)")
        if n and step <= records[n - 1]["step"]:  # the trainer logs each step once, in order
            raise ValueError(
                f"{path}: record {n} has step {records[n - 1]['step']} and record {n + 1} step "
                f"{step}: out of order (edited or damaged?)"
            )
    return records


def read_probes(run: Path | str) -> list[dict[str, Any]]:
    """The entropy snapshots of a run's ``probes.jsonl`` (none when the file is missing)."""
    return read_jsonl(Path(run) / "probes.jsonl", missing_ok=True)


class MetricsLog:
    """A run's metrics.jsonl, one record per line, each flushed as it is written, and with
    ``tensorboard`` the same numbers as TensorBoard scalars under ``<run>/tensorboard``."""

    def __init__(self, run_dir: Path | str, tensorboard: bool = False) -> None:
        self.path = Path(run_dir) / "metrics.jsonl"
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(Path(run_dir) / "tensorboard"))

    def append(self, record: dict[str, Any]) -> None:
        with open_no_follow(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
        if self._tb is not None:
            for k, v in record.items():
                if isinstance(v, (int, float)) and k != "step":
                    self._tb.add_scalar(k, v, record["step"])

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()


def write_jsonl(path: Path | str, records: list[dict[str, Any]]) -> None:
    """Replace ``path`` by ``records``, atomically (a crash leaves the old file or the new)."""
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in records))


def write_text_atomic(path: Path | str, text: str) -> None:
    """Write ``text`` to ``path`` through ``path.tmp`` and a rename. A failed write (a full
    disk) removes ``path.tmp``, leaves ``path`` as it was and raises ``OSError`` naming it."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """``write_text_atomic`` for bytes (a figure): the one writer of every file refimpl
    replaces whole (run directories, ``refimpl credit``'s JSON, the benchmarks' and the report
    generators' files). ``path.tmp`` is opened without following a link (``open_no_follow``),
    and the rename replaces a link at ``path`` itself, never what it points to."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open_no_follow(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
    except OSError as err:
        if not tmp.is_symlink():  # a link is left as it is, and named
            tmp.unlink(missing_ok=True)
        where = f" ({tmp})" if err.errno == errno.ELOOP else ""
        raise OSError(
            err.errno,
            f"{err.strerror or err}{where}: {path} was not written (it is as it was)",
        ) from None
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# Run directories.
# ---------------------------------------------------------------------------------------------


def read_run_config(run_dir: Path | str) -> dict[str, Any]:
    """A run's ``config.json`` as a dict with at least ``train_config`` (a dict naming the
    ``algo`` and the ``task``). Raises ``ValueError`` naming the file when it is missing,
    damaged or not written by ``refimpl train``."""
    path = Path(run_dir) / "config.json"
    try:
        state = read_json(path)
    except JSONFileError as err:
        how = {
            "missing": "no such file (not a run directory?)",
            "invalid": "not valid JSON (damaged?)",
            "unreadable": f"not readable ({err.detail}; damaged?)",
        }[err.kind]
        raise ValueError(f"{path}: {how}") from None
    tc = state.get("train_config") if isinstance(state, dict) else None
    if not (isinstance(tc, dict) and "algo" in tc and "task" in tc):
        raise ValueError(f"{path}: not a config.json written by refimpl train")
    for key in ("algo", "task"):  # what every reader of a run (runs, plot) shows first
        if not isinstance(tc[key], str):
            raise ValueError(
                f"{path}: train_config.{key} is {json.dumps(tc[key])}, expected a string "
                "(not a config.json written by refimpl train: edited?)"
            )
    return state


def is_run_dir(path: Path | str) -> bool:
    """``path`` is a directory holding a ``config.json`` written by ``refimpl train``."""
    try:
        read_run_config(path)
    except (ValueError, OSError):
        return False
    return True


def foreign_files(run_dir: Path | str) -> list[str]:
    """Everything under ``run_dir``, at any depth, that neither the trainer nor ``plot``
    writes (``RUN_FILES``, ``RUN_SUBDIRS``), as sorted paths relative to ``run_dir``. A
    symbolic link is always foreign (deleting through it could reach anything)."""
    run_dir = Path(run_dir)
    foreign: list[str] = []
    for entry in sorted(run_dir.iterdir()):
        if entry.is_symlink() or entry.name not in RUN_FILES:
            foreign.append(entry.name)
        elif entry.name in RUN_SUBDIRS and entry.is_dir():
            allowed = RUN_SUBDIRS[entry.name]
            for p in sorted(entry.rglob("*")):
                if p.is_symlink() or p.parent != entry or not p.is_file() or not allowed(p.name):
                    foreign.append(str(p.relative_to(run_dir)))
        elif entry.name in RUN_SUBDIRS or entry.is_dir():  # a file where a run has a folder
            foreign.append(entry.name + ("/" if entry.is_dir() else ""))
    return foreign


#: What a run writes beside its config.json, from its first step on (``run.lock`` aside: a
#: process that claims a directory creates it before it checks what the directory holds). A
#: damaged config.json is a damaged run only next to one of these: a config.json alone is
#: someone else's file (``--overwrite`` must prove that a directory is a run before it
#: deletes anything).
RUN_EVIDENCE = frozenset({"metrics.jsonl", "probes.jsonl", "checkpoint", "checkpoint.old",
                          "checkpoint.tmp"})  # fmt: skip


def run_dir_damage(path: Path | str) -> str | None:
    """Why ``path`` looks like a run directory but is not one, e.g. ``"config.json: not valid
    JSON (damaged?)"``: its ``config.json`` is damaged, or not refimpl's although the run's
    other files (``RUN_EVIDENCE``) are beside it, or missing next to them. None for a run,
    and for a directory that is no run at all: a ``config.json`` alone, or one that is whole
    JSON without a ``train_config`` (someone else's settings, which refimpl never wrote).
    ``refimpl runs`` lists such directories as damaged; ``--overwrite`` deletes them."""
    path = Path(path)
    try:
        names = {p.name for p in path.iterdir()}
    except OSError:
        return None
    if "config.json" not in names:
        if names & {"metrics.jsonl", "checkpoint", "checkpoint.old"}:
            return "config.json: missing (the run's other files are there)"
        return None
    try:
        read_run_config(path)
    except ValueError as err:
        if not names & RUN_EVIDENCE or _someone_elses(path / "config.json"):
            return None  # no sign of a run: not a run, damaged or not
        return str(err).replace(str(path / "config.json"), "config.json", 1)
    return None


def _someone_elses(config: Path) -> bool:
    """``config`` is whole JSON that holds no ``train_config``: a settings file of another
    program (every config.json of ``refimpl train`` has one, written whole by a rename)."""
    try:
        data = read_json(config)
    except JSONFileError:
        return False  # torn, unreadable, a directory: damage, not evidence of anything
    return not (isinstance(data, dict) and "train_config" in data)


def find_runs(root: Path | str, *, damaged: bool = False) -> list[Path]:
    """Every run directory under ``root`` (at any depth, e.g. ``compare``'s
    ``<name>/<algo>-s<seed>``), sorted; the warm-start cache is not a run. ``damaged``:
    also the directories ``run_dir_damage`` finds damaged."""
    root = Path(root)
    found: list[Path] = []

    def walk(d: Path) -> None:
        if is_run_dir(d) or (damaged and run_dir_damage(d) is not None):
            found.append(d)
            return
        try:
            children = sorted(p for p in d.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            return
        for child in children:
            if not (child.name == "warmstart" and child.parent == root):
                walk(child)

    walk(root)
    return found


def nearest_existing(path: Path | str) -> Path:
    """``path`` itself if it exists, else its nearest existing parent (what decides whether
    ``path`` can be created)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


# ---------------------------------------------------------------------------------------------
# Versions: what made a run.
# ---------------------------------------------------------------------------------------------


def versions() -> dict[str, str]:
    """refimpl, torch, numpy and Python versions, and the git commit of the refimpl checkout
    (with ``+dirty`` when it has uncommitted changes; absent outside a git checkout)."""
    import numpy
    import torch

    import refimpl

    out = {
        "refimpl": refimpl.__version__,
        "torch": torch.__version__,
        "numpy": numpy.__version__,
        "python": platform.python_version(),
    }
    commit = git_commit()
    if commit:
        out["git_commit"] = commit
    return out


def git_commit() -> str | None:
    """The commit of the git checkout refimpl is imported from, or None (not a checkout,
    no git)."""
    source = Path(__file__).resolve().parents[2]  # refimpl/runs/runlog.py → the checkout
    if not (source / ".git").exists():
        return None
    try:
        head = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None
