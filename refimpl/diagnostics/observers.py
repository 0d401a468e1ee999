"""The diagnostics of a run, as observers of the Trainer's step: none of them changes what is
trained (``tests/test_loop.py`` trains with all of them on and compares with
``refimpl/loop.py``, which has none).

A ``Trainer`` step is ``refimpl/loop.py``'s step. At each stage it calls the same hook of
every observer, what the trainer is at that moment (a ``TrainerState``) first among the
arguments; a hook that returns a dict adds those metrics to the step's record::

    start(state)                                   before the first step   → step 0's record
    before_step(state)                             before each step
    before_update(state, batch, samples, adv)      the batch is ready, no optimizer step yet
      after_forward(state, rows, logp, entropy, loss_entropy)     ┐
      before_optimizer_step(state, rows, logp, loss_entropy, norm)│ each optimizer step
      after_optimizer_step(state, minibatch, logp)   → metrics,   ┘ averaged over them
    after_update(state)                            → metrics of the update
    measure(state, samples, batch, adv)            → what the update changed
    after_step(state, metrics)                     → metrics (after the NaN check)
    end(state)                                     after the last step

``after_forward`` sees the forward pass's ``entropy`` with its graph and ``loss_entropy``,
the one the loss gets (detached unless the Config trains it); an observer that needs
``∂L/∂logp`` calls ``logp.retain_grad()`` there.

An observer is given the settings it reads once, as plain values, when it is made
(``default_observers`` reads them from the run's ``TrainConfig``); its hooks see the run's
state, never its settings. So a diagnostic says in its constructor what it depends on, and
a setting's path through a run ends where the observers are made.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from refimpl import contract, core
from refimpl.diagnostics.entropy_attribution import EntropyPredictor
from refimpl.diagnostics.metrics import logp_advantage_covariance
from refimpl.evaluate import heldout_metrics, probe_snapshot
from refimpl.problem_streams import held_out_rng
from refimpl.runs.runlog import open_no_follow
from refimpl.runs.status import RunBudget
from refimpl.sampling.groups import seeded_generator

PROBE_SEED = 20_000  # the fixed probe prompts of the entropy snapshots
EVAL_SEED = 30_000  # the sampled completions of every held-out evaluation
# The entropy change of a step is measured (and predicted) on the first
# ENTROPY_CHANGE_COMPLETIONS completion(s) of each of its first ENTROPY_CHANGE_GROUPS groups:
# many prompts with one completion each follow the whole batch's change more closely than few
# prompts with many (docs/entropy_mechanism.md: 32 × 1 rows, r = 0.92 with the change on all
# 64 × 8; 16 × 8 rows, r = 0.87), at less than half the cost of the backward pass.
ENTROPY_CHANGE_GROUPS = 32
ENTROPY_CHANGE_COMPLETIONS = 1

Metrics = dict[str, Any] | None


class TrainerState(NamedTuple):
    """What a hook sees of the trainer when it is called: the model being trained and where
    the run stands (the Trainer makes one for each call, ``Trainer._observe``)."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    step: int
    """the steps done (the step being taken is ``step + 1``)"""
    sampled_tokens: int
    """the completion tokens sampled so far, this step's included once it has sampled"""
    budget: RunBudget
    """how long the run goes (``--steps``, ``--max-sampled-tokens``)"""

    @property
    def finished(self) -> bool:
        """The step budget, or the sampled-token budget, is spent."""
        return self.budget.spent(self.step, self.sampled_tokens)


class Observer:
    """The one interface every diagnostic implements (the module docstring lists the hooks
    in the order a step calls them); each does nothing here."""

    def start(self, state) -> Metrics:
        return None

    def before_step(self, state) -> None:
        return None

    def before_update(self, state, batch, samples, adv) -> None:
        return None

    def after_forward(self, state, rows, logp, entropy, loss_entropy) -> None:
        return None

    def before_optimizer_step(self, state, rows, logp, loss_entropy, grad_norm) -> None:
        return None

    def after_optimizer_step(self, state, minibatch, logp) -> Metrics:
        return None

    def after_update(self, state) -> Metrics:
        return None

    def measure(self, state, samples, batch, adv) -> Metrics:
        return None

    def after_step(self, state, metrics: dict[str, Any]) -> Metrics:
        return None

    def end(self, state) -> None:
        return None


class Covariance(Observer):
    """Why entropy moves (Cui et al., ``refimpl.diagnostics.metrics``): ``cov_logp_adv``, the
    covariance of ``logp_old`` with the advantage over the step's trained tokens, and
    ``cov_logp_update``, with the weight each optimizer step actually applied."""

    def after_forward(self, state, rows, logp, entropy, loss_entropy) -> None:
        logp.retain_grad()  # ∂L/∂logp: the per-token weight this update applies

    def after_optimizer_step(self, state, minibatch, logp) -> Metrics:
        # The update's effective advantage: −∂L/∂logp rescaled by the minibatch's token count
        # (= A·w under token-mean at ratio 1). Clipping, masks, KL terms and the aggregation
        # weights all show in it, the plain advantage shows none of them.
        update_weight = -logp.grad * minibatch.response_mask.sum()
        mask = minibatch.response_mask
        return {
            "cov_logp_update": logp_advantage_covariance(minibatch.logp_old, update_weight, mask)
        }

    def measure(self, state, samples, batch, adv) -> Metrics:
        return {"cov_logp_adv": logp_advantage_covariance(batch.logp_old, adv, batch.response_mask)}


class EntropyChange(Observer):
    """The entropy change a step causes (``entropy_change``), measured on its measured rows
    after the update, and its first-order prediction from the update itself
    (``entropy_change_pred``), split over token classes every ``diag_every`` steps
    (``refimpl.diagnostics.entropy_attribution``).

    The run's settings it reads: the sampling ``temperature``, the ``group_size``, whether
    the forward passes run in ``bfloat16``, the ``grad_clip`` the optimizer steps clip to,
    and ``diag_every`` (0: never split; the run's last step is always split, as it is always
    evaluated)."""

    predictor: EntropyPredictor

    def __init__(self, *, temperature: float, group_size: int, bfloat16: bool, grad_clip: float,
                 diag_every: int) -> None:  # fmt: skip
        self.temperature, self.group_size, self.bfloat16 = temperature, group_size, bfloat16
        self.grad_clip, self.diag_every = grad_clip, diag_every

    @property
    def settings(self) -> dict[str, Any]:
        """What it was made with: a variant is made with the same, ``Variant(**o.settings)``."""
        names = ("temperature", "group_size", "bfloat16", "grad_clip", "diag_every")
        return {name: getattr(self, name) for name in names}

    def before_update(self, state, batch, samples, adv) -> None:
        measured = measured_rows(batch, self.group_size, state.device)
        step = state.step + 1  # as it is logged; the last step is attributed, as it is evaluated
        last = state.budget.spent(step, state.sampled_tokens)  # this step's tokens are counted
        T = self.temperature
        self.predictor = EntropyPredictor(
            state.model,
            state.optimizer,
            lambda model, rows: samples.policy_logprobs(model, rows, temperature=T),
            lambda model: measured_logprobs(model, samples, measured, T),
            measured,
            batch.response_mask[measured],
            attribute=self.diag_every > 0 and (step % self.diag_every == 0 or last),
            adv=adv,
            logp_old=batch.logp_old,
            loss_mask=batch.response_mask,
            max_norm=self.grad_clip,
        )

    def after_forward(self, state, rows, logp, entropy, loss_entropy) -> None:
        logp.retain_grad()  # ∂L/∂logp: the attribution's per-token weights
        self.predictor.forward_done(rows, entropy)  # ∇H̄, from this pass when rows are measured
        if self.predictor.attribute and loss_entropy.requires_grad:
            loss_entropy.retain_grad()  # ∂L/∂H: an entropy bonus's share of the attribution

    def before_optimizer_step(self, state, rows, logp, loss_entropy, grad_norm) -> None:
        self.predictor.before_step(rows, logp, loss_entropy, grad_norm)

    def after_optimizer_step(self, state, minibatch, logp) -> Metrics:
        self.predictor.after_step()
        return None

    def after_update(self, state) -> Metrics:
        return self.predictor.finish()

    @torch.no_grad()
    def measure(self, state, samples, batch, adv) -> Metrics:
        """Cov(logp_old, A) predicts the sign of the entropy change; measure that change on
        the very same states the update predicted it on."""
        measured = measured_rows(batch, self.group_size, state.device)
        # the trainer's autocast
        with torch.autocast(state.device.type, dtype=torch.bfloat16, enabled=self.bfloat16):
            _, entropy_after = measured_logprobs(state.model, samples, measured, self.temperature)
        change = core.masked_mean(
            entropy_after.float() - batch.entropy_old[measured], batch.response_mask[measured]
        )
        return {"entropy_change": float(change)}


def measured_rows(
    batch: contract.RolloutBatch, group_size: int, device: torch.device
) -> torch.Tensor:
    """The rows the entropy change is measured (and predicted) on: the first
    ``ENTROPY_CHANGE_COMPLETIONS`` of each of the first ``ENTROPY_CHANGE_GROUPS`` groups."""
    G = group_size
    groups = torch.arange(min(batch.num_groups, ENTROPY_CHANGE_GROUPS), device=device)
    within = torch.arange(min(G, ENTROPY_CHANGE_COMPLETIONS), device=device)
    return (groups[:, None] * G + within[None, :]).reshape(-1)


def measured_logprobs(model, samples, measured: torch.Tensor, temperature: float):
    """``(logp, entropy)`` of the measured rows under ``model``."""
    group_size = min(samples.group_size, ENTROPY_CHANGE_COMPLETIONS)
    return samples.policy_logprobs(model, measured, temperature=temperature, group_size=group_size)


class HeldOutEvaluation(Observer):
    """Greedy success and pass@k on a fixed held-out set (``refimpl.evaluate.heldout_metrics``)
    at step 0, every ``every`` steps and at the end: ``problems`` problems of ``task``,
    ``samples`` sampled completions of each (pass@k), of at most ``max_new_tokens`` tokens,
    drawn from the run's ``seed``; a success is an outcome ≥ ``success_threshold``."""

    def __init__(self, task, *, problems: int, samples: int, every: int, max_new_tokens: int,
                 seed: int, success_threshold: float) -> None:  # fmt: skip
        self.task, self.problems = task, task.sample(problems, held_out_rng())
        self.samples, self.every, self.max_new_tokens = samples, every, max_new_tokens
        self.seed, self.success_threshold = seed, success_threshold

    def start(self, state) -> Metrics:
        return self.evaluate(state) if state.step == 0 else None

    def after_step(self, state, metrics: dict[str, Any]) -> Metrics:
        if state.step % self.every == 0 or state.finished:
            return self.evaluate(state)
        return None

    def evaluate(self, state) -> dict[str, float]:
        t0 = time.perf_counter()
        out = heldout_metrics(
            state.model,
            self.task,
            self.problems,
            self.samples,
            max_new_tokens=self.max_new_tokens,
            generator=seeded_generator(self.seed, EVAL_SEED, device=state.device),
            success_threshold=self.success_threshold,
        )
        out["time_eval"] = time.perf_counter() - t0
        return out


class Probes(Observer):
    """Entropy snapshots of ``prompts`` fixed probe prompts of ``task``
    (``refimpl.evaluate.probe_snapshot``: completions of at most ``max_new_tokens`` tokens at
    the run's ``temperature``, drawn from its ``seed``) every ``every`` steps and at the end,
    appended to ``file`` (a run's ``probes.jsonl``)."""

    def __init__(self, task, *, prompts: int, every: int, max_new_tokens: int,
                 temperature: float, seed: int, file: Path) -> None:  # fmt: skip
        self.file = file
        self.prompts = task.sample(prompts, np.random.default_rng([PROBE_SEED, 0]))
        self.every, self.max_new_tokens = every, max_new_tokens
        self.temperature, self.seed = temperature, seed

    def before_step(self, state) -> None:
        if state.step % self.every == 0:
            self.snapshot(state)

    def end(self, state) -> None:
        self.snapshot(state)

    def snapshot(self, state) -> None:
        rows = probe_snapshot(
            state.model,
            self.prompts,
            max_new_tokens=self.max_new_tokens,
            temperature=self.temperature,
            generator=seeded_generator(self.seed, PROBE_SEED, device=state.device),
        )
        with open_no_follow(self.file, "a") as f:
            f.write(json.dumps({"step": state.step, "probes": rows}) + "\n")


def default_observers(cfg, task, max_new_tokens: int, success_threshold: float, run_dir: Path
                      ) -> list[Observer]:  # fmt: skip
    """A run's diagnostics, made with the settings of the run ``cfg`` (a ``TrainConfig``) on
    ``task`` they read (probes only with ``--probe-every`` > 0, into ``run_dir``'s
    ``probes.jsonl``). The order is the order of their metrics in a step's record."""
    observers: list[Observer] = [
        Covariance(),
        EntropyChange(
            temperature=cfg.temperature, group_size=cfg.group_size,
            bfloat16=cfg.dtype == "bfloat16", grad_clip=cfg.grad_clip,
            diag_every=cfg.diag_every,
        ),
        HeldOutEvaluation(
            task, problems=cfg.eval_problems, samples=cfg.eval_samples, every=cfg.eval_every,
            max_new_tokens=max_new_tokens, seed=cfg.seed, success_threshold=success_threshold,
        ),
    ]  # fmt: skip
    if cfg.probe_every:
        observers.append(
            Probes(task, prompts=cfg.probe_prompts, every=cfg.probe_every,
                   max_new_tokens=max_new_tokens, temperature=cfg.temperature, seed=cfg.seed,
                   file=run_dir / "probes.jsonl")
        )  # fmt: skip
    return observers
