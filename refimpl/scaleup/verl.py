"""verl: our algorithms through verl's own registries (tested with ``verl==0.9.1``).

Load it in every verl process (driver and Ray workers) with::

    VERL_USE_EXTERNAL_MODULES=refimpl.scaleup.verl

and select an algorithm with ``algorithm.adv_estimator=refimpl_<name>`` and
``actor_rollout_ref.actor.policy_loss.loss_mode=refimpl_<name>`` (``docs/scaleup.md`` has a
full command). Every algorithm in ``refimpl.algorithms.NAMES`` is registered as
``refimpl_<name>``; those whose name verl's registries do not hold are also registered
under their plain names (``PLAIN_NAMES``: ``gtpo``, ``tepo``, ``steer``, ...; ``grpo``,
``rloo``, ``gspo``, ``gpg``, ``clip_cov`` and ``kl_cov`` are verl's own names and stay
verl's). Hyper-parameters come from each module's ``Config``;
override them with the environment variable ``REFIMPL_CONFIG`` (JSON, e.g.
``{"gtpo": {"alpha_2": 0.2}}``), which Ray forwards to the workers through
``runtime_env``. Our ``Config`` decides clip ranges and aggregation, not verl's
``clip_ratio*``/``loss_agg_mode`` (which would silently change the algorithm).

What verl's contract does not carry, and how it gets here
----------------------------------------------------------
* **Rollout entropies → advantage estimator** (GTPO, GRPO-S). verl's trainer computes them
  with the old log-probs (``calculate_entropy=True``; the v1 trainer even stores them as the
  ``entropy`` field) but calls estimators with rewards, mask and group ids only. Our estimators
  take them from the keyword ``entropy_old`` when a caller passes it, else from
  :func:`rollout_entropy` (a context that holds them for the duration of one advantage
  computation), else they fail: a GTPO advantage without entropies is not GTPO.
  :func:`install_hooks` wraps the v1 ``PPOTrainer._compute_advantage`` so that it reads the
  ``entropy`` field for the batch's keys and opens that context around verl's own code.
* **Current entropy, rollout entropy and reference log-probs → policy loss** (TEPO's KL mask
  and KL term; the rollout entropy in STEER's Ω and the forking-token mask). verl's policy losses receive log-probs and advantages only. :func:`ppo_loss`
  wraps verl's ``verl.workers.utils.losses.ppo_loss`` (the engine workers' loss): it pads the
  model output's ``entropy`` and the batch's ``entropy``/``ref_log_prob`` the way verl pads
  log-probs, opens :func:`loss_inputs` and calls verl's loss unchanged, which calls our
  registered policy loss. :func:`install_hooks` swaps it in for the engine workers. For TEPO
  set ``actor.calculate_entropy=True`` and keep a reference model with
  ``actor.use_kl_loss=True actor.kl_loss_coef=0`` (TEPO's masked KL replaces verl's).
* **Global normalisation.** verl splits a mini-batch into micro-batches and normalises each
  micro-batch loss by global counts (``config.global_batch_info``). Our loss normalises
  locally; the wrapper multiplies it by ``count_local / count_global · dp_size`` (tokens for
  ``token-mean``, non-empty completions otherwise), which is exactly verl's ``agg_loss``.
  A loss that reads a constant of the whole rollout (``Config.for_update`` differs from the
  Config: STEER with ``normalise="batch"``) is refused: no micro-batch can compute it.

* **DAPO's overlong shaping and filter** (``Config.overlong_shaping``, ``overlong_filter``):
  an estimator sees rewards and masks, not lengths against a budget, so ours applies neither
  (``batch_stages.prepare_update`` with ``max_len=None, truncated=None``). In verl they belong
  to the reward manager (DAPO's overlong buffer, verl's DAPO recipe) and to the response mask.

* **Monte-Carlo values of π_old** (VinePPO's ``Config.values_needed()``): not carried. verl's
  rollout side samples no continuations of prefixes, so :func:`config_with_env_overrides` refuses such
  a Config, and ``refimpl_vineppo``'s estimator and loss raise at verl's first call
  (``docs/scaleup.md`` says what a port needs).

Groups: verl reorders rows (sequence-length balancing), so estimators regroup by ``index``
(the prompt uid) and put the advantages back in verl's row order. DAPO's dynamic sampling is
verl's ``algorithm.filter_groups`` in the trainer; our estimators zero the advantages of the
groups it would drop when a ``Config`` has ``dynamic_sampling`` on, which removes them from
the gradient (but not from the token-mean denominator: use ``filter_groups`` for the exact
recipe).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch import Tensor
from verl.trainer.ppo import core_algos

from refimpl import algorithms, batch_stages, contract
from refimpl.contract import RolloutBatch
from refimpl.scaleup.hf import loss_batch, normaliser_count, refuse_values_needed

#: Registry name of each algorithm in verl.
REGISTERED: dict[str, str] = {name: f"refimpl_{name}" for name in algorithms.NAMES}


def _verl_own(name: str) -> bool:
    """Whether verl has an advantage estimator or a policy loss of its own called ``name``."""
    found = (core_algos.ADV_ESTIMATOR_REGISTRY.get(name), core_algos.POLICY_LOSS_REGISTRY.get(name))
    return any(fn is not None and fn.__module__ != __name__ for fn in found)


#: The algorithms also registered under their plain name: those whose name verl's registries do
#: not hold (verl's own estimators and losses keep their names: ``grpo``, ``rloo``, ``gspo``,
#: ``gpg``, ``clip_cov``, ``kl_cov``).
PLAIN_NAMES: tuple[str, ...] = tuple(n for n in algorithms.NAMES if not _verl_own(n))

# Tensors handed to our functions for the duration of one verl call (see module docstring).
_ROLLOUT_ENTROPY: list[Tensor] = []
_LOSS_INPUTS: list[dict[str, Tensor | None]] = []


def overrides(name: str) -> dict[str, Any]:
    """The settings ``$REFIMPL_CONFIG`` (JSON) gives the ``Config`` of ``name``."""
    return json.loads(os.environ.get("REFIMPL_CONFIG", "{}") or "{}").get(name, {})


def config_with_env_overrides(name: str) -> Any:
    """The ``Config`` of ``name`` with the overrides in ``$REFIMPL_CONFIG`` (JSON) applied;
    one that asks for Monte-Carlo values (``Config.values_needed()``, VinePPO) is refused:
    verl's rollout side does not sample them (``docs/scaleup.md``)."""
    cfg = algorithms.get(name).Config(**overrides(name))
    refuse_values_needed(cfg, f"refimpl_{name}", "verl")
    return cfg


@contextlib.contextmanager
def rollout_entropy(entropy: Tensor) -> Iterator[None]:
    """Make ``[B, T]`` rollout entropies (verl's row order) visible to our estimators."""
    _ROLLOUT_ENTROPY.append(entropy.detach())
    try:
        yield
    finally:
        _ROLLOUT_ENTROPY.pop()


@contextlib.contextmanager
def loss_inputs(
    *,
    entropy: Tensor | None = None,
    entropy_old: Tensor | None = None,
    logp_ref: Tensor | None = None,
) -> Iterator[None]:
    """Make the current entropy, rollout entropy and reference log-probs (``[B, T]``, the
    micro-batch's rows) visible to our policy losses."""
    _LOSS_INPUTS.append({"entropy": entropy, "entropy_old": entropy_old, "logp_ref": logp_ref})
    try:
        yield
    finally:
        _LOSS_INPUTS.pop()


# ---------------------------------------------------------------------------------------------
# Advantage estimators.
# ---------------------------------------------------------------------------------------------


def _group_order(index: Any, batch_size: int) -> tuple[Tensor, int]:
    """A permutation that puts rows of the same ``index`` (prompt uid) next to each other, in
    order of first appearance, and the common group size (which must be ≥ 2)."""
    contract.require(
        index is not None and len(index) == batch_size,
        "index",
        f"{batch_size} group ids (verl's non_tensor_batch['uid'])",
    )
    rows_of: dict[Any, list[int]] = {}
    for row, uid in enumerate(np.asarray(index, dtype=object).tolist()):
        rows_of.setdefault(uid, []).append(row)
    sizes = {len(rows) for rows in rows_of.values()}
    contract.require(
        len(sizes) == 1 and min(sizes) >= 2,
        "index",
        f"groups of one common size ≥ 2, got sizes {sorted(sizes)}",
    )
    order = [row for rows in rows_of.values() for row in rows]
    return torch.tensor(order, dtype=torch.long), sizes.pop()


def _make_estimator(name: str):
    module = algorithms.get(name)

    def estimator(
        token_level_rewards: Tensor,
        response_mask: Tensor,
        index: Any = None,
        config: Any = None,
        entropy_old: Tensor | None = None,
        old_log_probs: Tensor | None = None,
        **_ignored: Any,
    ) -> tuple[Tensor, Tensor]:
        cfg = config_with_env_overrides(name)
        B = token_level_rewards.shape[0]
        if entropy_old is None and _ROLLOUT_ENTROPY:
            entropy_old = _ROLLOUT_ENTROPY[-1]
        if cfg.reads_rollout_entropy():
            contract.require(
                entropy_old is not None,
                "entropy_old",
                f"the rollout's per-token entropies: {name} shapes its token rewards "
                "with them (pass entropy_old=, or use refimpl.scaleup.verl."
                "rollout_entropy / install_hooks)",
            )
        order, G = _group_order(index, B)
        mask = response_mask.float()
        zeros = torch.zeros_like(mask)
        batch = RolloutBatch(
            response_ids=torch.zeros_like(mask, dtype=torch.long)[order],
            response_mask=mask[order],
            # verl's outcome reward sits on one token of each row: the row sum is r_i.
            rewards=token_level_rewards.float().sum(dim=-1)[order],
            logp_old=(old_log_probs.float() if old_log_probs is not None else zeros)[order],
            entropy_old=(entropy_old.float() if entropy_old is not None else zeros)[order],
            group_size=G,
        )
        # loop.py's stages (batch_stages.prepare_update) as far as an estimator sees them:
        # DAPO's dynamic sampling when cfg.dynamic_sampling (the dropped groups' A = 0) and
        # GPG's α folded into A (the loss sees micro-batches, not groups). Overlong shaping
        # and masking are verl's reward manager's and response mask's (max_len, truncated:
        # None), so the rewards arrive as verl's reward manager shaped them.
        keep = batch_stages.keep_groups(batch.rewards, G, cfg)
        prepared = batch_stages.prepare_update(
            module, batch, cfg, max_len=None, truncated=None, keep=keep
        )
        adv_sorted = prepared.advantages
        adv = torch.empty_like(adv_sorted)
        adv[order] = adv_sorted  # back to verl's row order
        return adv, adv  # (advantages, returns), as verl's outcome estimators return

    estimator.__name__ = f"compute_refimpl_{name}_advantage"
    estimator.__doc__ = f"verl advantage estimator: refimpl.algorithms.{name}.advantages."
    return estimator


# ---------------------------------------------------------------------------------------------
# Policy losses.
# ---------------------------------------------------------------------------------------------


def _make_policy_loss(name: str):
    module = algorithms.get(name)

    def policy_loss(
        old_log_prob: Tensor,
        log_prob: Tensor,
        advantages: Tensor,
        response_mask: Tensor,
        loss_agg_mode: str = "token-mean",
        config: Any = None,
        rollout_is_weights: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, Any]]:
        contract.require(
            rollout_is_weights is None,
            "rollout_is_weights",
            "None: rollout-correction weights would change the algorithm's loss "
            "(disable algorithm.rollout_correction)",
        )
        cfg = config_with_env_overrides(name)
        extra = _LOSS_INPUTS[-1] if _LOSS_INPUTS else {}
        batch, padded = loss_batch(
            response_mask,
            old_log_prob,
            entropy_old=extra.get("entropy_old"),
            logp_ref=extra.get("logp_ref"),
            extra={
                "logp": log_prob,
                "adv": advantages,
                **({"entropy": extra["entropy"]} if extra.get("entropy") is not None else {}),
            },
        )
        info = dict(getattr(config, "global_batch_info", None) or {})
        # Dr. GRPO's L_max: as verl's seq-mean-token-sum-norm, loss_scale_factor, else the
        # horizon.
        horizon = info.get("loss_scale_factor") or response_mask.shape[-1]
        cfg = cfg.for_generation_budget(int(horizon))
        contract.require(
            cfg.for_update(batch, padded["adv"].float()) == cfg,
            "REFIMPL_CONFIG",
            f"a {name} Config whose loss reads no constant of the whole rollout batch (verl's "
            f"policy losses see micro-batches only); it has {json.dumps(overrides(name))}",
        )
        entropy = padded.get("entropy")
        if entropy is not None and not cfg.differentiates_entropy():
            entropy = entropy.detach()  # H_θ carries gradient only for an entropy bonus
        loss, metrics = module.loss(
            batch,
            padded["logp"],
            padded["adv"].float(),
            cfg,
            entropy=entropy.float() if entropy is not None else None,
        )
        # verl's agg_loss normalises by global counts; rescale our local normalisation to it.
        dp_size = info.get("dp_size") or 1
        if cfg.loss_agg_mode == "token-mean":
            global_count = info.get("batch_num_tokens")
        else:
            global_count = info.get("global_batch_size")
        if global_count is not None or dp_size > 1:
            local = normaliser_count(batch.response_mask, cfg.loss_agg_mode)
            global_count = local if global_count is None else torch.as_tensor(global_count)
            loss = loss * local / global_count * dp_size
        return loss, {f"actor/refimpl/{k}": v for k, v in metrics.items()}

    policy_loss.__name__ = f"compute_policy_loss_refimpl_{name}"
    policy_loss.__doc__ = f"verl policy loss: refimpl.algorithms.{name}.loss."
    return policy_loss


ESTIMATORS = {name: _make_estimator(name) for name in algorithms.NAMES}
POLICY_LOSSES = {name: _make_policy_loss(name) for name in algorithms.NAMES}


def register() -> None:
    """Register every estimator and loss with verl (idempotent: safe to import twice)."""
    for name, key in REGISTERED.items():
        for registry_name in {key, name if name in PLAIN_NAMES else key}:
            current = core_algos.ADV_ESTIMATOR_REGISTRY.get(registry_name)
            contract.require(
                current in (None, ESTIMATORS[name]),
                "adv_estimator",
                f"'{registry_name}' not taken by another estimator",
            )
            if current is None:
                core_algos.register_adv_est(registry_name)(ESTIMATORS[name])
            current = core_algos.POLICY_LOSS_REGISTRY.get(registry_name)
            contract.require(
                current in (None, POLICY_LOSSES[name]),
                "loss_mode",
                f"'{registry_name}' not taken by another policy loss",
            )
            core_algos.register_policy_loss(registry_name)(POLICY_LOSSES[name])


# ---------------------------------------------------------------------------------------------
# Hooks into verl's trainer and workers (the engine path of verl 0.9; needs verl's runtime
# extras, so they are installed only where those modules import).
# ---------------------------------------------------------------------------------------------


def ppo_loss(config: Any, model_output: Any, data: Any, dp_group: Any = None) -> Any:
    """verl's engine-worker ``ppo_loss`` with the entropies and reference log-probs our
    policy losses need made visible through :func:`loss_inputs`; otherwise unchanged."""
    from verl.workers.utils import losses as verl_losses
    from verl.workers.utils.padding import no_padding_2_padding

    entropy = model_output.get("entropy", None)
    if entropy is not None:
        entropy = no_padding_2_padding(entropy, data)
    fields = [f for f in ("entropy", "ref_log_prob") if f in data.keys()]
    padded = data.select(*fields, "response_mask").to_padded_tensor() if fields else {}
    with loss_inputs(
        entropy=entropy, entropy_old=padded.get("entropy"), logp_ref=padded.get("ref_log_prob")
    ):
        return verl_losses.ppo_loss(config, model_output, data, dp_group)


def install_hooks() -> list[str]:
    """Wrap verl's v1 trainer and engine workers so entropies reach our functions.

    Returns the hooks installed: none with plain ``verl`` (no runtime extras: the modules
    patched here do not import), both with verl's GPU extras. Idempotent.
    ``tests/scaleup/test_verl_hooks.py`` and ``test_verl_worker.py`` exercise both on CPU.
    """
    installed = []
    with contextlib.suppress(ImportError):
        from verl.workers import engine_workers

        if engine_workers.ppo_loss is not ppo_loss:
            engine_workers.ppo_loss = ppo_loss  # looked up when the worker builds its loss_fn
        installed.append("engine_workers.ppo_loss")
    with contextlib.suppress(ImportError):
        import transfer_queue as tq
        from verl.trainer.ppo.v1 import trainer_base

        original = trainer_base.PPOTrainer._compute_advantage
        if not getattr(original, "_refimpl_hook", False):

            def _compute_advantage(self: Any, batch: Any, metrics: dict) -> Any:
                data = tq.kv_batch_get(
                    keys=batch.keys,
                    partition_id=batch.partition_id,
                    select_fields=["entropy", "response_mask"],
                )
                # Same keys and padding as verl's own read of the batch in this method.
                entropy = data.to_padded_tensor()["entropy"]
                with rollout_entropy(entropy):
                    return original(self, batch, metrics)

            _compute_advantage._refimpl_hook = True  # type: ignore[attr-defined]
            trainer_base.PPOTrainer._compute_advantage = _compute_advantage
        installed.append("PPOTrainer._compute_advantage")
    return installed


register()
if os.environ.get("REFIMPL_VERL_HOOKS", "1") != "0":
    install_hooks()
