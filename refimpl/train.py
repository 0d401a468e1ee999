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
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from refimpl import algorithms, core
from refimpl.checkpoint import load_checkpoint, prepare_run_dir, save_checkpoint
from refimpl.evaluate import encode_prompts, score_samples, success_rate
from refimpl.model import GPT
from refimpl.overrides import parse_overrides
from refimpl.sampling import Samples, policy_logprobs, sample_groups
from refimpl.warmstart import WarmstartConfig, train_warmstart
from toy_envs import TASK_NAMES, TOKENIZER, get_task

HELD_OUT_SEED = 10_000  # problems of the held-out set come from default_rng([10_000, 0])
PROBE_SEED = 20_000  # the fixed probe prompts of the entropy snapshots


class NonFiniteLossError(RuntimeError):
    """The loss or the gradient norm was NaN/inf: the step is not applied."""


@dataclass
class TrainConfig:
    """One RL run of one algorithm on one task."""

    algo: str = "grpo"
    """algorithm, one of refimpl.algorithms.NAMES"""
    task: str = "chain"
    """task, one of toy_envs.TASK_NAMES"""
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
    prompts_per_step: int = 16
    """N, groups per batch"""
    group_size: int = 8
    """G, completions per prompt"""
    lr: float = 3e-5
    """Adam learning rate (CALIBRATION.md: ≥ 1e-4 collapses, 3e-5 learns)"""
    ppo_epochs: int = 1
    """passes over each rollout batch"""
    minibatches: int = 1
    """optimizer steps per pass (the batch is split by groups)"""
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
    eval_every: int = 20
    """steps between held-out evaluations (also done at step 0 and at the end)"""
    eval_problems: int = 200
    """size of the held-out problem set"""
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
    """continue the run in the existing run directory from its last checkpoint"""
    overwrite: bool = False
    """delete an existing run directory and start again"""
    device: str = "cpu"
    """torch device: cpu or cuda"""
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
    warmstart: WarmstartConfig = field(default_factory=WarmstartConfig)
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
    """Fail at start-up, naming the flag, on inconsistent sizes. Returns the budget L_max."""
    for name in ("steps", "prompts_per_step", "ppo_epochs", "minibatches", "eval_problems"):
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
    if cfg.dtype not in ("float32", "bfloat16"):
        raise ValueError(f"--dtype: expected float32 or bfloat16, got {cfg.dtype!r}")
    if not cfg.temperature > 0:
        raise ValueError(f"--temperature: expected > 0, got {cfg.temperature}")
    budget = cfg.max_new_tokens or task.max_new_tokens
    probe = task.sample(8, np.random.default_rng([HELD_OUT_SEED, 0]))
    needed = max(len(TOKENIZER.encode(task.reference_solution(p), add_eos=True)) for p in probe)
    if budget < needed:
        raise ValueError(
            f"--max-new-tokens: the budget {budget} is shorter than the task's "
            f"answers (up to {needed} tokens with <eos>)"
        )
    longest_prompt = max(len(TOKENIZER.encode(p.prompt, add_bos=True)) for p in probe)
    if longest_prompt + budget > cfg.warmstart.model.block_size:
        raise ValueError(
            f"--max-new-tokens: prompt ({longest_prompt}) + budget ({budget}) "
            f"exceeds the model's block size {cfg.warmstart.model.block_size}"
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


def resolve(cfg: TrainConfig) -> tuple[ModuleType, Any, int, Any]:
    """Check every flag of ``cfg`` without training: ``(algorithm, task, L_max, algo config)``.
    Raises ``ValueError`` naming the flag (unknown names list the valid ones)."""
    algo = algorithms.get(cfg.algo)
    task = build_task(cfg)
    budget = check_config(cfg, task)
    return algo, task, budget, algorithm_config(cfg, algo, budget)


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
        self.algo, self.task, self.budget, self.acfg = resolve(cfg)
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
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("--device: cuda requested but torch sees no CUDA device")

        base = train_warmstart(
            dataclasses.replace(
                cfg.warmstart, task=cfg.task, task_args=cfg.task_args, progress=cfg.progress
            )
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
        state = load_checkpoint(self.run_dir / "checkpoint", self.model, self.optimizer)
        self.step = int(state["step"])
        self.sampled_tokens = int(state["sampled_tokens"])
        # Metrics logged after the checkpoint are rewritten by the resumed run.
        metrics = self.run_dir / "metrics.jsonl"
        if metrics.exists():
            keep = [
                line
                for line in metrics.read_text().splitlines()
                if line.strip() and json.loads(line)["step"] <= self.step
            ]
            metrics.write_text("".join(line + "\n" for line in keep))
        probes = self.run_dir / "probes.jsonl"
        if probes.exists():
            keep = [
                line
                for line in probes.read_text().splitlines()
                if line.strip() and json.loads(line)["step"] < self.step
            ]
            probes.write_text("".join(line + "\n" for line in keep))

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
                if fp32_entropy:
                    entropy = self._entropy_fp32(samples, rows)
                loss, lm = self.algo.loss(mb, logp, adv[rows], acfg, entropy=entropy.detach())
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
                loss_metrics.append({"loss": float(loss.detach()), **lm})
        self.model.eval()
        t_loss = time.perf_counter() - t0 - t_adv

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
        t0 = time.perf_counter()
        out = {
            "heldout_greedy": success_rate(
                self.model, self.task, self.held_out, greedy=True, max_new_tokens=self.budget
            ),
            "heldout_sampled": success_rate(
                self.model,
                self.task,
                self.held_out,
                greedy=False,
                seed=self.cfg.seed,
                max_new_tokens=self.budget,
            ),
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

    def run(self) -> Path:
        """Train until ``cfg.steps``; return the run directory."""
        cfg = self.cfg
        prepare_run_dir(self.run_dir, resume=cfg.resume, overwrite=cfg.overwrite)
        if cfg.resume and (self.run_dir / "checkpoint").exists():
            self.restore()
        else:
            (self.run_dir / "metrics.jsonl").write_text("")
            (self.run_dir / "probes.jsonl").write_text("")
        (self.run_dir / "config.json").write_text(json.dumps(self._state(), indent=2))
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
        if self.step == 0:
            record = {"step": 0, "sampled_tokens": 0, **self.evaluate()}
            self._log("metrics.jsonl", record)
        bar = tqdm(
            total=cfg.steps,
            initial=self.step,
            disable=not cfg.progress,
            desc=f"{cfg.algo} s{cfg.seed}",
            dynamic_ncols=True,
        )
        try:
            while not self.finished():
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
                if self.step % cfg.checkpoint_every == 0 or self.finished():
                    self.save()
        finally:
            bar.close()
            if self._tb is not None:
                self._tb.close()
        if cfg.probe_every:
            self._log("probes.jsonl", self.probe())
        if cfg.plot:
            from refimpl.plots import plot_run

            plot_run(self.run_dir)
        return self.run_dir


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
