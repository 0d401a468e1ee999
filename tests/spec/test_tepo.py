"""TEPO's own invariants (``refimpl/algorithms/tepo.py``; ALGORITHMS.md "TEPO").

TEPO here is a reconstruction (see the module docstring and ``docs/fidelity.md``): GRPO's
advantage, the GSPO-token ratio, token-mean aggregation, and a k3 KL term kept only on the
tokens with positive advantage and decreasing entropy. The common invariants are in
``test_common.py``.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given

from refimpl import core
from refimpl.algorithms import gspo, tepo
from refimpl.core import RolloutBatch
from tests.spec.strategies import batch_and_policy, rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _loss_and_grad(batch, logp, adv, cfg, entropy):
    lp = logp.clone().requires_grad_()
    total, metrics = tepo.loss(batch, lp, adv, cfg, entropy=entropy)
    total.backward()
    return total.detach(), lp.grad, metrics


@given(batch_and_policy())
def test_kl_mask_is_positive_advantage_and_decreasing_entropy(x):
    """M[i,t] = 1 exactly on the response tokens with A[i,t] > 0 and H_θ[i,t] < H_old[i,t]
    (abstract: "tokens with positive advantages and decreasing entropy"): 0 wherever A ≤ 0,
    wherever the entropy did not decrease (equal included), and on padding."""
    batch, _, entropy = x
    adv = tepo.advantages(batch, tepo.Config())
    M = tepo.kl_mask(adv, entropy, batch.entropy_old, batch.response_mask)
    active = batch.response_mask.bool()
    expected = active & (adv > 0) & (entropy < batch.entropy_old)
    assert torch.equal(M.bool(), expected)
    assert bool((M[adv <= 0] == 0).all()) and bool((M[entropy >= batch.entropy_old] == 0).all())


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
    token, but its gradient reaches only its own token: ∂s[i,t]/∂logp[i,t'] = s_i·1[t = t'],
    whereas the plain s_i spreads s_i/|o_i| over every token of o_i. So for any weights g,
    ∂(Σ_{t} g[i,t]·s[i,t])/∂logp[i,t] = s_i·g[i,t] (and 0 on padding).

    Tolerance: in float32, log s_i + logp − sg[logp] is exact only up to the rounding of
    logp + (…) − logp, about 2 ulp of |logp| ≤ 50, i.e. ≤ 8e-6 absolute in the exponent."""
    batch, logp, _ = x
    m = batch.response_mask
    lp = logp.clone().requires_grad_()
    s_token = tepo.sequence_token_ratio(lp, batch.logp_old, m)
    s_i = torch.exp(core.sequence_log_ratio(logp, batch.logp_old, m))
    active = m.bool()
    torch.testing.assert_close(
        s_token[active], s_i[:, None].expand_as(m)[active], rtol=2e-5, atol=0
    )
    g = torch.linspace(-1.0, 2.0, m.numel()).reshape(m.shape)
    core.masked(s_token * g, m).sum().backward()
    torch.testing.assert_close(lp.grad, core.masked(s_i[:, None] * g, m), rtol=1e-5, atol=1e-6)


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
    M = tepo.kl_mask(adv, entropy, batch.entropy_old, batch.response_mask, tol).bool()
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


@given(batch_and_policy(with_ref=True))
def test_entropy_carries_no_gradient(x):
    """The current entropy only selects tokens: even if it requires grad, none reaches it."""
    batch, logp, entropy = x
    adv = tepo.advantages(batch, tepo.Config())
    ent = entropy.clone().requires_grad_()
    lp = logp.clone().requires_grad_()
    total, _ = tepo.loss(batch, lp, adv, tepo.Config(), entropy=ent)
    total.backward()
    assert ent.grad is None


@given(batch_and_policy(max_log_ratio=0.6))
def test_equals_verl_gspo_token_mean_at_beta_zero(x):
    """Cross-check (ALGORITHMS.md): with β = 0 TEPO's policy term is verl's ``gspo`` loss with
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
        assert float(tepo.kl_mask(adv, H_theta, H_old, m, tau).sum()) == 0.0
    room = (H_old >= 2 * tau) & (H_old <= 100)
    M = tepo.kl_mask(adv, torch.where(room, H_old - 2 * tau, H_old), H_old, m, tau).bool()
    assert torch.equal(M, m.bool() & (adv > 0) & room)
