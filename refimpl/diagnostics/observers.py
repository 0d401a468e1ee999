"""The diagnostics of a run, as observers of the Trainer's step: none of them changes what is
trained (``tests/test_loop.py`` trains with all of them on and compares with
``refimpl/loop.py``, which has none).

A ``Trainer`` step is ``refimpl/loop.py``'s step. At each stage it calls the same hook of
every observer, the trainer first among the arguments; a hook that returns a dict adds those
metrics to the step's record::

    start(trainer)                                   before the first step   → step 0's record
    before_step(trainer)                             before each step
    before_update(trainer, batch, samples, adv)      the batch is ready, no optimizer step yet
      after_forward(trainer, rows, logp, entropy, loss_entropy)     ┐
      before_optimizer_step(trainer, rows, logp, loss_entropy, norm)│ each optimizer step
      after_optimizer_step(trainer, minibatch, logp)   → metrics,   ┘ averaged over them
    after_update(trainer)                            → metrics of the update
    measure(trainer, samples, batch, adv)            → what the update changed
    after_step(trainer, metrics)                     → metrics (after the NaN check)
    end(trainer)                                     after the last step

``after_forward`` sees the forward pass's ``entropy`` with its graph and ``loss_entropy``,
the one the loss gets (detached unless the Config trains it); an observer that needs
``∂L/∂logp`` calls ``logp.retain_grad()`` there. The trainer's side of the contract is its
public attributes (``cfg``, ``model``, ``optimizer``, ``task``, ``max_new_tokens``,
``step``, ``sampled_tokens``, ``device``, ``run_dir``) and ``finished()``.
"""

from __future__ import annotations

import json
import time
from typing import Any

import numpy as np
import torch

from refimpl import contract, core
from refimpl.diagnostics.entropy_attribution import EntropyPredictor
from refimpl.diagnostics.metrics import logp_advantage_covariance
from refimpl.evaluate import heldout_metrics, probe_snapshot
from refimpl.problem_streams import held_out_rng
from refimpl.runs.runlog import open_no_follow
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


class Observer:
    """The one interface every diagnostic implements (the module docstring lists the hooks
    in the order a step calls them); each does nothing here."""

    def start(self, trainer) -> Metrics:
        return None

    def before_step(self, trainer) -> None:
        return None

    def before_update(self, trainer, batch, samples, adv) -> None:
        return None

    def after_forward(self, trainer, rows, logp, entropy, loss_entropy) -> None:
        return None

    def before_optimizer_step(self, trainer, rows, logp, loss_entropy, grad_norm) -> None:
        return None

    def after_optimizer_step(self, trainer, minibatch, logp) -> Metrics:
        return None

    def after_update(self, trainer) -> Metrics:
        return None

    def measure(self, trainer, samples, batch, adv) -> Metrics:
        return None

    def after_step(self, trainer, metrics: dict[str, Any]) -> Metrics:
        return None

    def end(self, trainer) -> None:
        return None


class Covariance(Observer):
    """Why entropy moves (Cui et al., ``refimpl.diagnostics.metrics``): ``cov_logp_adv``, the
    covariance of ``logp_old`` with the advantage over the step's trained tokens, and
    ``cov_logp_update``, with the weight each optimizer step actually applied."""

    def after_forward(self, trainer, rows, logp, entropy, loss_entropy) -> None:
        logp.retain_grad()  # ∂L/∂logp: the per-token weight this update applies

    def after_optimizer_step(self, trainer, minibatch, logp) -> Metrics:
        # The update's effective advantage: −∂L/∂logp rescaled by the minibatch's token count
        # (= A·w under token-mean at ratio 1). Clipping, masks, KL terms and the aggregation
        # weights all show in it, the plain advantage shows none of them.
        update_weight = -logp.grad * minibatch.response_mask.sum()
        mask = minibatch.response_mask
        return {
            "cov_logp_update": logp_advantage_covariance(minibatch.logp_old, update_weight, mask)
        }

    def measure(self, trainer, samples, batch, adv) -> Metrics:
        return {"cov_logp_adv": logp_advantage_covariance(batch.logp_old, adv, batch.response_mask)}


class EntropyChange(Observer):
    """The entropy change a step causes (``entropy_change``), measured on its measured rows
    after the update, and its first-order prediction from the update itself
    (``entropy_change_pred``), split over token classes every ``diag_every`` steps
    (``refimpl.diagnostics.entropy_attribution``)."""

    predictor: EntropyPredictor

    def before_update(self, trainer, batch, samples, adv) -> None:
        cfg = trainer.cfg
        measured = measured_rows(trainer, batch)
        step = trainer.step + 1  # as it is logged; the last step is attributed, as it is evaluated
        budget = cfg.max_sampled_tokens
        last = step == cfg.steps or (budget is not None and trainer.sampled_tokens >= budget)
        self.predictor = EntropyPredictor(
            trainer.model,
            trainer.optimizer,
            lambda model, rows: samples.policy_logprobs(model, rows, temperature=cfg.temperature),
            lambda model: measured_logprobs(model, samples, measured, cfg.temperature),
            measured,
            batch.response_mask[measured],
            attribute=cfg.diag_every > 0 and (step % cfg.diag_every == 0 or last),
            adv=adv,
            logp_old=batch.logp_old,
            loss_mask=batch.response_mask,
            max_norm=cfg.grad_clip,
        )

    def after_forward(self, trainer, rows, logp, entropy, loss_entropy) -> None:
        logp.retain_grad()  # ∂L/∂logp: the attribution's per-token weights
        self.predictor.forward_done(rows, entropy)  # ∇H̄, from this pass when rows are measured
        if self.predictor.attribute and loss_entropy.requires_grad:
            loss_entropy.retain_grad()  # ∂L/∂H: an entropy bonus's share of the attribution

    def before_optimizer_step(self, trainer, rows, logp, loss_entropy, grad_norm) -> None:
        self.predictor.before_step(rows, logp, loss_entropy, grad_norm)

    def after_optimizer_step(self, trainer, minibatch, logp) -> Metrics:
        self.predictor.after_step()
        return None

    def after_update(self, trainer) -> Metrics:
        return self.predictor.finish()

    @torch.no_grad()
    def measure(self, trainer, samples, batch, adv) -> Metrics:
        """Cov(logp_old, A) predicts the sign of the entropy change; measure that change on
        the very same states the update predicted it on."""
        measured = measured_rows(trainer, batch)
        bf16 = trainer.cfg.dtype == "bfloat16"  # the trainer's autocast
        with torch.autocast(trainer.device.type, dtype=torch.bfloat16, enabled=bf16):
            _, entropy_after = measured_logprobs(
                trainer.model, samples, measured, trainer.cfg.temperature
            )
        change = core.masked_mean(
            entropy_after.float() - batch.entropy_old[measured], batch.response_mask[measured]
        )
        return {"entropy_change": float(change)}


def measured_rows(trainer, batch: contract.RolloutBatch) -> torch.Tensor:
    """The rows the entropy change is measured (and predicted) on: the first
    ``ENTROPY_CHANGE_COMPLETIONS`` of each of the first ``ENTROPY_CHANGE_GROUPS`` groups."""
    G = trainer.cfg.group_size
    groups = torch.arange(min(batch.num_groups, ENTROPY_CHANGE_GROUPS), device=trainer.device)
    within = torch.arange(min(G, ENTROPY_CHANGE_COMPLETIONS), device=trainer.device)
    return (groups[:, None] * G + within[None, :]).reshape(-1)


def measured_logprobs(model, samples, measured: torch.Tensor, temperature: float):
    """``(logp, entropy)`` of the measured rows under ``model``."""
    group_size = min(samples.group_size, ENTROPY_CHANGE_COMPLETIONS)
    return samples.policy_logprobs(model, measured, temperature=temperature, group_size=group_size)


class HeldOutEvaluation(Observer):
    """Greedy success and pass@k on a fixed held-out set (``refimpl.evaluate.heldout_metrics``)
    at step 0, every ``eval_every`` steps and at the end."""

    def __init__(self, trainer) -> None:
        self.problems = trainer.task.sample(trainer.cfg.eval_problems, held_out_rng())

    def start(self, trainer) -> Metrics:
        return self.evaluate(trainer) if trainer.step == 0 else None

    def after_step(self, trainer, metrics: dict[str, Any]) -> Metrics:
        if trainer.step % trainer.cfg.eval_every == 0 or trainer.finished():
            return self.evaluate(trainer)
        return None

    def evaluate(self, trainer) -> dict[str, float]:
        t0 = time.perf_counter()
        out = heldout_metrics(
            trainer.model,
            trainer.task,
            self.problems,
            trainer.cfg.eval_samples,
            max_new_tokens=trainer.max_new_tokens,
            generator=seeded_generator(trainer.cfg.seed, EVAL_SEED, device=trainer.device),
            success_threshold=trainer.algo_cfg.success_threshold,
        )
        out["time_eval"] = time.perf_counter() - t0
        return out


class Probes(Observer):
    """Entropy snapshots of fixed probe prompts (``refimpl.evaluate.probe_snapshot``) every
    ``probe_every`` steps and at the end, into ``probes.jsonl``."""

    def __init__(self, trainer) -> None:
        rng = np.random.default_rng([PROBE_SEED, 0])
        self.prompts = trainer.task.sample(trainer.cfg.probe_prompts, rng)

    def before_step(self, trainer) -> None:
        if trainer.step % trainer.cfg.probe_every == 0:
            self.snapshot(trainer)

    def end(self, trainer) -> None:
        self.snapshot(trainer)

    def snapshot(self, trainer) -> None:
        rows = probe_snapshot(
            trainer.model,
            self.prompts,
            max_new_tokens=trainer.max_new_tokens,
            temperature=trainer.cfg.temperature,
            generator=seeded_generator(trainer.cfg.seed, PROBE_SEED, device=trainer.device),
        )
        with open_no_follow(trainer.run_dir / "probes.jsonl", "a") as f:
            f.write(json.dumps({"step": trainer.step, "probes": rows}) + "\n")


def default_observers(trainer) -> list[Observer]:
    """A run's diagnostics (probes only with ``--probe-every`` > 0). The order is the order of
    their metrics in a step's record."""
    observers: list[Observer] = [Covariance(), EntropyChange(), HeldOutEvaluation(trainer)]
    if trainer.cfg.probe_every:
        observers.append(Probes(trainer))
    return observers
