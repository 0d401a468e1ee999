"""``refimpl.bench.stats``, the one statistics module: what it adds to the ledger's statistics
(the correction for looks, the t interval and p, the bootstrap by unit, rank correlation),
each checked against an independent computation (scipy's, or the definition by hand)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats as sps

from refimpl.bench import stats


def test_one_look_is_the_uncorrected_rule():
    for df in (1, 2, 4, 19, math.inf):
        assert stats.critical(df) == stats.critical(df, looks=1)
        expected = sps.norm.ppf(0.975) if math.isinf(df) else sps.t.ppf(0.975, df)
        assert stats.critical(df) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("looks", [2, 3, 5])
def test_looks_split_alpha_bonferroni(looks):
    """L looks: the bar is t at 1 − 0.025 / L, the MDD rises with it, p is L · p (≤ 1)."""
    assert stats.critical(19, looks) == pytest.approx(sps.t.ppf(1 - 0.025 / looks, 19))
    assert stats.critical(19, looks) > stats.critical(19)
    assert stats.mdd(0.002, 19, looks) == pytest.approx(
        (sps.t.ppf(1 - 0.025 / looks, 19) + sps.t.ppf(0.8, 19)) * 0.002
    )
    p1 = 2 * sps.t.sf(2.48, 19)  # diff / s.e. = -2.48
    assert stats.p_two_sided(-0.0124, 0.005, 19, looks) == pytest.approx(min(1.0, looks * p1))


def test_a_corrected_verdict_is_never_more_decided_than_the_uncorrected_one():
    """A difference between the two bars: decided at one look, not shown at two."""
    se, df = 0.006, 19
    diff = -0.5 * (stats.critical(df) + stats.critical(df, 2)) * se  # between the bars
    assert stats.verdict(diff, se, df, +1) == "contradicted"
    assert stats.verdict(diff, se, df, +1, looks=2) == "not shown"
    c = stats.over_seeds({0: diff - se, 1: diff + se}, looks=2)
    assert c.looks == 2 and c.mdd == stats.mdd(c.se, 1, 2)


@pytest.mark.parametrize("looks", [0, -1, 1.5, True])
def test_a_bad_count_of_looks_is_refused(looks):
    with pytest.raises(ValueError, match="looks"):
        stats.over_seeds({0: 0.1, 1: 0.2}, looks=looks)


def test_the_p_is_below_005_exactly_when_the_verdict_decides():
    rng = np.random.default_rng(1)
    for _ in range(200):
        diff, se, df = rng.normal(0, 0.02), rng.uniform(0.001, 0.02), int(rng.integers(1, 30))
        looks = int(rng.integers(1, 4))
        decided = stats.verdict(diff, se, df, +1, looks) != "not shown"
        assert decided == (stats.p_two_sided(diff, se, df, looks) < 0.05)


def test_the_t_interval_is_diff_plus_minus_t_times_se():
    lo, hi = stats.t_interval(0.008, 0.004, 4, 0.90)
    half = sps.t.ppf(0.95, 4) * 0.004
    assert (lo, hi) == pytest.approx((0.008 - half, 0.008 + half))


def test_the_bootstrap_by_unit_is_seeded_and_draws_whole_units():
    a = stats.bootstrap_indices(7, 50, [3, 7])
    assert a.shape == (50, 7) and a.min() >= 0 and a.max() < 7
    assert (a == stats.bootstrap_indices(7, 50, [3, 7])).all()
    assert not (a == stats.bootstrap_indices(7, 50, [4, 7])).all()
    # replicate after replicate: the first 10 replicates of 50 are the 10 of a run of 10
    assert (a[:10] == stats.bootstrap_indices(7, 10, [3, 7])).all()


def test_exact_spearman_against_scipy_and_every_permutation():
    xs, ys = [0.1, 0.4, 0.2, 0.9, 0.5], [1.0, 3.0, 2.0, 2.0, 5.0]
    rho, p = stats.exact_spearman(xs, ys)
    assert rho == pytest.approx(sps.spearmanr(xs, ys).statistic)
    rank_x, rank_y = sps.rankdata(xs), sps.rankdata(ys)
    null = [np.corrcoef(rank_x, rank_y[list(q)])[0, 1] for q in itertools.permutations(range(5))]
    assert p == pytest.approx(np.mean([abs(v) >= abs(rho) - 1e-12 for v in null]))
    with pytest.raises(ValueError, match="pairs"):
        stats.exact_spearman([1, 2], [2, 1])


def test_paired_over_seeds_pairs_only_the_seeds_both_have():
    c = stats.paired_over_seeds({"0": 0.3, "1": 0.5, "2": 0.1}, {"1": 0.2, "2": 0.3, "9": 1.0})
    assert c.per_seed == {"1": pytest.approx(0.3), "2": pytest.approx(-0.2)}
    assert c.df == 1 and c.diff == pytest.approx(0.05)


def test_two_evaluations_are_compared_only_at_one_point_of_the_grid():
    """Arms evaluated at different steps are refused; the base model's step 0 (the start of
    every grid) pairs with any step."""
    a = {"step": 12, "correct": [3, 1, 4], "n_samples": 4}
    b = {"step": 8, "correct": [2, 1, 4], "n_samples": 4}
    with pytest.raises(ValueError, match="one grid"):
        stats.paired(a, b)
    assert stats.paired(a, {**b, "step": 12})[0] == pytest.approx(1 / 12)
    assert stats.paired(a, {**b, "step": 0})[0] == pytest.approx(1 / 12)
