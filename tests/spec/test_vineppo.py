"""VinePPO's own invariants (Kazemnejad et al., arXiv 2410.01679). One invariant per test.

The advantages are the credit oracle's Monte-Carlo values of π_old, cut into steps: each test
recomputes what it expects from the definitions (the steps from where the values are, the
exact values by enumeration on a tiny policy), independently of the code under test. The
slips each test is there to catch (planted by hand, see the report of issue 46): values from
the policy after an optimizer step, K continuations sharing one random draw, a step boundary
moved by one token.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given

from refimpl import loop
from refimpl.algorithms import vineppo
from refimpl.contract import ValueRequest
from refimpl.sampling import monte_carlo_values
from refimpl.sampling.monte_carlo_values import step_starts, token_values, training_values
from refimpl.settings.warmstart_config import ModelSize
from tests.spec import worked
from tests.spec.strategies import rollout_batches
from tests.tiny import enumerable_batch
from toy_envs import TOKENIZER

pytestmark = pytest.mark.filterwarnings("ignore:empty batch")

NAN = float("nan")


def _steps(values_row: list[float]) -> list[int]:
    """The step starts of a row: the positions whose value is not NaN."""
    return [t for t, v in enumerate(values_row) if not math.isnan(v)]


@given(batch=rollout_batches())
def test_every_token_of_a_step_carries_the_step_advantage(batch):
    """Inside a step (from one valued prefix to the next) every token has the same advantage,
    V̂(s_{k+1}) − V̂(s_k), with V(s_end) = 1[r ≥ 0.5] after the last step; and the step
    advantages of a completion (one per step) sum to 1[success] − V̂(q)."""
    cfg = vineppo.Config()
    A = vineppo.advantages(batch, cfg).double()
    success = (batch.rewards >= cfg.success_threshold).double()
    for i in range(batch.batch_size):
        L = int(batch.response_mask[i].sum())
        if L == 0:
            continue
        values = batch.token_values[i, :L].tolist()
        starts = _steps(values)
        ends = starts[1:] + [L]
        total = 0.0
        for s, e in zip(starts, ends):
            after = values[e] if e < L else float(success[i])
            step_advantage = after - values[s]
            assert torch.allclose(A[i, s:e], torch.full((e - s,), step_advantage, dtype=A.dtype),
                                  atol=1e-6)  # fmt: skip
            total += float(A[i, s])
        assert total == pytest.approx(float(success[i]) - values[0], abs=1e-5)


@given(batch=rollout_batches())
def test_token_boundaries_give_the_oracle_true_advantage(batch):
    """With a value before every token (boundaries="token") the advantage of token t is the
    oracle's A*[t] = V̂(q, o_≤t) − V̂(q, o_<t) (Eq. 2 of monte_carlo_values.py), the value after
    the last token being the outcome."""
    V = batch.token_values.nan_to_num(0.25)  # every prefix valued
    batch = batch.replace(token_values=V)
    cfg = vineppo.Config(boundaries="token")
    A = vineppo.advantages(batch, cfg).double()
    for i in range(batch.batch_size):
        L = int(batch.response_mask[i].sum())
        outcome = 1.0 if float(batch.rewards[i]) >= 0.5 else 0.0
        after = [float(V[i, t + 1]) for t in range(L - 1)] + [outcome] if L else []
        for t in range(L):
            assert float(A[i, t]) == pytest.approx(after[t] - float(V[i, t]), abs=1e-6)


@given(batch=rollout_batches())
def test_whitened_advantages_are_a_zscore_of_the_values(batch):
    """whiten_advantages=True (the authors' trainer): the advantages are an affine image of
    the unwhitened ones, mean 0 over the batch's response tokens, std 1 (unless degenerate)."""
    m = batch.response_mask.bool()
    raw = vineppo.advantages(batch, vineppo.Config()).double()[m]
    white = vineppo.advantages(batch, vineppo.Config(whiten_advantages=True)).double()[m]
    if raw.numel() < 2 or float(raw.max() - raw.min()) < 1e-9:
        assert bool((white == 0).all())
        return
    assert float(white.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(white.std()) == pytest.approx(1.0, abs=1e-4)
    slope = float(
        ((white - white.mean()) * (raw - raw.mean())).sum() / ((raw - raw.mean()) ** 2).sum()
    )
    assert torch.allclose(white, (raw - raw.mean()) * slope, atol=1e-4)


def test_values_needed_asks_for_k_continuations_at_the_step_starts():
    """The request the loops answer: the paper's K = 9 at the step starts (the characters
    that close a toy step), or at every prefix with boundaries="token"; every other
    algorithm asks for none."""
    from refimpl import algorithms

    assert vineppo.Config().values_needed() == ValueRequest(rollouts=9, step_ends=",#+-*/")
    assert vineppo.Config(boundaries="token").values_needed() == ValueRequest(9, None)
    for name in algorithms.NAMES:
        if name != "vineppo":
            assert algorithms.get(name).Config().values_needed() is None
    with pytest.raises(ValueError, match="boundaries"):
        vineppo.Config(boundaries="line")
    with pytest.raises(ValueError, match="rollouts"):
        vineppo.Config(rollouts=1)


def test_step_starts_of_the_toy_formats():
    """A step ends *with* its closing token: chain "8,6,13#13<eos>" is "8," "6," "13#"
    "13<eos>" (starts 0, 2, 4, 7); countdown "3*5+7<eos>" is "3*" "5+" "7<eos>" (0, 2, 4);
    addition "46<eos>" is one step (0). A boundary one token early or late fails this."""
    ends = TOKENIZER.encode(vineppo.STEP_ENDS)

    def starts(text: str) -> list[int]:
        return step_starts(TOKENIZER.encode(text) + [TOKENIZER.eos_id], ends)

    assert starts("8,6,13#13") == [0, 2, 4, 7]
    assert starts("3*5+7") == [0, 2, 4]
    assert starts("46") == [0]


def test_requires_the_values():
    """A batch without token_values is refused, naming the field (the loops set it)."""
    batch, _ = worked.batch()
    with pytest.raises(ValueError, match="token_values"):
        vineppo.advantages(batch.replace(token_values=None), vineppo.Config())
    bad = batch.token_values.clone()
    bad[0, 0] = NAN  # V̂(q) missing
    with pytest.raises(ValueError, match="token_values"):
        batch.replace(token_values=bad)


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/vineppo.md`` (group and values
    in ``tests/spec/worked.py``), each derived by hand on the page."""
    batch, logp = worked.batch()
    cfg = vineppo.Config()
    adv = vineppo.advantages(batch, cfg)
    expected_adv = worked.rows([[0.25, 0.25], [-0.25, -0.25, 0.75, 0.75], [0.25, -0.75, -0.75],
                                [-0.5]])  # fmt: skip
    torch.testing.assert_close(adv, expected_adv, atol=1e-6, rtol=0)
    total, grad, metrics = worked.loss_and_grad(vineppo, cfg, batch, logp)
    assert total == pytest.approx(0.0300044, abs=1e-6)
    expected = worked.rows(
        [
            [-0.0274977, 0.0000050],
            [0.0250050, 0.0250000, -0.0750000, -0.0750000],
            [-0.0225028, -0.0000083, 0.0750000],
            [0.0750083],
        ]
    )
    torch.testing.assert_close(grad, expected, atol=1e-6, rtol=0)
    assert metrics["clip_frac_high"] == pytest.approx(1 / 10)  # o1's second token
    assert metrics["clip_frac_low"] == pytest.approx(1 / 10)  # o3's second token


# ---------------------------------------------------------------------------------------------
# Against the credit oracle, on a tiny policy whose values can be enumerated.
# ---------------------------------------------------------------------------------------------

BUDGET = 3
TEMPERATURE = 0.7
Z = 4.5  # as tests/test_credit_oracle.py: a 4.5-s.e. miss has probability ~1e-4 per check


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A one-digit-addition policy (1 layer, d = 32), 3 prompts × 2 completions within a
    3-token budget, their outcomes: every continuation can be enumerated."""
    return enumerable_batch(Path(tmp_path_factory.mktemp("ws")), BUDGET, TEMPERATURE)


def _vineppo_advantages(tiny, request: ValueRequest, seed: int = 3, step: int = 0):
    model, task, problems, samples, outcome = tiny
    values = training_values(
        model, task, problems, samples, outcome, request, max_new_tokens=BUDGET,
        temperature=TEMPERATURE, top_k=None, top_p=None, success_threshold=0.5, seed=seed,
        step=step,
    ).value_before  # fmt: skip
    batch = samples.to_rollout_batch(outcome, 2).replace(token_values=values)
    cfg = vineppo.Config(rollouts=request.rollouts,
                         boundaries="token" if request.step_ends is None else "step")  # fmt: skip
    return vineppo.advantages(batch, cfg), values


def test_advantages_equal_the_oracle_true_advantage_of_refimpl_credit(tiny):
    """On the same batch and seed, the advantages the loops train on (training_values, then
    advantages) equal ``A*`` of the oracle as ``refimpl credit`` calls it (token_values),
    with the seed the training path derives for that step: one oracle, not two."""
    model, task, problems, samples, outcome = tiny
    adv, _ = _vineppo_advantages(tiny, ValueRequest(rollouts=16), seed=3, step=2)
    step_seed = int(np.random.default_rng([3, 2, monte_carlo_values.ORACLE_STREAM]).integers(2**62))
    values = token_values(model, task, problems, samples, outcome, rollouts=16,
                          max_new_tokens=BUDGET, temperature=TEMPERATURE, seed=step_seed)  # fmt: skip
    torch.testing.assert_close(adv, values.true_advantage.float(), rtol=0, atol=0)


def test_advantages_agree_with_the_exact_values_within_their_se(tiny):
    """With every prefix valued by K = 4096 continuations, A[i,t] lies within 4.5 s.e. of the
    exact V(q, o_≤t) − V(q, o_<t) (``reference_values``, by enumeration; s.e. the binomial
    one of each estimated end, the outcome having none). K continuations that shared one
    random draw would give V̂ ∈ {0, 1} and miss."""
    model, task, problems, samples, _ = tiny
    K = 4096
    adv, _ = _vineppo_advantages(tiny, ValueRequest(rollouts=K))

    def exact(i, n):
        tokens = samples.responses()[i]
        return monte_carlo_values.reference_values(
            model,
            task,
            problems[i // 2],
            tokens[:n],
            max_new_tokens=BUDGET,
            temperature=TEMPERATURE,
        )

    checked = 0
    for i, tokens in enumerate(samples.responses()):
        for t in range(len(tokens)):
            before, after = exact(i, t), exact(i, t + 1)
            var = before * (1 - before) / K + (
                after * (1 - after) / K if t + 1 < len(tokens) else 0
            )
            assert abs(float(adv[i, t]) - (after - before)) <= Z * math.sqrt(var) + 1e-9, (i, t)
            checked += 1
    assert checked >= 6


def test_only_the_step_starts_are_valued(tiny):
    """With step boundaries the oracle values exactly the prefixes at t = 0 and right after a
    closing token (found here from the decoded text), NaN elsewhere; fewer prefixes than with
    every token."""
    _, _, _, samples, _ = tiny
    closing = "135"  # digits close steps here, so the addition answers have several steps
    _, values = _vineppo_advantages(tiny, ValueRequest(rollouts=4, step_ends=closing))
    for i, tokens in enumerate(samples.responses()):
        text = [TOKENIZER.decode([tok]) for tok in tokens]
        expected = [t for t in range(len(tokens)) if t == 0 or text[t - 1] in closing]
        assert _steps(values[i, : len(tokens)].tolist()) == expected


def _fingerprinting(fingerprints: dict[str, list[float]]):
    """``recording(kind, real)``: ``real`` (a sampler) that first appends the sum of its
    policy's weights to ``fingerprints[kind]``, so a test sees which weights sampled what."""

    def recording(kind, real):
        def sample(policy, *args, **kwargs):
            fingerprints[kind].append(
                float(sum(p.detach().double().sum() for p in policy.parameters()))
            )
            return real(policy, *args, **kwargs)

        return sample

    return recording


def test_values_come_from_the_rollout_policy(monkeypatch):
    """The loop values the prefixes with π_old: every continuation the oracle samples in a
    step is drawn from the very weights that sampled that step's completions, though the
    step then takes two optimizer steps (two minibatches). Valuing after an update fails.
    An untrained policy solves nothing, and with every reward 0 nothing moves: the verifier is
    replaced by one that passes the completions of even length, so the weights must move."""
    from toy_envs import get_task

    task_type = type(get_task("chain", num_ops=1))
    monkeypatch.setattr(task_type, "score",
                        lambda self, answered, texts: [float(len(t) % 2 == 0) for t in texts])  # fmt: skip
    torch.manual_seed(0)
    model = ModelSize(n_layer=1, n_embd=32, n_head=2).build()
    fingerprints: dict[str, list[float]] = {"rollout": [], "oracle": []}
    recording = _fingerprinting(fingerprints)
    monkeypatch.setattr(loop, "sample_groups", recording("rollout", loop.sample_groups))
    monkeypatch.setattr(monte_carlo_values, "sample_groups",
                        recording("oracle", monte_carlo_values.sample_groups))  # fmt: skip
    cfg = loop.LoopConfig(
        algo="vineppo", algo_cfg=dataclasses.replace(vineppo.Config(), rollouts=2),
        task="chain", task_knobs={"num_ops": 1}, steps=2, prompts_per_step=2, group_size=2,
        minibatches=2, lr=1e-2, max_new_tokens=6,
    )  # fmt: skip
    loop.train(model, cfg, log=lambda *_: None)
    rollouts, oracle = fingerprints["rollout"], fingerprints["oracle"]
    assert len(rollouts) == 2 and rollouts[0] != rollouts[1]  # the model moved in between
    assert oracle and set(oracle) <= set(rollouts)
    assert oracle[0] == rollouts[0] and oracle[-1] == rollouts[1]


def test_the_trainer_values_with_the_rollout_policy_and_logs_the_cost(tmp_path, monkeypatch):
    """The Trainer (what ``refimpl train`` and the benchmarks run) values the prefixes with
    π_old as ``loop.py`` does: the oracle's continuations of a step are drawn from the weights
    that sampled that step's completions, though the step takes two optimizer steps; and each
    step's metrics say what the values cost (prefixes valued, tokens their continuations
    sampled). Valuing after an update fails the first half; not logging, the second."""
    from refimpl import train as train_module
    from refimpl.train import Trainer
    from tests.tiny import tiny_train

    fingerprints: dict[str, list[float]] = {"rollout": [], "oracle": []}
    recording = _fingerprinting(fingerprints)
    monkeypatch.setattr(
        train_module, "sample_groups", recording("rollout", train_module.sample_groups)
    )
    monkeypatch.setattr(monte_carlo_values, "sample_groups",
                        recording("oracle", monte_carlo_values.sample_groups))  # fmt: skip
    cfg = tiny_train(tmp_path, algo="vineppo", algo_args=("rollouts=2",), steps=2,
                     name="vineppo-pi-old", eval_every=1000)  # fmt: skip
    trainer = Trainer(cfg, observers=[])
    metrics = [trainer.train_step() for _ in range(2)]
    rollouts, oracle = fingerprints["rollout"], fingerprints["oracle"]
    assert len(rollouts) >= 2 and rollouts[0] != rollouts[-1]  # the model moved in between
    assert oracle and set(oracle) <= set(rollouts)
    assert oracle[0] == rollouts[0] and oracle[-1] == rollouts[-1]
    for m in metrics:
        assert m["value_prefixes"] > 0 and m["value_sampled_tokens"] >= m["value_prefixes"]
