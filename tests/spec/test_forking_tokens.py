"""Forking-token training's own invariants (Wang et al., arXiv 2506.01939). One invariant
per test; the entropy threshold is recomputed here from its definition (a quantile with
linear interpolation, in float64), independently of ``torch.quantile``."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl.algorithms import dapo, forking_tokens
from tests.spec import worked
from tests.spec.strategies import batch_and_policy

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _quantile(values: list[float], q: float) -> float:
    """The q-quantile with linear interpolation between order statistics (position
    q·(n − 1) in the sorted list)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


@given(x=batch_and_policy(), rho=st.sampled_from([0.05, 0.2, 0.5, 1.0]))
def test_mask_is_the_top_rho_entropy_tokens_of_the_batch(x, rho):
    """F[i,t] = 1 exactly on the response tokens whose rollout entropy is ≥ τ_ρ, the
    (1 − ρ)-quantile of the batch's response-token entropies (0 on padding; all response
    tokens when ρ = 1). The order statistics at and above position (1 − ρ)(N − 1) are ≥ τ_ρ,
    so at least ρ·(N − 1) tokens train; more than ρ·N only through ties at τ_ρ."""
    batch, _, _ = x
    m = batch.response_mask.bool()
    F = forking_tokens.forking_mask(batch.entropy_old, batch.response_mask, rho)
    assert bool((F[~m] == 0).all())
    H = batch.entropy_old[m].double().tolist()
    if not H:
        assert not bool(F.any())
        return
    tau = _quantile(H, 1.0 - rho)
    h = batch.entropy_old.double()
    tol = 1e-6 * max(1.0, abs(tau))
    clear = m & ((h - tau).abs() > tol)  # tokens not within rounding of τ_ρ
    assert torch.equal(F.bool()[clear], (h >= tau)[clear])
    assert float(F.sum()) >= math.floor(rho * (len(H) - 1))
    if rho == 1.0:
        assert torch.equal(F.bool(), m)


@given(x=batch_and_policy(max_log_ratio=0.5))
def test_rho_one_is_dapo(x):
    """With ρ = 1 every response token trains: loss and gradient are DAPO's, bit for bit."""
    batch, logp, _ = x
    cfg = dataclasses.replace(forking_tokens.Config(), top_entropy_frac=1.0)
    adv = dapo.advantages(batch, dapo.Config())
    a = logp.clone().requires_grad_(True)
    b = logp.clone().requires_grad_(True)
    la, _ = forking_tokens.loss(batch, a, adv, cfg)
    lb, _ = dapo.loss(batch, b, adv, dapo.Config())
    la.backward()
    lb.backward()
    assert torch.equal(la.detach(), lb.detach())
    assert torch.equal(a.grad, b.grad)


@given(x=batch_and_policy(max_log_ratio=0.5))
def test_only_forking_tokens_train_with_dapo_weight(x):
    """The gradient is DAPO's on the forking tokens (the normaliser is Σm over *all* response
    tokens, not the forking count: no 1/ρ rescaling) and exactly 0 on the others."""
    batch, logp, _ = x
    cfg = forking_tokens.Config()
    adv = dapo.advantages(batch, dapo.Config())
    F = forking_tokens.forking_mask(batch.entropy_old, batch.response_mask, 0.2).bool()
    a = logp.clone().requires_grad_(True)
    b = logp.clone().requires_grad_(True)
    forking_tokens.loss(batch, a, adv, cfg)[0].backward()
    dapo.loss(batch, b, adv, dapo.Config())[0].backward()
    torch.testing.assert_close(a.grad[F], b.grad[F], rtol=1e-6, atol=0)
    assert bool((a.grad[~F] == 0).all())


def test_reads_the_rollout_entropy_not_the_current_one():
    """The mask comes from ``batch.entropy_old``: passing any current entropy changes nothing;
    changing the rollout entropy moves the mask."""
    batch, logp = worked.batch()
    cfg = forking_tokens.Config()
    l1, g1, _ = worked.loss_and_grad(forking_tokens, cfg, batch, logp)
    l2, g2, _ = worked.loss_and_grad(
        forking_tokens, cfg, batch, logp, entropy=torch.rand(batch.response_mask.shape)
    )
    assert l1 == l2 and torch.equal(g1, g2)
    flipped = batch.replace(entropy_old=3.5 - batch.entropy_old)
    l3, _, _ = worked.loss_and_grad(forking_tokens, cfg, flipped, logp)
    assert l3 != l1


def test_paper_default():
    """ρ = 0.2 (the paper's "20 %"), on DAPO's settings."""
    cfg = forking_tokens.Config()
    assert cfg.top_entropy_frac == 0.2
    d = dapo.Config()
    assert (cfg.clip_eps_low, cfg.clip_eps_high, cfg.loss_agg_mode, cfg.dynamic_sampling) == (
        d.clip_eps_low,
        d.clip_eps_high,
        d.loss_agg_mode,
        d.dynamic_sampling,
    )


@pytest.mark.parametrize("value", [0.0, -0.1, 1.5])
def test_config_rejects_bad_values(value):
    """Config validation: ρ outside (0, 1] raises a ValueError naming `top_entropy_frac`."""
    with pytest.raises(ValueError, match="top_entropy_frac"):
        forking_tokens.Config(top_entropy_frac=value)


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/forking_tokens.md``."""
    batch, logp = worked.batch()
    cfg = forking_tokens.Config()
    F = forking_tokens.forking_mask(batch.entropy_old, batch.response_mask, 0.2)
    # Sorted entropies 0.5 0.5 0.5 1 1 1 2 2 2 3: position 0.8·9 = 7.2 → τ = 2 (a tie).
    expected = worked.rows([[0.0, 1.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [1.0]])
    assert torch.equal(F, expected)
    total, grad, metrics = worked.loss_and_grad(forking_tokens, cfg, batch, logp)
    assert metrics["forking_frac"] == pytest.approx(0.4)
    assert total == pytest.approx(-0.151554, abs=1e-5)
    expected = worked.rows(
        [
            [0.0, -0.108253],
            [-0.086603, -0.086603, 0.0, 0.0],
            [0.0, 0.0, 0.0],
            [0.129904],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------
# The random control (selection="random"): as many tokens as the entropy rule, none chosen for
# its entropy (arXiv 2605.07660's random-20 % control).
# ---------------------------------------------------------------------------------------------

RANDOM = forking_tokens.Config(selection="random")


def _distinct_entropies(batch, gen: torch.Generator):
    """``batch`` with its response tokens' entropies a random permutation of 0.25, 0.75, …
    (distinct and exact in float32, so the entropy rule's count has no ties to add)."""
    m = batch.response_mask.bool()
    H = torch.zeros(batch.response_mask.shape)
    H[m] = torch.randperm(int(m.sum()), generator=gen).float() * 0.5 + 0.25
    return batch.replace(entropy_old=H)


@given(x=batch_and_policy(), rho=st.sampled_from([0.05, 0.2, 0.3, 0.5, 0.7, 1.0]))
def test_random_control_keeps_the_entropy_rule_s_count(x, rho):
    """The control keeps exactly n = kept_count(N, ρ) response tokens (0 on padding), n ≥
    ρ·(N − 1) (the order statistics at and above position (1 − ρ)(N − 1)); on entropies
    without ties the entropy rule keeps the same n: the same fraction trains."""
    batch, _, _ = x
    m = batch.response_mask.bool()
    N = int(m.sum())
    cfg = dataclasses.replace(RANDOM, top_entropy_frac=rho)
    F = forking_tokens.token_selection(batch, cfg)
    assert bool((F[~m] == 0).all()) and set(F[m].tolist()) <= {0.0, 1.0}
    n = forking_tokens.kept_count(N, rho)
    assert int(F.sum()) == n
    assert n >= math.floor(rho * (N - 1)) and n <= N
    distinct = _distinct_entropies(batch, torch.Generator().manual_seed(N))
    entropy_rule = forking_tokens.forking_mask(distinct.entropy_old, batch.response_mask, rho)
    assert int(entropy_rule.sum()) == n
    if rho == 1.0:
        assert torch.equal(F.bool(), m)


@given(x=batch_and_policy())
def test_random_control_does_not_read_the_entropies(x):
    """For a fixed draw (same batch tokens, same seed), permuting the rollout entropies over
    the response tokens, or replacing them, leaves the kept set unchanged: the selection is
    not by entropy. The entropy rule, given reversed entropies, keeps another set."""
    batch, _, _ = x
    m = batch.response_mask.bool()
    F = forking_tokens.token_selection(batch, RANDOM)
    gen = torch.Generator().manual_seed(1)
    permuted = batch.entropy_old.clone()
    permuted[m] = batch.entropy_old[m][torch.randperm(int(m.sum()), generator=gen)]
    for H in (permuted, torch.rand(batch.response_mask.shape, generator=gen)):
        assert torch.equal(forking_tokens.token_selection(batch.replace(entropy_old=H), RANDOM), F)


def test_random_control_is_reproducible_and_draws_per_batch_and_seed():
    """The same batch and seed keep the same tokens (every epoch of a step trains the same
    ones); another seed, or another batch, draws another subset."""
    batch, _ = worked.batch()
    numbered = batch.replace(response_ids=torch.arange(batch.response_ids.numel()).view_as(
        batch.response_ids) % 16)  # fmt: skip
    F = forking_tokens.token_selection(numbered, RANDOM)
    assert torch.equal(F, forking_tokens.token_selection(numbered, RANDOM))

    def draws(b) -> set[tuple[float, ...]]:
        seeds = [dataclasses.replace(RANDOM, seed=s) for s in range(20)]
        return {tuple(forking_tokens.token_selection(b, c).flatten().tolist()) for c in seeds}

    # C(10, 2) = 45 subsets: 20 seeds that all drew one would be no draw at all.
    assert len(draws(numbered)) > 1
    assert draws(numbered.replace(response_ids=(numbered.response_ids + 1) % 16)) != draws(numbered)


def test_random_control_keeps_tokens_of_average_entropy():
    """Over S = 400 draws (seeds) on one batch of N = 200 tokens with skewed entropies, the
    mean entropy of the kept tokens averages the batch mean μ within 4 standard errors, the
    s.e. of a mean of n draws without replacement, σ·√((N − n)/(n(N − 1))/S); the entropy
    rule's kept tokens average far above μ (their mean is that of the top 20 %)."""
    gen = torch.Generator().manual_seed(0)
    B, T, S = 10, 20, 400
    H = torch.log(torch.rand(B, T, generator=gen)) ** 2  # Exp(1)²: skewed, as entropies are
    batch = worked.batch()[0]
    batch = batch.replace(
        response_ids=torch.randint(0, 16, (B, T), generator=gen),
        response_mask=torch.ones(B, T),
        rewards=torch.zeros(B),
        logp_old=-torch.ones(B, T),
        entropy_old=H,
        group_size=2,
        logp_ref=None,
        token_values=None,
    )
    N = B * T
    n = forking_tokens.kept_count(N, 0.2)
    mu, sigma = float(H.double().mean()), float(H.double().std())
    means = []
    for s in range(S):
        F = forking_tokens.token_selection(batch, dataclasses.replace(RANDOM, seed=s))
        means.append(float((F.double() * H).sum() / F.sum()))
    se = sigma * math.sqrt((N - n) / (n * (N - 1)) / S)
    assert abs(sum(means) / S - mu) < 4 * se
    forks = forking_tokens.forking_mask(H, batch.response_mask, 0.2).double()
    assert float((forks * H).sum() / forks.sum()) > mu + 100 * se


@given(x=batch_and_policy(max_log_ratio=0.5))
def test_random_control_trains_only_its_tokens_with_dapo_weight(x):
    """As the entropy rule: DAPO's gradient on the kept tokens, exactly 0 elsewhere."""
    batch, logp, _ = x
    adv = dapo.advantages(batch, dapo.Config())
    F = forking_tokens.token_selection(batch, RANDOM).bool()
    a = logp.clone().requires_grad_(True)
    b = logp.clone().requires_grad_(True)
    forking_tokens.loss(batch, a, adv, RANDOM)[0].backward()
    dapo.loss(batch, b, adv, dapo.Config())[0].backward()
    torch.testing.assert_close(a.grad[F], b.grad[F], rtol=1e-6, atol=0)
    assert bool((a.grad[~F] == 0).all())


def test_selection_is_a_checked_switch():
    """The paper's rule by default; an unknown selection is refused, naming the field."""
    assert forking_tokens.Config().selection == "entropy"
    with pytest.raises(ValueError, match="selection"):
        forking_tokens.Config(selection="top")
