"""``refimpl credit``'s policy and batch: what is scored, the one batch it is scored on, and
each algorithm's two signals on that batch (its advantages and its effective credit
``−∂L/∂logp`` at ``logp = logp_old``, by autograd through its ``loss``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from refimpl import algorithms, batch_stages
from refimpl.contract import require
from refimpl.sampling.groups import Samples, sample_groups, seeded_generator
from toy_envs import TOKENIZER

#: The batch's prompts come from ``default_rng([HELD_OUT_SEED, CREDIT_STREAM, seed])``: a key
#: whose first word is the evaluation streams' (``refimpl.problem_streams.HELD_OUT_SEED``), which no
#: training or warm-start stream uses, and whose second word is not the held-out set's 0.
CREDIT_STREAM = 1


# ---------------------------------------------------------------------------------------------
# The policy and the batch.
# ---------------------------------------------------------------------------------------------


@dataclass
class Policy:
    """What is scored: the model, its reference (the warm start: π_ref of the KL terms), the
    settings it samples with, and where it came from."""

    model: Any
    reference: Any
    plan: Any
    source: str
    step: int


def sample_batch(policy: Policy, n_prompts: int, group_size: int, seed: int):
    """``(problems, samples, outcome)``: ``n_prompts`` problems of the policy's task, ``G``
    completions each at the run's sampling settings, and their outcome rewards."""
    from refimpl.problem_streams import HELD_OUT_SEED

    train, task = policy.plan.cfg, policy.plan.task
    problems = task.sample(n_prompts, np.random.default_rng([HELD_OUT_SEED, CREDIT_STREAM, seed]))
    samples = sample_groups(
        policy.model,
        [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems],
        group_size=group_size,
        max_new_tokens=policy.plan.max_new_tokens,
        eos_id=TOKENIZER.eos_id,
        pad_id=TOKENIZER.pad_id,
        temperature=train.temperature,
        top_k=train.top_k,
        top_p=train.top_p,
        generator=seeded_generator(HELD_OUT_SEED, CREDIT_STREAM, seed),
    )
    texts = [TOKENIZER.decode(row.tolist()) for row in samples.response_ids]
    answered = [p for p in problems for _ in range(group_size)]
    outcome = torch.tensor(task.score(answered, texts), dtype=torch.float32)
    return problems, samples, outcome


# ---------------------------------------------------------------------------------------------
# Each algorithm's two signals on the batch.
# ---------------------------------------------------------------------------------------------


def algorithm_signals(
    name: str,
    samples: Samples,
    outcome: torch.Tensor,
    max_new_tokens: int,
    logp_ref: torch.Tensor | None = None,
    algo_cfg: Any = None,
    token_values: torch.Tensor | None = None,
) -> dict[str, Any]:
    """``advantages`` ``[B, T]``, effective ``credit`` ``[B, T]`` (``−∂L/∂logp`` at
    ``logp = logp_old``) and ``trained`` ``[B]`` (the rows of the groups the algorithm trains
    on) of algorithm ``name`` on the batch, as the toy loop would compute them for its first
    update: dynamic sampling on the outcome, reward shaping, advantages, overlong filter, then
    the loss of the whole batch at ``θ = θ_old``. ``token_values``: ``[B, T]`` ``V̂`` of π_old,
    for a Config whose ``values_needed()`` asks for them (VinePPO; ``training_values``)."""
    algo = algorithms.get(name)
    cfg = (algo_cfg or algo.Config()).for_generation_budget(max_new_tokens)
    require(
        cfg.values_needed() is None or token_values is not None,
        "token_values",
        f"the Monte-Carlo values {name} reads (credit_oracle.training_values), got None",
    )
    G = samples.group_size
    B, T = samples.response_ids.shape
    advantages = torch.zeros(B, T, dtype=torch.float64)
    credit = torch.zeros(B, T, dtype=torch.float64)
    keep = batch_stages.keep_groups(outcome, G, cfg)  # DAPO Eq. 11 when the Config asks
    rows = keep.repeat_interleave(G)
    if not bool(keep.any()):
        return {"advantages": advantages, "credit": credit, "trained": rows}
    kept = samples.select_groups(keep)
    kept_outcome = outcome[rows]
    ref = logp_ref[rows] if (logp_ref is not None and cfg.needs_reference()) else None
    batch = kept.to_rollout_batch(kept_outcome, G, logp_ref=ref)
    if cfg.values_needed() is not None:
        batch = batch.replace(token_values=token_values[rows].double())
    # shaping → advantages → overlong filter → the rollout's constants: every driver's order
    prepared = batch_stages.prepare_update(
        algo, batch, cfg, max_len=max_new_tokens, truncated=kept.truncated
    )
    batch, A = prepared.batch, prepared.advantages
    logp = batch.logp_old.clone().requires_grad_(True)
    # θ = θ_old: the current policy's entropy is the rollout's (TEPO's mask reads both).
    loss, _ = algo.loss(batch, logp, A, prepared.cfg, entropy=batch.entropy_old)
    (grad,) = torch.autograd.grad(loss, logp)
    advantages[rows] = A.detach().double()
    credit[rows] = -grad.double()
    return {"advantages": advantages, "credit": credit, "trained": rows}
