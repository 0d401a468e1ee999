"""The slips minimal GRPO code ships, caught by the policy gradient at ``θ = θ_old``.

At ``logp == logp_old`` every importance ratio is exactly 1, strictly inside the clip range
(every ``ε > 0`` here), so each algorithm's loss has a gradient with respect to ``logp`` that
can be written down from its equations alone: ``−A[i,t]`` times the weight the aggregation
gives token ``(i,t)``, plus the KL term's own gradient where ``β > 0``. The tests below write
that gradient out from the equations (``grad_surrogate`` for GRPO's loss, one function for each
algorithm that changes the loss, citing its module docstring)
and compare it with autograd on every switch combination of the algorithm's ``Config``, with
advantages that differ from token to token (so a per-sequence quantity cannot pass for a
per-token one).

Two slips this catches, each checked by breaking ``refimpl/core.py`` on purpose (see the
report of issue 19; the tests fail for every algorithm that uses the broken primitive):

* a **detached ratio** (``exp(logp − logp_old).detach()`` or ``logp.detach()`` inside the
  ratio): the loss *value* is unchanged at ``θ = θ_old`` (ratio 1), but the gradient of the
  surrogate is 0, so only the KL part would remain;
* a **sequence-summed log-prob** where per-token ratios are meant
  (``exp(Σ_t logp − Σ_t logp_old)`` broadcast to every token): the value is again 1, but
  ``∂/∂logp[i,t]`` then collects the advantages of the whole row, ``−Σ_s A[i,s]·weight``;
* and any wrong normaliser (``1/Σm`` for ``1/(B'·|o_i|)``, ``T`` for ``L_max``, ...).

Notation: ``m`` the response mask, ``|o_i| = Σ_t m[i,t]``, ``B'`` the non-empty rows,
``Σm`` the response tokens of the batch, ``k'[i,t] = ∂kl/∂logp = 1 − exp(logp_a − logp)``
for the k3 estimator ``kl = exp(Δ) − Δ − 1``, ``Δ = logp_a − logp`` (``a`` = ref or old).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl import algorithms
from refimpl.contract import RolloutBatch
from tests.spec.strategies import configs, current_entropy, rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")

F64 = torch.float64


def _random_advantages(batch: RolloutBatch, seed: int) -> torch.Tensor:
    """Per-token advantages of either sign, differing within every row; garbage on padding
    (a loss must never read it)."""
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(batch.response_mask.shape)
    a = torch.randn(shape, generator=gen) * 2.0
    return torch.where(batch.response_mask.bool(), a, torch.full(shape, 1e4))


# ---------------------------------------------------------------------------------------------
# Aggregation weights (core's module docstring; docs/math.md).
# ---------------------------------------------------------------------------------------------


def _stats(batch: RolloutBatch) -> tuple[torch.Tensor, torch.Tensor, float, float]:
    m = batch.response_mask.to(F64)
    lengths = m.sum(dim=1)
    return m, lengths, max(float((lengths > 0).sum()), 1.0), max(float(m.sum()), 1.0)


def token_weight(batch: RolloutBatch, mode: str, max_len: int | None = None) -> torch.Tensor:
    """``[B, 1]`` weight of a per-token loss term in the scalar loss, for a token mode."""
    m, lengths, b_prime, n_tokens = _stats(batch)
    B, T = m.shape
    if mode == "token-mean":  # Σ m ℓ / Σ m
        return torch.full((B, 1), 1.0 / n_tokens, dtype=F64)
    if mode == "seq-mean-token-mean":  # mean_i Σ_t m ℓ / |o_i|
        return 1.0 / (b_prime * lengths.clamp(min=1))[:, None]
    if mode == "seq-mean-token-sum-norm":  # Σ m ℓ / (B' · L_max)
        return torch.full((B, 1), 1.0 / (b_prime * (max_len or T)), dtype=F64)
    raise AssertionError(mode)


def sequence_weight(batch: RolloutBatch) -> torch.Tensor:
    """``[B, 1]``: weight of ``logp[i,t]`` in a ``seq-mean`` loss whose ratio is a mean over
    the row (``∂ŵ_i/∂logp[i,t] = 1/|o_i|`` at ratio 1, arithmetic or geometric): 1/(B'·|o_i|)."""
    _, lengths, b_prime, _ = _stats(batch)
    return 1.0 / (b_prime * lengths.clamp(min=1))[:, None]


def kl_slope(batch: RolloutBatch, anchor: str = "ref") -> torch.Tensor:
    """``k'[i,t] = 1 − exp(logp_a − logp)`` at ``logp = logp_old`` (0 for anchor ``old``)."""
    logp_a = batch.logp_ref if anchor == "ref" else batch.logp_old
    return 1.0 - torch.exp(logp_a.to(F64) - batch.logp_old.to(F64))


def row_mean(x: torch.Tensor, batch: RolloutBatch) -> torch.Tensor:
    """``[B, 1]`` mean of ``x`` over each row's response tokens (0 for an empty row)."""
    m, lengths, _, _ = _stats(batch)
    return (torch.where(m.bool(), x.to(F64), 0.0).sum(dim=1) / lengths.clamp(min=1))[:, None]


# ---------------------------------------------------------------------------------------------
# The analytic gradient of each algorithm's loss at θ = θ_old, from its own equations.
# ---------------------------------------------------------------------------------------------


def grad_surrogate(batch, cfg, A, entropy) -> torch.Tensor:
    """GRPO Eq. 3 + Eq. 4, the loss every algorithm without an entry in ``ANALYTIC`` keeps:
    −min(w·A, clip(w)·A) + β·kl per token, aggregated by the mode: (−A + β·k')·weight, with
    L_max = ``max_len`` where the Config has one (Dr. GRPO §3.2), else the batch's T. A
    ``seq-mean`` loss (GSPO Eq. 5, GRPO-S Eq. 7) has one term per sequence on a ratio that is
    a mean over the row (∂/∂logp[i,t] = 1/|o_i| at ratio 1, arithmetic or geometric) and the
    row's mean advantage: (−mean_t A + β·k')/(B'·|o_i|), the KL averaged over the row.

    It covers GRPO, DAPO (clip-higher changes no gradient at ratio 1), Dr. GRPO, GSPO (both
    modes: GSPO-token's ∂s[i,t]/∂logp[i,t] = s_i = 1), GTPO and RLOO (only their advantages
    differ), GRPO-S, KL-Cov (its penalty |log π − log π_old| has slope 0 at θ_old, the
    subgradient torch takes) and the entropy bonus (−β_H·H_θ reaches the parameters through
    H_θ, not through log π of the sampled token)."""
    if cfg.loss_agg_mode == "seq-mean":
        return (-row_mean(A, batch) + cfg.kl_coef * kl_slope(batch)) * sequence_weight(batch)
    weight = token_weight(batch, cfg.loss_agg_mode, getattr(cfg, "max_len", None))
    return (-A + cfg.kl_coef * kl_slope(batch)) * weight


def grad_gpg(batch, cfg, A, entropy) -> torch.Tensor:
    """GPG §3: −α·A·logp per token (no ratio), token-mean; α = B/(B − M), M the rows of the
    groups whose rewards are all equal (α = 1 when every group is)."""
    B, G = batch.batch_size, batch.group_size
    r = batch.rewards.reshape(-1, G)
    M = G * int((r.amax(dim=1) == r.amin(dim=1)).sum())
    alpha = B / (B - M) if B > M else 1.0
    weight = token_weight(batch, cfg.loss_agg_mode)
    return (-alpha * A + cfg.kl_coef * kl_slope(batch)) * weight


def tepo_mask(batch, cfg, A, entropy) -> torch.Tensor:
    """TEPO's M[i,t] = 1[A > 0]·1[entropy decreased] (module docstring), written out."""
    m = batch.response_mask.bool()
    tol = cfg.entropy_decrease_tol
    # Compared in float32, the precision the rollout stores entropies in.
    old = batch.entropy_old.float()
    if cfg.entropy_source == "current":
        new, before = entropy.float(), old
        has_before = torch.ones_like(m)
    else:  # H_old[i,t] against H_old[i,t−1], never at a completion's first token
        new = old
        before = torch.zeros_like(old)
        before[:, 1:] = old[:, :-1]
        has_before = torch.zeros_like(m)
        has_before[:, 1:] = m[:, :-1]
    fell = new < before - tol if cfg.entropy_strict else new <= before - tol
    return (m & has_before & fell & (A > 0)).to(F64)


def grad_tepo(batch, cfg, A, entropy) -> torch.Tensor:
    """TEPO: GSPO-token (or token) ratio, gradient 1 at its own token, aggregated by the mode
    (token-mean); KL β·M·kl with M the mask (every token when kl_mask is off), anchored at
    π_ref (k' = 1 − exp(logp_ref − logp)) or π_old (k' = 0 at θ_old), divided by Σm with the
    policy term ("all") or by ΣM on its own ("masked")."""
    weight = token_weight(batch, cfg.loss_agg_mode)
    grad = -A * weight
    if cfg.kl_coef > 0:
        M = tepo_mask(batch, cfg, A, entropy) if cfg.kl_mask else batch.response_mask.to(F64)
        slope = cfg.kl_coef * M * kl_slope(batch, cfg.kl_anchor)
        if cfg.kl_denominator == "all":
            grad = grad + slope * weight
        else:
            grad = grad + slope / max(float(M.sum()), 1.0)
    return grad


def grad_clip_cov(batch, cfg, A, entropy) -> torch.Tensor:
    """Clip-Cov: DAPO's surrogate, except that the selected tokens lose their term (value and
    gradient); at ratio 1 no token is clipped. The selection is the module's own random draw,
    with the global generator in the same state as for the loss (the test seeds it)."""
    from refimpl.algorithms import clip_cov

    torch.manual_seed(0)
    selected = clip_cov.clip_cov_mask(batch, batch.logp_old.float(), A.float(), cfg)
    weight = token_weight(batch, cfg.loss_agg_mode)
    return (-A * (~selected) + cfg.kl_coef * kl_slope(batch)) * weight


def grad_forking_tokens(batch, cfg, A, entropy) -> torch.Tensor:
    """Forking tokens: DAPO's surrogate on the top-ρ rollout-entropy tokens only, the
    normaliser over all tokens; the KL (when on) on every token."""
    from refimpl.algorithms import forking_tokens

    forks = forking_tokens.token_selection(batch, cfg).to(F64)  # by entropy, or random
    weight = token_weight(batch, cfg.loss_agg_mode)
    return (-A * forks + cfg.kl_coef * kl_slope(batch)) * weight


def grad_steer(batch, cfg, A, entropy) -> torch.Tensor:
    """STEER: DAPO's surrogate times λ, computed without gradient from |Ω| at π = π_old (the
    module's own ``omega`` and ``token_weights``, which test_steer.py checks against the
    formula); at ratio 1 neither the clip nor the dual clip (c > 1) acts."""
    from refimpl.algorithms import steer

    omega = steer.omega(batch, batch.logp_old.float(), A.float(), cfg.omega_power)
    lam = steer.token_weights(omega.abs(), batch.response_mask, cfg).to(F64)
    weight = token_weight(batch, cfg.loss_agg_mode)
    return (-A * lam + cfg.kl_coef * kl_slope(batch)) * weight


def grad_vineppo(batch, cfg, A, entropy) -> torch.Tensor:
    """VinePPO: PPO's surrogate per token, aggregated by the mode (token-mean by default),
    plus β · mean over the B' non-empty sequences of Σ_t kl: the KL slope weighs 1/B' on every
    token (k3 ≤ 10 here, below the clamp)."""
    _, _, b_prime, _ = _stats(batch)
    weight = token_weight(batch, cfg.loss_agg_mode)
    return -A * weight + cfg.kl_coef * kl_slope(batch) / b_prime


#: The algorithms whose loss at θ_old is not ``grad_surrogate``'s, with their closed form. An
#: algorithm that changes only the advantage needs no entry; one that changes the loss fails
#: ``test_policy_gradient_at_theta_old_equals_the_analytic_one`` until its entry is here.
ANALYTIC: dict[str, Callable[..., torch.Tensor]] = {
    "gpg": grad_gpg,
    "tepo": grad_tepo,
    "clip_cov": grad_clip_cov,
    "forking_tokens": grad_forking_tokens,
    "steer": grad_steer,
    "vineppo": grad_vineppo,
}


def test_every_analytic_gradient_is_an_algorithms() -> None:
    """No entry of ANALYTIC outlives its algorithm (a renamed one would silently fall back to
    ``grad_surrogate``)."""
    assert set(ANALYTIC) <= set(algorithms.NAMES)


def _autograd(mod, cfg, batch: RolloutBatch, A: torch.Tensor, entropy) -> torch.Tensor:
    logp = batch.logp_old.clone().requires_grad_(True)
    total, _ = mod.loss(batch, logp, A, cfg, entropy=entropy)
    total.backward()
    return logp.grad


@pytest.mark.parametrize("name", algorithms.NAMES)
@given(data=st.data())
def test_policy_gradient_at_theta_old_equals_the_analytic_one(name: str, data) -> None:
    """∂L/∂logp at logp = logp_old equals the per-algorithm closed form above on response
    tokens, and is exactly 0 on padding, for every switch combination (KL on and off)."""
    mod = algorithms.get(name)
    batch = data.draw(rollout_batches(with_ref=True), label="batch")
    cfg = data.draw(configs(name), label="cfg")
    A = _random_advantages(batch, data.draw(st.integers(0, 2**16), label="seed"))
    entropy = data.draw(current_entropy(batch), label="entropy")
    torch.manual_seed(0)  # Clip-Cov's random subset: the same draw here and in its closed form
    got = _autograd(mod, cfg, batch, A, entropy)
    m = batch.response_mask.bool()
    assert bool((got[~m] == 0).all())
    want = ANALYTIC.get(name, grad_surrogate)(batch, cfg, torch.where(m, A.to(F64), 0.0), entropy)
    torch.testing.assert_close(got[m].to(F64), want.expand_as(got)[m], rtol=1e-4, atol=1e-7)


def test_the_slips_change_the_gradient_not_the_value() -> None:
    """Why the tests above are needed: on a hand batch both slips leave the loss value at
    θ = θ_old untouched and move the gradient. Two completions of lengths 2 and 1 (B' = 2),
    A = [[1, −2], [3, ·]], seq-mean-token-mean (GRPO's Eq. 3 weights 1/(B'·|o_i|)):

    * correct:             ∂L/∂logp = −A·w = [[−1/4, 2/4], [−3/2]]
    * detached ratio:      [[0, 0], [0]]
    * sequence-summed:     every token of row i gets −Σ_s A[i,s]/(B'·|o_i|) = [[1/4, 1/4], [−3/2]]
    """
    logp_old = torch.tensor([[-1.0, -2.0], [-0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    A = torch.tensor([[1.0, -2.0], [3.0, 0.0]])
    weight = torch.tensor([[0.25, 0.25], [0.5, 0.0]])  # 1/(B'·|o_i|), 0 on padding

    def value_and_grad(ratio_fn):
        logp = logp_old.clone().requires_grad_(True)
        loss = -(ratio_fn(logp) * A * weight).sum()
        if not loss.requires_grad:  # a fully detached ratio: the graph never reaches logp
            return float(loss), torch.zeros_like(logp)
        loss.backward()
        return float(loss.detach()), logp.grad

    def per_token(logp):
        return torch.exp(logp - logp_old)

    def detached(logp):
        return torch.exp(logp - logp_old).detach()

    def summed(logp):
        d = ((logp - logp_old) * mask).sum(dim=1, keepdim=True)
        return torch.exp(d).expand_as(logp)

    v0, g0 = value_and_grad(per_token)
    v1, g1 = value_and_grad(detached)
    v2, g2 = value_and_grad(summed)
    assert v0 == v1 == v2 == -(0.25 - 0.5 + 1.5)
    torch.testing.assert_close(g0 * mask, torch.tensor([[-0.25, 0.5], [-1.5, 0.0]]))
    torch.testing.assert_close(g1 * mask, torch.zeros(2, 2))
    torch.testing.assert_close(g2 * mask, torch.tensor([[0.25, 0.25], [-1.5, 0.0]]))
