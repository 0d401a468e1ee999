"""Checkpoints and run directories: nothing lost on interruption, nothing overwritten silently.

A checkpoint is a directory holding

    model.safetensors   the policy weights (safetensors: no pickle, no code execution)
    optimizer.pt        the optimizer state, read back with ``torch.load(weights_only=True)``
    state.json          the step, the configs, anything else JSON-serialisable, and the
                        sha256 of the two files above (``checksums``)

written so that a crash at any moment leaves a whole checkpoint on disk, never a mixture:

1. everything goes into ``<name>.tmp`` (each file flushed to disk);
2. the current checkpoint, when there is one, is renamed ``<name>.old``;
3. ``<name>.tmp`` is renamed ``<name>``;
4. ``<name>.old`` is deleted.

A crash between 2 and 3 leaves ``<name>.old`` alone: ``find_checkpoint`` then returns it, and
it is deleted only after a new checkpoint is complete. A write that fails in step 1 (a full
disk) removes ``<name>.tmp`` and raises ``CheckpointWriteError`` naming the file; the previous
checkpoint is untouched. Weights that are not finite (a diverged run) are never saved.

Every file is checked when read: a missing or damaged one, a checksum that does not match
(bits flipped on disk) or is not recorded, or non-finite weights raise ``CheckpointError``
naming it.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import shutil
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from refimpl.runs.runlog import (
    CHECKPOINT_FILES,
    RUN_FILES,
    JSONFileError,
    check_regular_file,
    foreign_files,
    fsync_file,
    is_run_dir,
    read_json,
    run_dir_damage,
)


class CheckpointError(ValueError):
    """A checkpoint file is missing or damaged (the message names the file)."""


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (a full disk, ...): the message names the file and
    says that the previous checkpoint is intact."""


def _one_line(err: BaseException) -> str:
    """The first sentence of an error message, on one line."""
    text = " ".join(str(err).split()) or type(err).__name__
    first = text.split(". ")[0].rstrip(".")
    return first[:160] + ("…" if len(first) > 160 else "")


def sha256(file: Path) -> str:
    """The sha256 of ``file``'s bytes, in hex (what ``state.json`` records under
    ``checksums``)."""
    digest = hashlib.sha256()
    check_regular_file(file)  # a FIFO would block, /dev/zero never end
    with open(file, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_file(file: Path) -> None:
    """``CheckpointError`` naming ``file`` unless it is a regular file (a FIFO would block
    the reader, a device such as ``/dev/zero`` never end)."""
    try:
        check_regular_file(file)
    except FileNotFoundError:
        raise CheckpointError(f"{file}: missing") from None
    except OSError as err:
        raise CheckpointError(f"{file}: damaged ({err.strerror or err})") from None


def check_weights_file(path: Path) -> None:
    """Read the header of ``path/model.safetensors`` (cheap): ``CheckpointError`` naming the
    file when it is missing or not a safetensors file."""
    from safetensors import safe_open

    file = Path(path) / "model.safetensors"
    _check_file(file)
    try:
        with safe_open(str(file), framework="pt") as f:
            f.keys()
    except Exception as err:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{file}: damaged ({_one_line(err)})") from None


def _os_error(err: BaseException) -> tuple[int | None, str] | None:
    """The OS error behind a failed write: ``err`` itself, one in its chain (torch.save
    raises a RuntimeError from it), or the ``(os error N)`` that safetensors reports."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, OSError):
            return seen.errno, seen.strerror or str(seen)
        seen = seen.__cause__ or seen.__context__
    found = re.search(r"I/O error: (.*?) \(os error (\d+)\)", str(err))
    if found:
        return int(found.group(2)), found.group(1)
    return None


def _non_finite(tensors: dict[str, torch.Tensor]) -> str | None:
    """The name of the first floating-point tensor holding NaN or inf, or None."""
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            return name
    return None


def save_checkpoint(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer | None,
    state: dict[str, Any],
) -> None:
    """Write ``model``, ``optimizer`` and ``state`` to the directory ``path``, atomically.

    Refuses (``CheckpointError``) weights that are not finite: a checkpoint of a diverged
    policy would replace the last good one. A failed write raises ``CheckpointWriteError``
    with ``path`` as it was and no ``.tmp`` left behind."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    old = path.with_name(path.name + ".old")
    check_replaceable(path)
    # safetensors refuses tensors that share memory (the tied head): store each name once.
    weights = {k: v.detach().contiguous().cpu() for k, v in model.state_dict().items()}
    bad = _non_finite(weights)
    if bad is not None:
        raise CheckpointError(
            f"{path}: not saved, the weights are not finite (NaN or inf in {bad}); the "
            "previous checkpoint is kept"
        )
    seen: dict[int, str] = {}
    tied: dict[str, str] = {}
    for name, p in model.state_dict().items():
        key = p.data_ptr()
        if key in seen:
            tied[name] = seen[key]
            weights.pop(name)
        else:
            seen[key] = name
    shutil.rmtree(tmp, ignore_errors=True)
    file = tmp
    try:
        tmp.mkdir(parents=True)
        file = tmp / "model.safetensors"
        save_file(weights, str(file), metadata={"tied": json.dumps(tied)})
        if optimizer is not None:
            file = tmp / "optimizer.pt"
            # Serialised in memory, written by Python: a full disk is then an OSError naming
            # the file (torch's own writer raises a RuntimeError that names no cause).
            buffer = io.BytesIO()
            torch.save(optimizer.state_dict(), buffer)
            with open(file, "wb") as f:
                f.write(buffer.getbuffer())
        checksums = {f.name: sha256(f) for f in sorted(tmp.iterdir())}
        file = tmp / "state.json"
        file.write_text(json.dumps({**state, "checksums": checksums}, indent=2, default=str))
        for f in tmp.iterdir():
            file = f
            fsync_file(f)
    except Exception as err:
        shutil.rmtree(tmp, ignore_errors=True)
        cause = _os_error(err)
        if cause is None:
            raise
        code, reason = cause
        hint = ": free some disk space" if code in (errno.ENOSPC, errno.EDQUOT) else ""
        kept = f"the previous checkpoint {path} is intact" if path.exists() else "nothing saved"
        if not path.exists() and old.exists():
            kept = f"the previous checkpoint {old} is intact"
        error = CheckpointWriteError(f"{file}: could not be written ({reason}); {kept}{hint}")
        error.errno = code
        raise error from None
    # Swap in the new checkpoint. `old` is deleted only while `path` is whole (step 2 then
    # replaces it) or after `tmp` has become `path`: there is always one whole checkpoint.
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


def check_replaceable(path: Path) -> None:
    """``CheckpointError`` unless a save may replace the checkpoint ``path``: neither it nor
    its ``.tmp`` and ``.old`` is a symbolic link (the renames would move the link and leave
    the next save failing on it), and none holds anything but a checkpoint's files (the swap
    deletes the old directory whole). Nothing is changed."""
    path = Path(path)
    for candidate in (path, path.with_name(path.name + ".tmp"), path.with_name(path.name + ".old")):
        if candidate.is_symlink():
            raise CheckpointError(
                f"{candidate}: a symbolic link (to {os.readlink(candidate)}), which a save "
                "would rename and delete through: replace it by the directory itself, or "
                "remove it"
            )
        if candidate.is_dir():
            foreign = sorted(
                f"{candidate.name}/{p.name}" + ("/" if p.is_dir() else "")
                for p in candidate.iterdir()
                if p.name not in CHECKPOINT_FILES or p.is_symlink() or not p.is_file()
            )
            if foreign:
                raise CheckpointError(
                    f"{candidate}: holds what a checkpoint does not ({', '.join(foreign[:5])}"
                    f"{', …' if len(foreign) > 5 else ''}), which the next save would delete: "
                    "move it out of the checkpoint directory"
                )
        elif candidate.exists():
            raise CheckpointError(f"{candidate}: a file where a checkpoint directory goes")


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


def _check_checksum(path: Path, name: str, state: dict[str, Any]) -> None:
    """``CheckpointError`` naming ``path/name`` when its bytes do not have the sha256 that
    ``state.json`` recorded for it, and naming ``state.json`` when it records none (no
    ``checksums``, ``{}``, or not this file's): a file that cannot be verified is not
    trusted, since flipped bits would then train silently."""
    recorded = state.get("checksums")
    file = Path(path) / name
    if not (isinstance(recorded, dict) and isinstance(recorded.get(name), str)):
        raise CheckpointError(
            f"{Path(path) / 'state.json'}: records no sha256 of {name} (damaged or edited?), "
            f"so {file} cannot be verified: restore state.json"
        )
    _check_file(file)
    if sha256(file) != recorded[name]:
        raise CheckpointError(
            f"{file}: damaged (its sha256 differs from the one {file.parent.name}/state.json "
            "recorded when it was saved)"
        )


def load_model_weights(
    path: Path, model: torch.nn.Module, *, state: dict[str, Any] | None = None
) -> None:
    """Load ``model.safetensors`` from the checkpoint directory ``path`` into ``model``.

    ``state``: the checkpoint's ``state.json``, whose checksum the file must match. Weights
    that are not finite are refused, naming the file."""
    file = Path(path) / "model.safetensors"
    _check_file(file)
    if state is not None:
        _check_checksum(path, "model.safetensors", state)
    weights = _weights_with_tied(path)
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        raise CheckpointError(
            f"{file}: does not fit the model (another model size?): {_one_line(err)}"
        ) from None


def _weights_with_tied(path: Path) -> dict[str, torch.Tensor]:
    """``read_weights`` with the tied names (stored once) filled in, as ``state_dict`` has
    them."""
    from safetensors import safe_open

    file = Path(path) / "model.safetensors"
    weights = read_weights(path)
    try:
        with safe_open(str(file), framework="pt") as f:
            tied = json.loads((f.metadata() or {}).get("tied", "{}"))
        for name, source in tied.items():
            weights[name] = weights[source]
    except Exception as err:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{file}: damaged ({_one_line(err)})") from None
    return weights


def check_weights_fit(weights: dict[str, torch.Tensor], model: torch.nn.Module, file: Path) -> None:
    """``CheckpointError`` naming ``file`` unless ``weights`` has exactly ``model``'s tensors,
    each of its shape (compared without loading: ``model`` may live on the meta device)."""
    expected = {name: tuple(t.shape) for name, t in model.state_dict().items()}
    found = {name: tuple(t.shape) for name, t in weights.items()}
    for name in sorted(expected.keys() | found.keys()):
        if expected.get(name) != found.get(name):
            raise CheckpointError(
                f"{file}: does not fit the model (another model size?): {name} is "
                f"{list(found[name]) if name in found else 'missing'}, the model's "
                f"{list(expected[name]) if name in expected else 'not one of its tensors'}"
            )


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``path/model.safetensors``, refused (``CheckpointError`` naming the
    file) when it is damaged or holds NaN or inf: such weights come from a diverged run."""
    file = Path(path) / "model.safetensors"
    _check_file(file)
    try:
        weights = load_file(str(file))
    except FileNotFoundError:
        raise CheckpointError(f"{file}: missing") from None
    except Exception as err:  # safetensors raises its own error types for damaged files
        raise CheckpointError(f"{file}: damaged ({_one_line(err)})") from None
    bad = _non_finite(weights)
    if bad is not None:
        raise CheckpointError(
            f"{file}: holds non-finite weights (NaN or inf in {bad}): saved from a diverged "
            "policy, it cannot be trained on"
        )
    return weights


def read_state(path: Path) -> dict[str, Any]:
    """The ``state.json`` of the checkpoint directory ``path``."""
    file = Path(path) / "state.json"
    try:
        state = read_json(file)
    except JSONFileError as err:
        how = {"missing": "missing", "invalid": "damaged (not valid JSON)"}
        raise CheckpointError(f"{file}: {how.get(err.kind, f'damaged ({err.detail})')}") from None
    if not isinstance(state, dict):
        raise CheckpointError(f"{file}: damaged (not a JSON object)")
    return state


def _load_optimizer_state(path: Path, state: dict[str, Any] | None = None) -> dict[str, Any]:
    file = Path(path) / "optimizer.pt"
    _check_file(file)
    if state is not None:
        _check_checksum(path, "optimizer.pt", state)
    try:
        # On the CPU: load_state_dict moves the state to the parameters' device, so a run
        # resumes on another device than the one that saved it (--device may change).
        loaded = torch.load(file, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointError(f"{file}: damaged ({_one_line(err)})") from None
    moments = {
        f"{key}[{name}]": value
        for key, entry in (loaded.get("state", {}) if isinstance(loaded, dict) else {}).items()
        if isinstance(entry, dict)
        for name, value in entry.items()
        if isinstance(value, torch.Tensor)
    }
    bad = _non_finite(moments)
    if bad is not None:
        raise CheckpointError(f"{file}: holds non-finite values (NaN or inf in state {bad})")
    return loaded


def check_optimizer_file(
    path: Path, state: dict[str, Any] | None = None, params: list | None = None
) -> None:
    """``CheckpointError`` naming ``path/optimizer.pt`` when it is missing, unreadable, not
    finite, not the file ``state`` recorded the checksum of, or (``params``: the model's
    parameters, in order) not a state of those parameters (``check_optimizer_fits``)."""
    try:
        loaded = _load_optimizer_state(path, state)
        if params is not None:
            check_optimizer_fits(loaded, params, Path(path) / "optimizer.pt")
    except CheckpointError as err:
        raise CheckpointError(f"{err}; {FRESH_OPTIMIZER_HINT}") from None


FRESH_OPTIMIZER_HINT = "pass --fresh-optimizer to continue with a fresh optimizer state"


def check_optimizer_fits(state_dict: Any, params: list, file: Path | str = "optimizer.pt") -> None:
    """``CheckpointError`` naming ``file`` unless the saved optimizer state ``state_dict`` is
    one of ``params`` (an optimizer's parameters, in order): as many parameters, and every
    per-parameter tensor of its state (Adam's moments) of its parameter's shape.
    ``Optimizer.load_state_dict`` checks only the counts, so an ``optimizer.pt`` of another
    model size loaded, and the first step raised a size mismatch after the run's files had
    been rewritten."""
    saved = state_dict.get("state") if isinstance(state_dict, dict) else None
    groups = state_dict.get("param_groups") if isinstance(state_dict, dict) else None
    if not isinstance(saved, dict) or not isinstance(groups, list):
        raise CheckpointError(f"{file}: damaged (not an optimizer state)")
    ids = [i for g in groups if isinstance(g, dict) for i in g.get("params", [])]
    if len(ids) != len(params):
        raise CheckpointError(
            f"{file}: does not fit the model (a state of {len(ids)} parameters, the model has "
            f"{len(params)}: another model size?)"
        )
    for index, param in zip(ids, params):
        for name, value in (saved.get(index) or {}).items():
            if isinstance(value, torch.Tensor) and value.dim() and value.shape != param.shape:
                raise CheckpointError(
                    f"{file}: does not fit the model (its {name} of parameter {index} has "
                    f"shape {list(value.shape)}, the parameter {list(param.shape)}: another "
                    "model size?)"
                )


def verify_checkpoint(
    path: Path, *, optimizer: bool = True, model: torch.nn.Module | None = None
) -> dict[str, Any]:
    """Read every file of the checkpoint ``path`` without changing anything: ``state.json``,
    the weights (checksum, finite) and, with ``optimizer``, ``optimizer.pt`` (checksum,
    finite). ``model``: the model they must fit (it may live on the meta device: shapes are
    compared, nothing is loaded), the weights' tensors and the optimizer's moments. Returns
    the state; ``CheckpointError`` naming the first bad file."""
    state = read_state(path)
    _check_checksum(path, "model.safetensors", state)
    if model is None:
        read_weights(path)
    else:
        check_weights_fit(_weights_with_tied(path), model, Path(path) / "model.safetensors")
    if optimizer:
        params = None if model is None else list(model.parameters())
        check_optimizer_file(path, state, params)
    return state


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
    load_model_weights(path, model, state=state)
    if optimizer is not None:
        try:
            state_dict = _load_optimizer_state(path, state)
            params = [p for group in optimizer.param_groups for p in group["params"]]
            check_optimizer_fits(state_dict, params, path / "optimizer.pt")
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


def check_deletable(run_dir: Path, flag: str) -> None:
    """Raise ``ValueError`` (naming ``flag``) unless ``run_dir`` is proved to be a run: a
    config.json of ``refimpl train``, or a damaged one beside the files only a run writes
    (``run_dir_damage``; a config.json alone, or one of another program, proves nothing),
    holding nothing, at any depth, that a run does not write. A run directory that is a
    symbolic link is refused: deleting through it would reach whatever it points to."""
    if Path(run_dir).is_symlink():
        raise ValueError(
            f"{flag}: {run_dir} is a symbolic link (to {os.readlink(run_dir)}); refusing to "
            "delete through it"
        )
    if not is_run_dir(run_dir) and run_dir_damage(run_dir) is None:
        raise ValueError(
            f"{flag}: {run_dir} is not a run directory (no config.json written by refimpl "
            "train); refusing to delete it: choose another --name, or delete it yourself"
        )
    foreign = foreign_files(run_dir)
    if foreign:
        raise ValueError(
            f"{flag}: {run_dir} holds files a run does not write ({', '.join(foreign[:5])}"
            f"{', …' if len(foreign) > 5 else ''}); refusing to delete it: move them out, "
            "or choose another --name"
        )


__all__ = [
    "RUN_FILES",
    "CheckpointError",
    "CheckpointWriteError",
    "check_deletable",
    "check_optimizer_file",
    "check_optimizer_fits",
    "check_weights_fit",
    "check_replaceable",
    "check_weights_file",
    "find_checkpoint",
    "load_checkpoint",
    "load_model_weights",
    "read_state",
    "read_weights",
    "save_checkpoint",
    "sha256",
    "verify_checkpoint",
]
