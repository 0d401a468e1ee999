"""The settings of a training run: ``TrainConfig``, its start-up checks and its JSON form.

``resolve(cfg)`` checks every flag before anything is written or trained and resolves, once,
what a run is made of (``Plan``: the algorithm and its Config, the task, L_max, the warm
start's settings, the device); ``config_dict``/``load_config_file`` are the config.json form
of the settings (``--config`` reads it back).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, NamedTuple

import torch

from refimpl import algorithms
from refimpl.runs.overrides import parse_overrides
from refimpl.runs.runlog import MAX_SETTINGS_BYTES, parse_json, read_text_bounded
from refimpl.runs.settings import RunWarmstartConfig, TaskName, parse_task_args
from refimpl.streams import SEED_MAX, held_out_rng
from toy_envs import TASK_NAMES, TOKENIZER, get_task, tasks

#: ``--algo`` choices, listed by ``--help`` (built from the registry: new algorithms appear).
AlgoName = Literal[algorithms.NAMES]  # type: ignore[valid-type]


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
    diag_every: int = 50
    """steps between the attributions of the entropy change to token classes (entropy_attr/*,
    also at the last step; each costs about one step's time; 0: off). entropy_change_pred is
    logged every step"""
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
    """torch CPU threads of the RL run (None: torch's default, one per core). The numbers
    depend on it: a sum split across threads rounds differently; refimpl compare uses 1 per
    worker"""
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


def algorithm_config(
    cfg: TrainConfig, algo: ModuleType, max_new_tokens: int, saved: dict | None = None
):
    """The algorithm's ``Config`` of the run: a resumed run's own (``saved``, the
    ``algo_config`` of its config.json: it continues with the settings it was made with, even
    if this version of refimpl has other defaults); else the defaults with the command-line
    overrides applied (validated by the Config), for completions of at most
    ``max_new_tokens`` tokens (Dr. GRPO's L_max)."""
    if saved is not None:
        try:
            return algo.Config(**saved)
        except (TypeError, ValueError) as err:
            raise ValueError(
                f"{cfg.run_dir / 'config.json'}: algo_config does not fit {cfg.algo}.Config ({err})"
            ) from None
    try:
        return _overridden_config(cfg, algo, max_new_tokens)
    except ValueError as err:  # the Config's own check names its field: name the flag too
        message = str(err)
        raise ValueError(
            message if message.startswith("--") else f"--algo-args: {message}"
        ) from None


def _overridden_config(cfg: TrainConfig, algo: ModuleType, max_new_tokens: int):
    """The algorithm's defaults with ``--algo-args`` applied (``algorithm_config``)."""
    defaults = {f.name: f.default for f in dataclasses.fields(algo.Config)}
    overrides = parse_overrides(cfg.algo_args, defaults, "--algo-args")
    return algo.Config(**overrides).for_generation_budget(max_new_tokens)


def build_task(cfg: TrainConfig):
    """The task with its ``--task-args`` overrides (validated by the task itself)."""
    if cfg.task not in TASK_NAMES:
        raise ValueError(f"--task: expected one of {', '.join(TASK_NAMES)}, got {cfg.task!r}")
    return get_task(cfg.task, **dict(parse_task_args(cfg.task, tuple(cfg.task_args))))


def check_train_config(cfg: TrainConfig, task, warmstart) -> tuple[int, torch.device]:
    """Fail at start-up, naming the flag, on a bad or inconsistent setting (nothing is
    written before this passes; the memory check, which needs the algorithm's Config, is
    ``check_memory``). Returns the completion budget L_max in tokens and the device."""
    _check_batch_and_optimiser(cfg)
    device = _check_sampling_and_machine(cfg)
    max_new_tokens = _check_completion_budget(cfg, task, warmstart)
    _check_run_length_and_intervals(cfg)
    return max_new_tokens, device


def run_warmstart(cfg: TrainConfig):
    """The warm start of the run ``cfg``: its ``--warmstart.*`` settings on the run's task,
    cached under ``--warmstart.runs-dir``, or the run's own ``--runs-dir`` when that is not
    given (a run in /tmp/x never writes a cache into ./runs)."""
    ws = cfg.warmstart
    runs_dir = ws.runs_dir if ws.runs_dir is not None else cfg.runs_dir
    return dataclasses.replace(ws, task=cfg.task, task_args=cfg.task_args, runs_dir=runs_dir)


def _check_batch_and_optimiser(cfg: TrainConfig) -> None:
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
    if cfg.lr > LR_LIMIT:
        raise ValueError(
            f"--lr: expected a learning rate ≤ {LR_LIMIT:.3g} (Adam's first step, lr/(1−β₁), "
            f"must fit in float32), got {cfg.lr}"
        )
    if cfg.ppo_epochs > PPO_EPOCHS_MAX:
        raise ValueError(
            f"--ppo-epochs: expected at most {PPO_EPOCHS_MAX} passes over a rollout (each is "
            f"a forward and backward pass of the whole batch, and a stop waits for the step "
            f"to end), got {cfg.ppo_epochs}"
        )
    if not cfg.grad_clip > 0:  # ≤ 0 would flip (< 0) or zero (= 0) every gradient; inf: no clip
        raise ValueError(f"--grad-clip: expected a positive max gradient norm, got {cfg.grad_clip}")
    if not 0 <= cfg.seed <= SEED_MAX:
        raise ValueError(
            f"--seed: expected an integer in [0, {SEED_MAX}] (its stream key is one 32-bit "
            f"word: refimpl.streams), got {cfg.seed}"
        )


def _check_sampling_and_machine(cfg: TrainConfig) -> torch.device:
    if cfg.dtype not in ("float32", "bfloat16"):
        raise ValueError(f"--dtype: expected float32 or bfloat16, got {cfg.dtype!r}")
    if not (cfg.temperature >= TEMPERATURE_MIN and math.isfinite(cfg.temperature)):
        raise ValueError(
            f"--temperature: expected a finite value ≥ {TEMPERATURE_MIN:g} (logits / τ must fit "
            f"in float32), got {cfg.temperature}"
        )
    if cfg.top_k is not None and cfg.top_k < 1:
        raise ValueError(f"--top-k: expected an integer ≥ 1 (or None: no top-k), got {cfg.top_k}")
    if cfg.top_p is not None and not TOP_P_MIN <= cfg.top_p <= 1:
        raise ValueError(
            f"--top-p: expected {TOP_P_MIN:.3g} ≤ p ≤ 1 (float32's smallest normal value; a "
            f"smaller p is 0 in float32 and drops every token; or None: no nucleus), got "
            f"{cfg.top_p}"
        )
    if cfg.resample_rounds < 0:
        raise ValueError(f"--resample-rounds: expected an integer ≥ 0, got {cfg.resample_rounds}")
    if cfg.probe_every < 0:
        raise ValueError(f"--probe-every: expected an integer ≥ 0 (0: off), got {cfg.probe_every}")
    if cfg.diag_every < 0:
        raise ValueError(f"--diag-every: expected an integer ≥ 0 (0: off), got {cfg.diag_every}")
    if cfg.probe_every and cfg.probe_prompts < 1:
        raise ValueError(
            f"--probe-prompts: expected a positive integer (or --probe-every 0), "
            f"got {cfg.probe_prompts}"
        )
    if cfg.threads is not None and cfg.threads < 1:
        raise ValueError(f"--threads: expected a positive integer (or None), got {cfg.threads}")
    check_threads(cfg.threads, "--threads")
    device = check_device(cfg.device)
    if cfg.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError:
            raise ValueError(
                "--tensorboard: needs the tensorboard package (pip install tensorboard)"
            ) from None
    return device


def _check_completion_budget(cfg: TrainConfig, task, warmstart) -> int:
    """L_max: ``--max-new-tokens`` or the task's default, long enough for the task's answers
    and short enough for the model's block size (the warm start's flags are checked here
    too: its model sets the block size)."""
    if cfg.max_new_tokens is not None and cfg.max_new_tokens < 1:
        raise ValueError(
            f"--max-new-tokens: expected a positive integer (or None: the task's default "
            f"{task.max_new_tokens}), got {cfg.max_new_tokens}"
        )
    # The warm start trains on the run's task: its flags are checked under their full names.
    warmstart.check("--warmstart.")
    max_new_tokens = task.max_new_tokens if cfg.max_new_tokens is None else cfg.max_new_tokens
    probe = task.sample(8, held_out_rng())
    needed = max(len(TOKENIZER.encode(task.reference_solution(p), add_eos=True)) for p in probe)
    if max_new_tokens < needed:
        raise ValueError(
            f"--max-new-tokens: the budget {max_new_tokens} is shorter than the task's "
            f"answers (up to {needed} tokens with <eos>)"
        )
    block = cfg.warmstart.model.block_size
    if task.max_prompt_tokens + max_new_tokens > block:
        raise ValueError(
            f"--max-new-tokens: prompts (up to {task.max_prompt_tokens} tokens) + budget "
            f"({max_new_tokens}) exceed the model's block size {block}: lower --max-new-tokens or "
            f"raise --warmstart.model.block-size"
        )
    return max_new_tokens


def _check_run_length_and_intervals(cfg: TrainConfig) -> None:
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


#: The smallest ``--temperature``: the sampler and the loss divide the logits by it in
#: float32, so logits of magnitude up to 3.4e8 still give finite scaled logits (below about
#: 1e-4 sampling is greedy anyway); 1e-40 was inf, and the run failed after it had started.
TEMPERATURE_MIN = 1e-30
#: The smallest ``--top-p``: float32's smallest normal value (the nucleus keeps the most
#: likely token; 1e-46 rounds to 0 in float32, and every token was dropped).
TOP_P_MIN = float(torch.finfo(torch.float32).tiny)
#: The most ``--ppo-epochs``: passes over one rollout (PPO's papers take 1 to 10); a stop
#: (Ctrl-C, SIGTERM) waits for the step in progress, so a step must end.
PPO_EPOCHS_MAX = 1000

#: The largest ``--lr``: torch's Adam takes a first step of ``lr / (1 − β₁)`` = 10·lr, which
#: must fit in float32 (a larger one is an overflow traceback, not a diverged run).
LR_LIMIT = float(torch.finfo(torch.float32).max) * (1 - 0.9)


def check_threads(threads: int | None, flag: str) -> None:
    """``--threads`` at most the CPU count: torch segfaults on 100000 threads, and more
    threads than cores only slow a run down."""
    cores = os.cpu_count() or 1
    if threads is not None and threads > cores:
        raise ValueError(
            f"{flag}: expected at most {cores} (the CPU cores of this machine), got {threads}"
        )


# ---------------------------------------------------------------------------------------------
# Size bounds: a size flag too large for the machine is refused before anything is created,
# naming the flag and the memory estimate (not killed by the kernel an hour later).
# ---------------------------------------------------------------------------------------------

#: Rough bytes per held-out problem object: the size ``toy_envs`` bounds ``Task.sample`` by,
#: so a size flag this estimate lets through is one the task draws.
PROBLEM_BYTES = tasks.PROBLEM_BYTES


def memory_budget(device: str) -> tuple[int, str] | None:
    """The memory a run on ``device`` can use: the GPU's for CUDA, else this machine's
    physical memory (``(bytes, where)``; None when the platform does not say)."""
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(dev.index or 0)
        return int(props.total_memory), f"of {device}"
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "of this machine"
    except (ValueError, OSError, AttributeError):
        return None


def memory_estimates(
    cfg: TrainConfig, task, max_new_tokens: int, algo_cfg
) -> list[tuple[str, int, list]]:
    """The largest allocations of a run, estimated from its settings and its algorithm's
    ``Config`` (on the low side: a setting is refused only when it certainly cannot fit):
    ``(what, bytes, factors)`` where ``factors`` are the ``(flag, value, default)`` the size
    grows with."""
    m, ws, d0 = cfg.warmstart.model, cfg.warmstart, TrainConfig()
    f32 = 4
    d, layers, heads, vocab = m.n_embd, m.n_layer, m.n_head, TOKENIZER.vocab_size
    T = task.max_prompt_tokens + max_new_tokens  # one sequence of a run
    decode = f32 * (2 * layers * d + 6)  # per position: KV cache, ids, masks, logp, entropy
    train = f32 * (layers * (16 * d + heads * T) + 3 * vocab)  # kept for the backward pass
    params = layers * 12 * d * d + (vocab + m.block_size) * d
    copies = 4 + (1 if algo_cfg.needs_reference() else 0)  # + the frozen reference
    rows = cfg.prompts_per_step * cfg.group_size
    n_eval = cfg.eval_samples
    N = ("--prompts-per-step", cfg.prompts_per_step, d0.prompts_per_step)
    G = ("--group-size", cfg.group_size, d0.group_size)
    model = [
        ("--warmstart.model.n-embd", d, 128),
        ("--warmstart.model.n-layer", layers, 2),
        ("--warmstart.model.block-size", m.block_size, 64),
    ]
    return [
        ("the model, its gradient and Adam's moments", f32 * params * copies, model),
        (
            "the rollout (KV cache and per-token records)",
            rows * T * (decode + f32 * cfg.resample_rounds),
            [N, G, ("--resample-rounds", max(cfg.resample_rounds, 1), 4)],
        ),
        (
            "the update's activations",
            max(1, rows // cfg.minibatches) * T * train,
            [N, G],
        ),
        (
            "the held-out sampling",
            max(n_eval, min(1024, n_eval * cfg.eval_problems)) * T * decode,
            [("--eval-samples", n_eval, d0.eval_samples)],
        ),
        (
            "the held-out problems",
            cfg.eval_problems * PROBLEM_BYTES,
            [("--eval-problems", cfg.eval_problems, d0.eval_problems)],
        ),
        (
            "the probe prompts",
            cfg.probe_prompts * (PROBLEM_BYTES + T * decode),
            [("--probe-prompts", cfg.probe_prompts, d0.probe_prompts)],
        ),
        (
            "the warm start's batch",
            ws.batch_size * m.block_size * train,
            [("--warmstart.batch-size", ws.batch_size, 128), *model],
        ),
        (
            "the warm start's held-out problems",
            ws.eval_problems * PROBLEM_BYTES,
            [("--warmstart.eval-problems", ws.eval_problems, 200)],
        ),
    ]


def _human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} PB"


def check_memory(cfg: TrainConfig, task, max_new_tokens: int, algo_cfg) -> None:
    """Refuse a size flag whose estimated memory (``memory_estimates``) exceeds the
    machine's (``memory_budget``), naming the flag that grew most, the estimate, and about
    the largest value that fits."""
    budget = memory_budget(cfg.device)
    if budget is None:
        return
    limit, where = budget
    for what, need, factors in memory_estimates(cfg, task, max_new_tokens, algo_cfg):
        if need <= limit:
            continue
        flag, value, _ = max(factors, key=lambda f: f[1] / max(f[2], 1))
        most = max(1, int(value * limit / need))
        raise ValueError(
            f"{flag}: {value} needs about {_human(need)} for {what} (an estimate), more than "
            f"the {_human(limit)} of memory {where}; expected at most about {most}"
        )


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


class Plan(NamedTuple):
    """A run resolved once from its ``TrainConfig`` (``resolve``; ``rundir.preflight`` adds
    the checks of its run directory): everything after consumes it and derives nothing
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
    warmstart: RunWarmstartConfig
    """the warm start's settings on the run's task, cache and progress (``run_warmstart``)"""
    device: torch.device
    """the torch device, checked to exist"""
    saved: Any = None
    """the run to resume (``rundir.SavedRun``: its config.json, read once), None for a new run"""


def resolve(cfg: TrainConfig, saved=None) -> Plan:
    """Check every flag of ``cfg`` without training and resolve the run once. Raises
    ``ValueError`` naming the flag (unknown names list the valid ones). ``saved``: the run
    to resume (``rundir.SavedRun``), whose algorithm settings the run keeps."""
    algo = algorithms.get(cfg.algo)
    task = build_task(cfg)
    warmstart = dataclasses.replace(run_warmstart(cfg), progress=cfg.progress)
    max_new_tokens, device = check_train_config(cfg, task, warmstart)
    saved_algo = saved.config.get("algo_config") if saved is not None else None
    saved_algo = saved_algo if isinstance(saved_algo, dict) else None
    algo_cfg = algorithm_config(cfg, algo, max_new_tokens, saved_algo)
    check_memory(cfg, task, max_new_tokens, algo_cfg)
    return Plan(cfg, algo, algo_cfg, task, max_new_tokens, warmstart, device, saved)


def config_dict(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as JSON-ready data (what config.json records under ``train_config``)."""
    return _jsonable(dataclasses.asdict(cfg))


def config_from_dict(data: dict[str, Any], source: str) -> TrainConfig:
    """The ``TrainConfig`` recorded in ``data`` (a ``train_config`` of config.json). Fields
    it lacks keep their defaults; a field this version does not know, or a value of the
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
    return build(TrainConfig, data, "")


def check_setting_type(value: Any, hint: Any, where: str) -> None:
    """``ValueError`` (``where`` names the file and the key) unless ``value``, read from a
    JSON file, fits the annotation ``hint``: a bool for ``bool`` (never 1 or "yes"), an int
    that is not a bool for ``int``, a number for ``float``, a string for ``str``, ``Path``
    and a ``Literal`` (whose choices the flag checks name), a list of strings for
    ``tuple[str, ...]``; ``None`` where the annotation allows it."""
    args = typing.get_args(hint)
    origin = typing.get_origin(hint)
    if origin is Literal:
        options: tuple = (hint,)
    elif args and origin is not tuple:  # a union: X | None
        options = tuple(a for a in args if a is not type(None))
        if value is None and type(None) in args:
            return
    else:
        options = (hint,)

    def fits(option: Any) -> bool:
        if typing.get_origin(option) is Literal:
            return isinstance(value, str)
        if typing.get_origin(option) is tuple:
            return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
        if option is bool:
            return isinstance(value, bool)
        if option is int:
            return isinstance(value, int) and not isinstance(value, bool)
        if option is float:
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if option in (str, Path):
            return isinstance(value, str)
        return True  # a type JSON cannot hold: left to the flag's own check

    if not any(fits(o) for o in options):
        names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
        expected = " or ".join(
            "a list of strings" if typing.get_origin(o) is tuple else names.get(o, "a string")
            for o in options
        )
        if type(None) in args:
            expected += " or null"
        raise ValueError(f"{where} is {json.dumps(value)}, expected {expected}")


def load_config_file(
    path: Path | str, flag: str = "--config", *, algo_config: bool = True
) -> TrainConfig:
    """The settings in a config.json (a run's, or a bare ``train_config`` object), with
    ``resume``, ``overwrite`` and ``config`` reset: a saved file never deletes anything.
    ``flag``: the flag that names the file in error messages (``--resume`` for a run's
    own config.json). ``algo_config``: read the file's ``algo_config`` section too
    (``apply_algo_config``); a resumed run reads it from its checkpoint instead."""
    path = Path(path)
    try:
        data = parse_json(read_text_bounded(path, MAX_SETTINGS_BYTES))
    except FileNotFoundError:
        raise ValueError(f"{flag}: {path}: no such file") from None
    except (ValueError, UnicodeDecodeError):
        raise ValueError(f"{flag}: {path}: not valid JSON") from None
    except OSError as err:  # a directory, unreadable, ...
        raise ValueError(f"{flag}: {path}: not readable ({err.strerror or err})") from None
    return config_from_record(data, f"{flag}: {path}", algo_config=algo_config)


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
    budget = cfg.max_new_tokens or build_task(cfg).max_new_tokens
    given = dataclasses.asdict(algorithm_config(cfg, algo, budget))
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
        _overridden_config(cfg, algo, budget)
    except ValueError as err:
        raise ValueError(f"{source}: algo_config: {err}") from None
    return cfg


def _override_text(value: Any) -> str:
    """A JSON value as ``parse_overrides`` reads it back (``repr`` keeps every float bit)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj
