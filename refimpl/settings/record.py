"""The settings of a config.json read back: its ``train_config`` and ``algo_config``.

A run's config.json holds ``config_dict(cfg)`` (``refimpl.settings.train_config``) and its algorithm's
Config; ``config_from_record`` turns such a record back into a ``TrainConfig``, checking every
key against its annotation (one line naming the file and the key). Reading the file is
``refimpl.train.load_config_file``'s.
"""

from __future__ import annotations

import dataclasses
import json
import typing
from pathlib import Path
from typing import Any

from refimpl import algorithms
from refimpl.settings.plan import algorithm_config, build_task
from refimpl.settings.train_config import UNRECORDED_MEANS, TrainConfig
from refimpl.types import typecheck


def config_from_dict(data: dict[str, Any], source: str) -> TrainConfig:
    """The ``TrainConfig`` recorded in ``data`` (a ``train_config`` of config.json). Fields
    it lacks keep their defaults, except those in ``UNRECORDED_MEANS`` (``lr_warmup``: 0, as
    every run recorded before that setting existed trained); a field this version does not know, or a value of the
    wrong type (``"lr": "fast"``), is an error naming ``source`` and the key."""

    def build(cls, values: dict[str, Any], prefix: str):
        hints = typing.get_type_hints(cls)
        known = {f.name: f for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in values.items():
            if key not in known:
                raise ValueError(
                    f"{source}: unknown setting {prefix}{key!r} (written by another version "
                    "of refimpl?)"
                )
            hint = hints[key]
            args = typing.get_args(hint)
            if dataclasses.is_dataclass(hint):
                if not isinstance(value, dict):
                    raise ValueError(
                        f"{source}: {prefix}{key} is {value!r}, expected an object of settings"
                    )
                kwargs[key] = build(hint, value, f"{prefix}{key}.")
                continue
            check_setting_type(value, hint, f"{source}: {prefix}{key}")
            if value is not None and (hint is Path or Path in args):
                kwargs[key] = Path(value)
            elif isinstance(value, list):
                kwargs[key] = tuple(value)
            else:
                kwargs[key] = value
        return cls(**kwargs)

    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected the settings of a run")
    # A record written before a setting existed trained without it: read it as it ran.
    return build(TrainConfig, {**UNRECORDED_MEANS, **data}, "")


def check_setting_type(value: Any, hint: Any, where: str) -> None:
    """``ValueError`` (``where`` names the file and the key) unless ``value``, read from a
    JSON file, fits the annotation ``hint`` (``typecheck.fits_type``: a bool for ``bool``,
    never 1 or "yes"; a number for ``float``; a list of strings for ``tuple[str, ...]``; null
    where the annotation allows it)."""
    if not typecheck.fits_type(value, hint):
        expected = typecheck.expected_type(hint, json=True)
        raise ValueError(f"{where} is {json.dumps(value)}, expected {expected}")


def config_from_record(data: Any, source: str, *, algo_config: bool = False) -> TrainConfig:
    """``load_config_file`` of a config.json already read (``data``; ``source`` names it in
    errors). ``algo_config``: apply its ``algo_config`` section too (``apply_algo_config``);
    a resumed run takes it from its checkpoint instead."""
    section = data.get("algo_config") if isinstance(data, dict) else None
    if isinstance(data, dict) and isinstance(data.get("train_config"), dict):
        data = data["train_config"]
    cfg = config_from_dict(data, source)
    if algo_config and section is not None:
        cfg = apply_algo_config(cfg, section, source)
    return dataclasses.replace(cfg, resume=False, overwrite=False, config=None)


def apply_algo_config(cfg: TrainConfig, section: Any, source: str) -> TrainConfig:
    """``cfg`` with the ``algo_config`` section of a config.json read back: every field is
    checked as ``--algo-args`` are (one the algorithm's ``Config`` does not have, a value of
    the wrong type or out of range: one line naming ``source`` and the key), and the values
    that differ from what ``cfg`` (its ``algo_args``) gives become ``algo_args``, which the
    new run's config.json records."""
    if not isinstance(section, dict):
        raise ValueError(f"{source}: algo_config is {json.dumps(section)}, expected an object")
    try:
        algo = algorithms.get(cfg.algo)
    except ValueError as err:
        raise ValueError(f"{source}: {err}") from None
    hints = typing.get_type_hints(algo.Config)
    fields_ = [f.name for f in dataclasses.fields(algo.Config)]
    for key, value in section.items():
        if key not in fields_:
            raise ValueError(
                f"{source}: unknown setting algo_config.{key!r} for {cfg.algo} (valid: "
                f"{', '.join(fields_)})"
            )
        check_setting_type(value, hints[key], f"{source}: algo_config.{key}")
    budget = cfg.max_new_tokens or build_task(cfg.task, cfg.task_args).max_new_tokens
    given = dataclasses.asdict(algorithm_config(cfg, algo).for_generation_budget(budget))
    changed = {k: v for k, v in section.items() if v != given[k]}
    if not changed:
        return cfg
    for key, value in changed.items():
        if value is None:  # --algo-args cannot say None for a field whose default is not
            raise ValueError(
                f"{source}: algo_config.{key} is null, which differs from the run's "
                f"{given[key]!r} and cannot be passed as --algo-args: remove it"
            )
    kept = [a for a in cfg.algo_args if a.split("=", 1)[0].strip().replace("-", "_") not in changed]
    args = (*kept, *(f"{k}={_override_text(v)}" for k, v in changed.items()))
    cfg = dataclasses.replace(cfg, algo_args=args)
    try:
        algorithm_config(cfg, algo).for_generation_budget(budget)
    except ValueError as err:  # named by the file's key, not the flag it was passed as
        raise ValueError(
            f"{source}: algo_config: {str(err).removeprefix('--algo-args: ')}"
        ) from None
    return cfg


def _override_text(value: Any) -> str:
    """A JSON value as ``parse_overrides`` reads it back (``repr`` keeps every float bit)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)
