"""The command line's first contact: help that teaches, bad flags that cost nothing.

Every bad flag must give one line naming it and exit code 2 before anything is written or
trained. The tests make any side effect fail loudly (the warm start and the run directory are
patched to raise) and check that the runs directory was not even created. No test here
trains a model, so the file runs in seconds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

import refimpl
from refimpl import algorithms
from refimpl.cli import COMMANDS
from refimpl.cli import main as cli_main
from refimpl.runs.runlog import TornLineWarning
from toy_envs import TASK_NAMES


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``refimpl ARGV`` in this process: (exit code, stdout, stderr)."""
    code = cli_main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def no_side_effects(monkeypatch):
    """Any attempt to train a warm start or create a run directory fails the test."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a side effect happened before the flags were checked")

    monkeypatch.setattr("refimpl.warmstart._train", forbidden)
    monkeypatch.setattr("refimpl.train.base_model", forbidden)
    monkeypatch.setattr("refimpl.compare.train_warmstart", forbidden)
    monkeypatch.setattr("refimpl.runs.rundir.write_new_run", forbidden)


# ---------------------------------------------------------------------------------------------
# Help, version, completion.
# ---------------------------------------------------------------------------------------------


def test_top_level_help_lists_one_command_per_line(capsys):
    code, out, _ = run_cli(["--help"], capsys)
    assert code == 0
    bullets = [line for line in out.splitlines() if "• " in line]
    named = [line.split("• ")[1].split()[0] for line in bullets]
    assert named == list(COMMANDS), out


def test_train_help_lists_the_algorithm_and_task_choices(capsys):
    code, out, _ = run_cli(["train", "--help"], capsys)
    assert code == 0
    # The choice list may wrap inside the help box: compare without whitespace and box edges.
    flat = "".join(ch for ch in out if not ch.isspace() and ch != "│")
    assert "{" + ",".join(algorithms.NAMES) + "}" in flat
    assert "{" + ",".join(TASK_NAMES) + "}" in flat
    for flag in ("--resume", "--overwrite", "--fresh-optimizer", "--config", "--grad-clip"):
        assert flag in out
    # The warm start's task follows --task: it is not a flag of `train`.
    assert "--warmstart.task" not in out and "--warmstart.progress" not in out
    assert "--warmstart.model.block-size" in out


def test_compare_help_hides_the_train_fields_it_sets_and_takes_runs_dir(capsys):
    code, out, _ = run_cli(["compare", "--help"], capsys)
    assert code == 0
    for hidden in ("--train.algo ", "--train.name", "--train.seed", "--train.runs-dir"):
        assert hidden not in out, hidden
    assert "--train.progress" not in out and "--train.config" not in out
    for shown in ("--runs-dir", "--workers", "--train.steps", "--train.resume", "--train.lr"):
        assert shown in out, shown


def test_version_names_refimpl_torch_and_python(capsys):
    code, out, _ = run_cli(["--version"], capsys)
    assert code == 0
    assert out.startswith(f"refimpl {refimpl.__version__} ")
    assert f"torch {torch.__version__}" in out
    assert "python {}.{}.".format(*sys.version_info[:2]) in out


def test_shell_completion_script_as_the_readme_says(tmp_path, capsys):
    """docs/safety.md: ``refimpl --tyro-write-completion bash FILE`` writes a bash completion."""
    script = tmp_path / "refimpl.bash"
    code, _, _ = run_cli(["--tyro-write-completion", "bash", str(script)], capsys)
    assert code == 0
    text = script.read_text()
    assert "complete" in text and "refimpl" in text
    for command in ("train", "compare", "runs"):
        assert command in text


# ---------------------------------------------------------------------------------------------
# Bad flags: one line naming the flag, exit code 2, nothing created.
# ---------------------------------------------------------------------------------------------

TRAIN_BAD_FLAGS = [
    (["--grad-clip", "-1"], "--grad-clip"),  # was accepted: gradient ascent
    (["--grad-clip", "0"], "--grad-clip"),  # was accepted: frozen training
    (["--top-k", "0"], "--top-k"),
    (["--top-p", "0"], "--top-p"),
    (["--top-p", "5"], "--top-p"),
    (["--probe-prompts", "0"], "--probe-prompts"),
    (["--probe-every", "-1"], "--probe-every"),
    (["--device", "gpu"], "--device"),
    (["--threads", "-1"], "--threads"),
    (["--threads", "0"], "--threads"),
    (["--max-new-tokens", "0"], "--max-new-tokens"),  # was: silently the task's default
    (["--resample-rounds", "-1"], "--resample-rounds"),
    (["--seed", "-1"], "--seed"),
    (["--temperature", "0"], "--temperature"),
    (["--lr", "0"], "--lr"),
    (["--steps", "0"], "--steps"),
    (["--checkpoint-every", "0"], "--checkpoint-every"),
    (["--eval-every", "0"], "--eval-every"),
    (["--max-sampled-tokens", "0"], "--max-sampled-tokens"),
    (["--group-size", "1"], "--group-size"),
    (["--prompts-per-step", "4", "--minibatches", "3"], "--minibatches"),
    (["--dtype", "float16"], "--dtype"),
    (["--algo", "gtpo", "--algo-args", "nonsense=1"], "--algo-args"),
    (["--task-args", "num_ops=x"], "--task-args"),
    (["--warmstart.steps", "0"], "--warmstart.steps"),  # was: "--steps"
    (["--warmstart.lr", "-1"], "--warmstart.lr"),
    (["--warmstart.model.n-head", "3"], "--warmstart.model.n-head"),
    # was: blamed --max-new-tokens; the fix is a bigger model
    (["--task-args", "num_ops=12"], "--warmstart.model.block-size"),
    (["--max-new-tokens", "60"], "--max-new-tokens"),
    (["--name", "."], "--name"),
    (["--name", ".."], "--name"),
    (["--name", "a/../../b"], "--name"),
    (["--resume", "--name", "no-such-run"], "--resume"),  # was: a new run
    (["--config", "no/such/config.json"], "--config"),
    # tyro's own errors, also on one line
    (["--algo", "ppo"], "--algo"),
    (["--task", "chess"], "--task"),
    (["--steps", "x"], "--steps"),
    (["--no-such-flag", "1"], "--no-such-flag"),
]
if not torch.backends.mps.is_available():
    TRAIN_BAD_FLAGS.append((["--device", "mps"], "--device"))
if not torch.cuda.is_available():
    TRAIN_BAD_FLAGS.append((["--device", "cuda"], "--device"))


@pytest.mark.parametrize(("flags", "named"), TRAIN_BAD_FLAGS, ids=lambda x: " ".join(x))
def test_bad_train_flag_is_one_line_exit_2_and_nothing_created(
    flags, named, tmp_path, capsys, no_side_effects
):
    runs = tmp_path / "runs"
    argv = ["train", *flags, "--runs-dir", str(runs), "--warmstart.runs-dir", str(runs)]
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("refimpl: error: ") and named in lines[0], lines[0]
    assert not runs.exists()


def test_algo_error_lists_the_valid_names(tmp_path, capsys, no_side_effects):
    code, _, err = run_cli(["train", "--algo", "ppo", "--runs-dir", str(tmp_path)], capsys)
    assert code == 2
    assert all(name in err for name in algorithms.NAMES)


def test_missing_tensorboard_is_caught_before_the_run_directory(
    tmp_path, capsys, monkeypatch, no_side_effects
):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails
    runs = tmp_path / "runs"
    argv = ["train", "--tensorboard", "--runs-dir", str(runs), "--warmstart.runs-dir", str(runs)]
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and err.count("\n") == 1 and "--tensorboard" in err
    assert not runs.exists()


def test_resume_and_overwrite_together_and_config_with_resume_are_refused(
    tmp_path, capsys, no_side_effects
):
    runs = tmp_path / "runs"
    run = runs / "r"
    run.mkdir(parents=True)
    (run / "config.json").write_text(
        json.dumps({"train_config": {"algo": "grpo", "task": "chain"}})
    )
    before = sorted(p.name for p in run.iterdir())
    for extra, named in ((["--overwrite"], "--overwrite"), (["--config", "x.json"], "--config")):
        argv = ["train", "--resume", "--name", "r", "--runs-dir", str(runs), *extra]
        code, _, err = run_cli(argv, capsys)
        assert code == 2 and named in err and err.count("\n") == 1, err
    assert sorted(p.name for p in run.iterdir()) == before


COMPARE_BAD_FLAGS = [
    (["--workers", "-1"], "--workers"),
    (["--seeds", "-1"], "--seeds"),
    (["--seeds", "a"], "--seeds"),
    (["--algos", "grpo,ppo"], "ppo"),
    (["--name", "."], "--name"),
    (["--target", "2"], "--target"),
    (["--train.grad-clip", "-1"], "--train.grad-clip"),
    (["--train.warmstart.steps", "0"], "--train.warmstart.steps"),
    (["--train.algo", "gtpo"], "--train.algo"),  # set by --algos: not a flag of compare
    # the message 14: the second run of a duplicate failed after the first trained
    (["--algos", "grpo,dapo,grpo"], "--algos: grpo is given twice"),
    (["--algos", "grpo,GRPO"], "--algos: grpo is given twice"),
    (["--seeds", "0,1,0"], "--seeds: 0 is given twice"),
]


@pytest.mark.parametrize(("flags", "named"), COMPARE_BAD_FLAGS, ids=lambda x: " ".join(x))
def test_bad_compare_flag_is_one_line_exit_2_and_nothing_created(
    flags, named, tmp_path, capsys, no_side_effects
):
    runs = tmp_path / "runs"
    argv = ["compare", *flags, "--runs-dir", str(runs), "--train.warmstart.runs-dir", str(runs)]
    code, out, err = run_cli(argv, capsys)
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and err.startswith("refimpl: error: ") and named in err, err
    assert not runs.exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["train", "--runs-dir", ""],
        ["train", "--runs-dir="],
        ["train", "--warmstart.runs-dir", ""],
        ["compare", "--algos", "grpo", "--runs-dir", ""],
        ["compare", "--algos", "grpo", "--train.warmstart.runs-dir="],
        ["warmstart", "--runs-dir", ""],
    ],
    ids=" ".join,
)
def test_an_empty_path_is_refused_not_read_as_this_directory(
    argv, tmp_path, capsys, monkeypatch, no_side_effects
):
    """The issue's bound 5: ``--runs-dir ""`` created the run in the current directory
    (``Path("")`` is ``.``)."""
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli(argv, capsys)
    flag = next(a for a in reversed(argv) if a.startswith("--")).split("=")[0]
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"refimpl: error: {flag}: expected a path, got an empty string"), err
    assert not any(tmp_path.iterdir())


def test_negative_workers_are_refused_by_every_runner(tmp_path, capsys, no_side_effects):
    """``--workers -1`` (compare refuses it, see COMPARE_BAD_FLAGS) was taken by
    ``bench-learning`` and by ``refimpl.compare.run_in_workers``, which ran the runs one
    after another as if it were 1."""
    from refimpl.compare import run_in_workers

    out = tmp_path / "bench"
    code, _, err = run_cli(["bench-learning", "--workers", "-1", "--out", str(out)], capsys)
    assert code == 2 and err.count("\n") == 1 and "--workers: expected an integer ≥ 0" in err
    assert not out.exists()
    with pytest.raises(ValueError, match=r"^workers: expected an integer ≥ 0"):
        run_in_workers([], -1)


@pytest.mark.parametrize(
    ("flags", "named"),
    [(["--steps", "0"], "--steps"), (["--model.n-head", "3"], "--model.n-head")],
)
def test_bad_warmstart_flag_is_one_line_exit_2(flags, named, tmp_path, capsys, no_side_effects):
    code, _, err = run_cli(["warmstart", *flags, "--runs-dir", str(tmp_path / "r")], capsys)
    assert code == 2 and err.count("\n") == 1 and named in err, err
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------------------------------------
# plot and runs, on directories written by hand (the trainer's format, independently).
# ---------------------------------------------------------------------------------------------


def fake_run(path: Path, algo: str, task: str, steps: int, heldout: list[tuple[int, float]]):
    """A run directory as the trainer writes it: config.json and metrics.jsonl."""
    path.mkdir(parents=True)
    tc = {"algo": algo, "task": task, "seed": 0, "steps": steps, "algo_args": [], "task_args": []}
    (path / "config.json").write_text(json.dumps({"train_config": tc}))
    records = [{"step": s} for s in range(steps + 1)]
    for s, value in heldout:
        records[s]["heldout_greedy"] = value
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))


def test_runs_lists_runs_at_any_depth_with_their_last_heldout_success(tmp_path, capsys):
    fake_run(tmp_path / "a", "gtpo", "chain", 4, [(0, 0.25), (2, 0.5), (4, 0.625)])
    fake_run(tmp_path / "cmp" / "tepo-s1", "tepo", "countdown", 2, [(0, 0.125)])
    (tmp_path / "warmstart" / "chain-x").mkdir(parents=True)  # the cache is not a run
    (tmp_path / "notes").mkdir()
    code, out, err = run_cli(["runs", str(tmp_path)], capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].split() == [
        "run", "algo", "task", "seed", "steps", "end", "held-out", "greedy"
    ]  # fmt: skip
    assert lines[1].split() == ["a", "gtpo", "chain", "0", "4/4", "done", "0.625", "@", "4"]
    assert lines[2].split() == [
        "cmp/tepo-s1", "tepo", "countdown", "0", "2/2", "done", "0.125", "@", "0"
    ]  # fmt: skip
    assert len(lines) == 3
    code, out, _ = run_cli(["runs", str(tmp_path / "notes")], capsys)
    assert code == 0 and "no runs" in out
    code, _, err = run_cli(["runs", str(tmp_path / "missing")], capsys)
    assert code == 2 and "runs_dir" in err


def test_runs_says_whether_a_run_reached_its_budget_or_stopped(tmp_path, capsys):
    """The issue's "83/4000" against "29/4000": a run that reached its steps or its token
    budget is ``done``, one that ended before either (Ctrl-C, a kill) ``stopped`` with the
    command that continues it, and one whose lock a process holds ``running``."""
    from refimpl.runs.lock import RunLock
    from refimpl.runs.runlog import LOCK_FILE

    fake_run(tmp_path / "full", "grpo", "chain", 4, [(0, 0.25)])
    fake_run(tmp_path / "cut", "grpo", "chain", 4, [(0, 0.25)])
    fake_run(tmp_path / "live", "grpo", "chain", 4, [(0, 0.25)])
    for name in ("cut", "live"):  # 2 of 4 steps logged
        log = tmp_path / name / "metrics.jsonl"
        log.write_text("".join(log.read_text().splitlines(keepends=True)[:3]))
    fake_run(tmp_path / "tokens", "grpo", "chain", 4000, [(0, 0.25)])
    config = json.loads((tmp_path / "tokens" / "config.json").read_text())
    config["train_config"]["max_sampled_tokens"] = 100
    (tmp_path / "tokens" / "config.json").write_text(json.dumps(config))
    records = [{"step": 0, "sampled_tokens": 0}, {"step": 1, "sampled_tokens": 60},
               {"step": 2, "sampled_tokens": 120}]  # fmt: skip
    (tmp_path / "tokens" / "metrics.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in records)
    )
    (tmp_path / "cut" / LOCK_FILE).write_text("")  # a lock file nobody holds: not running
    with RunLock(tmp_path / "live", "--name"):
        code, out, err = run_cli(["runs", str(tmp_path)], capsys)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.strip().splitlines()[1:5]}
    assert rows["full"][4:6] == ["4/4", "done"]
    assert rows["cut"][4:6] == ["2/4", "stopped"]
    assert rows["live"][4:6] == ["2/4", "running"]
    # A run its token budget ended says how far it got in tokens, not "2/4000" steps.
    assert rows["tokens"][4:9] == ["2", "(120/100", "tokens)", "done:", "tokens"]
    assert "stopped: ended before its budget" in out and "train --resume" in out
    assert "done: tokens: reached its --max-sampled-tokens" in out


def test_runs_lists_a_run_whose_config_or_log_is_a_directory_as_damaged(tmp_path, capsys):
    """The issue's message 13: one run with ``metrics.jsonl`` or ``config.json`` as a
    directory aborted the whole listing."""
    fake_run(tmp_path / "a", "gtpo", "chain", 2, [(0, 0.25)])
    for name, file in (("b", "metrics.jsonl"), ("c", "config.json")):
        fake_run(tmp_path / name, "grpo", "chain", 2, [(0, 0.25)])
        (tmp_path / name / file).unlink()
        (tmp_path / name / file).mkdir()
    code, out, err = run_cli(["runs", str(tmp_path)], capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[1].split() == ["a", "gtpo", "chain", "0", "2/2", "done", "0.250", "@", "0"]
    assert lines[2].startswith("b ") and "damaged: metrics.jsonl: not readable" in lines[2]
    assert lines[3].startswith("c ") and "damaged: config.json: not readable" in lines[3]
    assert lines[4].startswith("2 damaged run directories: restore the file named"), out


def test_plot_without_arguments_or_on_a_non_run_is_an_error(tmp_path, capsys):
    code, _, err = run_cli(["plot"], capsys)
    assert code == 2 and err.count("\n") == 1 and "run_dirs" in err
    (tmp_path / "empty").mkdir()
    code, _, err = run_cli(["plot", str(tmp_path / "empty")], capsys)
    assert code == 2 and err.count("\n") == 1 and "config.json" in err


def test_plot_draws_a_run_with_a_torn_last_line(tmp_path, capsys):
    fake_run(tmp_path / "a", "grpo", "chain", 3, [(0, 0.25), (3, 0.5)])
    with open(tmp_path / "a" / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "rew')  # a crash mid-write
    with pytest.warns(TornLineWarning, match="torn last line"):
        code, out, err = run_cli(["plot", str(tmp_path / "a")], capsys)
    assert code == 0, err
    assert (tmp_path / "a" / "curves.png").stat().st_size > 0


@pytest.mark.parametrize("value", [None, {"x": 1}, [0.5], "0.5", True])
def test_runs_lists_a_run_whose_last_heldout_value_is_no_number_as_damaged(tmp_path, capsys, value):
    """The issue's traceback 14: ``"heldout_greedy": null`` (or a dict, a list) in one run's
    last evaluation aborted the whole listing; a string gave a line naming no run. That run
    is listed as damaged, naming the file and the value; the others are listed."""
    fake_run(tmp_path / "a", "gtpo", "chain", 2, [(0, 0.25)])
    fake_run(tmp_path / "b", "grpo", "chain", 2, [(0, 0.25), (2, value)])
    code, out, err = run_cli(["runs", str(tmp_path)], capsys)
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[1].split() == ["a", "gtpo", "chain", "0", "2/2", "done", "0.250", "@", "0"]
    assert lines[2].startswith("b ") and "damaged: metrics.jsonl: record 3" in lines[2], out
    assert f"heldout_greedy {json.dumps(value)}, not a number" in lines[2], out


def test_runs_and_plot_name_the_file_of_a_value_no_run_writes(tmp_path, capsys):
    """The issue's tracebacks 14 and 15: ``refimpl plot`` on a dict metric value or on
    ``"algo": 5`` in config.json was a traceback, and a step of 2^70 in a 2-step run was
    listed as ``1180591620717411303424/2``. Each is one line (a damaged row) naming the
    file."""
    fake_run(tmp_path / "dict", "grpo", "chain", 2, [(0, 0.25)])
    records = (tmp_path / "dict" / "metrics.jsonl").read_text().splitlines()
    records[1] = json.dumps({"step": 1, "reward_mean": {"oops": 1}})
    (tmp_path / "dict" / "metrics.jsonl").write_text("\n".join(records) + "\n")
    code, _, err = run_cli(["plot", str(tmp_path / "dict")], capsys)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{tmp_path / 'dict' / 'metrics.jsonl'}: record 2 has reward_mean" in err, err
    assert not (tmp_path / "dict" / "curves.png").exists()
    fake_run(tmp_path / "five", "grpo", "chain", 2, [(0, 0.25)])
    config = json.loads((tmp_path / "five" / "config.json").read_text())
    config["train_config"]["algo"] = 5
    (tmp_path / "five" / "config.json").write_text(json.dumps(config))
    code, _, err = run_cli(["plot", str(tmp_path / "five")], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{tmp_path / 'five' / 'config.json'}: train_config.algo is 5" in err, err
    fake_run(tmp_path / "far", "grpo", "chain", 2, [(0, 0.25)])
    with open(tmp_path / "far" / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2**70}) + "\n")
    code, out, err = run_cli(["runs", str(tmp_path)], capsys)
    assert code == 0, err
    rows = {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}
    assert "damaged: config.json: train_config.algo is 5" in rows["five"], out
    assert "damaged: metrics.jsonl: record 4 has step 1180591620717411303424" in rows["far"]
    assert "/2" not in rows["far"], out


#: A Python program that raises KeyboardInterrupt where refimpl.cli imports refimpl.train (as
#: Ctrl-C while torch loads would), then starts refimpl as ARGV[1] says.
INTERRUPTED_START = """
import runpy, sys
class Interrupt:
    def find_spec(self, name, path=None, target=None):
        if name == "refimpl.train":
            raise KeyboardInterrupt
sys.meta_path.insert(0, Interrupt())
how = sys.argv[1]
if how == "-m":  # python -m refimpl.cli tasks
    sys.argv = ["refimpl", "tasks"]
    runpy.run_module("refimpl.cli", run_name="__main__", alter_sys=True)
else:  # the `refimpl` script pip writes, or a program of its own importing refimpl.cli
    sys.argv = ["/venv/bin/refimpl" if how == "script" else "notebook", "tasks"]
    from refimpl.cli import main
    sys.exit(main())
"""


@pytest.mark.parametrize("how", ["-m", "script", "library"])
def test_ctrl_c_while_starting_is_one_line_and_exit_130(how):
    """The issue's traceback 11: Ctrl-C during start-up, before the run directory exists,
    was a raw KeyboardInterrupt through import frames. As the program it is one line and
    exit code 130; imported by another program, the interrupt stays that program's."""
    import subprocess

    from tests.safety_helpers import ROOT

    done = subprocess.run(
        [sys.executable, "-c", INTERRUPTED_START, how],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    if how == "library":
        assert done.returncode != 0 and "KeyboardInterrupt" in done.stderr, done.stderr
        return
    assert done.returncode == 130, done.stderr
    assert done.stderr == "refimpl: interrupted while starting (nothing was written)\n"


def test_ctrl_c_while_the_flags_are_parsed_is_one_line_and_exit_130(capsys, monkeypatch):
    """Ctrl-C after the imports, while tyro parses the flags (outside every command)."""
    import refimpl.cli as cli

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "_parse", interrupted)
    try:
        code, out, err = run_cli(["tasks"], capsys)
    except KeyboardInterrupt:  # would stop the test session itself
        pytest.fail("KeyboardInterrupt escaped refimpl.cli.main")
    assert code == 130 and out == ""
    assert err == "refimpl: interrupted while starting (nothing was written)\n"


def test_train_ends_with_success_before_and_after_the_figures_and_the_run(tmp_path, capsys):
    """The issue's item 7: ``refimpl train`` ended silently after its progress bar. It ends
    with held-out greedy success at step 0 and at the end (as its metrics.jsonl logged them),
    where the figures are (or how to draw them), and the run directory."""
    from tests.safety_helpers import tiny_flags

    runs = tmp_path / "runs"
    flags = [f for f in tiny_flags(runs, steps=2) if f != "--no-plot"]
    code, out, err = run_cli(["train", *flags, "--name", "drawn"], capsys)
    assert code == 0, err
    run = runs / "drawn"
    evals = [
        r for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
        if "heldout_greedy" in r
    ]  # fmt: skip
    a, b = evals[0]["heldout_greedy"], evals[-1]["heldout_greedy"]
    assert evals[0]["step"] == 0 and evals[-1]["step"] == 2
    lines = out.strip().splitlines()[-3:]
    assert lines[0] == (
        f"held-out greedy success on 4 problems: {a:.3f} at step 0 → {b:.3f} at step 2 "
        f"({b - a:+.3f})"
    )
    assert lines[1] == f"figures: {run / 'curves.png'}" and (run / "curves.png").is_file()
    assert lines[2] == f"run directory: {run}"
    code, out, err = run_cli(["train", *tiny_flags(runs, steps=1), "--name", "plain"], capsys)
    assert code == 0, err
    assert f"figures: none (--no-plot); `refimpl plot {runs / 'plain'}` draws them" in out


@pytest.mark.parametrize("command", list(COMMANDS))
def test_help_shows_no_rest_markup_and_no_empty_default(command, capsys):
    """The issue's item 10: ``--help`` showed reST's double backquotes and "(default: )" for
    an empty list; every command's help now shows `code` and "(default: none)"."""
    code, out, _ = run_cli([command, "--help"], capsys)
    assert code == 0
    flat = "".join(ch for ch in out if not ch.isspace() and ch != "│")
    assert "``" not in flat
    assert "(default:)" not in flat


def test_help_text_joins_a_paragraph_and_keeps_list_items():
    """A docstring's indented continuation lines join their sentence (tyro broke the line
    before each); a blank line still separates paragraphs and a list item starts a line."""
    from refimpl.cli import help_text

    doc = "also stop (None: no budget;\n    dynamic sampling draws more)\n\n    Two:\n    - a\n    - ``b``"
    assert (
        help_text(doc)
        == "also stop (None: no budget; dynamic sampling draws more)\n\nTwo:\n- a\n- `b`"
    )


def test_every_train_flag_help_is_one_paragraph():
    """What tyro shows for each TrainConfig field (its docstring, through ``help_text``) has
    no line break, so no flag's help breaks mid-sentence."""
    import dataclasses

    from tyro import _docstrings

    from refimpl.cli import _plain_help
    from refimpl.settings.train_config import TrainConfig

    with _plain_help():
        for f in dataclasses.fields(TrainConfig):
            doc = _docstrings.get_field_docstring(TrainConfig, f.name, ()) or ""
            assert "\n" not in doc, (f.name, doc)


def test_algos_lists_the_shared_fields_once(capsys):
    """The issue's item 10: ``refimpl algos`` repeated the shared Config fields under every
    algorithm. They are listed once; an algorithm shows one again only where its default
    differs from GRPO's (DAPO's dynamic sampling), and every own field (GTPO's alpha_2)."""
    from refimpl import contract

    code, out, _ = run_cli(["algos"], capsys)
    assert code == 0
    grpo = algorithms.get("grpo").Config()
    for field in contract.CONFIG_FIELDS:
        differ = [
            n for n in algorithms.NAMES
            if getattr(algorithms.get(n).Config(), field) != getattr(grpo, field)
        ]  # fmt: skip
        assert out.count(f" {field}=") == 1 + len(differ), field
    assert out.count("success_threshold=") == 1
    dapo = out.split("\ndapo ", 1)[1].splitlines()[1]
    assert "dynamic_sampling=True" in dapo
    gtpo = out.split("\ngtpo ", 1)[1].splitlines()[1]
    assert "alpha_2=" in gtpo


@pytest.mark.parametrize("command", [["algos"], ["runs", "RUNS"], ["tasks"]])
def test_a_listing_into_a_closed_pipe_ends_quietly(tmp_path, command):
    """Issue 61, noise 9: ``refimpl algos | head -1`` and ``refimpl runs DIR | head -1``
    printed ``refimpl: error: Broken pipe`` and exited 1 (the pipe's error was taken for a
    full disk). The reader is gone before a byte is written: nothing on stderr, and the exit
    code of a process that SIGPIPE ended, 141, as ``--help | head`` gives."""
    import os
    import subprocess

    from tests.safety_helpers import ROOT, python_cli

    fake_run(tmp_path / "a", "gtpo", "chain", 2, [(0, 0.25)])
    argv = [str(tmp_path) if a == "RUNS" else a for a in command]
    proc = subprocess.Popen(
        python_cli(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    proc.stdout.close()  # the reader is gone before a byte is written
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert err == "" and proc.returncode == 141, (proc.returncode, err)


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["credit", "--rollouts", "2,,4"], "--rollouts"),  # the issue's
        (["credit", "--rollouts=2,4,"], "--rollouts"),
        (["credit", "--algos", "grpo,,dapo"], "--algos"),
        (["compare", "--seeds", "0,,1"], "--seeds"),
        (["compare", "--algos", ",grpo"], "--algos"),
        (["bench-learning", "--tasks", "countdown,,chain"], "--tasks"),
    ],
)
def test_an_empty_item_in_a_comma_separated_flag_is_refused(tmp_path, capsys, no_side_effects,
                                                             argv, named):  # fmt: skip
    """Issue 61, silent 4: ``--rollouts 2,,4`` was read as K = 2, 4 (empty items skipped), a
    typo taken for a choice. Every comma-separated flag refuses an empty item, one line
    naming it, before anything is loaded or written."""
    out = tmp_path / "out"
    paths = {"credit": ["--out", out / "c.json"], "compare": ["--runs-dir", out],
             "bench-learning": ["--out", out]}[argv[0]]  # fmt: skip
    code, _, err = run_cli([*argv, *map(str, paths)], capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"refimpl: error: {named}: ") and "empty item" in err, err
    assert not out.exists()


@pytest.mark.parametrize(
    "command", ["train", "warmstart", "compare", "bench-learning", "bench-speed", "credit", "runs"]
)
def test_help_names_no_internal_module_or_constant_and_no_doubled_default(command, capsys):
    """A help text speaks the user's words: no module path (``refimpl.runs.shipped``), no
    constant (``RESUME_MAY_CHANGE``, ``WARMSTART_MIX``), no settings class (``LoopConfig``,
    ``TrainConfig``, ``GPTConfig``), and a flag's own text never states a default beside the
    one the parser prints ("(default: <task>-<algo>-s<seed>) (default: None)")."""
    import re

    code, out, _ = run_cli([command, "--help"], capsys)
    assert code == 0
    text = re.sub(r"\s+", " ", out.replace("│", " "))
    assert not re.search(r"\brefimpl\.[a-z_]+\.[a-z_]+", text), command
    assert not re.search(r"\b[A-Z][A-Z_]{5,}[A-Z]\b", text.replace("OPTIONS", "")
                         .replace(command.upper(), "")), command  # fmt: skip
    assert not re.search(r"\b(Loop|Train|GPT|Warmstart|Learning|Credit)Config\b", text), command
    assert not re.search(r"\(default: [^)]*\) \(default:", text), command


def test_runs_takes_runs_dir_as_train_does(tmp_path, capsys):
    """``refimpl runs --runs-dir X`` lists X, as ``refimpl runs X`` does (train takes
    --runs-dir); a PATH that disagrees with it is refused, naming both."""
    fake_run(tmp_path / "r1", "grpo", "chain", 4, [(0, 0.25)])
    code, by_flag, err = run_cli(["runs", "--runs-dir", str(tmp_path)], capsys)
    assert code == 0, err
    code, by_path, _ = run_cli(["runs", str(tmp_path)], capsys)
    assert by_flag == by_path and "r1" in by_flag
    code, _, err = run_cli(["runs", str(tmp_path), "--runs-dir", str(tmp_path / "other")], capsys)
    assert code == 2 and "--runs-dir" in err and err.count("\n") == 1
