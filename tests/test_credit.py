"""The credit benchmark (refimpl/bench/credit*.py) and docs/credit.md's tables.

The effective credit of an algorithm is ``−∂L/∂logp`` at ``logp = logp_old``; for GRPO, DAPO
and GTPO it has a closed form (every ratio is 1, inside the clip: the on-policy gradient of
tests/spec/test_gradients.py), which autograd through ``algorithm_signals`` must give. The
metrics are checked on hand examples; the page's tables against the committed result files.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from refimpl import algorithms
from refimpl.bench import credit_records
from refimpl.bench.credit import CreditConfig
from refimpl.bench.credit_batch import algorithm_signals
from refimpl.bench.credit_metrics import blame_shares, first_wrong_token, within_completion
from refimpl.bench.stats import spearman
from refimpl.diagnostics.entropy_attribution import pearson
from refimpl.sampling.groups import Samples
from toy_envs import TOKENIZER, get_task
from toy_envs.tasks import Problem

ROOT = Path(__file__).resolve().parent.parent
G = 4


def _batch(seed: int = 0):
    """3 groups × G = 4: two of mixed outcomes, one all failed (dynamic sampling drops it);
    ragged lengths, random log-probs and entropies."""
    gen = torch.Generator().manual_seed(seed)
    B, T = 3 * G, 7
    lengths = torch.tensor([7, 3, 5, 6, 2, 7, 4, 7, 5, 5, 3, 6])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    samples = Samples(
        prompt_ids=torch.ones(B, 2, dtype=torch.long),
        prompt_mask=torch.ones(B, 2, dtype=torch.long),
        response_ids=torch.randint(3, 20, (B, T), generator=gen),
        response_mask=mask,
        logp_old=-torch.rand(B, T, generator=gen) * 3 * mask,
        entropy_old=torch.rand(B, T, generator=gen) * 2 * mask,
        truncated=torch.zeros(B, dtype=torch.bool),
        group_size=G,
    )
    outcome = torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0])
    return samples, outcome, T


def test_effective_credit_of_dapo_and_gtpo_is_the_advantage_over_the_token_count():
    """DAPO and GTPO (token-mean, no KL): ``c[i,t] = A[i,t] / Σm`` over the trained groups'
    tokens, 0 on the group dynamic sampling drops (v5 Eq. 5; DAPO Eq. 8)."""
    samples, outcome, T = _batch()
    for name in ("dapo", "gtpo"):
        s = algorithm_signals(name, samples, outcome, T)
        trained = s["trained"]
        assert trained.tolist() == [True] * 8 + [False] * 4
        tokens = samples.response_mask[trained].sum().double()
        expected = s["advantages"] / tokens
        assert torch.allclose(s["credit"], expected, atol=1e-9, rtol=1e-6)
        assert bool((s["credit"][~trained] == 0).all())
    # GTPO's advantages vary within a completion; DAPO's do not.
    gtpo = algorithm_signals("gtpo", samples, outcome, T)["advantages"]
    assert float(gtpo[0, :7].max() - gtpo[0, :7].min()) > 1e-3


def test_effective_credit_of_grpo_has_the_kl_and_the_length_normaliser():
    """GRPO (seq-mean-token-mean + β·k3 to the reference): ``c[i,t] = (A_i − β·(1 − e^Δ)) /
    (|o_i|·B')`` with ``Δ = logp_ref − logp_old`` (DeepSeekMath Eq. 3-4); with the reference
    equal to the rollout policy the KL pushes nothing."""
    samples, outcome, T = _batch(1)
    beta = algorithms.get("grpo").Config().kl_coef
    gen = torch.Generator().manual_seed(3)
    logp_ref = samples.logp_old + 0.3 * torch.randn(samples.logp_old.shape, generator=gen)
    s = algorithm_signals("grpo", samples, outcome, T, logp_ref=logp_ref)
    m = samples.response_mask.double()
    lengths = m.sum(1, keepdim=True)
    delta = (logp_ref - samples.logp_old).double()
    expected = (s["advantages"] - beta * (1 - torch.exp(delta))) / (lengths * m.shape[0]) * m
    assert torch.allclose(s["credit"], expected, atol=1e-9, rtol=1e-5)
    flat = algorithm_signals("grpo", samples, outcome, T, logp_ref=samples.logp_old)
    assert torch.allclose(flat["credit"], flat["advantages"] / (lengths * m.shape[0]) * m,
                          atol=1e-9, rtol=1e-5)  # fmt: skip


def test_correlations_by_hand():
    """Spearman's ρ is Pearson's r of the average ranks (ties share their mean rank)."""
    x = np.array([1.0, 2.0, 2.0, 3.0])
    y = np.array([1.0, 3.0, 2.0, 4.0])
    rx, ry = np.array([0, 1.5, 1.5, 3]), np.array([0, 2, 1, 3])
    cx, cy = rx - rx.mean(), ry - ry.mean()
    assert spearman(x, y) == pytest.approx((cx @ cy) / math.sqrt((cx @ cx) * (cy @ cy)))
    assert pearson(np.array([1.0, 2, 3]), np.array([2.0, 4, 6])) == pytest.approx(1.0)
    assert math.isnan(pearson(np.ones(3), np.arange(3.0)))


def test_a_constant_signal_carries_no_within_completion_credit():
    """A signal constant within every completion is reported as such, never as a number;
    a varying one gets its per-completion correlations averaged."""
    truth = np.array([[0.1, -0.5, 0.2, 0.0], [0.3, 0.1, -0.2, 0.4]])
    lengths = np.array([4, 3])
    const = within_completion(np.array([[2.0] * 4, [-1.0] * 4]), truth, lengths, [0, 1])
    assert const["no_within_credit"] and const["constant"] == 2 and const["pearson"]["n"] == 0
    varying = within_completion(truth * 3 + 1, truth, lengths, [0, 1])
    assert not varying["no_within_credit"]
    assert varying["pearson"]["mean"] == pytest.approx(1.0) and varying["pearson"]["n"] == 2


def test_blame_shares_by_hand():
    """Negative mass ``Σ max(−s, 0)`` = 1 + 3 + 1 = 5 on the row; the pivot (token 1) holds
    3/5, the prefix before it 1/5; a constant signal would put 1/4 on the pivot."""
    signal = np.array([[-1.0, -3.0, 0.5, -1.0]])
    b = blame_shares(signal, {0: 1}, np.array([4]))
    assert b["pivot"]["mean"] == pytest.approx(0.6)
    assert b["prefix"]["mean"] == pytest.approx(0.2)
    assert b["uniform_pivot"]["mean"] == pytest.approx(0.25)


def test_first_wrong_token_against_the_reference_scratchpad():
    """``3+5-2=`` has the one working ``8,6#6``; ``8,7#7`` leaves it at its third token."""
    chain = get_task("chain")
    problem = Problem(prompt="3+5-2=", answer=6, numbers=(3, 5, 2))
    reference = TOKENIZER.encode(chain.reference_solution(problem), add_eos=True)
    assert TOKENIZER.decode(reference) == "8,6#6"
    wrong = TOKENIZER.encode("8,7#7", add_eos=True)
    assert first_wrong_token(chain, problem, wrong) == 2
    assert first_wrong_token(chain, problem, reference) is None
    assert first_wrong_token(get_task("countdown"), problem, wrong) is None


def test_bad_flags_are_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "x.json"
    for changes, flag in (
        ({"rollouts": "3"}, "--rollouts"),
        ({"rollouts": "16,16"}, "--rollouts"),
        ({"algos": "grpo,nope"}, "nope"),
        ({"prompts": 0}, "--prompts"),
        ({"run": tmp_path}, "--run"),
    ):
        with pytest.raises(ValueError, match=flag):
            CreditConfig(out=out, **changes).check()
    out.write_text("{}")
    with pytest.raises(ValueError, match="exists"):
        CreditConfig(out=out).check()
    assert out.read_text() == "{}"


def test_the_page_matches_the_result_files():
    """docs/credit.md's tables are what scripts/experiments/credit/credit_page.py computes from the
    committed result files."""
    script = ROOT / "scripts" / "experiments" / "credit" / "credit_page.py"
    done = subprocess.run([sys.executable, str(script), "--check"], capture_output=True,
                          text=True, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_result_file_recomputes_its_metrics_exactly():
    """Issue 46 § 6: every figure the page prints must recompute from what a result file
    stores. A batch whose signals have near-ties (a saturated STEER-like credit, spread at the
    1e-12 level, where rounding to 8 decimals made ties and moved Spearman's ρ) is written with
    ``oracle_record``, ``signals_record`` and ``completion_record``, through JSON, and
    ``rescore`` of the file gives exactly the metrics of the tensors it was written from.
    Fails if any per-token field is rounded again."""
    import json

    from refimpl.sampling.monte_carlo_values import estimate_values

    samples, outcome, T = _batch(1)
    rows = samples.responses()
    B = len(rows)
    rng = np.random.default_rng(0)

    def continue_prefixes(keys, t):  # a fake policy: each continuation wins with p = 0.4
        return rng.random((len(keys), 16)) < 0.4, 16 * len(keys)

    success = (outcome >= 0.5).tolist()
    values = estimate_values(rows, [i // G for i in range(B)], success, T, 16, continue_prefixes)
    gen = torch.Generator().manual_seed(3)
    mask = samples.response_mask.bool()
    # A few distinct levels 1e-7 apart (above CONSTANT_TOL), each blurred at the 1e-12 level.
    levels = torch.randint(0, 3, (B, T), generator=gen).double()
    near_ties = -8.2243e-4 + 1e-7 * levels + 1e-12 * torch.randn(B, T, generator=gen).double()
    signals = {
        "steer": {"advantages": torch.randn(B, T, generator=gen, dtype=torch.float64) * mask,
                  "credit": near_ties * mask, "trained": torch.ones(B, dtype=torch.bool)},
        "grpo": {"advantages": torch.randn(B, 1, generator=gen, dtype=torch.float64) * mask,
                 "credit": torch.randn(B, T, generator=gen, dtype=torch.float64) * 1e-9 * mask,
                 "trained": torch.arange(B) < 2 * G},
    }  # fmt: skip
    first_wrong = {1: 0, 4: 1}
    lengths = mask.sum(1).numpy()
    direct = credit_records.metrics_record(signals, values, samples.entropy_old, first_wrong, 0,
                                   [i // G for i in range(B)])  # fmt: skip
    result = {
        "settings": {"seed": 0},
        "completions": [
            credit_records.completion_record(
                f"q{i // G}", "", rows[i], samples.entropy_old[i], float(outcome[i]),
                success_threshold=0.5, first_wrong=first_wrong.get(i))
            for i in range(B)
        ],
        "oracle": {"16": credit_records.oracle_record(values, lengths)},
        "signals": credit_records.signals_record(signals, lengths),
    }  # fmt: skip
    stored = json.loads(json.dumps(result, allow_nan=True))
    again = credit_records.rescore(stored, "16")
    assert json.dumps(again, sort_keys=True) == json.dumps(direct, sort_keys=True)
    # The check has power: the rounding of the files written before issue 46 moves ρ.
    rounded = [[round(v, 8) for v in row] for row in stored["signals"]["steer"]["credit"]]
    stored["signals"]["steer"]["credit"] = rounded
    moved = credit_records.rescore(stored, "16")["signals"]["steer"]["credit"]["within"]["spearman"]
    assert moved != direct["signals"]["steer"]["credit"]["within"]["spearman"]


def test_a_completion_succeeds_at_the_scored_configs_threshold():
    """The record's success and the failed completions whose first wrong token is kept read
    the threshold they are given (the scored policy's ``Config.success_threshold``), not a
    constant: a partial reward of 0.6 succeeds at 0.5 and fails at 0.9."""
    from refimpl.bench.credit import _first_wrong_tokens

    record = credit_records.completion_record
    assert record("p", "t", [1], [0.1], 0.6, success_threshold=0.5)["success"] is True
    assert record("p", "t", [1], [0.1], 0.6, success_threshold=0.9)["success"] is False
    task = get_task("chain")
    problem = task.sample(1, np.random.default_rng(0))[0]
    wrong = [TOKENIZER.eos_id]  # ends at once: leaves the reference at token 0
    outcome = torch.tensor([0.6])
    assert _first_wrong_tokens(task, [problem], [wrong], outcome, 1, 0.5) == {}
    assert _first_wrong_tokens(task, [problem], [wrong], outcome, 1, 0.9) == {0: 0}
