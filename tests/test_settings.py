"""Settings are resolved once: ``--task-args`` is parsed one time per command, whatever reads it
(the task, the warm start's checks, its cache key, its training, the run's records)."""

from __future__ import annotations

import dataclasses

import pytest

import refimpl.rundir as rundir
import refimpl.settings as settings
from refimpl.cli import main
from refimpl.config import load_config_file

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
    """``preflight`` checks a resumed run's settings first (the clearest error) and does not
    check them again in ``check_run_dir``; the check under the run's lock is separate."""
    argv = ["train", *TINY, "--runs-dir", str(tmp_path), "--name", "r"]
    assert main(argv) == 0
    calls = []
    real = rundir.check_resume_settings
    monkeypatch.setattr(
        rundir, "check_resume_settings", lambda *a, **k: (calls.append(a[2]), real(*a, **k))[1]
    )
    cfg = load_config_file(tmp_path / "r" / "config.json")
    rundir.preflight(dataclasses.replace(cfg, resume=True, steps=2))
    assert calls == [tmp_path / "r" / "config.json"]
