"""The ceiling section's statistics (scripts/experiments/ceiling/ceiling_page.py), on runs built by
hand whose headroom and shares are known exactly, and the page against the committed files."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as sps

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "experiments" / "ceiling" / "ceiling_page.py"

BASE = 0.2
CEILING_GAINS = [0.10, 0.14, 0.08, 0.12, 0.11]
GRPO_GAINS = [0.02, 0.05, 0.01, 0.03, 0.04]


@pytest.fixture(scope="module")
def report():
    spec = importlib.util.spec_from_file_location("ceiling_report", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(seed: int, gain: float, finished: bool = True) -> dict:
    evals = [
        {"step": s, "sampled_tokens": 1000 * s, "value_sampled_tokens": 0, "greedy": g,
         "pass1": g / 2, "pass16": 0.8}
        for s, g in ((0, BASE), (10, BASE + gain / 2), (20, BASE + gain))
    ]  # fmt: skip
    return {
        "label": "", "seed": seed, "finished": finished, "budget_tokens": 20000, "steps": 20,
        "evals": evals, "entropy": [0.3] * 20, "clip_frac": 0.0, "value_prefixes_per_step": 0,
        "value_tokens_per_step": 0, "policy_tokens_per_step": 1000, "seconds_per_step": 1.0,
        "advantage_seconds_per_step": 0.1, "seconds": 20.0, "algo_config": {},
    }  # fmt: skip


def _results(tmp_path: Path, half_share_gains: list[float]) -> Path:
    arms = {
        "vineppo": {str(s): _run(s, g) for s, g in enumerate(CEILING_GAINS)},
        "grpo": {str(s): _run(s, g) for s, g in enumerate(GRPO_GAINS)},
        "dapo": {str(s): _run(s, g) for s, g in enumerate(half_share_gains)},
    }
    arms["vineppo"]["9"] = _run(9, 0.9, finished=False)  # interrupted: left out everywhere
    (tmp_path / "runs.json").write_text(json.dumps({"machine": {"cpu": "test"}, "arms": arms}))
    return tmp_path


def test_headroom_is_the_paired_mean_with_its_t_and_mdd(report, tmp_path):
    arms = report.load_runs(_results(tmp_path, GRPO_GAINS))
    c = report.paired(arms, "vineppo", "grpo", "greedy")
    assert report.paired(arms, "vineppo", "grpo").diff == pytest.approx(c.diff / 2, abs=1e-12)
    diff = np.array(CEILING_GAINS) - np.array(GRPO_GAINS)
    se = diff.std(ddof=1) / math.sqrt(diff.size)
    assert c.n == 5 and c.df == 4  # the unfinished seed 9 is not paired
    assert c.diff == pytest.approx(diff.mean(), abs=1e-12)
    assert c.se == pytest.approx(se, rel=1e-9)
    assert c.mdd == pytest.approx((sps.t.ppf(0.975, 4) + sps.t.ppf(0.80, 4)) * se, rel=1e-9)


def test_shares_are_zero_one_and_exact_for_an_arm_halfway(report, tmp_path):
    half = [(g + v) / 2 for g, v in zip(GRPO_GAINS, CEILING_GAINS)]
    arms = report.load_runs(_results(tmp_path, half))
    share, lo, hi, n = report.share_interval(arms, "dapo")
    assert n == 5
    assert share == pytest.approx(0.5, abs=1e-9)
    # Halfway in every seed: every resample's ratio is 0.5 too.
    assert lo == pytest.approx(0.5, abs=1e-9) and hi == pytest.approx(0.5, abs=1e-9)
    assert report.share_interval(arms, "grpo")[0] == pytest.approx(0.0, abs=1e-12)
    assert report.share_interval(arms, "vineppo")[0] == pytest.approx(1.0, abs=1e-12)


def test_a_ceiling_below_grpo_gives_an_unbounded_share(report, tmp_path):
    arms = report.load_runs(_results(tmp_path, GRPO_GAINS))
    arms["vineppo"] = {s: r for s, r in arms["grpo"].items()}  # no headroom at all
    share, lo, hi, _ = report.share_interval(arms, "dapo")
    assert math.isnan(lo) and math.isnan(hi)


def test_gain_is_last_minus_first_and_auc_the_trapezoid_over_updates(report):
    run = _run(0, 0.1)
    assert report.gain(run, "greedy") == pytest.approx(0.1, abs=1e-12)
    assert report.gain(run) == pytest.approx(0.05, abs=1e-12)  # pass@1, the primary figure
    # pass@1 is 0.1, 0.125, 0.15 at steps 0, 10, 20: the trapezoid over 20 updates
    assert report.auc(run) == pytest.approx((0.1125 * 10 + 0.1375 * 10) / 20, abs=1e-12)


def test_the_page_is_what_the_committed_files_give(report):
    """docs/credit.md's ceiling tables recompute from the committed result files."""
    assert report.main(["--check"]) == 0


def test_shares_are_printed_only_once_the_ceiling_is_resolved(report, tmp_path):
    """H ≥ 3 MDD: the table gives shares; H below it: gains over GRPO with a t interval, and
    no share anywhere in the table or the scatter (a share of an unresolved headroom prints
    more than the figures carry)."""
    resolved = report.load_runs(_results(tmp_path, [0.06, 0.095, 0.045, 0.075, 0.075]))
    assert report.ceiling_resolved(resolved)
    assert "share of the ceiling" in report.share_table(resolved)
    # A ceiling whose lead over GRPO varies more than it is large: not resolved.
    noisy = tmp_path / "noisy"
    noisy.mkdir()
    arms = json.loads((_results(tmp_path, [0.0] * 5) / "runs.json").read_text())
    for seed, gain in zip(arms["arms"]["vineppo"], [0.10, 0.0, 0.08, -0.05, 0.02]):
        arms["arms"]["vineppo"][seed] = _run(int(seed), GRPO_GAINS[int(seed)] + gain)
    (noisy / "runs.json").write_text(json.dumps(arms))
    unresolved = report.load_runs(noisy)
    assert not report.ceiling_resolved(unresolved)
    text = report.share_table(unresolved)
    assert "share" not in text and "gain − GRPO's" in text
    c = report.paired(unresolved, "dapo", "grpo")
    half = sps.t.ppf(0.95, c.df) * c.se
    assert f"[{c.diff - half:+.3f}, {c.diff + half:+.3f}]" in text


def test_the_sample_matched_sentence_follows_the_t_rule(report):
    """The sentence under the sample-matched table is the comparison's verdict: two seeds
    with a difference of 2 s.e. are 'not shown' (t₀.₉₇₅ at 1 df is 12.7)."""
    stats = report.stats
    weak = stats.over_seeds({"0": -0.007, "1": -0.003})
    assert weak.verdict() == "not shown"
    assert "not shown by the t rule" in report.matched_sentence(weak, 2)
    assert "neither arm is shown" in report.matched_sentence(weak, 2)
    strong = stats.over_seeds({str(s): -0.05 + 0.001 * s for s in range(5)})
    assert "GRPO with G = 64 gains more" in report.matched_sentence(strong, 5)


def test_every_arm_is_read_at_the_end_of_the_same_token_budget(report):
    """An arm whose budget ended before update 20 is read at its last evaluation, whose
    sampled tokens are the budget's end, like every other arm's."""
    run = _run(0, 0.1)
    run["evals"] = run["evals"][:2]  # the budget ended at update 10
    assert report.at_update(run)["step"] == 10
    assert report.at_update(_run(0, 0.1))["step"] == 20


def test_the_warm_up_section_reads_h_per_seed_with_its_mdd(report, tmp_path):
    """warmup.json's arms (labelled with their settings, as collect.py labels them): H of
    VinePPO against GRPO with the warm-up is the paired mean, per seed, and the computed
    sentence says at which setting it reaches 3 MDD."""
    results = _results(tmp_path, [0.06, 0.095, 0.045, 0.075, 0.075])
    warm = {
        "vineppo lr_warmup=8": {str(s): _run(s, g) for s, g in enumerate(CEILING_GAINS)},
        "grpo lr_warmup=8": {str(s): _run(s, g) for s, g in enumerate(GRPO_GAINS)},
        report.warmup_rows.WARM_AUTHORS: {str(s): _run(s, g) for s, g in enumerate(GRPO_GAINS)},
    }
    (results / "warmup.json").write_text(json.dumps({"machine": {"cpu": "test"}, "arms": warm}))
    arms = report.load_runs(results)
    text = report.warmup_rows.warmup_text(arms, results)
    diffs = [c - g for c, g in zip(CEILING_GAINS, GRPO_GAINS)]  # pass@1 gains are half
    per_seed = ", ".join(f"{d / 2:+.3f}" for d in diffs)
    assert per_seed in text
    assert "resolved (H ≥ 3 MDD) at lr 1e-4, VinePPO as above" in text
    assert "VinePPO as its authors run it: H = +0.000" in text


def test_an_unfinished_run_with_no_step_yet_is_left_out_not_refused(report, tmp_path):
    """A run interrupted before its first step (collect.py writes NaN costs and no
    evaluation) is no damage: it is left out of every table; a finished run with the same
    figures is refused, naming the place."""
    results = _results(tmp_path, [0.06, 0.095, 0.045, 0.075, 0.075])
    data = json.loads((results / "runs.json").read_text())
    empty = {**_run(9, 0.0, finished=False), "evals": [], "entropy": [],
             "policy_tokens_per_step": float("nan")}  # fmt: skip
    data["arms"]["vineppo"]["9"] = empty
    (results / "runs.json").write_text(json.dumps(data))
    assert "9" not in report.load_runs(results)["vineppo"]
    data["arms"]["vineppo"]["9"] = {**empty, "finished": True}
    (results / "runs.json").write_text(json.dumps(data))
    with pytest.raises(report.ResultFileError if hasattr(report, "ResultFileError") else ValueError,
                       match="arms.vineppo.9"):  # fmt: skip
        report.load_runs(results)
