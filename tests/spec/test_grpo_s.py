"""GRPO-S's own invariants (``refimpl/algorithms/grpo_s.py``; docs/algorithms/grpo_s.md).

The sequence-level analogues of GTPO's (``test_gtpo.py``): ``Ĥ_i`` is the completion's mean
rollout entropy, ``n``/``m`` count the non-empty successful/failed completions of a group.
The common invariants are in ``test_common.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl import core
from refimpl.algorithms import grpo_s, gspo
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import (
    batch_and_policy,
    current_logp,
    flush_tiny_entropies,
    rollout_batches,
)

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _counts(batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """``(n, m)`` per group: non-empty successful / failed completions, counted directly."""
    nonempty = batch.response_mask.sum(1) > 0
    succ = batch.rewards >= 0.5
    G = batch.group_size
    n = core.group_view((nonempty & succ).double(), G).sum(1)
    m = core.group_view((nonempty & ~succ).double(), G).sum(1)
    return n, m


@given(rollout_batches(binary_rewards=True), st.floats(0.0, 1.0))
def test_conservation_successful_sequences(batch, beta_2):
    """With β₁ + β₂ = 1 and binary rewards, Σ_{i∈O⁺} r̂⁺_i = n.

    Derivation: Σ_i r̂⁺_i = β₁·Σ r_i + β₂·n·Σ_i H̃_i/Σ_k H̃_k = β₁·n + β₂·n = n (r_i = 1 on O⁺,
    the weights sum to 1). Empty completions are not in O⁺ and get r̂ = 0 [A].
    """
    cfg = grpo_s.Config(beta_1=1.0 - beta_2, beta_2=beta_2)
    r_hat_plus, _ = grpo_s.sequence_rewards(batch, cfg)
    n, _ = _counts(batch)
    total = core.group_view(r_hat_plus, batch.group_size).sum(1)
    torch.testing.assert_close(total, n, rtol=1e-9, atol=1e-9)


@given(rollout_batches(), st.floats(0.0, 1.0))
def test_conservation_failed_sequences(batch, beta_2):
    """With β₁ + β₂ = 1, Σ_{j∈O⁻} r̂⁻_j = −m (the inverse-entropy weights sum to 1; r̂⁻ does not
    involve r_j, so any rewards)."""
    cfg = grpo_s.Config(beta_1=1.0 - beta_2, beta_2=beta_2)
    _, r_hat_minus = grpo_s.sequence_rewards(batch, cfg)
    _, m = _counts(batch)
    total = core.group_view(r_hat_minus, batch.group_size).sum(1)
    torch.testing.assert_close(total, -m, rtol=1e-9, atol=1e-9)


@given(rollout_batches(entropy_regime="ordinary"), st.floats(0.01, 1.0))
def test_sequence_rewards_monotone_in_mean_entropy(batch, beta_2):
    """Among successful completions of a group with equal rewards, a higher mean entropy Ĥ
    gives a larger r̂⁺; among failed ones, a lower Ĥ gives a more negative r̂⁻ (the weights
    Ĥ_i/ΣĤ and (1/Ĥ_j)/Σ(1/Ĥ) are increasing in Ĥ_i and in 1/Ĥ_j, times β₂ > 0)."""
    cfg = grpo_s.Config(beta_2=beta_2)
    r_hat_plus, r_hat_minus = grpo_s.sequence_rewards(batch, cfg)
    H_hat = core.masked_mean(batch.entropy_old.double(), batch.response_mask, dim=1)
    nonempty = batch.response_mask.sum(1) > 0
    r, G = batch.rewards, batch.group_size
    for g in range(batch.num_groups):
        rows = [i for i in range(g * G, g * G + G) if nonempty[i]]
        for i in rows:
            for k in rows:
                if r[i] != r[k] or not H_hat[i] > H_hat[k] * (1 + 1e-6):
                    continue
                if r[i] >= 0.5:
                    assert r_hat_plus[i] > r_hat_plus[k]
                else:
                    assert r_hat_minus[k] < r_hat_minus[i]


@pytest.mark.parametrize("stats", grpo_s.STATS)
@pytest.mark.parametrize("entropy_mean", grpo_s.ENTROPY_MEANS)
@given(batch=rollout_batches(), k=st.integers(-3, 3))
def test_advantages_invariant_to_scaling_entropies(stats, entropy_mean, batch, k):
    """Scaling every rollout entropy by c > 0 scales every Ĥ_i by c, and the weights are
    homogeneous of degree 0, so the advantages do not change (exactly as eps_H → 0; the test
    uses eps_H = 1e-30, entropies below 1e-20 set to 0, and c = 2^k, exact in float32; see
    test_gtpo for the argument; with geometric means the zeros are set to 1 instead)."""
    cfg = grpo_s.Config(stats=stats, entropy_mean=entropy_mean, entropy_eps=1e-30)
    batch = flush_tiny_entropies(batch)  # the derivation needs H = 0 or H ≫ eps_H
    if entropy_mean == "geometric":  # a zero's floor is a factor of the geometric mean
        batch = batch.replace(
            entropy_old=torch.where(batch.entropy_old == 0, 1.0, batch.entropy_old)
        )
    scaled = batch.replace(entropy_old=batch.entropy_old * 2.0**k)
    torch.testing.assert_close(
        grpo_s.advantages(scaled, cfg), grpo_s.advantages(batch, cfg), rtol=1e-5, atol=1e-5
    )


@given(rollout_batches(binary_rewards=True, allow_empty=False), st.sampled_from([0.5, 1.0, 3.0]))
def test_beta2_zero_reduces_to_grpo(batch, beta_1):
    """Exact reduction: with β₂ = 0, stats="group", binary rewards and no empty completion,
    GRPO-S's advantage is GRPO's, with eps/β₁ in the denominator.

    Derivation (as for GTPO, with completions instead of tokens as the samples):
    r̂⁺ = β₁·y, r̂⁻ = −β₁·(1 − y), y = r_i; both normalise over the G completions to
    (y − p)/(s + eps/β₁), p and s the group's mean and unbiased std of r: GRPO's A_i.
    """
    cfg = grpo_s.Config(beta_1=beta_1, beta_2=0.0, stats="group")
    A_grpo = core.group_normalize(batch.rewards, batch.group_size, eps=cfg.eps / beta_1)
    expected = core.broadcast_to_tokens(A_grpo, batch.response_mask)
    torch.testing.assert_close(grpo_s.advantages(batch, cfg), expected, rtol=1e-5, atol=1e-5)


@given(rollout_batches())
def test_empty_completions_excluded(batch):
    """|o_i| = 0 [A]: the completion has no mean entropy; it gets r̂⁺ = r̂⁻ = 0 and advantage 0,
    and removing it from the statistics changes nothing: the other completions' advantages
    equal those computed with its reward replaced by any other value."""
    cfg = grpo_s.Config()
    empty = batch.response_mask.sum(1) == 0
    r_hat_plus, r_hat_minus = grpo_s.sequence_rewards(batch, cfg)
    assert bool((r_hat_plus[empty] == 0).all()) and bool((r_hat_minus[empty] == 0).all())
    flipped = batch.replace(rewards=torch.where(empty, 1.0 - batch.rewards, batch.rewards))
    torch.testing.assert_close(
        grpo_s.advantages(flipped, cfg), grpo_s.advantages(batch, cfg), rtol=0, atol=0
    )


@given(batch_and_policy(max_log_ratio=1.0))
def test_ratio_geometric_is_gspo_and_below_arithmetic(x):
    """ratio="geometric" is GSPO's s_i = exp((1/|o_i|) Σ_t (logp − logp_old)); "arithmetic" is
    (1/|o_i|) Σ_t w[i,t]; by the AM–GM inequality ŵ_i(arithmetic) ≥ s_i on every non-empty
    completion (computed here independently of the module)."""
    batch, logp, _ = x
    m = batch.response_mask.bool()
    delta = torch.where(m, logp.double() - batch.logp_old.double(), 0.0)
    length = m.sum(1).clamp(min=1)
    s = torch.exp(delta.sum(1) / length)
    am = torch.where(m, torch.exp(delta), 0.0).sum(1) / length
    geo = grpo_s.sequence_ratio(logp, batch.logp_old, batch.response_mask, "geometric")
    ari = grpo_s.sequence_ratio(logp, batch.logp_old, batch.response_mask, "arithmetic")
    nonempty = m.any(1)
    torch.testing.assert_close(geo[nonempty].double(), s[nonempty], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(ari[nonempty].double(), am[nonempty], rtol=1e-5, atol=1e-6)
    assert bool((ari[nonempty] >= geo[nonempty] * (1 - 1e-6)).all())


@given(batch_and_policy(max_log_ratio=0.5))
def test_geometric_loss_equals_gspo_loss(x):
    """With ratio="geometric" the GRPO-S loss is GSPO's sequence loss (seq-mean of
    −clipped(s_i, Â_i)) with the same clip range and advantages: same value, same gradient."""
    batch, logp, _ = x
    cfg = grpo_s.Config(ratio="geometric")
    adv = grpo_s.advantages(batch, cfg)
    ref_cfg = gspo.Config(clip_eps_low=cfg.clip_eps_low, clip_eps_high=cfg.clip_eps_high)
    lp1, lp2 = logp.clone().requires_grad_(), logp.clone().requires_grad_()
    l1, _ = grpo_s.loss(batch, lp1, adv, cfg)
    l2, _ = gspo.loss(batch, lp2, adv, ref_cfg)
    l1.backward()
    l2.backward()
    torch.testing.assert_close(l1, l2, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lp1.grad, lp2.grad, rtol=1e-5, atol=1e-6)


@given(rollout_batches(allow_empty=False), st.data())
def test_arithmetic_ratio_gradient(batch, data):
    """Inside the trust region, ∂L/∂logp[i,t] = −Â_i·w[i,t]/(|o_i|·B) for the arithmetic ratio
    (∂ŵ_i/∂logp[i,t] = w[i,t]/|o_i|, seq-mean weight 1/B); checked with a policy close enough
    to π_old that every ŵ_i stays in [1 − 0.2, 1 + 0.28]."""
    logp = data.draw(current_logp(batch, max_log_ratio=0.05))
    cfg = grpo_s.Config(ratio="arithmetic")
    adv = grpo_s.advantages(batch, cfg)
    lp = logp.clone().requires_grad_()
    total, _ = grpo_s.loss(batch, lp, adv, cfg)
    total.backward()
    m = batch.response_mask
    w = core.token_ratio(logp, batch.logp_old, m)
    expected = core.masked(-adv * w / (m.sum(1, keepdim=True) * batch.batch_size), m)
    torch.testing.assert_close(lp.grad, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("stats", grpo_s.STATS)
@given(batch=rollout_batches())
def test_negative_shaping_none_failed_get_their_own_sets_normalisation(stats, batch):
    """negative_shaping="none": r̂⁻ ≡ 0 and a failed completion's advantage normalises its 0
    within its own set [A]: stats="group" → −mean(R̂⁺)/(std(R̂⁺) + eps) over the group's
    non-empty completions; "subgroup" → O⁻'s zeros, exactly 0."""
    cfg = grpo_s.Config(stats=stats, negative_shaping="none")
    r_hat_plus, r_hat_minus = grpo_s.sequence_rewards(batch, cfg)
    assert bool((r_hat_minus == 0).all())
    A = grpo_s.advantages(batch, cfg)[:, 0]
    G = batch.group_size
    nonempty = batch.response_mask.sum(1) > 0
    failed = nonempty & (batch.rewards < 0.5)
    for g in range(batch.num_groups):
        rows = slice(g * G, g * G + G)
        R = r_hat_plus[rows][nonempty[rows]]
        if stats == "subgroup" or R.numel() < 2 or R.max() == R.min():
            expected = 0.0
        else:
            expected = float(-R.mean() / (R.std(unbiased=True) + cfg.eps))
        got = A[rows][failed[rows]].double()
        torch.testing.assert_close(got, torch.full_like(got, expected), rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------------
# A hand-computed example
# ---------------------------------------------------------------------------------------------


def _hand_batch() -> RolloutBatch:
    """G = 4, T = 2. o1 ✓ H = [1, 3] (Ĥ = 2); o2 ✓ H = [6, ·] (Ĥ = 6);
    o3 ✗ H = [1, 3] (Ĥ = 2); o4 ✗ H = [0.5, ·] (Ĥ = 0.5)."""
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 0.0]])
    entropy = torch.tensor([[1.0, 3.0], [6.0, 0.0], [1.0, 3.0], [0.5, 0.0]])
    return RolloutBatch(
        response_ids=torch.zeros(4, 2, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 1.0, 0.0, 0.0]),
        logp_old=-torch.ones(4, 2),
        entropy_old=entropy,
        group_size=4,
    )


def test_hand_example_sequence_rewards():
    """β₁ = 1, β₂ = 0.5 (eps_H negligible). n = 2: weights 2/8, 6/8, ×n: 0.5, 1.5 →
    r̂⁺ = 1.25 (o1), 1.75 (o2). m = 2: 1/Ĥ = 0.5, 2 → weights 0.2, 0.8, ×m: 0.4, 1.6 →
    r̂⁻ = −1.2 (o3), −1.8 (o4)."""
    cfg = grpo_s.Config(beta_2=0.5, entropy_eps=1e-12)
    r_hat_plus, r_hat_minus = grpo_s.sequence_rewards(_hand_batch(), cfg)
    torch.testing.assert_close(
        r_hat_plus, torch.tensor([1.25, 1.75, 0.0, 0.0], dtype=torch.float64), atol=1e-9, rtol=0
    )
    torch.testing.assert_close(
        r_hat_minus, torch.tensor([0.0, 0.0, -1.2, -1.8], dtype=torch.float64), atol=1e-9, rtol=0
    )


def test_hand_example_advantages():
    """stats="group": R̂⁺ = {1.25, 1.75, 0, 0}: mean 0.75, squared deviations
    0.25 + 1 + 2·0.5625 = 2.375, variance 2.375/3 = 19/24 → Â = 0.5/√(19/24), 1/√(19/24).
    R̂⁻ = {0, 0, −1.2, −1.8}: mean −0.75, deviations −0.45, −1.05 (and +0.75 twice), squared
    sum 0.2025 + 1.1025 + 1.125 = 2.43, variance 0.81, std 0.9 → Â = −0.5, −7/6.
    stats="subgroup": any two distinct values normalise to ∓1/√2: Â = −1/√2, +1/√2 (o1, o2);
    +1/√2, −1/√2 (o3 is less penalised than o4). stats="joint" (the default, §2.3): r̂ =
    {1.25, 1.75, −1.2, −1.8} has mean 0 and squared sum 1.5625 + 3.0625 + 1.44 + 3.24 = 9.305,
    variance 9.305/3, so Â = r̂/√(9.305/3). Every token of o_i carries Â_i."""
    batch, mask = _hand_batch(), _hand_batch().response_mask
    joint = grpo_s.advantages(batch, grpo_s.Config(beta_2=0.5, entropy_eps=1e-12))
    expected = torch.tensor([1.25, 1.75, -1.2, -1.8])[:, None] / math.sqrt(9.305 / 3) * mask
    torch.testing.assert_close(joint, expected, atol=1e-5, rtol=0)
    s = math.sqrt(19 / 24)
    group = grpo_s.advantages(batch, grpo_s.Config(beta_2=0.5, entropy_eps=1e-12, stats="group"))
    expected = torch.tensor([0.5 / s, 1.0 / s, -0.5, -7 / 6])[:, None] * mask
    torch.testing.assert_close(group, expected, atol=1e-5, rtol=0)
    sub = grpo_s.advantages(batch, grpo_s.Config(beta_2=0.5, entropy_eps=1e-12, stats="subgroup"))
    h = 1 / math.sqrt(2)
    expected = torch.tensor([-h, h, h, -h])[:, None] * mask
    torch.testing.assert_close(sub, expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("beta_1", -0.5),
        ("beta_2", -0.1),
        ("beta_2", float("nan")),
        ("stats", "batch"),
        ("entropy_mean", "median"),
        ("ratio", "harmonic"),
        ("negative_shaping", "v6"),
        ("entropy_eps", 0.0),
        ("loss_agg_mode", "token-mean"),
        ("clip_eps_high", -0.1),
    ],
)
def test_config_rejects_bad_values(field, value):
    """Config validation: negative β, unknown choices, a per-token aggregation for a
    per-sequence loss raise a ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        grpo_s.Config(**{field: value})


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/grpo_s.md`` (defaults: β₁ = 1,
    β₂ = 0.1, stats="joint", ratio="geometric"), each derived by hand on the page."""
    batch, logp = worked.batch()
    cfg = grpo_s.Config()
    r_hat_plus, r_hat_minus = grpo_s.sequence_rewards(batch, cfg)
    torch.testing.assert_close(
        r_hat_plus, torch.tensor([1.096, 1.104, 0, 0]).double(), atol=1e-6, rtol=0
    )
    torch.testing.assert_close(
        r_hat_minus, torch.tensor([0, 0, -1.15, -1.05]).double(), atol=1e-6, rtol=0
    )
    A = grpo_s.advantages(batch, cfg)
    A_hat = [0.862428, 0.868723, -0.904920, -0.826231]
    expected = worked.rows([[A_hat[0]] * 2, [A_hat[1]] * 4, [A_hat[2]] * 3, [A_hat[3]]])
    torch.testing.assert_close(A, expected, atol=1e-5, rtol=0)
    w_hat = grpo_s.sequence_ratio(logp, batch.logp_old, batch.response_mask, cfg.ratio)
    torch.testing.assert_close(
        w_hat, torch.tensor([1.172604, 1.0, 0.877205, 1.5]), atol=1e-5, rtol=0
    )
    total, grad, _ = worked.loss_and_grad(grpo_s, cfg, batch, logp)
    assert total == pytest.approx(0.038284, abs=1e-5)
    expected = worked.rows([[-0.126411] * 2, [-0.054295] * 4, [0.066150] * 3, [0.309837]])
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)


def test_worked_example_arithmetic_separate():
    """The page's numbers for the earlier reading (stats="group", ratio="arithmetic", Eq. 8):
    separate R̂⁺/R̂⁻ normalisation over the group and the arithmetic mean of the token ratios."""
    batch, logp = worked.batch()
    cfg = grpo_s.Config(stats="group", ratio="arithmetic")
    A = grpo_s.advantages(batch, cfg)
    A_hat = [0.859716, 0.872312, -0.942809, -0.785674]
    expected = worked.rows([[A_hat[0]] * 2, [A_hat[1]] * 4, [A_hat[2]] * 3, [A_hat[3]]])
    torch.testing.assert_close(A, expected, atol=1e-5, rtol=0)
    w_hat = grpo_s.sequence_ratio(logp, batch.logp_old, batch.response_mask, "arithmetic")
    torch.testing.assert_close(w_hat, torch.tensor([1.175, 1.0, 0.883333, 1.5]), atol=1e-5, rtol=0)
    total, grad, _ = worked.loss_and_grad(grpo_s, cfg, batch, logp)
    assert total == pytest.approx(0.032212, abs=1e-5)
    expected = worked.rows(
        [
            [-0.118211, -0.134331],
            [-0.054520] * 4,
            [0.070711, 0.058926, 0.078567],
            [0.294628],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# §2.3's joint normalisation: the sign of the outcome survives when β₂·(G − 2) < 2·β₁
# ---------------------------------------------------------------------------------------------


@given(batch=rollout_batches(binary_rewards=True, allow_empty=False), frac=st.floats(0.0, 0.95))
def test_joint_keeps_the_outcome_sign(batch, frac):
    """stats="joint" (default), arithmetic entropy means: in a group with both outcomes, every
    correct completion gets Â > 0 and every wrong one Â < 0 when β₂·(G − 2) < 2·β₁.

    Derivation: the shaped rewards sum to (β₁ + β₂)(n − m) over the group (the weights sum to
    n and to m), so their mean is μ = (β₁ + β₂)(n − m)/G, and n − m ≤ G − 2 in a mixed group.
    Every r̂⁺ > β₁ (positive weights), so r̂⁺ − μ > β₁ − (β₁ + β₂)(G − 2)/G
    = (2β₁ − β₂(G − 2))/G > 0; symmetrically r̂⁻ − μ < 0. The test draws β₂ below the bound.
    """
    G = batch.group_size
    beta_2 = frac * 2.0 / (G - 2) if G > 2 else 1.0 + frac
    A = grpo_s.advantages(batch, grpo_s.Config(beta_2=beta_2))[:, 0]
    success = batch.rewards >= 0.5
    for g in range(batch.num_groups):
        rows = slice(g * G, g * G + G)
        if success[rows].all() or not success[rows].any():
            continue
        assert bool((A[rows][success[rows]] > 0).all())
        assert bool((A[rows][~success[rows]] < 0).all())


def test_joint_sign_bound_is_tight():
    """Past the bound the sign can flip: G = 24, β₂ = 0.1 (β₂·(G − 2) = 2.2 > 2), 23 correct
    completions and one wrong. μ = 1.1·22/24 = 1.008333; a correct completion whose mean
    entropy is 1/23 of the others' (weight 23·(1/23)/(22 + 1/23) ≈ 0.0453) gets
    r̂⁺ = 1.004531 < μ, hence Â < 0, although it is correct."""
    G = 24
    entropy = torch.ones(G, 1)
    entropy[0] = 1 / 23
    batch = RolloutBatch(
        response_ids=torch.zeros(G, 1, dtype=torch.long),
        response_mask=torch.ones(G, 1),
        rewards=torch.tensor([1.0] * (G - 1) + [0.0]),
        logp_old=-torch.ones(G, 1),
        entropy_old=entropy,
        group_size=G,
    )
    r_hat_plus, _ = grpo_s.sequence_rewards(batch, grpo_s.Config(entropy_eps=1e-12))
    weight = 23 * (1 / 23) / (22 + 1 / 23)
    assert float(r_hat_plus[0]) == pytest.approx(1 + 0.1 * weight, abs=1e-9)
    A = grpo_s.advantages(batch, grpo_s.Config(entropy_eps=1e-12))[:, 0]
    assert float(A[0]) < 0 < float(A[1])


# ---------------------------------------------------------------------------------------------
# §2.4.1's geometric means (entropy_mean="geometric")
# ---------------------------------------------------------------------------------------------


@given(rollout_batches(entropy_regime="ordinary"))
def test_geometric_weights_multiply_to_one(batch):
    """With β₁ = 0, β₂ = 1 the sequence rewards are §2.4.1's weights H̃_i / GM_{k∈O⁺} H̃_k and
    (1/H̃_j) / GM_{k∈O⁻} (1/H̃_k): their product over each subgroup is 1, so Σ log = 0."""
    cfg = grpo_s.Config(beta_1=0.0, beta_2=1.0, entropy_mean="geometric")
    r_hat_plus, r_hat_minus = grpo_s.sequence_rewards(batch, cfg)
    nonempty = batch.response_mask.sum(1) > 0
    success = batch.rewards >= 0.5
    G = batch.group_size
    for members, r in ((nonempty & success, r_hat_plus), (nonempty & ~success, -r_hat_minus)):
        logs = torch.where(members, torch.log(torch.where(members, r, 1.0)), 0.0)
        total = core.group_view(logs, G).sum(dim=1)
        assert bool((total.abs() <= 1e-9 * (1 + core.group_view(logs.abs(), G).sum(1))).all())


def test_geometric_worked_example():
    """§2.4.1 on the worked example (page, "Geometric means"): Ĥ = √2 = 1.414214 (o1),
    3^(1/4) = 1.316074 (o2), 0.25^(1/3) = 0.629961 (o3), 2 (o4). O⁺: GM = √(1.414214·1.316074)
    = 1.364262, weights 1.036615, 0.964679, r̂⁺ = 1.103661, 1.096468. O⁻: 1/Ĥ = 1.587401, 0.5,
    GM = 0.890899, weights 1.781797, 0.561231, r̂⁻ = −1.178180, −1.056123. Joint z-score: mean
    −0.008543, std 1.281083, Â = 0.868175, 0.862560, −0.913006, −0.817730."""
    batch, _ = worked.batch()
    cfg = grpo_s.Config(entropy_mean="geometric", entropy_eps=1e-12)
    r_hat_plus, r_hat_minus = grpo_s.sequence_rewards(batch, cfg)
    h = [math.sqrt(2), 3**0.25, 0.25 ** (1 / 3), 2.0]
    gm_plus, gm_inv_minus = math.sqrt(h[0] * h[1]), math.sqrt(1 / (h[2] * h[3]))
    expected_plus = [1 + 0.1 * h[0] / gm_plus, 1 + 0.1 * h[1] / gm_plus, 0, 0]
    expected_minus = [0, 0, -1 - 0.1 / h[2] / gm_inv_minus, -1 - 0.1 / h[3] / gm_inv_minus]
    torch.testing.assert_close(
        r_hat_plus, torch.tensor(expected_plus, dtype=torch.float64), atol=1e-9, rtol=0
    )
    torch.testing.assert_close(
        r_hat_minus, torch.tensor(expected_minus, dtype=torch.float64), atol=1e-9, rtol=0
    )
    A = grpo_s.advantages(batch, cfg)
    A_hat = [0.868175, 0.862560, -0.913006, -0.817730]
    expected = worked.rows([[A_hat[0]] * 2, [A_hat[1]] * 4, [A_hat[2]] * 3, [A_hat[3]]])
    torch.testing.assert_close(A, expected, atol=1e-5, rtol=0)
