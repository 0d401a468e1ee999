"""A run's place on the disk, checked before anything is written: ``--runs-dir`` is a
directory (or the nearest part of it that exists is), and ``--name`` is one printable name
inside it, short enough for the file system, never the warm-start cache's and never a symbolic
link (``refimpl.runs.rundir.check_run_dir`` runs these checks; ``refimpl compare`` and the
command line check their own flags with them).
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath

from refimpl.runs.runlog import nearest_existing


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
