"""STEER's own invariants (arXiv 2510.10150; the authors' verl fork, ``compute_token_weights``
and the ``entropy_control`` loss). One invariant per test; Ω and the weights are recomputed
here in float64 with plain loops, independently of the module."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl import core
from refimpl.algorithms import dapo, steer
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import batch_and_policy, pad_tensor, rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")

LINEAR = steer.Config()
EXPONENTIAL = steer.Config(mapping="exponential", lambda_max=1.0)


def _cells(mask: torch.Tensor) -> list[tuple[int, int]]:
    return [(i, t) for i in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[i, t] == 1]


def _omega_by_hand(batch: RolloutBatch, logp, adv, p: int) -> dict[tuple[int, int], float]:
    """Ω per response token, the authors' formula in float64, one token at a time."""
    out = {}
    for c in _cells(batch.response_mask):
        pi = min(max(math.exp(float(logp[c])), 1e-8), 1 - 1e-8)
        pi_old = max(math.exp(float(batch.logp_old[c])), 1e-8)
        h = float(batch.entropy_old[c])
        out[c] = float(adv[c]) / pi_old * pi * (1 - pi) ** p * (math.log(pi) + h)
    return out


def _random_adv(batch: RolloutBatch, seed: int, zero_frac: float = 0.0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    adv = 2.0 * torch.randn(batch.response_mask.shape, generator=gen)
    adv = torch.where(torch.rand(adv.shape, generator=gen) < zero_frac, 0.0, adv)
    return pad_tensor(adv, batch.response_mask, 0.0)


def _weights(batch, logp, adv, cfg) -> torch.Tensor:
    omega = steer.omega(batch, logp, adv, cfg.omega_power)
    return steer.token_weights(omega.abs(), batch.response_mask, cfg)


@settings(max_examples=max(60, settings().max_examples))
@given(x=batch_and_policy(), seed=st.integers(0, 2**31 - 1), p=st.sampled_from([1, 2]))
def test_omega_is_the_authors_formula(x, seed, p):
    """Ω = (A/π_old)·π(1 − π)^p·(ln π + H_old), π = clamp(exp(logp), 1e-8, 1 − 1e-8), π_old =
    max(exp(logp_old), 1e-8), for p = 1 (the current source) and p = 2 (the paper's runs);
    exactly 0 on padding."""
    batch, logp, _ = x
    adv = _random_adv(batch, seed)
    got = steer.omega(batch, logp, adv, p)
    expected = _omega_by_hand(batch, logp, adv, p)
    for c, value in expected.items():
        assert float(got[c]) == pytest.approx(value, rel=1e-4, abs=1e-6), c
    assert bool((got[batch.response_mask == 0] == 0).all())


@given(batch=rollout_batches(), seed=st.integers(0, 2**31 - 1), p=st.sampled_from([1, 2]))
def test_omega_has_the_sign_of_a_times_lnpi_plus_h_on_policy(batch, seed, p):
    """At logp = logp_old (π = π_old, clamps aside), Ω = A·(1 − π)^p·(ln π + H): its sign is
    that of A·(ln π + H) (0 when either is 0), since (1 − π)^p > 0 for the clamped π < 1."""
    adv = _random_adv(batch, seed, zero_frac=0.2)
    got = steer.omega(batch, batch.logp_old, adv, p)
    for i, t in _cells(batch.response_mask):
        pi = min(max(math.exp(float(batch.logp_old[i, t])), 1e-8), 1 - 1e-8)
        factor = float(adv[i, t]) * (math.log(pi) + float(batch.entropy_old[i, t]))
        if abs(factor) > 1e-6 * (1 + abs(math.log(pi))):  # a sign float32 decides surely
            assert math.copysign(1, float(got[i, t])) == math.copysign(1, factor)
        elif factor == 0:
            assert float(got[i, t]) == 0.0


@pytest.mark.parametrize("seed", range(6))
def test_own_logit_step_changes_entropy_by_minus_eta_pi_omega(seed):
    """What Ω measures: for one softmax state, a step of size η up the surrogate's gradient
    applied to the sampled token's own logit changes the entropy by −η·π·Ω(p = 1) to first
    order (module docstring: ∂H/∂z_a = −π_a(ln π_a + H), ∂(A·π_a/π_old)/∂z_a =
    (A/π_old)·π_a(1 − π_a)). So the own-logit entropy change has the sign of −Ω."""
    gen = torch.Generator().manual_seed(seed)
    z = 2.0 * torch.randn(6, generator=gen, dtype=torch.float64)
    a, A, eta = seed % 6, float(torch.randn((), generator=gen)), 1e-6
    z_old = z + 0.1 * torch.randn(6, generator=gen, dtype=torch.float64)  # π ≠ π_old

    def entropy(logits):
        p = torch.softmax(logits, 0)
        return float(-(p * p.log()).sum())

    pi, pi_old = torch.softmax(z, 0), torch.softmax(z_old, 0)
    batch = RolloutBatch(
        response_ids=torch.zeros(2, 1, dtype=torch.long),
        response_mask=torch.tensor([[1.0], [0.0]]),
        rewards=torch.zeros(2),
        logp_old=torch.tensor([[math.log(float(pi_old[a]))], [0.0]]),
        entropy_old=torch.tensor([[entropy(z)], [0.0]]),  # H of the state being stepped
        group_size=2,
    )
    logp = torch.tensor([[math.log(float(pi[a]))], [0.0]])
    omega = float(steer.omega(batch, logp, torch.tensor([[A], [0.0]]), 1)[0, 0])
    step = torch.zeros(6, dtype=torch.float64)
    step[a] = eta * A / float(pi_old[a]) * float(pi[a]) * (1 - float(pi[a]))
    change = entropy(z + step) - entropy(z)
    assert change == pytest.approx(-eta * float(pi[a]) * omega, rel=1e-3, abs=1e-12)


def _external_range(batch: RolloutBatch, logp, adv, cfg: steer.Config, shrink: float):
    """A ``normalise="batch"`` Config whose |Ω| range is narrower than this policy's (as when
    the current policy has moved away from θ_old): tokens fall outside it on both sides."""
    omega_abs = steer.omega(batch, logp, adv, cfg.omega_power).abs()
    values = omega_abs[batch.response_mask.bool()]
    lo, hi = float(values.min()), float(values.max())
    mid, half = (lo + hi) / 2, (hi - lo) / 2 * shrink
    return dataclasses.replace(
        cfg, normalise="batch", omega_abs_min=mid - half, omega_abs_max=mid + half
    )


@settings(max_examples=max(60, settings().max_examples))
@given(
    x=batch_and_policy(),
    seed=st.integers(0, 2**31 - 1),
    cfg=st.sampled_from([LINEAR, EXPONENTIAL]),
    external=st.booleans(),
)
def test_weights_lie_in_their_clamp_range(x, seed, cfg, external):
    """λ ∈ [λ_min, λ_max] (linear) or [λ_min, 1] (exponential) on every response token, 0 on
    padding; also when the range comes from elsewhere (a rollout range, ``normalise="batch"``,
    that this policy's |Ω| leaves on both sides: only the clamp keeps λ in bounds then)."""
    batch, logp, _ = x
    adv = _random_adv(batch, seed)
    if external and bool(batch.response_mask.any()):
        cfg = _external_range(batch, logp, adv, cfg, shrink=0.5)
    weight = _weights(batch, logp, adv, cfg)
    upper = cfg.lambda_max if cfg.mapping == "linear" else 1.0
    active = batch.response_mask.bool()
    assert bool((weight[active] >= cfg.lambda_min - 1e-6).all())
    assert bool((weight[active] <= upper + 1e-6).all())
    assert bool((weight[~active] == 0).all())


@given(x=batch_and_policy(), seed=st.integers(0, 2**31 - 1))
def test_zero_advantage_tokens_get_lambda_max_or_one(x, seed):
    """A = 0 gives |Ω| = 0, the smallest |Ω| of any set it is in. Linear: the map sends the
    set's minimum to λ_max, unless every |Ω| of the set is equal (then the midpoint, (λ_min +
    λ_max)/2; e.g. every A = 0). Exponential: exp(−k·0) = 1."""
    batch, logp, _ = x
    adv = _random_adv(batch, seed, zero_frac=0.3)
    zero = batch.response_mask.bool() & (adv == 0)
    if not bool(zero.any()):
        return
    omega_abs = steer.omega(batch, logp, adv, LINEAR.omega_power).abs()
    values = omega_abs[batch.response_mask.bool()]
    equal = bool(values.max() == values.min())
    expected = (LINEAR.lambda_min + LINEAR.lambda_max) / 2 if equal else LINEAR.lambda_max
    torch.testing.assert_close(
        _weights(batch, logp, adv, LINEAR)[zero], torch.full((int(zero.sum()),), expected)
    )
    torch.testing.assert_close(
        _weights(batch, logp, adv, EXPONENTIAL)[zero], torch.ones(int(zero.sum()))
    )


@given(
    x=batch_and_policy(),
    seed=st.integers(0, 2**31 - 1),
    cfg=st.sampled_from([LINEAR, EXPONENTIAL, dataclasses.replace(LINEAR, omega_power=1)]),
)
def test_weights_fall_monotonically_with_abs_omega(x, seed, cfg):
    """Within one set, |Ω_a| < |Ω_b| implies λ_a ≥ λ_b (strictly for the linear map inside its
    range: −(λ_max − λ_min)/(max − min) is its slope). The linear map's endpoints: the set's
    smallest |Ω| gets λ_max and its largest λ_min; the exponential map gives the largest |Ω|
    λ_min when max|Ω| ≥ 0.02 (k = −ln λ_min / max|Ω|)."""
    batch, logp, _ = x
    adv = _random_adv(batch, seed)
    omega_abs = steer.omega(batch, logp, adv, cfg.omega_power).abs()
    weight = _weights(batch, logp, adv, cfg)
    active = batch.response_mask.bool()
    if not bool(active.any()):
        return
    o, w = omega_abs[active].double(), weight[active].double()
    order = torch.argsort(o)
    assert bool((w[order][1:] <= w[order][:-1] + 1e-6).all())
    lo, hi = o.min(), o.max()
    if cfg.mapping == "linear" and hi > lo:
        assert float(w[o == lo].min()) == pytest.approx(cfg.lambda_max, abs=1e-6)
        assert float(w[o == hi].max()) == pytest.approx(cfg.lambda_min, abs=1e-6)
    if cfg.mapping == "exponential" and hi >= cfg.omega_floor:
        assert float(w[o == hi].max()) == pytest.approx(cfg.lambda_min, abs=1e-5)


def test_exponential_floor_keeps_small_changes_near_one():
    """Below the floor (max|Ω| < 0.02) k = −ln λ_min / 0.02: the largest |Ω| gets
    λ_min^(max|Ω|/0.02) > λ_min, not λ_min (a batch that barely moves the entropy is barely
    reweighted)."""
    batch, logp = worked.batch()
    adv = steer.advantages(batch, EXPONENTIAL) * 1e-3  # every |Ω| below 5e-4
    omega_abs = steer.omega(batch, logp, adv, 2).abs()
    top = float(omega_abs.max())
    assert top < 0.02
    weight = steer.token_weights(omega_abs, batch.response_mask, EXPONENTIAL)
    assert float(weight[omega_abs == top].max()) == pytest.approx(0.8 ** (top / 0.02), rel=1e-5)


@given(x=batch_and_policy(), mapping=st.sampled_from(["linear", "exponential"]))
def test_unit_weights_give_dapos_loss(x, mapping):
    """λ_min = λ_max = 1 makes every weight 1 (linear: a line of slope 0, or the midpoint 1;
    exponential: k = −ln 1 / … = 0), and with ratios below c = 10 the dual clip never acts:
    the loss and its gradient are DAPO's clipped token-mean."""
    batch, logp, _ = x
    cfg = steer.Config(mapping=mapping, lambda_min=1.0, lambda_max=1.0)
    adv = steer.advantages(batch, cfg)
    lp = logp.clone().requires_grad_(True)
    ours, metrics = steer.loss(batch, lp, adv, cfg)
    ours.backward()
    lp_d = logp.clone().requires_grad_(True)
    theirs, _ = dapo.loss(batch, lp_d, adv, dapo.Config())
    theirs.backward()
    torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(lp.grad, lp_d.grad, rtol=1e-6, atol=1e-9)
    if bool(batch.response_mask.any()):
        assert metrics["steer_weight_min"] == metrics["steer_weight_max"] == 1.0


@settings(max_examples=max(60, settings().max_examples))
@given(x=batch_and_policy(), seed=st.integers(0, 2**31 - 1))
def test_loss_is_the_weighted_token_mean_over_the_token_count(x, seed):
    """L = Σ m·λ·(−s(w, A)) / Σ m, the normaliser the token count (not Σ λ); each token's term
    is its clipped surrogate times λ, after clipping (recomputed here in float64)."""
    batch, logp, _ = x
    adv = _random_adv(batch, seed)
    weight = _weights(batch, logp, adv, LINEAR).double()
    total, _ = steer.loss(batch, logp, adv, LINEAR)
    cells = _cells(batch.response_mask)
    terms = 0.0
    for c in cells:
        w, a = math.exp(float(logp[c]) - float(batch.logp_old[c])), float(adv[c])
        s = min(w * a, min(max(w, 0.8), 1.28) * a)
        s = max(s, 10.0 * a) if a < 0 else s
        terms += -float(weight[c]) * s
    expected = terms / len(cells) if cells else 0.0
    assert float(total) == pytest.approx(expected, rel=1e-4, abs=1e-5)


def test_dual_clip_caps_negative_advantage_terms():
    """For A < 0 the term is −λ·max(s, c·A): at w = 12 > c = 10 it is λ·10·|A| with no
    gradient (DAPO's would be λ·12·|A|, still pulling); at w = 5 < c it is DAPO's λ·5·|A|."""
    mask = torch.ones(2, 1)
    batch = RolloutBatch(
        response_ids=torch.zeros(2, 1, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([0.0, 1.0]),
        logp_old=torch.full((2, 1), math.log(0.05)),
        entropy_old=torch.ones(2, 1),
        group_size=2,
    )
    adv = torch.tensor([[-1.0], [-1.0]])
    cfg = steer.Config(lambda_min=1.0, lambda_max=1.0)  # λ = 1: the clip alone
    for ratio, value, slope in ((12.0, 10.0, 0.0), (5.0, 5.0, 5.0)):
        logp = torch.full((2, 1), math.log(0.05 * ratio), requires_grad=True)
        total, metrics = steer.loss(batch, logp, adv, cfg)
        total.backward()
        assert float(total.detach()) == pytest.approx(value, rel=1e-5)  # two equal terms
        torch.testing.assert_close(logp.grad, torch.full((2, 1), slope / 2))
        assert metrics["dual_clip_frac"] == (1.0 if ratio > 10 else 0.0)


def test_weights_carry_no_gradient():
    """λ is computed without gradient: with the policy moved (w ≠ 1), ∂L/∂logp is
    −λ·A·w / Σ m on every unclipped token, the derivative of the surrogate alone."""
    batch, logp = worked.batch()
    cfg = LINEAR
    adv = steer.advantages(batch, cfg)
    weight = _weights(batch, logp, adv, cfg)
    _, grad, _ = worked.loss_and_grad(steer, cfg, batch, logp)
    w = torch.exp(logp - batch.logp_old)
    clipped = ((adv > 0) & (w > 1.28)) | ((adv < 0) & (w < 0.8))
    expected = torch.where(clipped | (batch.response_mask == 0), 0.0, -weight * adv * w / 10)
    torch.testing.assert_close(grad, expected, rtol=1e-5, atol=1e-7)


def _halves(batch: RolloutBatch) -> list[RolloutBatch]:
    keep = torch.zeros(batch.num_groups, dtype=torch.bool)
    keep[: batch.num_groups // 2] = True
    return [batch.select_groups(keep), batch.select_groups(~keep)]


@given(
    batch=rollout_batches(min_groups=2, allow_empty=False),
    mapping=st.sampled_from(["linear", "exponential"]),
)
def test_batch_normalisation_uses_the_rollouts_range_in_every_minibatch(batch, mapping):
    """``normalise="batch"``: ``for_update`` sets the range to min and max of |Ω| over the whole
    rollout at θ_old, and a minibatch's weights then equal the whole batch's weights on its
    rows; ``"micro-batch"`` (the default) leaves the Config as it is, and each minibatch maps
    its own range. Either way a loss called on the whole batch maps the whole batch's range."""
    micro = steer.Config(mapping=mapping, lambda_max=1.2 if mapping == "linear" else 1.0)
    whole = dataclasses.replace(micro, normalise="batch")
    adv = steer.advantages(batch, micro)
    assert micro.for_update(batch, adv) is micro
    fixed = whole.for_update(batch, adv)
    omega_abs = steer.omega(batch, batch.logp_old, adv, micro.omega_power).abs()
    values = omega_abs[batch.response_mask.bool()]
    assert (fixed.omega_abs_min, fixed.omega_abs_max) == (float(values.min()), float(values.max()))
    everything = steer.token_weights(omega_abs, batch.response_mask, micro)
    torch.testing.assert_close(
        steer.token_weights(omega_abs, batch.response_mask, whole), everything
    )
    half = batch.num_groups // 2 * batch.group_size
    first, _ = _halves(batch)
    part = steer.omega(first, first.logp_old, adv[:half], micro.omega_power).abs()
    torch.testing.assert_close(
        steer.token_weights(part, first.response_mask, fixed), everything[:half]
    )
    own = steer.token_weights(part, first.response_mask, micro)
    values = part[first.response_mask.bool()]
    if mapping == "linear" and float(values.max()) > float(values.min()):
        assert float(own[first.response_mask.bool()].min()) == pytest.approx(0.8, abs=1e-6)


def test_config_for_update_needs_a_response_token():
    """A rollout without a response token leaves the Config unset (the loss is 0 then)."""
    batch, _ = worked.batch()
    empty = batch.replace(response_mask=torch.zeros_like(batch.response_mask))
    cfg = steer.Config(normalise="batch")
    assert cfg.for_update(empty, torch.zeros_like(empty.logp_old)) is cfg


def test_advantages_refuse_another_algorithms_config():
    """``advantages`` and ``loss`` refuse a Config that is not STEER's (DAPO's has no λ)."""
    batch, logp = worked.batch()
    with pytest.raises(ValueError, match="steer.Config"):
        steer.advantages(batch, dapo.Config())
    adv = steer.advantages(batch, LINEAR)
    with pytest.raises(ValueError, match="steer.Config"):
        steer.loss(batch, logp, adv, dapo.Config())


def test_paper_defaults():
    """The run scripts' settings: linear map onto [0.8, 1.2], clip 0.2 / 0.28, dual clip c =
    10, no KL, token-mean, GRPO's advantage without dynamic sampling or overlong shaping; p = 2
    (the paper's compiled code) and the micro-batch as the normalisation set (the original)."""
    cfg = steer.Config()
    assert (cfg.mapping, cfg.lambda_min, cfg.lambda_max) == ("linear", 0.8, 1.2)
    assert (cfg.omega_power, cfg.omega_floor, cfg.normalise) == (2, 0.02, "micro-batch")
    assert (cfg.clip_eps_low, cfg.clip_eps_high, cfg.clip_ratio_c) == (0.2, 0.28, 10.0)
    assert (cfg.kl_coef, cfg.loss_agg_mode) == (0.0, "token-mean")
    assert not (cfg.dynamic_sampling or cfg.overlong_shaping or cfg.overlong_filter)
    assert cfg.omega_abs_min is None and cfg.omega_abs_max is None


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"mapping": "cubic"}, "mapping"),
        ({"normalise": "group"}, "normalise"),
        ({"lambda_min": 1.3}, "lambda_min"),
        ({"lambda_min": 0.0}, "lambda_min"),
        ({"mapping": "exponential", "lambda_min": 1.1, "lambda_max": 1.2}, "lambda_min"),
        ({"omega_power": 3}, "omega_power"),
        ({"clip_ratio_c": 1.0}, "clip_ratio_c"),
        ({"omega_floor": 0.0}, "omega_floor"),
        ({"normalise": "batch", "omega_abs_min": 0.1}, "omega_abs_min"),
        ({"normalise": "batch", "omega_abs_min": 0.3, "omega_abs_max": 0.1}, "omega_abs_min"),
        ({"omega_abs_min": 0.1, "omega_abs_max": 0.2}, "omega_abs_min"),
    ],
)
def test_config_rejects_bad_values(changes, field):
    """Config validation: an unknown mapping or set, λ_min > λ_max or ≤ 0, λ_min > 1 for the
    exponential map, p ∉ {1, 2}, c ≤ 1, a zero floor, a half-set or inverted |Ω| range, or a
    range without normalise="batch" raise a ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        steer.Config(**changes)


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/steer.md``."""
    batch, logp = worked.batch()
    cfg = steer.Config()
    adv = steer.advantages(batch, cfg)
    a = 0.866025
    torch.testing.assert_close(
        adv, worked.rows([[a] * 2, [a] * 4, [-a] * 3, [-a]]), atol=1e-5, rtol=0
    )
    omega = steer.omega(batch, logp, adv, 2)
    expected = worked.rows(
        [
            [0.077580, 0.232913],
            [0.499448, 0.282942, 0.066436, -0.041818],
            [0.070381, -0.004864, 0.041818],
            [-0.139023],
        ]
    )
    torch.testing.assert_close(omega, expected, atol=1e-5, rtol=0)
    weight = steer.token_weights(omega.abs(), batch.response_mask, cfg)
    expected = worked.rows(
        [
            [1.141190, 1.015563],
            [0.8, 0.975102, 1.150203, 1.170113],
            [1.147013, 1.2, 1.170113],
            [1.091498],
        ]
    )
    torch.testing.assert_close(weight, expected, atol=1e-5, rtol=0)
    total, grad, metrics = worked.loss_and_grad(steer, cfg, batch, logp)
    assert total == pytest.approx(-0.157661, abs=1e-5)
    expected = worked.rows(
        [
            [-0.108713, -0.109938],
            [-0.069282, -0.084446, -0.099610, -0.101335],
            [0.089401, 0.0, 0.101335],
            [0.141789],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)
    assert metrics["omega_sum_p2"] == pytest.approx(1.085811, abs=1e-5)
    assert metrics["omega_sum_p1"] == pytest.approx(2.055241, abs=1e-5)
    # p = 1 (the current source) and the exponential map (run_exp.sh) on the same group.
    p1 = worked.loss_and_grad(steer, dataclasses.replace(cfg, omega_power=1), batch, logp)[0]
    assert p1 == pytest.approx(-0.164317, abs=1e-5)
    exponential = worked.loss_and_grad(steer, EXPONENTIAL, batch, logp)[0]
    assert exponential == pytest.approx(-0.152500, abs=1e-5)
    assert core.masked_sum(weight, batch.response_mask) == pytest.approx(10.860798, abs=1e-4)
