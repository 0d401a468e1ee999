"""Settings are resolved once: ``--task-args`` is parsed one time per command, whatever reads it
(the task, the warm start's checks, its cache key, its training, the run's records)."""

from __future__ import annotations

import pytest

import refimpl.settings as settings
from refimpl.cli import main


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
    argv = [
        "train", "--algo", "grpo", "--steps", "1", "--runs-dir", str(tmp_path),
        "--task-args", "max_operand=9", "--prompts-per-step", "2", "--group-size", "2", "--minibatches", "1",
        "--eval-problems", "4", "--no-progress",
        "--warmstart.steps", "5", "--warmstart.eval-problems", "4",
        "--warmstart.model.n-layer", "1", "--warmstart.model.n-embd", "32",
        "--warmstart.model.n-head", "2",
    ]  # fmt: skip
    assert main(argv) == 0
    assert list((tmp_path / "warmstart").iterdir()), "the warm start was trained here"
    assert count_task_arg_parses == [("max_operand=9",)]


def test_a_bad_task_arg_is_still_refused_by_name_after_a_good_parse(count_task_arg_parses):
    settings.parse_task_args("chain", ("num_ops=3",))
    with pytest.raises(ValueError, match="--task-args"):
        settings.parse_task_args("chain", ("no_such_knob=1",))
    assert len(count_task_arg_parses) == 2
