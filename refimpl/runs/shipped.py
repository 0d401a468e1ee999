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

``refimpl.warmstart.base_model`` starts from the shipped model whenever the settings asked for
match an entry (``find``) and ``--warmstart.shipped`` is on (the default): nothing is trained,
and the run records ``describe_base`` (which model, its sha256). ``refimpl warmstart``, the
demo, ``--warmstart.no-shipped`` and ``--warmstart.force`` train on this machine instead.
``manifest.json``'s ``not_shipped`` lists the warm starts that are used but not committed,
with the command that would make them.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from refimpl.runs.checkpoint import CheckpointError, load_model_weights, sha256

#: Where the shipped weights and their manifest live (inside the package).
BASE_MODELS = Path(__file__).resolve().parents[1] / "base_models"
MANIFEST = BASE_MODELS / "manifest.json"


@dataclass(frozen=True)
class ShippedModel:
    """One entry of ``manifest.json``."""

    name: str
    entry: dict[str, Any]

    @property
    def file(self) -> Path:
        return BASE_MODELS / self.name / "model.safetensors"

    @property
    def sha256(self) -> str:
        return self.entry["sha256"]

    def config(self, runs_dir: Path | str = "runs"):
        """The ``WarmstartConfig`` the manifest records (the settings it was trained with)."""
        return config_from_record(self.entry["config"], runs_dir)


def config_from_record(record: dict[str, Any], runs_dir: Path | str = "runs"):
    """A ``WarmstartConfig`` from a recorded dict of its fields (a manifest entry's ``config``,
    a cache's ``state.json``), on ``runs_dir``."""
    from refimpl.settings.warmstart_config import ModelSize, WarmstartConfig

    return WarmstartConfig(
        **{
            **record,
            "model": ModelSize(**record["model"]),
            "task_args": tuple(record.get("task_args", ())),
            "runs_dir": Path(runs_dir),
        }
    )


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


def find(inputs: dict) -> ShippedModel | None:
    """The shipped model trained with the settings ``inputs`` (a warm start's
    ``WarmstartConfig.key_inputs()``): the same ``settings_key``, computed from the manifest's
    recorded config (not read from it), among the entries whose config still hashes to the
    ``settings_key`` they record (an edited entry is no model's: ``unused``); or None."""
    from refimpl.runs.cache import settings_key

    key, plain = None, _plain_settings(inputs)
    for model in shipped_models():
        recorded = model.config()
        if _plain_settings(dataclasses.asdict(recorded)) != plain:  # before the task's knobs
            continue
        key = key or settings_key(inputs)
        if settings_key(recorded.key_inputs()) == key and _entry_damage(model) is None:
            return model
    return None


def unused(inputs: dict, path: Path | None = None) -> list[str]:
    """Why shipped weights are not used for the warm start of the settings ``inputs``
    (``key_inputs()``), one line each: ``manifest.json`` missing while weights are there,
    weights that no entry lists (an entry deleted), an entry of these settings (its recorded
    ``settings_key`` is theirs, or its recorded config says them) whose config no longer
    hashes to that key (edited). Empty for an intact package. A run that finds no shipped
    model says these before it trains or reuses a cache (``refimpl.warmstart.base_model``):
    a damaged manifest is otherwise a silent retraining on this machine, and other bits.
    (Only the entries of these settings are hashed: another entry's task arguments are not
    parsed for a run that cannot use it.)"""
    from refimpl.runs.cache import settings_key

    path = path or MANIFEST
    shipped = sorted(p.parent.name for p in path.parent.glob("*/model.safetensors"))
    fix = f"restore {path} (git checkout, or reinstall refimpl)"
    if not path.exists():
        if not shipped:
            return []
        return [f"{path}: missing, so the shipped base models ({', '.join(shipped)}) are not "
                f"used; {fix}"]  # fmt: skip
    models = shipped_models(path)
    listed = {m.name for m in models}
    reasons = [
        f"{path.parent / name / 'model.safetensors'}: not listed in {path.name} (its entry "
        f"deleted?), so it is not used; {fix}"
        for name in shipped
        if name not in listed
    ]
    key, plain = settings_key(inputs), _plain_settings(inputs)
    for model in models:
        if not _of_these_settings(model, key, plain):
            continue
        damage = _entry_damage(model)
        if damage is not None:
            reasons.append(f"{path}: the entry {model.name} {damage}, so it is not used; {fix}")
    return reasons


def _of_these_settings(model: ShippedModel, key: str, plain: tuple) -> bool:
    """The entry claims the settings of ``key`` (its recorded ``settings_key``) or of
    ``plain`` (``_plain_settings`` of its recorded config), whatever damage it holds."""
    try:
        recorded = model.entry["settings_key"]
        says = _plain_settings(dataclasses.asdict(model.config()))
    except (KeyError, TypeError, ValueError, AttributeError):
        return True  # an entry that cannot be read: said, whichever settings it had
    return recorded == key or says == plain


def _entry_damage(model: ShippedModel) -> str | None:
    """What is wrong with a manifest entry, or None: a config that cannot be read, or one
    that no longer hashes to the ``settings_key`` recorded beside it (edited)."""
    from refimpl.runs.cache import settings_key

    try:
        computed = settings_key(model.config().key_inputs())
        recorded = model.entry["settings_key"]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        return f"cannot be read ({type(err).__name__}: {err})"
    if computed != recorded:
        return (f"has a config whose settings hash to {computed}, not to the settings_key it "
                f"records ({recorded}): edited?")  # fmt: skip
    return None


def _plain_settings(settings: dict) -> tuple:
    """The settings compared as typed, before ``settings_key`` canonicalises the task's knobs:
    the task, the model, the schedule, the steps, the batch, the lr, the seed."""
    steps = settings["steps"]
    return (settings["task"], settings["model"], steps, settings.get("schedule_steps") or steps,
            settings["batch_size"], settings["lr"], settings["seed"])  # fmt: skip


def supplies(inputs: dict, *, allowed: bool) -> bool:
    """The base model of the settings ``inputs`` comes from the package: ``allowed`` (shipped
    models on, no retraining asked: ``cfg.shipped and not cfg.force``), and one trained with
    these settings is shipped (nothing is written then)."""
    return allowed and find(inputs) is not None


def load(model_entry: ShippedModel, cfg):
    """The shipped weights in a model of ``cfg``'s size, after checking their sha256 against
    the manifest (``CheckpointError`` naming the file otherwise)."""
    file = model_entry.file
    if not file.exists():
        raise CheckpointError(
            f"{file}: missing (the manifest {MANIFEST} lists it); reinstall refimpl, or train "
            "the base model here with --warmstart.no-shipped"
        )
    if sha256(file) != model_entry.sha256:
        raise CheckpointError(
            f"{file}: damaged (its sha256 differs from the one {MANIFEST.name} records); "
            "restore it (git checkout), or train the base model here with --warmstart.no-shipped"
        )
    model = cfg.model.build()
    load_model_weights(file.parent, model)  # finite, fits the model
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
