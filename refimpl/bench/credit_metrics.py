"""``refimpl credit``'s criteria: numpy over the response tokens of one batch.

1. **within-completion agreement** of a signal with the true advantages ``A*``
   (``within_completion``; pooled over all tokens beside it: ``pooled``);
2. **blame on failures**: the share of a failed completion's negative signal mass on its pivot
   and on the prefix before it (``blame_shares``), and on ``chain`` on its first wrong token;
3. **the entropy hypothesis**: does the rollout entropy mark the tokens with large ``|A*|``
   (``entropy_hypothesis``, ``entropy_extras``);

and the oracle's own noise (``oracle_noise``). ``score_signals`` applies 1 and 2 to every
algorithm's signals.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from refimpl.bench.stats import bootstrap_indices, mean_se, spearman
from refimpl.diagnostics.entropy_attribution import pearson
from refimpl.sampling.monte_carlo_values import TokenValues
from toy_envs import TOKENIZER

#: The forking-tokens share: the top 20 % of tokens by entropy (Wang et al., arXiv 2506.01939).
TOP_FRACTION = 0.2
#: A signal whose spread within a completion is below this fraction of its largest |value|
#: there is constant: it carries no within-completion credit. (Float32 rounding, e.g. of a KL
#: gradient between two evaluations of the same policy, moves a constant signal by ~1e-7.)
CONSTANT_TOL = 1e-5


def mean_se_record(values: list[float]) -> dict[str, float]:
    """The record of the finite ``values``: mean, its s.e. (``stats.mean_se``) and n."""
    v = [x for x in values if math.isfinite(x)]
    if not v:
        return {"mean": math.nan, "se": math.nan, "n": 0}
    mean, se = mean_se(v)
    return {"mean": mean, "se": se, "n": len(v)}


def within_values(
    signal: np.ndarray, truth: np.ndarray, lengths: np.ndarray, rows
) -> tuple[dict[int, tuple[float, float]], int, int]:
    """Per completion ``i`` of ``rows`` where both vary over its tokens, the (Pearson,
    Spearman) correlation of ``signal`` with ``truth``; and how many completions had a constant
    signal, and how many a constant truth (neither is correlated)."""
    out, constant, flat_truth = {}, 0, 0
    for i in rows:
        L = int(lengths[i])
        x, y = signal[i, :L], truth[i, :L]
        if L < 2 or np.ptp(x) <= CONSTANT_TOL * float(np.abs(x).max()):
            constant += 1
            continue
        if np.ptp(y) == 0:
            flat_truth += 1
            continue
        out[int(i)] = (pearson(x, y), spearman(x, y))
    return out, constant, flat_truth


def within_completion(signal: np.ndarray, truth: np.ndarray, lengths: np.ndarray, rows) -> dict:
    """Criterion 1: the per-completion Pearson and Spearman correlations of ``signal`` with
    ``truth`` over each completion's tokens, averaged over the ``rows`` where both vary; the
    completions where the signal is constant are counted, never correlated."""
    values, constant, flat_truth = within_values(signal, truth, lengths, rows)
    return {
        "pearson": mean_se_record([p for p, _ in values.values()]),
        "spearman": mean_se_record([s for _, s in values.values()]),
        "completions": len(rows),
        "constant": constant,
        "truth_constant": flat_truth,
        "no_within_credit": constant == len(rows),
    }


def pooled(signal: np.ndarray, truth: np.ndarray, mask: np.ndarray, rows) -> dict:
    """The correlations over every response token of ``rows`` together."""
    m = mask[rows]
    x, y = signal[rows][m], truth[rows][m]
    return {"pearson": pearson(x, y), "spearman": spearman(x, y), "tokens": int(m.sum())}


def blame_values(
    signal: np.ndarray, pivots: dict[int, int], lengths: np.ndarray
) -> dict[int, dict[str, float]]:
    """Per failed completion ``i`` with pivot token ``pivots[i]`` and some negative signal, the
    share of its negative signal mass ``Σ_t max(−s, 0)`` on the pivot and on the tokens before
    it, what a constant signal would put there (1/|o|, t/|o|), and the pivot's excess over 1/|o|."""
    out = {}
    for i, t in pivots.items():
        L = int(lengths[i])
        neg = np.maximum(-signal[i, :L], 0.0)
        total = float(neg.sum())
        if total <= 0:
            continue
        pivot = float(neg[t]) / total
        out[int(i)] = {"pivot": pivot, "prefix": float(neg[:t].sum()) / total,
                       "uniform_pivot": 1.0 / L, "uniform_prefix": t / L,
                       "pivot_excess": pivot - 1.0 / L}  # fmt: skip
    return out


def blame_shares(signal: np.ndarray, pivots: dict[int, int], lengths: np.ndarray) -> dict:
    """Criterion 2: per failed completion ``i`` with pivot token ``pivots[i]``, the share of its
    negative signal mass ``Σ_t max(−s, 0)`` on the pivot and on the tokens before it."""
    rows = blame_values(signal, pivots, lengths).values()
    # pivot_excess is paired per completion: the pivot's share beyond a constant signal's 1/|o|.
    keys = ("pivot", "prefix", "uniform_pivot", "uniform_prefix", "pivot_excess")
    return {k: mean_se_record([r[k] for r in rows]) for k in keys}


def first_wrong_token(task, problem, tokens: list[int]) -> int | None:
    """The first position where ``tokens`` leave the reference solution (its working and
    answer, then ``<eos>``); None when the task has no unique working (only ``chain`` has one)."""
    if getattr(task, "name", None) != "chain":
        return None
    reference = TOKENIZER.encode(task.reference_solution(problem), add_eos=True)
    for t, token in enumerate(tokens):
        if t >= len(reference) or token != reference[t]:
            return t
    return len(tokens) - 1 if len(tokens) < len(reference) else None


def top_share(entropy: np.ndarray, mass: np.ndarray) -> float:
    """The share of ``Σ mass`` carried by the ``TOP_FRACTION`` of tokens with the highest
    ``entropy`` (ties broken by position); NaN when ``Σ mass ≤ 0``."""
    n_top = max(1, int(round(TOP_FRACTION * entropy.size)))
    top = np.argsort(-entropy, kind="mergesort")[:n_top]
    total = float(mass.sum())
    return float(mass[top].sum() / total) if total > 0 else math.nan


#: Prompts drawn with replacement per bootstrap replicate of the share by prompt.
BOOTSTRAP_DRAWS = 1000


def share_by_prompt(entropy_rows: list, mass_rows: list, prompt_of: list[int], seed: int) -> dict:
    """The top-20 % entropy share of ``Σ mass`` (:func:`top_share`) with its spread over the
    batch's prompts: ``BOOTSTRAP_DRAWS`` replicates, each resampling the prompts with
    replacement (a prompt brings all its completions' tokens; the top 20 % is chosen again in
    each replicate), their sd (the share's s.e. by prompt) and 5th and 95th percentiles (a
    90 % interval). The completions of a prompt share its value, so tokens are not independent
    draws; prompts are. ``entropy_rows``, ``mass_rows``: per completion, its tokens'."""
    rows_of: dict[int, list[int]] = {}
    for i, g in enumerate(prompt_of):
        rows_of.setdefault(int(g), []).append(i)
    groups = list(rows_of.values())
    h = [np.concatenate([np.asarray(entropy_rows[i], dtype=float) for i in g]) for g in groups]
    m = [np.concatenate([np.asarray(mass_rows[i], dtype=float) for i in g]) for g in groups]
    reps = [top_share(np.concatenate([h[j] for j in pick]), np.concatenate([m[j] for j in pick]))
            for pick in bootstrap_indices(len(groups), BOOTSTRAP_DRAWS, [seed, len(groups)])]  # fmt: skip
    reps_arr = np.array([r for r in reps if math.isfinite(r)])
    finite = reps_arr.size > 1
    return {
        "share": top_share(np.concatenate(h), np.concatenate(m)),
        "sd": float(reps_arr.std(ddof=1)) if finite else math.nan,
        "lo": float(np.percentile(reps_arr, 5)) if finite else math.nan,
        "hi": float(np.percentile(reps_arr, 95)) if finite else math.nan,
        "prompts": len(groups),
        "draws": BOOTSTRAP_DRAWS,
    }


def entropy_extras(
    entropy_rows: list, advantage_rows: list, half_rows: tuple[list, list], prompt_of: list[int],
    seed: int,
) -> dict:  # fmt: skip
    """What criterion 3 reads beyond ``entropy_hypothesis``'s first version, from per-completion
    token arrays (so a result file's own arrays give it): the pooled correlation of ``H_old``
    with ``A*²`` and with the half-product ``A*₁·A*₂`` (the two independent halves of the
    ``K`` rollouts: ``E[A*₁·A*₂] = A_true²``, so the oracle's noise, whose size varies with
    ``V`` and so with the entropy, cannot inflate it), and the ``ΣA*²`` share by prompt."""
    h = np.concatenate([np.asarray(r, dtype=float) for r in entropy_rows])
    a = np.concatenate([np.asarray(r, dtype=float) for r in advantage_rows])
    prod_rows = [np.asarray(x, dtype=float) * np.asarray(y, dtype=float)
                 for x, y in zip(*half_rows)]  # fmt: skip
    prod = np.concatenate(prod_rows)
    return {
        "pooled_pearson_sq": pearson(h, a * a),
        "pooled_pearson_half_product": pearson(h, prod),
        "share_sq_by_prompt": share_by_prompt(entropy_rows, prod_rows, prompt_of, seed),
    }


def entropy_hypothesis(
    entropy: np.ndarray, values: TokenValues, mask: np.ndarray, seed: int,
    prompt_of: list[int] | None = None,
) -> dict:  # fmt: skip
    """Criterion 3: does the rollout entropy mark the pivotal tokens? The correlations of
    ``H_old`` with ``|A*|`` (pooled, and within completions), and the share of ``Σ|A*|`` and of
    the noise-free ``ΣA*²`` (the product of the two half-estimates, whose expectation is the
    squared true advantage) carried by the top 20 % of tokens by entropy, each against its own
    null (the same share of random 20 % subsets) and against the top 20 % by ``|A*|`` itself.
    ``prompt_of``: the prompt of each row, for :func:`entropy_extras` (the ``ΣA*²`` share's
    interval by prompt, the noise-free correlation); None leaves them out."""
    h = entropy[mask]
    a = np.abs(values.true_advantage.numpy()[mask])
    halves = values.half_advantages.numpy()
    sq = (halves[0] * halves[1])[mask]
    n_top = max(1, int(round(TOP_FRACTION * h.size)))
    rng = np.random.default_rng(seed)
    total = a.sum() if a.sum() > 0 else math.nan
    subsets = [rng.choice(h.size, n_top, replace=False) for _ in range(1000)]
    random_share = np.array([a[idx].sum() / total for idx in subsets])
    top_share_abs = top_share(h, a)
    sq_total = sq.sum() if sq.sum() > 0 else math.nan
    random_sq = np.array([sq[idx].sum() / sq_total for idx in subsets])
    top_sq = top_share(h, sq)
    lengths = mask.sum(1)
    within = within_completion(
        np.where(mask, entropy, 0.0), np.abs(values.true_advantage.numpy()), lengths,
        [i for i in range(mask.shape[0]) if lengths[i] > 1],
    )  # fmt: skip
    return {
        "pooled_pearson": pearson(h, a),
        "pooled_spearman": spearman(h, a),
        "within": {k: within[k] for k in ("pearson", "spearman", "completions", "constant")},
        "top20_share_abs": top_share_abs,
        "top20_share_sq": top_sq,
        # Each share has its own null: ΣA*² is far more concentrated than Σ|A*| (a few
        # tokens carry most of it), so its random-20 % share spreads far wider.
        "random20_share_sq": {
            "mean": float(random_sq.mean()),
            "sd": float(random_sq.std(ddof=1)),
            "p_at_least": float((random_sq >= top_sq).mean()),
        },
        # The null: the share of random 20 % subsets (its mean is 0.2 in expectation), their
        # spread, and how often one reaches the entropy subset's share.
        "random20_share_abs": {
            "mean": float(random_share.mean()),
            "sd": float(random_share.std(ddof=1)),
            "p_at_least": float((random_share >= top_share_abs).mean()),
            "draws": int(random_share.size),
        },
        "oracle_top20_share_abs": float(np.sort(a)[::-1][:n_top].sum() / a.sum())
        if a.sum() > 0
        else math.nan,
        "tokens": int(h.size),
    } | (_extras_of(entropy, values, mask, prompt_of, seed) if prompt_of is not None else {})


def _extras_of(entropy, values: TokenValues, mask, prompt_of, seed) -> dict:
    """:func:`entropy_extras` of a batch's ``[B, T]`` tensors."""
    rows = range(mask.shape[0])
    cut = lambda x: [x[i][mask[i]] for i in rows]  # noqa: E731
    halves = values.half_advantages.numpy()
    return entropy_extras(cut(entropy), cut(values.true_advantage.numpy()),
                          (cut(halves[0]), cut(halves[1])), prompt_of, seed)  # fmt: skip


def oracle_noise(values: TokenValues) -> dict:
    """The oracle's own reliability: the correlation of ``A*`` estimated from the first and
    from the second half of the rollouts over the tokens that are not the last one (whose
    ``V`` after is the outcome, known exactly), Spearman–Brown stepped up to all ``K``; its
    square root bounds the correlation any signal can reach with the estimated ``A*``."""
    mask = values.mask.numpy().copy()
    lengths = mask.sum(1)
    for i, L in enumerate(lengths):
        if L:
            mask[i, L - 1] = False
    h = values.half_advantages.numpy()
    r_half = pearson(h[0][mask], h[1][mask]) if mask.sum() > 2 else math.nan
    r_full = 2 * r_half / (1 + r_half) if math.isfinite(r_half) and r_half > -1 else math.nan
    a = values.true_advantage.numpy()[values.mask.numpy()]
    se2 = (values.se_before**2 + values.se_after**2).numpy()[values.mask.numpy()]
    return {
        "split_half_r": r_half,
        "reliability": r_full,
        "ceiling": math.sqrt(r_full) if math.isfinite(r_full) and r_full > 0 else math.nan,
        "var_true_advantage": float(a.var()),
        "mean_noise_var": float(se2.mean()),
    }


# ---------------------------------------------------------------------------------------------
# Criteria 1 and 2 for every signal.
# ---------------------------------------------------------------------------------------------


def pivot_tokens(truth: np.ndarray, lengths: np.ndarray, failed: list[int]) -> dict[int, int]:
    """Per failed completion, the token whose ``A*`` is most negative (the first of ties)."""
    return {i: int(np.argmin(truth[i, : int(lengths[i])])) for i in failed if lengths[i] > 0}


def first_wrong_values(values: TokenValues, first_wrong: dict[int, int]) -> dict | None:
    """What the oracle says happens at the first token off the reference scratchpad of each
    failed completion (``first_wrong``, chain only): ``V̂`` before and after that token and
    their change (its ``A*``), how many completions have a later prefix whose ``V̂`` is at
    least 1/2 (success still likely after the first wrong token: the estimate, not the
    outcome, which is 0), and how many have their pivot (the most negative ``A*``) after it."""
    before = values.value_before.numpy()
    after = values.value_after.numpy()
    truth = values.true_advantage.numpy()
    lengths = values.mask.numpy().sum(1)
    rows = [(i, t) for i, t in sorted(first_wrong.items())
            if not bool(values.success[i]) and t < int(lengths[i])]  # fmt: skip
    if not rows:
        return None
    # V̂ is a probability of success: at least 1/2 is success more likely than not (not the
    # reward's success threshold, which decided these completions failed).
    later = [bool((after[i, t : int(lengths[i]) - 1] >= 1 / 2).any()) for i, t in rows]
    return {
        "before": mean_se_record([float(before[i, t]) for i, t in rows]),
        "after": mean_se_record([float(after[i, t]) for i, t in rows]),
        "change": mean_se_record([float(truth[i, t]) for i, t in rows]),
        "recovers": int(sum(later)),
        "pivot_later": int(sum(int(np.argmin(truth[i, : int(lengths[i])])) > t for i, t in rows)),
        "pivot_at": int(sum(int(np.argmin(truth[i, : int(lengths[i])])) == t for i, t in rows)),
        "completions": len(rows),
    }


def score_signals(signals: dict, values: TokenValues, first_wrong: dict[int, int]) -> dict:
    """Criteria 1 and 2 for every algorithm's two signals against one oracle estimate."""
    truth = values.true_advantage.numpy()
    mask = values.mask.numpy()
    lengths = mask.sum(1)
    success = values.success.numpy()
    out: dict[str, Any] = {}
    for name, sig in signals.items():
        trained = [i for i in range(len(lengths)) if bool(sig["trained"][i]) and lengths[i] > 0]
        failed = [i for i in trained if not success[i]]
        pivots = pivot_tokens(truth, lengths, failed)
        wrong = {i: t for i, t in first_wrong.items() if i in set(failed)}
        out[name] = {"trained_completions": len(trained), "failed_completions": len(failed)}
        won = [i for i in trained if success[i]]
        for kind in ("advantages", "credit"):
            s = sig[kind].numpy()
            out[name][kind] = {
                "within": within_completion(s, truth, lengths, trained),
                # The same, split by outcome: credit on successes and blame on failures can
                # agree with A* in one and disagree in the other (GTPO weights them apart).
                "within_success": within_completion(s, truth, lengths, won),
                "within_failure": within_completion(s, truth, lengths, failed),
                "pooled": pooled(s, truth, mask, trained) if trained else None,
                "blame_pivot": blame_shares(s, pivots, lengths),
                "blame_first_wrong": blame_shares(s, wrong, lengths) if wrong else None,
            }
    # The oracle against itself: the blame A* puts on its own pivot (the best a signal can do).
    failed_all = [i for i in range(len(lengths)) if not success[i] and lengths[i] > 0]
    out["_oracle"] = {
        "blame_pivot": blame_shares(truth, pivot_tokens(truth, lengths, failed_all), lengths),
        "blame_first_wrong": blame_shares(
            truth, {i: t for i, t in first_wrong.items() if i in set(failed_all)}, lengths
        )
        if first_wrong
        else None,
        "first_wrong_value": first_wrong_values(values, first_wrong) if first_wrong else None,
    }
    return out
