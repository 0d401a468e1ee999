"""GTPO's own invariants (``refimpl/algorithms/gtpo.py``; docs/algorithms/gtpo.md; Eq. 2/3/4).

The common invariants (reference == vectorised, padding, permutations, group independence,
finiteness, on-policy gradient) are in ``test_common.py``. Notation as in the module:
``O⁺``/``O⁻`` successful/failed completions of a group, ``d_t``/``h_t`` how many of them are
active at position ``t``, ``H̃ = H + eps_H``.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl import core
from refimpl.algorithms import gtpo
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import flush_tiny_entropies, rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")

STATS = gtpo.STATS


def _groups(x: torch.Tensor, G: int) -> torch.Tensor:
    return core.group_view(x, G)


def _active_counts(batch: RolloutBatch, threshold: float = 0.5) -> tuple[torch.Tensor, ...]:
    """``(d_t, h_t)`` as ``[N, T]``, counted directly from the mask and the rewards."""
    G = batch.group_size
    m = _groups(batch.response_mask, G)
    succ = _groups((batch.rewards >= threshold).float(), G)[:, :, None]
    return (m * succ).sum(1), (m * (1 - succ)).sum(1)


# ---------------------------------------------------------------------------------------------
# Token rewards (Eq. 2 and 3)
# ---------------------------------------------------------------------------------------------


@given(rollout_batches(binary_rewards=True), st.floats(0.0, 1.0))
def test_conservation_successful_tokens(batch, alpha_2):
    """§2.4.2: with α₁ + α₂ = 1 and binary rewards, the successful token rewards at
    each position sum to ``d_t``.

    Derivation (Eq. 2): Σ_{i∈O⁺ active at t} r⁺[i,t] = α₁·Σ r_i + α₂·d_t·Σ_i H̃_i/Σ_k H̃_k
    = α₁·d_t + α₂·d_t = d_t, since every r_i = 1 in O⁺ and the entropy weights sum to 1
    (H̃ ≥ eps_H > 0, so the sum never vanishes: exact for every entropy, zeros included).
    """
    cfg = gtpo.Config(alpha_1=1.0 - alpha_2, alpha_2=alpha_2)
    r_plus, _ = gtpo.token_rewards(batch, cfg)
    d_t, _ = _active_counts(batch)
    total = _groups(r_plus, batch.group_size).sum(dim=1)
    torch.testing.assert_close(total, d_t.double(), rtol=1e-9, atol=1e-9)


@given(rollout_batches(), st.floats(0.0, 1.0))
def test_conservation_failed_tokens(batch, alpha_2):
    """The failed-side identity: with α₁ + α₂ = 1, Σ_{j∈O⁻ active at t} r⁻[j,t] = −h_t.

    Derivation (Eq. 3): Σ_j r⁻[j,t] = −α₁·h_t − α₂·h_t·Σ_j (1/H̃_j)/Σ_k (1/H̃_k) = −h_t.
    r⁻ does not involve r_j, so this holds for any rewards, not only binary ones.
    """
    cfg = gtpo.Config(alpha_1=1.0 - alpha_2, alpha_2=alpha_2)
    _, r_minus = gtpo.token_rewards(batch, cfg)
    _, h_t = _active_counts(batch)
    total = _groups(r_minus, batch.group_size).sum(dim=1)
    torch.testing.assert_close(total, -h_t.double(), rtol=1e-9, atol=1e-9)


@given(rollout_batches(), st.floats(0.0, 2.0), st.floats(0.01, 2.0))
def test_token_rewards_supported_on_own_subgroup(batch, alpha_1, alpha_2):
    """r⁺ is 0 on every token that is not an active token of O⁺, and r⁻ on every token that is
    not an active token of O⁻ (each is defined on its own subgroup: docs/algorithms/gtpo.md)."""
    cfg = gtpo.Config(alpha_1=alpha_1, alpha_2=alpha_2)
    r_plus, r_minus = gtpo.token_rewards(batch, cfg)
    active = batch.response_mask.bool()
    succ = (batch.rewards >= cfg.success_threshold)[:, None]
    assert bool((r_plus[~(active & succ)] == 0).all())
    assert bool((r_minus[~(active & ~succ)] == 0).all())


def _pairs_at_same_position(batch: RolloutBatch, successful: bool):
    """Yield ``(i, k, t)``: two distinct completions of one group, both in O⁺ (or both in O⁻),
    both active at ``t``, with equal rewards."""
    G = batch.group_size
    m, r = batch.response_mask, batch.rewards.tolist()
    for g in range(batch.num_groups):
        rows = [i for i in range(g * G, g * G + G) if (r[i] >= 0.5) == successful]
        for t in range(m.shape[1]):
            act = [i for i in rows if m[i, t] == 1]
            for i in act:
                for k in act:
                    if i != k and r[i] == r[k]:
                        yield i, k, t


@given(rollout_batches(entropy_regime="ordinary"), st.floats(0.01, 1.0))
def test_successful_reward_increases_with_entropy(batch, alpha_2):
    """Monotonicity (Eq. 2): at one position, among successful completions with the same
    reward, the higher-entropy token gets the larger r⁺.

    r⁺[i,t] − r⁺[k,t] = α₂·d_t·(H̃[i,t] − H̃[k,t]) / Σ H̃: the sign of the entropy difference
    when α₂ > 0 (strictly, when the difference is not lost to rounding).
    """
    cfg = gtpo.Config(alpha_2=alpha_2)
    r_plus, _ = gtpo.token_rewards(batch, cfg)
    H = batch.entropy_old.double()
    for i, k, t in _pairs_at_same_position(batch, successful=True):
        if H[i, t] > H[k, t] * (1 + 1e-6):
            assert r_plus[i, t] > r_plus[k, t]


@given(rollout_batches(entropy_regime="ordinary"), st.floats(0.01, 1.0))
def test_failed_reward_more_negative_for_lower_entropy(batch, alpha_2):
    """Confident mistakes cost more (Eq. 3): at one position, among failed completions, the
    lower-entropy token gets the more negative r⁻.

    r⁻[j,t] − r⁻[k,t] = −α₂·h_t·(1/H̃[j,t] − 1/H̃[k,t]) / Σ 1/H̃ < 0 when H[j,t] < H[k,t].
    """
    cfg = gtpo.Config(alpha_2=alpha_2)
    _, r_minus = gtpo.token_rewards(batch, cfg)
    H = batch.entropy_old.double()
    for j, k, t in _pairs_at_same_position(batch, successful=False):
        if H[j, t] * (1 + 1e-6) < H[k, t]:
            assert r_minus[j, t] < r_minus[k, t]


# ---------------------------------------------------------------------------------------------
# Advantages (Eq. 4)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("stats", STATS)
@pytest.mark.parametrize("negative_shaping", gtpo.NEGATIVE_SHAPING)
@pytest.mark.parametrize("entropy_mean", gtpo.ENTROPY_MEANS)
@given(batch=rollout_batches(), k=st.integers(-3, 3))
def test_advantages_invariant_to_scaling_entropies(stats, negative_shaping, entropy_mean, batch, k):
    """Scaling every rollout entropy by c > 0 leaves the advantages unchanged (as eps_H → 0).

    Derivation: the entropy weights H̃_i/Σ H̃_k and (1/H̃_j)/Σ(1/H̃_k) are homogeneous of degree
    0 in H when H̃ = H, so r⁺, r⁻ and hence A (Eq. 4) do not change. With H̃ = H + eps_H the
    floor does not scale, so the identity is exact only as eps_H → 0: the test uses
    eps_H = 1e-30 and sets every entropy below 1e-20 to exact 0 first, so that each non-zero
    entropy absorbs the floor in float64 (a zero entropy gets weight ≈ 1e-30/ΣH either way),
    and c = 2^k, which scales float32 entropies ≥ 1e-20 exactly (a subnormal would lose bits).
    So the computation is the same up to the negligible floor. §2.4.1's geometric weights
    H̃/GM(H̃) are homogeneous of degree 0 too, but a zero entropy's floor enters the geometric
    mean as a factor (eps_H^(1/d_t)) that does not scale: there the identity needs every active
    entropy positive, so the test sets the zeros to 1 first.
    """
    cfg = gtpo.Config(
        stats=stats,
        negative_shaping=negative_shaping,
        entropy_mean=entropy_mean,
        entropy_eps=1e-30,
    )
    batch = flush_tiny_entropies(batch)  # the derivation needs H = 0 or H ≫ eps_H
    if entropy_mean == "geometric":
        batch = batch.replace(
            entropy_old=torch.where(batch.entropy_old == 0, 1.0, batch.entropy_old)
        )
    scaled = batch.replace(entropy_old=batch.entropy_old * 2.0**k)
    torch.testing.assert_close(
        gtpo.advantages(scaled, cfg), gtpo.advantages(batch, cfg), rtol=1e-5, atol=1e-5
    )


def _token_zscore(batch: RolloutBatch, eps: float) -> torch.Tensor:
    """Token-level DAPO-style advantage, independently: per group, the z-score of r_i over
    all active tokens of the group (every token one sample; unbiased std; 0 if degenerate)."""
    G = batch.group_size
    out = torch.zeros_like(batch.response_mask, dtype=torch.float64)
    for g in range(batch.num_groups):
        samples = [
            (i, t)
            for i in range(g * G, g * G + G)
            for t in range(batch.response_mask.shape[1])
            if batch.response_mask[i, t]
        ]
        values = [float(batch.rewards[i]) for i, _ in samples]
        if len(values) < 2 or max(values) == min(values):
            continue
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1))
        for (i, t), v in zip(samples, values):
            out[i, t] = (v - mean) / (std + eps)
    return out


@pytest.mark.parametrize("negative_shaping", gtpo.NEGATIVE_SHAPING)
@given(batch=rollout_batches(binary_rewards=True), alpha_1=st.sampled_from([0.5, 1.0, 3.0]))
def test_alpha2_zero_reduces_to_token_level_zscore(negative_shaping, batch, alpha_1):
    """Exact reduction: with α₂ = 0, stats="group" and binary rewards, GTPO's advantage is the
    token-level group z-score of the reward (DAPO's advantage with tokens as the samples),
    with eps/α₁ in the denominator.

    Derivation: r⁺ = α₁·y on every active token (y = 1[i ∈ O⁺] = r_i), r⁻ = −α₁·(1 − y). Let
    L tokens be active in the group, a fraction p of them successful, s² = L·p(1−p)/(L−1) the
    unbiased variance of y. Over all L tokens, mean(R⁺) = α₁p, std(R⁺) = α₁s, so
    A⁺ = α₁(1 − p)/(α₁s + eps) = (1 − p)/(s + eps/α₁); mean(R⁻) = −α₁(1 − p), std(R⁻) = α₁s,
    so A⁻ = (−α₁ + α₁(1 − p))/(α₁s + eps) = −p/(s + eps/α₁). Both are (y − p)/(s + eps/α₁).
    With negative_shaping="none" a failed token gets (0 − α₁p)/(α₁s + eps): the same value.
    A group with p ∈ {0, 1} has zero variance on both sides: 0, like the z-score.
    """
    cfg = gtpo.Config(
        alpha_1=alpha_1, alpha_2=0.0, stats="group", negative_shaping=negative_shaping
    )
    expected = _token_zscore(batch, cfg.eps / alpha_1).float()
    torch.testing.assert_close(gtpo.advantages(batch, cfg), expected, rtol=1e-5, atol=1e-5)


@given(rollout_batches())
def test_stats_group_normalises_over_all_tokens(batch):
    """stats="group" [A]: mean(R⁺), std(R⁺) run over every active token of the group, the zeros
    of O⁻ included: a successful token's A is (r⁺ − mean)/(std + eps) over all G completions'
    tokens (0 when that set has zero variance)."""
    cfg = gtpo.Config(stats="group")
    r_plus, _ = gtpo.token_rewards(batch, cfg)
    A = gtpo.advantages(batch, cfg).double()
    G, m = batch.group_size, batch.response_mask
    for g in range(batch.num_groups):
        rows = range(g * G, g * G + G)
        R = [float(r_plus[i, t]) for i in rows for t in range(m.shape[1]) if m[i, t]]
        if len(R) < 2 or max(R) == min(R):
            continue
        mean = sum(R) / len(R)
        std = math.sqrt(sum((v - mean) ** 2 for v in R) / (len(R) - 1))
        for i in rows:
            if batch.rewards[i] >= 0.5:
                for t in range(m.shape[1]):
                    if m[i, t]:
                        expected = (float(r_plus[i, t]) - mean) / (std + cfg.eps)
                        assert A[i, t].item() == pytest.approx(expected, rel=1e-5, abs=1e-5)


@given(rollout_batches(), st.floats(0.01, 1.0))
def test_stats_subgroup_zero_mean_per_subgroup(batch, alpha_2):
    """stats="subgroup" [A]: each subgroup is normalised over its own tokens only, so the
    advantages of O⁺'s active tokens sum to 0, and so do O⁻'s (Σ (x − mean) = 0 over the set
    the mean was taken on; a degenerate set gives all zeros, which also sum to 0)."""
    cfg = gtpo.Config(stats="subgroup", alpha_2=alpha_2)
    A = _groups(gtpo.advantages(batch, cfg).double(), batch.group_size)
    succ = _groups(batch.rewards >= 0.5, batch.group_size)[:, :, None]
    m = _groups(batch.response_mask.bool(), batch.group_size)
    for subgroup in (succ, ~succ):
        total = torch.where(m & subgroup, A, 0.0).sum(dim=(1, 2))
        scale = 1.0 + torch.where(m & subgroup, A.abs(), 0.0).sum(dim=(1, 2))
        assert bool((total.abs() <= 1e-5 * scale).all())


@pytest.mark.parametrize("stats", STATS)
@given(batch=rollout_batches())
def test_negative_shaping_none_zeroes_failed_rewards(stats, batch):
    """negative_shaping="none" (the early form): r⁻ ≡ 0, and r⁺ is the same as under "paper"
    (the switch touches only the failed side, Eq. 3)."""
    paper, none = gtpo.Config(stats=stats), gtpo.Config(stats=stats, negative_shaping="none")
    r_plus_paper, _ = gtpo.token_rewards(batch, paper)
    r_plus, r_minus = gtpo.token_rewards(batch, none)
    assert bool((r_minus == 0).all())
    assert torch.equal(r_plus, r_plus_paper)


@pytest.mark.parametrize("stats", STATS)
@given(batch=rollout_batches())
def test_negative_shaping_none_failed_tokens_get_normalised_zero(stats, batch):
    """With negative_shaping="none" the early form's one reward is r⁺ (0 on failed tokens), and
    a failed token's advantage is the normalisation of its 0 within its own set [A]:
    stats="group": −mean(R⁺)/(std(R⁺) + eps) over the group's active tokens, one value for all
    its failed tokens; stats="subgroup" and "batch": O⁻'s tokens (of the group, of the batch),
    all 0, so exactly 0. Successful tokens
    keep their "paper" advantage (A⁺ does not involve R⁻)."""
    paper, none = gtpo.Config(stats=stats), gtpo.Config(stats=stats, negative_shaping="none")
    A_paper, A = gtpo.advantages(batch, paper), gtpo.advantages(batch, none)
    r_plus, _ = gtpo.token_rewards(batch, none)
    m, G = batch.response_mask.bool(), batch.group_size
    succ = (batch.rewards >= 0.5)[:, None]
    torch.testing.assert_close(A[m & succ], A_paper[m & succ], rtol=0, atol=0)
    for g in range(batch.num_groups):
        rows = slice(g * G, g * G + G)
        R = r_plus[rows][m[rows]]
        if stats in ("subgroup", "batch") or R.numel() < 2 or R.max() == R.min():
            expected = 0.0
        else:
            expected = float(-R.mean() / (R.std(unbiased=True) + none.eps))
        failed = A[rows][(m & ~succ)[rows]]
        torch.testing.assert_close(
            failed.double(), torch.full_like(failed, expected).double(), rtol=1e-5, atol=1e-5
        )


def test_subgroup_none_bounded_when_entropies_differ_by_one_ulp():
    """The regression the early form's old reading had: stats="subgroup", "none", two
    successful completions whose entropies differ by one float32 ulp. O⁺'s rewards then differ
    by ~1e-8, and normalising a failed token's 0 with O⁺'s statistics (a set it is not in)
    gave −1.1e6. Now the failed tokens get 0 and the successful ones a z-score within O⁺,
    bounded by (L − 1)/√L = 1/√2 for L = 2 tokens."""
    h = torch.tensor(1.0)
    entropy = torch.stack([h, torch.nextafter(h, torch.tensor(2.0)), h, h])[:, None]
    batch = RolloutBatch(
        response_ids=torch.zeros(4, 1, dtype=torch.long),
        response_mask=torch.ones(4, 1),
        rewards=torch.tensor([1.0, 1.0, 0.0, 0.0]),
        logp_old=-torch.ones(4, 1),
        entropy_old=entropy,
        group_size=4,
    )
    A = gtpo.advantages(batch, gtpo.Config(stats="subgroup", negative_shaping="none"))
    assert A[2:].abs().max().item() == 0.0
    assert A[:2].abs().max().item() <= 1 / math.sqrt(2) + 1e-6


def test_success_split_on_outcome_and_shaping_reaches_successes_only():
    """With overlong shaping the trainer keeps the outcome (``outcome_rewards``): O⁺/O⁻ are
    decided on it, as dynamic sampling decides. A truncated correct answer shaped to
    r = 0.25 (below 0.5) stays in O⁺, with r⁺ = α₁·0.25 + α₂·(its entropy share)·d_t (Eq. 2
    reads r_i); a truncated wrong answer shaped to −0.5 stays in O⁻ with r⁻ unchanged, since
    Eq. 3 has no r_j: the penalty reaches successful completions only.
    Here G = 4, one token each, equal entropies: d = h = 2, each share 1/2, so with α₁ = 1,
    α₂ = 0.1: r⁺ = 1 + 0.1 = 1.1 (o1) and 0.25 + 0.1 = 0.35 (o2); r⁻ = −1 − 0.1 = −1.1 for o3
    and o4 whatever their shaped rewards."""
    outcome = torch.tensor([1.0, 1.0, 0.0, 0.0])
    shaped = torch.tensor([1.0, 0.25, 0.0, -0.5])
    batch = RolloutBatch(
        response_ids=torch.zeros(4, 1, dtype=torch.long),
        response_mask=torch.ones(4, 1),
        rewards=shaped,
        logp_old=-torch.ones(4, 1),
        entropy_old=torch.ones(4, 1),
        group_size=4,
        outcome_rewards=outcome,
    )
    cfg = gtpo.Config(entropy_eps=1e-12)
    r_plus, r_minus = gtpo.token_rewards(batch, cfg)
    torch.testing.assert_close(r_plus[:, 0], torch.tensor([1.1, 0.35, 0.0, 0.0]).double())
    torch.testing.assert_close(r_minus[:, 0], torch.tensor([0.0, 0.0, -1.1, -1.1]).double())
    torch.testing.assert_close(gtpo.advantages(batch, cfg), gtpo.reference_advantages(batch, cfg))


@given(rollout_batches(binary_rewards=True, equal_groups=True))
def test_group_without_success_has_zero_positive_part(batch):
    """A group with no successful completion has A⁺ ≡ 0 (docs/algorithms/gtpo.md): r⁺ ≡ 0 on it, so with
    the failed side switched off (negative_shaping="none") its advantages are all 0; with
    "paper" they come from R⁻ alone and equal the paper advantages of the failed tokens."""
    none = gtpo.Config(negative_shaping="none")
    r_plus, _ = gtpo.token_rewards(batch, none)
    A = gtpo.advantages(batch, none)
    G = batch.group_size
    for g in range(batch.num_groups):
        rows = slice(g * G, g * G + G)
        if bool((batch.rewards[rows] < 0.5).all()):
            assert bool((r_plus[rows] == 0).all())
            assert bool((A[rows] == 0).all())


# ---------------------------------------------------------------------------------------------
# A hand-computed example
# ---------------------------------------------------------------------------------------------


def _hand_batch() -> RolloutBatch:
    """G = 4, T = 2. o1 ✓ H = [1, 2]; o2 ✓ H = [3, ·]; o3 ✗ H = [0.5, 1]; o4 ✗ H = [0.25, ·]."""
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    entropy = torch.tensor([[1.0, 2.0], [3.0, 0.0], [0.5, 1.0], [0.25, 0.0]])
    return RolloutBatch(
        response_ids=torch.zeros(4, 2, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 1.0, 0.0, 0.0]),
        logp_old=-torch.ones(4, 2),
        entropy_old=entropy,
        group_size=4,
    )


HAND = gtpo.Config(alpha_1=1.0, alpha_2=0.5, entropy_eps=1e-12)


def test_hand_example_token_rewards():
    """Worked by hand, α₁ = 1, α₂ = 0.5 (eps_H negligible).

    t=0: O⁺ active {o1, o2}, d=2, weights 1/4, 3/4 → ×d: 0.5, 1.5 →
         r⁺ = 1 + 0.5·0.5 = 1.25 (o1), 1 + 0.5·1.5 = 1.75 (o2).
         O⁻ active {o3, o4}, h=2, 1/H = 2, 4 → weights 1/3, 2/3 → ×h: 2/3, 4/3 →
         r⁻ = −1 − 0.5·2/3 = −4/3 (o3), −1 − 0.5·4/3 = −5/3 (o4).
    t=1: only o1 in O⁺ (d=1, weight 1): r⁺ = 1.5; only o3 in O⁻ (h=1): r⁻ = −1.5.
    """
    r_plus, r_minus = gtpo.token_rewards(_hand_batch(), HAND)
    expected_plus = torch.tensor(
        [[1.25, 1.5], [1.75, 0.0], [0.0, 0.0], [0.0, 0.0]], dtype=torch.float64
    )
    expected_minus = torch.tensor(
        [[0.0, 0.0], [0.0, 0.0], [-4 / 3, -1.5], [-5 / 3, 0.0]], dtype=torch.float64
    )
    torch.testing.assert_close(r_plus, expected_plus, rtol=0, atol=1e-9)
    torch.testing.assert_close(r_minus, expected_minus, rtol=0, atol=1e-9)


def test_hand_example_advantages_subgroup():
    """stats="subgroup": R⁺ = {1.25, 1.5, 1.75}: mean 1.5, unbiased std 0.25 → A⁺ = −1, 0, +1.
    R⁻ = {−4/3, −1.5, −5/3}: mean −1.5, deviations +1/6, 0, −1/6, std 1/6 → A⁻ = +1, 0, −1."""
    A = gtpo.advantages(
        _hand_batch(), gtpo.Config(alpha_2=0.5, stats="subgroup", entropy_eps=1e-12)
    )
    expected = torch.tensor([[-1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    torch.testing.assert_close(A, expected, rtol=0, atol=1e-4)


def test_hand_example_advantages_batch_pools_every_group():
    """stats="batch" (§2.2): one R⁺ set and one R⁻ set for the whole batch, every group's
    tokens pooled. Two copies of the hand group: each value of the subgroup example is there
    twice, so the means stay (1.5, −1.5) while the unbiased variance of R⁺ becomes
    4·(1/4)²/5 = 1/20 (of R⁻: 4·(1/6)²/5 = 1/45): A⁺ = −1, 0, +1 and A⁻ = +1, 0, −1 of the
    subgroup example grow by 0.25·√20 = (1/6)·√45 = √5/2 in both groups. A normalisation over
    each group's own tokens (not the batch's) would give the subgroup example's ±1."""
    one = _hand_batch()
    two = RolloutBatch(
        response_ids=one.response_ids.repeat(2, 1),
        response_mask=one.response_mask.repeat(2, 1),
        rewards=one.rewards.repeat(2),
        logp_old=one.logp_old.repeat(2, 1),
        entropy_old=one.entropy_old.repeat(2, 1),
        group_size=4,
    )
    A = gtpo.advantages(two, gtpo.Config(alpha_2=0.5, stats="batch", entropy_eps=1e-12))
    per_group = torch.tensor([[-1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [-1.0, 0.0]])
    expected = (per_group * math.sqrt(5) / 2).repeat(2, 1)
    torch.testing.assert_close(A, expected, rtol=0, atol=1e-4)


def test_hand_example_advantages_group():
    """stats="group": 6 active tokens. R⁺ = {1.25, 1.5, 1.75, 0, 0, 0}: mean 0.75, squared
    deviations 0.25 + 0.5625 + 1 + 3·0.5625 = 3.5, variance 3.5/5 = 0.7 →
    A⁺ = 0.5/√0.7 (o1,t0), 0.75/√0.7 (o1,t1), 1/√0.7 (o2,t0).
    R⁻ = {0, 0, 0, −4/3, −1.5, −5/3}: mean −0.75, deviations of the failed tokens −7/12,
    −3/4, −11/12, of the zeros +3/4; squared sum (49 + 81 + 121 + 3·81)/144 = 494/144,
    variance 494/720 → A⁻ = (−7/12)/σ (o3,t0), (−3/4)/σ (o3,t1), (−11/12)/σ (o4,t0)."""
    A = gtpo.advantages(_hand_batch(), HAND)
    s_plus, s_minus = math.sqrt(0.7), math.sqrt(494 / 720)
    expected = torch.tensor(
        [
            [0.5 / s_plus, 0.75 / s_plus],
            [1.0 / s_plus, 0.0],
            [-7 / 12 / s_minus, -0.75 / s_minus],
            [-11 / 12 / s_minus, 0.0],
        ]
    )
    torch.testing.assert_close(A, expected, rtol=0, atol=1e-5)


def test_hand_example_loss_on_policy_gradient():
    """At logp == logp_old every ratio is 1 (inside the clip), so the token-mean loss (Eq. 5)
    has gradient −A[i,t]/Σm on each response token: with the group example, Σm = 6."""
    batch = _hand_batch()
    A = gtpo.advantages(batch, HAND)
    logp = batch.logp_old.clone().requires_grad_()
    total, _ = gtpo.loss(batch, logp, A, HAND)
    total.backward()
    torch.testing.assert_close(logp.grad, -A / 6.0, rtol=0, atol=1e-6)
    assert float(total.detach()) == pytest.approx(float(-A.sum() / 6.0), abs=1e-6)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("alpha_1", -0.1),
        ("alpha_2", -1.0),
        ("alpha_2", float("nan")),
        ("alpha_1", float("inf")),
        ("stats", "token"),
        ("negative_shaping", "v6"),
        ("entropy_mean", "harmonic"),
        ("entropy_eps", 0.0),
        ("entropy_eps", -1e-6),
        ("clip_eps_low", -0.2),
        ("eps", 0.0),
        ("loss_agg_mode", "seq-mean"),
    ],
)
def test_config_rejects_bad_values(field, value):
    """Config validation: out-of-range α, unknown choices, non-positive eps raise a ValueError
    that names the field."""
    with pytest.raises(ValueError, match=field):
        gtpo.Config(**{field: value})


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/gtpo.md`` (defaults: α₁ = 1,
    α₂ = 0.1, stats="group", "paper"), each derived by hand on the page."""
    batch, logp = worked.batch()
    cfg = gtpo.Config()
    r_plus, r_minus = gtpo.token_rewards(batch, cfg)
    expected_plus = worked.rows([[1.05, 1.1], [1.15, 1.1, 1.1, 1.1], [0, 0, 0], [0]])
    expected_minus = worked.rows([[0, 0], [0] * 4, [-1.16, -1.1, -1.1], [-1.04]])
    torch.testing.assert_close(r_plus.float(), expected_plus, atol=1e-5, rtol=0)
    torch.testing.assert_close(r_minus.float(), expected_minus, atol=1e-5, rtol=0)
    A = gtpo.advantages(batch, cfg)
    expected = worked.rows(
        [
            [0.685984, 0.773931],
            [0.861877, 0.773931, 0.773931, 0.773931],
            [-1.265953, -1.160457, -1.160457],
            [-1.054961],
        ]
    )
    torch.testing.assert_close(A, expected, atol=1e-5, rtol=0)
    total, grad, _ = worked.loss_and_grad(gtpo, cfg, batch, logp)
    assert total == pytest.approx(-0.009504, abs=1e-5)
    expected = worked.rows(
        [
            [-0.075458, -0.096741],
            [-0.086188, -0.077393, -0.077393, -0.077393],
            [0.113936, 0.0, 0.116046],
            [0.158244],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# Eq. 4 read literally (stats="batch", §2.2) against the default (stats="group")
# ---------------------------------------------------------------------------------------------


def _batch_mean(x: torch.Tensor, where: torch.Tensor) -> float:
    return float(torch.where(where, x.double(), 0.0).sum() / where.sum().clamp(min=1))


@given(rollout_batches(binary_rewards=True), st.floats(0.0, 3.0), st.floats(0.0, 1.0))
def test_literal_eq4_mean_reward_is_alpha1_plus_alpha2(batch, alpha_1, alpha_2):
    """The arithmetic that makes Eq. 4 read literally lose the outcome: over all active tokens
    of all successful completions of the batch, mean(R⁺) = α₁ + α₂ exactly, and over the
    failed ones mean(R⁻) = −α₁ − α₂.

    Derivation: at each position t the entropy weights of a group's d_t active successful
    tokens sum to 1, so Σ_i r⁺[i,t] = α₁·d_t + α₂·d_t (r_i = 1 on O⁺); summed over t and the
    groups, Σ R⁺ = (α₁ + α₂)·Σ d_t = (α₁ + α₂)·|R⁺|. Likewise Σ R⁻ = −(α₁ + α₂)·|R⁻|.
    """
    cfg = gtpo.Config(alpha_1=alpha_1, alpha_2=alpha_2)
    r_plus, r_minus = gtpo.token_rewards(batch, cfg)
    active = batch.response_mask.bool()
    succ = (batch.rewards >= 0.5)[:, None] & active
    if bool(succ.any()):
        assert _batch_mean(r_plus, succ) == pytest.approx(alpha_1 + alpha_2, rel=1e-9, abs=1e-9)
    if bool((active & ~succ).any()):
        mean_minus = _batch_mean(r_minus, active & ~succ)
        assert mean_minus == pytest.approx(-alpha_1 - alpha_2, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("stats", ["batch", "subgroup"])
@given(batch=rollout_batches(binary_rewards=True), alpha_2=st.floats(0.01, 1.0))
def test_literal_eq4_advantages_are_zero_mean_and_alpha1_cancels(stats, batch, alpha_2):
    """Eq. 4 over §2.2's set (``"batch"``: all O⁺ tokens of the batch, all O⁻ tokens) or per
    group (``"subgroup"``): the advantages of the O⁺ tokens sum to 0 over the set, and so do
    those of the O⁻ tokens (a z-score is centred on its own set), so the outcome's sign does not
    survive on average; and, since mean(R⁺) = α₁ + α₂ (previous test), A⁺ = α₂(x − x̄)/(α₂·s + eps)
    with x the entropy weights: α₁ cancels exactly, any α₁ gives the same advantages."""
    cfg = gtpo.Config(stats=stats, alpha_2=alpha_2)
    A = gtpo.advantages(batch, cfg).double()
    active = batch.response_mask.bool()
    succ = (batch.rewards >= 0.5)[:, None] & active
    G = batch.group_size
    for sign in (succ, active & ~succ):
        if stats == "batch":
            total, scale = A[sign].sum(), 1.0 + A[sign].abs().sum()
        else:  # per group
            total = _groups(torch.where(sign, A, 0.0), G).sum(dim=(1, 2))
            scale = 1.0 + _groups(torch.where(sign, A.abs(), 0.0), G).sum(dim=(1, 2))
        assert bool((total.abs() <= 1e-5 * scale).all())
    other = gtpo.advantages(batch, dataclasses.replace(cfg, alpha_1=3.0)).double()
    torch.testing.assert_close(other, A, rtol=1e-4, atol=1e-4)


@given(batch=rollout_batches(binary_rewards=True, allow_empty=False), alpha_2=st.floats(0.01, 0.5))
def test_default_group_reading_keeps_the_outcome_sign(batch, alpha_2):
    """The default (``stats="group"``, the departure from Eq. 4): in a group whose fraction p
    of successful active tokens lies strictly inside (α₂/(α₁+α₂), α₁/(α₁+α₂)), every token of a
    correct answer has A > 0 and every token of a wrong answer A < 0.

    Derivation: over the group's L active tokens mean(R⁺) = (α₁ + α₂)·p (the weights sum to
    d_t, the O⁻ tokens contribute 0), and every r⁺ > α₁ (α₂ > 0, positive weights); r⁺ −
    mean > α₁ − (α₁ + α₂)p > 0 iff p < α₁/(α₁ + α₂). Symmetrically mean(R⁻) = −(α₁ + α₂)(1 − p)
    and r⁻ < −α₁, so A⁻ < 0 iff p > α₂/(α₁ + α₂). The bound is tight: outside it a
    low-entropy token of a correct answer in a mostly correct group can get A < 0.
    """
    cfg = gtpo.Config(alpha_2=alpha_2)
    assert cfg.stats == "group"  # the property is about the default reading
    A = gtpo.advantages(batch, cfg).double()
    G = batch.group_size
    m = batch.response_mask.bool()
    lo, hi = alpha_2 / (1 + alpha_2), 1 / (1 + alpha_2)
    for g in range(batch.num_groups):
        rows = slice(g * G, g * G + G)
        succ = (batch.rewards[rows] >= 0.5)[:, None] & m[rows]
        p = float(succ.sum() / m[rows].sum())
        if not lo + 1e-3 < p < hi - 1e-3:
            continue
        assert bool((A[rows][succ] > 0).all())
        assert bool((A[rows][m[rows] & ~succ] < 0).all())


def test_literal_eq4_example_flips_signs():
    """The worked example's group read literally (``stats="batch"``, the batch being this one
    group): O⁺'s token rewards {1.05, 1.1, 1.15, 1.1, 1.1, 1.1} have mean 1.1 = α₁ + α₂ and
    unbiased std √(0.005/5) = 0.031623, so o1's first token, a token of a correct answer,
    gets (1.05 − 1.1)/0.031623 = −1.581139; O⁻'s {−1.16, −1.1, −1.1, −1.04} have mean −1.1 and
    std √(0.0072/3) = 0.04899, so o4's token, of a wrong answer, gets +0.06/0.04899 = +1.224745.
    The default (``"group"``) gives them +0.685984 and −1.054961 (test_worked_example)."""
    batch, _ = worked.batch()
    A = gtpo.advantages(batch, gtpo.Config(stats="batch"))
    assert float(A[0, 0]) == pytest.approx(-0.05 / math.sqrt(0.005 / 5), abs=1e-4)
    assert float(A[3, 0]) == pytest.approx(0.06 / math.sqrt(0.0072 / 3), abs=1e-4)
    assert float(A[1, 1]) == pytest.approx(0.0, abs=1e-4)  # r⁺ = 1.1, the set's mean


# ---------------------------------------------------------------------------------------------
# §2.4.1's geometric-mean entropy weights (entropy_mean="geometric")
# ---------------------------------------------------------------------------------------------


@given(rollout_batches(entropy_regime="ordinary"))
def test_geometric_weights_multiply_to_one(batch):
    """With α₁ = 0, α₂ = 1 the token rewards are the weights themselves. §2.4.1's weight
    H̃[i,t] / GM_k H̃[k,t] over the d_t active successful tokens at t has product 1 (the geometric
    analogue of the arithmetic weights summing to d_t), so Σ log r⁺ = 0 at every position; and
    on the failed side (1/H̃[j,t]) / GM_k (1/H̃[k,t]): Σ log(−r⁻) = 0."""
    cfg = gtpo.Config(alpha_1=0.0, alpha_2=1.0, entropy_mean="geometric")
    r_plus, r_minus = gtpo.token_rewards(batch, cfg)
    active = batch.response_mask.bool()
    succ = (batch.rewards >= 0.5)[:, None] & active
    G = batch.group_size
    for sign, r in ((succ, r_plus), (active & ~succ, -r_minus)):
        logs = torch.where(sign, torch.log(torch.where(sign, r, 1.0)), 0.0)
        total = _groups(logs, G).sum(dim=1)  # [N, T]
        scale = 1.0 + _groups(logs.abs(), G).sum(dim=1)
        assert bool((total.abs() <= 1e-9 * scale).all())


@given(rollout_batches(binary_rewards=True), st.floats(0.01, 1.0))
def test_geometric_bonus_at_least_arithmetic(batch, alpha_2):
    """By the AM–GM inequality the geometric weights at a position sum to d_t·AM/GM ≥ d_t, the
    arithmetic weights' sum: Σ_{O⁺ at t} r⁺ is at least as large under "geometric" (equal when
    the active entropies are equal); on the failed side the penalty Σ (−r⁻) is too."""
    arith = gtpo.token_rewards(batch, gtpo.Config(alpha_2=alpha_2))
    geo = gtpo.token_rewards(batch, gtpo.Config(alpha_2=alpha_2, entropy_mean="geometric"))
    G = batch.group_size
    for sign in (1.0, -1.0):
        a = _groups(sign * arith[0 if sign > 0 else 1], G).sum(dim=1)
        g = _groups(sign * geo[0 if sign > 0 else 1], G).sum(dim=1)
        assert bool((g >= a - 1e-9 * (1 + a.abs())).all())


def test_geometric_worked_example():
    """§2.4.1's weights on the worked example (page, "Geometric-mean weights"). At t = 1 the
    successful entropies 1 and 3 have geometric mean √3: weights 1/√3 = 0.577350 and
    3/√3 = 1.732051, r⁺ = 1.057735 and 1.173205 (arithmetic: 1.05, 1.15). The failed 1/H = 2 and
    0.5 have geometric mean 1: weights 2 and 0.5, r⁻ = −1.2 and −1.05 (arithmetic: −1.16,
    −1.04). Later positions hold one token or equal entropies: as before. Group statistics:
    R⁺ sums to 6.630940, mean 0.663094, std 0.571380; R⁻ sums to −4.45, mean −0.445,
    std 0.575640."""
    batch, _ = worked.batch()
    cfg = gtpo.Config(entropy_mean="geometric")
    r_plus, r_minus = gtpo.token_rewards(batch, cfg)
    s3 = math.sqrt(3)
    expected_plus = worked.rows([[1 + 0.1 / s3, 1.1], [1 + 0.3 / s3, 1.1, 1.1, 1.1], [0] * 3, [0]])
    expected_minus = worked.rows([[0, 0], [0] * 4, [-1.2, -1.1, -1.1], [-1.05]])
    torch.testing.assert_close(r_plus.float(), expected_plus, atol=1e-6, rtol=0)
    torch.testing.assert_close(r_minus.float(), expected_minus, atol=1e-6, rtol=0)
    A = gtpo.advantages(batch, cfg)
    expected = worked.rows(
        [
            [0.690680, 0.764650],
            [0.892770, 0.764650, 0.764650, 0.764650],
            [-1.311584, -1.137864, -1.137864],
            [-1.051005],
        ]
    )
    torch.testing.assert_close(A, expected, atol=1e-5, rtol=0)


# -- α₂ = 0 against DAPO (docs/claims.md: "GTPO with α₂ = 0 against DAPO, step by step") ------
def _alpha0_and_dapo(mask: torch.Tensor, rewards: torch.Tensor) -> tuple[torch.Tensor, ...]:
    from refimpl.algorithms import dapo

    batch = RolloutBatch(
        response_ids=torch.zeros(mask.shape, dtype=torch.long),
        response_mask=mask,
        rewards=rewards,
        logp_old=-torch.ones(mask.shape),
        entropy_old=torch.rand(mask.shape, generator=torch.Generator().manual_seed(0)) + 0.1,
        group_size=mask.shape[0],
    )
    a0 = gtpo.advantages(batch, gtpo.Config(alpha_2=0.0, stats="group", eps=1e-12))
    return a0, dapo.advantages(batch, dapo.Config(eps=1e-12)), mask


def test_alpha2_zero_with_equal_lengths_is_dapo_up_to_the_std_degrees_of_freedom():
    """Why GTPO with α₂ = 0 does not give DAPO's losses, part 1. Equal lengths L: the
    token-weighted success fraction is DAPO's p, so the centring agrees, but the unbiased std
    runs over G·L tokens instead of G sequences: s_tok² = GL·p(1−p)/(GL−1), s_seq² =
    G·p(1−p)/(G−1). So A(α₂=0) = A_DAPO · sqrt(G(GL−1) / ((G−1)·GL)) on every token:
    G = 4, L = 3 gives sqrt(44/36) = 1.1055, advantages 10.6 % larger than DAPO's."""
    G, L = 4, 3
    a0, a_dapo, mask = _alpha0_and_dapo(torch.ones(G, L), torch.tensor([1.0, 0.0, 0.0, 1.0]))
    factor = math.sqrt(G * (G * L - 1) / ((G - 1) * G * L))
    assert factor == pytest.approx(1.1055, abs=1e-4)
    torch.testing.assert_close(a0, a_dapo * factor, rtol=1e-5, atol=1e-6)


def test_alpha2_zero_with_unequal_lengths_centres_on_tokens_not_completions():
    """Part 2. Unequal lengths: the centre is the fraction of the group's *tokens* that are
    successful, so A(α₂=0) sums to 0 over the group's tokens, and a token-mean loss at ratio 1
    is exactly 0; DAPO's centre is the fraction of *completions*, so its token sum is not 0
    when right and wrong replies differ in length. Here o1 ✓ has 1 token, o2–o4 have 3
    (o2 ✓, o3 ✗, o4 ✗): DAPO's p = 1/2, the tokens' p = 4/10."""
    mask = torch.tensor([[1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    a0, a_dapo, mask = _alpha0_and_dapo(mask, torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert float((a0 * mask).sum()) == pytest.approx(0.0, abs=1e-5)
    # DAPO: A = ±(1/2)/s with s = sqrt(4/3 · 1/4) = 1/√3, so ±√3/2; token sum
    # (1 + 3 − 3 − 3)·√3/2 = −√3.
    assert float((a_dapo * mask).sum()) == pytest.approx(-math.sqrt(3), rel=1e-5)
    # Same sign on every token: the update pushes the same way, with other weights.
    assert torch.equal(torch.sign(a0 * mask), torch.sign(a_dapo * mask))
