"""Clip-Cov's own invariants (Cui et al., arXiv 2505.22617; verl's ``clip_cov`` loss).
One invariant per test; the covariance and the candidate set are recomputed here in float64
with plain loops, independently of ``core``."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl.algorithms import clip_cov, dapo
from refimpl.contract import RolloutBatch
from tests.spec import worked
from tests.spec.strategies import batch_and_policy

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


def _candidates(batch: RolloutBatch, logp, adv, cfg, margin: float = 1e-4):
    """``(candidates, undecided)``: the sets of (i, t) whose centred covariance lies strictly in
    (ω_low, ω_high) and whose clipped term is not the active one, from the definition; and
    the tokens within ``margin`` of a band edge or a clip bound (float32 may decide those
    either way)."""
    m = batch.response_mask
    cells = [(i, t) for i in range(m.shape[0]) for t in range(m.shape[1]) if m[i, t] == 1]
    if not cells:
        return set(), set()
    a = {c: float(adv[c]) for c in cells}
    lp = {c: float(logp[c]) for c in cells}
    mean_a = sum(a.values()) / len(cells)
    mean_lp = sum(lp.values()) / len(cells)
    lo, hi = 1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high
    out, undecided = set(), set()
    for c in cells:
        cov = (a[c] - mean_a) * (lp[c] - mean_lp)
        w = math.exp(lp[c] - float(batch.logp_old[c]))
        clipped = (a[c] > 0 and w > hi) or (a[c] < 0 and w < lo)
        if min(abs(cov - cfg.clip_cov_lb), abs(cov - cfg.clip_cov_ub)) < margin * max(
            1.0, abs(cov)
        ) or (a[c] != 0 and min(abs(w - hi), abs(w - lo)) < margin):
            undecided.add(c)
        if cfg.clip_cov_lb < cov < cfg.clip_cov_ub and not clipped:
            out.add(c)
    return out, undecided


def _selected(batch, logp, adv, cfg) -> set:
    S = clip_cov.clip_cov_mask(batch, logp, adv, cfg)
    return {tuple(x) for x in torch.nonzero(S).tolist()}


def _random_adv(batch: RolloutBatch, seed: int, scale: float = 2.0) -> torch.Tensor:
    adv = scale * torch.randn(
        batch.response_mask.shape, generator=torch.Generator().manual_seed(seed)
    )
    return torch.where(batch.response_mask.bool(), adv, 0.0)


@settings(max_examples=max(60, settings().max_examples))
@given(x=batch_and_policy(), seed=st.integers(0, 2**31 - 1), r=st.sampled_from([2e-4, 0.1, 1.0]))
def test_selection_is_a_subset_of_the_candidates_of_the_right_size(x, seed, r):
    """S ⊆ C, the tokens with ω_low < cov < ω_high (cov centred over the batch's response
    tokens) that the PPO clip has not clipped; and |S| = min(|C|, max(1, ⌊r·N⌋)). So with
    r = 1, S = C; and with the paper's r = 2e-4 on a small batch, exactly one token whenever
    C is non-empty."""
    batch, logp, _ = x
    adv = _random_adv(batch, seed)
    cfg = dataclasses.replace(clip_cov.Config(), clip_cov_ratio=r, clip_cov_lb=0.2, clip_cov_ub=4.0)
    C, undecided = _candidates(batch, logp, adv, cfg)
    S = _selected(batch, logp, adv, cfg)
    assert S - undecided <= C
    if not undecided:
        N = int(batch.response_mask.sum())
        assert len(S) == min(len(C), max(1, math.floor(r * N)))
        if r == 1.0:
            assert S == C


def test_selected_terms_are_zeroed_and_stay_in_the_normaliser():
    """A selected token contributes 0 to the loss value *and* to the gradient (verl's corr = 0),
    and is still counted in Σm: L = DAPO's L − Σ_{S} ℓ / Σm, ∂L = DAPO's ∂L with zeros on S."""
    batch, logp = worked.batch()
    cfg = dataclasses.replace(clip_cov.Config(), clip_cov_lb=0.1, clip_cov_ratio=1.0)
    adv = clip_cov.advantages(batch, cfg)
    S = clip_cov.clip_cov_mask(batch, logp, adv, cfg)
    assert int(S.sum()) == 2
    dcfg = dapo.Config()
    lp = logp.clone().requires_grad_(True)
    ours, _ = clip_cov.loss(batch, lp, adv, cfg)
    ours.backward()
    lp_d = logp.clone().requires_grad_(True)
    theirs, _ = dapo.loss(batch, lp_d, adv, dcfg)
    theirs.backward()
    # DAPO's per-token term at the selected tokens (both unclipped): −A·w.
    w = torch.exp(logp - batch.logp_old)
    removed = float((-(adv * w))[S].sum()) / float(batch.response_mask.sum())
    assert float(ours.detach()) == pytest.approx(float(theirs.detach()) - removed, abs=1e-6)
    assert bool((lp.grad[S] == 0).all())
    torch.testing.assert_close(lp.grad[~S], lp_d.grad[~S])


def test_no_candidate_means_dapo():
    """When no covariance falls in the band (the worked example at ω = (1, 5): every |cov| <
    0.4), S is empty and the loss and gradient are DAPO's, bit for bit."""
    batch, logp = worked.batch()
    cfg = clip_cov.Config()
    _, grad_c, metrics = worked.loss_and_grad(clip_cov, cfg, batch, logp)
    _, grad_d, _ = worked.loss_and_grad(dapo, dapo.Config(), batch, logp)
    assert metrics["cov_selected"] == 0.0
    assert torch.equal(grad_c, grad_d)


def _many_candidates(n_rows: int = 8, T: int = 8):
    """A batch where every token is a candidate at ω = (1, 5): A = ±1 (mean 0), logp −0.5 on
    the positive rows and −3 on the negative ones (mean −1.75), so cov = 1.25 everywhere;
    ratio 1 (nothing clipped)."""
    B = n_rows
    mask = torch.ones(B, T)
    logp = torch.full((B, T), -3.0)
    logp[: B // 2] = -0.5  # cov = (±1 − 0)·(±1.25) = 1.25 ∈ (1, 5)
    batch = RolloutBatch(
        response_ids=torch.arange(B * T).reshape(B, T),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0] * (B // 2)),
        logp_old=logp.clone(),
        entropy_old=torch.ones(B, T),
        group_size=2,
    )
    adv = torch.ones(B, T)
    adv[B // 2 :] = -1.0
    return batch, logp, adv


def test_subset_is_seeded_and_uniform():
    """The subset is random but seedable: the same (seed, batch) draws the same tokens, other
    seeds draw others, and over many seeds every candidate is chosen about equally often
    (a rule that always took the first candidates would fail). With seed=None the draw is
    torch's global generator, ``torch.randperm`` over the candidates in row-major order, as
    verl draws it."""
    batch, logp, adv = _many_candidates()
    cfg = clip_cov.Config()  # n = max(1, ⌊2e-4·64⌋) = 1 of the 64 candidates
    C, _ = _candidates(batch, logp, adv, cfg)
    assert len(C) == 64
    first = _selected(batch, logp, adv, cfg)
    assert first == _selected(batch, logp, adv, cfg) and len(first) == 1
    counts = dict.fromkeys(C, 0)
    draws = 3200
    for seed in range(draws):
        (token,) = _selected(batch, logp, adv, dataclasses.replace(cfg, seed=seed))
        counts[token] += 1
    # Binomial(3200, 1/64): mean 50, sd 7.0; every count within 50 ± 35 (5 sd).
    assert all(15 <= c <= 85 for c in counts.values()), counts
    # seed=None: torch.randperm on the global generator, over the row-major candidates.
    ordered = sorted(C)
    torch.manual_seed(123)
    expected = ordered[int(torch.randperm(len(ordered))[0])]
    torch.manual_seed(123)
    assert _selected(batch, logp, adv, dataclasses.replace(cfg, seed=None)) == {expected}


def test_toy_scale_selects_one_token():
    """With the paper's r = 2e-4, a batch of 4000 response tokens (the toy regime) gives
    ⌊0.8⌋ = 0, raised to the code's minimum of one token; 10 000 tokens give 2."""
    from refimpl import core

    cfg = clip_cov.Config()
    assert core.covariance_selection_count(cfg.clip_cov_ratio, torch.ones(40, 100)) == 1
    assert core.covariance_selection_count(cfg.clip_cov_ratio, torch.ones(100, 100)) == 2
    assert core.covariance_selection_count(cfg.clip_cov_ratio, torch.zeros(4, 4)) == 0


def test_paper_defaults():
    """r = 2e-4, ω = (1, 5) (paper and verl), on DAPO's clip-higher ε = 0.2 / 0.28."""
    cfg = clip_cov.Config()
    assert (cfg.clip_cov_ratio, cfg.clip_cov_lb, cfg.clip_cov_ub) == (2e-4, 1.0, 5.0)
    assert (cfg.clip_eps_low, cfg.clip_eps_high, cfg.loss_agg_mode) == (0.2, 0.28, "token-mean")


@pytest.mark.parametrize(
    ("field", "value"),
    [("clip_cov_ratio", 0.0), ("clip_cov_ratio", 1.5), ("clip_cov_lb", 6.0), ("seed", 1.5)],
)
def test_config_rejects_bad_values(field, value):
    """Config validation: r outside (0, 1], ω_low ≥ ω_high, a non-int seed raise a ValueError naming the field."""
    with pytest.raises(ValueError, match=field):
        clip_cov.Config(**{field: value})


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/clip_cov.md``."""
    batch, logp = worked.batch()
    cfg = clip_cov.Config()
    adv = clip_cov.advantages(batch, cfg)
    a = 0.866025
    torch.testing.assert_close(
        adv, worked.rows([[a] * 2, [a] * 4, [-a] * 3, [-a]]), atol=1e-5, rtol=0
    )
    from refimpl import core

    cov = core.token_covariance(logp, adv, batch.response_mask)
    expected = worked.rows(
        [
            [0.043109, 0.131675],
            [-0.022924] * 4,
            [0.143879, 0.333353, 0.034385],
            [-0.386987],
        ]
    )
    torch.testing.assert_close(cov, expected, atol=1e-5, rtol=0)
    # Defaults: no covariance in (1, 5): DAPO's loss.
    total, _, metrics = worked.loss_and_grad(clip_cov, cfg, batch, logp)
    assert metrics["cov_selected"] == 0.0
    assert total == pytest.approx(-0.186196, abs=1e-5)
    # The page's toy band ω = (0.1, 5), r = 0.2: n = 2, C = {o1 t2, o3 t1} (o3 t2 is clipped).
    toy = dataclasses.replace(cfg, clip_cov_lb=0.1, clip_cov_ratio=0.2)
    assert _selected(batch, logp, adv, toy) == {(0, 1), (2, 0)}
    total, grad, metrics = worked.loss_and_grad(clip_cov, toy, batch, logp)
    assert metrics["cov_selected"] == 2.0
    assert total == pytest.approx(-0.155885, abs=1e-5)
    expected = worked.rows(
        [
            [-0.095263, 0.0],
            [-0.086603] * 4,
            [0.0, 0.0, 0.086603],
            [0.129904],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-5, rtol=0)
