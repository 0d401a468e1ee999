"""The first update, watched: how far each optimizer step of a run's first RL step moves the
policy on the tokens it is about to train on.

Step 1 of ``refimpl/loop.py``'s loop is sampled once (π_old); its ``minibatches`` optimizer
steps then run in order. Before the update on minibatch j (j ≥ 2) the policy has already
taken j − 1 updates, so on minibatch j's response tokens

    fall[i,t] = log π_old(o_t | q, o_<t) − log π_θ(o_t | q, o_<t)

is how much probability the earlier updates took away from tokens the rollout sampled, and
``approx_kl_old`` (k3, what the loss logs) is its batch summary. Adam's first update from a
fresh state is a sign step (every weight with a gradient moves by lr, ``batch_stages.
warm_up_lr``), which in the long-chain regime throws single tokens by over 10 nats; a warm-up
(``LoopConfig.lr_warmup``) keeps them small. ``docs/first_update.md`` tells the story;
``scripts/experiments/first_update/measure.py`` sweeps lr and the warm-up with this function,
and ``tests/test_first_update.py`` bounds it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from refimpl import algorithms, batch_stages
from refimpl.core import kl_k3, masked_mean
from refimpl.loop import LoopConfig, rollout
from refimpl.model import GPT
from toy_envs import get_task


@dataclass(frozen=True)
class FirstStep:
    """What step 1's updates did to the tokens each update was about to train on."""

    approx_kl_old: float  # k3 of π_θ against π_old, mean over the step's minibatches (as logged)
    largest_fall: float  # max over tokens of minibatches 2.. of log π_old − log π_θ, in nats
    tokens_past_3_nats: int  # tokens of minibatches 2.. that fell by more than 3 nats
    tokens: int  # response tokens of minibatches 2..
    falls_per_minibatch: tuple[float, ...]  # the largest fall on each minibatch (the first: 0)
    lrs: tuple[float, ...]  # the learning rate each update took
    # Per update: the share of the weights it moved by at least 0.9 of its learning rate (a
    # sign step moves nearly all of them by lr), and the median |Δw| / lr_k over all weights.
    share_moved_by_lr: tuple[float, ...]
    median_move: tuple[float, ...]


def first_step(model: GPT, cfg: LoopConfig) -> FirstStep:
    """Run step 1 of ``loop.train(model, cfg)`` on a copy of ``model`` and measure, before
    each update, how far the policy has moved from π_old on that update's minibatch. The
    algorithm must not need values (VinePPO's oracle is not run here)."""
    algo = algorithms.get(cfg.algo)
    task = get_task(cfg.task, **cfg.task_knobs)
    L_max = cfg.max_new_tokens or task.max_new_tokens
    algo_cfg = (cfg.algo_cfg or algo.Config()).for_generation_budget(L_max)
    if algo_cfg.values_needed() is not None:
        raise ValueError(f"first_step: {cfg.algo} needs the credit oracle's values; use another")
    model = copy.deepcopy(model).eval()
    samples, outcome, _ = rollout(model, task, algo_cfg, cfg, 0, L_max)
    if samples is None:
        raise ValueError("first_step: every group of step 1 was uninformative")
    logp_ref = None
    if algo_cfg.needs_reference():  # π_ref: the frozen starting policy, π_old at step 1
        with torch.no_grad():
            logp_ref = samples.policy_logprobs(
                model, temperature=cfg.temperature, with_entropy=False
            )[0]
    batch = samples.to_rollout_batch(outcome, cfg.group_size, logp_ref=logp_ref)
    prepared = batch_stages.prepare_update(
        algo, batch, algo_cfg, max_len=L_max, truncated=samples.truncated
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    kls, falls, lrs, past, tokens, shares, medians = [], [], [], 0, 0, [], []
    model.train()
    for j, (minibatch, rows) in enumerate(
        batch_stages.minibatches(prepared.batch, cfg.minibatches)
    ):
        logp, H = samples.policy_logprobs(model, rows, temperature=cfg.temperature)
        mask = minibatch.response_mask
        with torch.no_grad():
            fall = (minibatch.logp_old - logp.detach()) * mask
            kls.append(float(masked_mean(kl_k3(logp.detach(), minibatch.logp_old, mask), mask)))
            if j > 0:  # the first minibatch is trained on π_old itself
                falls.append(float(fall.max()))
                past += int(((fall > 3.0) & (mask > 0)).sum())
                tokens += int(mask.sum())
            else:
                falls.append(0.0)
        if not algo_cfg.differentiates_entropy():
            H = H.detach()
        loss, _ = algo.loss(minibatch, logp, prepared.advantages[rows], prepared.cfg, entropy=H)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        lrs.append(batch_stages.warm_up_lr(optimizer, cfg.lr, cfg.lr_warmup))
        before = torch.cat([p.detach().flatten() for p in model.parameters()])
        optimizer.step()
        with torch.no_grad():
            after = torch.cat([p.detach().flatten() for p in model.parameters()])
            move = (after - before).abs() / lrs[-1]
            shares.append(float((move >= 0.9).float().mean()))
            medians.append(float(move.median()))
    return FirstStep(
        approx_kl_old=sum(kls) / len(kls),
        largest_fall=max(falls),
        tokens_past_3_nats=past,
        tokens=tokens,
        falls_per_minibatch=tuple(falls),
        lrs=tuple(lrs),
        share_moved_by_lr=tuple(shares),
        median_move=tuple(medians),
    )
