"""The bridge between text tasks and token tensors: prompts in, scored completions out.

Used by the warm start, the trainer and the notebooks alike, so that "success rate" means one
thing everywhere: the fraction of problems whose completion earns a reward ≥ the success
threshold, the algorithm Config's ``success_threshold`` when a caller has one, else the default
every Config shares (``refimpl.contract.SUCCESS_THRESHOLD``).

pass@k (Chen et al., "Evaluating Large Language Models Trained on Code", arXiv 2107.03374)
--------------------------------------------------------------------------------------------
Draw ``n`` completions of a problem, ``c`` of them correct. The probability that at least one
of ``k`` completions drawn *without replacement* from those ``n`` is correct is

    pass@k = 1 − C(n−c, k) / C(n, k)                                    (Chen et al., Eq. 1)

an unbiased estimator of the probability that ``k`` fresh samples contain a right answer.
``pass@1`` is the mean success of one sample; large ``k`` measures how much of the problem set
the policy can reach at all. RL that only *sharpens* the policy raises pass@1 and can lower
pass@k for large ``k`` (Yue et al., arXiv 2504.13837): the curve of pass@k against ``k``
flattens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from refimpl.contract import SUCCESS_THRESHOLD, require
from refimpl.sampling.groups import Samples, sample_groups
from toy_envs import TOKENIZER

#: The k of every pass@k the trainer logs (the evaluation draws at least max(K) samples).
PASS_AT_K: tuple[int, ...] = (1, 2, 4, 8, 16)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al., Eq. 1).

    ``1 − C(n−c, k)/C(n, k)``, computed as ``1 − Π_{j=n−c+1}^{n} (1 − k/j)``, the product form
    that never builds a large binomial coefficient. Requires ``0 ≤ c ≤ n`` and ``1 ≤ k ≤ n``.
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        require(
            isinstance(value, int) and not isinstance(value, bool),
            name,
            f"an int, got {value!r}",
        )
    require(n >= 1, "n", f"at least one sample, got {n}")
    require(0 <= c <= n, "c", f"a count in [0, n={n}], got {c}")
    require(1 <= k <= n, "k", f"1 ≤ k ≤ n={n} (pass@k needs at least k samples), got {k}")
    if n - c < k:  # every k-subset holds a correct sample
        return 1.0
    # C(n−c, k)/C(n, k) = Π_{j=n−c+1}^{n} (j − k)/j
    miss = 1.0
    for j in range(n - c + 1, n + 1):
        miss *= 1.0 - k / j
    return 1.0 - miss


def mean_pass_at_k(
    correct_counts: Sequence[int], n: int, ks: Sequence[int] = PASS_AT_K
) -> dict[int, float]:
    """Mean pass@k over problems, each with ``n`` samples and ``correct_counts[p]`` correct."""
    require(len(correct_counts) > 0, "correct_counts", "at least one problem")
    return {
        k: math.fsum(pass_at_k(n, int(c), k) for c in correct_counts) / len(correct_counts)
        for k in ks
    }


def encode_prompts(problems: Sequence) -> list[list[int]]:
    """``<bos>`` followed by each problem's prompt text, as token ids."""
    return [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems]


def decode_completions(samples: Samples) -> list[str]:
    """The text of every sampled completion (up to, not including, ``<eos>``)."""
    return [TOKENIZER.decode(row.tolist()) for row in samples.response_ids]


def score_samples(task, problems: Sequence, samples: Samples, group_size: int) -> np.ndarray:
    """Rewards ``[B]`` of ``samples``, whose rows answer ``problems`` in groups of ``group_size``."""
    texts = decode_completions(samples)
    repeated = [p for p in problems for _ in range(group_size)]
    return np.asarray(task.score(repeated, texts), dtype=np.float32)


@torch.no_grad()
def solved(
    model,
    task,
    problems: Sequence,
    *,
    greedy: bool,
    seed: int = 0,
    max_new_tokens: int | None = None,
    batch_size: int = 256,
    success_threshold: float = SUCCESS_THRESHOLD,
) -> np.ndarray:
    """Per problem, 1.0 when its one completion (greedy, or sampled at T = 1) earns reward
    ≥ ``success_threshold``, else 0.0."""
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(seed)
    budget = max_new_tokens or task.max_new_tokens
    out = [np.zeros(0, dtype=np.float64)]
    for start in range(0, len(problems), batch_size):
        chunk = problems[start : start + batch_size]
        samples = sample_groups(
            model,
            encode_prompts(chunk),
            group_size=1,
            max_new_tokens=budget,
            eos_id=TOKENIZER.eos_id,
            pad_id=TOKENIZER.pad_id,
            top_k=1 if greedy else None,
            generator=generator,
        )
        rewards = score_samples(task, chunk, samples, 1)
        out.append((rewards >= success_threshold).astype(np.float64))
    return np.concatenate(out)


def success_rate(model, task, problems: Sequence, **kwargs) -> float:
    """Fraction of ``problems`` solved by one completion each (``solved``'s arguments)."""
    return float(solved(model, task, problems, **kwargs).sum()) / max(len(problems), 1)


@torch.no_grad()
def correct_counts(
    model,
    task,
    problems: Sequence,
    n: int,
    *,
    max_new_tokens: int | None = None,
    generator: torch.Generator | None = None,
    batch_rows: int = 1024,
    success_threshold: float = SUCCESS_THRESHOLD,
) -> list[int]:
    """For each problem, how many of ``n`` completions sampled at T = 1 earn reward
    ≥ ``success_threshold`` (the ``c`` of the unbiased pass@k, ``pass_at_k``)."""
    budget = max_new_tokens or task.max_new_tokens
    per_call = max(1, batch_rows // n)  # problems per sampling call
    counts: list[int] = []
    for start in range(0, len(problems), per_call):
        chunk = problems[start : start + per_call]
        samples = sample_groups(
            model,
            encode_prompts(chunk),
            group_size=n,
            max_new_tokens=budget,
            eos_id=TOKENIZER.eos_id,
            pad_id=TOKENIZER.pad_id,
            generator=generator,
        )
        solved = score_samples(task, chunk, samples, n) >= success_threshold
        counts.extend(int(c) for c in solved.reshape(len(chunk), n).sum(axis=1))
    return counts


@torch.no_grad()
def heldout_metrics(
    model,
    task,
    problems: Sequence,
    samples_per_problem: int,
    *,
    max_new_tokens: int,
    generator,
    success_threshold: float = SUCCESS_THRESHOLD,
) -> dict[str, float]:
    """The trainer's held-out evaluation: greedy success (``heldout_greedy``) and the unbiased
    pass@k from ``samples_per_problem`` completions per problem at T = 1 (``heldout_pass@k``
    for every k in ``PASS_AT_K`` up to it), the completions drawn with ``generator``; a
    completion succeeds when its reward is ≥ ``success_threshold`` (the trainer passes its
    algorithm Config's)."""
    n = samples_per_problem
    counts = correct_counts(
        model, task, problems, n, max_new_tokens=max_new_tokens, generator=generator,
        success_threshold=success_threshold,
    )  # fmt: skip
    greedy = success_rate(
        model, task, problems, greedy=True, max_new_tokens=max_new_tokens,
        success_threshold=success_threshold,
    )  # fmt: skip
    pass_at = mean_pass_at_k(counts, n, [k for k in PASS_AT_K if k <= n])
    return {"heldout_greedy": greedy, **{f"heldout_pass@{k}": v for k, v in pass_at.items()}}


@torch.no_grad()
def probe_snapshot(
    model, probes: Sequence, *, max_new_tokens: int, temperature: float, generator
) -> list[dict]:
    """One sampled completion per probe prompt, with the per-token entropy along it (for the
    notebooks' token-level heatmaps): ``{"prompt", "tokens", "entropy"}`` per probe."""
    samples = sample_groups(
        model,
        encode_prompts(probes),
        group_size=1,
        max_new_tokens=max_new_tokens,
        eos_id=TOKENIZER.eos_id,
        pad_id=TOKENIZER.pad_id,
        temperature=temperature,
        generator=generator,
    )
    rows = []
    for i, p in enumerate(probes):
        n = int(samples.response_mask[i].sum())
        ids = samples.response_ids[i, :n].tolist()
        rows.append(
            {
                "prompt": p.prompt,
                "tokens": [TOKENIZER.itos[t] for t in ids],
                "entropy": [round(float(h), 5) for h in samples.entropy_old[i, :n]],
            }
        )
    return rows
