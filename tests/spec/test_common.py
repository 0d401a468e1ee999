"""Invariants every algorithm honours, parametrized over ``refimpl.algorithms.NAMES``.

Each test states its invariant in words; ``docs/spec.md`` indexes them. The batches come from
``tests/spec/strategies.py`` (ragged prefix masks with empty and length-1 completions, binary
and real rewards, all-equal groups, zero/tiny/huge entropies, log-probs near 0 and near −50,
garbage in the padding).

The closed-form on-policy gradient (``test_onpolicy_gradient_closed_form``)
---------------------------------------------------------------------------
At ``logp == logp_old`` every ratio is exactly 1, inside any clip range ``[1−ε_low, 1+ε_high]``
with ``ε ≥ 0``, so ``min(x·A, clip(x)·A)`` has derivative ``A`` with respect to ``x`` (at the
tie PyTorch splits the gradient of ``min`` evenly between two branches that both have slope
``A``). The chain rule then gives, for each ratio form:

* token ratio ``w[i,t] = exp(logp − logp_old)``: ``∂w[i,t]/∂logp[i,t] = w = 1``;
* GSPO-token ``s[i,t] = sg[s_i]·exp(logp − sg[logp])``: ``∂s[i,t]/∂logp[i,t] = s_i = 1``;
* geometric sequence ratio ``s_i = exp((1/|o_i|) Σ_t (logp − logp_old))`` (GSPO):
  ``∂s_i/∂logp[i,t] = s_i/|o_i| = 1/|o_i|``;
* arithmetic sequence ratio ``ŵ_i = (1/|o_i|) Σ_t w[i,t]`` (GRPO-S):
  ``∂ŵ_i/∂logp[i,t] = w[i,t]/|o_i| = 1/|o_i|``;
* GPG's ``−α·A·logp``: ``∂/∂logp[i,t] = −α·A_i`` (no ratio at all).

Multiplying by the aggregation's weight on token ``(i,t)`` (``B'`` = non-empty rows):

====================================  ===============================================
``token-mean``                        ``∂L/∂logp[i,t] = −A[i,t] / Σ_{j,s} m[j,s]``
``seq-mean-token-mean``               ``−A[i,t] / (B' · |o_i|)``
``seq-mean-token-sum-norm``           ``−A[i,t] / (B' · L_max)``  (``L_max = max_len`` or ``T``)
``seq-mean`` (sequence ratios above)  ``−A_i / (B' · |o_i|)``
GPG (token-mean)                      ``−α · A_i / Σ|o|``, ``α = B / (B − M)``
====================================  ===============================================

and exactly 0 on padding. A k3 KL term ``β·kl``, ``kl = exp(Δ) − Δ − 1`` with
``Δ = logp_ref − logp``, adds ``β · weight · (1 − exp(logp_ref − logp))`` (``∂kl/∂logp =
−exp(Δ) + 1``); the main test switches it off (``kl_coef = 0``) because TEPO's KL is masked,
and ``test_kl_gradient_closed_form`` checks it for the baselines, whose KL is unmasked.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl import algorithms, core
from refimpl.contract import RolloutBatch
from tests.spec.strategies import (
    add_padding_columns,
    add_padding_columns_tensor,
    batch_and_policy,
    concat_batches,
    configs,
    current_entropy,
    current_logp,
    group_permutations,
    pad_tensor,
    pad_with,
    permute_within_groups,
    rollout_batches,
    row_permutation,
    switch_strategies,
)

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")

NAMES = algorithms.NAMES
#: The baselines, whose KL (when switched on) is GRPO's unmasked per-token k3.
BASELINES = ("grpo", "dapo", "dr_grpo", "gspo", "gpg", "rloo")

TIGHT = dict(rtol=1e-5, atol=1e-6)


def _setup(name: str):
    mod = algorithms.get(name)
    return mod, mod.Config()


def _with(cfg, **changes):
    """``cfg`` with those of ``changes`` that are fields of it."""
    names = {f.name for f in dataclasses.fields(cfg)}
    return dataclasses.replace(cfg, **{k: v for k, v in changes.items() if k in names})


def _loss(mod, cfg, batch, logp, adv, entropy):
    logp = logp.clone().requires_grad_(True)
    total, metrics = mod.loss(batch, logp, adv, cfg, entropy=entropy)
    total.backward()
    return total, logp.grad, metrics


# ---------------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@given(batch=rollout_batches())
def test_vectorised_equals_reference(name, batch):
    """``advantages`` (vectorised) equals ``reference_advantages`` (the paper's equation as
    plain loops) on every batch, to float32 rounding."""
    mod, cfg = _setup(name)
    adv = mod.advantages(batch, cfg)
    ref = mod.reference_advantages(batch, cfg)
    assert adv.shape == batch.response_mask.shape and adv.dtype == torch.float32
    torch.testing.assert_close(adv, ref.to(torch.float32), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
@given(batch=rollout_batches())
def test_advantages_zero_on_padding(name, batch):
    """Advantages are exactly 0 (not merely small) wherever ``m[i,t] = 0``."""
    mod, cfg = _setup(name)
    adv = mod.advantages(batch, cfg)
    assert bool((adv[batch.response_mask == 0] == 0).all())


@pytest.mark.parametrize("name", NAMES)
@given(batch=rollout_batches(), value=st.sampled_from([float("nan"), 0.0, -1e4, 1e4]))
def test_advantages_invariant_to_padding_contents(name, batch, value):
    """What the padding of ``logp_old``, ``entropy_old``, ``logp_ref`` and ``response_ids``
    holds (NaN included) does not change any advantage."""
    mod, cfg = _setup(name)
    torch.testing.assert_close(
        mod.advantages(pad_with(batch, value), cfg), mod.advantages(batch, cfg), rtol=0, atol=0
    )


@pytest.mark.parametrize("name", NAMES)
@given(batch=rollout_batches(), k=st.integers(1, 3))
def test_advantages_invariant_to_extra_padding_columns(name, batch, k):
    """Appending ``k`` padding columns leaves the advantages of the original positions
    unchanged and puts 0 in the new columns."""
    mod, cfg = _setup(name)
    T = batch.response_mask.shape[1]
    wide = mod.advantages(add_padding_columns(batch, k, value=7.0), cfg)
    torch.testing.assert_close(wide[:, :T], mod.advantages(batch, cfg), **TIGHT)
    assert bool((wide[:, T:] == 0).all())


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_advantages_equivariant_to_permutation_within_groups(name, data):
    """Reordering the completions inside each group reorders their advantages the same way
    and changes nothing else (a group is a set, not a sequence)."""
    mod, cfg = _setup(name)
    batch = data.draw(rollout_batches())
    perm = data.draw(group_permutations(batch))
    index = row_permutation(batch, perm)
    permuted = mod.advantages(permute_within_groups(batch, perm), cfg)
    torch.testing.assert_close(permuted, mod.advantages(batch, cfg)[index], **TIGHT)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_advantages_groups_independent(name, data):
    """A group's advantages depend on that group only: computing them on ``a`` and ``b``
    separately or on the concatenation ``a ++ b`` gives the same values (so changing any
    group of ``b`` cannot move an advantage in ``a``)."""
    mod, cfg = _setup(name)
    a = data.draw(rollout_batches(max_groups=3))
    b = data.draw(
        rollout_batches(max_groups=3, min_group_size=a.group_size, max_group_size=a.group_size)
    )
    both = mod.advantages(concat_batches(a, b), cfg)
    Ba, Ta, Tb = a.batch_size, a.response_mask.shape[1], b.response_mask.shape[1]
    torch.testing.assert_close(both[:Ba, :Ta], mod.advantages(a, cfg), **TIGHT)
    torch.testing.assert_close(both[Ba:, :Tb], mod.advantages(b, cfg), **TIGHT)


DEGENERATE = {
    "all-equal rewards": dict(equal_groups=True),
    "zero entropy": dict(entropy_regime="zero"),
    "near-equal entropy": dict(entropy_regime="near_equal"),
    "tiny entropy": dict(entropy_regime="tiny"),
    "huge entropy": dict(entropy_regime="huge"),
    "length 0/1, T=1": dict(max_len=1),
    "logp near -50": dict(logp_regime="very_negative"),
    "logp near 0": dict(logp_regime="near_zero"),
}


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=max(60, settings().max_examples))  # 8 cases: more than the CI's 40
@given(data=st.data())
def test_finite_on_degenerate_inputs(name, data):
    """Advantages, loss, its gradient and every metric are finite on degenerate inputs:
    all-equal rewards, zero/tiny/huge/near-equal entropies, length-0 and length-1
    completions, log-probs near 0 and near −50 (each case drawn in turn), for every
    combination of the algorithm's switches (``strategies.configs``)."""
    mod = algorithms.get(name)
    cfg = data.draw(configs(name), label="cfg")
    case = data.draw(st.sampled_from(list(DEGENERATE)), label="case")
    batch = data.draw(rollout_batches(**DEGENERATE[case]))
    logp = data.draw(current_logp(batch))
    entropy = data.draw(current_entropy(batch))
    adv = mod.advantages(batch, cfg)
    assert bool(torch.isfinite(adv).all())
    total, grad, metrics = _loss(mod, cfg, batch, logp, adv, entropy)
    assert math.isfinite(total.item())
    assert bool(torch.isfinite(grad).all())
    assert all(math.isfinite(v) for v in metrics.values()), metrics


# ---------------------------------------------------------------------------------------------
# Loss
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
@given(x=batch_and_policy())
def test_loss_finite_and_gradient_zero_on_padding(name, x):
    """The loss is a finite scalar, and its gradient with respect to ``logp`` is exactly 0 on
    padding, even when the padding of ``logp`` holds NaN."""
    batch, logp, entropy = x
    mod, cfg = _setup(name)
    adv = mod.advantages(batch, cfg)
    logp = pad_tensor(logp, batch.response_mask, float("nan"))
    total, grad, metrics = _loss(mod, cfg, batch, logp, adv, entropy)
    assert total.dim() == 0 and math.isfinite(total.item())
    assert bool(torch.isfinite(grad).all())
    assert bool((grad[batch.response_mask == 0] == 0).all())
    for key in (
        "clip_frac_low",
        "clip_frac_high",
        "ratio_mean",
        "approx_kl_old",
        "adv_mean",
        "adv_std",
    ):
        assert key in metrics and math.isfinite(metrics[key]), key


@pytest.mark.parametrize("name", NAMES)
@given(x=batch_and_policy(), value=st.sampled_from([float("nan"), 0.0, 1e4]))
def test_loss_invariant_to_padding_contents(name, x, value):
    """The loss value and gradient do not depend on what the padding of the batch, of
    ``logp`` or of ``entropy`` holds."""
    batch, logp, entropy = x
    mod, cfg = _setup(name)
    adv = mod.advantages(batch, cfg)
    m = batch.response_mask
    l1, g1, _ = _loss(mod, cfg, batch, logp, adv, entropy)
    l2, g2, _ = _loss(
        mod,
        cfg,
        pad_with(batch, value),
        pad_tensor(logp, m, value),
        adv,
        pad_tensor(entropy, m, value),
    )
    torch.testing.assert_close(l2, l1, rtol=0, atol=0)
    torch.testing.assert_close(g2, g1, rtol=0, atol=0)


@pytest.mark.parametrize("name", NAMES)
@given(x=batch_and_policy(), k=st.integers(1, 3))
def test_loss_invariant_to_extra_padding_columns(name, x, k):
    """Extra padding columns change neither the loss nor the gradient on the original
    positions. (Dr. GRPO's ``L_max`` is pinned with ``max_len``: with ``max_len=None`` it is
    the batch's ``T`` by design, see dr_grpo.py.)"""
    batch, logp, entropy = x
    mod, cfg = _setup(name)
    cfg = _with(cfg, max_len=16)
    T = batch.response_mask.shape[1]
    adv = mod.advantages(batch, cfg)
    l1, g1, _ = _loss(mod, cfg, batch, logp, adv, entropy)
    wide = add_padding_columns(batch, k)
    l2, g2, _ = _loss(
        mod,
        cfg,
        wide,
        add_padding_columns_tensor(logp, k, -3.0),
        mod.advantages(wide, cfg),
        add_padding_columns_tensor(entropy, k, 1.0),
    )
    torch.testing.assert_close(l2, l1, **TIGHT)
    torch.testing.assert_close(g2[:, :T], g1, **TIGHT)
    assert bool((g2[:, T:] == 0).all())


def expected_onpolicy_grad(
    name: str, cfg, batch: RolloutBatch, adv: torch.Tensor, kl_coef: float = 0.0
) -> torch.Tensor:
    """The closed form derived in the module docstring, computed independently of the code
    under test (float64)."""
    m = batch.response_mask.double()
    B, T = m.shape
    lengths = m.sum(dim=1)
    n_tokens = float(m.sum())
    if n_tokens == 0:
        return torch.zeros(B, T, dtype=torch.float64)
    b_prime = float((lengths > 0).sum())
    mode = cfg.loss_agg_mode
    if mode == "token-mean":
        weight = torch.full((B, 1), 1.0 / n_tokens, dtype=torch.float64)
    elif mode in ("seq-mean-token-mean", "seq-mean"):
        weight = 1.0 / (b_prime * lengths.clamp(min=1))[:, None]
    elif mode == "seq-mean-token-sum-norm":
        L = cfg.max_len if getattr(cfg, "max_len", None) is not None else T
        weight = torch.full((B, 1), 1.0 / (b_prime * L), dtype=torch.float64)
    else:  # pragma: no cover
        raise AssertionError(mode)
    scale = 1.0
    if name == "gpg":
        # α = B / (B − M), M = rows of groups whose rewards are all equal.
        r = batch.rewards.view(-1, batch.group_size)
        M = int((r.max(dim=1).values == r.min(dim=1).values).sum()) * batch.group_size
        scale = B / (B - M) if B > M else 1.0
    grad = -scale * adv.double() * weight * _kept(name, cfg, batch, batch.logp_old, adv)
    if kl_coef:
        delta = batch.logp_ref.double() - batch.logp_old.double()
        grad = grad + kl_coef * weight * (1.0 - torch.exp(delta))
    return torch.where(m.bool(), grad, torch.zeros((), dtype=torch.float64))


@pytest.mark.parametrize("name", NAMES)
@given(batch=rollout_batches())
def test_onpolicy_gradient_closed_form(name, batch):
    """At ``logp == logp_old`` (and ``kl_coef = 0``) the gradient of the loss with respect
    to ``logp`` is ``−scale · A[i,t] · weight[i,t]`` with the weight of the algorithm's
    aggregation mode (table in the module docstring), and 0 on padding."""
    mod, cfg = _setup(name)
    cfg = _with(cfg, kl_coef=0.0)
    adv = mod.advantages(batch, cfg)
    _, grad, _ = _loss(mod, cfg, batch, batch.logp_old, adv, batch.entropy_old)
    expected = expected_onpolicy_grad(name, cfg, batch, adv)
    torch.testing.assert_close(grad.double(), expected, rtol=1e-4, atol=1e-7)


@pytest.mark.parametrize("name", BASELINES)
@given(batch=rollout_batches(with_ref=True))
def test_kl_gradient_closed_form(name, batch):
    """With ``β = kl_coef > 0`` the k3 term adds ``β · weight · (1 − exp(logp_ref − logp))``
    to the on-policy gradient (``∂kl/∂logp = 1 − exp(Δ)``), same aggregation weight."""
    mod, cfg = _setup(name)
    cfg = _with(cfg, kl_coef=0.1)
    adv = mod.advantages(batch, cfg)
    _, grad, _ = _loss(mod, cfg, batch, batch.logp_old, adv, batch.entropy_old)
    expected = expected_onpolicy_grad(name, cfg, batch, adv, kl_coef=0.1)
    torch.testing.assert_close(grad.double(), expected, rtol=1e-4, atol=1e-7)


def _kept(name: str, cfg, batch: RolloutBatch, logp, adv) -> torch.Tensor:
    """``[B, T]`` float64, 0 on the tokens whose policy term an entropy intervention switches
    off (Clip-Cov's selected tokens, the non-forking tokens), 1 elsewhere; STEER's weight λ
    on each token. The selections and weights come from the modules' own functions, which
    their spec files check independently."""
    mod = algorithms.get(name)
    if name == "steer":
        omega = mod.omega(batch, logp, adv, cfg.omega_power)
        return mod.token_weights(omega.abs(), batch.response_mask, cfg).double()
    if name == "clip_cov":
        return (~mod.clip_cov_mask(batch, logp, adv, cfg)).double()
    if name == "forking_tokens":
        return mod.token_selection(batch, cfg).double()
    return torch.ones(batch.response_mask.shape, dtype=torch.float64)


def _ratio_form(name: str, cfg) -> str:
    """How ``name``'s loss turns log-probs into the ratio it clips (see each module)."""
    if name == "gpg":
        return "none"
    if name == "gspo":
        return "geometric" if cfg.loss_agg_mode == "seq-mean" else "gspo_token"
    if name in ("grpo_s", "tepo"):
        return cfg.ratio  # "arithmetic" / "geometric", or "gspo_token" / "token"
    return "token"


def expected_offpolicy_grad(name: str, cfg, batch: RolloutBatch, logp, adv):
    """``∂L/∂logp`` at any ``logp`` (``kl_coef = 0``), derived independently in float64, and
    a mask of the tokens whose clip decision is too close to call in float32.

    With ``x`` the ratio a token's term uses and ``a`` its advantage, ``min(x·a, clip(x)·a)``
    has derivative ``a`` in ``x`` unless the clip is active: ``a > 0`` and ``x > 1+ε_high``, or
    ``a < 0`` and ``x < 1−ε_low``, where it is 0. The chain rule gives, per ratio form:

    * token ``w = exp(Δ)``, ``Δ = logp − logp_old``: ``−a·w·weight[i,t]``;
    * GSPO-token ``s[i,t]`` (value ``s_i``, gradient ``s_i`` at its own token only):
      ``−a[i,t]·s_i·weight[i,t]``, the clip decided per token on ``s_i``;
    * geometric ``s_i = exp(mean_t Δ)`` (GSPO, GRPO-S): ``−A_i·s_i/|o_i| / B'`` on every token,
      ``A_i`` the mean of ``adv`` over the row, the clip decided per row;
    * arithmetic ``ŵ_i = mean_t w`` (GRPO-S): ``−A_i·w[i,t]/|o_i| / B'``, per row;
    * GPG (no ratio): ``−α·a·weight``.
    """
    m = batch.response_mask.double()
    active = m.bool()
    B, T = m.shape
    lengths = m.sum(1)
    b_prime = max(float((lengths > 0).sum()), 1.0)
    n_tokens = max(float(m.sum()), 1.0)
    delta = torch.where(active, logp.double() - batch.logp_old.double(), 0.0)
    a = torch.where(active, adv.double(), 0.0)
    mode = cfg.loss_agg_mode
    if mode == "token-mean":
        weight = torch.full((B, 1), 1.0 / n_tokens, dtype=torch.float64)
    elif mode in ("seq-mean-token-mean", "seq-mean"):
        weight = 1.0 / (b_prime * lengths.clamp(min=1))[:, None]
    else:  # seq-mean-token-sum-norm
        L = cfg.max_len if getattr(cfg, "max_len", None) is not None else T
        weight = torch.full((B, 1), 1.0 / (b_prime * L), dtype=torch.float64)
    form = _ratio_form(name, cfg)
    if form == "none":
        r = batch.rewards.view(-1, batch.group_size)
        M = int((r.max(dim=1).values == r.min(dim=1).values).sum()) * batch.group_size
        grad = -(B / (B - M) if B > M else 1.0) * a * weight
        return torch.where(active, grad, 0.0), torch.zeros_like(active)
    if name == "kl_cov":
        # No clip: −a·w·weight, plus β·sign(Δ)·weight on the top-covariance tokens.
        penalised = algorithms.get(name).kl_cov_mask(batch, logp, adv, cfg).double()
        grad = (-a * torch.exp(delta) + cfg.kl_cov_coef * torch.sign(delta) * penalised) * weight
        return torch.where(active, grad, 0.0), torch.zeros_like(active)
    lo, hi = 1.0 - cfg.clip_eps_low, 1.0 + cfg.clip_eps_high
    kept = _kept(name, cfg, batch, logp, adv)

    def clip_active(x, adv_x):
        return ((adv_x > 0) & (x > hi)) | ((adv_x < 0) & (x < lo))

    def too_close(x):
        return ((x - hi).abs() < 5e-5) | ((x - lo).abs() < 5e-5)

    n = lengths.clamp(min=1)
    s = torch.exp(delta.sum(1) / n)  # geometric mean of the token ratios
    if form == "token":
        w = torch.exp(delta)
        grad = -a * w * ~clip_active(w, a) * weight * kept
        close = too_close(w)
    elif form == "gspo_token":
        s_t = s[:, None].expand(B, T)
        grad = -a * s_t * ~clip_active(s_t, a) * weight
        close = too_close(s_t)
    else:
        A_i = a.sum(1) / n
        if form == "geometric":
            x, per_token = s, s[:, None] / n[:, None]
        else:  # arithmetic
            w = torch.where(active, torch.exp(delta), 0.0)
            x, per_token = w.sum(1) / n, w / n[:, None]
        keep = ~clip_active(x, A_i)
        grad = -(A_i * keep)[:, None] * per_token / b_prime
        close = too_close(x)[:, None].expand(B, T)
    return torch.where(active, grad, 0.0), close & active


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_offpolicy_gradient_closed_form(name, data):
    """Away from ``logp == logp_old`` the gradient is the closed form of
    ``expected_offpolicy_grad`` (ratios inside and outside the clip range, per-token
    advantages, every switch drawn): it tells token from sequence ratios, arithmetic from
    geometric means, ε_low from ε_high, and the GSPO-token stop-gradient (with per-token
    advantages a plain ``s_i`` would spread ``s_i/|o_i|`` over the row) from its absence."""
    mod = algorithms.get(name)
    cfg = data.draw(configs(name, kl_coef=0.0), label="cfg")
    batch = data.draw(rollout_batches(), label="batch")
    size = data.draw(st.sampled_from([1e-3, 0.05, 0.5]), label="max_log_ratio")
    logp = data.draw(current_logp(batch, max_log_ratio=size), label="logp")
    seed = data.draw(st.integers(0, 2**31 - 1), label="adv_seed")
    adv = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(seed))
    adv = pad_tensor(adv, batch.response_mask, 0.0)
    entropy = data.draw(current_entropy(batch), label="entropy")
    _, grad, _ = _loss(mod, cfg, batch, logp, adv, entropy)
    expected, close = expected_offpolicy_grad(name, cfg, batch, logp, adv)
    decided = ~close
    torch.testing.assert_close(grad.double()[decided], expected[decided], rtol=1e-4, atol=1e-7)


def _advantage_bound(cfg, batch: RolloutBatch) -> torch.Tensor:
    """``[B, T]`` bound on ``|A[i,t]|`` from the group alone, by the set the Config divides by
    a std over (``Config.advantage_std_set``).

    A z-score of a member of a set of ``L`` values with the unbiased std satisfies
    ``|x − mean| / std ≤ (L − 1)/√L`` (Samuelson's inequality: the other ``L − 1`` deviations
    sum to ``−(x − mean)``, so their squares sum to at least ``(x − mean)²/(L − 1)``); ``+ eps``
    in the denominator only lowers it. The set is the group's ``G`` rewards (``"group"``: GRPO,
    DAPO, GSPO, GRPO-S's completions, ...), at most the group's active tokens ``L_g``
    (``"group_tokens"``: GTPO's token rewards) or the batch's (``"batch_tokens"``). Without a
    std division (``None``) the advantage is a reward minus an average of the group's rewards
    (Dr. GRPO's mean, RLOO's mean of the others): both lie between the group's smallest and
    largest reward, so the group's reward range bounds it.
    """
    G = batch.group_size
    m = core.group_view(batch.response_mask, G)
    r = core.group_view(batch.rewards.double(), G)

    def samuelson(L):
        return (L - 1).clamp(min=0) / L.clamp(min=1).sqrt()

    std_set = cfg.advantage_std_set()
    if std_set == "batch_tokens":  # one set per sign over the whole batch
        bound = samuelson(m.sum().double().expand(r.shape[0]))
    elif std_set == "group_tokens":
        bound = samuelson(m.sum(dim=(1, 2)).double())
    elif std_set is None:
        bound = r.max(dim=1).values - r.min(dim=1).values
    elif std_set == "value_difference":  # V̂(s_{k+1}) − V̂(s_k), two probabilities
        bound = torch.ones(r.shape[0], dtype=torch.float64)
    elif std_set == "group":
        bound = samuelson(torch.full((r.shape[0],), float(G), dtype=torch.float64))
    else:  # pragma: no cover
        raise AssertionError(
            f"advantage_std_set() = {std_set!r}: not one of the contract's answers"
        )
    return bound.repeat_interleave(G)[:, None].expand_as(batch.response_mask)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_advantages_bounded_by_their_group(name, data):
    """Every advantage is finite and bounded by its group (``_advantage_bound``), for every
    switch combination, near-equal entropies included: no division by a std computed on a
    set that does not contain the value being normalised."""
    mod = algorithms.get(name)
    cfg = data.draw(configs(name), label="cfg")
    batch = data.draw(rollout_batches(), label="batch")
    adv = mod.advantages(batch, cfg).double()
    assert bool(torch.isfinite(adv).all())
    bound = _advantage_bound(cfg, batch)
    assert bool((adv.abs() <= bound * (1 + 1e-6) + 1e-6).all()), float((adv.abs() - bound).max())


@pytest.mark.parametrize("name", NAMES)
def test_every_config_has_success_threshold(name):
    """Every Config has its success threshold and its overlong-penalty scale, 0.5 (the
    contract's defaults, which no algorithm changes), so no trainer falls back to a default of
    its own (dynamic sampling and reward shaping read them)."""
    cfg = algorithms.get(name).Config()
    assert cfg.success_threshold == 0.5
    assert cfg.overlong_penalty_scale == 0.5


@pytest.mark.parametrize("name", NAMES)
def test_every_str_or_bool_field_is_a_drawn_switch(name):
    """``strategies.configs`` draws every ``str`` and ``bool`` field of every Config (so the
    property tests above run over all switch combinations); a ``str`` field without a list
    of choices in its module would raise here."""
    fields = dataclasses.fields(algorithms.get(name).Config)
    drawn = switch_strategies(name)
    for f in fields:
        default = getattr(algorithms.get(name).Config(), f.name)
        if isinstance(default, (str, bool)):
            assert f.name in drawn, f.name


# ---------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------

BAD_CONFIG = [
    ("clip_eps_low", -0.1),
    ("clip_eps_low", 1.0),
    ("clip_eps_high", -0.1),
    ("kl_coef", -0.01),
    ("kl_coef", float("nan")),
    ("eps", 0.0),
    ("loss_agg_mode", "mean-of-everything"),
    ("overlong_cache_frac", 0.0),
    ("max_len", 0),
]


def _bad_config_cases():
    """Every (algorithm, field, bad value) where the algorithm's Config has that field."""
    for name in NAMES:
        fields = {f.name for f in dataclasses.fields(algorithms.get(name).Config)}
        for field, value in BAD_CONFIG:
            if field in fields:
                yield name, field, value


@pytest.mark.parametrize(("name", "field", "value"), list(_bad_config_cases()))
def test_config_rejects_out_of_range(name, field, value):
    """A Config field out of range raises ``ValueError`` naming the field."""
    cls = algorithms.get(name).Config
    with pytest.raises(ValueError, match=field):
        cls(**{field: value})


@pytest.fixture(scope="module")
def small_batch() -> RolloutBatch:
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    return RolloutBatch(
        response_ids=torch.zeros(4, 3, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        logp_old=-torch.ones(4, 3),
        entropy_old=torch.ones(4, 3),
        group_size=2,
        logp_ref=-torch.ones(4, 3),
        token_values=torch.full((4, 3), 0.5, dtype=torch.float64),  # VinePPO's V̂, every prefix
    )


@pytest.mark.parametrize("name", NAMES)
def test_loss_rejects_bad_tensors(name, small_batch):
    """``loss`` raises ``ValueError`` naming ``logp`` / ``adv`` for a wrong shape, a non-float
    dtype, or a non-finite value on a response token."""
    mod, cfg = _setup(name)
    adv = mod.advantages(small_batch, cfg)
    logp = small_batch.logp_old.clone()
    ent = small_batch.entropy_old
    with pytest.raises(ValueError, match="logp"):
        mod.loss(small_batch, logp[:, :2], adv, cfg, entropy=ent)
    with pytest.raises(ValueError, match="logp"):
        mod.loss(small_batch, logp.long(), adv, cfg, entropy=ent)
    bad = logp.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="logp"):
        mod.loss(small_batch, bad, adv, cfg, entropy=ent)
    with pytest.raises(ValueError, match="adv"):
        mod.loss(small_batch, logp, adv[:2], cfg, entropy=ent)
    bad_adv = adv.clone()
    bad_adv[2, 1] = float("inf")
    with pytest.raises(ValueError, match="adv"):
        mod.loss(small_batch, logp, bad_adv, cfg, entropy=ent)


@pytest.mark.parametrize("name", BASELINES)
def test_kl_requires_reference_logprobs(name, small_batch):
    """With ``kl_coef > 0`` a batch without ``logp_ref`` raises ``ValueError`` naming it."""
    mod, cfg = _setup(name)
    cfg = _with(cfg, kl_coef=0.1)
    batch = small_batch.replace(logp_ref=None)
    adv = mod.advantages(batch, cfg)
    with pytest.raises(ValueError, match="logp_ref"):
        mod.loss(batch, batch.logp_old.clone(), adv, cfg)
