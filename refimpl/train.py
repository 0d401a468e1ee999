"""The RL loop: one loop for every algorithm, driven only through the algorithm contract.

Each step::

    sample N prompts ─► sample G completions each (KV cache; logp_old, entropy_old recorded)
        ─► reward (the task's verifier)
        ─► dynamic sampling, when cfg.dynamic_sampling: resample until N informative groups
        ─► overlong shaping, when cfg.overlong_shaping: add DAPO's length penalty
        ─► logp_ref from the frozen warm start, when a KL term needs it
        ─► advantages(batch, cfg)
        ─► ppo_epochs × minibatches of  loss(batch, logp, adv, cfg, entropy) + backward
                                        + clip grad norm + optimizer step
        ─► every eval_every steps: greedy and sampled success on a fixed held-out set
        ─► log one JSON line; every checkpoint_every steps: an atomic checkpoint

Determinism and resuming
------------------------
All randomness of step ``s`` (its prompts, its completions) comes from generators seeded by
``(seed, s)``, not from a stream that runs through the whole run. A resumed run therefore
needs only the weights, the optimizer state and the step to continue exactly as if it had
never stopped (``tests/test_train.py`` checks it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shlex
import signal
import sys
import threading
import time
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from types import ModuleType
from typing import Any, Literal

import numpy as np
import torch
from tqdm.auto import tqdm

from refimpl import algorithms, core
from refimpl.checkpoint import (
    CheckpointError,
    check_deletable,
    check_optimizer_file,
    check_weights_file,
    find_checkpoint,
    load_checkpoint,
    prepare_run_dir,
    read_state,
    save_checkpoint,
)
from refimpl.diagnostics import PASS_AT_K, logp_advantage_covariance, mean_pass_at_k
from refimpl.evaluate import correct_counts, encode_prompts, score_samples, success_rate
from refimpl.model import GPT
from refimpl.overrides import parse_overrides
from refimpl.runlog import (
    is_run_dir,
    read_metrics,
    read_probes,
    read_run_config,
    versions,
    write_jsonl,
    write_text_atomic,
)
from refimpl.sampling import Samples, policy_logprobs, sample_groups
from refimpl.warmstart import RunWarmstartConfig, TaskName, train_warmstart
from toy_envs import TASK_NAMES, TOKENIZER, get_task

#: ``--algo`` choices, listed by ``--help`` (built from the registry: new algorithms appear).
AlgoName = Literal[algorithms.NAMES]  # type: ignore[valid-type]

HELD_OUT_SEED = 10_000  # problems of the held-out set come from default_rng([10_000, 0])
PROBE_SEED = 20_000  # the fixed probe prompts of the entropy snapshots
EVAL_SEED = 30_000  # the sampled completions of every held-out evaluation
ENTROPY_CHANGE_GROUPS = 16  # groups on which the entropy change of a step is measured


class NonFiniteLossError(RuntimeError):
    """The loss or the gradient norm was NaN/inf: the step is not applied."""


@dataclass
class TrainConfig:
    """One RL run of one algorithm on one task."""

    algo: AlgoName = "grpo"
    """algorithm (`refimpl algos` lists them with their Config fields)"""
    task: TaskName = "chain"
    """task (`refimpl tasks` lists them with their knobs)"""
    algo_args: tuple[str, ...] = ()
    """algorithm Config overrides as FIELD=VALUE, e.g. --algo-args alpha_2=0.2 stats=subgroup"""
    task_args: tuple[str, ...] = ()
    """task knob overrides as KNOB=VALUE, e.g. --task-args num_ops=3"""
    seed: int = 0
    """seed of prompts and completions (the warm start has its own)"""
    steps: int = 200
    """RL steps (one rollout batch each)"""
    max_sampled_tokens: int | None = None
    """also stop once this many completion tokens have been sampled (None: no token budget;
    dynamic sampling draws more per step, so a token budget compares algorithms fairly)"""
    prompts_per_step: int = 64
    """N, groups per batch (the default regime, docs/benchmarks.md: 64 × 8 with 4 minibatches)"""
    group_size: int = 8
    """G, completions per prompt"""
    lr: float = 1e-4
    """Adam learning rate (tuned with 64 × 8 rollouts in 4 minibatches: docs/benchmarks.md)"""
    ppo_epochs: int = 1
    """passes over each rollout batch"""
    minibatches: int = 4
    """optimizer steps per pass (the batch is split by groups): after the first, the policy
    has moved, so ratios leave 1 and the clip and TEPO's mask can act"""
    grad_clip: float = 1.0
    """max gradient norm"""
    temperature: float = 1.0
    """sampling temperature (the loss pass uses the same)"""
    top_k: int | None = None
    """sampling top-k (None: full distribution)"""
    top_p: float | None = None
    """sampling nucleus p (None: full distribution)"""
    max_new_tokens: int | None = None
    """completion budget L_max in tokens, <eos> included (None: the task's default)"""
    resample_rounds: int = 4
    """dynamic sampling: extra sampling rounds allowed per step before training on fewer groups"""
    eval_every: int = 25
    """steps between held-out evaluations (also done at step 0 and at the end)"""
    eval_problems: int = 200
    """size of the held-out problem set"""
    eval_samples: int = 16
    """completions sampled per held-out problem (T = 1) for the unbiased pass@k, k ≤ this"""
    probe_every: int = 20
    """steps between entropy snapshots on the probe prompts (0: off)"""
    probe_prompts: int = 8
    """number of fixed probe prompts"""
    checkpoint_every: int = 50
    """steps between checkpoints (a final one is always written)"""
    runs_dir: Path = Path("runs")
    """parent directory of run directories"""
    name: str | None = None
    """run directory name (default: <task>-<algo>-s<seed>)"""
    resume: bool = False
    """continue the run in the existing run directory from its last checkpoint, with the
    settings of its config.json (only --steps, --max-sampled-tokens and the flags that do not
    change the math may differ, see RESUME_MAY_CHANGE)"""
    overwrite: bool = False
    """delete an existing run directory (only a run's: its config.json and files) and start
    again"""
    fresh_optimizer: bool = False
    """with --resume: continue with a fresh Adam state when the checkpoint's optimizer.pt is
    missing or damaged (the run then differs from an uninterrupted one)"""
    config: Path | None = None
    """start from the settings of this config.json (a run's, to reproduce it); flags typed
    with it override them (command line only)"""
    device: str = "cpu"
    """torch device: cpu, cuda, cuda:N or mps"""
    dtype: str = "float32"
    """model compute dtype: float32, or bfloat16 (autocast; the loss math stays float32)"""
    threads: int | None = None
    """torch CPU threads (None: torch's default)"""
    progress: bool = True
    """show a progress bar"""
    tensorboard: bool = False
    """also write TensorBoard scalars (needs the tensorboard package)"""
    plot: bool = True
    """write the run's figures when it ends"""
    warmstart: RunWarmstartConfig = field(default_factory=RunWarmstartConfig)
    """the base model (trained once and cached)"""

    @property
    def run_dir(self) -> Path:
        return Path(self.runs_dir) / (self.name or f"{self.task}-{self.algo}-s{self.seed}")


# ---------------------------------------------------------------------------------------------
# Configuration: parse overrides, check consistency at start-up, naming the flag.
# ---------------------------------------------------------------------------------------------


def algorithm_config(cfg: TrainConfig, algo: ModuleType, max_new_tokens: int):
    """The algorithm's ``Config`` with the command-line overrides applied (validated by it)."""
    defaults = {f.name: getattr(algo.Config(), f.name) for f in dataclasses.fields(algo.Config)}
    overrides = parse_overrides(cfg.algo_args, defaults, "--algo-args")
    # Dr. GRPO's constant L_max is the generation budget unless set explicitly.
    if "max_len" in defaults and defaults["max_len"] is None and "max_len" not in overrides:
        overrides["max_len"] = max_new_tokens
    return algo.Config(**overrides)


def build_task(cfg: TrainConfig):
    """The task with its ``--task-args`` overrides (validated by the task itself)."""
    if cfg.task not in TASK_NAMES:
        raise ValueError(f"--task: expected one of {', '.join(TASK_NAMES)}, got {cfg.task!r}")
    knobs = get_task(cfg.task).knobs()
    return get_task(cfg.task, **parse_overrides(cfg.task_args, knobs, "--task-args"))


def check_config(cfg: TrainConfig, task) -> int:
    """Fail at start-up, naming the flag, on a bad or inconsistent setting (nothing is
    written before this passes). Returns the budget L_max."""
    for name in (
        "steps",
        "prompts_per_step",
        "ppo_epochs",
        "minibatches",
        "eval_problems",
        "eval_samples",
    ):
        if getattr(cfg, name) <= 0:
            raise ValueError(
                f"--{name.replace('_', '-')}: expected a positive integer, got {getattr(cfg, name)}"
            )
    if cfg.group_size < 2:
        raise ValueError(
            f"--group-size: expected ≥ 2 (group-relative advantages need "
            f"siblings), got {cfg.group_size}"
        )
    if cfg.prompts_per_step % cfg.minibatches:
        raise ValueError(
            f"--minibatches: expected a divisor of --prompts-per-step="
            f"{cfg.prompts_per_step} (minibatches hold whole groups), "
            f"got {cfg.minibatches}"
        )
    if not (cfg.lr > 0 and math.isfinite(cfg.lr)):
        raise ValueError(f"--lr: expected a positive learning rate, got {cfg.lr}")
    if not cfg.grad_clip > 0:  # ≤ 0 would flip (< 0) or zero (= 0) every gradient; inf: no clip
        raise ValueError(f"--grad-clip: expected a positive max gradient norm, got {cfg.grad_clip}")
    if cfg.seed < 0:
        raise ValueError(f"--seed: expected an integer ≥ 0, got {cfg.seed}")
    if cfg.dtype not in ("float32", "bfloat16"):
        raise ValueError(f"--dtype: expected float32 or bfloat16, got {cfg.dtype!r}")
    if not (cfg.temperature > 0 and math.isfinite(cfg.temperature)):
        raise ValueError(f"--temperature: expected > 0, got {cfg.temperature}")
    if cfg.top_k is not None and cfg.top_k < 1:
        raise ValueError(f"--top-k: expected an integer ≥ 1 (or None: no top-k), got {cfg.top_k}")
    if cfg.top_p is not None and not 0 < cfg.top_p <= 1:
        raise ValueError(f"--top-p: expected 0 < p ≤ 1 (or None: no nucleus), got {cfg.top_p}")
    if cfg.resample_rounds < 0:
        raise ValueError(f"--resample-rounds: expected an integer ≥ 0, got {cfg.resample_rounds}")
    if cfg.probe_every < 0:
        raise ValueError(f"--probe-every: expected an integer ≥ 0 (0: off), got {cfg.probe_every}")
    if cfg.probe_every and cfg.probe_prompts < 1:
        raise ValueError(
            f"--probe-prompts: expected a positive integer (or --probe-every 0), "
            f"got {cfg.probe_prompts}"
        )
    if cfg.threads is not None and cfg.threads < 1:
        raise ValueError(f"--threads: expected a positive integer (or None), got {cfg.threads}")
    check_device(cfg.device)
    if cfg.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError:
            raise ValueError(
                "--tensorboard: needs the tensorboard package (pip install tensorboard)"
            ) from None
    if cfg.max_new_tokens is not None and cfg.max_new_tokens < 1:
        raise ValueError(
            f"--max-new-tokens: expected a positive integer (or None: the task's default "
            f"{task.max_new_tokens}), got {cfg.max_new_tokens}"
        )
    # The warm start trains on the run's task: its flags are checked under their full names.
    ws = dataclasses.replace(cfg.warmstart, task=cfg.task, task_args=cfg.task_args)
    ws.check("--warmstart.")
    budget = task.max_new_tokens if cfg.max_new_tokens is None else cfg.max_new_tokens
    probe = task.sample(8, np.random.default_rng([HELD_OUT_SEED, 0]))
    needed = max(len(TOKENIZER.encode(task.reference_solution(p), add_eos=True)) for p in probe)
    if budget < needed:
        raise ValueError(
            f"--max-new-tokens: the budget {budget} is shorter than the task's "
            f"answers (up to {needed} tokens with <eos>)"
        )
    block = cfg.warmstart.model.block_size
    if task.max_prompt_tokens + budget > block:
        raise ValueError(
            f"--max-new-tokens: prompts (up to {task.max_prompt_tokens} tokens) + budget "
            f"({budget}) exceed the model's block size {block}: lower --max-new-tokens or "
            f"raise --warmstart.model.block-size"
        )
    if cfg.max_sampled_tokens is not None and cfg.max_sampled_tokens <= 0:
        raise ValueError(
            f"--max-sampled-tokens: expected a positive integer, got {cfg.max_sampled_tokens}"
        )
    for name, sub in (
        ("--eval-every", cfg.eval_every),
        ("--checkpoint-every", cfg.checkpoint_every),
    ):
        if sub <= 0:
            raise ValueError(f"{name}: expected a positive integer, got {sub}")
    return budget


def check_device(device: str) -> torch.device:
    """``--device`` as a torch device that exists on this machine (else ``ValueError``)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"--device: expected cpu, cuda, cuda:N or mps, got {device!r}") from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device: {device} requested but torch sees no CUDA device")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"--device: {device} requested but torch sees {torch.cuda.device_count()} "
                "CUDA device(s)"
            )
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"--device: {device} requested but torch sees no MPS device")
    elif dev.type != "cpu":
        raise ValueError(f"--device: expected cpu, cuda, cuda:N or mps, got {device!r}")
    return dev


def resolve(cfg: TrainConfig) -> tuple[ModuleType, Any, int, Any]:
    """Check every flag of ``cfg`` without training: ``(algorithm, task, L_max, algo config)``.
    Raises ``ValueError`` naming the flag (unknown names list the valid ones)."""
    algo = algorithms.get(cfg.algo)
    task = build_task(cfg)
    budget = check_config(cfg, task)
    return algo, task, budget, algorithm_config(cfg, algo, budget)


# ---------------------------------------------------------------------------------------------
# Run directories: a new run, --overwrite, --resume (the run directory is the source of truth).
# ---------------------------------------------------------------------------------------------

#: The settings a resumed run may change (dotted field names): how long it goes and how it is
#: watched, never what a step computes. Any other difference from the run's config.json is an
#: error naming the flag. The warm-start fields here are those outside its cache key.
RESUME_MAY_CHANGE = frozenset(
    {
        "steps",  # extend the run (not below the step it has reached)
        "max_sampled_tokens",  # extend or set the token budget
        "checkpoint_every",
        "progress",
        "plot",
        "tensorboard",
        "threads",
        "device",
        "runs_dir",  # where the run is now
        "name",
        "resume",
        "overwrite",
        "fresh_optimizer",
        "config",
        "warmstart.runs_dir",
        "warmstart.threads",
        "warmstart.progress",
        "warmstart.force",
        "warmstart.eval_problems",
    }
)
#: Of those, the settings config.json records when a resumed run changes them (they say how
#: long the run is, so that a later --resume or --config gets them back).
RESUME_RECORDED = ("steps", "max_sampled_tokens")


def _flag(dotted: str) -> str:
    return "--" + dotted.replace("_", "-")


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


def config_dict(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as JSON-ready data (what config.json records under ``train_config``)."""
    return _jsonable(dataclasses.asdict(cfg))


def config_from_dict(data: dict[str, Any], source: str) -> TrainConfig:
    """The ``TrainConfig`` recorded in ``data`` (a ``train_config`` of config.json). Fields
    it lacks keep their defaults; a field this version does not know is an error naming
    ``source``."""

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
            if dataclasses.is_dataclass(hint) and isinstance(value, dict):
                kwargs[key] = build(hint, value, f"{prefix}{key}.")
            elif value is not None and (hint is Path or Path in args):
                kwargs[key] = Path(value)
            elif isinstance(value, list):
                kwargs[key] = tuple(value)
            else:
                kwargs[key] = value
        return cls(**kwargs)

    if not isinstance(data, dict):
        raise ValueError(f"{source}: expected the settings of a run")
    return build(TrainConfig, data, "")


def load_config_file(path: Path | str) -> TrainConfig:
    """The settings in a config.json (a run's, or a bare ``train_config`` object), with
    ``resume``, ``overwrite`` and ``config`` reset: a saved file never deletes anything."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"--config: {path}: no such file") from None
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"--config: {path}: not valid JSON") from None
    if isinstance(data, dict) and isinstance(data.get("train_config"), dict):
        data = data["train_config"]
    cfg = config_from_dict(data, f"--config: {path}")
    return dataclasses.replace(cfg, resume=False, overwrite=False, config=None)


def check_resume_settings(cfg: TrainConfig, saved: dict[str, Any], source: Path) -> None:
    """Raise ``ValueError`` naming the first flag whose value differs from the saved run's,
    unless it is one a resumed run may change (``RESUME_MAY_CHANGE``)."""
    now = _flatten(config_dict(cfg))
    defaults = _flatten(config_dict(TrainConfig()))
    was = _flatten(saved)
    for key, value in now.items():
        if key in RESUME_MAY_CHANGE or key.startswith(("warmstart.task",)):
            continue  # warmstart.task/task_args: the trainer uses --task/--task-args
        before = was.get(key, defaults.get(key))
        if value != before:
            raise ValueError(
                f"{_flag(key)}: the run in {source.parent} was made with {before!r}, got "
                f"{value!r}; a resumed run keeps its settings (start a new one with --config "
                f"{source} --name NEW to change them)"
            )


def _writable(path: Path, flag: str, what: str) -> None:
    target = Path(path).absolute()
    while not target.exists() and target != target.parent:
        target = target.parent
    if not os.access(target, os.W_OK | os.X_OK):
        raise ValueError(f"{flag}: {target} is not writable ({what})")


def check_run_dir(cfg: TrainConfig) -> dict[str, Any] | None:
    """Check the run directory before anything is written: a valid ``--name``, ``--resume``
    only of a run (with the same settings, see ``RESUME_MAY_CHANGE``, and a whole
    checkpoint), ``--overwrite`` only of a run, never an existing directory otherwise,
    writable directories. Returns the saved config.json of the run to resume, else None."""
    runs_dir, run_dir = Path(cfg.runs_dir), cfg.run_dir
    if cfg.name is not None:
        parts = cfg.name.replace(os.sep, "/").split("/")
        if (
            not cfg.name.strip()
            or PurePath(cfg.name).is_absolute()
            or any(p in ("", ".", "..") for p in parts)
        ):
            raise ValueError(
                f"--name: expected a directory name inside --runs-dir (no '.', '..' or "
                f"absolute path), got {cfg.name!r}"
            )
    cache_root = (Path(cfg.warmstart.runs_dir) / "warmstart").resolve()
    here = run_dir.resolve()
    if here == cache_root or cache_root in here.parents or here in cache_root.parents:
        raise ValueError(
            f"--name: {run_dir} would hold or sit in the warm-start cache {cache_root}; "
            "choose another name"
        )
    if cfg.resume and cfg.overwrite:
        raise ValueError("--overwrite: cannot be combined with --resume (choose one)")
    if run_dir.exists() and not run_dir.is_dir():
        raise ValueError(f"--name: {run_dir} exists and is not a directory")
    if cfg.resume:
        if not is_run_dir(run_dir):
            raise ValueError(
                f"--resume: nothing to resume in {run_dir} (no config.json written by refimpl "
                "train); check --name and --runs-dir, or drop --resume to start a new run"
            )
        saved = read_run_config(run_dir)
        check_resume_settings(cfg, saved["train_config"], run_dir / "config.json")
        _writable(run_dir, "--resume", "the resumed run writes its logs and checkpoints there")
        checkpoint = find_checkpoint(run_dir / "checkpoint", warn=False)
        if checkpoint is not None:
            check_weights_file(checkpoint)
            if not cfg.fresh_optimizer:
                check_optimizer_file(checkpoint)
            step = read_state(checkpoint).get("step")
            if not isinstance(step, int):
                raise CheckpointError(f"{checkpoint / 'state.json'}: damaged (no step)")
            if cfg.steps < step:
                raise ValueError(f"--steps: the run is already at step {step}; expected ≥ {step}")
        else:
            logged = max((r["step"] for r in read_metrics(run_dir, missing_ok=True)), default=0)
            every = saved["train_config"].get("checkpoint_every", cfg.checkpoint_every)
            if logged >= every:
                raise CheckpointError(
                    f"{run_dir / 'checkpoint'}: missing, although the run logged step {logged} "
                    f"(a checkpoint every {every} steps); --overwrite starts it again"
                )
        return saved
    if run_dir.exists() and any(run_dir.iterdir()):
        if not cfg.overwrite:
            raise FileExistsError(
                f"run directory {run_dir} already exists: pass --resume to continue it, "
                "--overwrite to start again, or choose another --name"
            )
        if here == runs_dir.resolve():
            raise ValueError(f"--overwrite: {run_dir} is the runs directory itself")
        check_deletable(run_dir, "--overwrite")
        _writable(run_dir.parent, "--overwrite", f"{run_dir} is deleted and written again")
        _writable(run_dir, "--overwrite", f"{run_dir} is deleted and written again")
    else:
        _writable(run_dir, "--runs-dir", f"the run directory {run_dir} is created there")
    return None


def preflight(cfg: TrainConfig) -> tuple[ModuleType, Any, int, Any, dict[str, Any] | None]:
    """Every check a run makes before it writes anything or trains its warm start: the
    flags (``resolve``), the run directory (``check_run_dir``) and the warm-start cache.
    Returns ``resolve``'s tuple and the saved config.json of the run to resume (or None)."""
    if cfg.resume and is_run_dir(cfg.run_dir):  # a changed setting is the clearest error
        saved_config = read_run_config(cfg.run_dir)["train_config"]
        check_resume_settings(cfg, saved_config, cfg.run_dir / "config.json")
    algo, task, budget, acfg = resolve(cfg)
    saved = check_run_dir(cfg)
    ws = dataclasses.replace(cfg.warmstart, task=cfg.task, task_args=cfg.task_args)
    ws.check_writable("--warmstart.")
    return algo, task, budget, acfg, saved


# ---------------------------------------------------------------------------------------------
# Rollouts.
# ---------------------------------------------------------------------------------------------


def concat_samples(parts: list[Samples]) -> Samples:
    """Stack sample batches of different lengths: prompts padded on the left, responses on
    the right (padding is masked everywhere, so its value never matters)."""
    if len(parts) == 1:
        return parts[0]
    out = {}
    for f in dataclasses.fields(parts[0]):
        values = [getattr(p, f.name) for p in parts]
        if not isinstance(values[0], torch.Tensor) or values[0].dim() < 2:
            out[f.name] = torch.cat(values) if isinstance(values[0], torch.Tensor) else values[0]
            continue
        width = max(v.shape[1] for v in values)
        left = f.name.startswith("prompt")
        pad_value = TOKENIZER.pad_id if not values[0].is_floating_point() else 0.0
        padded = []
        for v in values:
            extra = width - v.shape[1]
            pad = (extra, 0) if left else (0, extra)
            padded.append(torch.nn.functional.pad(v, pad, value=pad_value))
        out[f.name] = torch.cat(padded)
    return type(parts[0])(**out)


def take_groups(
    samples: Samples, rewards: torch.Tensor, keep: torch.Tensor, group_size: int
) -> tuple[Samples, torch.Tensor]:
    """The rows of the groups where ``keep`` ([N] bool) holds."""
    rows = keep.repeat_interleave(group_size)
    out = {
        f.name: (
            getattr(samples, f.name)[rows]
            if isinstance(getattr(samples, f.name), torch.Tensor)
            else getattr(samples, f.name)
        )
        for f in dataclasses.fields(samples)
    }
    return type(samples)(**out), rewards[rows]


class Trainer:
    """Holds the model, the optimizer and the run state; ``run()`` trains to ``cfg.steps``."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        # Every check before anything is written or trained (the warm start included).
        self.algo, self.task, self.budget, self.acfg, self._saved = preflight(cfg)
        if self._saved is not None:
            # A resumed run continues with the algorithm settings it was made with, even if
            # this version of refimpl has other defaults.
            saved_acfg = self._saved.get("algo_config")
            if isinstance(saved_acfg, dict):
                try:
                    self.acfg = self.algo.Config(**saved_acfg)
                except (TypeError, ValueError) as err:
                    raise ValueError(
                        f"{cfg.run_dir / 'config.json'}: algo_config does not fit "
                        f"{cfg.algo}.Config ({err})"
                    ) from None
        if core.reads_current_entropy(self.acfg) and cfg.ppo_epochs * cfg.minibatches == 1:
            warnings.warn(
                "TEPO's KL mask compares the current entropy with the rollout's; with one "
                "update per rollout (--ppo-epochs 1 --minibatches 1) the policy never moves "
                "before the comparison, so the mask stays empty and the KL term is inactive. "
                "Use --minibatches or --ppo-epochs > 1 to exercise it.",
                stacklevel=2,
            )
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        self.device = check_device(cfg.device)

        base = train_warmstart(
            dataclasses.replace(
                cfg.warmstart, task=cfg.task, task_args=cfg.task_args, progress=cfg.progress
            ),
            prefix="--warmstart.",
        )
        self.model: GPT = base.to(self.device)
        self.reference: GPT | None = None
        if core.needs_reference(self.acfg):
            self.reference = cfg.warmstart.model.build().to(self.device)
            self.reference.load_state_dict(self.model.state_dict())
            self.reference.eval().requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.step = 0
        self.sampled_tokens = 0
        self.held_out = self.task.sample(
            cfg.eval_problems, np.random.default_rng([HELD_OUT_SEED, 0])
        )
        self.probes = self.task.sample(cfg.probe_prompts, np.random.default_rng([PROBE_SEED, 0]))
        self.run_dir = cfg.run_dir
        self._tb = None

    def autocast(self):
        """bf16 autocast around model forward passes when ``--dtype bfloat16`` (the algorithm
        files cast log-probs back to float32 before any loss math)."""
        return torch.autocast(
            self.device.type, dtype=torch.bfloat16, enabled=self.cfg.dtype == "bfloat16"
        )

    # -- state --------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "sampled_tokens": self.sampled_tokens,
            "train_config": _jsonable(dataclasses.asdict(self.cfg)),
            "algo_config": dataclasses.asdict(self.acfg),
        }

    def save(self) -> None:
        save_checkpoint(self.run_dir / "checkpoint", self.model, self.optimizer, self._state())

    def restore(self) -> None:
        """Continue from the run directory's last checkpoint (``checkpoint.old`` when a save
        was cut short), or from step 0 when the run stopped before its first checkpoint.
        Everything is read before anything is rewritten."""
        checkpoint = find_checkpoint(self.run_dir / "checkpoint")
        step, sampled_tokens = 0, 0
        if checkpoint is not None:
            state = load_checkpoint(
                checkpoint, self.model, self.optimizer, fresh_optimizer=self.cfg.fresh_optimizer
            )
            try:
                step, sampled_tokens = int(state["step"]), int(state["sampled_tokens"])
            except (KeyError, TypeError, ValueError):
                raise CheckpointError(
                    f"{checkpoint / 'state.json'}: damaged (no step or sampled_tokens)"
                ) from None
        metrics = read_metrics(self.run_dir, missing_ok=True) if checkpoint else []
        probes = read_probes(self.run_dir) if checkpoint else []
        self.step, self.sampled_tokens = step, sampled_tokens
        # Lines logged after the checkpoint are written again by the resumed run.
        write_jsonl(self.run_dir / "metrics.jsonl", [r for r in metrics if r["step"] <= step])
        write_jsonl(self.run_dir / "probes.jsonl", [r for r in probes if r.get("step", 0) < step])

    # -- one step -------------------------------------------------------------------------
    def _generator(self, *salt: int) -> torch.Generator:
        seed = int(np.random.default_rng([self.cfg.seed, *salt]).integers(2**62))
        return torch.Generator(device=self.device).manual_seed(seed)

    def _sample(self, problems, generator) -> Samples:
        with self.autocast():
            return sample_groups(
                self.model,
                encode_prompts(problems),
                group_size=self.cfg.group_size,
                max_new_tokens=self.budget,
                eos_id=TOKENIZER.eos_id,
                pad_id=TOKENIZER.pad_id,
                temperature=self.cfg.temperature,
                top_k=self.cfg.top_k,
                top_p=self.cfg.top_p,
                generator=generator,
            )

    @torch.no_grad()
    def _entropy_fp32(self, samples: Samples, rows: Any) -> torch.Tensor:
        """The current model's entropy at every response position of ``samples[rows]``, from a
        float32 forward pass (no autocast), for TEPO's entropy comparison under bf16."""
        _, entropy = policy_logprobs(
            self.model,
            samples.prompt_ids[rows],
            samples.prompt_mask[rows],
            samples.response_ids[rows],
            samples.response_mask[rows],
            temperature=self.cfg.temperature,
            with_entropy=True,
            group_size=self.cfg.group_size,
        )
        return entropy  # type: ignore[return-value]

    def rollout(self) -> tuple[Samples, torch.Tensor, dict[str, float]]:
        """Sample, score and (when asked) filter to informative groups."""
        cfg, G, N = self.cfg, self.cfg.group_size, self.cfg.prompts_per_step
        kept_samples: list[Samples] = []
        kept_rewards: list[torch.Tensor] = []
        kept, seen, rounds, sampled_rows = 0, 0, 0, 0
        first_rewards = None
        entropies: list[torch.Tensor] = []  # every sampled token, kept or filtered out
        t_sample = t_score = 0.0
        dynamic = getattr(self.acfg, "dynamic_sampling", False)
        while True:
            rng = np.random.default_rng([cfg.seed, self.step, rounds])
            problems = self.task.sample(N, rng)
            t0 = time.perf_counter()
            samples = self._sample(problems, self._generator(self.step, rounds, 1))
            t1 = time.perf_counter()
            rewards = torch.as_tensor(score_samples(self.task, problems, samples, G))
            t_sample += t1 - t0
            t_score += time.perf_counter() - t1
            self.sampled_tokens += int(samples.response_mask.sum())
            entropies.append(samples.entropy_old[samples.response_mask.bool()].float())
            sampled_rows += rewards.numel()
            first_rewards = rewards if first_rewards is None else first_rewards
            seen += N
            if not dynamic:
                kept_samples, kept_rewards, kept = [samples], [rewards], N
                break
            # DAPO dynamic sampling: keep groups with 0 < #successful < G (outcome rewards).
            keep = core.informative_groups(rewards, G, self.acfg.success_threshold)
            keep[torch.cumsum(keep.long(), 0) > N - kept] = False  # never more than N groups
            if keep.any():
                s, r = take_groups(samples, rewards, keep, G)
                kept_samples.append(s)
                kept_rewards.append(r)
                kept += int(keep.sum())
            rounds += 1
            if kept >= N or rounds > cfg.resample_rounds:
                break
        info = {
            "time_sample": t_sample,
            "time_score": t_score,
            "groups_seen": seen,
            "kept_group_frac": kept / seen,
            "groups_trained": kept,
            "sampled_rows": sampled_rows,
            "reward_mean_all": float(first_rewards.mean()),
            "success_rate_all": float((first_rewards >= 0.5).float().mean()),
            **entropy_stats(torch.cat(entropies), "entropy"),
        }
        if kept == 0:
            return None, None, info  # type: ignore[return-value]
        return concat_samples(kept_samples), torch.cat(kept_rewards), info

    def train_step(self) -> dict[str, Any]:
        """One full RL step; returns its metrics (also appended to metrics.jsonl)."""
        cfg, acfg, G = self.cfg, self.acfg, self.cfg.group_size
        t_start = time.perf_counter()
        samples, rewards, info = self.rollout()
        metrics: dict[str, Any] = {"step": self.step, **info}
        if samples is None:  # every group uninformative, even after resampling
            metrics.update(
                {
                    "skipped": 1,
                    "sampled_tokens": self.sampled_tokens,
                    "time_step": time.perf_counter() - t_start,
                }
            )
            return metrics
        samples = _to(samples, self.device)
        rewards = rewards.to(self.device)
        lengths = samples.response_mask.sum(1)
        outcome = rewards.clone()
        # DAPO Eq. 13 when cfg.overlong_shaping: the soft length penalty, on the outcome's scale.
        rewards = core.shape_rewards(outcome, lengths, self.budget, acfg)
        fp32_entropy = core.reads_current_entropy(acfg) and cfg.dtype == "bfloat16"
        if fp32_entropy:
            # TEPO's mask compares H_θ with H_old to τ = 1e-4 nats; bf16 logits move each by
            # up to ~7e-3, so both are computed in float32 (here H_old, below H_θ).
            samples.entropy_old = self._entropy_fp32(samples, slice(None))
        t0 = time.perf_counter()
        logp_ref = None
        if self.reference is not None:
            with torch.no_grad(), self.autocast():
                logp_ref, _ = policy_logprobs(
                    self.reference,
                    samples.prompt_ids,
                    samples.prompt_mask,
                    samples.response_ids,
                    samples.response_mask,
                    temperature=cfg.temperature,
                    with_entropy=False,
                    group_size=G,
                )
        batch = samples.to_rollout_batch(rewards, G, logp_ref=logp_ref)
        batch = batch.replace(outcome_rewards=outcome)  # success stays the outcome's
        adv = self.algo.advantages(batch, acfg)
        loss_mask = batch.response_mask
        if getattr(acfg, "overlong_filter", False):
            # DAPO overlong filtering: truncated completions (no <eos>) leave the loss.
            loss_mask = loss_mask * (~samples.truncated).float()[:, None]
            batch = batch.replace(response_mask=loss_mask)
        t_adv = time.perf_counter() - t0

        self.model.train()
        loss_metrics: list[dict[str, float]] = []
        grad_norms = []
        n_groups = batch.num_groups
        for _epoch in range(cfg.ppo_epochs):
            # Minibatch sizes differ by at most one group (fewer groups than minibatches:
            # one group each), however many groups dynamic sampling kept.
            for groups in core.split_groups(n_groups, cfg.minibatches):
                keep = torch.zeros(n_groups, dtype=torch.bool, device=self.device)
                keep[groups.start : groups.stop] = True
                mb = batch.select_groups(keep) if len(groups) < n_groups else batch
                rows = keep.repeat_interleave(G)
                with self.autocast():
                    logp, entropy = policy_logprobs(
                        self.model,
                        samples.prompt_ids[rows],
                        samples.prompt_mask[rows],
                        samples.response_ids[rows],
                        samples.response_mask[rows],
                        temperature=cfg.temperature,
                        with_entropy=True,
                        group_size=G,
                    )
                logp.retain_grad()  # ∂L/∂logp: the per-token weight this update applies
                if fp32_entropy:
                    entropy = self._entropy_fp32(samples, rows)
                # H_θ carries gradient only for a loss that trains it (an entropy bonus).
                if not core.differentiates_entropy(acfg):
                    entropy = entropy.detach()
                loss, lm = self.algo.loss(mb, logp, adv[rows], acfg, entropy=entropy)
                if not torch.isfinite(loss):
                    raise NonFiniteLossError(
                        f"step {self.step}: non-finite loss {loss.item()}; the step was not "
                        f"applied and the last good checkpoint in {self.run_dir} is kept"
                    )
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                if not torch.isfinite(norm):
                    raise NonFiniteLossError(
                        f"step {self.step}: non-finite gradient norm; the step was not applied "
                        f"and the last good checkpoint in {self.run_dir} is kept"
                    )
                self.optimizer.step()
                grad_norms.append(float(norm))
                # The update's effective advantage: −∂L/∂logp rescaled by the minibatch's token
                # count (= A·w under token-mean at ratio 1). Clipping, masks, KL terms and the
                # aggregation weights all show in it, the plain advantage shows none of them.
                update_weight = -logp.grad * mb.response_mask.sum()
                loss_metrics.append(
                    {
                        "loss": float(loss.detach()),
                        **lm,
                        "cov_logp_update": logp_advantage_covariance(
                            mb.logp_old, update_weight, mb.response_mask
                        ),
                    }
                )
        self.model.eval()
        t_loss = time.perf_counter() - t0 - t_adv
        # Why entropy moves (Cui et al.): Cov(logp_old, A) over the trained tokens predicts the
        # sign of the entropy change; measure that change on the very same states. The same
        # states before and after make it precise on a subset: the first ENTROPY_CHANGE_GROUPS
        # groups (a quarter of the cost of a full forward at 64 groups).
        measured = slice(0, min(n_groups, ENTROPY_CHANGE_GROUPS) * G)
        with torch.no_grad(), self.autocast():
            _, entropy_after = policy_logprobs(
                self.model,
                samples.prompt_ids[measured],
                samples.prompt_mask[measured],
                samples.response_ids[measured],
                samples.response_mask[measured],
                temperature=cfg.temperature,
                with_entropy=True,
                group_size=G,
            )
        entropy_change = core.masked_mean(
            entropy_after.float() - batch.entropy_old[measured], batch.response_mask[measured]
        )

        mask = batch.response_mask.bool()
        metrics.update(
            {
                "reward_mean": float(rewards.mean()),
                "success_rate": float((outcome >= 0.5).float().mean()),
                # entropy_* (from rollout) covers every sampled completion: the policy's entropy,
                # comparable across algorithms. The trained groups alone (after dynamic sampling
                # kept the informative ones) are biased towards uncertain prompts:
                **entropy_stats(
                    samples.entropy_old[samples.response_mask.bool()], "entropy_trained"
                ),
                "length_mean": float(lengths.float().mean()),
                "truncated_frac": float(samples.truncated.float().mean()),
                "adv_token_mean": float(adv[mask].mean()) if mask.any() else 0.0,
                "adv_token_std": float(adv[mask].std()) if mask.sum() > 1 else 0.0,
                "adv_token_abs_max": float(adv[mask].abs().max()) if mask.any() else 0.0,
                "cov_logp_adv": logp_advantage_covariance(batch.logp_old, adv, batch.response_mask),
                "entropy_change": float(entropy_change),
                "grad_norm": float(np.mean(grad_norms)),
                "time_adv": t_adv,
                "time_loss": t_loss,
                "sampled_tokens": self.sampled_tokens,
            }
        )
        for key in loss_metrics[0]:
            metrics[key] = float(np.mean([m[key] for m in loss_metrics]))
        metrics["time_step"] = time.perf_counter() - t_start
        return metrics

    # -- evaluation and probes ------------------------------------------------------------
    def evaluate(self) -> dict[str, float]:
        """Held-out success: greedy, and the unbiased pass@k from ``eval_samples`` completions
        per problem at T = 1 (``heldout_pass@k`` for every k in ``PASS_AT_K`` up to it)."""
        t0 = time.perf_counter()
        n = self.cfg.eval_samples
        counts = correct_counts(
            self.model,
            self.task,
            self.held_out,
            n,
            max_new_tokens=self.budget,
            generator=self._generator(EVAL_SEED),
        )
        out = {
            "heldout_greedy": success_rate(
                self.model, self.task, self.held_out, greedy=True, max_new_tokens=self.budget
            ),
            **{
                f"heldout_pass@{k}": value
                for k, value in mean_pass_at_k(counts, n, [k for k in PASS_AT_K if k <= n]).items()
            },
        }
        out["time_eval"] = time.perf_counter() - t0
        return out

    @torch.no_grad()
    def probe(self) -> dict[str, Any]:
        """Entropy snapshot: one sampled completion per probe prompt (fixed seed), with the
        per-token entropy along it, for the token-level heatmaps of the notebooks."""
        samples = sample_groups(
            self.model,
            encode_prompts(self.probes),
            group_size=1,
            max_new_tokens=self.budget,
            eos_id=TOKENIZER.eos_id,
            pad_id=TOKENIZER.pad_id,
            temperature=self.cfg.temperature,
            generator=self._generator(PROBE_SEED),
        )
        rows = []
        for i, p in enumerate(self.probes):
            n = int(samples.response_mask[i].sum())
            ids = samples.response_ids[i, :n].tolist()
            rows.append(
                {
                    "prompt": p.prompt,
                    "tokens": [TOKENIZER.itos[t] for t in ids],
                    "entropy": [round(float(h), 5) for h in samples.entropy_old[i, :n]],
                }
            )
        return {"step": self.step, "probes": rows}

    # -- the loop -------------------------------------------------------------------------
    def finished(self) -> bool:
        """The step budget, or the sampled-token budget when one is set, is spent."""
        budget = self.cfg.max_sampled_tokens
        return self.step >= self.cfg.steps or (budget is not None and self.sampled_tokens >= budget)

    def _log(self, name: str, record: dict[str, Any]) -> None:
        with open(self.run_dir / name, "a") as f:
            f.write(json.dumps(record) + "\n")
            f.flush()
        if self._tb is not None and name == "metrics.jsonl":
            for k, v in record.items():
                if isinstance(v, (int, float)) and k != "step":
                    self._tb.add_scalar(k, v, record["step"])

    def _open_run_dir(self) -> None:
        """A new run: create the directory (``--overwrite``: delete the old run first) and
        write config.json. A resumed run: restore the checkpoint, then record in config.json
        the new length of the run (``RESUME_RECORDED``) and when it was resumed."""
        cfg = self.cfg
        config_file = self.run_dir / "config.json"
        if self._saved is None:
            # Checked again here: the warm start may have taken minutes since preflight.
            prepare_run_dir(self.run_dir, resume=False, overwrite=cfg.overwrite)
            record = {
                "train_config": config_dict(cfg),
                "algo_config": dataclasses.asdict(self.acfg),
                "versions": versions(),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            }
            write_text_atomic(config_file, json.dumps(record, indent=2))
            (self.run_dir / "metrics.jsonl").write_text("")
            (self.run_dir / "probes.jsonl").write_text("")
            return
        self.restore()
        record = self._saved
        now = config_dict(cfg)
        changed = {k: now[k] for k in RESUME_RECORDED if now[k] != record["train_config"].get(k)}
        record["train_config"].update(changed)
        record.setdefault("resumed", []).append(
            {
                "at_step": self.step,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "versions": versions(),
                **({"changed": changed} if changed else {}),
            }
        )
        write_text_atomic(config_file, json.dumps(record, indent=2))

    def run(self) -> Path:
        """Train until ``cfg.steps``; return the run directory.

        Ctrl-C (or SIGTERM) lets the step in progress finish, writes a checkpoint, prints how
        to resume and raises ``KeyboardInterrupt``; a second Ctrl-C stops at once (the last
        checkpoint is kept)."""
        cfg = self.cfg
        self._open_run_dir()
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        bar = tqdm(
            total=cfg.steps,
            initial=self.step,
            disable=not cfg.progress,
            desc=f"{cfg.algo} s{cfg.seed}",
            dynamic_ncols=True,
        )
        stop = _StopRequest()
        try:
            with stop:
                if self.step == 0:
                    record = {"step": 0, "sampled_tokens": 0, **self.evaluate()}
                    self._log("metrics.jsonl", record)
                while not self.finished() and not stop.requested:
                    if cfg.probe_every and self.step % cfg.probe_every == 0:
                        self._log("probes.jsonl", self.probe())
                    metrics = self.train_step()
                    self.step += 1
                    metrics["step"] = self.step
                    if self.step % cfg.eval_every == 0 or self.finished():
                        metrics.update(self.evaluate())
                    self._log("metrics.jsonl", metrics)
                    bar.update(1)
                    bar.set_postfix(
                        reward=f"{metrics.get('reward_mean', float('nan')):.2f}",
                        H=f"{metrics.get('entropy_mean', float('nan')):.3f}",
                        s_step=f"{metrics['time_step']:.2f}",
                        refresh=False,
                    )
                    if self.step % cfg.checkpoint_every == 0 or self.finished() or stop.requested:
                        self.save()
        finally:
            bar.close()
            if self._tb is not None:
                self._tb.close()
        if stop.requested and not self.finished():
            self._report_interrupt(stop.requested)
        if cfg.probe_every:
            self._log("probes.jsonl", self.probe())
        if cfg.plot:
            from refimpl.plots import plot_run

            plot_run(self.run_dir)
        return self.run_dir

    def _report_interrupt(self, signum: int) -> None:
        cfg = self.cfg
        resume = (
            f"refimpl train --resume --runs-dir {shlex.quote(str(cfg.runs_dir))} "
            f"--name {shlex.quote(cfg.name or self.run_dir.name)}"
        )
        if self.step > 0:
            where = f"checkpoint of step {self.step} written to {self.run_dir / 'checkpoint'}"
        else:
            where = "stopped before the first step (nothing to checkpoint)"
        print(
            f"refimpl: interrupted: {where}\nrefimpl: continue with: {resume}",
            file=sys.stderr,
            flush=True,
        )
        raise Interrupted(f"interrupted at step {self.step}; continue with: {resume}", signum)


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a run after a whole step and its checkpoint."""

    def __init__(self, message: str = "interrupted", signum: int = signal.SIGINT):
        super().__init__(message)  # message first, signum with a default: picklable, so a
        self.signum = signum  # compare worker can raise it in the parent process


class _StopRequest:
    """The first SIGINT/SIGTERM becomes a request to stop after the current step (the loop
    then writes a checkpoint); a second one raises ``KeyboardInterrupt`` at once. Signal
    handlers can only be set in the main thread; elsewhere Ctrl-C behaves as usual."""

    SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM") if hasattr(signal, n))

    def __init__(self) -> None:
        self.requested: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                if signal.getsignal(sig) is signal.SIG_IGN:
                    continue  # started immune to it (e.g. `cmd &` in a script): stay so
                try:
                    self._previous[sig] = signal.signal(sig, self._handle)
                except (ValueError, OSError):
                    pass
        return self

    def _handle(self, signum, frame) -> None:
        if self.requested is not None:
            self._restore()
            raise KeyboardInterrupt
        self.requested = signum
        # os.write, not print: a handler may run while tqdm is writing to stderr.
        os.write(
            2,
            b"\nrefimpl: stopping after this step to write a checkpoint "
            b"(Ctrl-C again stops at once, keeping the last checkpoint)\n",
        )

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def __exit__(self, *exc) -> None:
        self._restore()


def train(cfg: TrainConfig) -> Path:
    """Run one training run; return its directory."""
    return Trainer(cfg).run()


def entropy_stats(entropies: torch.Tensor, prefix: str) -> dict[str, float]:
    """Mean and 10/50/90th percentiles of a flat tensor of token entropies."""
    h = entropies.detach().float().cpu()
    if h.numel() == 0:
        return {
            f"{prefix}_mean": 0.0,
            f"{prefix}_p10": 0.0,
            f"{prefix}_p50": 0.0,
            f"{prefix}_p90": 0.0,
        }
    q = torch.quantile(h, torch.tensor([0.1, 0.5, 0.9]))
    return {
        f"{prefix}_mean": float(h.mean()),
        f"{prefix}_p10": float(q[0]),
        f"{prefix}_p50": float(q[1]),
        f"{prefix}_p90": float(q[2]),
    }


def _to(samples: Samples, device: torch.device) -> Samples:
    return type(samples)(
        **{
            f.name: (
                getattr(samples, f.name).to(device)
                if isinstance(getattr(samples, f.name), torch.Tensor)
                else getattr(samples, f.name)
            )
            for f in dataclasses.fields(samples)
        }
    )


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj
