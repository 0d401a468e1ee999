"""A run resolved once from its settings: ``resolve(cfg)`` → ``Plan``.

``resolve`` checks every flag of a ``TrainConfig`` before anything is written or trained,
and decides, once, what the run is made of: the algorithm and its ``Config``, the task,
L_max, the warm start's settings, the device, the run directory. Everything after it (the
run directory's checks, the Trainer) reads the plan and derives nothing again.
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

import torch

from refimpl import algorithms
from refimpl.settings.limits import one_of
from refimpl.settings.memory import (
    check_oracle_cost,
    memory_estimates,
    oracle_cost,
    refuse_over_budget,
)
from refimpl.settings.overrides import parse_overrides
from refimpl.settings.train_config import (
    UNRECORDED_MEANS,
    TrainConfig,
    check_train_config,
    config_dict,
)
from refimpl.settings.warmstart_config import RunWarmstartConfig, parse_task_args
from refimpl.types.flags import flag, flatten, may_differ
from toy_envs import TASK_NAMES, get_task


class Plan(NamedTuple):
    """A run resolved once from its ``TrainConfig`` (``resolve``; ``refimpl.runs.rundir``
    checks the run directory against it): everything after consumes it and derives nothing
    again."""

    cfg: TrainConfig
    """the settings as given (flags, or a resumed run's config.json with the flags typed)"""
    algo: ModuleType
    """the algorithm module (``refimpl.algorithms.<name>``)"""
    algo_cfg: Any
    """the algorithm's ``Config``: a resumed run's own, else the defaults with --algo-args"""
    task: Any
    """the task, with its ``--task-args``"""
    max_new_tokens: int
    """the completion budget L_max in tokens (``--max-new-tokens`` or the task's default)"""
    needs_reference: bool
    """the algorithm's loss reads a frozen reference π_ref (``Config.needs_reference()``)"""
    float32_entropy: bool
    """entropies are computed in float32 under ``--dtype bfloat16``: the Config compares them
    more finely than bf16 logits resolve (``Config.needs_float32_entropy()``)"""
    values: Any
    """the Monte-Carlo values of π_old the algorithm asks for at each step
    (``Config.values_needed()``: VinePPO's), None for none"""
    warmstart: RunWarmstartConfig
    """the warm start's settings on the run's task, cache and progress (``run_warmstart``)"""
    warmstart_identity: dict[str, Any]
    """the warm start's identity (``WarmstartConfig.key_inputs``), computed once when its
    settings are checked: its base model is found and cached by it"""
    device: torch.device
    """the torch device, checked to exist"""
    run_dir: Path
    """the run directory, ``<--runs-dir>/<--name>``"""
    record: dict[str, Any]
    """the settings as config.json records them (``config_dict``): what run management writes"""
    defaults: dict[str, Any]
    """the settings' defaults as dotted keys (``warmstart.steps``): what a resumed run's
    config.json is checked against when it lacks a setting (empty for a new run, which is
    checked against none)"""
    saved: Any = None
    """the run to resume (``rundir.SavedRun``: its config.json, read once), None for a new run"""
    base: Any = None
    """where the base model comes from (``refimpl.warmstart.BaseChoice``: shipped, cached or
    trained, and the warm start's identity), chosen once by ``refimpl.train.preflight`` after
    the run directory is checked; None until then"""


def resolve(cfg: TrainConfig, saved=None) -> Plan:
    """Check every flag of ``cfg`` without training and resolve the run once. Raises
    ``ValueError`` naming the flag (unknown names list the valid ones). ``saved``: the run
    to resume (``refimpl.runs.rundir.SavedRun``, its config.json as read), whose settings the
    run keeps: a flag that differs from them is refused first (``check_resume_settings``,
    the clearest error), and its algorithm's Config is its own."""
    if saved is not None:
        check_resume_settings(cfg, saved.config["train_config"], cfg.run_dir / "config.json")
    algo = algorithms.get(cfg.algo)
    warmstart = dataclasses.replace(run_warmstart(cfg), progress=cfg.progress)
    task = build_task(cfg.task, cfg.task_args)
    max_new_tokens, device, run_dir, identity = check_train_config(cfg, task, warmstart)
    saved_algo = saved.config.get("algo_config") if saved is not None else None
    saved_algo = saved_algo if isinstance(saved_algo, dict) else None
    # What the algorithm's Config asks of the run, asked once: the Trainer reads the answers.
    algo_cfg, needs_reference, reads_entropy, float32_entropy, request = algorithm_config(
        cfg, algo, saved_algo
    ).for_run(max_new_tokens)  # request: Monte-Carlo values (VinePPO's), sampled every step
    float32_entropy = float32_entropy and cfg.dtype == "bfloat16"
    if reads_entropy and cfg.ppo_epochs * cfg.minibatches == 1:
        warnings.warn(
            f"{cfg.algo}: the loss compares the current policy's entropy with the "
            "rollout's; with one update per rollout (--ppo-epochs 1 --minibatches 1) the "
            "policy never moves before the comparison, so the comparison never fires. "
            "Use --minibatches or --ppo-epochs > 1 to exercise it.",
            stacklevel=3,
        )
    # sizes that cannot fit in this machine's memory: refused, naming the flag
    refuse_over_budget(memory_estimates(cfg, task, max_new_tokens, needs_reference), cfg.device)
    if request is not None:
        default = type(algo_cfg)().values_needed()
        announce_oracle_cost(task, max_new_tokens, cfg.prompts_per_step, cfg.group_size,
                             cfg.seed, request, default.rollouts)  # fmt: skip
    record = config_dict(cfg)
    defaults = flatten(config_dict(TrainConfig())) if saved is not None else {}
    return Plan(cfg, algo, algo_cfg, task, max_new_tokens, needs_reference, float32_entropy,
                request, warmstart, identity, device, run_dir, record, defaults, saved)  # fmt: skip


def announce_oracle_cost(task, max_new_tokens: int, prompts: int, group_size: int, seed: int,
                         request, default_rollouts: int) -> None:  # fmt: skip
    """The oracle's tokens of a step (``memory.oracle_cost``, from the reference solutions of
    the run's first prompts): refused above ``ORACLE_TOKENS_LIMIT``, a warning with the
    estimate above ``ORACLE_TOKENS_WARN`` (a step of ``rollouts=4096`` took hours, and a
    stop waited for it), before anything is written. The flag named is the one that grew
    most over its default."""
    from refimpl.problem_streams import training_rng

    problems = task.sample(min(prompts, 256), training_rng(seed, 0, 0))
    cost = oracle_cost(task, max_new_tokens, prompts, group_size, request, problems)
    defaults = TrainConfig()
    factors = [
        ("--algo-args", request.rollouts, default_rollouts, f"K = {request.rollouts} rollouts"),
        ("--prompts-per-step", prompts, defaults.prompts_per_step, str(prompts)),
        ("--group-size", group_size, defaults.group_size, str(group_size)),
    ]
    announcement = check_oracle_cost(cost, factors)
    if announcement is not None:
        warnings.warn(announcement, stacklevel=3)


def build_task(task: str, task_args: tuple[str, ...] = ()):
    """The task ``task`` (``--task``) with its ``--task-args`` overrides (validated by the
    task itself)."""
    one_of(TASK_NAMES)(task, "--task")
    return get_task(task, **dict(parse_task_args(task, tuple(task_args))))


def run_warmstart(cfg: TrainConfig) -> RunWarmstartConfig:
    """The warm start of the run ``cfg``: its ``--warmstart.*`` settings on the run's task,
    cached under ``--warmstart.runs-dir``, or the run's own ``--runs-dir`` when that is not
    given (a run in /tmp/x never writes a cache into ./runs)."""
    ws = cfg.warmstart
    runs_dir = ws.runs_dir if ws.runs_dir is not None else cfg.runs_dir
    return dataclasses.replace(ws, task=cfg.task, task_args=cfg.task_args, runs_dir=runs_dir)


def algorithm_config(cfg: TrainConfig, algo: ModuleType, saved: dict | None = None):
    """The algorithm's ``Config`` of the run: a resumed run's own (``saved``, the
    ``algo_config`` of its config.json: it continues with the settings it was made with, even
    if this version of refimpl has other defaults); else the defaults with the command-line
    overrides applied (validated by the Config). ``resolve`` then sizes it to the run's
    generation budget (``Config.for_run``: Dr. GRPO's L_max, when its own is not set)."""
    if saved is not None:
        try:
            return algo.Config(**saved)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"{cfg.run_dir / 'config.json'}: algo_config does not fit {cfg.algo}.Config ({err})"
            ) from None
    try:
        overrides = parse_overrides(
            cfg.algo_args, typing.get_type_hints(algo.Config), "--algo-args"
        )
        return algo.Config(**overrides)
    except ValueError as err:  # the Config's own check names its field: name the flag too
        message = str(err)
        raise ValueError(
            message if message.startswith("--") else f"--algo-args: {message}"
        ) from None


# ---------------------------------------------------------------------------------------------
# A resumed run keeps its settings.
# ---------------------------------------------------------------------------------------------


def check_resume_settings(cfg: TrainConfig, saved: dict[str, Any], source: Path) -> None:
    """Raise ``ValueError`` naming the first flag whose value differs from the saved run's,
    unless it is one a resumed run may change (``refimpl.types.flags.RESUME_MAY_CHANGE``)."""
    now = flatten(config_dict(cfg))
    defaults = {**flatten(config_dict(TrainConfig())), **UNRECORDED_MEANS}
    was = flatten(saved)
    for key, value in now.items():
        if may_differ(key):
            continue
        before = was.get(key, defaults.get(key))
        if value != before:
            raise ValueError(
                f"{flag(key)}: the run in {source.parent} was made with {before!r}, got "
                f"{value!r}; a resumed run keeps its settings (start a new one with --config "
                f"{source} --name NEW to change them)"
            )
