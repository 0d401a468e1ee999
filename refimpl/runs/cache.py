"""The warm-start cache on the disk: where a base model is kept, and whether it can be.

A warm start's model is trained once and cached under ``<runs_dir>/warmstart/<task>-<key>/``
(a checkpoint directory: ``model.safetensors`` and ``state.json``), where the key hashes
every setting that changes the trained weights, the numeric path included
(``refimpl.runs.cpu_kernels``): another kernel path trains another model, so it never reuses
this one. ``refimpl.warmstart`` chooses, trains and loads it (``choose_base``: before anything is
trained, a cache that has to be written is checked to be writable).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import NamedTuple

from refimpl.runs import cpu_kernels
from refimpl.runs.checkpoint import CheckpointError, check_replaceable
from refimpl.runs.runlog import nearest_existing
from refimpl.types.flags import flag


class WarmstartKeys(NamedTuple):
    """The keys of a warm start's identity (``WarmstartConfig.key_inputs()``), computed
    together (``keys``): ``refimpl.warmstart.choose_base`` needs each, once."""

    settings_key: str  # the settings alone: the same on every machine (a shipped model's)
    cache_key: str  # the settings and this machine's numeric path (its cache's)
    cache: Path  # the cache directory, <runs_dir>/warmstart/<task>-<cache_key>


def keys(inputs: dict, runs_dir: Path | str = ".") -> WarmstartKeys:
    """The keys of the warm start ``inputs`` (``WarmstartConfig.key_inputs()``) and its cache
    directory under ``runs_dir``."""
    settings, machine = (  # the settings alone; then with this machine's numeric path
        hashlib.sha256(json.dumps(keep, sort_keys=True, default=str).encode()).hexdigest()[:10]
        for keep in (inputs, {**inputs, "numerics": cpu_kernels.cache_tag()})
    )
    return WarmstartKeys(
        settings, machine, Path(runs_dir) / "warmstart" / f"{inputs['task']}-{machine}"
    )


def cache_key(inputs: dict) -> str:
    """A hash of every setting of a warm start that changes the trained weights (``inputs``:
    ``WarmstartConfig.key_inputs()``) and of the numeric path: another kernel path trains
    another model, so this machine's cache never reuses one trained on another path."""
    return keys(inputs).cache_key


def settings_key(inputs: dict) -> str:
    """A hash of the settings alone (``inputs``: ``WarmstartConfig.key_inputs()``, no numeric
    path): the same on every machine, so a base model shipped with the package
    (``refimpl.runs.shipped``) is found by it wherever it was trained."""
    return keys(inputs).settings_key


def cache_path(runs_dir: Path | str, inputs: dict) -> Path:
    """The directory of the cached model of the warm start ``inputs``
    (``WarmstartConfig.key_inputs()``) under ``runs_dir``."""
    return keys(inputs, runs_dir).cache


def cache_dir(cfg) -> Path:
    """The directory of ``cfg``'s cached model (``cache_path`` of its settings)."""
    return cache_path(cfg.runs_dir, cfg.key_inputs())


def cache_complete(cache: Path) -> bool:
    """The cache directory ``cache`` holds a whole trained model (saves are atomic: present
    means whole)."""
    return (Path(cache) / "model.safetensors").exists()


def check_cache_writable(cache: Path, prefix: str = "--") -> None:
    """Raise ``ValueError`` naming ``runs_dir`` when the cache directory ``cache`` of a model
    that is to be trained cannot be written: not writable, a symbolic link, or holding what a
    cache does not (``checkpoint.check_replaceable``). Whether the model is trained (not
    shipped, not cached, or ``--force``) is decided in one place,
    ``refimpl.warmstart.choose_base``, which calls this then. ``prefix``: how the flags are
    spelled."""
    lock = Path(str(cache) + ".lock")
    try:  # the save renames the cache directory: never a link, nothing else inside
        check_replaceable(cache)
        if lock.is_symlink():  # the lock file is opened for writing (and truncated)
            raise CheckpointError(f"{lock}: a symbolic link (to {os.readlink(lock)})")
    except CheckpointError as err:
        raise ValueError(
            f"{flag('runs_dir', prefix)}: the warm start has to be trained and cached, but {err}"
        ) from None
    target = nearest_existing(cache)
    if not os.access(target, os.W_OK | os.X_OK):
        raise ValueError(
            f"{flag('runs_dir', prefix)}: {target} is not writable, and the warm start {cache} "
            f"has to be trained and cached there; choose a writable {flag('runs_dir', prefix)}"
        )
