"""The warm-start cache on the disk: where a base model is kept, and whether it can be.

A warm start's model is trained once and cached under ``<runs_dir>/warmstart/<task>-<key>/``
(a checkpoint directory: ``model.safetensors`` and ``state.json``), where the key hashes
every setting that changes the trained weights, the numeric path included
(``refimpl.runs.cpu_kernels``): another kernel path trains another model, so it never reuses
this one. ``refimpl.warmstart`` trains and loads it; a run's ``preflight`` checks, before
anything is trained, that a cache that has to be written can be.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

from refimpl.runs import cpu_kernels
from refimpl.runs.checkpoint import CheckpointError, check_replaceable
from refimpl.runs.runlog import nearest_existing
from refimpl.settings.limits import flag
from refimpl.settings.warmstart_config import WARMSTART_MIX, WarmstartConfig
from toy_envs import TOKENIZER


def key_inputs(cfg: WarmstartConfig) -> dict:
    """Every setting of ``cfg`` that changes the trained weights, but the numeric path: the
    task's knobs as ``canonical_task_args`` (not as typed), the supervised mix and the
    vocabulary. What a shipped base model is matched by (``settings_key``)."""
    keep = {
        k: v
        for k, v in dataclasses.asdict(cfg).items()
        if k not in ("runs_dir", "eval_problems", "threads", "force", "progress", "shipped")
    }
    if cfg.schedule_steps in (None, cfg.steps):  # the same schedule: the key it always had
        keep.pop("schedule_steps")
    keep["task_args"] = list(cfg.canonical_task_args())
    keep["mix"] = WARMSTART_MIX.get(cfg.task, {})
    keep["vocab"] = TOKENIZER.itos
    return keep


def _digest(keep: dict) -> str:
    blob = json.dumps(keep, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:10]


def cache_key(cfg: WarmstartConfig) -> str:
    """A hash of every setting of ``cfg`` that changes the trained weights (``key_inputs``)
    and of the numeric path: another kernel path trains another model, so this machine's
    cache never reuses one trained on another path."""
    return _digest({**key_inputs(cfg), "numerics": cpu_kernels.cache_tag()})


def settings_key(cfg: WarmstartConfig) -> str:
    """A hash of the settings alone (``key_inputs``, no numeric path): the same on every
    machine, so a base model shipped with the package (``refimpl.runs.shipped``) is found by
    it wherever it was trained."""
    return _digest(key_inputs(cfg))


def cache_dir(cfg: WarmstartConfig) -> Path:
    """The directory of ``cfg``'s cached model."""
    return Path(cfg.runs_dir) / "warmstart" / f"{cfg.task}-{cache_key(cfg)}"


def cache_complete(cache: Path) -> bool:
    """The cache directory ``cache`` holds a whole trained model (saves are atomic: present
    means whole)."""
    return (Path(cache) / "model.safetensors").exists()


def check_cache_writable(cfg: WarmstartConfig, prefix: str = "--") -> None:
    """Raise ``ValueError`` naming ``runs_dir`` when the model must be trained but its cache
    cannot be written: not writable, a symbolic link, or holding what a cache does not
    (``checkpoint.check_replaceable``). A cached model is read without writing anything
    (through a link too); so is a shipped one, which the callers check first
    (``refimpl.runs.shipped.supplies``). ``prefix``: how the flags are spelled."""
    cache = cache_dir(cfg)
    if cache_complete(cache) and not cfg.force:
        return
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
