"""The first update is tame: the learning-rate warm-up (``batch_stages.warm_up_lr``) and what it
does to step 1 in the long-chain regime (docs/first_update.md).

The bound, derived rather than read off a run: from step 2 on, a long-chain GRPO step moves the
policy by ``approx_kl_old`` ≈ 0.003-0.01 (the credit study's and the ceiling's runs). A first
step is tame when it moves the policy by no more than a few ordinary steps: KL ≤ 0.05, five
times the largest ordinary step. And no sampled token may lose more than 5 nats (its
probability divided by 150) before the update that trains on it: at lr 1e-5, where Adam's sign
step is ten times smaller, no token of step 1 falls by even 1 nat. Without the warm-up the
shipped long-chain base breaks both by orders of magnitude (KL about 200, a 14.5-nat fall on
seed 0), which ``test_without_the_warm_up_the_first_step_is_not_tame`` keeps true, so the bound
can fail.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from refimpl import batch_stages
from refimpl.loop import LoopConfig

KL_BOUND = 0.05
FALL_BOUND = 5.0  # nats


@pytest.fixture(scope="module")
def long_chain():
    """The shipped ``chain-longchain`` base and the long-chain regime's loop settings (the
    ``longchain`` preset: chain with 10-12 operators, 64 prompts × G = 8 in 4 minibatches)."""
    from refimpl.settings import presets
    from refimpl.settings.plan import run_warmstart
    from refimpl.settings.train_config import TrainConfig
    from refimpl.settings.warmstart_config import parse_task_args
    from refimpl.warmstart import base_model

    train = presets.fill_defaults(TrainConfig(), presets.get_preset("longchain").train)
    ws = dataclasses.replace(run_warmstart(train), runs_dir="/nonexistent-cache", progress=False)
    model = base_model(ws)  # shipped: never trains, never writes the cache
    assert model.base_record["source"] == "shipped"
    knobs = dict(parse_task_args(train.task, tuple(train.task_args)))
    return model, LoopConfig(task=train.task, task_knobs=knobs, lr=train.lr, seed=0)


def _first_step(long_chain, **changes):
    from refimpl.diagnostics.first_update import first_step

    model, cfg = long_chain
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return first_step(model, dataclasses.replace(cfg, **changes))
    finally:
        torch.set_num_threads(previous)


def test_the_first_step_is_tame_with_the_default_warm_up(long_chain):
    r = _first_step(long_chain)
    assert LoopConfig.lr_warmup > 0
    assert r.lrs[0] == pytest.approx(long_chain[1].lr / LoopConfig.lr_warmup)
    assert r.approx_kl_old <= KL_BOUND, r
    assert r.largest_fall <= FALL_BOUND, r


def test_without_the_warm_up_the_first_step_is_not_tame(long_chain):
    """The same step with ``lr_warmup=0``: the bound above must be able to fail."""
    r = _first_step(long_chain, lr_warmup=0)
    assert r.lrs == (long_chain[1].lr,) * 4
    assert r.approx_kl_old > KL_BOUND and r.largest_fall > FALL_BOUND, r
    # The mechanism: Adam's first update is a sign step (nearly every weight moves by lr),
    # and the later ones are not (the minibatches' gradients disagree in sign).
    assert r.share_moved_by_lr[0] > 0.9
    assert max(r.share_moved_by_lr[1:]) < 0.5


def _adam(n_params: int = 3):
    params = [torch.nn.Parameter(torch.zeros(2)) for _ in range(n_params)]
    return torch.optim.Adam(params, lr=1.0), params


@pytest.mark.parametrize("warmup", [0, 1, 3, 8])
def test_warm_up_lr_ramps_linearly_then_holds(warmup):
    """Update k (1, 2, …) takes lr · min(1, k / W); W = 0 takes lr from the first."""
    optimizer, params = _adam()
    taken = []
    for _ in range(12):
        taken.append(batch_stages.warm_up_lr(optimizer, 0.5, warmup))
        for p in params:
            p.grad = torch.ones_like(p)
        optimizer.step()
    expected = [0.5 * min(1.0, k / warmup) if warmup else 0.5 for k in range(1, 13)]
    assert taken == pytest.approx(expected)
    assert all(g["lr"] == taken[-1] for g in optimizer.param_groups)


def test_warm_up_lr_continues_from_a_saved_optimizer():
    """The update index is Adam's own step count, which a checkpoint saves: an optimizer
    restored after 3 updates takes the 4th update's learning rate."""
    optimizer, params = _adam()
    for _ in range(3):
        batch_stages.warm_up_lr(optimizer, 1.0, 8)
        for p in params:
            p.grad = torch.ones_like(p)
        optimizer.step()
    restored, _ = _adam()
    restored.load_state_dict(optimizer.state_dict())
    assert batch_stages.warm_up_lr(restored, 1.0, 8) == pytest.approx(4 / 8)


def test_a_record_without_the_setting_reads_as_no_warm_up():
    """Runs recorded before ``lr_warmup`` existed trained without one: reading their
    config.json back (``--config``, ``--resume``) must not give them the new default."""
    from refimpl.settings.record import config_from_record
    from refimpl.settings.train_config import TrainConfig, config_dict

    data = config_dict(TrainConfig())
    assert data.pop("lr_warmup") == LoopConfig.lr_warmup
    assert config_from_record(json.loads(json.dumps(data)), "old.json").lr_warmup == 0
    data["lr_warmup"] = 3
    assert config_from_record(data, "new.json").lr_warmup == 3


def test_the_flag_is_checked():
    from refimpl.settings.train_config import TRAIN_BOUNDS

    rule = dict(TRAIN_BOUNDS)["lr_warmup"]
    rule(0, "--lr-warmup")
    with pytest.raises(ValueError, match="--lr-warmup"):
        rule(-1, "--lr-warmup")


def test_the_page_shows_what_the_committed_file_gives():
    """docs/first_update.md's tables are the measurement script's, from its committed file."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "scripts/experiments/first_update/measure.py"
    spec = importlib.util.spec_from_file_location("first_update_measure", path)
    measure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(measure)
    assert measure.main(["--check"]) == 0, (
        "run python scripts/experiments/first_update/measure.py --figure-only"
    )
    result = json.loads(measure.RESULTS.read_text())
    assert result["default_warmup"] == LoopConfig.lr_warmup  # the default the sweep chose
    # The default is the smallest swept length whose worst seed falls by at most 3 nats at 1e-4.
    worst = {}
    for p in result["points"]:
        if p["regime"] == "long chain" and p["lr"] == 1e-4:
            worst[p["lr_warmup"]] = max(worst.get(p["lr_warmup"], 0.0), p["largest_fall"])
    assert min(w for w, fall in worst.items() if fall <= 3.0) == LoopConfig.lr_warmup
