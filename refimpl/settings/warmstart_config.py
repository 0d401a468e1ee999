"""The settings of a warm start: the model's size, the supervised run, and the task's knobs.

Types only, and their checks: this module trains nothing and touches no file.
``refimpl.warmstart`` (the supervised loop) and ``refimpl.settings.train_config`` (an RL run's
settings, which embed a warm start's) both read it; where its model is cached is
``refimpl.runs.cache``'s.

``--task-args`` strings are parsed here once per process (``parse_task_args``, cached): the
task, the warm start's checks, its cache key and its training all read the same parse.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import tyro

from refimpl.model import GPT, GPTConfig
from refimpl.settings.limits import (
    Bounds,
    at_least,
    check_lr,
    check_positive,
    check_seed,
    check_threads,
    one_of,
)
from refimpl.settings.overrides import KeyValues, parse_overrides
from refimpl.types.flags import flag
from toy_envs import DEFAULT_TASK, TASK_NAMES, TOKENIZER, get_task


@functools.lru_cache(maxsize=64)
def parse_task_args(task: str, task_args: tuple[str, ...]) -> tuple[tuple[str, object], ...]:
    """``--task-args`` of ``task`` parsed against the task's knobs (typed like its defaults),
    as sorted ``(knob, value)`` pairs: the one parse of a command, cached, so every reader of
    the same arguments gets the same values (a bad argument raises ``ValueError`` each time,
    naming ``--task-args``)."""
    knobs = parse_overrides(tuple(task_args), task_knob_types(task), "--task-args")
    try:  # the task's own check of its knobs' values ("num_ops must be in [1, 32]")
        get_task(task, **knobs)
    except (ValueError, TypeError) as err:
        raise ValueError(f"--task-args: {err}") from None
    return tuple(sorted(knobs.items()))


def task_knobs(task: str, task_args: tuple[str, ...]) -> dict[str, object]:
    """The knobs that ``task_args`` sets on ``task`` (typed by the task's annotations; the
    warm start's mix not included), from the command's one parse (``parse_task_args``). It
    takes the two values it reads, not the settings that hold them (docs/design.md)."""
    return dict(parse_task_args(task, tuple(task_args)))


def task_knob_types(task: str) -> dict[str, object]:
    """The annotation of each knob of ``task`` (its constructor's arguments)."""
    init = type(get_task(task)).__init__
    hints = typing.get_type_hints(init)
    return {
        name: hints.get(name, object)
        for name in inspect.signature(init).parameters
        if name != "self"
    }


#: ``--task`` choices, listed by ``--help`` (built from the registry: new tasks appear).
TaskName = Literal[TASK_NAMES]  # type: ignore[valid-type]

#: Task knobs of the supervised mix, per task (the RL task keeps its knobs). ``chain``:
#: k = 1..num_ops operations uniformly (the cheapest mix we found that lands in the
#: 10–50 % band; training on k < num_ops alone does not transfer, the last position is never
#: seen). Measured here: 600 steps → 40 % greedy / 34 % sampled at the default k = 3, 15 % /
#: 10 % at k = 4.
WARMSTART_MIX: dict[str, dict[str, object]] = {
    "chain": {"min_ops": 1},
}


#: The model's sizes, each flag's own bounds (``WarmstartConfig.check`` checks them, and that
#: ``n_head`` divides ``n_embd``).
MODEL_BOUNDS: Bounds = (
    ("n_layer", at_least(1)),
    ("n_embd", at_least(1)),
    ("n_head", at_least(1)),
    ("block_size", at_least(2)),
)


@dataclass
class ModelSize:
    """Size of the tiny GPT (2 layers, d = 128 → 408k parameters): ``--model.*`` of
    ``refimpl warmstart``, ``--warmstart.model.*`` of ``refimpl train``. ``build`` turns it into
    the model (its full architecture, the vocabulary and dropout included, is refimpl/model.py's)."""

    n_layer: int = 2
    """transformer blocks"""
    n_embd: int = 128
    """width d"""
    n_head: int = 4
    """attention heads (must divide n_embd)"""
    block_size: int = 64
    """longest prompt + completion, in tokens"""

    def build(self) -> GPT:
        return GPT(
            GPTConfig(
                vocab_size=TOKENIZER.vocab_size,
                block_size=self.block_size,
                n_layer=self.n_layer,
                n_head=self.n_head,
                n_embd=self.n_embd,
            )
        )


#: The warm start's flags, each one's own bounds, in the order ``WarmstartConfig.check`` checks
#: them; the bounds across flags follow there.
WARMSTART_BOUNDS: Bounds = (
    ("task", one_of(TASK_NAMES)),
    ("steps", check_positive),
    ("batch_size", check_positive),
    ("eval_problems", check_positive),
    ("lr", functools.partial(check_lr, optimizer="AdamW")),
    ("seed", check_seed),
    ("threads", check_threads),
)


@dataclass
class WarmstartConfig:
    """Supervised warm start on reference solutions (AdamW, cosine schedule)."""

    task: TaskName = DEFAULT_TASK
    """task whose base model is trained (its easier mix: docs/envs.md)"""
    task_args: KeyValues = ()
    """task knobs as KNOB=VALUE (the RL run passes its own --task-args); the mix applies on top"""
    steps: int = 600
    """optimizer steps (600 × 128 lands chain k=3 at ~40 % greedy success)"""
    schedule_steps: int | None = None
    """length of the cosine learning-rate schedule (None: steps); more than steps stops a
    longer warm start early, as it stood at that step (the longchain preset: 1,800 of 2,400)"""
    batch_size: int = 128
    """sequences per step"""
    lr: float = 3e-3
    """peak AdamW learning rate, cosine-decayed to 10 %"""
    seed: int = 0
    """seed of the initial weights and of the training problems"""
    model: ModelSize = field(default_factory=ModelSize)
    runs_dir: Path = Path("runs")
    """where the cache lives (runs/warmstart/...)"""
    eval_problems: int = 200
    """held-out problems for the final success report"""
    threads: int | None = 1
    """torch CPU threads while training. 1 (the default) trains the same base model bit for
    bit on every run on a machine, whatever its core count: a sum split across threads rounds
    differently, so another thread count ends, after 600 steps at this learning rate, at
    another model (so does another CPU vendor: docs/numerics.md). None: torch's default (one
    per core)."""
    force: bool = False
    """retrain even when a cached (or shipped) model exists"""
    shipped: bool = True
    """start from the base model shipped with refimpl (refimpl/base_models/) when one was
    trained with exactly these settings, so that every machine starts from the same weights
    (another CPU trains other bits: docs/numerics.md); --no-shipped trains here, or reuses
    this machine's cache"""
    progress: bool = True
    """show a progress bar"""

    def check(self, prefix: str = "--") -> dict:
        """Raise ``ValueError`` naming the flag on a bad setting, before anything is trained;
        return the checked settings' identity (``key_inputs``), which a run's preflight
        computes here, once.

        ``prefix`` is how the flags are spelled where this config is read: ``--`` for
        ``refimpl warmstart``, ``--warmstart.`` inside ``refimpl train``."""
        for name, rule in WARMSTART_BOUNDS:  # each flag's own bounds, then those across flags
            rule(getattr(self, name), flag(name, prefix))
        if self.schedule_steps is not None and not (
            isinstance(self.schedule_steps, int) and self.schedule_steps >= self.steps
        ):
            raise ValueError(
                f"{flag('schedule_steps', prefix)}: expected an integer ≥ "
                f"{flag('steps', prefix)}={self.steps} (or None), got {self.schedule_steps}"
            )
        for name, rule in MODEL_BOUNDS:
            rule(getattr(self.model, name), flag(name, prefix + "model."))
        if self.model.n_embd % self.model.n_head:
            raise ValueError(
                f"{flag('model.n_head', prefix)}: expected a divisor of "
                f"{flag('model.n_embd', prefix)}={self.model.n_embd}, got {self.model.n_head}"
            )
        # The mix's sequences, <bos> prompt answer <eos>, must fit the model's positions.
        task = get_task(self.task, **task_knobs(self.task, self.task_args))
        longest = task.max_prompt_tokens + task.max_new_tokens
        if longest > self.model.block_size:
            raise ValueError(
                f"{flag('model.block_size', prefix)}: {self.model.block_size} is too small for "
                f"{self.task} {' '.join(self.task_args)}".rstrip()
                + f" (prompts up to {task.max_prompt_tokens} tokens + answers up to "
                f"{task.max_new_tokens}): pass {flag('model.block_size', prefix)} {longest} "
                "or more, or make the task smaller"
            )
        return self.key_inputs()

    def key_inputs(self) -> dict:
        """Every setting that changes the trained weights, but the numeric path, as plain
        values: the task's knobs in canonical form (below), the supervised mix and the
        vocabulary. The warm start's identity: its cache key hashes it with the numeric path
        (``refimpl.runs.cache.cache_key``), a shipped base model is found by it
        (``refimpl.warmstart.find_shipped``); a run computes it once, when its settings are
        checked (``check``), and neither reads these settings again.

        The knobs: ``task_args`` parsed and filled in with the task's defaults, written back
        as the ``KNOB=VALUE`` pairs that differ from those defaults, sorted by knob. Flags that
        say the same thing (``num_ops=3``, nothing, ``min_ops=3 num_ops=3`` when both are
        chain's defaults) give the same list, so they share one cached model. The pairs that
        restate nothing are dropped rather than hashed with the defaults so that the key of a
        run without ``--task-args`` is what it always was (existing caches stay valid); a
        change to a task's *default* is a code change, like any other change to the task's
        code, and needs ``--force`` (or a new ``runs_dir``), as before."""
        keep = {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if k not in ("runs_dir", "eval_problems", "threads", "force", "progress", "shipped")
        }
        if self.schedule_steps in (None, self.steps):  # the same schedule: the key it always had
            keep.pop("schedule_steps")
        defaults = get_task(self.task).knobs()
        knobs = get_task(self.task, **task_knobs(self.task, self.task_args)).knobs()
        keep["task_args"] = [f"{k}={v}" for k, v in sorted(knobs.items()) if v != defaults[k]]
        # copies: an identity is plain values of its own, never the tokenizer's list
        keep["mix"] = dict(WARMSTART_MIX.get(self.task, {}))
        keep["vocab"] = list(TOKENIZER.itos)
        return keep


def warmstart_from_record(record: dict, runs_dir: Path | str = "runs") -> WarmstartConfig:
    """The ``WarmstartConfig`` of a recorded dict of its fields (a shipped model's manifest
    ``config``, a cache's ``state.json``), on ``runs_dir``: what a record says a model was
    trained with, so that its identity (``key_inputs``) can be computed, never read."""
    return WarmstartConfig(
        **{
            **record,
            "model": ModelSize(**record["model"]),
            "task_args": tuple(record.get("task_args", ())),
            "runs_dir": Path(runs_dir),
        }
    )


@dataclass
class RunWarmstartConfig(WarmstartConfig):
    """The warm start of an RL run: its task and task knobs are the run's (``--task``,
    ``--task-args``) and its progress bar follows ``--progress``, so those three fields are
    not flags of ``refimpl train``; its cache follows the run's ``--runs-dir`` unless
    ``--warmstart.runs-dir`` is given (``refimpl.settings.plan.run_warmstart`` resolves it)."""

    task: tyro.conf.Suppress[TaskName] = DEFAULT_TASK
    task_args: tyro.conf.Suppress[tuple[str, ...]] = ()
    progress: tyro.conf.Suppress[bool] = True
    runs_dir: Path | None = None  # type: ignore[assignment]
    """where the cache lives (<runs_dir>/warmstart/...; None: the run's --runs-dir)"""


@dataclass
class WarmstartCommand(WarmstartConfig):
    """``refimpl warmstart``: train the base model on this machine (or reuse this machine's
    cache; ``--force`` retrains), never the shipped one, and say whether it has the shipped
    model's bits (the shipped models: refimpl/base_models/)."""

    shipped: tyro.conf.Suppress[bool] = False
