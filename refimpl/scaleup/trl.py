"""TRL: a ``GRPOTrainer`` subclass that runs any algorithm in ``refimpl.algorithms.NAMES``.

Supported: ``trl>=1.16,<1.17`` (the methods overridden here are private to TRL and change
between minor versions; ``tests/scaleup/test_trl.py`` pins their behaviour).

What TRL keeps doing: prompt batching, generation (transformers or vLLM), reward functions,
reference model, accelerate/DeepSpeed, logging, checkpoints. What changes, in two overrides:

``_generate_and_score_completions``
    After TRL has generated and scored a batch, one no-grad forward pass of the rollout
    weights records ``logp_old`` and the full-vocabulary **entropies** ``entropy_old`` of
    every completion token (TRL does not keep them; GTPO and GRPO-S need them, TEPO's mask
    compares against them). The batch is gathered across processes (a group may span them),
    packed as a ``RolloutBatch`` and handed to the algorithm's ``advantages``; the ``[B, T]``
    token advantages replace TRL's per-sequence ones. DAPO's dynamic sampling (when the
    algorithm's ``Config`` turns it on) cannot resample inside TRL, so it *masks out* the
    groups whose rewards are all equal: with every aggregation mode an all-padding row is
    skipped, so this equals training on the filtered batch.

``_compute_loss``
    The algorithm's ``loss`` on the micro-batch (current log-probs and entropies from TRL's
    chunked forward). A micro-batch is a shuffled slice of the generation batch, so the loss
    normalises locally and is then rescaled by ``n_local / n_global`` (tokens for
    ``token-mean``, non-empty completions for the sequence modes): every aggregation mode is
    a sum over the batch divided by such a count, so the accumulated gradient equals the
    gradient of the loss on the whole generation batch (as TRL's own ``dapo`` normaliser
    does). The loss gets the Config that ``Config.for_update`` made from the whole generation
    batch (itself, except STEER's whole-rollout |Ω| range). GPG's ``α = B/(B−M)`` is the one whole-batch constant in any loss; it is folded
    into the advantages (``−α·A·logp`` is linear in ``A``) because a micro-batch does not hold
    whole groups.

A ``Config`` whose ``values_needed()`` asks for Monte-Carlo values of π_old (VinePPO) is
refused when the trainer is built: TRL samples no continuations of prefixes
(``docs/scaleup.md`` says what a port needs).

Metrics go to TRL's log under ``refimpl/<name>`` plus TRL's own ``entropy``, pooled over
processes (TRL logs from the main process only). ``tests/scaleup/test_trl_multiprocess.py``
checks two processes against one.
"""

from __future__ import annotations

import copy
from typing import Any
from unittest import mock

import torch
from torch import Tensor
from trl import GRPOConfig, GRPOTrainer
from trl.trainer import grpo_trainer as _trl_grpo

from refimpl import algorithms, batch_stages, contract, core
from refimpl.contract import RolloutBatch
from refimpl.scaleup.hf import loss_batch, normaliser_count, refuse_values_needed

__all__ = ["RefimplGRPOTrainer", "GRPOConfig"]


class RefimplGRPOTrainer(GRPOTrainer):
    """``GRPOTrainer`` whose advantages and loss come from ``refimpl.algorithms.<algorithm>``.

    Args:
        algorithm: one of ``refimpl.algorithms.NAMES`` (default: the baseline, GRPO).
        algorithm_config: that module's ``Config`` (default: the paper defaults).
        *args, **kwargs: as ``trl.GRPOTrainer`` (``model``, ``reward_funcs``, ``args``, ...).
            ``args.beta`` only decides whether TRL loads a reference model: it is set to the
            algorithm's ``kl_coef`` when the loss needs ``logp_ref`` and to 0 otherwise; TRL's
            ``loss_type`` and ``importance_sampling_level`` are not used.
    """

    def __init__(
        self,
        *args: Any,
        algorithm: str = algorithms.BASELINE,
        algorithm_config: object = None,
        **kwargs: Any,
    ) -> None:
        self.algorithm = algorithms.get(algorithm)
        self.algorithm_config = (
            self.algorithm.Config() if algorithm_config is None else algorithm_config
        )
        contract.require(
            isinstance(self.algorithm_config, self.algorithm.Config),
            "algorithm_config",
            f"a {self.algorithm.NAME}.Config",
        )
        # VinePPO's Monte-Carlo values: not sampled here; refused before any model is loaded.
        refuse_values_needed(self.algorithm_config, "algorithm_config", "TRL")
        training_args = kwargs.get("args", args[2] if len(args) > 2 else None)
        contract.require(training_args is not None, "args", "a trl.GRPOConfig")
        beta = self.algorithm_config.kl_coef if self.algorithm_config.needs_reference() else 0.0
        # A shallow copy, not dataclasses.replace: GRPOConfig.__post_init__ derives fields
        # (steps_per_generation, ...) and refuses to run twice.
        training_args = copy.copy(training_args)
        training_args.beta = beta
        if len(args) > 2:
            args = (*args[:2], training_args, *args[3:])
        else:
            kwargs["args"] = training_args
        model = kwargs.get("model", args[0] if args else None)
        if beta > 0 and isinstance(model, torch.nn.Module):
            # TRL builds the reference by re-loading the policy from config.name_or_path, which
            # an in-memory model (built from a config, or dequantised from GGUF) does not have.
            # The reference is the initial policy, so a frozen copy taken now is exactly it.
            reference = copy.deepcopy(model).eval().requires_grad_(False)
            with mock.patch.object(
                _trl_grpo, "create_model_from_path", lambda *_args, **_kwargs: reference
            ):
                super().__init__(*args, **kwargs)
        else:
            super().__init__(*args, **kwargs)
        self._last_rewards_per_func: Tensor | None = None
        # Per mode, the Config of the last generation batch's loss calls (Config.for_update).
        self._update_config: dict[str, Any] = {}

    # -- generation: keep rewards and entropies, compute our advantages ----------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):  # noqa: ANN001
        rewards_per_func = super()._calculate_rewards(
            inputs, prompts, completions, completion_ids_list
        )
        # Gathered across processes already: [global B, number of reward functions].
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _gather_rows(self, x: Tensor) -> Tensor:
        """Rows of every process, padded along dim 1 to the longest completion."""
        x = self.accelerator.pad_across_processes(x, dim=1, pad_index=0)
        return self.accelerator.gather(x)

    @torch.no_grad()
    def _rollout_records(self, output: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        """``logp_old`` and ``entropy_old`` of this process's completions, float32: the rollout
        policy's records, from the same weights and temperature as generation."""
        logp_old, entropy_old, _ = self._get_per_token_logps_and_entropies(
            self.model,
            torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1),
            torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
            output["completion_ids"].shape[1],
            batch_size=self.args.per_device_train_batch_size,
            compute_entropy=True,
        )
        return logp_old.float(), entropy_old.float()

    def _rewards(self) -> Tensor:
        """TRL's weighted sum of the reward functions, ``[global B]`` (gathered already)."""
        rewards_per_func = self._last_rewards_per_func
        contract.require(
            rewards_per_func is not None
            and not bool(torch.isnan(rewards_per_func).all(dim=1).any()),
            "reward_funcs",
            "a reward for every completion (no all-None rows)",
        )
        weights = self.reward_weights.to(self.accelerator.device).unsqueeze(0)
        return (rewards_per_func * weights).nansum(dim=1)

    def _generate_and_score_completions(self, inputs):  # noqa: ANN001
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        cfg = self.algorithm_config
        completion_ids = output["completion_ids"]
        B_local, T_local = completion_ids.shape
        mask = output["completion_mask"].float()
        if "tool_mask" in output:
            mask = mask * output["tool_mask"].float()

        logp_old, entropy_old = self._rollout_records(output)
        rewards = self._rewards()

        # The whole (global) batch, groups in consecutive rows as TRL's sampler lays them out.
        g_mask = self._gather_rows(mask)
        g_ids = self._gather_rows(completion_ids)
        g_logp_old = self._gather_rows(logp_old)
        g_entropy_old = self._gather_rows(entropy_old)
        g_ref = None
        if output.get("ref_per_token_logps") is not None:
            g_ref = self._gather_rows(output["ref_per_token_logps"].float())
        G = self.num_generations if mode == "train" else self.num_generations_eval

        outcome = rewards.float()  # success (dynamic sampling, GTPO's O⁺) is decided on it
        eos = self.processing_class.eos_token_id
        truncated = ~(g_ids == eos).logical_and(g_mask.bool()).any(dim=1)  # no EOS: cut by L_max
        batch = RolloutBatch(
            response_ids=g_ids,
            response_mask=g_mask,
            rewards=outcome,
            logp_old=g_logp_old,
            entropy_old=g_entropy_old,
            group_size=G,
            logp_ref=g_ref,
        )
        # loop.py's stages in its order (batch_stages.prepare_update), with
        # max_completion_length as L_max: DAPO Eq. 13's shaping when cfg.overlong_shaping →
        # the advantages → DAPO's overlong filter when cfg.overlong_filter (truncated rows
        # leave the loss after they counted in A) → the generation batch's constants (STEER's
        # |Ω| range with normalise="batch"), fixed here for every micro-batch of it. TRL cannot
        # resample: with cfg.dynamic_sampling the uninformative groups get no advantage and
        # leave the loss mask (GPG's α folded into A).
        keep = batch_stages.keep_groups(outcome, G, cfg)
        prepared = batch_stages.prepare_update(
            self.algorithm, batch, cfg, max_len=self.max_completion_length, truncated=truncated,
            keep=keep,
        )  # fmt: skip
        adv, loss_mask = prepared.advantages, prepared.batch.response_mask
        self._update_config[mode] = prepared.cfg

        local = slice(
            self.accelerator.process_index * B_local, (self.accelerator.process_index + 1) * B_local
        )
        output["advantages"] = adv[local, :T_local]
        output["refimpl_loss_mask"] = loss_mask[local, :T_local]
        output["old_per_token_logps"] = logp_old  # ratios always against the rollout policy
        output["refimpl_entropy_old"] = entropy_old
        # Denominator of the aggregation over the *whole* generation batch (all processes).
        output["refimpl_count"] = normaliser_count(loss_mask, cfg.loss_agg_mode)

        metrics = self._metrics[mode]
        metrics["refimpl/kept_groups_frac"].append(float(keep.float().mean()))
        metrics["refimpl/entropy_old"].append(float(core.masked_mean(g_entropy_old, g_mask)))
        metrics["refimpl/adv_abs_mean"].append(float(core.masked_mean(adv.abs(), loss_mask)))
        return output

    # -- the loss ---------------------------------------------------------------------------
    def _compute_loss(self, model, inputs):  # noqa: ANN001
        mode = "train" if self.model.training else "eval"
        cfg = self._update_config.get(mode, self.algorithm_config)
        prompt_ids, completion_ids = inputs["prompt_ids"], inputs["completion_ids"]
        T = completion_ids.size(1)
        logp, entropy, _ = self._get_per_token_logps_and_entropies(
            model,
            torch.cat([prompt_ids, completion_ids], dim=1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1),
            T,
            compute_entropy=True,
        )
        mask = inputs["refimpl_loss_mask"]
        batch, extra = loss_batch(
            mask,
            inputs["old_per_token_logps"],
            response_ids=completion_ids,
            entropy_old=inputs["refimpl_entropy_old"],
            logp_ref=inputs.get("ref_per_token_logps"),
            extra={"logp": logp, "entropy": entropy, "adv": inputs["advantages"]},
        )
        # Dr. GRPO's L_max is the generation budget, constant across micro-batches (§3.2).
        cfg = cfg.for_generation_budget(self.max_completion_length)
        loss, metrics = self.algorithm.loss(
            batch,
            extra["logp"],
            extra["adv"].float(),
            cfg,
            entropy=extra["entropy"].float()
            if cfg.differentiates_entropy()
            else extra["entropy"].detach().float(),
        )
        if mode == "train":
            local = normaliser_count(batch.response_mask, cfg.loss_agg_mode)
            per_process = inputs["refimpl_count"].clamp(min=1) / self.accelerator.num_processes
            steps = self.current_gradient_accumulation_steps / self.args.steps_per_generation
            loss = loss * (local / (per_process * steps))

        log = self._metrics[mode]
        local = {"entropy": float(core.masked_mean(entropy.detach().float(), mask))}
        local.update({f"refimpl/{key}": float(value) for key, value in metrics.items()})
        for key, value in self._pooled_token_means(local, mask.sum()).items():
            log[key].append(value)
        return loss

    def _pooled_token_means(self, metrics: dict[str, float], n_tokens: Tensor) -> dict[str, float]:
        """The micro-batch metrics of every process pooled into one value each.

        Each metric is a mean over this micro-batch's response tokens, so
        ``Σ_p n_p·m_p / Σ_p n_p`` is the mean over all processes' tokens (TRL logs from the
        main process only; without this its log would show process 0's half of the batch).
        ``adv_std`` is pooled through ``E[A²] = std² + mean²``. One process: unchanged.
        """
        keys = sorted(metrics)  # the same order on every process
        std_key, mean_key = "refimpl/adv_std", "refimpl/adv_mean"
        pool_std = std_key in metrics and mean_key in metrics
        values = [metrics[k] for k in keys]
        if pool_std:
            values.append(metrics[std_key] ** 2 + metrics[mean_key] ** 2)
        n = n_tokens.detach().double().reshape(1)
        local = torch.tensor(values, dtype=torch.float64, device=n.device) * n
        totals = self.accelerator.reduce(torch.cat([local, n]), reduction="sum")
        count = float(totals[-1])
        if count == 0:  # no response token anywhere (every group masked out)
            return dict(metrics)
        pooled = {k: float(totals[i]) / count for i, k in enumerate(keys)}
        if pool_std:
            second_moment = float(totals[len(keys)]) / count
            pooled[std_key] = max(second_moment - pooled[mean_key] ** 2, 0.0) ** 0.5
        return pooled
