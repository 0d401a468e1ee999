"""Checkpoints and run directories: nothing lost on interruption, nothing overwritten silently.

A checkpoint is a directory holding

    model.safetensors   the policy weights (safetensors: no pickle, no code execution)
    optimizer.pt        the optimizer state, read back with ``torch.load(weights_only=True)``
    state.json          the step, the configs and anything else JSON-serialisable

written so that a crash at any moment leaves a whole checkpoint on disk, never a mixture:

1. everything goes into ``<name>.tmp`` (each file flushed to disk);
2. the current checkpoint, when there is one, is renamed ``<name>.old``;
3. ``<name>.tmp`` is renamed ``<name>``;
4. ``<name>.old`` is deleted.

A crash between 2 and 3 leaves ``<name>.old`` alone: ``find_checkpoint`` then returns it, and
it is deleted only after a new checkpoint is complete. Every file is checked when read: a
missing or damaged one raises ``CheckpointError`` naming it.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from refimpl.runlog import RUN_FILES, foreign_files, is_run_dir


class CheckpointError(ValueError):
    """A checkpoint file is missing or damaged (the message names the file)."""


def _one_line(err: BaseException) -> str:
    """The first sentence of an error message, on one line."""
    text = " ".join(str(err).split()) or type(err).__name__
    first = text.split(". ")[0].rstrip(".")
    return first[:160] + ("…" if len(first) > 160 else "")


def check_weights_file(path: Path) -> None:
    """Read the header of ``path/model.safetensors`` (cheap): ``CheckpointError`` naming the
    file when it is missing or not a safetensors file."""
    from safetensors import safe_open

    file = Path(path) / "model.safetensors"
    if not file.exists():
        raise CheckpointError(f"{file}: missing")
    try:
        with safe_open(str(file), framework="pt") as f:
            f.keys()
    except Exception as err:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{file}: damaged ({_one_line(err)})") from None


def _fsync(path: Path) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
) -> None:
    """Write ``model``, ``optimizer`` and ``state`` to the directory ``path``, atomically."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    old = path.with_name(path.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    # safetensors refuses tensors that share memory (the tied head): store each name once.
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    seen: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, p in model.state_dict().items():
        key = p.data_ptr()
        if key in seen:
            tied[name] = seen[key]
            weights.pop(name)
        else:
            seen[key] = name
    save_file(weights, str(tmp / "model.safetensors"), metadata={"tied": json.dumps(tied)})
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    (tmp / "state.json").write_text(json.dumps(state, indent=2, default=str))
    for f in tmp.iterdir():
        _fsync(f)
    # Swap in the new checkpoint. `old` is deleted only while `path` is whole (step 2 then
    # replaces it) or after `tmp` has become `path`: there is always one whole checkpoint.
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def find_checkpoint(path: Path, *, warn: bool = True) -> Path | None:
    """The checkpoint to resume from: ``path``, or ``path.old`` when a save was cut between
    its two renames (with a warning), or None when there is neither."""
    path = Path(path)
    if path.exists():
        return path
    old = path.with_name(path.name + ".old")
    if old.exists():
        if warn:
            warnings.warn(
                f"{path}: missing, but {old.name} is there (a save was interrupted): "
                "resuming from it",
                stacklevel=2,
            )
        return old
    return None


def load_model_weights(path: Path, model: torch.nn.Module) -> None:
    """Load ``model.safetensors`` from the checkpoint directory ``path`` into ``model``."""
    from safetensors import safe_open

    file = Path(path) / "model.safetensors"
    if not file.exists():
        raise CheckpointError(f"{file}: missing")
    try:
        weights = load_file(str(file))
        with safe_open(str(file), framework="pt") as f:
            tied = json.loads((f.metadata() or {}).get("tied", "{}"))
        for name, source in tied.items():
            weights[name] = weights[source]
    except Exception as err:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{file}: damaged ({_one_line(err)})") from None
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise CheckpointError(
            f"{file}: does not fit the model (another model size?): {_one_line(err)}"
        ) from None


def read_state(path: Path) -> dict[str, Any]:
    """The ``state.json`` of the checkpoint directory ``path``."""
    file = Path(path) / "state.json"
    try:
        state = json.loads(file.read_text())
    except FileNotFoundError:
        raise CheckpointError(f"{file}: missing") from None
    except (ValueError, UnicodeDecodeError):
        raise CheckpointError(f"{file}: damaged (not valid JSON)") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{file}: damaged (not a JSON object)")
    return state


def _load_optimizer_state(path: Path) -> dict[str, Any]:
    file = Path(path) / "optimizer.pt"
    if not file.exists():
        raise CheckpointError(f"{file}: missing")
    try:
        # On the CPU: load_state_dict moves the state to the parameters' device, so a run
        # resumes on another device than the one that saved it (--device may change).
        return torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointError(f"{file}: damaged ({_one_line(err)})") from None


def check_optimizer_file(path: Path) -> None:
    """``CheckpointError`` naming ``path/optimizer.pt`` when it is missing or unreadable."""
    try:
        _load_optimizer_state(path)
    except CheckpointError as err:
        raise CheckpointError(f"{err}; {FRESH_OPTIMIZER_HINT}") from None


FRESH_OPTIMIZER_HINT = "pass --fresh-optimizer to continue with a fresh optimizer state"


def load_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    *,
    fresh_optimizer: bool = False,
) -> dict[str, Any]:
    """Restore ``model`` (and ``optimizer``) from ``path``; return the saved ``state``.

    A missing or damaged ``optimizer.pt`` is an error unless ``fresh_optimizer``, which keeps
    the optimizer as it is (a fresh Adam state) with a warning."""
    path = Path(path)
    state = read_state(path)
    load_model_weights(path, model)
    if optimizer is not None:
        try:
            state_dict = _load_optimizer_state(path)
            try:
                optimizer.load_state_dict(state_dict)
            except Exception as err:  # another optimizer or model: not this run's state
                raise CheckpointError(
                    f"{path / 'optimizer.pt'}: does not fit the optimizer ({_one_line(err)})"
                ) from None
        except CheckpointError as err:
            if not fresh_optimizer:
                raise CheckpointError(f"{err}; {FRESH_OPTIMIZER_HINT}") from None
            warnings.warn(f"{err}: continuing with a fresh optimizer state", stacklevel=2)
    return state


def prepare_run_dir(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Create ``run_dir``; refuse to reuse an existing one unless ``resume`` or ``overwrite``.

    ``overwrite`` deletes only a run directory (a ``config.json`` of ``refimpl train`` and
    nothing but the files a run holds); anything else is refused."""
    run_dir = Path(run_dir)
    if run_dir.exists() and any(run_dir.iterdir()):
        if overwrite and not resume:
            check_deletable(run_dir, "--overwrite")
            shutil.rmtree(run_dir)
        elif not resume:
            raise FileExistsError(
                f"run directory {run_dir} already exists: pass --resume to continue it, "
                "--overwrite to start again, or choose another --name"
            )
    run_dir.mkdir(parents=True, exist_ok=True)


def check_deletable(run_dir: Path, flag: str) -> None:
    """Raise ``ValueError`` (naming ``flag``) unless ``run_dir`` is recognisably a run."""
    if not is_run_dir(run_dir):
        raise ValueError(
            f"{flag}: {run_dir} is not a run directory (no config.json written by refimpl "
            "train); refusing to delete it"
        )
    foreign = foreign_files(run_dir)
    if foreign:
        raise ValueError(
            f"{flag}: {run_dir} holds files a run does not write ({', '.join(foreign[:5])}"
            f"{', …' if len(foreign) > 5 else ''}); refusing to delete it"
        )


__all__ = [
    "RUN_FILES",
    "CheckpointError",
    "check_deletable",
    "check_optimizer_file",
    "check_weights_file",
    "find_checkpoint",
    "load_checkpoint",
    "load_model_weights",
    "prepare_run_dir",
    "read_state",
    "save_checkpoint",
]
