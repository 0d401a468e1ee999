"""Checkpoints and run directories: nothing lost on interruption, nothing overwritten silently.

A checkpoint is a directory holding

    model.safetensors   the policy weights (safetensors: no pickle, no code execution)
    optimizer.pt        the optimizer state, read back with ``torch.load(weights_only=True)``
    state.json          the step, the configs and anything else JSON-serialisable

written atomically: everything goes into ``<name>.tmp`` first, which then replaces the old
directory by ``os.replace``. A crash at any moment leaves either the old or the new
checkpoint whole, never a mixture.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file


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
    # Swap in the new checkpoint: old → .old, tmp → path, drop .old.
    shutil.rmtree(old, ignore_errors=True)
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def load_model_weights(path: Path, model: torch.nn.Module) -> None:
    """Load ``model.safetensors`` from the checkpoint directory ``path`` into ``model``."""
    from safetensors import safe_open

    file = Path(path) / "model.safetensors"
    if not file.exists():
        raise FileNotFoundError(f"checkpoint: no model.safetensors in {path}")
    weights = load_file(str(file))
    with safe_open(str(file), framework="pt") as f:
        tied = json.loads((f.metadata() or {}).get("tied", "{}"))
    for name, source in tied.items():
        weights[name] = weights[source]
    model.load_state_dict(weights)


def load_checkpoint(
    path: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, Any]:
    """Restore ``model`` (and ``optimizer``) from ``path``; return the saved ``state``."""
    path = Path(path)
    load_model_weights(path, model)
    if optimizer is not None and (path / "optimizer.pt").exists():
        optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
    return json.loads((path / "state.json").read_text())


def prepare_run_dir(run_dir: Path, *, resume: bool, overwrite: bool) -> None:
    """Create ``run_dir``; refuse to reuse an existing one unless ``resume`` or ``overwrite``."""
    run_dir = Path(run_dir)
    if run_dir.exists() and any(run_dir.iterdir()):
        if overwrite:
            shutil.rmtree(run_dir)
        elif not resume:
            raise FileExistsError(
                f"run directory {run_dir} already exists: pass --resume to continue it, "
                "--overwrite to start again, or choose another --name"
            )
    run_dir.mkdir(parents=True, exist_ok=True)
