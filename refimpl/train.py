"""The Trainer: ``refimpl/loop.py``'s loop, with run management and diagnostics around it.

Read ``refimpl/loop.py`` first: ``Trainer.train_step`` runs the same stages on the same
algorithm contract (``tests/test_loop.py`` checks that both train the same weights)::

    rollout     sample N prompts ─► G completions each (KV cache; logp_old, entropy_old
                recorded) ─► reward (the task's verifier) ─► dynamic sampling, when the
                Config asks: resample until N informative groups
    reference   logp_ref from the frozen warm start, when a KL term needs it
    values      V̂ of π_old at the prefixes the Config asks for, by the credit oracle
    prepare     ``batch_stages.prepare_update``, the stages every driver runs in one order:
                the overlong length penalty added to the reward, when the Config asks ─►
                advantages(batch, cfg) ─► the overlong filter masks truncated rows ─► the
                whole rollout's constants (``Config.for_update``)
    update      ppo_epochs × minibatches of loss(batch, logp, adv, cfg, entropy) → backward
                → clip grad norm → optimizer step
    metrics     rewards, entropies, lengths, advantages

What an algorithm needs of the loop (a reference model, the current entropy, in float32,
with gradient) its ``Config`` declares (``contract.AlgorithmConfig``); no algorithm is named
here. The run is resolved once (``refimpl.settings.plan.Plan``, by ``preflight``), the
diagnostics observe the step (``refimpl.diagnostics.observers``). Around the steps, ``run``
holds the run directory's lock, logs one JSON line per step, stops on NaN (``runs.divergence``)
or Ctrl-C (``runs.stop``) and checkpoints every ``checkpoint_every`` steps (``runs.rundir``).
Determinism and resuming: all randomness of step ``s`` (its prompts, its completions) comes
from generators seeded by ``(seed, s)``, not one stream through the run: a resumed run needs
only the weights, the optimizer state and the step to continue (``tests/test_train.py``).
"""

from __future__ import annotations

import copy
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch

from refimpl import batch_stages, contract
from refimpl.diagnostics.metrics import entropy_stats, step_metrics
from refimpl.diagnostics.observers import Observer, TrainerState, default_observers
from refimpl.evaluate import encode_prompts, score_samples
from refimpl.model import GPT
from refimpl.problem_streams import training_rng
from refimpl.runs.divergence import DivergenceGuard, NonFiniteLossError
from refimpl.runs.progress import progress
from refimpl.runs.rundir import SavedRun, check_run_dir, open_run, read_saved_if_run, save_run
from refimpl.runs.runlog import JSONFileError, MetricsLog, read_json
from refimpl.runs.status import RunBudget
from refimpl.runs.stop import StopRequest, report_interrupt
from refimpl.sampling.groups import Samples, concat_samples, sample_groups, seeded_generator
from refimpl.sampling.monte_carlo_values import OracleStopped, training_values
from refimpl.settings.plan import Plan, resolve
from refimpl.settings.record import config_from_record
from refimpl.settings.train_config import TrainConfig, config_dict
from refimpl.warmstart import base_model, choose_base
from toy_envs import TOKENIZER


class Rollout(NamedTuple):
    """The ``rollout`` stage's output: the groups to train on and what sampling them cost."""

    samples: Samples | None  # the kept groups (None: every group was uninformative)
    outcome: torch.Tensor | None  # [B] their outcome rewards (the verifier's, before shaping)
    metrics: dict[str, Any]
    problems: list | None = None  # the N problems of the kept groups (the oracle scores them)


class Trainer:
    """``refimpl/loop.py``'s loop with run management and diagnostics around it: holds the
    model, the optimizer and the run state; ``run()`` trains to ``cfg.steps``. ``plan``: the
    run, resolved by ``preflight`` (a ``TrainConfig`` is resolved here). ``observers``: the
    diagnostics that watch each step (None: ``default_observers``; ``[]``: none)."""

    def __init__(self, plan: Plan | TrainConfig, observers: Sequence[Observer] | None = None):
        # Every check first, the run resolved once: what follows reads the plan, derives nothing
        self.plan = plan if isinstance(plan, Plan) else preflight(plan)
        cfg = self.cfg = self.plan.cfg
        self.algo, self.algo_cfg, self.task = self.plan.algo, self.plan.algo_cfg, self.plan.task
        self.max_new_tokens, self.device = self.plan.max_new_tokens, self.plan.device
        # A Config that compares entropies more finely than bf16 logits resolve declares it:
        # under bf16 both sides are then computed in float32 (H_old in rollout, H_θ in update).
        self.entropy_in_fp32 = self.plan.float32_entropy
        if cfg.threads:
            torch.set_num_threads(cfg.threads)
        ws, chosen = self.plan.warmstart, self.plan.base  # as preflight chose it (None: here)
        self.model: GPT = base_model(ws, "--warmstart.", chosen=chosen).to(self.device)
        self.reference: GPT | None = None
        if self.plan.needs_reference:  # π_ref of a KL term: the warm start
            self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=cfg.lr)
        self.step, self.sampled_tokens = 0, 0  # set again by run(): a resumed run's
        self.budget = RunBudget(cfg.steps, cfg.max_sampled_tokens)  # when the run is finished
        self.run_dir = self.plan.run_dir
        self.divergence = DivergenceGuard(self.run_dir, lr=cfg.lr)  # NaN/inf stops the run
        self.stop = StopRequest()  # Ctrl-C or SIGTERM during run(): the oracle asks it too
        if observers is None:
            observers = default_observers(cfg, self.task, self.max_new_tokens,
                                          self.algo_cfg.success_threshold, self.run_dir)  # fmt: skip
        self.observers = list(observers)

    def autocast(self):
        """bf16 autocast of the forward passes with ``--dtype bfloat16`` (the losses run in fp32)."""
        bf16 = self.cfg.dtype == "bfloat16"
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bf16)

    def _observe(self, hook: str, *args: Any) -> dict[str, Any]:
        """Call ``hook`` of every observer that implements it, with the trainer's state now;
        their metrics, merged in the observers' order."""
        state = TrainerState(self.model, self.optimizer, self.device, self.step,
                             self.sampled_tokens, self.budget)  # fmt: skip
        out: dict[str, Any] = {}
        for observer in self.observers:
            if getattr(type(observer), hook) is not getattr(Observer, hook):
                out.update(getattr(observer, hook)(state, *args) or {})
        return out

    # -- one step: loop.py's stages, in the order train_step runs them ----------------------
    def train_step(self) -> dict[str, Any]:
        """One RL step, the pipeline of the module docstring; returns its metrics (``run``
        appends them to metrics.jsonl)."""
        t_start = time.perf_counter()
        samples, outcome, rollout_metrics, problems = self.rollout()
        metrics: dict[str, Any] = {"step": self.step, **rollout_metrics}
        if samples is None:  # every group uninformative, even after resampling
            metrics.update(skipped=1, sampled_tokens=self.sampled_tokens)
            metrics["time_step"] = time.perf_counter() - t_start
            return metrics
        t0 = time.perf_counter()
        batch = samples.to_rollout_batch(
            outcome, self.cfg.group_size, logp_ref=self.reference_logprobs(samples)
        )
        batch, value_cost = self.values(batch, samples, outcome, problems)
        # shaping → advantages → overlong filter → the rollout's constants (loop.py's order)
        prepared = batch_stages.prepare_update(
            self.algo, batch, self.algo_cfg, max_len=self.max_new_tokens,
            truncated=samples.truncated,
        )  # fmt: skip
        batch, adv = prepared.batch, prepared.advantages
        t_adv = time.perf_counter() - t0
        grad_norm, update_metrics = self.update(prepared, samples)
        t_loss = time.perf_counter() - t0 - t_adv
        metrics.update(step_metrics(samples, batch, batch.rewards, outcome, adv, self.algo_cfg))
        metrics.update(self._observe("measure", samples, batch, adv), **value_cost)
        metrics.update(grad_norm=grad_norm, time_adv=t_adv, time_loss=t_loss, **update_metrics)
        metrics["sampled_tokens"] = self.sampled_tokens
        metrics["time_step"] = time.perf_counter() - t_start
        return metrics

    def rollout(self) -> Rollout:
        """Sample ``N`` groups and score them; with the Config's dynamic sampling, resample (up
        to ``--resample-rounds`` times) until ``N`` are informative."""
        cfg, G, N = self.cfg, self.cfg.group_size, self.cfg.prompts_per_step
        kept_samples, kept_rewards, kept_problems = [], [], []  # Samples, [B] rewards, problems
        kept, rounds, entropies = 0, 0, []  # entropies: every sampled token, kept or not
        first_rewards = None
        timing = {"time_sample": 0.0, "time_score": 0.0}
        while True:
            samples, rewards, problems = self._sample_round(rounds, timing)
            entropies.append(samples.entropy_old[samples.response_mask.bool()].float())
            first_rewards = rewards if first_rewards is None else first_rewards
            # Dynamic sampling: keep groups with 0 < #successful < G (outcome rewards).
            keep = batch_stages.keep_groups(rewards, G, self.algo_cfg)
            keep[torch.cumsum(keep.long(), 0) > N - kept] = False  # never more than N groups
            if keep.any():
                kept_samples.append(samples.select_groups(keep) if not keep.all() else samples)
                kept_rewards.append(rewards[keep.repeat_interleave(G)])
                kept_problems += [p for p, k in zip(problems, keep.tolist()) if k]
                kept += int(keep.sum())
            rounds += 1
            if not self.algo_cfg.dynamic_sampling or kept >= N or rounds > cfg.resample_rounds:
                break
        threshold = self.algo_cfg.success_threshold
        metrics = {
            **timing,
            "groups_seen": rounds * N,
            "kept_group_frac": kept / (rounds * N),
            "groups_trained": kept,
            "sampled_rows": rounds * N * G,
            "reward_mean_all": float(first_rewards.mean()),
            "success_rate_all": float((first_rewards >= threshold).float().mean()),
            **entropy_stats(torch.cat(entropies), "entropy"),
        }
        if kept == 0:
            return Rollout(None, None, metrics)
        samples = concat_samples(kept_samples, TOKENIZER.pad_id).to(self.device)
        if self.entropy_in_fp32:
            samples.entropy_old = self._entropy_fp32(samples, slice(None))
        outcome = torch.cat(kept_rewards).to(self.device)
        return Rollout(samples, outcome, metrics, kept_problems)

    def _sample_round(self, rounds: int, timing: dict[str, float]):
        """One round of ``N`` prompts × ``G`` completions, their outcome rewards, the problems."""
        rng = training_rng(self.cfg.seed, self.step, rounds)
        problems = self.task.sample(self.cfg.prompts_per_step, rng)
        t0 = time.perf_counter()
        generator = seeded_generator(self.cfg.seed, self.step, rounds, 1, device=self.device)
        samples = self._sample(problems, generator)
        t1 = time.perf_counter()
        rewards = torch.as_tensor(score_samples(self.task, problems, samples, self.cfg.group_size))
        timing["time_sample"] += t1 - t0
        timing["time_score"] += time.perf_counter() - t1
        self.sampled_tokens += int(samples.response_mask.sum())
        return samples, rewards, problems

    @torch.no_grad()
    def reference_logprobs(self, samples: Samples) -> torch.Tensor | None:
        """``logp_ref`` under the frozen warm start, when the loss has a KL term to it."""
        if self.reference is None:
            return None
        with self.autocast():
            return self.logprobs(self.reference, samples, slice(None), with_entropy=False)[0]

    @torch.no_grad()
    def values(self, batch: contract.RolloutBatch, samples: Samples, outcome, problems):
        """``batch`` with the oracle's ``V̂`` of π_old (not updated yet) at the prefixes the
        Config's ``values_needed()`` names, at the run's sampling settings; and their cost."""
        request, cfg = self.plan.values, self.cfg
        if request is None:
            return batch, {}
        with self.autocast():
            v = training_values(
                self.model, self.task, problems, samples, outcome, request,
                max_new_tokens=self.max_new_tokens, temperature=cfg.temperature, top_k=cfg.top_k,
                top_p=cfg.top_p, success_threshold=self.algo_cfg.success_threshold,
                seed=cfg.seed, step=self.step, should_stop=self.stop.asked,
            )  # fmt: skip
        cost = {"value_prefixes": v.prefixes, "value_sampled_tokens": v.sampled_tokens}
        return batch.replace(token_values=v.value_before.to(batch.response_mask.device)), cost

    def update(self, prepared: batch_stages.Update, samples: Samples):
        """``ppo_epochs`` passes over the batch, each in ``minibatches`` optimizer steps on
        whole groups. Returns the mean gradient norm and the mean of each loss metric."""
        self.model.train()
        steps = []
        batch, adv = prepared.batch, prepared.advantages
        self._observe("before_update", batch, samples, adv)
        for _epoch in range(self.cfg.ppo_epochs):
            # Minibatch sizes differ by at most one group (fewer groups than minibatches:
            # one group each), however many groups dynamic sampling kept. Every loss call
            # gets prepared.cfg: the Config with the whole rollout's constants.
            for minibatch, rows in batch_stages.minibatches(batch, self.cfg.minibatches):
                steps.append(
                    self._optimizer_step(minibatch, samples, rows, adv[rows], prepared.cfg)
                )
        self.model.eval()
        grad_norm = float(np.mean([norm for norm, _ in steps]))
        loss_metrics = {key: float(np.mean([m[key] for _, m in steps])) for key in steps[0][1]}
        return grad_norm, {**loss_metrics, **self._observe("after_update")}

    def _optimizer_step(self, minibatch, samples: Samples, rows, adv: torch.Tensor, algo_cfg):
        """loss → backward → clip → Adam step (``loop.update``'s); the gradient norm and the
        loss metrics. The observers see each stage; none of them changes it. ``algo_cfg``: the
        algorithm's Config for this rollout (``Config.for_update``)."""
        with self.autocast():
            logp, entropy = self.logprobs(self.model, samples, rows, with_entropy=True)
        loss_entropy = self._loss_entropy(samples, rows, entropy)
        self._observe("after_forward", rows, logp, entropy, loss_entropy)
        loss, loss_metrics = self.algo.loss(minibatch, logp, adv, algo_cfg, entropy=loss_entropy)
        if not torch.isfinite(loss):
            raise self._non_finite(f"non-finite loss {loss.item()}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.grad_clip)
        if not torch.isfinite(norm):
            raise self._non_finite("non-finite gradient norm")
        self._observe("before_optimizer_step", rows, logp, loss_entropy, norm)
        batch_stages.warm_up_lr(self.optimizer, self.cfg.lr, self.cfg.lr_warmup)  # loop.update's
        self.optimizer.step()
        observed = self._observe("after_optimizer_step", minibatch, logp)
        return float(norm), {"loss": float(loss.detach()), **loss_metrics, **observed}

    def _loss_entropy(self, samples: Samples, rows, entropy: torch.Tensor) -> torch.Tensor:
        """The current entropy H_θ as the loss gets it: in float32 when the Config needs it so
        (``entropy_in_fp32``), with gradient only for a loss that trains it."""
        if self.entropy_in_fp32:
            entropy = self._entropy_fp32(samples, rows)
        return entropy if self.algo_cfg.differentiates_entropy() else entropy.detach()

    def _non_finite(self, what: str) -> NonFiniteLossError:
        kept = self.divergence.kept()
        return NonFiniteLossError(f"step {self.step + 1}: {what}; the step was not applied: {kept}")

    # -- model passes ---------------------------------------------------------------------
    def _sample(self, problems, generator) -> Samples:
        cfg = self.cfg
        with self.autocast():
            return sample_groups(
                self.model, encode_prompts(problems), group_size=cfg.group_size,
                max_new_tokens=self.max_new_tokens, eos_id=TOKENIZER.eos_id,
                pad_id=TOKENIZER.pad_id, temperature=cfg.temperature, top_k=cfg.top_k,
                top_p=cfg.top_p, generator=generator,
            )  # fmt: skip

    def logprobs(self, model: GPT, samples: Samples, rows: Any, *, with_entropy: bool):
        """``log π`` (and the entropy) of ``model`` on the rows ``rows`` of ``samples``."""
        return samples.policy_logprobs(
            model, rows, temperature=self.cfg.temperature, with_entropy=with_entropy
        )

    @torch.no_grad()
    def _entropy_fp32(self, samples: Samples, rows: Any) -> torch.Tensor:
        """The current model's entropy at every response position of ``samples[rows]``, from a
        float32 forward pass (no autocast), for a Config that needs float32 entropies."""
        return self.logprobs(self.model, samples, rows, with_entropy=True)[1]

    # -- the run ---------------------------------------------------------------------------
    def run(self) -> Path:
        """Train until ``cfg.steps``; return the run directory, whose lock the run holds from
        before its first write to after its last (``rundir.open_run``). Ctrl-C (or SIGTERM)
        lets the step in progress finish (one stopped in its Monte-Carlo values is dropped),
        writes a checkpoint, prints how to resume and raises ``KeyboardInterrupt``; a second
        Ctrl-C stops at once (the last checkpoint is kept)."""
        cfg = self.cfg
        with open_run(self.plan, self.model, self.optimizer) as (step, sampled_tokens):
            self.step, self.sampled_tokens = step, sampled_tokens
            log = MetricsLog(self.run_dir, tensorboard=cfg.tensorboard)
            bar = progress(cfg.steps, f"{cfg.algo} s{cfg.seed}", initial=self.step,
                           disable=not cfg.progress)  # fmt: skip
            stop = self.stop  # its handlers are set for the block below
            try:
                with stop:
                    self._steps(log, bar, stop)
            finally:
                bar.close()
                log.close()
            if stop.requested and not self.budget.spent(self.step, self.sampled_tokens):
                report_interrupt(self.run_dir, cfg.runs_dir, cfg.name, self.step, stop.requested)
            self._observe("end")
            if cfg.plot:
                from refimpl.plots import plot_run

                plot_run(self.run_dir, train_config=config_dict(cfg))
        return self.run_dir

    def _steps(self, log: MetricsLog, bar, stop: StopRequest) -> None:
        """The steps until the run is finished or a stop is requested: each is checked for
        NaN, logged, and checkpointed every ``checkpoint_every`` steps and at the end."""
        cfg = self.cfg
        if self.step == 0:
            log.append({"step": 0, "sampled_tokens": 0, **self._observe("start")})
        while not self.budget.spent(self.step, self.sampled_tokens) and not stop.requested:
            self._observe("before_step")
            tokens = self.sampled_tokens  # a step stopped in its values is dropped whole
            try:
                metrics = self.train_step()
            except OracleStopped:  # a stop while its values were sampled: before the update
                self.sampled_tokens = tokens
                warnings.warn(f"step {self.step + 1} stopped in its Monte-Carlo values (it is "
                              "trained again on resume)", stacklevel=2)  # fmt: skip
                if self.step > 0:  # the model is still the last whole step's: its checkpoint
                    save_run(self.plan, self.model, self.optimizer, self.step, tokens)
                return
            self.step += 1
            metrics["step"] = self.step
            self.divergence.check(metrics, self.model)  # before it is logged or checkpointed
            metrics.update(self._observe("after_step", metrics))
            log.append(metrics)
            bar.set_postfix(
                reward=f"{metrics.get('reward_mean', float('nan')):.2f}",
                H=f"{metrics.get('entropy_mean', float('nan')):.3f}",
                s_step=f"{metrics['time_step']:.2f}",
                refresh=False,
            )
            bar.update(1)
            finished = self.budget.spent(self.step, self.sampled_tokens)
            if self.step % cfg.checkpoint_every == 0 or finished or stop.requested:
                save_run(self.plan, self.model, self.optimizer, self.step, self.sampled_tokens)


def preflight(cfg: TrainConfig, saved: SavedRun | None = None) -> Plan:
    """Every check before anything is written: the run resolved once (``settings.plan.resolve``),
    checked against the disk (``rundir.check_run_dir``), its base model chosen once
    (``warmstart.choose_base``, the plan's ``base``). ``saved``: a resumed run's config.json."""
    if saved is None and cfg.resume:
        saved = read_saved_if_run(cfg.run_dir)
    plan = resolve(cfg, saved)
    check_run_dir(plan)
    return plan._replace(base=choose_base(plan.warmstart, "--warmstart.", plan.warmstart_identity))


def run_training(cfg: TrainConfig, saved: SavedRun | None = None) -> Path:
    """Run one training run; return its directory (``saved``: as ``preflight`` takes it)."""
    return Trainer(preflight(cfg, saved)).run()


def load_config_file(path: Path | str, flag: str = "--config", *, algo_config: bool = True):
    """The settings in a config.json (a run's, or a bare ``train_config``) as a TrainConfig that
    deletes nothing (``config_from_record``), read by ``runlog.read_json``; ``flag`` names the
    file in errors; ``algo_config``: its ``algo_config`` too (a resume reads its checkpoint's)."""
    try:
        data = read_json(path)
    except JSONFileError as err:
        raise ValueError(f"{flag}: {err}") from None
    return config_from_record(data, f"{flag}: {path}", algo_config=algo_config)
