"""Size bounds: a size flag too large for the machine is refused before anything is created,
naming the flag and the memory estimate (not killed by the kernel an hour later).
"""

from __future__ import annotations

import os
from typing import NamedTuple

import torch

from refimpl.settings.train_config import TrainConfig
from refimpl.settings.warmstart_config import ModelSize, WarmstartConfig
from toy_envs import TOKENIZER, tasks

#: Rough bytes per held-out problem object: the size ``toy_envs`` bounds ``Task.sample`` by,
#: so a size flag this estimate lets through is one the task draws.
PROBLEM_BYTES = tasks.PROBLEM_BYTES


def memory_budget(device: str) -> tuple[int, str] | None:
    """The memory a run on ``device`` can use: the GPU's for CUDA, else this machine's
    physical memory (``(bytes, where)``; None when the platform does not say)."""
    dev = torch.device(device)
    if dev.type == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(dev.index or 0)
        return int(props.total_memory), f"of {device}"
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), "of this machine"
    except (ValueError, OSError, AttributeError):
        return None


def decode_bytes(n_layer: int, n_embd: int) -> int:
    """Bytes per position of one sampled row of a model of ``n_layer`` layers of width
    ``n_embd`` (d): its KV cache (``2 · n_layer · d`` floats) and its ids, masks, log-prob
    and entropy."""
    return 4 * (2 * n_layer * n_embd + 6)


def memory_estimates(
    cfg: TrainConfig, task, max_new_tokens: int, needs_reference: bool
) -> list[tuple[str, int, list]]:
    """The largest allocations of a run, estimated from its settings and whether its
    algorithm's ``Config`` needs a frozen reference model (on the low side: a setting is refused only when it certainly cannot fit):
    ``(what, bytes, factors)`` where ``factors`` are the ``(flag, value, default)`` the size
    grows with."""
    m, ws = cfg.warmstart.model, cfg.warmstart
    d0, w0, m0 = TrainConfig(), WarmstartConfig(), ModelSize()  # the defaults
    f32 = 4
    d, layers, heads, vocab = m.n_embd, m.n_layer, m.n_head, TOKENIZER.vocab_size
    T = task.max_prompt_tokens + max_new_tokens  # one sequence of a run
    decode = decode_bytes(m.n_layer, m.n_embd)  # per position: KV cache, ids, masks, logp, entropy
    train = f32 * (layers * (16 * d + heads * T) + 3 * vocab)  # kept for the backward pass
    params = layers * 12 * d * d + (vocab + m.block_size) * d
    copies = 4 + (1 if needs_reference else 0)  # + the frozen reference
    rows = cfg.prompts_per_step * cfg.group_size
    n_eval = cfg.eval_samples
    N = ("--prompts-per-step", cfg.prompts_per_step, d0.prompts_per_step)
    G = ("--group-size", cfg.group_size, d0.group_size)
    model = [
        ("--warmstart.model.n-embd", d, m0.n_embd),
        ("--warmstart.model.n-layer", layers, m0.n_layer),
        ("--warmstart.model.block-size", m.block_size, m0.block_size),
    ]
    return [
        ("the model, its gradient and Adam's moments", f32 * params * copies, model),
        (
            "the rollout (KV cache and per-token records)",
            rows * T * (decode + f32 * cfg.resample_rounds),
            [N, G, ("--resample-rounds", max(cfg.resample_rounds, 1), d0.resample_rounds)],
        ),
        (
            "the update's activations",
            max(1, rows // cfg.minibatches) * T * train,
            [N, G],
        ),
        (
            "the held-out sampling",
            max(n_eval, min(1024, n_eval * cfg.eval_problems)) * T * decode,
            [("--eval-samples", n_eval, d0.eval_samples)],
        ),
        (
            "the held-out problems",
            cfg.eval_problems * PROBLEM_BYTES,
            [("--eval-problems", cfg.eval_problems, d0.eval_problems)],
        ),
        (
            "the probe prompts",
            cfg.probe_prompts * (PROBLEM_BYTES + T * decode),
            [("--probe-prompts", cfg.probe_prompts, d0.probe_prompts)],
        ),
        (
            "the warm start's batch",
            ws.batch_size * m.block_size * train,
            [("--warmstart.batch-size", ws.batch_size, w0.batch_size), *model],
        ),
        (
            "the warm start's held-out problems",
            ws.eval_problems * PROBLEM_BYTES,
            [("--warmstart.eval-problems", ws.eval_problems, w0.eval_problems)],
        ),
    ]


def _human(n: float) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB", "PB"):
        if n < 1000 or unit == "PB":
            return f"{n:.1f} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1000
    return f"{n:.1f} PB"


def refuse_over_budget(estimates: list[tuple[str, int, list]], device: str) -> None:
    """``ValueError`` at the first of ``estimates`` (``(what, bytes, factors)``, factors
    ``(flag, value, default)``) above the memory of ``device`` (``memory_budget``): it names
    the flag that grew most over its default, the estimate, and about the largest value of
    that flag that fits. The one rule of every command that sizes an allocation by flags."""
    budget = memory_budget(device)
    if budget is None:
        return
    limit, where = budget
    for what, need, factors in estimates:
        if need <= limit:
            continue
        flag, value, _ = max(factors, key=lambda f: f[1] / max(f[2], 1))
        most = max(1, int(value * limit / need))
        raise ValueError(
            f"{flag}: {value} needs about {_human(need)} for {what} (an estimate), more than "
            f"the {_human(limit)} of memory {where}; expected at most about {most}"
        )


# ---------------------------------------------------------------------------------------------
# The oracle's cost of a step: Monte-Carlo values (VinePPO's) are sampled, not looked up.
# ---------------------------------------------------------------------------------------------

#: A step whose Monte-Carlo values (a Config's ``values_needed()``: VinePPO's) would sample
#: more tokens than this is announced before the run with the estimate: half a minute a step
#: (the oracle samples some 30,000 tokens a second with the 2-layer model on one core of the
#: project's 2-core CPU, ``ORACLE_TOKENS_PER_SECOND``), 13 times VinePPO's default step on
#: the default batch (K = 9: some 75,000 tokens on chain).
ORACLE_TOKENS_WARN = 10**6
#: ... and refused above this: days a step, which no setting in bounds is meant to ask for
#: (``rollouts=4096`` on the default 64 × 8 chain batch is some 10⁸).
ORACLE_TOKENS_LIMIT = 10**10
#: The oracle's sampling speed the announcement quotes (measured with the shipped countdown
#: model at K = 4096 on one core of the project's loaded 2-core AMD EPYC: 37,000 a second).
ORACLE_TOKENS_PER_SECOND = 30_000


class OracleCost(NamedTuple):
    """What the Monte-Carlo values of one step sample (``oracle_cost``), per the estimate."""

    tokens: float  # the oracle's continuations, in sampled tokens
    own: float  # the step's own completions, in sampled tokens
    starts: float  # the prefixes valued per completion (step starts)
    continuation: float  # the mean length of one continuation, in tokens
    rollouts: int  # K, the continuations of each prefix


def oracle_cost(task, max_new_tokens: int, prompts: int, group_size: int, request,
                problems: list) -> OracleCost:  # fmt: skip
    """The tokens the oracle samples for one step's values (``request``: the Config's
    ``ValueRequest``, ``K`` rollouts of each prefix that starts a step), estimated for a
    policy that writes the reference solutions of ``problems`` (the first step's prompts):
    per prompt, ``K`` continuations of the empty prefix (shared by its ``G`` completions)
    and of each later step start of each completion, each as long as what is left of the
    solution. Real completions differ (a wrong one can run to the budget): an estimate of
    the order of magnitude, not a bound."""
    from refimpl.sampling.monte_carlo_values import step_starts

    ends = TOKENIZER.encode(request.step_ends) if request.step_ends is not None else None
    shared, per_completion, starts, length = 0.0, 0.0, 0.0, 0.0
    for problem in problems:
        tokens = TOKENIZER.encode(task.reference_solution(problem), add_eos=True)
        tokens = tokens[:max_new_tokens]
        positions = step_starts(tokens, ends) if ends is not None else range(len(tokens))
        shared += len(tokens)  # the empty prefix: once per prompt
        per_completion += sum(len(tokens) - t for t in positions if t > 0)
        starts += len(positions)
        length += len(tokens)
    n = max(len(problems), 1)
    tokens = request.rollouts * prompts * (shared + group_size * per_completion) / n
    continuation = (shared + per_completion) / max(starts, 1)
    own = prompts * group_size * length / n
    return OracleCost(tokens, own, starts / n, continuation, request.rollouts)


def check_oracle_cost(cost: OracleCost, factors: list[tuple[str, int, int, str]]) -> str | None:
    """``ValueError`` when ``cost`` is above ``ORACLE_TOKENS_LIMIT``, naming the flag of
    ``factors`` (``(flag, value, default, value as shown)``) that grew most over its default
    and about the largest value of it that fits; else the announcement of a cost above
    ``ORACLE_TOKENS_WARN`` (the caller warns with it), or None."""
    flag, value, _, shown = max(factors, key=lambda f: f[1] / max(f[2], 1))
    what = (
        f"the Monte-Carlo values of a step sample about {cost.tokens:,.0f} tokens, "
        f"{cost.tokens / max(cost.own, 1):,.0f} times the step's own {cost.own:,.0f} "
        f"(about {cost.starts:.1f} prefixes a completion, each continued K = {cost.rollouts} "
        f"times for about {cost.continuation:.0f} tokens; an estimate from the task's "
        "reference solutions)"
    )
    if cost.tokens > ORACLE_TOKENS_LIMIT:
        most = max(1, int(value * ORACLE_TOKENS_LIMIT / cost.tokens))
        raise ValueError(
            f"{flag}: with {shown}, {what}, more than the {ORACLE_TOKENS_LIMIT:.0e} a step may "
            f"take; expected at most about {most}"
        )
    if cost.tokens <= ORACLE_TOKENS_WARN:
        return None
    minutes = cost.tokens / ORACLE_TOKENS_PER_SECOND / 60
    took = f"{minutes / 60:,.1f} hours" if minutes >= 90 else f"{minutes:,.1f} minutes"
    return (
        f"{flag}: with {shown}, {what}: about {took} a step at {ORACLE_TOKENS_PER_SECOND:,} "
        "tokens a second; Ctrl-C stops a step's values at once"
    )
