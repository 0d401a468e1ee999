"""The settings of an RL run: ``TrainConfig`` (every flag of ``refimpl train``) and its checks.

``check_train_config`` fails at start-up, naming the flag, on a bad or inconsistent setting;
``refimpl.settings.plan.resolve`` calls it before anything is written or trained.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import torch

from refimpl import algorithms
from refimpl.loop import LoopConfig
from refimpl.problem_streams import held_out_rng
from refimpl.sampling.distribution import TEMPERATURE_MIN, TOP_P_MIN  # the sampler's bounds
from refimpl.settings.limits import (
    Bounds,
    at_least,
    check_lr,
    check_positive,
    check_seed,
    check_threads,
    one_of,
    optional,
)
from refimpl.settings.overrides import KeyValues
from refimpl.settings.warmstart_config import RunWarmstartConfig, TaskName
from refimpl.types.flags import flag
from toy_envs import TOKENIZER

#: ``--algo`` choices, listed by ``--help`` (built from the registry: new algorithms appear).
AlgoName = Literal[algorithms.NAMES]  # type: ignore[valid-type]


@dataclass
class TrainConfig:
    """One RL run of one algorithm on one task. The settings that change what a step computes
    default to those of refimpl/loop.py, the loop to read first, so both loops train alike."""

    algo: AlgoName = LoopConfig.algo
    """algorithm (`refimpl algos` lists them with their Config fields)"""
    task: TaskName = LoopConfig.task
    """task (`refimpl tasks` lists them with their knobs)"""
    algo_args: KeyValues = ()
    """algorithm Config overrides as FIELD=VALUE, e.g. --algo-args alpha_2=0.2 stats=subgroup"""
    task_args: KeyValues = ()
    """task knob overrides as KNOB=VALUE, e.g. --task-args num_ops=3"""
    seed: int = LoopConfig.seed
    """seed of prompts and completions (the warm start has its own)"""
    steps: int = 200
    """RL steps (one rollout batch each)"""
    max_sampled_tokens: int | None = None
    """also stop once this many completion tokens have been sampled (None: no token budget;
    dynamic sampling draws more per step, so a token budget compares algorithms fairly)"""
    prompts_per_step: int = LoopConfig.prompts_per_step
    """N, groups per batch (the default regime, docs/benchmarks.md: 64 × 8 with 4 minibatches)"""
    group_size: int = LoopConfig.group_size
    """G, completions per prompt"""
    lr: float = LoopConfig.lr
    """Adam learning rate (tuned with 64 × 8 rollouts in 4 minibatches: docs/benchmarks.md)"""
    lr_warmup: int = LoopConfig.lr_warmup
    """optimizer updates over which the learning rate ramps linearly up to --lr (update k
    takes lr·k/N; 0: none). Adam's first update moves every weight by lr: docs/first_update.md"""
    ppo_epochs: int = LoopConfig.ppo_epochs
    """passes over each rollout batch"""
    minibatches: int = LoopConfig.minibatches
    """optimizer steps per pass (the batch is split by groups): after the first, the policy
    has moved, so ratios leave 1 and the clip and TEPO's mask can act"""
    grad_clip: float = LoopConfig.grad_clip
    """max gradient norm"""
    temperature: float = LoopConfig.temperature
    """sampling temperature (the loss pass uses the same)"""
    top_k: int | None = LoopConfig.top_k
    """sampling top-k (None: full distribution)"""
    top_p: float | None = LoopConfig.top_p
    """sampling nucleus p (None: full distribution)"""
    max_new_tokens: int | None = LoopConfig.max_new_tokens
    """completion budget L_max in tokens, <eos> included (None: the task's default)"""
    resample_rounds: int = LoopConfig.resample_rounds
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
    """run directory name (None: <task>-<algo>-s<seed>)"""
    resume: bool = False
    """continue the run in the existing run directory from its last checkpoint, with the
    settings of its config.json (only --steps, --max-sampled-tokens and the flags that do not
    change the math may differ: docs/safety.md)"""
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


#: Settings added after runs were recorded without them, with the value those runs trained with:
#: a config.json that lacks one is read with this value, not today's default.
UNRECORDED_MEANS: dict[str, Any] = {"lr_warmup": 0}


def config_dict(cfg: TrainConfig) -> dict[str, Any]:
    """``cfg`` as JSON-ready data (what config.json records under ``train_config``)."""
    return _jsonable(dataclasses.asdict(cfg))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    return obj


# ---------------------------------------------------------------------------------------------
# Start-up checks: every flag, naming it, before anything is written or trained.
# ---------------------------------------------------------------------------------------------

#: The most ``--ppo-epochs``: passes over one rollout (PPO's papers take 1 to 10); a stop
#: (Ctrl-C, SIGTERM) waits for the step in progress, so a step must end.
PPO_EPOCHS_MAX = 1000


def _ppo_epochs(value: int, flag: str) -> None:
    check_positive(value, flag)
    if value > PPO_EPOCHS_MAX:
        raise ValueError(
            f"{flag}: expected at most {PPO_EPOCHS_MAX} passes over a rollout (each is a "
            f"forward and backward pass of the whole batch, and a stop waits for the step to "
            f"end), got {value}"
        )


def _grad_clip(value: float, flag: str) -> None:
    if not value > 0:  # ≤ 0 would flip (< 0) or zero (= 0) every gradient; inf: no clip
        raise ValueError(f"{flag}: expected a positive max gradient norm, got {value}")


def _temperature(value: float, flag: str) -> None:
    if not (value >= TEMPERATURE_MIN and math.isfinite(value)):
        raise ValueError(
            f"{flag}: expected a finite value ≥ {TEMPERATURE_MIN:g} (below it float32 "
            f"sampling is greedy: entropy 0 and every gradient 0, nothing is learnt), got {value}"
        )


def _top_p(value: float, flag: str) -> None:
    if not TOP_P_MIN <= value <= 1:
        raise ValueError(
            f"{flag}: expected {TOP_P_MIN:.3g} ≤ p ≤ 1 (float32's smallest normal value; a "
            f"smaller p is 0 in float32 and drops every token; or None: no nucleus), got {value}"
        )


#: Each flag's own bounds, in the order ``check_train_config`` checks them; the bounds
#: that tie flags together, or a flag to the task and the model, are ``check_train_config``'s.
TRAIN_BOUNDS: Bounds = (
    ("steps", check_positive),
    ("prompts_per_step", check_positive),
    ("group_size", at_least(2, " (group-relative advantages need siblings)")),
    ("ppo_epochs", _ppo_epochs),
    ("minibatches", check_positive),
    ("lr", check_lr),
    ("lr_warmup", at_least(0, " (0: no warm-up)")),
    ("grad_clip", _grad_clip),
    ("seed", check_seed),
    ("eval_problems", check_positive),
    ("eval_samples", check_positive),
    ("dtype", one_of(("float32", "bfloat16"))),
    ("temperature", _temperature),
    ("top_k", optional(at_least(1, " (or None: no top-k)"))),
    ("top_p", optional(_top_p)),
    ("resample_rounds", at_least(0)),
    ("probe_every", at_least(0, " (0: off)")),
    ("diag_every", at_least(0, " (0: off)")),
    ("threads", check_threads),
    ("max_sampled_tokens", optional(check_positive)),
    ("eval_every", check_positive),
    ("checkpoint_every", check_positive),
)


class CheckedRun(NamedTuple):
    """What ``check_train_config`` resolves as it checks the settings."""

    max_new_tokens: int  # the completion budget L_max in tokens
    device: torch.device
    run_dir: Path  # <--runs-dir>/<--name>
    warmstart_identity: dict  # the warm start's ``key_inputs()``, of its checked settings


def check_train_config(cfg: TrainConfig, task, warmstart) -> CheckedRun:
    """Fail at start-up, naming the flag, on a bad or inconsistent setting of the run on
    ``task`` and of its ``warmstart`` (nothing is written before this passes; the memory
    check, which needs the algorithm's Config, is ``refimpl.settings.plan.resolve``'s).
    Returns what it resolved (``CheckedRun``)."""
    for name, rule in TRAIN_BOUNDS:  # each flag's own bounds, then those across flags
        rule(getattr(cfg, name), flag(name))
    if cfg.prompts_per_step % cfg.minibatches:
        raise ValueError(
            f"--minibatches: expected a divisor of --prompts-per-step={cfg.prompts_per_step} "
            f"(minibatches hold whole groups), got {cfg.minibatches}"
        )
    if cfg.probe_every and cfg.probe_prompts < 1:
        raise ValueError(
            f"--probe-prompts: expected a positive integer (or --probe-every 0), "
            f"got {cfg.probe_prompts}"
        )
    device = check_device(cfg.device)
    if cfg.tensorboard:
        try:
            from torch.utils.tensorboard import SummaryWriter  # noqa: F401
        except ImportError:
            raise ValueError(
                "--tensorboard: needs the tensorboard package (pip install tensorboard)"
            ) from None
    # L_max: --max-new-tokens or the task's default, long enough for the task's answers and
    # short enough for the block size of the warm start's model.
    if cfg.max_new_tokens is not None and cfg.max_new_tokens < 1:
        raise ValueError(
            f"--max-new-tokens: expected a positive integer (or None: the task's default "
            f"{task.max_new_tokens}), got {cfg.max_new_tokens}"
        )
    # The warm start trains on the run's task: its flags are checked under their full names.
    run_dir = cfg.run_dir
    identity = warmstart.check("--warmstart.")
    max_new_tokens = task.max_new_tokens if cfg.max_new_tokens is None else cfg.max_new_tokens
    probe = task.sample(8, held_out_rng())
    needed = max(len(TOKENIZER.encode(task.reference_solution(p), add_eos=True)) for p in probe)
    if max_new_tokens < needed:
        raise ValueError(
            f"--max-new-tokens: the budget {max_new_tokens} is shorter than the task's "
            f"answers (up to {needed} tokens with <eos>)"
        )
    block = warmstart.model.block_size
    if task.max_prompt_tokens + max_new_tokens > block:
        raise ValueError(
            f"--max-new-tokens: prompts (up to {task.max_prompt_tokens} tokens) + budget "
            f"({max_new_tokens}) exceed the model's block size {block}: lower --max-new-tokens or "
            f"raise --warmstart.model.block-size"
        )
    return CheckedRun(max_new_tokens, device, run_dir, identity)


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
