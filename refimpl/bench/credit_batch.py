"""``refimpl credit``'s policy and batch: what is scored, the one batch it is scored on, and
each algorithm's two signals on that batch (its advantages and its effective credit
``−∂L/∂logp`` at ``logp = logp_old``, by autograd through its ``loss``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from refimpl import algorithms, mechanisms
from refimpl.contract import require
from refimpl.sampling.groups import Samples, sample_groups, seeded_generator
from refimpl.settings.train import TrainConfig
from toy_envs import TOKENIZER

if TYPE_CHECKING:
    from refimpl.bench.credit import CreditConfig

#: The batch's prompts come from ``default_rng([HELD_OUT_SEED, CREDIT_STREAM, seed])``: a key
#: whose first word is the evaluation streams' (``refimpl.streams.HELD_OUT_SEED``), which no
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


#: The flags of ``TrainConfig`` (first components): a message of its checks names
#: ``--temperature``; ``refimpl credit`` takes it as ``--train.temperature``.
_TRAIN_FLAGS = frozenset(f.name.replace("_", "-") for f in dataclasses.fields(TrainConfig))


def as_train_flags(message: str) -> str:
    """``message`` (a ``TrainConfig`` check's) with each of its flags spelled as ``refimpl
    credit`` takes it: ``--temperature`` → ``--train.temperature``."""
    import re

    def spell(m: re.Match) -> str:
        name = m.group(1)
        return f"--train.{name}" if name.split(".")[0] in _TRAIN_FLAGS else m.group(0)

    return re.sub(r"(?<![\w.])--([a-z][\w-]*(?:\.[\w-]+)*)", spell, message)


def train_settings(cfg: CreditConfig, typed: frozenset[str] | None = None) -> TrainConfig:
    """The settings of the policy scored: the run's config.json (``--run``; where the run is
    now, whatever directory it was trained from), or ``--train`` with ``--preset``'s values
    on the fields not typed (``typed``, as ``compare`` keeps them; None: the fields still at
    their defaults)."""
    from refimpl.runs.rundir import load_config_file
    from refimpl.settings import presets

    if cfg.run is not None:
        run = Path(cfg.run)
        train = load_config_file(run / "config.json", "--run", algo_config=True)
        # config.json keeps --runs-dir as typed (relative to where the run was trained): the
        # run is where it was found now, and so is the warm-start cache beside it.
        return dataclasses.replace(train, progress=False, runs_dir=run.parent, name=run.name)
    explicit = None
    if typed is not None:
        explicit = frozenset(n.removeprefix("train.") for n in typed if n.startswith("train."))
    return presets.fill_defaults(cfg.train, presets.get(cfg.preset).train, explicit)


def plan_policy(cfg: CreditConfig, typed: frozenset[str] | None = None):
    """``(plan, checkpoint, state)``: the settings resolved and checked (flags named as
    ``credit`` takes them), and with ``--run`` its checkpoint verified, before any warm start
    is trained or loaded."""
    from refimpl.runs.resume import verify_run_checkpoint
    from refimpl.settings.plan import resolve

    train = train_settings(cfg, typed)
    try:
        plan = resolve(train)
    except ValueError as err:
        message = str(err) if cfg.run is not None else as_train_flags(str(err))
        raise ValueError(message) from None
    if cfg.run is None:
        return plan, None, None
    checkpoint, state = verify_run_checkpoint(Path(cfg.run), train, "--run")
    return plan, checkpoint, state


def load_policy(cfg: CreditConfig, typed: frozenset[str] | None = None, planned=None) -> Policy:
    """The policy of ``--run`` (its last checkpoint) or the warm start of ``--train``."""
    from refimpl.runs.checkpoint import load_model_weights
    from refimpl.warmstart import base_model

    plan, checkpoint, state = planned or plan_policy(cfg, typed)
    reference = base_model(plan.warmstart, "--train.warmstart.").eval()
    if cfg.run is None:
        return Policy(reference, reference, plan, "warm start", 0)
    model = plan.warmstart.model.build()
    load_model_weights(checkpoint, model, state=state)
    return Policy(model.eval(), reference, plan, str(cfg.run), int(state.get("step", -1)))


def oracle_memory(cfg: CreditConfig, plan, G: int) -> list[tuple[str, int, list]]:
    """The largest allocations of the benchmark (``refimpl.settings.memory``'s form): the
    batch's ``N·G`` rows and the oracle's rollout rows per sampling call (``--max-rows``, or
    ``K·N·G`` when fewer), each a row of ``L_prompt + L_max`` positions as ``train``
    estimates a sampled row."""
    from refimpl.bench.credit import CreditConfig
    from refimpl.settings.memory import decode_bytes

    d = CreditConfig()
    T = plan.task.max_prompt_tokens + plan.max_new_tokens
    per_row = T * decode_bytes(plan.warmstart.model)
    K, N = max(cfg.rollout_list()), cfg.prompts
    rows = min(cfg.max_rows, K * N * G)
    N_f = ("--prompts", N, d.prompts)
    G_f = ("--group-size", G, TrainConfig().group_size)
    oracle_f = [("--max-rows", cfg.max_rows, d.max_rows)] if rows == cfg.max_rows else [
        ("--rollouts", K, 32), N_f, G_f]  # fmt: skip
    return [
        ("the batch's completions", N * G * per_row, [N_f, G_f]),
        ("the oracle's rollouts (one sampling call)", rows * per_row, oracle_f),
    ]


def sample_batch(policy: Policy, n_prompts: int, group_size: int, seed: int):
    """``(problems, samples, outcome)``: ``n_prompts`` problems of the policy's task, ``G``
    completions each at the run's sampling settings, and their outcome rewards."""
    from refimpl.streams import HELD_OUT_SEED

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
    keep = mechanisms.keep_groups(outcome, G, cfg)  # DAPO Eq. 11 when the Config asks
    rows = keep.repeat_interleave(G)
    if not bool(keep.any()):
        return {"advantages": advantages, "credit": credit, "trained": rows}
    kept = samples.select_groups(keep)
    kept_outcome = outcome[rows]
    rewards = mechanisms.shape_rewards(kept_outcome, kept.response_mask.sum(1), max_new_tokens, cfg)
    ref = logp_ref[rows] if (logp_ref is not None and cfg.needs_reference()) else None
    batch = kept.to_rollout_batch(rewards, G, logp_ref=ref).replace(outcome_rewards=kept_outcome)
    if cfg.values_needed() is not None:
        batch = batch.replace(token_values=token_values[rows].double())
    A = algo.advantages(batch, cfg)
    loss_mask = mechanisms.overlong_filter(batch.response_mask, kept.truncated, cfg)
    batch = batch.replace(response_mask=loss_mask)
    logp = batch.logp_old.clone().requires_grad_(True)
    # θ = θ_old: the current policy's entropy is the rollout's (TEPO's mask reads both).
    loss, _ = algo.loss(batch, logp, A, cfg.for_update(batch, A), entropy=batch.entropy_old)
    (grad,) = torch.autograd.grad(loss, logp)
    advantages[rows] = A.detach().double()
    credit[rows] = -grad.double()
    return {"advantages": advantages, "credit": credit, "trained": rows}
