"""The credit oracle, specified like an algorithm (refimpl/diagnostics/credit_oracle.py).

A tiny policy (1 layer, d = 32, a 150-step warm start on one-digit addition) answers with a
3-token budget, so every continuation of every prefix can be enumerated (23³ ≈ 12k leaves) and
``V`` computed exactly (``reference_values``). The Monte-Carlo estimates must agree with it
within their standard error; the true advantages must telescope; the values must lie in
[0, 1] with the outcome at the end; the estimates must be seeded. Two slips each test must
catch (``scripts/dev/break_on_purpose.py`` plants them): an off-by-one between the value before
and after a token, and rollouts at another temperature than the policy's.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from refimpl.diagnostics.credit_oracle import reference_values, token_values
from tests.tiny import enumerable_batch
from toy_envs import TOKENIZER

BUDGET = 3
TEMPERATURE = 0.7
#: Agreement within this many standard errors of the exact value (one draw per prefix; about
#: a dozen prefixes per test, so a 4.5-s.e. miss has probability ~1e-4 under the truth).
Z = 4.5


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A policy that solves some one-digit additions (greedy ≈ 0.3), the task, a batch of
    3 prompts × 2 completions sampled at ``TEMPERATURE`` within ``BUDGET``, its outcomes."""
    return enumerable_batch(Path(tmp_path_factory.mktemp("ws")), BUDGET, TEMPERATURE)


def _values(tiny, rollouts=4096, seed=0, temperature=TEMPERATURE):
    model, task, problems, samples, outcome = tiny
    return token_values(model, task, problems, samples, outcome, rollouts=rollouts,
                        max_new_tokens=BUDGET, temperature=temperature, seed=seed)  # fmt: skip


def _exact(tiny, i: int, prefix_len: int, temperature=TEMPERATURE) -> float:
    model, task, problems, samples, _ = tiny
    tokens = samples.responses()[i]
    return reference_values(model, task, problems[i // 2], tokens[:prefix_len],
                            max_new_tokens=BUDGET, temperature=temperature)  # fmt: skip


def test_estimates_agree_with_exact_enumeration(tiny):
    """``V̂(q, o_<t)`` and ``V̂(q, o_≤t)`` of every token lie within 4.5 s.e. of the exact
    values of *those* prefixes at the policy's temperature (Eqs. 1, 3): the value before a
    token is its prefix's, the value after it the prefix that includes it."""
    values = _values(tiny)
    K = values.rollouts
    checked = 0
    for i, tokens in enumerate(tiny[3].responses()):
        for t in range(len(tokens)):
            before = _exact(tiny, i, t)
            se = math.sqrt(before * (1 - before) / K)
            assert abs(float(values.value_before[i, t]) - before) <= Z * se + 1e-12, (i, t)
            after = _exact(tiny, i, t + 1)
            se = math.sqrt(after * (1 - after) / K)
            assert abs(float(values.value_after[i, t]) - after) <= Z * se + 1e-12, (i, t)
            checked += 1
    assert checked >= 6


def test_the_check_has_power_against_the_slips(tiny):
    """The exact values the test above compares with move by more than its tolerance under
    both slips, so each would fail it: the same prefixes at temperature 1 instead of 0.7,
    and the value one token off (the prefix with the token instead of without it)."""
    K = 4096
    moved_by_temperature, moved_by_offset = 0, 0
    for i, tokens in enumerate(tiny[3].responses()):
        for t in range(len(tokens)):
            v = _exact(tiny, i, t)
            se = math.sqrt(v * (1 - v) / K)
            if abs(_exact(tiny, i, t, temperature=1.0) - v) > 2 * Z * se:
                moved_by_temperature += 1
            if abs(_exact(tiny, i, t + 1) - v) > 2 * Z * se:
                moved_by_offset += 1
    assert moved_by_temperature >= 2 and moved_by_offset >= 2


def test_true_advantages_telescope_to_outcome_minus_prompt_value(tiny):
    """Σ_t A*[i,t] = 1[success_i] − V̂(q_i) for every completion (Eq. 4), exactly: one
    estimate per prefix is shared by the token before and the token after it."""
    values = _values(tiny, rollouts=64)
    total = values.true_advantage.sum(dim=1)
    expected = values.success.double() - values.value_prompt
    assert torch.equal(total, expected)
    # The shared estimate: the value after token t is the value before token t + 1.
    lengths = values.mask.sum(1)
    for i, L in enumerate(lengths.tolist()):
        for t in range(L - 1):
            assert values.value_after[i, t] == values.value_before[i, t + 1]


def test_values_are_probabilities_and_a_finished_completion_is_its_outcome(tiny):
    """Every V̂ lies in [0, 1]; after the last token (``<eos>``, or the budget spent) V is the
    outcome, with s.e. 0; the completions of one prompt share V̂(q); padding is 0."""
    values = _values(tiny, rollouts=64)
    m = values.mask
    for v in (values.value_before, values.value_after):
        assert bool(((v >= 0) & (v <= 1)).all())
        assert bool((v[~m] == 0).all())
    lengths = m.sum(1)
    rows = torch.arange(len(lengths))
    last_after = values.value_after[rows, lengths - 1]
    assert torch.equal(last_after, values.success.double())
    assert bool((values.se_after[rows, lengths - 1] == 0).all())
    assert torch.equal(values.value_prompt[0::2], values.value_prompt[1::2])
    finished = [i for i, r in enumerate(tiny[3].responses()) if r[-1] == TOKENIZER.eos_id]
    assert finished, "the batch should hold completions that emitted <eos>"


def test_standard_errors_are_binomial(tiny):
    """s.e. = √(V̂(1 − V̂)/K) for every estimated value (Eq. 3)."""
    values = _values(tiny, rollouts=64)
    m = values.mask
    v = values.value_before[m]
    assert torch.allclose(values.se_before[m], torch.sqrt(v * (1 - v) / 64), atol=0, rtol=1e-12)


def test_estimates_are_seeded_and_repeatable(tiny):
    """The same batch and seed give the same estimates; another seed other ones."""
    a, b, c = _values(tiny, 256, seed=3), _values(tiny, 256, seed=3), _values(tiny, 256, seed=4)
    assert torch.equal(a.value_before, b.value_before)
    assert torch.equal(a.half_advantages, b.half_advantages)
    assert not torch.equal(a.value_before, c.value_before)


def test_split_halves_average_to_the_whole(tiny):
    """The two half-estimates of ``A*`` average to ``A*`` (equal halves of the K rollouts)."""
    values = _values(tiny, rollouts=64)
    assert torch.allclose(values.half_advantages.mean(0), values.true_advantage, atol=1e-12)


def test_bad_arguments_are_refused(tiny):
    model, task, problems, samples, outcome = tiny
    with pytest.raises(ValueError, match="rollouts"):
        token_values(model, task, problems, samples, outcome, rollouts=1, max_new_tokens=BUDGET)
    with pytest.raises(ValueError, match="problems"):
        token_values(model, task, problems[:2], samples, outcome, max_new_tokens=BUDGET)
    with pytest.raises(ValueError, match="outcome"):
        token_values(model, task, problems, samples, outcome[:3], max_new_tokens=BUDGET)
