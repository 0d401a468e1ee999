"""Divergence stops the run (issue: nothing lost, nothing silently wrong).

A NaN or inf loss, gradient, weight or entropy, in any step, skipped or not, stops the run
with one line naming the step and the likely cause; no checkpoint of the diverged policy is
written and the last good one is kept. A run that skips every group for
``SKIPPED_STEPS_WARNING`` steps in a row warns. Tiny real runs at absurd learning rates.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

import refimpl.train as train_module
from refimpl.runs.runlog import read_metrics
from tests.safety_helpers import cli, error_lines, tiny_flags


def assert_no_diverged_checkpoint(run: Path, stopped_at: int) -> None:
    """The checkpoint, when there is one, is of a step before ``stopped_at`` and finite;
    every logged entropy is finite."""
    for name in ("checkpoint", "checkpoint.old", "checkpoint.tmp"):
        if (run / name).exists():
            assert name == "checkpoint", name
            state = json.loads((run / name / "state.json").read_text())
            assert state["step"] < stopped_at
            weights = load_file(str(run / name / "model.safetensors"))
            assert all(bool(torch.isfinite(t).all()) for t in weights.values())
    for record in read_metrics(run):
        for key, value in record.items():
            if key.startswith("entropy"):
                assert math.isfinite(value), (record["step"], key, value)


@pytest.mark.parametrize(("algo", "lr"), [("gtpo", "1e10"), ("dapo", "1e6"), ("grpo", "1e10")])
def test_a_diverged_policy_stops_the_run_and_keeps_the_last_good_checkpoint(
    tmp_path, capsys, algo, lr
):
    """The issue's silent results 5: GTPO at lr 1e10 (DAPO at 1e6) exited 0 with every
    step skipped, NaN entropies, held-out success 0.5 → 0.0 and a NaN checkpoint saved;
    GRPO at 1e10 failed as "logp_old: expected finite log-probs", exit 2."""
    # --lr-warmup 0: the runs took the whole lr from the first update (the warm-up,
    # 8 updates by default since, reaches it only after this run's 6 steps for DAPO at 1e6)
    flags = ["--algo", algo, "--lr", lr, "--lr-warmup", "0", "--name", "x"]
    code, _, err = cli(["train", *tiny_flags(tmp_path, steps=6), *flags], capsys)
    assert code == 1, err
    lines = error_lines(err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("refimpl: error: step ") and "diverged" in lines[0], err
    assert f"--lr {float(lr):g}" in lines[0], err
    stopped_at = int(lines[0].split("step ")[1].split()[0].rstrip(":"))
    assert_no_diverged_checkpoint(tmp_path / "x", stopped_at)


def test_a_nan_entropy_in_a_skipped_step_stops_the_run(tmp_path, capsys, monkeypatch):
    """The issue's mechanism: a diverged policy's completions are all wrong, so dynamic
    sampling skips every group, the loss is never computed and its check never runs, while
    the logged entropy is NaN. Every reward is made 0 and the rollout's entropy NaN."""
    monkeypatch.setattr(
        "refimpl.train.score_samples",
        lambda task, problems, samples, group_size: np.zeros(len(problems) * group_size),
    )
    original = train_module.entropy_stats

    def nan_entropy(h, prefix):
        stats = original(h, prefix)
        return {k: float("nan") for k in stats} if prefix == "entropy" else stats

    monkeypatch.setattr("refimpl.train.entropy_stats", nan_entropy)
    argv = ["train", *tiny_flags(tmp_path), "--algo", "dapo", "--name", "nan-h"]
    code, _, err = cli([*argv, "--resample-rounds", "0"], capsys)
    assert code == 1, err
    assert error_lines(err)[0].startswith("refimpl: error: step 1 (every group skipped):"), err
    assert_no_diverged_checkpoint(tmp_path / "nan-h", 1)


def test_every_group_skipped_for_k_steps_warns_naming_k(tmp_path, capsys, monkeypatch):
    """Not diverged but not learning: every group skipped for K = 10 steps in a row warns
    once, naming K (the run goes on)."""
    monkeypatch.setattr(
        "refimpl.train.score_samples",
        lambda task, problems, samples, group_size: np.zeros(len(problems) * group_size),
    )
    argv = ["train", *tiny_flags(tmp_path, steps=11), "--algo", "dapo", "--name", "flat"]
    with pytest.warns(UserWarning) as caught:
        code, _, err = cli([*argv, "--resample-rounds", "0"], capsys)
    assert code == 0, err
    skipped = [str(w.message) for w in caught if "every group was skipped" in str(w.message)]
    assert len(skipped) == 1 and skipped[0].startswith("step 10: "), skipped
    assert "in the last 10 steps in a row" in skipped[0], skipped
    assert all(r.get("skipped") == 1 for r in read_metrics(tmp_path / "flat")[1:])


def test_a_non_finite_loss_names_the_checkpoint_kept_or_that_there_is_none(
    tmp_path, capsys, monkeypatch
):
    """The issue (item 8): a non-finite loss said "the last good checkpoint in … is kept"
    when the run had written none. The loss of the second optimizer step of the run (its
    step 2, after the checkpoint of step 1) and of its first are made non-finite in turn."""
    import refimpl.algorithms.grpo as grpo

    real_loss, calls = grpo.loss, []

    def inf_loss_at(n: int):
        def loss(*args, **kwargs):
            calls.append(1)
            total, metrics = real_loss(*args, **kwargs)
            return (total * float("inf") if len(calls) == n else total), metrics

        return loss

    for n, name, kept in (
        (1, "none", f"nothing was checkpointed ({tmp_path / 'none'} holds no checkpoint yet)"),
        (2, "one", f"the last good one (step 1) in {tmp_path / 'one' / 'checkpoint'} is kept"),
    ):
        calls.clear()
        monkeypatch.setattr(grpo, "loss", inf_loss_at(n))
        argv = ["train", *tiny_flags(tmp_path), "--algo", "grpo", "--name", name]
        code, _, err = cli(argv, capsys)
        assert code == 1, err
        (line,) = error_lines(err)
        assert line.startswith(f"refimpl: error: step {n}: non-finite loss"), line
        assert line.endswith(kept), line
        assert_no_diverged_checkpoint(tmp_path / name, n)
