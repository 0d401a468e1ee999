"""The training regime where every mechanism acts, and what each evaluation and step logs.

Tiny settings (a 1-layer d = 32 warm start on one-operation chains, 4 groups × 4 completions):
the point is the mechanics, not learning. Several optimizer steps per rollout move the policy
between the rollout and the later minibatches, so ratios leave 1 and the clip and TEPO's
mask can act; with one update per rollout they cannot.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from refimpl.evaluate import PASS_AT_K
from refimpl.runs.runlog import read_metrics
from refimpl.settings.train_config import TrainConfig
from refimpl.train import run_training
from tests.tiny import tiny_warmstart


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("regime")


def tiny(runs: Path, **changes) -> TrainConfig:
    ws = tiny_warmstart(runs)
    base = TrainConfig(
        task_args=("num_ops=1",),
        steps=4,
        prompts_per_step=4,
        group_size=4,
        eval_every=2,
        eval_problems=20,
        eval_samples=16,
        probe_every=0,
        checkpoint_every=4,
        runs_dir=runs,
        progress=False,
        plot=False,
        warmstart=ws,
        lr=1e-2,
    )
    return dataclasses.replace(base, **changes)


def steps_of(run_dir: Path) -> list[dict]:
    return read_metrics(run_dir)


def mean(records: list[dict], key: str) -> float:
    values = [r[key] for r in records if key in r]
    return sum(values) / len(values)


def test_several_updates_per_rollout_make_the_clip_act(runs):
    """GRPO with 2 minibatches × 2 epochs: the later updates run at θ ≠ θ_old, some token ratio
    leaves [1 − ε, 1 + ε] in the direction of its advantage, and the clip fraction is > 0."""
    records = steps_of(
        run_training(tiny(runs, algo="grpo", name="clip", minibatches=2, ppo_epochs=2))
    )
    steps = records[1:]
    clip = [r["clip_frac_low"] + r["clip_frac_high"] for r in steps]
    assert max(clip) > 0, clip
    assert any(abs(r["ratio_mean"] - 1.0) > 1e-4 for r in steps)


def test_one_update_per_rollout_never_clips(runs):
    """The on-policy preset (one update per rollout): every ratio is exactly 1, no clipping."""
    records = steps_of(run_training(tiny(runs, algo="grpo", name="onpolicy", minibatches=1)))
    assert all(r["clip_frac_low"] + r["clip_frac_high"] == 0 for r in records[1:])


def test_tepo_mask_acts_with_several_updates_per_rollout(runs):
    """TEPO's KL mask needs H_θ < H_old − τ on a positive-advantage token: it can only hold
    once the policy has moved, i.e. after the first minibatch of a rollout."""
    records = steps_of(
        run_training(tiny(runs, algo="tepo", name="mask", minibatches=2, ppo_epochs=2))
    )
    assert mean(records[1:], "kl_mask_frac") > 0


def test_every_evaluation_logs_pass_at_k_next_to_greedy(runs):
    """pass@k for every k in PASS_AT_K up to eval_samples, each in [0, 1] and non-decreasing
    in k, at step 0 and at every evaluation; pass@1 ≤ pass@k; no pass@k above eval_samples."""
    records = steps_of(run_training(tiny(runs, algo="grpo", name="passk", eval_samples=4)))
    evals = [r for r in records if "heldout_greedy" in r]
    assert [r["step"] for r in evals] == [0, 2, 4]
    for r in evals:
        values = [r[f"heldout_pass@{k}"] for k in PASS_AT_K if k <= 4]
        assert all(0.0 <= v <= 1.0 for v in values)
        assert values == sorted(values)
        assert not any(f"heldout_pass@{k}" in r for k in PASS_AT_K if k > 4)


def test_every_step_logs_the_covariance_and_the_entropy_change(runs):
    """cov_logp_adv, cov_logp_update and entropy_change are finite on every training step; the
    entropy change is 0 only if nothing moved (the weights do move at lr 1e-2). A step whose
    every group was uninformative (dynamic sampling, ``skipped``) trains no token, so it has
    no covariance to log."""
    records = steps_of(run_training(tiny(runs, algo="gtpo", name="cov", minibatches=2)))
    trained = [r for r in records[1:] if r.get("groups_trained", 0) > 0]
    assert len(trained) >= 2, [r.get("groups_trained") for r in records]
    for r in records[1:]:
        assert (r in trained) != bool(r.get("skipped")), r
    for r in trained:
        for key in ("cov_logp_adv", "cov_logp_update", "entropy_change"):
            assert key in r and r[key] == r[key] and abs(r[key]) < 1e3, (key, r.get(key))
    assert any(r["entropy_change"] != 0 for r in trained)
