"""The trainer-side batch mechanisms: what the training loops do to a batch around the algorithm.

An algorithm file (``refimpl/algorithms/<name>.py``) reads only ``refimpl.contract`` and
``refimpl.core``; the loops that drive it (``refimpl/loop.py`` and the toy trainer
``refimpl.train``, the TRL subclass and the verl hooks in ``refimpl/scaleup``, the hand-written
HF loop) also apply the mechanisms below, each switched on or off by a field of the
algorithm's ``Config``, so that one loop serves every algorithm:

    dynamic sampling   which groups train (DAPO Eq. 11: 0 < #successful < G)
                       ``informative_groups``, ``keep_groups``
    reward shaping     the reward the advantage sees (DAPO Eq. 13, soft overlong punishment)
                       ``shape_rewards``, ``overlong_penalty``, ``overlong_cache_len``
    overlong filter    which rows the loss sees (DAPO's truncated-sample masking)
                       ``overlong_filter``
    minibatches        how a step's groups split into optimizer steps  ``split_groups``
    lr warm-up         the learning rate of each optimizer step  ``warm_up_lr``
    split-group loops  advantages for a loop whose loss sees micro-batches that split groups
                       (TRL, verl), with the algorithm's batch-wide constant folded in
                       ``kept_group_advantages`` (GPG's α: ``Config.advantage_scale``)

The order every loop follows, written once in :func:`prepare_update` (every driver calls it
between its sampler and its optimizer):

    outcome reward → dynamic sampling (on the outcome; the sampler's, since a loop that can
    resample draws more groups) → shaping → advantages → overlong filter (a truncated row
    still counts in its group's statistics) → ``Config.for_update`` (the whole rollout's
    constants) → minibatches of whole groups (:func:`minibatches`)
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from jaxtyping import Bool, Float, Float32, Real, Shaped
from torch import Tensor

from refimpl.contract import AlgorithmConfig, RolloutBatch, require
from refimpl.core import group_view


@dataclass(frozen=True)
class Update:
    """What a driver's optimizer steps read from one rollout (:func:`prepare_update`)."""

    batch: RolloutBatch  # rewards shaped, outcome_rewards the outcome, response_mask the loss's
    advantages: Float[Tensor, "B T"]  # the algorithm's, from the whole rollout
    cfg: AlgorithmConfig  # every loss call of this rollout gets it (Config.for_update)


def prepare_update(
    algorithm: Any,  # an algorithm module (refimpl/algorithms/<name>.py) or a stand-in
    batch: RolloutBatch,
    cfg: AlgorithmConfig,
    *,
    max_len: int | None,
    truncated: Bool[Tensor, " B"] | None,
    keep: Bool[Tensor, " N"] | None = None,
) -> Update:
    """The stages between a rollout and its optimizer steps, in the one order every driver
    (``loop.py``, the Trainer, the HF loop, TRL, verl) follows:

    1. shaping: ``r̃ = shape_rewards(outcome)`` (DAPO Eq. 13 when the Config asks); the
       outcome stays in ``outcome_rewards``, where success is decided;
    2. advantages from the whole rollout: ``algorithm.advantages``; with ``keep`` (a loop whose
       loss sees micro-batches that split groups: TRL, verl) those of the kept groups, 0 on
       the others, the batch-wide constant folded in (:func:`kept_group_advantages`);
    3. the loss mask: the overlong filter (a truncated row counted in step 2, it only gets no
       gradient), and with ``keep`` the dropped groups' rows out;
    4. ``Config.for_update``: the whole rollout's constants a minibatch cannot see.

    ``batch.rewards`` holds the outcome (or ``batch.outcome_rewards`` does). ``max_len`` is
    the generation budget ``L_max``, ``truncated`` ``[B]`` the rows that hit it without EOS;
    a host that applies shaping or masking itself (verl's reward manager) passes None. Dynamic
    sampling comes before: a loop that can resample keeps whole informative groups at its
    sampler (:func:`keep_groups`); one that cannot passes ``keep``.
    """
    outcome = batch.rewards if batch.outcome_rewards is None else batch.outcome_rewards
    if max_len is not None:  # 1. shaping, on the outcome's scale
        shaped = shape_rewards(outcome, batch.lengths, max_len, cfg)
        batch = batch.replace(rewards=shaped, outcome_rewards=outcome)
    if keep is None:  # 2. the advantages, every row of the rollout counted
        advantages = algorithm.advantages(batch, cfg)
    else:
        advantages = kept_group_advantages(algorithm, batch, keep, cfg)
    loss_mask = batch.response_mask  # 3. the loss mask
    if truncated is not None:
        loss_mask = overlong_filter(loss_mask, truncated, cfg)
    if keep is not None:
        loss_mask = loss_mask * keep.repeat_interleave(batch.group_size)[:, None].to(loss_mask)
    if loss_mask is not batch.response_mask:
        batch = batch.replace(response_mask=loss_mask)
    return Update(batch, advantages, cfg.for_update(batch, advantages))  # 4.


def minibatches(
    batch: RolloutBatch, minibatches: int
) -> Iterator[tuple[RolloutBatch, Bool[Tensor, " B"]]]:
    """Each optimizer step's minibatch of whole groups (:func:`split_groups`) and its rows
    (``[B]`` bool, to index what the driver keeps beside the batch: log-probs, sequences)."""
    n_groups = batch.num_groups
    for groups in split_groups(n_groups, minibatches):
        keep = torch.zeros(n_groups, dtype=torch.bool, device=batch.response_mask.device)
        keep[groups.start : groups.stop] = True
        minibatch = batch.select_groups(keep) if len(groups) < n_groups else batch
        yield minibatch, keep.repeat_interleave(batch.group_size)


def warm_up_lr(optimizer: torch.optim.Optimizer, lr: float, warmup_updates: int) -> float:
    """Set the learning rate of the optimizer step about to be taken, and return it: the
    k-th update of the run (k = 1, 2, …) takes

        lr_k = lr · min(1, k / warmup_updates)          (warmup_updates = 0: lr from the first)

    Why: Adam's first update from a fresh state is a sign step. Its moments are one gradient
    old, so m̂ / √v̂ = g / |g| = ±1 and every weight with a gradient moves by the full lr,
    however small or noisy that gradient is. Later updates average the minibatches'
    gradients, which disagree in sign on many weights, and move each weight by a fraction of
    lr. A warm-up makes the first steps small while the moments fill (docs/first_update.md
    measures it). k is read from Adam's own step count, which a checkpoint saves, so a
    resumed run continues the ramp where it stopped."""
    state = optimizer.state.get(optimizer.param_groups[0]["params"][0], {})
    k = int(state["step"]) + 1 if "step" in state else 1  # this update's index
    lr_k = lr * min(1.0, k / warmup_updates) if warmup_updates > 0 else lr
    for group in optimizer.param_groups:
        group["lr"] = lr_k
    return lr_k


def informative_groups(
    rewards: Float[Tensor, " B"], group_size: int, threshold: float
) -> Bool[Tensor, " N"]:
    """DAPO dynamic sampling (Eq. 11): ``[N]`` bool, keep groups with ``0 < #successful < G``.

    Pass the *outcome* rewards (before shaping) and the Config's ``success_threshold``: a
    completion succeeded when ``r_i ≥ threshold``, as ``core.successful`` decides it.
    """
    n_success = group_view(rewards >= threshold, group_size).sum(dim=1)
    return (n_success > 0) & (n_success < group_size)


def keep_groups(
    outcome: Float[Tensor, " B"], group_size: int, cfg: AlgorithmConfig
) -> Bool[Tensor, " N"]:
    """The groups a training loop trains on, ``[N]`` bool: with ``cfg.dynamic_sampling``
    DAPO's informative groups (:func:`informative_groups` at ``cfg.success_threshold``), else
    every group. Pass the outcome rewards (before shaping)."""
    if cfg.dynamic_sampling:
        return informative_groups(outcome, group_size, cfg.success_threshold)
    return torch.ones(outcome.shape[0] // group_size, dtype=torch.bool, device=outcome.device)


def overlong_filter(
    response_mask: Shaped[Tensor, "B T"], truncated: Bool[Tensor, " B"], cfg: AlgorithmConfig
) -> Shaped[Tensor, "B T"]:
    """The loss mask: with ``cfg.overlong_filter`` (DAPO's overlong filtering) the rows that
    hit the length budget without EOS (``truncated``, ``[B]`` bool) leave the loss; else
    ``response_mask`` itself. Apply it after the advantages: a truncated row still counts in
    its group's statistics, it only gets no gradient."""
    if not cfg.overlong_filter:
        return response_mask
    return torch.where(truncated[:, None], torch.zeros_like(response_mask), response_mask)


def kept_group_advantages(
    algorithm: Any, batch: RolloutBatch, keep: Bool[Tensor, " N"], cfg: AlgorithmConfig
) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages of ``algorithm`` on the groups where ``keep`` holds, 0 on the
    others, for a loop whose loss sees micro-batches that split groups (TRL, verl).

    A constant of the whole batch that the loss multiplies the advantages by
    (``cfg.advantage_scale``: GPG's ``α``) cannot be computed on such a micro-batch: it is
    folded into the advantages (``−α·A·logp`` is linear in ``A``), and the loss then sees no
    rewards and computes ``α = 1``. A loop whose loss sees whole groups (the toy trainer)
    gets ``algorithm.advantages`` from :func:`prepare_update` without ``keep``, and its loss
    computes ``α``.
    """
    adv = torch.zeros_like(batch.response_mask)
    if not bool(keep.any()):
        return adv
    kept = batch.select_groups(keep)
    # The algorithm's batch-wide constant (GPG's α; 1 for every other algorithm), folded in.
    kept_adv = algorithm.advantages(kept, cfg) * cfg.advantage_scale(kept)
    adv[keep.repeat_interleave(batch.group_size)] = kept_adv.to(adv.dtype)
    return adv


def split_groups(n_groups: int, minibatches: int) -> list[range]:
    """The groups of each minibatch: ``minibatches`` consecutive ranges whose sizes differ by
    at most one (7 groups in 2 minibatches: 4 and 3, never 3, 3 and 1).

    With fewer groups than minibatches (dynamic sampling kept few), every group is its own
    minibatch: ``n_groups`` optimizer steps instead of ``minibatches``. No range is empty.
    """
    require(n_groups >= 0, "n_groups", f"a count ≥ 0, got {n_groups}")
    require(minibatches >= 1, "minibatches", f"a count ≥ 1, got {minibatches}")
    parts = min(minibatches, n_groups)
    bounds = [(k * n_groups) // parts for k in range(parts + 1)] if parts else [0]
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def overlong_cache_len(max_len: int, cache_frac: float) -> int:
    """``L_cache = round(frac · L_max)``, at least 1: the soft-punishment band of DAPO Eq. 13.

    DAPO uses ``L_max = 20480``, ``L_cache = 4096`` (``frac = 0.2``); a Config stores the
    fraction (``overlong_cache_frac``) because ``L_max`` is the trainer's generation budget.
    """
    require(max_len > 0, "max_len", "a positive length budget L_max")
    require(
        0.0 < cache_frac <= 1.0, "overlong_cache_frac", f"a fraction in (0, 1], got {cache_frac}"
    )
    return max(1, min(max_len, round(cache_frac * max_len)))


def shape_rewards(
    rewards: Float[Tensor, " B"], lengths: Real[Tensor, " B"], max_len: int, cfg: AlgorithmConfig
) -> Float[Tensor, " B"]:
    """The reward the advantage sees: DAPO's soft overlong punishment added to the outcome
    reward when ``cfg.overlong_shaping`` is on, on the outcome's scale; else ``rewards``.

        r̃_i = r_i + c · R_len(|o_i|),   c = cfg.overlong_penalty_scale,
        R_len from :func:`overlong_penalty` with L_cache = overlong_cache_len(L_max, frac)

    DAPO adds ``R_len ∈ [−1, 0]`` to ±1 rewards (Eq. 13), whose range is 2: ``c`` is half the
    reward range, 0.5 for the toy tasks' {0, 1} rewards. Then ``2·r̃ − 1 = (2r − 1) + R_len``
    is exactly DAPO's shaped reward, an affine image of ``r̃``, so group-normalised advantages
    are DAPO's (a truncated correct answer scores 0.5, between a correct 1 and a wrong 0, as
    DAPO's 0 lies between 1 and −1). ``c = 1`` would double the penalty relative to the
    correct/wrong gap and tie a truncated correct answer with a short wrong one.

    Every trainer calls this once, after dynamic sampling (which counts successes on the
    outcome) and before the advantages; keep the outcome in ``RolloutBatch.outcome_rewards``
    so that success is still decided on it. ``lengths`` are the true ``|o_i|`` (before any
    overlong filtering masks rows out).
    """
    if not cfg.overlong_shaping:
        return rewards
    cache_len = overlong_cache_len(max_len, cfg.overlong_cache_frac)
    penalty = overlong_penalty(lengths.to(rewards.device), max_len, cache_len)
    return rewards + cfg.overlong_penalty_scale * penalty.to(rewards.dtype)


def overlong_penalty(
    lengths: Real[Tensor, " B"], max_len: int, cache_len: int
) -> Float32[Tensor, " B"]:
    """DAPO soft overlong punishment ``R_len(|o|)``, added to the reward (DAPO Eq. 13).

    ``0`` for ``|o| ≤ L_max − L_cache``; ``((L_max − L_cache) − |o|) / L_cache`` on the
    cache band; ``−1`` beyond ``L_max``. Continuous, non-increasing, in ``[−1, 0]``.
    """
    require(max_len > 0, "max_len", "a positive length budget L_max")
    require(0 < cache_len <= max_len, "cache_len", f"0 < L_cache ≤ L_max={max_len}")
    lengths = lengths.to(torch.float32)
    soft = (max_len - cache_len - lengths) / cache_len
    return torch.clamp(soft, min=-1.0, max=0.0)
