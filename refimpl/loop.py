"""The toy RL loop, whole, in one file: read it right after an algorithm file.

    sample N prompts × G completions ─► rewards ─► dynamic sampling
      ─► values of π_old, when the Config asks (VinePPO)
      ─► batch_stages.prepare_update: reward shaping ─► advantages (the algorithm file)
         ─► overlong filter ─► the rollout's constants
      ─► ppo_epochs × minibatches: loss (the algorithm file) ─► clip ─► Adam

An algorithm is two functions in ``refimpl/algorithms/<name>.py``, ``advantages`` and
``loss``, and a ``Config`` whose switches ``refimpl.batch_stages`` reads (DAPO's dynamic
sampling, overlong shaping and overlong filter): nothing below depends on which algorithm
runs. ``refimpl.train.Trainer`` is this same loop plus what a long run needs around it;
``tests/test_loop.py`` checks that the two compute the same losses and the same weights.

    from refimpl.loop import LoopConfig, train
    from refimpl.settings.warmstart_config import WarmstartConfig
    from refimpl.warmstart import train_warmstart
    train(train_warmstart(WarmstartConfig()), LoopConfig(algo="dapo", steps=20))

Left out, because they watch or protect a run rather than train it (the Trainer has them):
held-out evaluation, entropy probes and diagnostics, checkpoints and resuming, the run
directory and its logs, the NaN guard, Ctrl-C, a token budget, bf16 autocast (so the
float32 entropy recomputation it needs is left out too).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from refimpl import algorithms, batch_stages
from refimpl.model import GPT
from refimpl.problem_streams import training_rng  # the prompts of step s, round r: their own stream
from refimpl.sampling.groups import Samples, concat_samples, sample_groups, seeded_generator
from refimpl.sampling.monte_carlo_values import training_values
from toy_envs import DEFAULT_TASK, TOKENIZER, get_task


@dataclass
class LoopConfig:
    """The settings that change what a step computes (the Trainer's of the same names)."""

    algo: str = algorithms.BASELINE  # one of refimpl.algorithms.NAMES
    algo_cfg: Any = None  # that algorithm's Config (None: its defaults)
    task: str = DEFAULT_TASK  # one of toy_envs.TASK_NAMES
    task_knobs: dict[str, Any] = field(default_factory=dict)  # e.g. {"num_ops": 1}
    seed: int = 0
    steps: int = 20
    prompts_per_step: int = 64  # N prompts per step
    group_size: int = 8  # G completions per prompt
    lr: float = 1e-4
    lr_warmup: int = 8  # the first 8 optimizer updates take lr·k/8 (docs/first_update.md)
    ppo_epochs: int = 1
    minibatches: int = 4  # optimizer steps per epoch, each on whole groups
    grad_clip: float = 1.0
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None  # L_max (None: the task's)
    resample_rounds: int = 4  # extra sampling rounds dynamic sampling may take


def sample_round(model, task, cfg: LoopConfig, step: int, round_: int, L_max: int):
    """N prompts, G completions each (recording logp_old and H_old), their rewards and the
    problems (the credit oracle's verifier needs them)."""
    problems = task.sample(cfg.prompts_per_step, training_rng(cfg.seed, step, round_))
    samples = sample_groups(
        model,
        [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems],
        group_size=cfg.group_size,
        max_new_tokens=L_max,
        eos_id=TOKENIZER.eos_id,
        pad_id=TOKENIZER.pad_id,
        temperature=cfg.temperature,
        top_k=cfg.top_k,
        top_p=cfg.top_p,
        generator=seeded_generator(cfg.seed, step, round_, 1),  # step s: its own stream
    )
    # The outcome reward r_i: the task's verifier reads the completion's text.
    texts = [TOKENIZER.decode(row.tolist()) for row in samples.response_ids]
    answered = [p for p in problems for _ in range(cfg.group_size)]
    return samples, torch.tensor(task.score(answered, texts), dtype=torch.float32), problems


def rollout(model, task, algo_cfg, cfg: LoopConfig, step: int, L_max: int):
    """The step's groups and their outcome rewards. With ``Config.dynamic_sampling`` only the
    groups with 0 < #successful < G (DAPO Eq. 11, ``dapo.py``), resampling up to
    ``resample_rounds`` more times until N are found: a group whose G rewards are all equal
    has all-zero group-relative advantages, so it would train nothing."""
    N, G = cfg.prompts_per_step, cfg.group_size
    kept_samples, kept_outcomes, kept_problems, kept = [], [], [], 0
    for round_ in range(1 + cfg.resample_rounds):
        samples, outcome, problems = sample_round(model, task, cfg, step, round_, L_max)
        keep = batch_stages.keep_groups(outcome, G, algo_cfg)  # [N] bool: all, unless asked
        keep[torch.cumsum(keep.long(), 0) > N - kept] = False  # never more than N groups
        if keep.any():
            kept_samples.append(samples.select_groups(keep))
            kept_outcomes.append(outcome[keep.repeat_interleave(G)])
            kept_problems += [p for p, k in zip(problems, keep.tolist()) if k]
            kept += int(keep.sum())
        if not algo_cfg.dynamic_sampling or kept >= N:
            break
    if kept == 0:
        return None, None, None
    samples = concat_samples(kept_samples, TOKENIZER.pad_id)
    return samples, torch.cat(kept_outcomes), kept_problems


def update(
    model, optimizer, algo, prepared: batch_stages.Update, samples: Samples, cfg: LoopConfig
):
    """``ppo_epochs`` passes over the batch, each in ``minibatches`` optimizer steps on whole
    groups: after the first step π_θ ≠ π_old, so the ratios leave 1 and the clip can act.
    Returns each optimizer step's loss and gradient norm (before clipping)."""
    model.train()
    losses, grad_norms = [], []
    # prepared.cfg: the Config with the whole rollout's constants a minibatch cannot see
    # (STEER's |Ω| range over the batch); for every other Config the Config itself.
    A, algo_cfg = prepared.advantages, prepared.cfg
    for _epoch in range(cfg.ppo_epochs):
        for minibatch, rows in batch_stages.minibatches(prepared.batch, cfg.minibatches):
            # log π_θ(o_t | q, o_<t) and H_θ of every response token, one forward pass.
            logp, H = samples.policy_logprobs(model, rows, temperature=cfg.temperature)
            # H_θ carries gradient only into a loss that trains it (entropy_bonus.py's
            # bonus); TEPO's KL mask only reads it (tepo.py: H_θ < H_old − τ); others ignore it.
            if not algo_cfg.differentiates_entropy():
                H = H.detach()
            loss, _ = algo.loss(minibatch, logp, A[rows], algo_cfg, entropy=H)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            # lr · min(1, k / lr_warmup) for the run's k-th update: Adam's first updates are
            # sign steps (every weight moves by lr), so they start small.
            batch_stages.warm_up_lr(optimizer, cfg.lr, cfg.lr_warmup)
            optimizer.step()
            losses.append(float(loss.detach()))
            grad_norms.append(float(grad_norm))
    model.eval()
    return losses, grad_norms


def train(model: GPT, cfg: LoopConfig, log=print) -> list[dict[str, float]]:
    """Train ``model`` (a warm-started GPT) in place for ``cfg.steps`` steps; return each
    step's metrics (a step whose every group was uninformative trains nothing)."""
    algo = algorithms.get(cfg.algo)
    task = get_task(cfg.task, **cfg.task_knobs)
    L_max = cfg.max_new_tokens or task.max_new_tokens
    algo_cfg = (cfg.algo_cfg or algo.Config()).for_generation_budget(L_max)  # Dr. GRPO's L_max
    model.eval()
    # π_ref of a KL term (grpo.py Eq. 4, k3): the frozen starting policy.
    reference = copy.deepcopy(model).requires_grad_(False) if algo_cfg.needs_reference() else None
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    history = []
    for step in range(cfg.steps):
        samples, outcome, problems = rollout(model, task, algo_cfg, cfg, step, L_max)
        if samples is None:
            log(f"step {step + 1}: every group uninformative, nothing to train on")
            continue
        logp_ref = None
        if reference is not None:
            with torch.no_grad():
                logp_ref = samples.policy_logprobs(
                    reference, temperature=cfg.temperature, with_entropy=False
                )[0]
        batch = samples.to_rollout_batch(outcome, cfg.group_size, logp_ref=logp_ref)
        request = algo_cfg.values_needed()  # VinePPO: V̂ of π_old at its step starts
        if request is not None:
            # The credit oracle (refimpl credit's code) on π_old: `model` has not moved yet.
            values = training_values(
                model, task, problems, samples, outcome, request, max_new_tokens=L_max,
                temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p,
                success_threshold=algo_cfg.success_threshold, seed=cfg.seed, step=step,
            )  # fmt: skip
            batch = batch.replace(token_values=values.value_before)
        # Between rollout and update, the stages every driver runs in one order: reward
        # shaping (DAPO Eq. 13: r̃_i = r_i + c·R_len(|o_i|) when the Config asks) → A =
        # algo.advantages(batch, algo_cfg), [B, T], the algorithm's own equations → DAPO's
        # overlong filter (truncated rows leave the loss, after they counted in A) → the
        # whole rollout's constants (Config.for_update).
        prepared = batch_stages.prepare_update(
            algo, batch, algo_cfg, max_len=L_max, truncated=samples.truncated
        )
        losses, grad_norms = update(model, optimizer, algo, prepared, samples, cfg)
        metrics = {
            "step": step + 1,
            "reward_mean": float(prepared.batch.rewards.mean()),
            "success_rate": float((outcome >= algo_cfg.success_threshold).float().mean()),
            "groups_trained": prepared.batch.num_groups,
            "loss": float(np.mean(losses)),
            "grad_norm": float(np.mean(grad_norms)),
        }
        history.append(metrics)
        log("  ".join(f"{key} {value:.4g}" for key, value in metrics.items()))
    return history
