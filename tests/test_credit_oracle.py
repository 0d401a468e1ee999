"""The credit oracle, specified like an algorithm (refimpl/sampling/monte_carlo_values.py).

A tiny policy (1 layer, d = 32, a 150-step warm start on one-digit addition) answers with a
3-token budget, so every continuation of every prefix can be enumerated (23³ ≈ 12k leaves) and
``V`` computed exactly (``reference_values``). The Monte-Carlo estimates must agree with it
within their standard error; the true advantages must telescope; the values must lie in
[0, 1] with the outcome at the end; the estimates must be seeded. The slips the tests catch
(``scripts/dev/break_on_purpose.py`` plants each, one at a time): an off-by-one between the
value before and after a token; rollouts at another temperature, top-k or top-p than the run's
(through ``token_values`` or ``training_values``); a finished completion valued otherwise than
by ``1[r ≥ threshold]``, or continued; and rollouts of different prefixes, chunks or training
steps driven by the same random stream.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from refimpl.sampling.monte_carlo_values import reference_values, token_values, training_values
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


# ---------------------------------------------------------------------------------------------
# Three families of slips the tests above let through (issue 46, § 0): the rollouts' sampling
# settings where they differ from the defaults, the value of a finished completion, and the
# independence of the rollouts across prefixes. Each test below names the slips it catches;
# scripts/dev/break_on_purpose.py plants them.
# ---------------------------------------------------------------------------------------------

#: A sampling distribution where every setting matters: at one prefix of the tiny policy the
#: exact value moves by more than 10 s.e. (K = 4096) when any one of the three is dropped
#: (the test checks that it does, so the agreement test has power against each slip).
SETTINGS = {"temperature": 1.3, "top_k": 6, "top_p": 0.6}
DEFAULTS = {"temperature": 1.0, "top_k": None, "top_p": None}


@pytest.fixture(scope="module")
def tiny_settings(tiny):
    """The tiny policy's first prompt, 2 completions sampled at ``SETTINGS``."""
    from refimpl.sampling.groups import sample_groups, seeded_generator

    model, task, problems, _, _ = tiny
    problems = problems[:1]
    samples = sample_groups(
        model, [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems], group_size=2,
        max_new_tokens=BUDGET, eos_id=TOKENIZER.eos_id, pad_id=TOKENIZER.pad_id,
        generator=seeded_generator(0, 2), **SETTINGS,
    )  # fmt: skip
    texts = [TOKENIZER.decode(r.tolist()) for r in samples.response_ids]
    outcome = torch.tensor(task.score(problems * 2, texts))
    return model, task, problems, samples, outcome


def _exact_prefix(model, task, problem, prefix, settings) -> float:
    return reference_values(model, task, problem, prefix, max_new_tokens=BUDGET, **settings)


def test_rollouts_use_every_sampling_setting_of_the_run(tiny_settings):
    """At temperature 1.3 with top-k 6 and top-p 0.6, ``V̂`` from ``token_values`` and from
    ``training_values`` (what a training loop gets) lies within 4.5 s.e. of the exact value
    *under those three settings* at every prefix (Eq. 1: ``V`` is the value of the policy as
    the run samples it, truncation included). The exact values move by more than twice the
    tolerance at some prefix when any one setting is left at its default, so the check has
    power against each slip. Catches: the rollouts (either entry point) drawn with
    ``top_k``, ``top_p`` or the temperature left at its default instead of the run's."""
    from refimpl.contract import ValueRequest

    model, task, problems, samples, outcome = tiny_settings
    K = 4096
    estimates = {
        "token_values": token_values(model, task, problems, samples, outcome, rollouts=K,
                                     max_new_tokens=BUDGET, seed=0, **SETTINGS),
        "training_values": training_values(model, task, problems, samples, outcome,
                                           ValueRequest(rollouts=K), max_new_tokens=BUDGET,
                                           success_threshold=0.5, seed=0, step=0, **SETTINGS),
    }  # fmt: skip
    cache: dict = {}

    def exact(prefix, settings):
        key = (tuple(prefix), tuple(sorted(settings.items())))
        if key not in cache:
            cache[key] = _exact_prefix(model, task, problems[0], prefix, settings)
        return cache[key]

    power = dict.fromkeys(SETTINGS, 0)
    checked = 0
    for i, tokens in enumerate(samples.responses()):
        for t in range(len(tokens)):
            v = exact(tokens[:t], SETTINGS)
            se = math.sqrt(v * (1 - v) / K)
            for name, values in estimates.items():
                assert abs(float(values.value_before[i, t]) - v) <= Z * se + 1e-12, (name, i, t)
            checked += 1
            if 0 < v < 1 and t > 0:  # the cheap prefixes (the empty one enumerates 23³ leaves)
                for name in SETTINGS:
                    dropped = {**SETTINGS, name: DEFAULTS[name]}
                    power[name] += abs(exact(tokens[:t], dropped) - v) > 2 * Z * se
    assert checked >= 4
    assert all(n >= 1 for n in power.values()), power


def test_a_finished_completion_is_its_outcome_and_is_never_continued(tiny, monkeypatch):
    """The value after the last token is exactly ``1[r ≥ success_threshold]`` of the reward
    the caller passed (a reward equal to the threshold succeeds; one between 0 and the
    threshold fails), with s.e. 0, and no rollout is sampled from a finished prefix: every
    prefix the sampler is asked to continue is a proper prefix (shorter than its completion,
    so never ending in ``<eos>`` nor spending the whole budget), and each proper prefix is
    continued exactly once. Catches: the threshold applied strictly (``r > thr``), the reward
    itself taken as the outcome (a partial reward below the threshold counted as a success),
    and rollouts sampled after the last token."""
    from refimpl.sampling import monte_carlo_values

    model, task, problems, samples, _ = tiny
    rows = samples.responses()
    # Rewards at, above, below the threshold, and 0 (the oracle does not re-score the
    # completions: their outcome is what the caller passed).
    reward = torch.tensor([0.6, 1.0, 0.3, 0.0, 0.59, 0.6])
    asked: list[tuple[tuple[int, ...], int]] = []
    real = monte_carlo_values.sample_groups

    def recording(model_, prompts, **kw):
        asked.extend((tuple(p), kw["max_new_tokens"]) for p in prompts)
        return real(model_, prompts, **kw)

    monkeypatch.setattr(monte_carlo_values, "sample_groups", recording)
    values = token_values(model, task, problems, samples, reward, rollouts=16,
                          max_new_tokens=BUDGET, temperature=TEMPERATURE,
                          success_threshold=0.6, seed=0)  # fmt: skip
    lengths = values.mask.sum(1)
    last = torch.arange(len(rows)), lengths - 1
    assert values.success.tolist() == [True, True, False, False, False, True]
    assert values.value_after[last].tolist() == [1.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    assert values.se_after[last].tolist() == [0.0] * len(rows)
    prompts = [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems]
    proper = {(tuple(prompts[i // 2] + r[:t]), BUDGET - t) for i, r in enumerate(rows)
              for t in range(len(r))}  # fmt: skip
    assert sorted(set(asked)) == sorted(proper)
    assert len(asked) == len(proper)  # each once (shared prefixes of one prompt included)
    assert all(budget >= 1 and p[-1] != TOKENIZER.eos_id for p, budget in asked)


def test_rollouts_of_different_prefixes_share_no_random_draws(tiny, monkeypatch):
    """The estimates at two prefixes are independent (the standard error of Eq. 3, and of
    ``A*`` as a difference of two estimates, assumes it): every sampling call of the oracle
    starts from its own random state, across prefix lengths, across the chunks of one length,
    and across the training steps of ``training_values``. Catches: every prefix (or every
    chunk, or every step) reseeded with the same stream, so that two prefixes' rollouts are
    driven by the same uniform draws."""
    from refimpl.contract import ValueRequest
    from refimpl.sampling import monte_carlo_values

    model, task, problems, samples, outcome = tiny
    states: list[bytes] = []
    real = monte_carlo_values.sample_groups

    def recording(model_, prompts, **kw):
        states.append(bytes(kw["generator"].get_state().numpy()))
        return real(model_, prompts, **kw)

    monkeypatch.setattr(monte_carlo_values, "sample_groups", recording)
    # max_rows = K: one prefix per sampling call, so the chunks of one length are many.
    token_values(model, task, problems, samples, outcome, rollouts=2, max_new_tokens=BUDGET,
                 temperature=TEMPERATURE, seed=0, max_rows=2)  # fmt: skip
    n_prefixes = len(states)
    assert n_prefixes >= 6
    for step in (0, 1):
        training_values(model, task, problems, samples, outcome, ValueRequest(rollouts=2),
                        max_new_tokens=BUDGET, temperature=TEMPERATURE, top_k=None, top_p=None,
                        success_threshold=0.5, seed=0, step=step)  # fmt: skip
    assert len(states) > n_prefixes
    assert len(set(states)) == len(states), "two sampling calls start from the same state"


def test_continuations_are_independent_across_and_within_prefixes(tiny):
    """The same prefix valued twice, as two keys in two sampling calls (two prompts that are
    the same problem): the ``k``-th continuations of the two agree no more than chance, i.e.
    the correlation of their win indicators over ``k`` is within 4.5/√K of 0, and so is the
    correlation of neighbouring continuations ``k``, ``k + 1`` of one prefix. With one stream
    for both calls the two would win and lose together (r = 1). Catches: every chunk of a
    prefix length reseeded with the same stream; the K continuations of one prefix drawn from
    one shared draw."""
    from refimpl.sampling.monte_carlo_values import toy_continuations

    model, task, problems, samples, _ = tiny
    K = 4096
    prefix = tuple(samples.responses()[0][:1])
    continue_prefixes = toy_continuations(
        model, task, [problems[0], problems[0]], rollouts=K, max_new_tokens=BUDGET,
        sampling={"temperature": TEMPERATURE}, success_threshold=0.5, seed=0, max_rows=K,
    )  # fmt: skip
    wins, _ = continue_prefixes([(0, prefix), (1, prefix)], len(prefix))
    a, b = wins.astype(float)
    assert 0.05 < a.mean() < 0.95 and 0.05 < b.mean() < 0.95  # both vary: r is defined
    bound = Z / math.sqrt(K)
    assert abs(np.corrcoef(a, b)[0, 1]) < bound
    assert abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < bound


def test_the_oracle_names_a_prefix_or_a_position_out_of_range():
    """Issue 61, traceback 8: ``reference_values(…, prefix=[10**6])`` and ``prefix=[-3]``
    raised torch's ``IndexError: index out of range in self``, and ``estimate_values(…,
    positions=[[-1], [0]])`` "negative dimensions are not allowed": neither named the
    argument. Each is a ValueError naming it, before the model or a continuation runs."""
    from refimpl.sampling.monte_carlo_values import estimate_values
    from toy_envs import get_task

    task = get_task("addition", digits=1)
    problem = task.sample(1, np.random.default_rng(0))[0]
    for prefix in ([10**6], [-3], [1, TOKENIZER.vocab_size], [1.5], "12"):
        with pytest.raises(ValueError, match=r"^prefix: expected a sequence of token ids in"):
            reference_values(None, task, problem, prefix, max_new_tokens=2)

    def never(keys, t):
        raise AssertionError(f"a continuation ran for positions t = {t}")

    rows = [[1, 2], [3]]
    for positions in ([[-1], [0]], [[0], [1]], [[0, 2], [0]], [[0.0], [0]], [[0]]):
        with pytest.raises(ValueError, match=r"^positions: expected"):
            estimate_values(rows, [0, 0], [True, False], 2, 2, never, positions=positions)


def test_a_stop_request_ends_the_oracle_before_its_next_sampling_call(tiny, monkeypatch):
    """Issue 61, late 5: the oracle's loop ran to its end whatever was asked (a step of
    ``rollouts=4096`` took hours). ``should_stop`` is asked before every sampling call: once
    it says yes, ``OracleStopped`` is raised and nothing more is sampled."""
    from refimpl.contract import ValueRequest
    from refimpl.sampling import monte_carlo_values

    model, task, problems, samples, outcome = tiny
    real, calls = monte_carlo_values.sample_groups, []

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(monte_carlo_values, "sample_groups", counting)
    for allowed in (0, 2):  # stop at once, and after two sampling calls
        calls.clear()
        with pytest.raises(monte_carlo_values.OracleStopped):
            training_values(model, task, problems, samples, outcome, ValueRequest(rollouts=2),
                            max_new_tokens=BUDGET, temperature=TEMPERATURE, top_k=None,
                            top_p=None, success_threshold=0.5, seed=0, step=0,
                            should_stop=lambda n=allowed: len(calls) >= n)  # fmt: skip
        assert len(calls) == allowed
