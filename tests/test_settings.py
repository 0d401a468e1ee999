"""Settings are resolved once: ``--task-args`` is parsed one time per command, whatever reads it
(the task, the warm start's checks, its cache key, its training, the run's records); a run
builds its task, its warm start's settings, its device and its algorithm Config once
(``refimpl.settings.plan.Plan``), and a resumed run reads its config.json once."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import pytest

import refimpl.runs.runlog as runlog
import refimpl.settings.memory as memory
import refimpl.settings.plan as plan_module
import refimpl.settings.train_config as train_settings
import refimpl.settings.warmstart_config as settings
from refimpl.algorithms import grpo
from refimpl.cli import main
from refimpl.runs.runlog import read_metrics
from refimpl.settings.train_config import TrainConfig
from refimpl.train import load_config_file, preflight

#: A one-step GRPO run with a 5-step 1-layer warm start (trained in the test's directory).
TINY = [
    "--algo", "grpo", "--steps", "1",
    "--prompts-per-step", "2", "--group-size", "2", "--minibatches", "1",
    "--eval-problems", "4", "--no-progress",
    "--warmstart.steps", "5", "--warmstart.eval-problems", "4",
    "--warmstart.model.n-layer", "1", "--warmstart.model.n-embd", "32",
    "--warmstart.model.n-head", "2",
]  # fmt: skip


@pytest.fixture
def count_task_arg_parses(monkeypatch):
    calls: list[tuple[str, ...]] = []
    real = settings.parse_overrides

    def counting(pairs, defaults, flag, *args, **kwargs):
        if flag == "--task-args":
            calls.append(tuple(pairs))
        return real(pairs, defaults, flag, *args, **kwargs)

    monkeypatch.setattr(settings, "parse_overrides", counting)
    settings.parse_task_args.cache_clear()
    yield calls
    settings.parse_task_args.cache_clear()


def test_a_train_that_trains_its_warm_start_parses_task_args_once(tmp_path, count_task_arg_parses):
    argv = ["train", *TINY, "--runs-dir", str(tmp_path), "--task-args", "max_operand=9"]
    assert main(argv) == 0
    assert list((tmp_path / "warmstart").iterdir()), "the warm start was trained here"
    assert count_task_arg_parses == [("max_operand=9",)]


def test_a_bad_task_arg_is_still_refused_by_name_after_a_good_parse(count_task_arg_parses):
    settings.parse_task_args("chain", ("num_ops=3",))
    with pytest.raises(ValueError, match="--task-args"):
        settings.parse_task_args("chain", ("no_such_knob=1",))
    assert len(count_task_arg_parses) == 2


def test_preflight_of_a_resume_checks_the_saved_settings_once(tmp_path, monkeypatch):
    """``preflight`` resolves the plan, then checks the run directory against it: a resumed
    run's settings are checked once, by ``resolve``, before the flags' own checks (the
    clearest error)."""
    argv = ["train", *TINY, "--runs-dir", str(tmp_path), "--name", "r"]
    assert main(argv) == 0
    calls = []
    real = plan_module.check_resume_settings
    monkeypatch.setattr(
        plan_module,
        "check_resume_settings",
        lambda *a, **k: (calls.append(a[2]), real(*a, **k))[1],
    )
    cfg = load_config_file(tmp_path / "r" / "config.json")
    preflight(dataclasses.replace(cfg, resume=True, steps=2))
    assert calls == [tmp_path / "r" / "config.json"]


@pytest.fixture
def count_resolutions(monkeypatch):
    """How often a command reads a run's config.json and resolves each piece of a run: the
    task, the warm start's settings, the device, the algorithm's Config (each construction),
    the warm start's checks."""
    counts: collections.Counter = collections.Counter()

    def counted(module, name: str):
        real = getattr(module, name)

        def wrapper(*args, **kwargs):
            counts[name] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    for name in ("build_task", "run_warmstart", "algorithm_config"):
        counted(plan_module, name)
    counted(train_settings, "check_device")
    counted(settings.WarmstartConfig, "check")
    real_post_init = grpo.Config.__post_init__
    monkeypatch.setattr(
        grpo.Config,
        "__post_init__",
        lambda self: (counts.update(["grpo.Config"]), real_post_init(self))[1],
    )
    real_read_text = Path.read_text

    def read_text(self, *args, **kwargs):
        if self.name == "config.json":
            counts["config.json read"] += 1
        return real_read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_text)
    real_read_bytes = runlog.read_bytes_bounded  # the run files' bounded reader

    def read_bytes_bounded(path, limit):
        if Path(path).name == "config.json":
            counts["config.json read"] += 1
        return real_read_bytes(path, limit)

    monkeypatch.setattr(runlog, "read_bytes_bounded", read_bytes_bounded)
    return counts


ONCE = {
    "build_task": 1,
    "run_warmstart": 1,
    "check_device": 1,
    "algorithm_config": 1,
    "grpo.Config": 1,
    "check": 1,
}


def test_a_run_resolves_each_setting_once(tmp_path, count_resolutions):
    argv = ["train", *TINY, "--runs-dir", str(tmp_path), "--name", "r"]
    assert main(argv) == 0
    assert count_resolutions == ONCE  # a new run reads no config.json


def test_a_resumed_run_reads_its_config_json_once(tmp_path, capsys, count_resolutions):
    assert main(["train", *TINY, "--runs-dir", str(tmp_path), "--name", "r"]) == 0
    count_resolutions.clear()
    resume = ["train", "--resume", "--runs-dir", str(tmp_path), "--name", "r", "--steps", "2"]
    assert main([*resume, "--no-progress"]) == 0, capsys.readouterr().err
    # The run's own Config (from its config.json), built once; its flags' defaults, read once.
    assert count_resolutions == {**ONCE, "config.json read": 1}
    assert [r["step"] for r in read_metrics(tmp_path / "r")] == [0, 1, 2]


def test_the_memory_estimate_sees_the_algo_args(monkeypatch):
    """The memory estimate counts the frozen reference only when the run's own algorithm
    Config needs one (it once built a default Config that ignored --algo-args)."""
    seen = []
    real = memory.memory_estimates

    def spy(cfg, task, max_new_tokens, needs_reference):
        seen.append(needs_reference)
        return real(cfg, task, max_new_tokens, needs_reference)

    monkeypatch.setattr(plan_module, "memory_estimates", spy)  # as resolve calls it
    plan = plan_module.resolve(TrainConfig(algo="grpo", algo_args=("kl_coef=0",)))
    assert not plan.algo_cfg.needs_reference()  # β = 0: no KL term, no reference
    assert seen == [False] and plan.needs_reference is False
    model = [spy(TrainConfig(), plan.task, plan.max_new_tokens, c.needs_reference())[0][1]
             for c in (grpo.Config(kl_coef=0.0), grpo.Config())]  # fmt: skip
    assert model[0] * 5 == model[1] * 4  # weights, gradient, Adam's two moments (+ reference)


def test_a_run_whose_config_json_lost_its_algo_config_resumes_with_the_checkpoints(
    tmp_path, monkeypatch
):
    """The checkpoint's algorithm settings are the ones the run continues with (not this
    version's defaults with the flags): read with config.json, the Config built once, and the
    checkpoint found to belong to the run before anything trains."""
    argv = ["train", *TINY, "--runs-dir", str(tmp_path), "--name", "r", "--no-plot"]
    assert main([*argv, "--algo-args", "clip_eps_high=0.3"]) == 0
    path = tmp_path / "r" / "config.json"
    record = json.loads(path.read_text())
    del record["algo_config"]
    path.write_text(json.dumps(record))
    state = json.loads((tmp_path / "r" / "checkpoint" / "state.json").read_text())
    built = []
    real = plan_module.algorithm_config
    monkeypatch.setattr(
        plan_module, "algorithm_config", lambda *a: (built.append(a[2]), real(*a))[1]
    )
    cfg = load_config_file(path)
    plan = preflight(dataclasses.replace(cfg, resume=True, steps=2))
    assert built == [state["algo_config"]]
    assert plan.algo_cfg == grpo.Config(**state["algo_config"])
    assert plan.algo_cfg.clip_eps_high == 0.3
