"""The credit oracle: the true advantage of every token, by Monte-Carlo rollouts from its prefix.

Not an algorithm: a measuring device. An algorithm's token advantages say which tokens of a
completion it credits or blames; on a 400k-parameter policy the *true* credit is cheap enough
to compute, so the two can be compared (``refimpl.bench.credit`` does, for every algorithm).

The value of a prefix and the true advantage of a token
-------------------------------------------------------
For a prompt ``q``, a completion ``o = o_1 … o_L`` (``<eos>`` included when the policy emitted
it) and the policy ``π`` at its sampling temperature ``τ``::

    V(q, o_<t) = P( success | q, o_<t )            the value of a prefix under π      (1)
    A*[t]      = V(q, o_≤t) − V(q, o_<t)           the true advantage of token o_t      (2)

A completion *succeeds* when its outcome reward is at least ``success_threshold`` (the
algorithm Config's; by default the one every Config shares,
``refimpl.contract.SUCCESS_THRESHOLD``, 0.5 for the toy tasks' {0, 1} rewards). ``V`` of the
whole completion is its outcome, 1 or 0: nothing is sampled after ``<eos>``, or after a
completion that used up the budget ``L_max``. Every other prefix is estimated by ``K``
rollouts: ``K`` continuations sampled from ``π`` at ``τ`` (and the run's top-k / top-p), each
with the budget that is left, ``L_max − |prefix|``, scored by the task's verifier on the whole
text::

    V̂(q, p) = c / K,   c = #successful continuations,   s.e. = √(V̂ (1 − V̂) / K)     (3)

This is VinePPO's Monte-Carlo value (Kazemnejad et al., arXiv 2410.01679), used here to score
credit rather than to train, and the rollout test behind "critical tokens" (Lin et al., arXiv
2411.19943) and pivotal token search (Abdin et al., arXiv 2412.08905): a token is *pivotal*
when ``|A*[t]|`` is large, one choice that moves the chance of success.

One estimate per prefix, shared: ``V(q, o_≤t)`` (the value *after* token ``t``) is the same
number as ``V(q, o_<t+1)`` (the value *before* token ``t + 1``), and identical prefixes of
different completions of one prompt (they often share their first tokens) are estimated once.
So the true advantages telescope, exactly::

    Σ_t A*[t] = V(q, o) − V(q) = 1[success] − V(q)                                        (4)

The estimate ``V̂`` is unbiased for each prefix, but ``A*`` is a difference of two estimates:
its noise has variance ``se_before² + se_after²``, which with ``K = 32`` is larger than most
tokens' true advantage. ``split_half`` keeps the counts of the first and the second half of the
``K`` rollouts, so the reliability of ``A*`` itself can be measured (their correlation) and a
comparison with ``A*`` can be read against that ceiling.

Cost and batching
-----------------
Every prefix of every completion is continued ``K`` times: for ``B`` completions of ``L``
tokens, about ``B · L · K · L / 2`` sampled tokens. All prefixes of one length ``t`` are
continued in one ``sample_groups`` call (they share the budget ``L_max − t``), each prefix as
one "prompt" with ``group_size = K``: the model runs the prompt and the prefix once and repeats
their KV cache ``K`` times, so only the continuations are decoded row by row, thousands of rows
at a time (``max_rows`` per call).

``reference_values`` computes ``V`` exactly, by enumerating every continuation and its
probability, for budgets small enough to enumerate (``V^budget`` leaves: 23³ ≈ 12k for the toy
vocabulary and a 3-token budget): the oracle's tests compare the estimates with it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from refimpl.contract import SUCCESS_THRESHOLD, require
from refimpl.sampling.distribution import TEMPERATURE_MIN, TOP_P_MIN, truncate
from refimpl.sampling.groups import Samples, sample_groups, seeded_generator
from toy_envs import TOKENIZER

#: Salt of the oracle's random streams (``seeded_generator(seed, ORACLE_STREAM, t, chunk)``),
#: so they never coincide with a training run's streams of the same seed.
ORACLE_STREAM = 7_919


class OracleStopped(Exception):
    """A stop was asked (``should_stop()`` said so) while the oracle sampled: its values are
    incomplete and none is returned. A training loop drops the step in progress (the oracle
    runs before the update, so the model is still the last whole step's)."""


#: ``should_stop() -> bool``, asked before every sampling call of the oracle (each well under
#: a second for the toy models): True abandons the values (``OracleStopped``); None never.
StopFn = Callable[[], bool]


@dataclass
class TokenValues:
    """The oracle's estimates for a batch of ``B`` completions of ``T`` padded positions.

    Attributes:
        value_before: ``[B, T]`` float64, ``V̂(q, o_<t)``; 0 on padding.
        value_after: ``[B, T]`` float64, ``V̂(q, o_≤t)``; the outcome (1 or 0) at the last
            token; 0 on padding.
        se_before, se_after: ``[B, T]`` float64 binomial standard errors of the two (0 for the
            outcome, which is not estimated).
        true_advantage: ``[B, T]`` float64, ``A* = value_after − value_before`` (Eq. 2); 0 on
            padding.
        success: ``[B]`` bool, the completion's outcome ``r ≥ success_threshold``.
        mask: ``[B, T]`` bool, the response tokens.
        half_advantages: ``[2, B, T]`` float64, ``A*`` from the first and from the second half
            of the ``K`` rollouts of every prefix (the split-half reliability of ``A*``).
        rollouts: ``K``.
        prefixes: the number of distinct prefixes estimated.
        sampled_tokens: tokens sampled by the rollouts (the continuations, ``<eos>`` included).
        seconds: wall time of the rollouts and their scoring.
    """

    value_before: Tensor
    value_after: Tensor
    se_before: Tensor
    se_after: Tensor
    true_advantage: Tensor
    success: Tensor
    mask: Tensor
    half_advantages: Tensor
    rollouts: int
    prefixes: int
    sampled_tokens: int
    seconds: float

    @property
    def value_prompt(self) -> Tensor:
        """``[B]`` ``V̂(q)``: the value before the first token."""
        return self.value_before[:, 0]


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """``ValueError`` naming the argument unless the sampling distribution is one a run can
    have: the bounds of ``refimpl train`` (``refimpl.settings.train_config``), so that ``logits / τ``
    and the nucleus stay finite and non-empty in float32. (The sampler itself,
    ``refimpl.sampling.groups``, takes what it is given: the oracle checks before it calls it.)"""

    ok = isinstance(temperature, (int, float)) and not isinstance(temperature, bool)
    require(
        ok and math.isfinite(temperature) and temperature >= TEMPERATURE_MIN,
        "temperature",
        f"a finite value ≥ {TEMPERATURE_MIN:g} (refimpl train's bound), got {temperature!r}",
    )
    require(top_k is None or (_is_int(top_k) and top_k >= 1), "top_k",
            f"an integer ≥ 1 or None, got {top_k!r}")  # fmt: skip
    require(
        top_p is None or (isinstance(top_p, (int, float)) and not isinstance(top_p, bool)
                          and TOP_P_MIN <= top_p <= 1),
        "top_p", f"a value in [{TOP_P_MIN:.3g}, 1] or None, got {top_p!r}",
    )  # fmt: skip


def _check_rollouts(rollouts: int) -> None:
    # K odd (VinePPO's 9) is fine: the split halves are then K//2 and K − K//2.
    require(_is_int(rollouts) and rollouts >= 2, "rollouts",
            f"an integer ≥ 2, got {rollouts!r}")  # fmt: skip


def _check_threshold(success_threshold: float) -> None:
    ok = isinstance(success_threshold, (int, float)) and not isinstance(success_threshold, bool)
    require(ok and math.isfinite(success_threshold), "success_threshold",
            f"a finite number, got {success_threshold!r}")  # fmt: skip


def binomial_se(counts: np.ndarray, k: int) -> np.ndarray:
    """``√(V̂ (1 − V̂) / K)`` with ``V̂ = counts / K`` (Eq. 3)."""
    value = counts / k
    return np.sqrt(value * (1.0 - value) / k)


#: ``progress(total, desc) -> bar``: a progress bar over ``total`` prefixes (tqdm's ``update``
#: and context manager), e.g. ``refimpl.runs.progress.progress``; ``None``: no bar.
ProgressFn = Callable[[int, str], Any]


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    def update(self, _n: int = 1) -> None:
        return None


#: ``continue_prefixes(keys, t) -> (wins, sampled)``: for prefixes ``keys`` (``(prompt index,
#: prefix tokens)``, all of length ``t``), a bool array ``[len(keys), K]``, whether each of ``K``
#: continuations sampled from the policy succeeded, and the number of tokens sampled.
ContinueFn = Callable[[list[tuple[int, tuple[int, ...]]], int], tuple[np.ndarray, int]]


def toy_continuations(
    model, task, problems: Sequence, *, rollouts: int, max_new_tokens: int, sampling: dict,
    success_threshold: float, seed: int, max_rows: int, should_stop: StopFn | None = None,
) -> ContinueFn:  # fmt: skip
    """The ``ContinueFn`` of a toy policy: each prefix (prompt and response tokens so far) is
    one "prompt" of ``sample_groups`` with ``group_size = K``, so its KV cache is computed once
    and repeated ``K`` times; the continuations get the budget that is left and the task's
    verifier scores the whole response text. ``should_stop`` is asked before every call
    (``StopFn``)."""
    _check_rollouts(rollouts)
    check_sampling(sampling.get("temperature", 1.0), sampling.get("top_k"), sampling.get("top_p"))
    _check_threshold(success_threshold)
    require(_is_int(max_new_tokens) and max_new_tokens >= 1, "max_new_tokens",
            f"a positive integer, got {max_new_tokens!r}")  # fmt: skip
    require(_is_int(max_rows) and max_rows >= rollouts, "max_rows",
            f"an integer ≥ rollouts ({rollouts}), got {max_rows!r}")  # fmt: skip
    require(_is_int(seed) and seed >= 0, "seed", f"an integer ≥ 0, got {seed!r}")
    prompts = [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems]
    per_call = max(1, max_rows // rollouts)
    device = next(model.parameters()).device  # the sampler draws on the model's device

    def continue_prefixes(keys, t):
        won, sampled = [], 0
        for chunk_index, start in enumerate(range(0, len(keys), per_call)):
            if should_stop is not None and should_stop():
                raise OracleStopped(f"the oracle stopped at a request (prefixes of length {t})")
            chunk = keys[start : start + per_call]
            conts = sample_groups(
                model,
                [prompts[g] + list(prefix) for g, prefix in chunk],
                group_size=rollouts,
                max_new_tokens=max_new_tokens - t,
                eos_id=TOKENIZER.eos_id,
                pad_id=TOKENIZER.pad_id,
                generator=seeded_generator(seed, ORACLE_STREAM, t, chunk_index, device=device),
                **sampling,
            )
            sampled += int(conts.response_mask.sum())
            texts, answered = [], []
            for row, continuation in enumerate(conts.responses()):
                g, prefix = chunk[row // rollouts]
                texts.append(TOKENIZER.decode([*prefix, *continuation]))
                answered.append(problems[g])
            wins = np.asarray(task.score(answered, texts)) >= success_threshold
            won.append(wins.reshape(len(chunk), rollouts))
        return np.concatenate(won), sampled

    return continue_prefixes


def estimate_values(
    rows: list[list[int]],
    prompt_of: list[int],
    success: Sequence[bool],
    width: int,
    rollouts: int,
    continue_prefixes: ContinueFn,
    progress: ProgressFn | None = None,
    positions: Sequence[Sequence[int]] | None = None,
) -> TokenValues:
    """The oracle for any policy: every distinct proper prefix ``(prompt, o_<t)`` of the
    completions ``rows`` (token lists, ``<eos>`` included; ``prompt_of[i]`` the prompt of row
    ``i``), continued ``rollouts`` times by ``continue_prefixes`` (all prefixes of one length
    ``t`` in one call, since they share the budget that is left), laid out as ``[B, width]``
    tensors (Eqs. 1-4). ``success[i]``: the outcome of row ``i``, its value after the last
    token. ``positions[i]``: only the prefixes ``o_<t`` of row ``i`` with ``t`` in it are
    valued (VinePPO's step starts, :func:`step_starts`); the others are NaN in every field
    that would read them. ``None``: every prefix."""
    _check_rollouts(rollouts)
    B = len(rows)
    require(
        len(prompt_of) == B, "prompt_of", f"one prompt index per row ({B}), got {len(prompt_of)}"
    )
    require(len(success) == B, "success", f"one outcome per row ({B}), got {len(success)}")
    require(all(_is_int(g) and g >= 0 for g in prompt_of), "prompt_of",
            "integers ≥ 0 (the prompt of each row)")  # fmt: skip
    longest = max((len(r) for r in rows), default=0)
    require(_is_int(width) and width >= longest, "width",
            f"an integer ≥ the longest row ({longest}), got {width!r}")  # fmt: skip
    _check_positions(positions, rows)
    start = time.perf_counter()
    by_length: dict[int, set[tuple[int, tuple[int, ...]]]] = {}
    for i, (tokens, g) in enumerate(zip(rows, prompt_of)):
        for t in range(len(tokens)) if positions is None else positions[i]:
            by_length.setdefault(t, set()).add((g, tuple(tokens[:t])))
    counts: dict[tuple[int, tuple[int, ...]], tuple[int, int]] = {}
    sampled = 0
    half = rollouts // 2
    total = sum(len(keys) for keys in by_length.values())
    bar = _NoBar() if progress is None else progress(total, f"credit oracle K={rollouts}")
    with torch.no_grad(), bar:
        for t in sorted(by_length):
            keys = sorted(by_length[t])
            wins, n = continue_prefixes(keys, t)
            wins = _checked_wins(wins, n, len(keys), rollouts)
            sampled += n
            for key, row_wins in zip(keys, wins):
                counts[key] = (int(row_wins[:half].sum()), int(row_wins[half:].sum()))
            bar.update(len(keys))
    return _assemble(rows, prompt_of, counts, success, width, rollouts, sampled,
                     time.perf_counter() - start)  # fmt: skip


def _check_positions(positions: Sequence[Sequence[int]] | None, rows: list[list[int]]) -> None:
    """``positions``: None, or per row the positions ``t`` of the prefixes ``o_<t`` to value,
    each an integer in ``[0, |o|)`` (the prefix before the last token is the last one valued:
    the value after it is the outcome)."""
    if positions is None:
        return
    require(len(positions) == len(rows), "positions",
            f"one list per row ({len(rows)}), got {len(positions)}")  # fmt: skip
    for i, (ts, tokens) in enumerate(zip(positions, rows)):
        ok = all(_is_int(t) and 0 <= t < len(tokens) for t in ts)
        require(ok, "positions", f"positions t in [0, {len(tokens)}) for row {i} (a prefix "
                f"o_<t of its {len(tokens)} tokens), got {_preview(ts)}")  # fmt: skip


def _preview(values: object) -> str:
    """``values`` in an error message, cut to its first few items."""
    try:
        items = list(values)  # type: ignore[call-overload]
    except TypeError:
        return repr(values)
    return repr(items[:8])[:-1] + (", …]" if len(items) > 8 else "]")


def _checked_wins(wins: object, sampled: object, n_keys: int, rollouts: int) -> np.ndarray:
    """What a ``ContinueFn`` returned, checked: a bool array ``[len(keys), K]`` (a count of
    successes, or one array too few, would give values outside [0, 1] or capped at 1/2)
    and a count of sampled tokens."""
    arr = np.asarray(wins)
    require(arr.dtype == np.bool_ and arr.shape == (n_keys, rollouts), "continue_prefixes",
            f"a bool array of shape [{n_keys}, {rollouts}] (one win or loss per prefix and "
            f"rollout), got {arr.dtype} of shape {list(arr.shape)}")  # fmt: skip
    require(_is_int(sampled) and sampled >= 0, "continue_prefixes",
            f"the number of tokens sampled (an integer ≥ 0) second, got {sampled!r}")  # fmt: skip
    return arr


def step_starts(tokens: Sequence[int], step_end_ids: Sequence[int]) -> list[int]:
    """The positions ``t`` whose prefix ``o_<t`` starts a step: ``t = 0``, and every ``t``
    right after a token in ``step_end_ids`` (a step ends *with* that token; nothing starts
    after the last token, whose value is the outcome)."""
    ends = set(step_end_ids)
    return [t for t in range(len(tokens)) if t == 0 or tokens[t - 1] in ends]


def token_values(
    model,
    task,
    problems: Sequence,
    samples: Samples,
    outcome: Tensor,
    *,
    rollouts: int = 32,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    success_threshold: float = SUCCESS_THRESHOLD,
    seed: int = 0,
    max_rows: int = 4096,
    progress: ProgressFn | None = None,
    step_ends: str | None = None,
    should_stop: StopFn | None = None,
) -> TokenValues:
    """The oracle's ``V̂`` before and after every token of ``samples`` and the true advantages
    (Eqs. 1-3), by ``rollouts`` continuations of every distinct prefix.

    Args:
        model: the policy that sampled ``samples`` (rollouts run under ``no_grad`` in eval mode).
        task: the toy task; its verifier scores every continuation.
        problems: the ``N`` problems; row ``i`` of ``samples`` answers ``problems[i // G]``.
        samples: the completions (``sample_groups``' output, ``B = N·G`` rows).
        outcome: ``[B]`` outcome rewards of the completions (before any reward shaping).
        rollouts: ``K``, continuations per prefix (even, ≥ 2: the split halves).
        max_new_tokens: the completion budget ``L_max`` the completions were sampled with.
        temperature, top_k, top_p: the run's sampling distribution (the rollouts must use it:
            ``V`` is the value *of that policy*).
        success_threshold: a completion succeeds when its reward is at least this.
        seed: seed of the rollouts' random streams (deterministic for a given batch).
        max_rows: rollout rows per ``sample_groups`` call (memory: about 0.2 MB per row at
            100 positions for the 2-layer model).
        progress: a progress bar over the prefixes (``ProgressFn``), or ``None``.
        step_ends: value only the prefixes that start a step (:func:`step_starts`), a step
            ending with a token of one of these characters; ``None``: every prefix.
        should_stop: asked before every sampling call; True raises ``OracleStopped``.
    """
    _check_rollouts(rollouts)
    require(_is_int(max_rows) and max_rows >= rollouts, "max_rows",
            f"an integer ≥ rollouts ({rollouts}), got {max_rows!r}")  # fmt: skip
    check_sampling(temperature, top_k, top_p)
    G = samples.group_size
    B, T = samples.response_ids.shape
    require(len(problems) * G == B, "problems",
            f"{B // G} (one per group of {G}), got {len(problems)}")  # fmt: skip
    require(tuple(outcome.shape) == (B,), "outcome", f"shape [{B}]")
    require(bool(torch.isfinite(outcome).all()), "outcome", "finite rewards")
    # The budget the completions were drawn with: a row that used it up (truncated) has
    # exactly that length, and none is longer; another budget would give the rollouts
    # another length than the completions had (V would be another policy's).
    lengths = samples.response_mask.sum(1).long()
    cut = lengths[samples.truncated.bool()]
    longest = int(lengths.max()) if lengths.numel() else 0
    require(_is_int(max_new_tokens) and max_new_tokens >= max(longest, 1)
            and bool((cut == max_new_tokens).all()), "max_new_tokens",
            "the budget the samples were drawn with (their truncated rows have "
            f"{sorted(set(cut.tolist())) or 'none'}, the longest {longest} "
            f"tokens), got {max_new_tokens!r}")  # fmt: skip
    continue_prefixes = toy_continuations(
        model, task, problems, rollouts=rollouts, max_new_tokens=max_new_tokens,
        sampling={"temperature": temperature, "top_k": top_k, "top_p": top_p},
        success_threshold=success_threshold, seed=seed, max_rows=max_rows,
        should_stop=should_stop,
    )  # fmt: skip
    rows = samples.responses()
    positions = None
    if step_ends is not None:
        end_ids = TOKENIZER.encode(step_ends)
        positions = [step_starts(tokens, end_ids) for tokens in rows]
    return estimate_values(
        rows, [i // G for i in range(B)], (outcome >= success_threshold).tolist(), T,
        rollouts, continue_prefixes, progress, positions,
    )  # fmt: skip


def training_values(
    model, task, problems: Sequence, samples: Samples, outcome: Tensor, request, *,
    max_new_tokens: int, temperature: float, top_k: int | None, top_p: float | None,
    success_threshold: float, seed: int, step: int, should_stop: StopFn | None = None,
) -> TokenValues:  # fmt: skip
    """What a training loop hands ``advantages`` when ``Config.values_needed()`` returns
    ``request`` (a ``contract.ValueRequest``): :func:`token_values` of ``model`` (π_old: call it
    after sampling and before any optimizer step) with the run's sampling settings, the step's
    own random streams (``(seed, step)``), no progress bar, valuing only the requested
    prefixes. Its ``value_before`` is the ``[B, T]`` float64 ``V̂(q, o_<t)`` the batch carries
    (NaN at the prefixes not valued, 0 on padding); ``sampled_tokens`` and ``prefixes`` are
    what the values cost (the loops log them). ``should_stop``: the loop's stop request
    (``StopFn``): a step of many rollouts (thousands per prefix) stops within a sampling call,
    not at its end."""
    step_seed = int(np.random.default_rng([seed, step, ORACLE_STREAM]).integers(2**62))
    values = token_values(
        model, task, problems, samples, outcome, rollouts=request.rollouts,
        max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
        success_threshold=success_threshold, seed=step_seed, step_ends=request.step_ends,
        should_stop=should_stop,
    )  # fmt: skip
    return values


def _assemble(rows, prompt_of, counts, success, width, rollouts, sampled, seconds) -> TokenValues:
    """Lay the per-prefix counts out as ``[B, width]`` tensors (Eqs. 2-4)."""
    B, T = len(rows), width
    half = rollouts // 2
    # c[i, t] successes of the prefix o_<t (t < |o|); the outcome (×K) at t = |o|.
    total = np.zeros((B, T + 1))
    halves = np.zeros((2, B, T + 1))
    lengths = np.zeros(B, dtype=int)
    for i, (tokens, g) in enumerate(zip(rows, prompt_of)):
        L = len(tokens)
        lengths[i] = L
        for t in range(L):
            key = (g, tuple(tokens[:t]))
            if key not in counts:  # a prefix inside a step (``positions``): not valued
                total[i, t] = halves[:, i, t] = np.nan
                continue
            first, second = counts[key]
            total[i, t] = (first + second) / rollouts
            halves[0, i, t] = first / half
            halves[1, i, t] = second / (rollouts - half)
        won = float(bool(success[i]))
        total[i, L] = won
        halves[:, i, L] = won
    positions = np.arange(T)[None, :]
    mask = positions < lengths[:, None]
    before = np.where(mask, total[:, :T], 0.0)
    after = np.where(mask, total[:, 1:], 0.0)
    # The outcome is not estimated: its s.e. is 0 (the last token's value_after).
    is_last = positions == (lengths[:, None] - 1)
    se_before = np.where(mask, binomial_se(before * rollouts, rollouts), 0.0)
    se_after = np.where(mask & ~is_last, binomial_se(after * rollouts, rollouts), 0.0)
    half_adv = np.where(mask[None], halves[:, :, 1:] - halves[:, :, :T], 0.0)
    as_tensor = lambda x: torch.as_tensor(x, dtype=torch.float64)  # noqa: E731
    return TokenValues(
        value_before=as_tensor(before),
        value_after=as_tensor(after),
        se_before=as_tensor(se_before),
        se_after=as_tensor(se_after),
        true_advantage=as_tensor(after - before),
        success=torch.as_tensor(np.asarray(success, dtype=bool)),
        mask=torch.as_tensor(mask),
        half_advantages=as_tensor(half_adv),
        rollouts=rollouts,
        prefixes=len(counts),
        sampled_tokens=sampled,
        seconds=seconds,
    )


# ---------------------------------------------------------------------------------------------
# The exact value, by enumeration (tiny budgets only): what the estimates are tested against.
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def reference_values(
    model,
    task,
    problem,
    prefix: Sequence[int],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    success_threshold: float = SUCCESS_THRESHOLD,
) -> float:
    """The exact ``V(q, prefix)`` (Eq. 1): every continuation of ``prefix`` within the budget
    ``max_new_tokens`` enumerated with its probability under ``softmax(logits / τ)`` (top-k /
    top-p truncated and renormalised as the sampler draws), breadth first, one forward pass
    per depth. ``V^(budget − |prefix|)`` leaves: tiny budgets only."""
    check_sampling(temperature, top_k, top_p)
    _check_threshold(success_threshold)
    require(_is_int(max_new_tokens) and max_new_tokens >= 1, "max_new_tokens",
            f"a positive integer, got {max_new_tokens!r}")  # fmt: skip
    vocab = TOKENIZER.vocab_size
    ok = isinstance(prefix, Sequence) and all(_is_int(v) and 0 <= v < vocab for v in prefix)
    require(ok, "prefix", f"a sequence of token ids in [0, {vocab}) (the response so far), "
            f"got {_preview(prefix)}")  # fmt: skip
    prompt = TOKENIZER.encode(problem.prompt, add_bos=True)
    remaining = max_new_tokens - len(prefix)
    if remaining < 0:
        raise ValueError(f"prefix: longer than max_new_tokens={max_new_tokens}")
    if remaining > 0 and TOKENIZER.vocab_size**remaining > 2_000_000:
        raise ValueError(f"max_new_tokens: {remaining} tokens to enumerate is too many")

    def wins(texts: list[list[int]]) -> np.ndarray:
        decoded = [TOKENIZER.decode(ids) for ids in texts]
        return np.asarray(task.score([problem] * len(decoded), decoded)) >= success_threshold

    if prefix and prefix[-1] == TOKENIZER.eos_id or remaining == 0:
        return float(wins([list(prefix)])[0])
    # Level d: every continuation of d tokens that has not emitted <eos>.
    levels: list[list[list[int]]] = [[list(prefix)]]
    probs: list[np.ndarray] = []
    for _ in range(remaining):
        frontier = levels[-1]
        ids = torch.tensor([prompt + p for p in frontier])
        logits = model(ids)[:, -1, :].float() / temperature
        p = F.softmax(truncate(logits, top_k, top_p), dim=-1).double().numpy()
        probs.append(p)
        levels.append([seq + [v] for seq in frontier for v in range(TOKENIZER.vocab_size)])
    # Back up from the leaves: a leaf (the budget spent) is scored as it is.
    V = wins(levels[-1]).astype(np.float64).reshape(len(levels[-2]), TOKENIZER.vocab_size)
    for d in range(remaining - 1, -1, -1):
        frontier = levels[d]
        ended = wins([seq + [TOKENIZER.eos_id] for seq in frontier]).astype(np.float64)
        child = V.copy()
        child[:, TOKENIZER.eos_id] = ended  # <eos> ends the completion: its outcome
        values = (probs[d] * child).sum(axis=1)
        if d == 0:
            return float(values[0])
        V = values.reshape(len(levels[d - 1]), TOKENIZER.vocab_size)
    raise AssertionError("unreachable")
