"""The trainer: every algorithm trains, runs are deterministic, resumable and safe.

Each test uses a tiny warm start (1 layer, d = 32, 200 steps, about 2 s) cached in a temporary
directory shared by the module, so the whole file runs in well under a minute on 2 cores.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
import torch

from refimpl import algorithms
from refimpl.cli import main as cli_main
from refimpl.runs.cache import cache_key
from refimpl.runs.checkpoint import load_model_weights
from refimpl.runs.divergence import NonFiniteLossError
from refimpl.runs.runlog import read_metrics
from refimpl.runs.status import RunBudget
from refimpl.settings.train_config import TrainConfig
from refimpl.settings.warmstart_config import WarmstartConfig
from refimpl.train import Trainer, run_training
from tests.tiny import tiny_warmstart

TIMING_KEYS = {"time_sample", "time_score", "time_adv", "time_loss", "time_step", "time_eval"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


def tiny(runs: Path, **changes) -> TrainConfig:
    """A run small enough for a unit test: 3 steps of 4 groups × 4 completions on one-operation
    chains, from a 1-layer d=32 warm start that solves about half of them (so groups are
    informative and every algorithm has a gradient)."""
    ws = tiny_warmstart(runs)
    base = TrainConfig(
        task_args=("num_ops=1",),
        steps=3,
        prompts_per_step=4,
        group_size=4,
        eval_every=2,
        eval_problems=20,
        probe_every=2,
        probe_prompts=2,
        checkpoint_every=2,
        runs_dir=runs,
        progress=False,
        plot=False,
        warmstart=ws,
        lr=1e-3,
    )
    return dataclasses.replace(base, **changes)


def read(run_dir: Path) -> list[dict]:
    return read_metrics(run_dir)


def without_timings(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in records]


@pytest.mark.parametrize("algo", algorithms.NAMES)
def test_every_algorithm_trains_logs_finite_metrics_and_changes_weights(runs, algo):
    """A few steps of each algorithm finish, log finite numbers and move the weights."""
    cfg = tiny(runs, algo=algo, name=f"every-{algo}")
    trainer = Trainer(cfg)
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    run_dir = trainer.run()
    records = read(run_dir)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    for r in records:
        for key, value in r.items():
            if isinstance(value, float):
                assert math.isfinite(value), f"{algo}: {key}={value} at step {r['step']}"
    trained = [r for r in records[1:] if "loss" in r]
    assert trained, f"{algo}: no step trained (every group uninformative?)"
    after = trainer.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before), f"{algo}: weights unchanged"
    # The checkpoint on disk holds the trained weights.
    reloaded = cfg.warmstart.model.build()
    load_model_weights(run_dir / "checkpoint", reloaded)
    assert all(torch.equal(reloaded.state_dict()[k], after[k]) for k in after)


def test_metrics_hold_what_the_issue_lists(runs):
    """Every step logs reward, success, entropy percentiles, lengths, advantages, clip
    fractions, KL, kept-group fraction, grad norm and per-phase seconds; probes are logged."""
    run_dir = run_training(tiny(runs, algo="tepo", name="metrics-tepo"))
    step = read(run_dir)[1]
    for key in (
        "reward_mean",
        "success_rate",
        "entropy_mean",
        "entropy_p10",
        "entropy_p90",
        "length_mean",
        "adv_token_mean",
        "adv_token_std",
        "clip_frac_high",
        "clip_frac_low",
        "approx_kl_old",
        "kl_mask_frac",
        "kept_group_frac",
        "grad_norm",
        "time_sample",
        "time_score",
        "time_loss",
    ):
        assert key in step, key
    assert 0.0 <= step["entropy_p10"] <= step["entropy_p50"] <= step["entropy_p90"]
    probes = [json.loads(x) for x in (run_dir / "probes.jsonl").read_text().splitlines()]
    assert [p["step"] for p in probes] == [0, 2, 3]
    first = probes[0]["probes"][0]
    assert len(first["tokens"]) == len(first["entropy"]) > 0


def test_same_seed_same_metrics(runs):
    """Determinism: two runs with the same seed on the same device log the same metrics."""
    a = read(run_training(tiny(runs, algo="gtpo", name="det-a")))
    b = read(run_training(tiny(runs, algo="gtpo", name="det-b")))
    assert without_timings(a) == without_timings(b)
    c = read(run_training(tiny(runs, algo="gtpo", name="det-c", seed=1)))
    assert without_timings(a) != without_timings(c)


def test_killed_and_resumed_run_matches_an_uninterrupted_one(runs, monkeypatch):
    """A run killed after step 3 (checkpoint at step 2) and resumed logs exactly the metrics
    of a run that was never interrupted: per-step seeding + saved optimizer state."""
    full = read(run_training(tiny(runs, algo="dapo", name="resume-full", steps=5)))

    cfg = tiny(runs, algo="dapo", name="resume-killed", steps=5)
    original = Trainer.train_step

    def crash_at_step_3(self):
        if self.step == 3:
            raise KeyboardInterrupt("simulated kill")
        return original(self)

    monkeypatch.setattr(Trainer, "train_step", crash_at_step_3)
    with pytest.raises(KeyboardInterrupt):
        run_training(cfg)
    monkeypatch.setattr(Trainer, "train_step", original)
    assert [r["step"] for r in read(cfg.run_dir)] == [0, 1, 2, 3]
    resumed = read(run_training(dataclasses.replace(cfg, resume=True)))
    assert without_timings(resumed) == without_timings(full)


def test_existing_run_directory_is_never_overwritten_silently(runs):
    cfg = tiny(runs, algo="grpo", name="exists", steps=1)
    run_training(cfg)
    with pytest.raises(FileExistsError, match="--resume"):
        run_training(cfg)
    assert read(run_training(dataclasses.replace(cfg, overwrite=True)))[-1]["step"] == 1


def test_non_finite_loss_stops_and_keeps_the_last_checkpoint(runs, monkeypatch):
    cfg = tiny(runs, algo="grpo", name="nan", steps=4, checkpoint_every=2)
    module = algorithms.get("grpo")
    original = module.loss

    def nan_after_two_steps(batch, logp, adv, algo_cfg, entropy=None):
        loss, metrics = original(batch, logp, adv, algo_cfg, entropy)
        return (loss * float("nan") if trainer_step["n"] >= 2 else loss), metrics

    trainer_step = {"n": 0}
    original_step = Trainer.train_step

    def counting(self):
        trainer_step["n"] = self.step
        return original_step(self)

    monkeypatch.setattr(module, "loss", nan_after_two_steps)
    monkeypatch.setattr(Trainer, "train_step", counting)
    with pytest.raises(NonFiniteLossError, match=r"the last good one \(step 2\) in .* is kept"):
        run_training(cfg)
    state = json.loads((cfg.run_dir / "checkpoint" / "state.json").read_text())
    assert state["step"] == 2


@pytest.mark.parametrize(
    ("changes", "flag"),
    [
        ({"algo": "ppo"}, "algorithm"),
        ({"task": "chess"}, "--task"),
        ({"group_size": 1}, "--group-size"),
        ({"prompts_per_step": 4, "minibatches": 3}, "--minibatches"),
        ({"max_new_tokens": 3}, "--max-new-tokens"),
        ({"algo_args": ("alpha_2=-1",)}, "alpha_2"),
        ({"algo": "gtpo", "algo_args": ("nonsense=1",)}, "--algo-args"),
        ({"task_args": ("num_ops=x",)}, "--task-args"),
        ({"lr": -1.0}, "--lr"),
    ],
)
def test_inconsistent_settings_fail_at_start_up_naming_the_flag(runs, changes, flag):
    if "algo_args" in changes and "algo" not in changes:
        changes = {**changes, "algo": "gtpo"}
    with pytest.raises(ValueError, match=flag):
        Trainer(tiny(runs, name="bad", **changes))


def test_unknown_names_list_the_valid_ones(runs):
    with pytest.raises(ValueError) as err:
        Trainer(tiny(runs, algo="ppo"))
    assert all(name in str(err.value) for name in algorithms.NAMES)


def test_equivalent_task_args_share_one_warm_start_cache(tmp_path, capsys):
    """``--task-args`` that say the same thing (nothing, a default restated, defaults in any
    order or spelling) train one base model into one cache directory; a real change trains
    another. (The key once hashed the strings as typed: three models for one task.)"""
    tiny = ["--steps", "2", "--batch-size", "4", "--eval-problems", "2", "--model.n-layer", "1"]
    tiny += ["--model.n-embd", "16", "--model.n-head", "2", "--no-progress"]
    same = [[], ["num_ops=3"], ["num_ops=3", "min_ops=3"], ["min-ops = 3", "num_ops=3"]]
    for task_args in same:
        argv = ["warmstart", "--task", "chain", *tiny, "--runs-dir", str(tmp_path)]
        assert cli_main(argv + (["--task-args", *task_args] if task_args else [])) == 0
    caches = sorted(p.name for p in (tmp_path / "warmstart").iterdir() if p.is_dir())
    assert len(caches) == 1, caches
    out = capsys.readouterr().out
    assert out.count("warm start: trained") == 1 and out.count("warm start: reusing") == 3
    # Same knobs, same key; different knobs (num_ops=2 also moves min_ops), another key.
    key = cache_key(WarmstartConfig(task="chain", task_args=("num_ops=2",)).key_inputs())
    same = WarmstartConfig(task="chain", task_args=("min_ops=2", "num_ops=2"))
    assert key == cache_key(same.key_inputs())
    assert key != cache_key(WarmstartConfig(task="chain").key_inputs())


def test_cli_help_and_bad_flags(capsys):
    assert cli_main(["train", "--help"]) == 0  # main returns the exit code (tests/test_cli.py)
    out = capsys.readouterr().out
    for flag in ("--algo", "--task", "--algo-args", "--resume", "--lr"):
        assert flag in out
    assert cli_main(["train", "--no-such-flag", "1"]) == 2
    assert "no-such-flag" in capsys.readouterr().err
    assert cli_main(["train", "--algo", "ppo", "--steps", "1"]) == 2
    assert "gtpo" in capsys.readouterr().err


def test_bfloat16_autocast_trains_with_float32_loss_math(runs):
    """``--dtype bfloat16`` runs the model under bf16 autocast (here on CPU) and still logs
    finite float32 metrics; a bad dtype is refused at start-up."""
    records = read(run_training(tiny(runs, algo="gtpo", name="bf16", steps=2, dtype="bfloat16")))
    assert [r["step"] for r in records] == [0, 1, 2]
    assert all(math.isfinite(r["reward_mean"]) for r in records[1:])
    with pytest.raises(ValueError, match="--dtype"):
        Trainer(tiny(runs, name="bad-dtype", dtype="float16"))


def test_a_warm_start_can_stop_a_longer_schedule_early(tmp_path):
    """``schedule_steps``: the cosine runs over that many steps and training stops at
    ``steps``, where a longer warm start stood (the longchain preset). The same schedule
    keeps the cache key warm starts always had; a schedule shorter than the run is refused;
    stopping early trains another model than the whole (shorter) schedule."""
    base = WarmstartConfig(task="chain", steps=600)
    assert cache_key(dataclasses.replace(base, schedule_steps=600).key_inputs()) == cache_key(
        base.key_inputs()
    )
    assert cache_key(dataclasses.replace(base, schedule_steps=2400).key_inputs()) != cache_key(
        base.key_inputs()
    )
    with pytest.raises(ValueError, match="--schedule-steps"):
        dataclasses.replace(base, schedule_steps=599).check()
    from refimpl.warmstart import train_warmstart

    small = dataclasses.replace(tiny_warmstart(tmp_path), steps=8, task_args=("num_ops=1",))
    whole = train_warmstart(small)
    early = train_warmstart(dataclasses.replace(small, schedule_steps=16))
    a, b = whole.state_dict(), early.state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_a_run_budget_is_spent_at_its_steps_or_its_sampled_tokens():
    """``RunBudget.spent``: the one stopping rule (the Trainer, the entropy change's last step
    and ``run_status`` read it): ``steps`` steps done, or ``max_sampled_tokens`` sampled when
    set, whichever comes first."""
    steps_only = RunBudget(steps=3)
    assert not steps_only.spent(2, 10**9) and steps_only.spent(3, 0)
    both = RunBudget(steps=3, max_sampled_tokens=100)
    assert not both.spent(2, 99) and both.spent(2, 100) and both.spent(3, 0)
