"""The TRL path a reader can run here (issue 45, item 9): ``examples/trl_tiny.py`` trains a
tiny model offline through ``RefimplGRPOTrainer``; docs/scaleup.md's snippet is that file's;
``run_trl.py`` shows its defaults and takes another model; a step that trained on nothing
says so."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import pytest

from refimpl.scaleup.real_task import step_line

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "trl_tiny.py"
RUN_TRL = ROOT / "scripts" / "experiments" / "real_model" / "run_trl.py"


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_tiny_example_trains_offline(tmp_path, capsys):
    """One rollout of 4 optimizer steps: each step is logged with a finite loss and trains on
    real advantages (the warm start solves about half, so groups differ), the weights move,
    and the held-out success is a rate before and after."""
    result = _module(EXAMPLE).main(
        ["--rollouts", "1", "--eval-problems", "20", "--runs-dir", str(tmp_path)]
    )
    assert len(result["steps"]) == 4
    assert all(math.isfinite(s["loss"]) for s in result["steps"])
    assert result["weight_change"] > 0
    assert 0 <= result["before"] <= 1 and 0 <= result["after"] <= 1
    out = capsys.readouterr().out
    assert "held-out greedy success on 20 problems" in out and "step 4/4" in out


def test_the_example_and_run_trl_show_their_defaults():
    """``--help`` of both scripts prints every default; run_trl.py's model is a choice."""
    for path, flag in ((EXAMPLE, "--rollouts"), (RUN_TRL, "--model")):
        done = subprocess.run(
            [sys.executable, str(path), "--help"], capture_output=True, text=True, cwd=ROOT
        )
        assert done.returncode == 0, done.stderr
        assert flag in done.stdout and "(default: " in done.stdout
        assert "``" not in done.stdout
    run_trl = _module(RUN_TRL)
    assert run_trl.parse_args([]).model == "smollm2"


def test_run_trl_refuses_a_model_that_is_no_directory(tmp_path):
    """A bad ``--model`` is a ValueError naming the flag, before any model is loaded."""
    run_trl = _module(RUN_TRL)
    with pytest.raises(ValueError, match="--model"):
        run_trl.main(["--model", str(tmp_path / "nowhere"), "--algorithms", "grpo"])


@pytest.mark.slow
def test_scaleup_pages_trl_snippet_runs_as_it_stands(tmp_path):
    """docs/scaleup.md's TRL block names no hub model and no undefined name: run as a script
    of its own (offline, in an empty directory), it trains and exits 0."""
    page = (ROOT / "docs" / "scaleup.md").read_text(encoding="utf-8")
    section = page.split("## 2. TRL", 1)[1].split("\n## ", 1)[0]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "HuggingFaceTB/" not in snippet and "trainer.train()" in snippet
    script = tmp_path / "snippet.py"
    script.write_text(snippet + "\nprint('steps', trainer.state.global_step)\n")
    env = {"PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
           "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HOME": str(tmp_path)}  # fmt: skip
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "steps 4" in done.stdout


@pytest.mark.parametrize(
    ("logs", "said"),
    [
        ({"loss": 0.0, "reward": 0.0, "entropy": 0.0, "refimpl/kept_groups_frac": 0.0},
         "dynamic sampling dropped every group"),
        ({"loss": 0.0, "reward": 1.0, "entropy": 0.0, "refimpl/kept_groups_frac": 1.0,
          "refimpl/adv_abs_mean": 0.0}, "every advantage was 0"),
    ],
)  # fmt: skip
def test_a_step_that_trained_on_nothing_says_so(logs, said):
    """The issue's shrunk run: all-zero rewards, dynamic sampling dropped both groups, and
    the step printed "entropy 0.0". Such a step now says it trained on nothing, and why."""
    line = step_line(3, 8, logs)
    assert "trained on nothing" in line and said in line and "entropy" not in line


def test_a_step_that_trained_prints_its_measurements():
    logs = {"loss": 0.1, "reward": 0.5, "entropy": 0.7, "refimpl/kept_groups_frac": 0.5,
            "refimpl/adv_abs_mean": 0.4}  # fmt: skip
    line = step_line(1, 8, logs)
    assert line.startswith("step 1/8 ") and "'entropy': 0.7" in line and "nothing" not in line


def test_every_step_prints_its_loss_and_is_checked_for_training_on_nothing():
    """TRL logs a rollout's reward only on the step that generated it: the printer carries it
    to the rollout's later steps, prints every step's loss, and reads "trained on nothing"
    from the step's own advantages (mean and spread 0), so it can fire on any step."""
    from refimpl.scaleup.real_task import StepPrinter

    class State:
        max_steps = 8
        global_step = 1

    printer, state, lines = StepPrinter(), State(), []
    logs = [
        {"loss": 0.25, "reward": 0.5, "entropy": 0.6, "refimpl/kept_groups_frac": 1.0,
         "refimpl/adv_abs_mean": 0.4, "refimpl/adv_mean": 0.0, "refimpl/adv_std": 0.9},
        {"loss": 0.125, "entropy": 0.6, "refimpl/adv_mean": 0.1, "refimpl/adv_std": 0.8},
        {"loss": 0.0, "entropy": 0.0, "refimpl/adv_mean": 0.0, "refimpl/adv_std": 0.0},
    ]  # fmt: skip
    import contextlib
    import io

    for step, log in enumerate(logs, 1):
        state.global_step = step
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            printer.on_log(None, state, None, logs=log)
        lines.append(out.getvalue())
    assert "'loss': 0.25" in lines[0] and "'rollout reward': 0.5" in lines[0]
    assert "'loss': 0.125" in lines[1] and "'rollout reward': 0.5" in lines[1]
    assert "trained on nothing" in lines[2] and "every advantage was 0" in lines[2]
    assert "loss 0" in lines[2] and "rollout mean reward 0.500" in lines[2]


def test_the_held_out_figure_says_its_problems_are_not_the_warm_starts():
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        _module(EXAMPLE).print_success(200, 0.455, 0.425)
    assert "200 problems" in out.getvalue() and "warm start's own check" in out.getvalue()
