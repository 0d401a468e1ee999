"""Supervised warm start: the base model every RL run starts from.

RL from random weights learns nothing on a sparse reward: a random policy almost never writes
a right answer, so every group has all-equal rewards and every advantage is zero. Published
toy GRPO work therefore starts from pretrained models of ≥ 135M parameters. Our stand-in is a
short supervised run on reference solutions of a *mix of easier instances* (for ``chain``:
1 to 4 operations instead of always 4), tuned so that RL on the default task starts with a
10–50 % success rate: low enough to have room to learn, high enough that most groups hold
both right and wrong answers (a group whose rewards are all equal carries no signal).

The result is deterministic per seed, the same bit for bit on any x86-64 CPU with AVX2 (on
one torch thread, the default: see ``WarmstartConfig.threads``, and on refimpl's pinned
kernel path, ``refimpl/numerics.py``) and cached under ``runs/warmstart/<task>-<hash>/``: the
hash covers every setting, so changing one trains a new model, and ``make demo``, the
notebooks and the benchmarks all reuse the same file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
import torch.nn.functional as F
import tyro
from filelock import FileLock
from tqdm.auto import tqdm

from refimpl import numerics
from refimpl.checkpoint import CheckpointError, load_model_weights, read_state, save_checkpoint
from refimpl.evaluate import success_rate
from refimpl.model import GPT, GPTConfig
from refimpl.overrides import parse_overrides
from toy_envs import TASK_NAMES, TOKENIZER, get_task

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


@dataclass
class ModelConfig:
    """Size of the tiny GPT (2 layers, d = 128 → 408k parameters)."""

    n_layer: int = 2
    """transformer blocks"""
    n_embd: int = 128
    """width d"""
    n_head: int = 4
    """attention heads (must divide n_embd)"""
    block_size: int = 64
    """longest prompt + completion, in tokens"""

    def check(self, prefix: str = "--model.") -> None:
        """Raise ``ValueError`` naming the flag (``prefix`` + field) on an impossible size."""
        for name, low in (("n_layer", 1), ("n_embd", 1), ("n_head", 1), ("block_size", 2)):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= low):
                raise ValueError(f"{_flag(prefix, name)}: expected an integer ≥ {low}, got {value}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"{_flag(prefix, 'n_head')}: expected a divisor of {_flag(prefix, 'n_embd')}="
                f"{self.n_embd}, got {self.n_head}"
            )

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


@dataclass
class WarmstartConfig:
    """Supervised warm start on reference solutions (AdamW, cosine schedule)."""

    task: TaskName = "chain"
    """task whose base model is trained (its easier mix, see WARMSTART_MIX)"""
    task_args: tuple[str, ...] = ()
    """task knobs as KNOB=VALUE (the RL run passes its own --task-args); the mix applies on top"""
    steps: int = 600
    """optimizer steps (600 × 128 lands chain k=3 at ~40 % greedy success)"""
    batch_size: int = 128
    """sequences per step"""
    lr: float = 3e-3
    """peak AdamW learning rate, cosine-decayed to 10 %"""
    seed: int = 0
    """seed of the initial weights and of the training problems"""
    model: ModelConfig = field(default_factory=ModelConfig)
    runs_dir: Path = Path("runs")
    """where the cache lives (runs/warmstart/...)"""
    eval_problems: int = 200
    """held-out problems for the final success report"""
    threads: int | None = 1
    """torch CPU threads while training. 1 (the default), with refimpl's pinned AVX2 kernel
    path (refimpl/numerics.py), trains the same base model bit for bit on every x86-64 CPU
    with AVX2: a sum split across threads rounds differently, so another thread count ends,
    after 600 steps at this learning rate, at another model. None: torch's default (one per
    core, so the model depends on the machine)."""
    force: bool = False
    """retrain even when a cached model exists"""
    progress: bool = True
    """show a progress bar"""

    def check(self, prefix: str = "--") -> None:
        """Raise ``ValueError`` naming the flag on a bad setting, before anything is trained.

        ``prefix`` is how the flags are spelled where this config is read: ``--`` for
        ``refimpl warmstart``, ``--warmstart.`` inside ``refimpl train``."""
        if self.task not in TASK_NAMES:
            raise ValueError(
                f"{_flag(prefix, 'task')}: expected one of {', '.join(TASK_NAMES)}, "
                f"got {self.task!r}"
            )
        for name in ("steps", "batch_size", "eval_problems"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"{_flag(prefix, name)}: expected a positive integer, got {value}")
        if not (self.lr > 0 and math.isfinite(self.lr)):
            raise ValueError(
                f"{_flag(prefix, 'lr')}: expected a positive learning rate, got {self.lr}"
            )
        limit = float(torch.finfo(torch.float32).max) * (1 - 0.9)  # AdamW's first step: 10·lr
        if self.lr > limit:
            raise ValueError(
                f"{_flag(prefix, 'lr')}: expected a learning rate ≤ {limit:.3g} (AdamW's first "
                f"step, lr/(1−β₁), must fit in float32), got {self.lr}"
            )
        if self.seed < 0:
            raise ValueError(f"{_flag(prefix, 'seed')}: expected an integer ≥ 0, got {self.seed}")
        if self.threads is not None and self.threads < 1:
            raise ValueError(
                f"{_flag(prefix, 'threads')}: expected a positive integer (or None), "
                f"got {self.threads}"
            )
        if self.threads is not None and self.threads > (os.cpu_count() or 1):
            raise ValueError(
                f"{_flag(prefix, 'threads')}: expected at most {os.cpu_count() or 1} (the CPU "
                f"cores of this machine), got {self.threads}"
            )
        self.model.check(prefix + "model.")
        # The mix's sequences, <bos> prompt answer <eos>, must fit the model's positions.
        task = get_task(self.task, **self.task_knobs())
        longest = task.max_prompt_tokens + task.max_new_tokens
        if longest > self.model.block_size:
            raise ValueError(
                f"{_flag(prefix, 'model.block_size')}: {self.model.block_size} is too small for "
                f"{self.task} {' '.join(self.task_args)}".rstrip()
                + f" (prompts up to {task.max_prompt_tokens} tokens + answers up to "
                f"{task.max_new_tokens}): pass {_flag(prefix, 'model.block_size')} {longest} "
                "or more, or make the task smaller"
            )

    def cache_complete(self) -> bool:
        """The cache holds a whole trained model (saves are atomic: present means whole)."""
        return (self.cache_dir / "model.safetensors").exists()

    def check_writable(self, prefix: str = "--") -> None:
        """Raise ``ValueError`` naming ``runs_dir`` when the model must be trained but its
        cache cannot be written (a cached model is read without writing anything)."""
        if self.cache_complete() and not self.force:
            return
        target = _nearest_existing(self.cache_dir)
        if not os.access(target, os.W_OK | os.X_OK):
            raise ValueError(
                f"{_flag(prefix, 'runs_dir')}: {target} is not writable, and the warm start "
                f"{self.cache_dir} has to be trained and cached there; choose a writable "
                f"{_flag(prefix, 'runs_dir')}"
            )

    def task_knobs(self) -> dict[str, object]:
        """The knobs that ``task_args`` sets (typed like the task's defaults; mix not included)."""
        return parse_overrides(self.task_args, get_task(self.task).knobs(), "--task-args")

    def canonical_task_args(self) -> tuple[str, ...]:
        """``task_args`` parsed and filled in with the task's defaults, written back as the
        ``KNOB=VALUE`` pairs that differ from those defaults, sorted by knob.

        Flags that say the same thing (``num_ops=3``, nothing, ``min_ops=3 num_ops=3`` when
        both are chain's defaults) give the same tuple, so they share one cached model. The
        pairs that restate nothing are dropped rather than hashed with the defaults so that
        the key of a run without ``--task-args`` is what it always was (existing caches stay
        valid); a change to a task's *default* is a code change, like any other change to the
        task's code, and needs ``--force`` (or a new ``runs_dir``), as before."""
        defaults = get_task(self.task).knobs()
        knobs = get_task(self.task, **self.task_knobs()).knobs()
        return tuple(f"{k}={v}" for k, v in sorted(knobs.items()) if v != defaults[k])

    def cache_key(self) -> str:
        """A hash of every setting that changes the trained weights (the task's knobs as
        ``canonical_task_args``, not as typed)."""
        keep = {
            k: v
            for k, v in dataclasses.asdict(self).items()
            if k not in ("runs_dir", "eval_problems", "threads", "force", "progress")
        }
        keep["task_args"] = list(self.canonical_task_args())
        keep["mix"] = WARMSTART_MIX.get(self.task, {})
        keep["vocab"] = TOKENIZER.itos
        keep["numerics"] = numerics.cache_tag()  # another kernel path trains another model
        blob = json.dumps(keep, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:10]

    @property
    def cache_dir(self) -> Path:
        return Path(self.runs_dir) / "warmstart" / f"{self.task}-{self.cache_key()}"


@dataclass
class RunWarmstartConfig(WarmstartConfig):
    """The warm start of an RL run: its task and task knobs are the run's (``--task``,
    ``--task-args``) and its progress bar follows ``--progress``, so those three fields are
    not flags of ``refimpl train``; its cache follows the run's ``--runs-dir`` unless
    ``--warmstart.runs-dir`` is given (``refimpl.config.run_warmstart`` resolves it)."""

    task: tyro.conf.Suppress[TaskName] = "chain"
    task_args: tyro.conf.Suppress[tuple[str, ...]] = ()
    progress: tyro.conf.Suppress[bool] = True
    runs_dir: Path | None = None  # type: ignore[assignment]
    """where the cache lives (<runs_dir>/warmstart/...; None: the run's --runs-dir)"""


def _flag(prefix: str, name: str) -> str:
    return prefix + name.replace("_", "-")


def _nearest_existing(path: Path) -> Path:
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _training_batch(task, problems) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``<bos> prompt solution <eos>``, right-padded, with a loss mask on the solution."""
    seqs, loss_starts = [], []
    for p in problems:
        prompt = TOKENIZER.encode(p.prompt, add_bos=True)
        completion = TOKENIZER.encode(task.reference_solution(p), add_eos=True)
        seqs.append(prompt + completion)
        loss_starts.append(len(prompt))
    ids, mask = TOKENIZER.pad(seqs, side="right")
    ids_t, mask_t = torch.as_tensor(ids), torch.as_tensor(mask)
    # Predict token j+1 from tokens ≤ j; only solution tokens (and <eos>) carry loss, so the
    # model learns to answer, not to generate prompts.
    positions = torch.arange(ids_t.shape[1])[None, :]
    starts = torch.tensor(loss_starts)[:, None]
    target_mask = (positions >= starts) & mask_t.bool()
    return ids_t, mask_t, target_mask


def train_warmstart(cfg: WarmstartConfig, prefix: str = "--") -> GPT:
    """Train (or load from the cache) the base model for ``cfg.task``; print its success.

    A cached model is read without writing anything (a read-only cache works). Otherwise the
    lock file ``<cache>.lock`` makes two processes asking for the same model (a notebook and
    ``make demo``, say) train it once: the second waits, then loads the first one's cache.
    ``prefix``: how the flags are spelled in error messages (``--warmstart.`` for a run)."""
    cfg.check(prefix)
    cfg.check_writable(prefix)
    cache = cfg.cache_dir
    if cfg.cache_complete() and not cfg.force:
        return _load(cfg, cache, prefix)
    cache.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(cache) + ".lock"):
        if cfg.cache_complete() and not cfg.force:  # trained by another process meanwhile
            return _load(cfg, cache, prefix)
        previous = torch.get_num_threads()
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        try:
            return _train(cfg, cache)
        finally:
            torch.set_num_threads(previous)  # the caller's RL run keeps its own setting


def _load(cfg: WarmstartConfig, cache: Path, prefix: str) -> GPT:
    model = cfg.model.build()
    try:
        load_model_weights(cache, model)
        report = read_state(cache).get("report", {})
    except CheckpointError as err:
        raise CheckpointError(
            f"warm start cache: {err}; retrain it with {_flag(prefix, 'force')}"
        ) from None
    print(f"warm start: reusing {cache} ({_format_report(report)})")
    return model.eval()


def _train(cfg: WarmstartConfig, cache: Path) -> GPT:

    torch.manual_seed(cfg.seed)
    model = cfg.model.build()  # re-built after seeding: weights depend on cfg.seed only
    mix_task = get_task(cfg.task, **{**cfg.task_knobs(), **WARMSTART_MIX.get(cfg.task, {})})
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(s / cfg.steps, 1.0)))
    )
    model.train()
    start = time.perf_counter()
    bar = tqdm(range(cfg.steps), desc=f"warm start {cfg.task}", disable=not cfg.progress)
    for step in bar:
        # Problems of step s come from a generator seeded by (seed, s): deterministic.
        problems = mix_task.sample(cfg.batch_size, np.random.default_rng([cfg.seed, step]))
        ids, mask, target_mask = _training_batch(mix_task, problems)
        logits = model(ids, attention_mask=mask)[:, :-1]
        targets, weights = ids[:, 1:], target_mask[:, 1:].float()
        nll = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="none"
        ).view_as(weights)
        loss = (nll * weights).sum() / weights.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
    seconds = time.perf_counter() - start
    model.eval()
    report = base_success(model, get_task(cfg.task, **cfg.task_knobs()), cfg.eval_problems)
    report["train_seconds"] = round(seconds, 1)
    state = {"config": dataclasses.asdict(cfg), "report": report, "numerics": numerics.describe()}
    save_checkpoint(cache, model, None, state)
    print(f"warm start: trained {cfg.steps} steps in {seconds:.0f} s → {cache}")
    print(f"warm start: base model on {cfg.task}: {_format_report(report)}")
    return model


def base_success(model: GPT, task, n: int) -> dict[str, float]:
    """Greedy and sampled success of ``model`` on ``n`` held-out problems of the RL task."""
    problems = task.sample(n, np.random.default_rng([10_000, 0]))  # the held-out seed
    return {
        "greedy_success": success_rate(model, task, problems, greedy=True),
        "sampled_success": success_rate(model, task, problems, greedy=False, seed=1),
    }


def _format_report(report: dict) -> str:
    if not report:
        return "no report"
    return (
        f"greedy success {report.get('greedy_success', float('nan')):.2f}, "
        f"sampled success {report.get('sampled_success', float('nan')):.2f}"
    )
