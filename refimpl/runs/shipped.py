"""The base models shipped with refimpl: one set of weights per warm start, for every machine.

A warm start trained on an AMD CPU and one trained on an Intel CPU from the same settings are
different models (``refimpl/runs/cpu_kernels.py``: countdown's default warm start solves 0.41 of
the held-out problems on the project's AMD EPYC and 0.46 on its Xeon), so two machines that
each train their own start their RL runs from different places, and their runs do not pair.
The warm starts that the claims ledger, the credit page and the demo start from are therefore
committed under ``refimpl/base_models/<name>/model.safetensors`` (package data: a fresh clone
and an installed package both have them), each described in ``refimpl/base_models/manifest.json``:

- ``config``: the warm start's settings (``WarmstartConfig``'s fields that its cache key
  hashes, ``key_inputs``), ``settings_key``: their hash, without the numeric path;
- ``sha256`` and ``bytes`` of the file, and ``report``: its held-out greedy and sampled success;
- ``command``: the command that trains it, ``trained_on``: the machine and numeric path
  (``cpu_kernels.describe()`` at training time), ``cache_key``: its cache directory's key there.

This file reads the manifest and the weights as they lie on the disk; which entry is a warm
start's is decided with its settings, in the base model's one room
(``refimpl.warmstart.choose_base``, its lookup ``find_shipped``): the shipped model whenever
the settings asked for match an entry and ``--warmstart.shipped`` is on (the default), so
nothing is trained, and the run records ``describe_base`` (which model, its sha256).
``refimpl warmstart``, the demo's ``--train-base``, ``--warmstart.no-shipped`` and
``--warmstart.force`` train on this machine instead.
``manifest.json``'s ``not_shipped`` lists the warm starts that are used but not committed,
with the command that would make them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from refimpl.runs.checkpoint import CheckpointError, load_model_weights, sha256
from refimpl.types.flags import flag

#: Where the shipped weights and their manifest live (inside the package).
BASE_MODELS = Path(__file__).resolve().parents[1] / "base_models"
MANIFEST = BASE_MODELS / "manifest.json"


@dataclass(frozen=True)
class ShippedModel:
    """One entry of ``manifest.json``: its weights' file and the sha256 it records for them
    (empty when it records none: the weights then never match), read when it is made."""

    name: str
    entry: dict[str, Any]
    file: Path = field(init=False)
    sha256: str = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "file", BASE_MODELS / self.name / "model.safetensors")
        recorded = self.entry.get("sha256") if isinstance(self.entry, dict) else None
        object.__setattr__(self, "sha256", recorded if isinstance(recorded, str) else "")


def manifest(path: Path | None = None) -> dict[str, Any]:
    """``manifest.json`` (``{"models": {name: entry}, "not_shipped": [...]}``); an empty one
    when the package has none."""
    path = path or MANIFEST
    if not path.exists():
        return {"models": {}, "not_shipped": []}
    try:
        data = json.loads(path.read_text())
    except ValueError:
        data = None
    if not (isinstance(data, dict) and isinstance(data.get("models"), dict)):
        raise CheckpointError(f"{path}: damaged (not the manifest of the shipped base models)")
    return data


def shipped_models(path: Path | None = None) -> list[ShippedModel]:
    return [ShippedModel(n, e) for n, e in manifest(path).get("models", {}).items()]


def load(model_entry: ShippedModel, cfg, prefix: str = "--"):
    """The shipped weights in a model of ``cfg``'s size, after checking their sha256 against
    the manifest (``CheckpointError`` naming the file otherwise, and the flag that trains the
    base model here instead, spelled with ``prefix``), with what a run records of them:
    ``base_record`` (``describe_base``) and ``base_report`` (their measured success)."""
    file = model_entry.file
    try:
        if not file.exists():
            raise CheckpointError(
                f"{file}: missing (the manifest {MANIFEST} lists it); reinstall refimpl"
            )
        if sha256(file) != model_entry.sha256:
            raise CheckpointError(
                f"{file}: damaged (its sha256 differs from the one {MANIFEST.name} records); "
                "restore it (git checkout)"
            )
        model = cfg.model.build()
        load_model_weights(file.parent, model)  # finite, fits the model
    except CheckpointError as err:
        raise CheckpointError(
            f"shipped base model: {err}, or train the base model here with "
            f"{flag('no-shipped', prefix)}"
        ) from None
    cpu = model_entry.entry.get("trained_on", {}).get("cpu", "unrecorded")
    model.base_record = describe_base("shipped", sha=model_entry.sha256, name=model_entry.name,
                                      trained_on=cpu)  # fmt: skip
    model.base_report = dict(model_entry.entry.get("report", {}))
    return model.eval()


def describe_base(source: str, *, sha: str, name: str | None = None, cache: Path | None = None,
                  trained_on: str | None = None) -> dict[str, Any]:  # fmt: skip
    """What a run records of its base model: ``source`` ``shipped`` (with the shipped name),
    ``cache`` (reused from this machine's cache) or ``trained`` (trained here now), the
    weights' sha256, and the CPU they were trained on."""
    out: dict[str, Any] = {"source": source, "sha256": sha}
    if name is not None:
        out["name"] = name
    if cache is not None:
        out["cache"] = str(cache)
    if trained_on is not None:
        out["trained_on"] = trained_on
    return out
