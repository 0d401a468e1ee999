"""pass@k (``refimpl/evaluate.py``) and the log-prob/advantage covariance
(``refimpl/diagnostics/metrics.py``)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl.diagnostics.metrics import logp_advantage_covariance
from refimpl.evaluate import PASS_AT_K, mean_pass_at_k, pass_at_k


@st.composite
def samples_and_k(draw):
    n = draw(st.integers(1, 10))
    c = draw(st.integers(0, n))
    k = draw(st.integers(1, n))
    return n, c, k


@given(samples_and_k())
def test_pass_at_k_equals_brute_force_enumeration(nck):
    """pass@k is the fraction of the C(n, k) ways to pick k of the n samples that contain at
    least one correct sample (Chen et al., Eq. 1): enumerate every k-subset and count."""
    n, c, k = nck
    outcomes = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    hits = sum(any(outcomes[j] for j in s) for s in subsets)
    assert pass_at_k(n, c, k) == pytest.approx(hits / len(subsets), abs=1e-12)


@given(samples_and_k())
def test_pass_at_one_is_the_success_fraction(nck):
    """pass@1 = c/n, the mean success of a single sample."""
    n, c, _ = nck
    assert pass_at_k(n, c, 1) == pytest.approx(c / n, abs=1e-12)


@given(samples_and_k())
def test_pass_at_k_is_non_decreasing_in_k(nck):
    """More tries never hurt: pass@k ≤ pass@(k+1)."""
    n, c, _ = nck
    values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
    assert all(a <= b + 1e-12 for a, b in zip(values, values[1:]))


def test_pass_at_k_hand_values():
    """n = 4, c = 1: pass@2 = 1 − C(3,2)/C(4,2) = 1 − 3/6 = 0.5; n = 16, c = 0: 0; c = n: 1."""
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(16, 0, 16) == 0.0
    assert pass_at_k(16, 16, 1) == 1.0
    # n = 16, c = 2, k = 8: 1 − C(14,8)/C(16,8) = 1 − 3003/12870
    assert pass_at_k(16, 2, 8) == pytest.approx(1 - 3003 / 12870)


def test_pass_at_k_large_n_is_stable():
    """The product form needs no big binomials: n = 10,000 matches math.comb."""
    n, c, k = 10_000, 37, 16
    exact = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert pass_at_k(n, c, k) == pytest.approx(exact, rel=1e-12)


@pytest.mark.parametrize(
    "n, c, k, argument",
    [(16, 17, 1, "c"), (16, -1, 1, "c"), (16, 2, 17, "k"), (16, 2, 0, "k"), (0, 0, 1, "n")],
)
def test_pass_at_k_rejects_bad_counts(n, c, k, argument):
    with pytest.raises(ValueError, match=rf"^{argument}:"):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_over_problems():
    """Two problems with n = 16: one never solved, one always: every pass@k is 0.5."""
    out = mean_pass_at_k([0, 16], 16)
    assert set(out) == set(PASS_AT_K)
    assert all(v == pytest.approx(0.5) for v in out.values())


def test_covariance_hand_computed():
    """Three response tokens (one padding): logp = (−1, −2, −3), A = (1, 0, −1).
    means −2 and 0; centred products (1·1, 0·0, (−1)·(−1)) → mean 2/3. Padding ignored."""
    logp = torch.tensor([[-1.0, -2.0], [-3.0, 99.0]])
    adv = torch.tensor([[1.0, 0.0], [-1.0, 50.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    assert logp_advantage_covariance(logp, adv, mask) == pytest.approx(2 / 3)


def test_covariance_sign_follows_confidence_of_rewarded_tokens():
    """Rewarding the likely tokens (A high where logp high) gives cov > 0 (entropy falls);
    rewarding the unlikely ones gives cov < 0."""
    logp = torch.tensor([[-0.1, -3.0, -0.2, -2.5]])
    mask = torch.ones_like(logp)
    confident = torch.tensor([[1.0, -1.0, 1.0, -1.0]])
    assert logp_advantage_covariance(logp, confident, mask) > 0
    assert logp_advantage_covariance(logp, -confident, mask) < 0


def test_covariance_of_constant_advantage_is_zero():
    """GRPO with one completion per row of equal advantage: no covariance."""
    logp = torch.randn(3, 5, generator=torch.Generator().manual_seed(0)).abs().neg()
    mask = torch.ones_like(logp)
    assert logp_advantage_covariance(logp, torch.full_like(logp, 0.7), mask) == pytest.approx(
        0.0, abs=1e-12
    )


def test_covariance_empty_batch_is_zero():
    z = torch.zeros(2, 3)
    assert logp_advantage_covariance(z, z, z) == 0.0
