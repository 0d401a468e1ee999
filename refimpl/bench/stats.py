"""The statistics every page's numbers come from, defined once: docs/claims.md, docs/credit.md
(the credit study and the ceiling), docs/benchmarks.md's verdicts and ``refimpl credit``'s
bootstrap by prompt all call these functions and compute none of their own.

* **The unit.** A difference is paired within a unit and its spread taken over the units: the
  *seed* for trained runs (the arms of a seed share the warm start, the problems and the
  sampling seed), the *prompt* for a credit batch (the G completions of a prompt share it, so
  they are not independent; a mean over completions is taken per prompt first).
* A held-out success is the mean over problems of (correct samples / samples); its s.e. is the
  sample sd of those rates over √problems. A *paired* difference of two arms of one seed is
  the mean over the held-out problems of the per-problem difference of their rates; its s.e.
  is the sd of those differences over √problems.
* Over seeds: the mean of the seeds' paired differences, s.e. = sd over seeds / √n, with
  **n − 1 degrees of freedom**; only the seeds both arms have are paired.
* **The verdict rule**, the one every page applies (``verdict``): Student's t, 95 % two-sided.
  holds when the difference lies more than t₀.₉₇₅,df · s.e. on the claimed side of 0,
  contradicted when as far on the other side, not shown in between. A one-seed comparison has
  no spread between seeds: it uses the s.e. over problems with the normal quantile (1.96), and
  says so.
* **A study extended after a look** (seeds added once the first ones had been read, e.g. the
  ceiling's countdown testbed: seeds 0-4, then 5-19): each look could have stopped the study
  with a verdict, so testing the last look at the full 5 % would spend more than 5 %. The
  correction is **Bonferroni over looks**: with L looks (L ≥ 1) every bar is taken at level
  α / L, t₁₋₀.₀₂₅/L,df in place of t₀.₉₇₅,df, in the verdict, the two-sided p (reported as
  min(1, L · p)) and the MDD alike. By the union bound the chance of any false verdict over the
  L looks is at most α, whatever the looks' spacing; it is conservative (a Pocock boundary is
  less so, but needs equally spaced looks planned in advance, which an extension is not). A
  study run as declared has L = 1 and its figures are unchanged.
* **The minimal detectable difference** (MDD) of a design: the true difference its test
  detects with 80 % power, ≈ (t₁₋₀.₀₂₅/L,df + t₀.₈₀,df) · s.e. (the normal quantiles, 2.80 ·
  s.e., for one seed and one look). The approximation is close: by the noncentral t its power
  is 77 % at 2 degrees of freedom, 79 % at 4, 80 % from 7 on.
* **A t interval** at coverage c: diff ± t₍₁₊c₎/₂,df · s.e. (the ceiling's 90 % intervals).
* **Seeds for 80 % power**: the smallest n with (t₀.₉₇₅,n−1 + t₀.₈₀,n−1) · sd / √n ≤ |mean|,
  at the observed mean difference and sd over seeds; none when the observed mean is 0.
* **A bootstrap by unit** (``bootstrap_indices``): each replicate draws as many units as there
  are, with replacement (a drawn unit brings all its values: a prompt its completions' tokens,
  a seed every arm's run of that seed), from ``numpy.random.default_rng(seed)``, one replicate
  after another, so that a seed gives the same replicates on every machine.
* **Token credit: the prompt is the unit** (``per_unit``, ``share_excess``): a mean over
  completions (a within-completion correlation, the blame on the pivot) is taken per prompt
  first, then over prompts: mean ± s.e. over the prompts (sd / √prompts), **df = prompts − 1**;
  a prompt none of whose completions qualifies (e.g. no failed one, for the blame) is left
  out, and each row says how many prompts and completions it rests on. The top-20 % share
  is a ratio over the batch's tokens, S = Σ_top q / Σ q; its excess over a random 20 %'s
  share f (f = the top's size / the batch's, exactly the expected share of a random subset
  of that size) is Σ_p d_p / Σ q with d_p = Σ_{tokens of prompt p} q (1[top] − f), so its
  s.e. is the cluster-robust one, the s.e. of the d_p over prompts × prompts / Σ q, again at
  df = prompts − 1. A batch of fewer than MIN_PROMPTS prompts is **not testable**: its t bar
  (12.7 at 2 prompts) leaves the test no power, and its few prompts stand for no population.
* **Rank correlation**: Spearman's ρ is Pearson's r of the average ranks (ties share their
  mean rank); across a handful of arms its p is the exact two-sided permutation p over every
  ordering (``exact_spearman``).
* **Times to a threshold are censored.** They are read on the evaluation grid: an arm first at
  or above the threshold at evaluation k crossed it somewhere in (grid[k−1], grid[k]]; one at
  the first evaluation anywhere after the start; one that never got there after the last
  evaluation. A ratio of two such times is then an interval (TEPO's lowest time ÷ the
  baseline's highest, TEPO's highest ÷ the baseline's lowest), and the median of the per-seed
  ratios lies between the median of their lower and the median of their upper bounds.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from refimpl.diagnostics.entropy_attribution import pearson  # the one Pearson's r

#: The one-sided quantile of the verdict rule's bar (95 % two-sided) at one look, and the
#: power of the minimal detectable difference.
LEVEL = 0.975
POWER = 0.80
#: The most permutations ``exact_spearman`` enumerates (10 arms: 3,628,800).
MAX_PERMUTED = 10


def mean_se(values) -> tuple[float, float]:
    """Mean and standard error (sample sd / √n; NaN for fewer than two values)."""
    v = np.asarray(list(values), dtype=float)
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
    return float(v.mean()), se


def rates(evaluation: dict) -> np.ndarray:
    """Per-problem success rates of one held-out evaluation (``n_samples`` per problem)."""
    return np.asarray(evaluation["correct"], dtype=float) / evaluation["n_samples"]


def by_unit(a: dict, b: dict) -> dict:
    """``{unit: (a[unit], b[unit])}`` for every unit (seed or prompt) both have, in the
    units' order: only a unit both sides measured is paired."""
    return {u: (a[u], b[u]) for u in sorted(set(a) & set(b), key=_unit_order)}


def _unit_order(unit):
    return (0, int(unit), "") if str(unit).lstrip("-").isdigit() else (1, 0, str(unit))


def paired(a: dict, b: dict) -> tuple[float, float]:
    """Mean ± s.e. over problems of the per-problem difference of two evaluations (a − b),
    taken at one point of the grid: two trained arms' evaluations at different steps are
    refused (a comparison is made only on one grid). Step 0 is the start every grid shares,
    the base model's evaluation, so a gain over it is read at any step."""
    steps = (a.get("step"), b.get("step"))
    if None not in steps and 0 not in steps and steps[0] != steps[1]:
        raise ValueError(f"paired: the evaluations are at steps {steps[0]} and {steps[1]}; "
                         "a comparison is made on one grid")  # fmt: skip
    ra, rb = rates(a), rates(b)
    if ra.shape != rb.shape:
        raise ValueError("paired: the evaluations cover different numbers of problems")
    return mean_se(ra - rb)


#: The fewest prompts a credit batch needs to be tested (the toy batches' 16; see above).
MIN_PROMPTS = 16


@dataclass(frozen=True)
class Clustered:
    """A mean over units (prompts) of per-unit means: its s.e. over units, df = units − 1."""

    mean: float
    se: float
    units: int  # prompts that contribute
    values: int  # completions (or tokens) behind them

    @property
    def df(self) -> float:
        return self.units - 1 if self.units > 1 else math.nan

    def verdict(self, claimed_sign: int = +1) -> str:
        return verdict(self.mean, self.se, self.df, claimed_sign)

    @property
    def mdd(self) -> float:
        return mdd(self.se, self.df) if self.units > 1 else math.nan


def per_unit(values: dict, unit_of: dict) -> Clustered:
    """``values`` (item → value) averaged per unit (``unit_of[item]``), then mean ± s.e. over
    the units (NaN values are left out)."""
    groups: dict = {}
    for item, v in values.items():
        if math.isfinite(v):
            groups.setdefault(unit_of[item], []).append(v)
    means = [float(np.mean(g)) for g in groups.values()]
    if not means:
        return Clustered(math.nan, math.nan, 0, 0)
    m, se = mean_se(means)
    return Clustered(m, se, len(means), sum(len(g) for g in groups.values()))


def share_excess(weight, selected, unit) -> tuple[float, float, Clustered]:
    """The share S of Σ ``weight`` on the ``selected`` tokens, the share f a random subset of
    their size gets in expectation, and S − f with its cluster-robust s.e. over ``unit`` (the
    module docstring): (S, f, Clustered(S − f, s.e., units, tokens))."""
    w = np.asarray(weight, dtype=float)
    sel = np.asarray(selected, dtype=bool)
    unit = np.asarray(unit)
    total = float(w.sum())
    f = float(sel.mean())
    if not total > 0:
        return math.nan, f, Clustered(math.nan, math.nan, 0, int(w.size))
    d = w * (sel - f)
    units = list(dict.fromkeys(unit.tolist()))
    per = np.array([d[unit == u].sum() for u in units])
    se = (
        float(per.std(ddof=1) / math.sqrt(per.size) * per.size / total)
        if per.size > 1
        else math.nan
    )
    share = float(w[sel].sum() / total)
    return share, f, Clustered(share - f, se, len(units), int(w.size))


def quantile(p: float, df: float) -> float:
    """Student's t quantile at ``df`` degrees of freedom; the normal one for ``df = inf``."""
    return float(scipy_stats.norm.ppf(p) if math.isinf(df) else scipy_stats.t.ppf(p, df))


def level(looks: int = 1) -> float:
    """The one-sided quantile of the bar after ``looks`` looks: 1 − 0.025 / looks (Bonferroni
    over looks, the module docstring; 0.975 for a study run as declared)."""
    if isinstance(looks, bool) or not isinstance(looks, int) or looks < 1:
        raise ValueError(f"looks: expected an int >= 1, got {looks!r}")
    return 1 - (1 - LEVEL) / looks


def critical(df: float, looks: int = 1) -> float:
    """The verdict's bar in s.e.: t₀.₉₇₅,df at one look (1.96 for the normal)."""
    return quantile(level(looks), df)


def mdd(se: float, df: float, looks: int = 1) -> float:
    """The minimal detectable difference: (t₁₋₀.₀₂₅/looks,df + t₀.₈₀,df) · s.e."""
    return (quantile(level(looks), df) + quantile(POWER, df)) * se


def t_stat(diff: float, se: float) -> float:
    """diff / s.e.; NaN without a positive s.e."""
    return diff / se if se > 0 else math.nan


def p_two_sided(diff: float, se: float, df: float, looks: int = 1) -> float:
    """The two-sided p of diff / s.e. at ``df``, times ``looks`` (at most 1): below 0.05
    exactly when ``verdict`` is not "not shown"."""
    t = t_stat(diff, se)
    if not math.isfinite(t):
        return math.nan
    sf = scipy_stats.norm.sf(abs(t)) if math.isinf(df) else scipy_stats.t.sf(abs(t), df)
    return float(min(1.0, looks * 2 * sf))


def t_interval(diff: float, se: float, df: float, coverage: float = 0.90) -> tuple[float, float]:
    """diff ± t₍₁₊coverage₎/₂,df · s.e."""
    half = quantile((1 + coverage) / 2, df) * se
    return diff - half, diff + half


def verdict(diff: float, se: float, df: float, claimed_sign: int = +1, looks: int = 1) -> str:
    """holds / contradicted / not shown: |diff| beyond t₁₋₀.₀₂₅/looks,df · s.e. (module
    docstring); "not measured" without a finite difference, s.e. and positive df."""
    if not (math.isfinite(diff) and math.isfinite(se)) or not df > 0:
        return "not measured"
    if se > 0:
        z = claimed_sign * diff / se
    else:  # no spread: any difference is beyond the bar, and none (0 ± 0) is not shown
        z = math.copysign(math.inf, claimed_sign * diff) if diff != 0 else 0.0
    bar = critical(df, looks)
    return "holds" if z > bar else "contradicted" if z < -bar else "not shown"


def seeds_for_power(mean: float, sd: float, n_max: int = 1_000_000) -> float | None:
    """The fewest paired seeds n whose MDD, (t₀.₉₇₅,n−1 + t₀.₈₀,n−1) · sd / √n, is at most
    |mean|; None when the mean is 0 (no n), ``math.inf`` beyond ``n_max``. The MDD falls as n
    grows, so the first such n is found by bisection."""
    if not (math.isfinite(mean) and math.isfinite(sd)):
        return math.nan
    if mean == 0:
        return None

    def enough(n: int) -> bool:
        return mdd(sd / math.sqrt(n), n - 1) <= abs(mean)

    if enough(2):
        return 2
    if not enough(n_max):
        return math.inf
    lo, hi = 2, n_max  # enough(lo) is False, enough(hi) is True
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi


@dataclass(frozen=True)
class Comparison:
    """A difference with its uncertainty: per seed, and the figure the verdict judges."""

    per_seed: dict  # seed → difference
    per_seed_se: dict  # seed → its s.e. over problems (empty where there is none)
    diff: float
    se: float
    df: float  # n − 1 over seeds; inf: one seed, s.e. over problems, normal quantile
    sd: float  # sd over seeds (NaN for one seed)
    #: seeds both arms have but left out of the difference: their two runs ran on different
    #: machines (a pair is compared only on one machine)
    left_out: tuple = ()
    #: how often the study was read before it stopped (seeds added after a look: > 1); every
    #: bar is Bonferroni-corrected for them (the module docstring)
    looks: int = 1

    @property
    def n(self) -> int:
        return len(self.per_seed)

    @property
    def one_seed(self) -> bool:
        return math.isinf(self.df)

    def verdict(self, claimed_sign: int = +1) -> str:
        return verdict(self.diff, self.se, self.df, claimed_sign, self.looks)

    @property
    def mdd(self) -> float:
        return mdd(self.se, self.df, self.looks)

    @property
    def t(self) -> float:
        return t_stat(self.diff, self.se)

    @property
    def p(self) -> float:
        """The two-sided p, corrected for the looks (``p_two_sided``)."""
        return p_two_sided(self.diff, self.se, self.df, self.looks)

    def interval(self, coverage: float = 0.90) -> tuple[float, float]:
        return t_interval(self.diff, self.se, self.df, coverage)

    @property
    def seeds_needed(self) -> float | None:
        return math.nan if self.one_seed else seeds_for_power(self.diff, self.sd)


def over_seeds(per_seed: dict, per_seed_se: dict | None = None, looks: int = 1) -> Comparison:
    """The mean of the seeds' differences, s.e. = sd / √n, n − 1 degrees of freedom; a single
    seed keeps its s.e. over problems (``per_seed_se``), judged with the normal quantile.
    ``looks``: how often the study was read (the module docstring's correction)."""
    level(looks)  # refuses a bad count before anything is computed
    per_seed_se = dict(per_seed_se or {})
    values = list(per_seed.values())
    if len(values) > 1:
        d, se = mean_se(values)
        sd = float(np.std(values, ddof=1))
        return Comparison(dict(per_seed), per_seed_se, d, se, len(values) - 1, sd, looks=looks)
    if len(values) == 1:
        ((seed, d),) = per_seed.items()
        return Comparison(dict(per_seed), per_seed_se, d, per_seed_se.get(seed, math.nan),
                          math.inf, math.nan, looks=looks)  # fmt: skip
    return Comparison({}, {}, math.nan, math.nan, math.nan, math.nan, looks=looks)


def paired_over_seeds(a: dict, b: dict, looks: int = 1) -> Comparison:
    """a − b paired by seed (``a``, ``b``: seed → figure) over the seeds both have."""
    return over_seeds({u: x - y for u, (x, y) in by_unit(a, b).items()}, looks=looks)


# --------------------------------------------------------------------------------------------
# One grid: curves evaluated at different points, read at the same ones
# --------------------------------------------------------------------------------------------
def common_grid(runs: list[dict]) -> np.ndarray:
    """The sampled-token points every run of ``runs`` is read at: from 0 to the earliest last
    evaluation among them, in as many equal steps as the fewest evaluations after the start
    that any of them has. No arm is then read finer than the coarsest arm was evaluated, and
    none past where every arm has an evaluation."""
    end = min(float(r["curve_tokens"][-1]) for r in runs)
    n = min(len(r["curve_tokens"]) - 1 for r in runs)
    return np.linspace(0.0, end, n + 1)


def on_grid(run: dict, grid: np.ndarray) -> np.ndarray:
    """A run's held-out success at the ``grid``'s token points, linear in sampled tokens
    between its two evaluations around each point (its own evaluations where they fall on
    it)."""
    return np.interp(grid, run["curve_tokens"], run["curve_success"])


# --------------------------------------------------------------------------------------------
# The bootstrap by unit, and rank correlation
# --------------------------------------------------------------------------------------------
def bootstrap_indices(units: int, draws: int, seed) -> np.ndarray:
    """``draws`` replicates of ``units`` unit indices drawn with replacement, shape
    ``[draws, units]``: replicate after replicate from ``numpy.random.default_rng(seed)``
    (``seed``: anything ``default_rng`` takes, e.g. ``[seed, units]``)."""
    if units < 1 or draws < 1:
        raise ValueError(f"bootstrap_indices: expected units, draws >= 1, got {units}, {draws}")
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(units, size=units) for _ in range(draws)])


def ranks(x) -> np.ndarray:
    """Average ranks from 0 (ties share their mean rank), for Spearman's correlation."""
    x = np.asarray(x, dtype=float)
    order = np.argsort(x, kind="mergesort")
    out = np.empty(len(x))
    sorted_x = x[order]
    start = 0
    for end in range(1, len(x) + 1):
        if end == len(x) or sorted_x[end] != sorted_x[start]:
            out[order[start:end]] = (start + end - 1) / 2.0
            start = end
    return out


def spearman(x, y) -> float:
    """Spearman's ρ: Pearson's r of the average ranks."""
    return pearson(ranks(x), ranks(y))


def exact_spearman(xs, ys) -> tuple[float, float]:
    """Spearman's ρ and its exact two-sided permutation p: the share of all orderings of
    ``ys`` whose |ρ| reaches the observed one (at most ``MAX_PERMUTED`` values)."""
    if len(xs) != len(ys) or not 2 < len(xs) <= MAX_PERMUTED:
        raise ValueError(f"exact_spearman: expected 3 to {MAX_PERMUTED} pairs, got {len(xs)}")
    rx, ry = ranks(xs), ranks(ys)
    r = pearson(rx, ry)
    # Pearson's r of rx with every ordering of ry at once (one row each; NaN without spread)
    y = ry[np.array(list(itertools.permutations(range(len(ry)))))]
    x, y = rx - rx.mean(), y - y.mean(axis=1, keepdims=True)
    denom = np.sqrt((x * x).sum() * (y * y).sum(axis=1))
    null = np.divide(y @ x, denom, out=np.full(len(y), np.nan), where=denom > 0)
    return r, float(np.mean(np.abs(null) >= abs(r) - 1e-12))


# --------------------------------------------------------------------------------------------
# Censored times and their ratios
# --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Interval:
    """A time to the threshold known only to lie in (lo, hi]; hi = inf: never reached."""

    lo: float
    hi: float

    @property
    def reached(self) -> bool:
        return math.isfinite(self.hi)


def crossing(grid: list[float], first: int | None) -> Interval:
    """The interval of a time read on ``grid`` (grid[0] is the start, 0): first at or above the
    threshold at evaluation ``first`` (an index ≥ 1), or never (None)."""
    if first is None:
        return Interval(float(grid[-1]), math.inf)
    if first < 1:
        raise ValueError("crossing: the start (grid[0]) is below the threshold by definition")
    return Interval(float(grid[first - 1]), float(grid[first]))


def _div(x: float, y: float) -> float:
    """x / y for non-negative times: x / 0 = inf (x > 0), x / inf = 0, inf / y = inf."""
    if math.isinf(y):
        return 0.0 if math.isfinite(x) else math.nan
    if y == 0:
        return math.inf
    return x / y


def ratio_bounds(t: Interval, b: Interval) -> tuple[float, float]:
    """The interval (lo, hi) of t / b, both censored times: (t.lo / b.hi, t.hi / b.lo)."""
    lo = _div(t.lo, b.hi)
    hi = _div(t.hi, b.lo)
    return (0.0 if math.isnan(lo) else lo), (math.inf if math.isnan(hi) else hi)


def median_bounds(bounds: list[tuple[float, float]]) -> tuple[float, float]:
    """The median of per-seed ratios known to lie in their bounds: between the median of the
    lower and the median of the upper bounds (the median rises with each of its values)."""
    los = [lo for lo, _ in bounds]
    his = [hi for _, hi in bounds]
    return float(np.median(los)), float(np.median(his))


def speed_verdict(lo: float, hi: float) -> str:
    """On "half the time": holds when the median ratio is bounded at or below 0.5,
    contradicted when bounded at or above 1 (not faster), not shown otherwise, with what the
    data bound."""
    if hi <= 0.5:
        return "holds"
    if lo >= 1:
        return "contradicted"
    return f"not shown ({describe_bounds(lo, hi)})"


def _floor2(x: float) -> float:
    return math.floor(round(x * 100, 9)) / 100


def _ceil2(x: float) -> float:
    return math.ceil(round(x * 100, 9)) / 100


def fmt_bounds(lo: float, hi: float) -> str:
    """A ratio known to lie in (lo, hi), rounded outwards to two decimals so that the printed
    bounds still hold (0.9956 is "> 0.99", never "> 1.00")."""
    if lo <= 0 and math.isinf(hi):
        return "unbounded"
    if lo <= 0:
        return f"< {_ceil2(hi):.2f}"
    if math.isinf(hi):
        return f"> {_floor2(lo):.2f}"
    return f"{_floor2(lo):.2f}–{_ceil2(hi):.2f}"


def describe_bounds(lo: float, hi: float, what: str = "median ratio") -> str:
    if lo <= 0 and math.isinf(hi):
        return f"the data do not bound the {what}"
    if lo <= 0 or math.isinf(hi):
        return f"{what} {fmt_bounds(lo, hi)}"
    return f"{what} between {_floor2(lo):.2f} and {_ceil2(hi):.2f}"
