"""The shared primitives of ``refimpl/core.py``: one invariant per test.

Masked reductions, aggregation modes, group statistics, the k3 KL, DAPO's overlong shaping
and dynamic-sampling filter, and ``RolloutBatch`` validation (``refimpl/contract.py``). ``docs/spec.md`` indexes them.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from refimpl import batch_stages, contract, core
from refimpl.contract import RolloutBatch
from tests.spec.strategies import pad_tensor, rollout_batches

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")


# ---------------------------------------------------------------------------------------------
# Masked reductions: padding can hold anything, NaN included.
# ---------------------------------------------------------------------------------------------


@given(batch=rollout_batches(padding="nan"))
def test_masked_ops_ignore_nan_padding(batch):
    """``masked_sum`` / ``masked_mean`` of a tensor whose padding is NaN equal those of the
    same tensor with zeros in the padding; the empty mask gives 0, never NaN."""
    m = batch.response_mask
    x = batch.logp_old
    clean = pad_tensor(x, m, 0.0)
    for dim in (None, 1):
        torch.testing.assert_close(core.masked_sum(x, m, dim), core.masked_sum(clean, m, dim))
        mean = core.masked_mean(x, m, dim)
        assert bool(torch.isfinite(mean).all())
        torch.testing.assert_close(mean, core.masked_mean(clean, m, dim))
    assert bool((core.masked_mean(x, m, 1)[m.sum(1) == 0] == 0).all())


@given(batch=rollout_batches(padding="nan"))
def test_masked_gradient_zero_on_nan_padding(batch):
    """The gradient of ``masked_sum(x, m)`` is exactly ``m``: 1 on response tokens, 0 (not
    NaN) on padding even where ``x`` holds NaN."""
    x = batch.logp_old.clone().requires_grad_(True)
    core.masked_sum(x, batch.response_mask).backward()
    assert torch.equal(x.grad, batch.response_mask)


@given(batch=rollout_batches(padding="nan", with_ref=True))
def test_kl_k3_masked_nan_safe(batch):
    """With a mask, the k3 KL is 0 on padding and its gradient there is 0 even when the
    padding of ``logp`` and ``logp_ref`` holds NaN."""
    logp = batch.logp_old.clone().requires_grad_(True)
    kl = core.kl_k3(logp, batch.logp_ref, batch.response_mask)
    assert bool((kl[batch.response_mask == 0] == 0).all())
    kl.sum().backward()
    assert bool(torch.isfinite(logp.grad).all())
    assert bool((logp.grad[batch.response_mask == 0] == 0).all())


# ---------------------------------------------------------------------------------------------
# Aggregation modes.
# ---------------------------------------------------------------------------------------------


def test_aggregation_modes_hand_computed():
    """The four modes on a 2-row example, worked out by hand.

    mask = [[1,1,1],[1,0,0]], ℓ = [[1,2,3],[4,·,·]] (· = padding, holds NaN):
      token-mean               (1+2+3+4)/4                  = 2.5
      seq-mean-token-mean      ((1+2+3)/3 + 4/1)/2 = (2+4)/2 = 3.0
      seq-mean-token-sum-norm  (1+2+3+4)/(2·L_max), L_max=5  = 1.0
      seq-mean over ℓ_i = [6, 8]                             = 7.0
    """
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    nan = float("nan")
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, nan, nan]])
    assert core.aggregate(loss, mask, "token-mean").item() == pytest.approx(2.5)
    assert core.aggregate(loss, mask, "seq-mean-token-mean").item() == pytest.approx(3.0)
    assert core.aggregate(loss, mask, "seq-mean-token-sum-norm", max_len=5).item() == pytest.approx(
        1.0
    )
    assert core.aggregate(torch.tensor([6.0, 8.0]), mask, "seq-mean").item() == pytest.approx(7.0)


@given(batch=rollout_batches())
def test_aggregation_skips_empty_rows(batch):
    """Empty completions (``|o_i| = 0``) are skipped by every mode: adding an all-padding row
    (with any loss value) to a batch changes no aggregate. Here: compare each mode with a
    direct float64 formula over non-empty rows only."""
    m = batch.response_mask
    loss = -batch.logp_old  # any finite per-token values on response tokens
    md = m.double()
    ld = pad_tensor(loss.double(), m, 0.0)
    lengths = md.sum(1)
    ne = lengths > 0
    if not bool(ne.any()):
        assert core.aggregate(loss, m, "token-mean").item() == 0.0
        return
    bp = float(ne.sum())
    expect = {
        "token-mean": ld.sum() / md.sum(),
        "seq-mean-token-mean": (ld.sum(1)[ne] / lengths[ne]).sum() / bp,
        "seq-mean-token-sum-norm": ld.sum() / (bp * 11),
    }
    for mode, value in expect.items():
        got = core.aggregate(loss, m, mode, max_len=11)
        assert got.item() == pytest.approx(float(value), rel=1e-5, abs=1e-6), mode


def test_aggregate_empty_batch_is_zero_with_warning():
    """A batch with no response token gives loss 0 (attached to the graph) and a warning."""
    mask = torch.zeros(2, 3)
    x = torch.full((2, 3), float("nan"), requires_grad=True)
    with pytest.warns(UserWarning, match="empty batch"):
        out = core.aggregate(x, mask, "token-mean")
    assert out.item() == 0.0 and out.requires_grad


def test_aggregate_rejects_unknown_mode_and_missing_max_len():
    """Unknown modes and a missing ``L_max`` raise ``ValueError`` naming the argument."""
    mask = torch.ones(2, 2)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        core.aggregate(torch.ones(2, 2), mask, "sum")
    with pytest.raises(ValueError, match="max_len"):
        core.aggregate(torch.ones(2, 2), mask, "seq-mean-token-sum-norm")


# ---------------------------------------------------------------------------------------------
# Group statistics.
# ---------------------------------------------------------------------------------------------


@given(batch=rollout_batches(equal_groups=False, binary_rewards=False))
def test_group_normalize_zero_mean_unit_std(batch):
    """``group_normalize`` gives every non-degenerate group mean 0 and unbiased std
    ``std/(std+eps) ≈ 1``; degenerate groups are exactly 0."""
    G = batch.group_size
    a = core.group_view(core.group_normalize(batch.rewards, G), G).double()
    r = core.group_view(batch.rewards, G).double()
    for g in range(a.shape[0]):
        if bool((r[g] == r[g][0]).all()):
            assert bool((a[g] == 0).all())
        else:
            assert abs(float(a[g].mean())) < 1e-5
            std = float(r[g].std())
            assert float(a[g].std()) == pytest.approx(std / (std + 1e-6), rel=1e-5)


@given(batch=rollout_batches(equal_groups=True))
def test_group_normalize_all_equal_is_exactly_zero(batch):
    """A group with all-equal rewards gets advantage exactly 0 (never NaN, no residue),
    with or without the std division."""
    for scale in (True, False):
        assert bool(
            (core.group_normalize(batch.rewards, batch.group_size, scale_by_std=scale) == 0).all()
        )


@given(
    st.lists(st.floats(-50, 0, width=32), min_size=1, max_size=20),
    st.lists(st.floats(-50, 0, width=32), min_size=1, max_size=20),
)
def test_kl_k3_nonnegative(a, b):
    """k3 ``exp(Δ) − Δ − 1 ≥ 0`` for every ``Δ`` (since ``e^x ≥ 1 + x``), 0 iff ``Δ = 0``."""
    n = min(len(a), len(b))
    logp, ref = torch.tensor(a[:n]), torch.tensor(b[:n])
    kl = core.kl_k3(logp, ref)
    assert bool((kl >= 0).all())
    assert bool((core.kl_k3(logp, logp) == 0).all())


def test_kl_k3_nonnegative_at_float32_resolution():
    """At |Δ| of one float32 ulp of 1, ``exp(Δ) − Δ − 1`` cancels to a negative number
    (−5.96e-8 for this pair, the counterexample the thorough profile found); k3 must stay ≥ 0
    and ≈ Δ²/2 there."""
    logp = torch.tensor([-5.960464477539063e-08, 0.0, -1e-7, 1e-4])
    ref = torch.tensor([0.0, -5.960464477539063e-08, 0.0, 0.0])
    kl = core.kl_k3(logp, ref)
    assert bool((kl >= 0).all())
    delta = ref.double() - logp.double()
    assert torch.allclose(kl.double(), delta**2 / 2, rtol=1e-3, atol=1e-12)


# ---------------------------------------------------------------------------------------------
# DAPO's mechanisms (shared: each Config decides whether they are on).
# ---------------------------------------------------------------------------------------------


@given(L_max=st.integers(2, 64), frac=st.floats(0.05, 1.0))
def test_overlong_penalty_continuous_monotone_bounded(L_max, frac):
    """``R_len`` (DAPO Eq. 13) is in [−1, 0], non-increasing in ``|o|``, 0 up to
    ``L_max − L_cache``, −1 beyond ``L_max``, and continuous: on integer lengths consecutive
    values differ by at most ``1/L_cache`` (the slope of the linear band)."""
    cache = batch_stages.overlong_cache_len(L_max, frac)
    lengths = torch.arange(0, L_max + 5)
    p = batch_stages.overlong_penalty(lengths, L_max, cache)
    assert bool((p <= 0).all()) and bool((p >= -1).all())
    steps = p[1:] - p[:-1]
    assert bool((steps <= 0).all())
    assert bool((steps.abs() <= 1.0 / cache + 1e-6).all())
    assert bool((p[: L_max - cache + 1] == 0).all())
    assert bool((p[L_max:] == -1).all())
    # Continuity at the band's edges on real-valued lengths.
    edge = torch.tensor([L_max - cache - 1e-3, L_max - cache + 1e-3, L_max - 1e-3, L_max + 1e-3])
    q = batch_stages.overlong_penalty(edge, L_max, cache)
    assert abs(float(q[0] - q[1])) < 1e-2 and abs(float(q[2] - q[3])) < 1e-2


def test_overlong_penalty_hand_computed():
    """DAPO's own numbers scaled down: L_max = 10, L_cache = 4 → the band is (6, 10]:
    |o| = 6 → 0, 7 → −1/4, 8 → −2/4, 10 → −1, 11 → −1."""
    p = batch_stages.overlong_penalty(torch.tensor([6, 7, 8, 10, 11]), 10, 4)
    torch.testing.assert_close(p, torch.tensor([0.0, -0.25, -0.5, -1.0, -1.0]))


@given(batch=rollout_batches(binary_rewards=True))
def test_informative_groups_keeps_mixed_groups(batch):
    """Dynamic sampling keeps exactly the groups with ``0 < #successful < G`` (DAPO Eq. 11):
    with binary rewards, those whose rewards are not all equal."""
    keep = batch_stages.informative_groups(batch.rewards, batch.group_size, 0.5)
    r = batch.rewards.view(-1, batch.group_size)
    n = (r >= 0.5).sum(1)
    assert keep.tolist() == [(0 < int(k) < batch.group_size) for k in n]
    if keep.any():
        assert batch.select_groups(keep).num_groups == int(keep.sum())
    else:  # no group kept: an empty batch, which RolloutBatch refuses (nothing to train on)
        with pytest.raises(ValueError, match="non-empty batch"):
            batch.select_groups(keep)


# ---------------------------------------------------------------------------------------------
# RolloutBatch validation: ValueError naming the argument.
# ---------------------------------------------------------------------------------------------


def _fields(B=4, T=3, G=2):
    return dict(
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=torch.ones(B, T),
        rewards=torch.zeros(B),
        logp_old=-torch.ones(B, T),
        entropy_old=torch.ones(B, T),
        group_size=G,
    )


BAD_BATCHES = {
    "group_size does not divide B": ({"group_size": 3}, "group_size"),
    "group_size < 2": ({"group_size": 1}, "group_size"),
    "group_size not int": ({"group_size": 2.0}, "group_size"),
    "mask not 0/1": ({"response_mask": torch.full((4, 3), 0.5)}, "response_mask"),
    "mask 1-D": ({"response_mask": torch.ones(4)}, "response_mask"),
    "rewards wrong shape": ({"rewards": torch.zeros(3)}, "rewards"),
    "rewards NaN": ({"rewards": torch.tensor([0.0, float("nan"), 1.0, 0.0])}, "rewards"),
    "rewards inf": ({"rewards": torch.tensor([0.0, float("inf"), 1.0, 0.0])}, "rewards"),
    "logp_old wrong shape": ({"logp_old": -torch.ones(4, 2)}, "logp_old"),
    "logp_old positive": ({"logp_old": torch.ones(4, 3)}, "logp_old"),
    "logp_old NaN on a token": (
        {"logp_old": torch.tensor([[float("nan")] * 3] + [[-1.0] * 3] * 3)},
        "logp_old",
    ),
    "entropy negative": ({"entropy_old": -torch.ones(4, 3)}, "entropy_old"),
    "entropy with grad": ({"entropy_old": torch.ones(4, 3, requires_grad=True)}, "entropy_old"),
    "ids float": ({"response_ids": torch.zeros(4, 3)}, "response_ids"),
    "logp_ref wrong shape": ({"logp_ref": -torch.ones(2, 3)}, "logp_ref"),
    "outcome_rewards wrong shape": ({"outcome_rewards": torch.zeros(3)}, "outcome_rewards"),
    "outcome_rewards NaN": (
        {"outcome_rewards": torch.tensor([0.0, float("nan"), 1.0, 0.0])},
        "outcome_rewards",
    ),
}


@pytest.mark.parametrize("case", list(BAD_BATCHES))
def test_rollout_batch_rejects_bad_input(case):
    """Each malformed field raises ``ValueError`` whose message names that field."""
    changes, field = BAD_BATCHES[case]
    with pytest.raises(ValueError, match=field):
        RolloutBatch(**{**_fields(), **changes})


def test_rollout_batch_accepts_anything_on_padding():
    """NaN, positive log-probs and negative entropies on *padding* are accepted (they are
    never read)."""
    f = _fields()
    f["response_mask"] = torch.tensor([[1.0, 0, 0]] * 4)
    f["logp_old"] = torch.tensor([[-1.0, float("nan"), 5.0]] * 4)
    f["entropy_old"] = torch.tensor([[1.0, -3.0, float("nan")]] * 4)
    RolloutBatch(**f)


def test_overlong_rejects_bad_lengths():
    """``overlong_penalty`` / ``overlong_cache_len`` name ``max_len``, ``cache_len`` and
    ``overlong_cache_frac`` when out of range."""
    with pytest.raises(ValueError, match="max_len"):
        batch_stages.overlong_penalty(torch.tensor([1]), 0, 1)
    with pytest.raises(ValueError, match="cache_len"):
        batch_stages.overlong_penalty(torch.tensor([1]), 4, 5)
    with pytest.raises(ValueError, match="overlong_cache_frac"):
        batch_stages.overlong_cache_len(10, 0.0)
    assert math.isclose(batch_stages.overlong_cache_len(20480, 0.2), 4096)


# ---------------------------------------------------------------------------------------------
# Reward shaping, success on the outcome, minibatch split, the GSPO-token ratio.
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Shaping(contract.AlgorithmConfig):
    """A stand-in Config with shaping on and the contract's shaping defaults (L_cache / L_max
    = 0.2, scale ½: DAPO's); an ``AlgorithmConfig``, as ``shape_rewards``'s annotation asks
    (checked in the tests)."""

    kl_coef: float = 0.0
    loss_agg_mode: str = "token-mean"
    overlong_shaping: bool = True


def test_shape_rewards_hand_computed():
    """L_max = 10, L_cache = round(0.2·10) = 2, band (8, 10]; rewards {0, 1}, scale ½:
    |o| = 8 → R_len = 0, 9 → −1/2, 10 → −1, so the shaped rewards of r = [1, 1, 0, 0] at
    |o| = [8, 10, 9, 10] are [1 + 0, 1 − ½, 0 − ¼, 0 − ½] = [1, 0.5, −0.25, −0.5]. Off, the
    rewards pass through unchanged."""
    r = torch.tensor([1.0, 1.0, 0.0, 0.0])
    lengths = torch.tensor([8, 10, 9, 10])
    shaped = batch_stages.shape_rewards(r, lengths, 10, _Shaping())
    assert shaped.tolist() == [1.0, 0.5, -0.25, -0.5]
    assert batch_stages.shape_rewards(r, lengths, 10, _Shaping(overlong_shaping=False)) is r


@given(
    L_max=st.integers(4, 64),
    lengths=st.lists(st.integers(1, 64), min_size=4, max_size=4),
    correct=st.lists(st.booleans(), min_size=4, max_size=4).filter(lambda c: 0 < sum(c) < 4),
)
def test_shaped_advantage_equals_dapo_on_pm1_rewards(L_max, lengths, correct):
    """DAPO shapes ±1 rewards: r' = ±1 + R_len (Eq. 13). With {0, 1} rewards and the penalty
    at half the reward range, r̃ = r + R_len/2 and 2·r̃ − 1 = r' exactly, an affine map: the
    GRPO-normalised advantages are DAPO's (up to eps, scaled by the factor 2 in the std)."""
    lengths_t = torch.tensor([min(n, L_max) for n in lengths])
    r01 = torch.tensor([1.0 if c else 0.0 for c in correct])
    ours = batch_stages.shape_rewards(r01, lengths_t, L_max, _Shaping())
    cache = batch_stages.overlong_cache_len(L_max, 0.2)
    dapo_rewards = (2 * r01 - 1) + batch_stages.overlong_penalty(lengths_t, L_max, cache)
    torch.testing.assert_close(2 * ours - 1, dapo_rewards, rtol=0, atol=1e-6)
    torch.testing.assert_close(
        core.group_normalize(ours, 4), core.group_normalize(dapo_rewards, 4), rtol=0, atol=1e-5
    )


def test_shaping_orders_correct_truncated_wrong_as_dapo():
    """One group: correct, truncated correct, wrong, truncated wrong (L_max = 10, truncated =
    |o| = 10, so R_len = −1). DAPO's ±1 rewards give 1, 0, −1, −2: a truncated correct answer
    lies strictly between a correct and a wrong one. Ours give 1, 0.5, 0, −0.5 and the same
    advantages, in the same strict order. (The penalty added at full size to {0, 1} rewards
    gives 1, 0, 0, −1: the truncated correct answer ties with the short wrong one.)"""
    r = torch.tensor([1.0, 1.0, 0.0, 0.0])
    lengths = torch.tensor([5, 10, 5, 10])
    ours = batch_stages.shape_rewards(r, lengths, 10, _Shaping())
    assert ours.tolist() == [1.0, 0.5, 0.0, -0.5]
    A = core.group_normalize(ours, 4)
    A_dapo = core.group_normalize(torch.tensor([1.0, 0.0, -1.0, -2.0]), 4)
    torch.testing.assert_close(A, A_dapo, rtol=0, atol=1e-5)
    assert A[0] > A[1] > A[2] > A[3]
    doubled = batch_stages.shape_rewards(r, lengths, 10, _Shaping(overlong_penalty_scale=1.0))
    assert doubled[1] == doubled[2]  # the defect the scale ½ removes


def test_success_is_decided_on_the_outcome():
    """With ``outcome_rewards`` set, success reads them, not the (shaped) rewards: a correct
    answer whose reward fell below the threshold is still a success, a wrong one whose reward
    rose above it is still a failure. Without them, success reads the rewards."""
    outcome = torch.tensor([1.0, 1.0, 0.0, 0.0])
    shaped = torch.tensor([1.0, 0.25, 0.75, -0.5])
    batch = RolloutBatch(**{**_fields(), "rewards": shaped, "outcome_rewards": outcome})
    assert core.successful(batch, 0.5).tolist() == [True, True, False, False]
    assert core.successful(batch.replace(outcome_rewards=None), 0.5).tolist() == [
        True,
        False,
        True,
        False,
    ]


@given(n_groups=st.integers(0, 40), minibatches=st.integers(1, 12))
def test_split_groups_even(n_groups, minibatches):
    """The minibatches cover every group once, in order, with sizes that differ by at most
    one; there are ``min(minibatches, n_groups)`` of them and none is empty."""
    parts = batch_stages.split_groups(n_groups, minibatches)
    assert [g for p in parts for g in p] == list(range(n_groups))
    assert len(parts) == min(minibatches, n_groups)
    sizes = [len(p) for p in parts]
    assert all(size >= 1 for size in sizes)
    if sizes:
        assert max(sizes) - min(sizes) <= 1


def test_split_groups_hand_computed():
    """7 groups in 2 minibatches: 3 and 4 (not 3, 3 and 1); 8 in 4: 2 each; 3 in 4: 1 each."""
    assert [len(p) for p in batch_stages.split_groups(7, 2)] == [3, 4]
    assert [len(p) for p in batch_stages.split_groups(8, 4)] == [2, 2, 2, 2]
    assert [len(p) for p in batch_stages.split_groups(3, 4)] == [1, 1, 1]


@pytest.mark.parametrize("scale", [45.0, 1.0, 1e-3])
def test_sequence_token_ratio_value_is_exactly_s_i(scale):
    """The GSPO-token ratio's value is exactly ``exp(log s_i)`` on every response token, also
    at large ``|logp|`` (≈ 45, where float32's spacing is 3.8e-6): its exponent is
    ``sg[log s_i] + (logp − sg[logp])`` and the bracket is exactly 0. Evaluating
    ``log s_i + logp − sg[logp]`` left to right rounds ``log s_i + logp`` to that spacing."""
    gen = torch.Generator().manual_seed(0)
    logp_old = -scale * (1 + torch.rand(6, 5, generator=gen))
    logp = logp_old + 1e-3 * (2 * torch.rand(6, 5, generator=gen) - 1)
    mask = torch.ones(6, 5)
    mask[2, 3:] = 0
    s_i = torch.exp(core.sequence_log_ratio(logp, logp_old, mask))
    ratio = core.sequence_token_ratio(logp.requires_grad_(), logp_old, mask)
    expected = torch.where(mask.bool(), s_i[:, None].expand(6, 5), torch.ones(()))
    assert torch.equal(ratio.detach(), expected)


# ---------------------------------------------------------------------------------------------
# The spec's one reference loop for the group z-score.
# ---------------------------------------------------------------------------------------------


def test_reference_group_zscore_hand_computed():
    """Two groups of G = 4. Rewards [1, 0, 0, 1]: mean ½, Bessel variance 4·¼/3 = ⅓, so
    A = ±½ / (1/√3 + eps) (= ±√3/2 up to eps), and without the std A = ±½. Rewards [2, 2, 2, 2]:
    all equal, A = 0. Padding gets 0 either way."""
    mask = torch.ones(8, 3)
    mask[1, 1:] = 0.0
    mask[6, :] = 0.0
    batch = RolloutBatch(
        response_ids=torch.zeros(8, 3, dtype=torch.long), response_mask=mask,
        rewards=torch.tensor([1.0, 0.0, 0.0, 1.0, 2.0, 2.0, 2.0, 2.0]),
        logp_old=-torch.ones(8, 3), entropy_old=torch.ones(8, 3), group_size=4,
    )  # fmt: skip
    eps = 1e-6
    for scale_by_std, a in ((True, 0.5 / (3**-0.5 + eps)), (False, 0.5)):
        want = torch.tensor([a, -a, -a, a, 0.0, 0.0, 0.0, 0.0])[:, None] * mask
        got = core.reference_group_zscore(batch, eps, scale_by_std=scale_by_std)
        torch.testing.assert_close(got, want)


def test_the_group_zscore_loop_is_written_once():
    """Each reference loop is written once: an algorithm whose advantage is GRPO's group
    z-score returns ``core.reference_group_zscore``, and the loops left in the algorithm files
    (RLOO's leave-one-out baseline, GTPO's token rewards, ...) each differ. Two files may hold
    the same loop only when they are the same algorithm under two names: their vectorised
    ``advantages`` is the same code too (docs/adding_an_algorithm.md re-derives RLOO as
    ``my_rloo``, and its page's loop is RLOO's, by design); a loop copied into an algorithm
    whose advantage differs still fails here."""
    import ast
    import inspect
    import textwrap

    from refimpl import algorithms

    def body(fn) -> str:  # the function's statements, without its docstring
        tree = ast.parse(textwrap.dedent(inspect.getsource(inspect.unwrap(fn))))
        statements = tree.body[0].body
        if statements and isinstance(statements[0], ast.Expr):
            statements = statements[1:]
        return ast.dump(ast.Module(body=statements, type_ignores=[]))

    loops, shared = {}, []
    for name in algorithms.NAMES:
        fn = inspect.unwrap(algorithms.get(name).reference_advantages)
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        if any(isinstance(node, ast.For) for node in ast.walk(tree)):
            loops.setdefault(body(fn), []).append(name)
        else:
            assert "core.reference_group_zscore(" in inspect.getsource(fn), name
            shared.append(name)
    copies = [
        names
        for names in loops.values()
        if len({body(algorithms.get(n).advantages) for n in names}) > 1
    ]
    assert copies == []
    assert len(loops) >= 3  # RLOO's, GTPO's, GRPO-S's, ...: the check above compares loops
    assert "grpo" in shared and "dapo" in shared
