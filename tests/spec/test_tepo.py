"""TEPO's own invariants (``refimpl/algorithms/tepo.py``; docs/algorithms/tepo.md).

TEPO here is a reconstruction (see the module docstring and ``docs/fidelity.md``): GRPO's
advantage, the GSPO-token ratio, token-mean aggregation, and a k3 KL term kept only on the
tokens with positive advantage and decreasing entropy; every assumption is a switch, and each
switch has a test here. The common invariants are in ``test_common.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl import core
from refimpl.algorithms import dapo, gspo, tepo
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import batch_and_policy, rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _loss_and_grad(batch, logp, adv, cfg, entropy):
    lp = logp.clone().requires_grad_()
    total, metrics = tepo.loss(batch, lp, adv, cfg, entropy=entropy)
    total.backward()
    return total.detach(), lp.grad, metrics


@pytest.mark.parametrize("strict", [True, False])
@given(x=batch_and_policy(), tol=st.sampled_from([0.0, 1e-4, 0.3]))
def test_kl_mask_is_positive_advantage_and_decreasing_entropy(strict, x, tol):
    """M[i,t] = 1 exactly on the response tokens with A[i,t] > 0 and H_θ[i,t] < H_old[i,t] − τ
    (abstract: "tokens with positive advantages and decreasing entropy"; ≤ with
    ``entropy_strict=False``), the same τ the loss uses: 0 wherever A ≤ 0, wherever the
    entropy did not fall by more than τ, and on padding."""
    batch, _, entropy = x
    cfg = tepo.Config(entropy_decrease_tol=tol, entropy_strict=strict)
    adv = tepo.advantages(batch, cfg)
    M = tepo.kl_mask(adv, entropy, batch.entropy_old, batch.response_mask, cfg)
    active = batch.response_mask.bool()
    h, h_old = entropy.double(), batch.entropy_old.double()
    fell = (h < h_old - tol) if strict else (h <= h_old - tol)
    expected = active & (adv > 0) & fell
    assert torch.equal(M.bool(), expected)
    # The loss reports the same mask.
    _, _, metrics = _loss_and_grad(batch, batch.logp_old, adv, cfg, entropy)
    assert metrics["kl_mask_frac"] == pytest.approx(
        float(expected.sum()) / max(float(active.sum()), 1.0)
    )


@given(batch_and_policy())
def test_kl_mask_strictness_on_unchanged_entropy(x):
    """With τ = 0, a token whose entropy did not change is not "decreasing" under the strict
    comparison (default) and is under ``entropy_strict=False``: where A > 0 and H_θ = H_old."""
    batch, _, _ = x
    m = batch.response_mask
    for strict in (True, False):
        cfg = tepo.Config(entropy_decrease_tol=0.0, entropy_strict=strict)
        adv = tepo.advantages(batch, cfg)
        M = tepo.kl_mask(adv, batch.entropy_old, batch.entropy_old, m, cfg)
        expected = torch.zeros_like(m.bool()) if strict else (m.bool() & (adv > 0))
        assert torch.equal(M.bool(), expected)


@given(batch_and_policy())
def test_kl_mask_sequence_source(x):
    """``entropy_source="sequence"``: the entropy that decreases is the rollout's, along the
    completion: M[i,t] = 1[A > 0]·1[H_old[i,t] < H_old[i,t−1] − τ], never at t = 0; the
    current entropy is not read (the loss needs none)."""
    batch, logp, _ = x
    cfg = tepo.Config(entropy_source="sequence")
    adv = tepo.advantages(batch, cfg)
    m = batch.response_mask.bool()
    h = batch.entropy_old.double()
    expected = torch.zeros_like(m)
    expected[:, 1:] = m[:, 1:] & m[:, :-1] & (h[:, 1:] < h[:, :-1] - cfg.entropy_decrease_tol)
    expected &= adv > 0
    M = tepo.kl_mask(adv, None, batch.entropy_old, batch.response_mask, cfg)
    assert torch.equal(M.bool(), expected)
    total, _ = tepo.loss(batch, logp, adv, cfg, entropy=None)  # no entropy needed
    assert math.isfinite(float(total))


@given(batch_and_policy(max_log_ratio=0.6))
def test_beta_zero_equals_gspo_ratio_token_mean_loss(x):
    """With β = 0 the loss is the token-mean of −min(s_i·A, clip(s_i, 0.8, 1.28)·A), where
    s_i = exp(mean_t (logp − logp_old)) is the completion's sequence ratio (computed here
    independently, in float64): the GSPO-token ratio has the value s_i on every token."""
    batch, logp, entropy = x
    cfg = tepo.Config(kl_coef=0.0)
    adv = tepo.advantages(batch, cfg)
    total, _ = tepo.loss(batch, logp, adv, cfg, entropy=entropy)
    m = batch.response_mask.bool()
    delta = torch.where(m, logp.double() - batch.logp_old.double(), 0.0)
    s = torch.exp(delta.sum(1) / m.sum(1).clamp(min=1))[:, None]
    A = adv.double()
    per_token = -torch.minimum(s * A, s.clamp(0.8, 1.28) * A)
    expected = torch.where(m, per_token, 0.0).sum() / max(int(m.sum()), 1)
    assert float(total) == pytest.approx(float(expected), rel=1e-5, abs=1e-6)


@given(batch_and_policy(max_log_ratio=1.0))
def test_gspo_token_ratio_value_and_gradient(x):
    """GSPO-token form: s[i,t] = sg[s_i]·π_θ/sg[π_θ] equals s_i in value on every response
    token (exactly: the exponent is sg[log s_i] + (logp − sg[logp]), the bracket exactly 0),
    but its gradient reaches only its own token: ∂s[i,t]/∂logp[i,t'] = s_i·1[t = t'], whereas
    the plain s_i spreads s_i/|o_i| over every token of o_i. So for any weights g,
    ∂(Σ_{t} g[i,t]·s[i,t])/∂logp[i,t] = s_i·g[i,t] (and 0 on padding)."""
    batch, logp, _ = x
    m = batch.response_mask
    lp = logp.clone().requires_grad_()
    s_token = tepo.policy_ratio(lp, batch.logp_old, m, "gspo_token")
    s_i = torch.exp(core.sequence_log_ratio(logp, batch.logp_old, m))
    active = m.bool()
    assert torch.equal(s_token.detach()[active], s_i[:, None].expand_as(m)[active])
    g = torch.linspace(-1.0, 2.0, m.numel()).reshape(m.shape)
    core.masked(s_token * g, m).sum().backward()
    torch.testing.assert_close(lp.grad, core.masked(s_i[:, None] * g, m), rtol=1e-5, atol=1e-6)


@given(batch_and_policy(max_log_ratio=0.6))
def test_ratio_token_is_dapo_plus_masked_kl(x):
    """``ratio="token"``: the policy term uses the per-token ratio w[i,t]; with β = 0 the loss
    and gradient are DAPO's at the same clip range and aggregation."""
    batch, logp, entropy = x
    cfg = tepo.Config(ratio="token", kl_coef=0.0)
    adv = tepo.advantages(batch, cfg)
    l1, g1, _ = _loss_and_grad(batch, logp, adv, cfg, entropy)
    ref = dapo.Config(clip_eps_low=cfg.clip_eps_low, clip_eps_high=cfg.clip_eps_high)
    lp = logp.clone().requires_grad_()
    l2, _ = dapo.loss(batch, lp, adv, ref)
    l2.backward()
    torch.testing.assert_close(l1, l2.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(g1, lp.grad, rtol=1e-6, atol=1e-7)


@given(rollout_batches())
def test_advantage_switch(batch):
    """``advantage="grpo"``: (r_i − mean)/(std + eps); ``"centred"``: r_i − mean, so the two
    differ by the factor (std + eps) within every group (computed here in float64)."""
    G = batch.group_size
    A_z = tepo.advantages(batch, tepo.Config())
    A_c = tepo.advantages(batch, tepo.Config(advantage="centred"))
    r = batch.rewards.double().view(-1, G)
    scale = (r.std(dim=1, unbiased=True) + 1e-6).repeat_interleave(G)[:, None]
    torch.testing.assert_close(A_c.double(), A_z.double() * scale, rtol=1e-5, atol=1e-6)
    centred = (r - r.mean(dim=1, keepdim=True)).reshape(-1)[:, None]
    expected = torch.where(batch.response_mask.bool(), centred, 0.0)
    equal = (r.max(dim=1).values == r.min(dim=1).values).repeat_interleave(G)
    expected[equal] = 0.0
    torch.testing.assert_close(A_c.double(), expected, rtol=1e-5, atol=1e-6)


@given(batch_and_policy(with_ref=True))
def test_kl_denominator_masked(x):
    """``kl_denominator="masked"``: the KL term is β·Σ M·kl / Σ M (its mean over the masked
    tokens), not β·Σ M·kl / Σ m; 0 when the mask is empty."""
    batch, logp, entropy = x
    adv = tepo.advantages(batch, tepo.Config())
    on = tepo.Config(kl_coef=0.5, kl_denominator="masked")
    l1, _, _ = _loss_and_grad(batch, logp, adv, on, entropy)
    l0, _, _ = _loss_and_grad(batch, logp, adv, tepo.Config(kl_coef=0.0), entropy)
    M = tepo.kl_mask(adv, entropy, batch.entropy_old, batch.response_mask, on).bool()
    delta = torch.where(M, batch.logp_ref.double() - logp.double(), 0.0)
    kl = torch.exp(delta) - delta - 1
    expected = 0.5 * kl.sum() / max(float(M.sum()), 1.0)
    assert float(l1 - l0) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


@given(rollout_batches())
def test_kl_old_vanishes_on_policy(batch):
    """kl_anchor="old": at logp == logp_old, kl = e⁰ − 0 − 1 = 0 and ∂kl/∂logp = 1 − e⁰ = 0 on
    every token, so the loss and its gradient equal those with β = 0."""
    entropy = batch.entropy_old * 0.5  # entropy decreased everywhere: the mask is A > 0
    adv = tepo.advantages(batch, tepo.Config())
    on = tepo.Config(kl_anchor="old", kl_coef=1.0)
    off = tepo.Config(kl_anchor="old", kl_coef=0.0)
    l1, g1, _ = _loss_and_grad(batch, batch.logp_old, adv, on, entropy)
    l0, g0, _ = _loss_and_grad(batch, batch.logp_old, adv, off, entropy)
    torch.testing.assert_close(l1, l0, rtol=0, atol=1e-7)
    torch.testing.assert_close(g1, g0, rtol=0, atol=1e-7)


@given(batch_and_policy(with_ref=True))
def test_kl_term_only_on_masked_tokens(x):
    """The KL term is β·Σ M·kl / Σ m: its value is that (k3 against π_ref, computed here
    independently) and its gradient is zero on every token outside the mask."""
    batch, logp, entropy = x
    adv = tepo.advantages(batch, tepo.Config())
    l1, g1, _ = _loss_and_grad(batch, logp, adv, tepo.Config(kl_coef=0.5), entropy)
    l0, g0, _ = _loss_and_grad(batch, logp, adv, tepo.Config(kl_coef=0.0), entropy)
    tol = tepo.Config().entropy_decrease_tol
    M = (batch.response_mask.bool() & (adv > 0)) & (entropy < batch.entropy_old - tol)
    delta = torch.where(M, batch.logp_ref.double() - logp.double(), 0.0)
    kl = torch.exp(delta) - delta - 1
    expected = 0.5 * kl.sum() / max(float(batch.response_mask.sum()), 1.0)
    assert float(l1 - l0) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)
    assert bool(((g1 - g0)[~M] == 0).all())


@given(batch_and_policy(with_ref=True))
def test_kl_mask_off_puts_kl_on_every_token(x):
    """kl_mask=False (the ablation): the KL term is β·token-mean(kl) over all response tokens,
    and no entropy is needed."""
    batch, logp, _ = x
    adv = tepo.advantages(batch, tepo.Config())
    l1, _, _ = _loss_and_grad(batch, logp, adv, tepo.Config(kl_coef=0.5, kl_mask=False), None)
    l0, _, _ = _loss_and_grad(batch, logp, adv, tepo.Config(kl_coef=0.0), None)
    m = batch.response_mask.bool()
    delta = torch.where(m, batch.logp_ref.double() - logp.double(), 0.0)
    kl = torch.exp(delta) - delta - 1
    expected = 0.5 * kl.sum() / max(int(m.sum()), 1)
    assert float(l1 - l0) == pytest.approx(float(expected), rel=1e-4, abs=1e-6)


@given(x=batch_and_policy(with_ref=True), data=st.data())
def test_entropy_enters_only_through_the_mask(x, data):
    """The current entropy H_θ only selects tokens. Moving it without crossing any threshold
    H_old − τ leaves the loss and gradient bitwise unchanged; pushing one positive-advantage
    token across it (from H_old to H_old − 2τ − 0.1) adds exactly that token's KL term
    β·kl[i,t]/Σm to the loss (nothing else: no entropy bonus, no other use of H_θ)."""
    batch, logp, _ = x
    cfg = tepo.Config(kl_coef=0.5)
    adv = tepo.advantages(batch, cfg)
    m = batch.response_mask.bool()
    H_old = batch.entropy_old
    up = H_old + 1.0  # no decrease anywhere: M = 0
    l_up, g_up, _ = _loss_and_grad(batch, logp, adv, cfg, up)
    l_up2, g_up2, _ = _loss_and_grad(batch, logp, adv, cfg, H_old + 7.0)
    assert torch.equal(l_up, l_up2) and torch.equal(g_up, g_up2)
    # A token whose H_old leaves room to push H_θ below H_old − 2τ − 0.1 and stay ≥ 0 (a loss
    # refuses negative entropies).
    room = H_old >= 2 * cfg.entropy_decrease_tol + 0.1
    candidates = (m & (adv > 0) & room).nonzero().tolist()
    if not candidates:
        return
    i, t = data.draw(st.sampled_from(candidates), label="token")
    down = up.clone()
    down[i, t] = H_old[i, t] - 2 * cfg.entropy_decrease_tol - 0.1
    l_down, _, metrics = _loss_and_grad(batch, logp, adv, cfg, down)
    d = float(batch.logp_ref[i, t]) - float(logp[i, t])
    kl = math.exp(max(min(d, 20.0), -20.0)) - d - 1
    expected = cfg.kl_coef * kl / float(m.sum())
    assert float(l_down - l_up) == pytest.approx(expected, rel=1e-4, abs=1e-6)
    assert metrics["kl_mask_frac"] == pytest.approx(1.0 / float(m.sum()))


@given(batch_and_policy(max_log_ratio=0.6))
def test_equals_verl_gspo_token_mean_at_beta_zero(x):
    """Cross-check (docs/algorithms/tepo.md): with β = 0 TEPO's policy term is verl's ``gspo`` loss with
    loss_agg_mode="token-mean" — here ``gspo.loss`` in its GSPO-token form with the same
    clip range and advantages: same value, same gradient."""
    batch, logp, entropy = x
    cfg = tepo.Config(kl_coef=0.0)
    adv = tepo.advantages(batch, cfg)
    l1, g1, _ = _loss_and_grad(batch, logp, adv, cfg, entropy)
    ref = gspo.Config(clip_eps_low=0.2, clip_eps_high=0.28, loss_agg_mode="token-mean")
    lp = logp.clone().requires_grad_()
    l2, _ = gspo.loss(batch, lp, adv, ref)
    l2.backward()
    torch.testing.assert_close(l1, l2.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(g1, lp.grad, rtol=1e-6, atol=1e-7)


# ---------------------------------------------------------------------------------------------
# A hand-computed example
# ---------------------------------------------------------------------------------------------


def test_hand_example():
    """G = 2, T = 2, rewards [1, 0]: mean 0.5, unbiased std √0.5, A = ±1/√2 (=: ±a).
    logp_old ≡ −1. o1: logp = [−0.9, −0.7] → log s₁ = 0.2, s₁ = e^0.2 ≈ 1.221403 (inside
    [0.8, 1.28], unclipped). o2: logp = [−1.4, −1.2] → log s₂ = −0.3, s₂ ≈ 0.740818 < 0.8 with
    A < 0: clipped, each token contributes −0.8·(−a) = 0.8a with no gradient.
    Policy term (token-mean over 4 tokens) = (−2·s₁·a + 2·0.8·a)/4 = (0.8 − e^0.2)·a/2
    ≈ −0.148989.
    KL mask: H_old ≡ 1, H_θ = [[0.5, 1.5], [0.5, 0.5]] → only (o1, t0) (A > 0, 0.5 < 1):
    kl_mask_frac = 1/4. There logp_ref = −1.5: Δ = −0.6, kl = e^−0.6 + 0.6 − 1 ≈ 0.148812;
    KL term = 0.04·0.148812/4 ≈ 0.001488. Loss ≈ −0.147501.
    Gradient: ∂/∂logp[o1,t] = −s₁·a/4 ≈ −0.215915 (GSPO-token: own token only), plus at
    (o1, t0) the KL's 0.04/4·(1 − e^−0.6) ≈ 0.004512 → −0.211403; o2: 0 (clipped).
    """
    mask = torch.ones(2, 2)
    batch = RolloutBatch(
        response_ids=torch.zeros(2, 2, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0]),
        logp_old=-torch.ones(2, 2),
        entropy_old=torch.ones(2, 2),
        group_size=2,
        logp_ref=torch.tensor([[-1.5, -1.0], [-1.0, -1.0]]),
    )
    logp = torch.tensor([[-0.9, -0.7], [-1.4, -1.2]])
    entropy = torch.tensor([[0.5, 1.5], [0.5, 0.5]])
    cfg = tepo.Config()
    adv = tepo.advantages(batch, cfg)
    a = 1 / math.sqrt(2)
    torch.testing.assert_close(adv, torch.tensor([[a, a], [-a, -a]]), atol=1e-5, rtol=0)
    total, grad, metrics = _loss_and_grad(batch, logp, adv, cfg, entropy)
    assert float(total) == pytest.approx(-0.147501, abs=1e-5)
    expected_grad = torch.tensor([[-0.211403, -0.215915], [0.0, 0.0]])
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=0)
    assert metrics["kl_mask_frac"] == pytest.approx(0.25)


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------


def _small_batch(with_ref: bool = True) -> RolloutBatch:
    return RolloutBatch(
        response_ids=torch.zeros(2, 2, dtype=torch.long),
        response_mask=torch.ones(2, 2),
        rewards=torch.tensor([1.0, 0.0]),
        logp_old=-torch.ones(2, 2),
        entropy_old=torch.ones(2, 2),
        group_size=2,
        logp_ref=-torch.ones(2, 2) if with_ref else None,
    )


def test_loss_requires_entropy_when_mask_on():
    """With the KL mask on (kl_mask=True, β > 0) the loss needs the current policy's entropy:
    calling it without one is a ValueError naming ``entropy``."""
    batch = _small_batch()
    adv = tepo.advantages(batch, tepo.Config())
    with pytest.raises(ValueError, match="entropy"):
        tepo.loss(batch, batch.logp_old.clone(), adv, tepo.Config())


def test_loss_rejects_bad_entropy_shape():
    """A current entropy of the wrong shape is a ValueError naming ``entropy``."""
    batch = _small_batch()
    adv = tepo.advantages(batch, tepo.Config())
    with pytest.raises(ValueError, match="entropy"):
        tepo.loss(batch, batch.logp_old.clone(), adv, tepo.Config(), entropy=torch.ones(2, 3))


def test_loss_requires_ref_for_ref_anchor():
    """kl_anchor="ref" with β > 0 needs ``batch.logp_ref``; "old" does not."""
    batch = _small_batch(with_ref=False)
    adv = tepo.advantages(batch, tepo.Config())
    with pytest.raises(ValueError, match="logp_ref"):
        tepo.loss(batch, batch.logp_old.clone(), adv, tepo.Config(), entropy=torch.ones(2, 2))
    tepo.loss(
        batch, batch.logp_old.clone(), adv, tepo.Config(kl_anchor="old"), entropy=torch.ones(2, 2)
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("kl_anchor", "reference"),
        ("kl_coef", -0.04),
        ("kl_mask", "yes"),
        ("entropy_strict", 1),
        ("advantage", "rloo"),
        ("ratio", "arithmetic"),
        ("kl_denominator", "none"),
        ("entropy_source", "reference"),
        ("entropy_decrease_tol", -1e-4),
        ("clip_eps_low", 1.0),
        ("loss_agg_mode", "seq-mean"),
        ("eps", -1.0),
    ],
)
def test_config_rejects_bad_values(field, value):
    """Config validation: unknown anchor, negative β, non-bool mask switch, a per-sequence
    aggregation raise a ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        tepo.Config(**{field: value})


@given(batch_and_policy())
def test_kl_mask_ignores_entropy_changes_within_the_tolerance(x):
    """At θ = θ_old the current entropy equals the rollout's up to float rounding. A change
    smaller than τ = entropy_decrease_tol must not count as "decreasing entropy": with
    H_θ = H_old − τ/2 (and H_θ = H_old) the mask is empty; with H_θ = H_old − 2τ it is exactly
    the positive-advantage tokens wherever 2τ ≤ H_old ≤ 100 (H_θ stays a valid entropy, and
    float32's spacing, 7.6e-6 at 100, is far below τ so the margins are representable)."""
    batch, _, _ = x
    cfg = tepo.Config()
    tau = cfg.entropy_decrease_tol
    adv = tepo.advantages(batch, cfg)
    H_old, m = batch.entropy_old, batch.response_mask
    for H_theta in (H_old, H_old - tau / 2):
        assert float(tepo.kl_mask(adv, H_theta, H_old, m, cfg).sum()) == 0.0
    room = (H_old >= 2 * tau) & (H_old <= 100)
    M = tepo.kl_mask(adv, torch.where(room, H_old - 2 * tau, H_old), H_old, m, cfg).bool()
    assert torch.equal(M, m.bool() & (adv > 0) & room)


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/tepo.md`` (defaults), each
    derived by hand on the page."""
    batch, logp = worked.batch()
    cfg = tepo.Config()
    a = 0.866025
    adv = tepo.advantages(batch, cfg)
    torch.testing.assert_close(
        adv, worked.rows([[a] * 2, [a] * 4, [-a] * 3, [-a]]), atol=1e-5, rtol=0
    )
    s = torch.exp(core.sequence_log_ratio(logp, batch.logp_old, batch.response_mask))
    torch.testing.assert_close(s, torch.tensor([1.172604, 1.0, 0.877205, 1.5]), atol=1e-5, rtol=0)
    entropy = worked.rows(worked.ENTROPY_NOW)
    M = tepo.kl_mask(adv, entropy, batch.entropy_old, batch.response_mask, cfg)
    torch.testing.assert_close(M, worked.rows([[0, 1], [1, 0, 0, 0], [0, 0, 0], [0]]))
    total, grad, metrics = worked.loss_and_grad(tepo, cfg, batch, logp, entropy=entropy)
    assert total == pytest.approx(-0.191518, abs=1e-5)
    assert metrics["kl_mask_frac"] == pytest.approx(0.2)
    expected = worked.rows(
        [
            [-0.101550, -0.100750],
            [-0.085803, -0.086603, -0.086603, -0.086603],
            [0.075968] * 3,
            [0.129904],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)
