"""Runs are safe to resume, overwrite and interrupt: fault injection on real (tiny) runs.

Every test goes through ``refimpl ...`` (in this process, or in a subprocess for Ctrl-C) on
runs of 3 steps of 4 groups × 4 completions from a 1-layer d = 32 warm start trained once for
the module (the settings of tests/test_train.py). What is injected: a crash between the two
renames of a checkpoint save and during a save, a torn last line in metrics.jsonl, garbage and
missing checkpoint files, read-only directories, SIGINT, and settings that differ on resume.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from refimpl.cli import main as cli_main
from refimpl.runs import checkpoint as ckpt
from refimpl.runs.rundir import read_saved_run
from refimpl.runs.runlog import TornLineWarning, read_jsonl, read_metrics
from refimpl.settings.record import config_from_record
from refimpl.train import Trainer, load_config_file, preflight
from tests.safety_helpers import ROOT, cli, records, resume, snapshot


def tiny_flags(runs: Path) -> list[str]:
    """The command-line flags of a unit-test-sized run whose warm start lives in ``runs``."""
    return [
        "--task-args", "num_ops=1", "--steps", "3", "--prompts-per-step", "4",
        "--group-size", "4", "--eval-every", "2", "--eval-problems", "20",
        "--probe-every", "2", "--probe-prompts", "2", "--checkpoint-every", "2",
        "--lr", "1e-3", "--runs-dir", str(runs), "--no-progress", "--no-plot",
        "--warmstart.steps", "200", "--warmstart.batch-size", "64",
        "--warmstart.eval-problems", "20", "--warmstart.model.n-layer", "1",
        "--warmstart.model.n-embd", "32", "--warmstart.model.n-head", "2",
        "--warmstart.runs-dir", str(runs),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def base(runs) -> Path:
    """A finished 3-step GTPO run with a non-default algorithm setting (alpha_2=0.3)."""
    code = cli_main(
        [
            "train",
            *tiny_flags(runs),
            "--algo",
            "gtpo",
            "--algo-args",
            "alpha_2=0.3",
            "--name",
            "base",
        ]
    )
    assert code == 0
    return runs / "base"


@pytest.fixture(scope="module")
def five_steps(runs, base) -> Path:
    """The same run made with 5 steps from the start (``--config base/config.json``)."""
    argv = ["train", "--config", base / "config.json", "--name", "five", "--steps", "5"]
    assert cli_main([str(a) for a in argv]) == 0
    return runs / "five"


def copy_run(src: Path, name: str) -> Path:
    dst = src.parent / name
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------------------------------------
# The run directory is the source of truth on resume.
# ---------------------------------------------------------------------------------------------


def test_config_json_records_the_settings_and_the_versions(base):
    state = json.loads((base / "config.json").read_text())
    assert state["train_config"]["algo"] == "gtpo"
    assert state["train_config"]["algo_args"] == ["alpha_2=0.3"]
    assert state["algo_config"]["alpha_2"] == 0.3
    v = state["versions"]
    import numpy

    import refimpl

    assert v["refimpl"] == refimpl.__version__
    assert v["torch"] == torch.__version__ and v["numpy"] == numpy.__version__
    assert v["python"] == "{}.{}.{}".format(*sys.version_info[:3])
    if (ROOT / ".git").exists() and shutil.which("git"):
        head = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        assert v["git_commit"].split("+")[0] == head


def test_config_reproduces_a_run(runs, base, capsys):
    """``refimpl train --config RUN/config.json --name NEW`` logs the same metrics."""
    code, _, err = cli(["train", "--config", base / "config.json", "--name", "repro"], capsys)
    assert code == 0, err
    assert records(runs / "repro") == records(base)
    # Without a new name the target is the run itself: refused, the run untouched.
    before = snapshot(base)
    code, _, err = cli(["train", "--config", base / "config.json"], capsys)
    assert code == 2 and "already exists" in err
    assert snapshot(base) == before


def test_resume_keeps_the_saved_settings_and_extends_exactly(runs, base, five_steps, capsys):
    """``--resume --steps 5`` with no other flag continues the GTPO run with alpha_2=0.3
    (the flags' defaults would say GRPO) and logs what a 5-step run logs."""
    run = copy_run(base, "extended")
    code, _, err = cli(resume(runs, "extended", "--steps", "5"), capsys)
    assert code == 0, err
    # Step 3 ended the 3-step run, so it also carries the final held-out evaluation and the
    # last step's entropy attribution (which reads the step and changes nothing in it).
    extended, five = records(run), records(five_steps)
    last_step_only = ("heldout_", "entropy_attr/", "entropy_change_pred_path")
    assert "heldout_greedy" in extended[3] and "heldout_greedy" not in five[3]
    assert "entropy_attr/momentum" in extended[3] and "entropy_attr/momentum" not in five[3]
    extended[3] = {k: v for k, v in extended[3].items() if not k.startswith(last_step_only)}
    assert extended == five
    state = json.loads((run / "config.json").read_text())
    assert state["train_config"]["algo"] == "gtpo"
    assert state["train_config"]["algo_args"] == ["alpha_2=0.3"]
    assert state["train_config"]["steps"] == 5  # the run's new length is recorded
    assert state["resumed"][-1]["at_step"] == 3
    assert state["resumed"][-1]["changed"] == {"steps": 5}
    assert json.loads((run / "checkpoint" / "state.json").read_text())["step"] == 5


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--algo", "grpo"], "--algo"),
        (["--task-args", "num_ops=2"], "--task-args"),
        (["--algo-args", "alpha_2=0.1"], "--algo-args"),
        (["--lr", "0.01"], "--lr"),
        (["--dtype", "bfloat16"], "--dtype"),
        (["--eval-every", "1"], "--eval-every"),
        (["--warmstart.model.n-embd", "64"], "--warmstart.model.n-embd"),
        (["--steps", "2"], "--steps"),  # below the step the run has reached
    ],
)
def test_resume_with_other_settings_is_refused_and_changes_nothing(
    runs, base, flags, named, capsys
):
    before, caches = snapshot(base), sorted((runs / "warmstart").iterdir())
    code, _, err = cli(resume(runs, "base", *flags), capsys)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith(f"refimpl: error: {named}:"), err
    assert snapshot(base) == before
    assert sorted((runs / "warmstart").iterdir()) == caches  # no new base model trained


def test_resume_may_change_how_the_run_is_watched(runs, base, capsys):
    """Flags of RESUME_MAY_CHANGE are accepted and config.json keeps the run's values."""
    run = copy_run(base, "watched")
    flags = ["--threads", "1", "--device", "cpu", "--progress", "--checkpoint-every", "1"]
    threads = torch.get_num_threads()
    try:
        code, _, err = cli(resume(runs, "watched", *flags), capsys)
    finally:  # --threads is process-wide: the other tests' floats depend on it
        torch.set_num_threads(threads)
    assert code == 0, err
    tc = json.loads((run / "config.json").read_text())["train_config"]
    assert tc["checkpoint_every"] == 2 and tc["threads"] is None and tc["progress"] is False
    assert records(run) == records(base)  # already finished: nothing trained again


def test_programmatic_resume_with_other_settings_is_refused(runs, base):
    cfg = load_config_file(base / "config.json")
    with pytest.raises(ValueError, match="^--lr: "):
        Trainer(dataclasses.replace(cfg, runs_dir=runs, resume=True, lr=0.5))


def test_resume_of_a_mistyped_name_creates_nothing(runs, capsys):
    code, _, err = cli(resume(runs, "bsae"), capsys)
    assert code == 2 and "--resume: nothing to resume" in err
    assert not (runs / "bsae").exists()


# ---------------------------------------------------------------------------------------------
# --overwrite deletes only a run.
# ---------------------------------------------------------------------------------------------


def test_overwrite_deletes_only_a_run_directory(runs, base, capsys):
    flags = tiny_flags(runs)
    victim = runs / "victim"
    victim.mkdir()
    (victim / "thesis.tex").write_text("three years of work")
    code, _, err = cli(["train", *flags, "--name", "victim", "--overwrite"], capsys)
    assert code == 2 and "not a run directory" in err and err.count("\n") == 1
    assert (victim / "thesis.tex").read_text() == "three years of work"

    annotated = copy_run(base, "annotated")
    (annotated / "notes.txt").write_text("keep me")
    before = snapshot(annotated)
    code, _, err = cli(["train", *flags, "--name", "annotated", "--overwrite"], capsys)
    assert code == 2 and "notes.txt" in err
    assert snapshot(annotated) == before

    everything = snapshot(runs)
    cache = next((runs / "warmstart").iterdir())
    for argv in (
        ["train", *flags, "--name", ".", "--overwrite"],  # the runs directory itself
        ["train", *flags, "--name", "warmstart", "--overwrite"],  # the warm-start cache
        ["train", *flags, "--runs-dir", runs / "warmstart", "--name", cache.name, "--overwrite"],
        resume(runs, "base", "--overwrite"),
    ):
        code, _, err = cli(argv, capsys)
        assert code == 2 and err.count("\n") == 1, (argv, err)
    assert snapshot(runs) == everything

    # A run is overwritten.
    copy_run(base, "again")
    code, _, err = cli(["train", *flags, "--name", "again", "--overwrite", "--steps", "1"], capsys)
    assert code == 0, err
    assert [r["step"] for r in read_metrics(runs / "again")] == [0, 1]


@pytest.mark.parametrize(
    "files",
    [
        {"config.json": '{"mine": 1}'},  # the issue's
        {"config.json": '{"mine": 1}', "metrics.jsonl": '{"loss": 0.5}\n'},  # another program's
        {"config.json": "my notes, not JSON"},  # no sign of a run beside it
    ],
)
def test_overwrite_proves_that_a_folder_is_a_run_before_it_deletes(runs, capsys, files):
    """Issue 61, lost 1: a folder holding only the user's ``config.json`` (``{"mine": 1}``)
    passed for a damaged run; ``--overwrite`` deleted it and exited 0. A config.json proves
    a run when ``refimpl train`` wrote it, or, damaged, beside the files only a run writes:
    anything else is refused, one line naming the folder, and left as it was."""
    folder = runs / "onlycfg"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    before = snapshot(folder)
    code, _, err = cli(["train", *tiny_flags(runs), "--name", "onlycfg", "--overwrite"], capsys)
    assert code == 2 and err.count("\n") == 1 and "not a run directory" in err, err
    code, _, err = cli(["train", *tiny_flags(runs), "--name", "onlycfg"], capsys)
    assert code == 2 and "is not a run" in err and "--overwrite" not in err, err
    assert snapshot(folder) == before and sorted(p.name for p in folder.iterdir()) == sorted(files)


# ---------------------------------------------------------------------------------------------
# Checkpoints: a crash mid-save, garbage and missing files.
# ---------------------------------------------------------------------------------------------


def crash_between_renames(monkeypatch) -> None:
    """The process dies after ``checkpoint → checkpoint.old`` and before
    ``checkpoint.tmp → checkpoint`` (the window of a save that replaces a checkpoint)."""
    original = os.replace

    def replace(src, dst):
        if Path(src).name == "checkpoint.tmp" and Path(dst).with_name("checkpoint.old").exists():
            raise OSError("simulated crash between the renames")
        return original(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def crash_on_swap(monkeypatch) -> None:
    """The process dies as ``checkpoint.tmp`` (whole) is renamed ``checkpoint``."""
    original = os.replace

    def replace(src, dst):
        if Path(src).name == "checkpoint.tmp":
            raise OSError("simulated crash at the swap")
        return original(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def crash_while_writing(monkeypatch) -> None:
    def save_file(*args, **kwargs):
        raise OSError("simulated crash while writing")

    monkeypatch.setattr(ckpt, "save_file", save_file)


def test_save_checkpoint_always_leaves_one_whole_checkpoint(tmp_path, monkeypatch):
    model = torch.nn.Linear(3, 2)
    path = tmp_path / "checkpoint"
    ckpt.save_checkpoint(path, model, None, {"step": 1})
    # A crash between the two renames of the next save: only checkpoint.old is left.
    with monkeypatch.context() as m:
        crash_between_renames(m)
        with pytest.raises(OSError, match="simulated"):
            ckpt.save_checkpoint(path, model, None, {"step": 2})
    assert not path.exists() and (tmp_path / "checkpoint.old").exists()
    with pytest.warns(UserWarning, match="checkpoint.old"):
        found = ckpt.find_checkpoint(path)
    assert ckpt.read_state(found)["step"] == 1
    # Saves that die before the new checkpoint is in place must not delete checkpoint.old,
    # the only whole one: at the swap, and while writing.
    with monkeypatch.context() as m:
        crash_on_swap(m)
        with pytest.raises(OSError, match="simulated"):
            ckpt.save_checkpoint(path, model, None, {"step": 3})
    assert ckpt.read_state(tmp_path / "checkpoint.old")["step"] == 1
    with monkeypatch.context() as m:
        crash_while_writing(m)
        with pytest.raises(OSError, match="simulated"):
            ckpt.save_checkpoint(path, model, None, {"step": 3})
    assert ckpt.read_state(tmp_path / "checkpoint.old")["step"] == 1
    # The next whole save replaces it.
    ckpt.save_checkpoint(path, model, None, {"step": 4})
    assert ckpt.read_state(path)["step"] == 4 and not (tmp_path / "checkpoint.old").exists()


def test_resume_after_a_crash_mid_save_matches_an_uninterrupted_run(
    runs, base, five_steps, capsys, monkeypatch
):
    """The step-4 save of a 5-step run dies between its renames; ``--resume`` continues
    from checkpoint.old (step 2) and logs exactly the uninterrupted run's metrics."""
    flags = ["train", "--config", base / "config.json", "--name", "crashed", "--steps", "5"]
    with monkeypatch.context() as m:
        crash_between_renames(m)  # the step-2 save has no old checkpoint: the step-4 one dies
        code, _, err = cli(flags, capsys)
    assert code == 1 and err.count("\n") == 1 and "simulated crash" in err, err
    run = runs / "crashed"
    assert not (run / "checkpoint").exists() and (run / "checkpoint.old").exists()
    with pytest.warns(UserWarning, match="checkpoint.old"):
        code, _, err = cli(resume(runs, "crashed"), capsys)
    assert code == 0, err
    assert records(run) == records(five_steps)
    assert not (run / "checkpoint.old").exists()


DAMAGE = {
    "model garbage": ("model.safetensors", b"not a safetensors file"),
    "model missing": ("model.safetensors", None),
    "optimizer garbage": ("optimizer.pt", b"not a torch file"),
    "optimizer missing": ("optimizer.pt", None),
    "state empty": ("state.json", b""),
    "state garbage": ("state.json", b"{step: 3"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_damaged_checkpoint_file_is_one_line_naming_it(runs, base, case, capsys):
    name, content = DAMAGE[case]
    run = copy_run(base, "damaged-" + case.replace(" ", "-"))
    file = run / "checkpoint" / name
    if content is None:
        file.unlink()
    else:
        file.write_bytes(content)
    before = snapshot(run)
    code, _, err = cli(resume(runs, run.name, "--steps", "4"), capsys)
    assert code == 1, err
    lines = [x for x in err.splitlines() if x.startswith("refimpl: error")]
    assert len(lines) == 1 and str(file) in lines[0], err
    assert "Traceback" not in err
    assert snapshot(run) == before  # nothing rewritten


def test_missing_checkpoint_after_logged_steps_is_an_error(runs, base, capsys):
    run = copy_run(base, "no-checkpoint")
    shutil.rmtree(run / "checkpoint")
    code, _, err = cli(resume(runs, run.name), capsys)
    assert code == 1 and str(run / "checkpoint") in err and err.count("\n") == 1


class Killed(BaseException):
    """``kill -9``: nothing of the process's own cleanup runs (not an ``Exception``)."""


def test_a_kill_during_the_first_checkpoint_resumes_from_step_0(runs, base, five_steps, capsys,
                                                                 monkeypatch):  # fmt: skip
    """Issue 61, noise 10: ``kill -9`` during the first checkpoint's save (step 2 of a run
    checkpointed every 2 steps) left ``checkpoint.tmp`` half written, the log at step 2 and
    no checkpoint; ``--resume`` refused it ("checkpoint: missing, although the run logged
    step 2") and only ``--overwrite`` was left. It resumes from step 0, the last whole state,
    says so, and logs exactly what the uninterrupted run logs."""

    def killed_while_writing(*_args, **_kwargs):
        (runs / "killed" / "checkpoint.tmp" / "model.safetensors").write_bytes(b"half a")
        raise Killed

    flags = ["train", "--config", base / "config.json", "--name", "killed", "--steps", "5"]
    with monkeypatch.context() as m:
        m.setattr(ckpt, "save_file", killed_while_writing)
        with pytest.raises(Killed):
            cli(flags, capsys)
    run = runs / "killed"
    assert (run / "checkpoint.tmp").is_dir() and not (run / "checkpoint").exists()
    assert [r["step"] for r in read_metrics(run)] == [0, 1, 2]
    with pytest.warns(UserWarning, match=r"resumes from step 0, .* steps 1…2 are discarded"):
        code, _, err = cli(resume(runs, "killed"), capsys)
    assert code == 0, err
    assert records(run) == records(five_steps)
    assert json.loads((run / "config.json").read_text())["resumed"][-1]["at_step"] == 0


def test_fresh_optimizer_is_a_choice_not_a_default(runs, base, capsys):
    run = copy_run(base, "fresh-adam")
    (run / "checkpoint" / "optimizer.pt").unlink()
    with pytest.warns(UserWarning, match="optimizer.pt: missing: continuing with a fresh"):
        code, _, err = cli(resume(runs, run.name, "--steps", "4", "--fresh-optimizer"), capsys)
    assert code == 0, err
    assert [r["step"] for r in read_metrics(run)] == [0, 1, 2, 3, 4]


# ---------------------------------------------------------------------------------------------
# A torn last line in metrics.jsonl.
# ---------------------------------------------------------------------------------------------


def test_read_jsonl_drops_only_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n{"step": 1}\n{"step": 2, "rew')
    with pytest.warns(TornLineWarning, match="line 3"):
        assert read_jsonl(path) == [{"step": 0}, {"step": 1}]
    path.write_text('{"step": 0}\n{"step": 1, "rew\n{"step": 2}\n')
    with pytest.raises(ValueError, match="metrics.jsonl: line 2"):
        read_jsonl(path)
    path.write_text("")
    assert read_jsonl(path) == []
    with pytest.raises(ValueError, match="no such file"):
        read_jsonl(tmp_path / "missing.jsonl")
    assert read_jsonl(tmp_path / "missing.jsonl", missing_ok=True) == []


def test_torn_last_line_neither_blocks_resume_nor_runs(runs, base, capsys):
    run = copy_run(base, "torn")
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "reward_me')
    with pytest.warns(TornLineWarning):
        code, _, err = cli(resume(runs, "torn", "--steps", "4"), capsys)
    assert code == 0, err
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1, 2, 3, 4]  # every line whole
    code, out, _ = cli(["runs", runs], capsys)
    row = ["torn", "gtpo", "alpha_2=0.3", "chain", "num_ops=1", "0", "4/4"]
    assert code == 0 and any(line.split()[:7] == row for line in out.splitlines()), out


# ---------------------------------------------------------------------------------------------
# Read-only directories.
# ---------------------------------------------------------------------------------------------


def test_cached_warm_start_is_read_without_taking_the_lock(runs, base, capsys, monkeypatch):
    """The lock file is written only to train: a cached model loads from a read-only cache."""

    def no_lock(*args, **kwargs):
        raise PermissionError(13, "Permission denied", str(runs / "warmstart"))

    monkeypatch.setattr("refimpl.warmstart.FileLock", no_lock)
    argv = ["train", "--config", base / "config.json", "--name", "lockless", "--steps", "1"]
    code, _, err = cli(argv, capsys)
    assert code == 0, err


@pytest.fixture
def read_only(tmp_path):
    """chmod a-w on the given directories (restored afterwards); skips where the platform
    ignores it (root, some file systems)."""
    changed: list[Path] = []

    def make(*dirs: Path) -> None:
        for d in dirs:
            for p in [d, *d.rglob("*")]:
                if p.is_dir():
                    p.chmod(0o555)
                    changed.append(p)
        if os.access(dirs[0], os.W_OK):
            pytest.skip("this platform lets the test user write to a read-only directory (root?)")

    yield make
    for p in changed:
        p.chmod(0o755)


def test_read_only_directories_give_one_line(tmp_path, runs, base, capsys, read_only):
    ro_runs = tmp_path / "ro-runs"
    shutil.copytree(runs / "warmstart", ro_runs / "warmstart")
    shutil.copytree(base, ro_runs / "base")
    read_only(ro_runs)
    flags = [*tiny_flags(ro_runs), "--algo", "gtpo", "--algo-args", "alpha_2=0.3"]
    # A new run in a read-only runs directory: refused before anything.
    code, _, err = cli(["train", *flags, "--name", "new"], capsys)
    assert code == 2 and err.count("\n") == 1 and "not writable" in err, err
    # Resuming a read-only run: refused.
    code, _, err = cli(resume(ro_runs, "base", "--steps", "4"), capsys)
    assert code == 2 and err.count("\n") == 1 and "not writable" in err, err
    # Plotting into a read-only run: one line.
    code, _, err = cli(["plot", ro_runs / "base"], capsys)
    assert code == 1 and err.count("\n") == 1 and "curves.png" in err, err
    # A read-only warm-start cache is read (the run itself goes elsewhere).
    argv = ["train", *flags, "--runs-dir", tmp_path / "rw", "--steps", "1"]
    code, _, err = cli([*argv, "--name", "ok"], capsys)
    assert code == 0, err
    # An untrained warm start in a read-only cache: refused before anything.
    code, _, err = cli([*argv, "--name", "ok2", "--warmstart.seed", "1"], capsys)
    assert code == 2 and "--warmstart.runs-dir" in err and err.count("\n") == 1, err
    assert not (tmp_path / "rw" / "ok2").exists()


# ---------------------------------------------------------------------------------------------
# Ctrl-C.
# ---------------------------------------------------------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_writes_a_checkpoint_and_prints_how_to_resume(runs, base, capsys):
    """SIGINT to ``refimpl train`` at the default checkpoint interval (50) loses no step: the
    step in progress ends, is checkpointed, and the printed command continues the run."""
    argv = [
        sys.executable, "-m", "refimpl.cli", "train", "--config", str(base / "config.json"),
        "--name", "ctrl-c", "--steps", "1000", "--checkpoint-every", "50",
        "--eval-every", "1000", "--probe-every", "0",
    ]  # fmt: skip
    run = runs / "ctrl-c"
    proc = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # As from a terminal: SIGINT not ignored, even if this test runs as a background job.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if (run / "metrics.jsonl").exists():
                if len((run / "metrics.jsonl").read_text().splitlines()) >= 3:  # steps 0, 1, 2
                    break
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = err.decode()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    logged = [r["step"] for r in read_metrics(run)]
    stopped = logged[-1]
    assert stopped >= 2 and logged == list(range(stopped + 1))
    assert json.loads((run / "checkpoint" / "state.json").read_text())["step"] == stopped
    command = next(line for line in err.splitlines() if "continue with:" in line)
    resume_argv = shlex.split(command.split("continue with: refimpl ")[1])
    assert resume_argv[:2] == ["train", "--resume"]
    code, _, err = cli([*resume_argv, "--steps", str(stopped + 1)], capsys)
    assert code == 0, err
    assert [r["step"] for r in read_metrics(run)] == list(range(stopped + 2))


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM to this process is POSIX")
def test_a_stop_in_a_steps_values_keeps_the_last_whole_step(runs, capsys, monkeypatch):
    """Issue 61, late 5: a stop waited for the step in progress, and VinePPO's values of a
    step can take hours. SIGTERM while the oracle samples step 2's values: the values are
    dropped, step 1 (not checkpointed by --checkpoint-every 2) is saved as the checkpoint,
    and ``--resume`` logs exactly what the uninterrupted run logs."""
    import refimpl.train as train_module

    flags = [*tiny_flags(runs), "--algo", "vineppo", "--algo-args", "rollouts=4"]
    code, _, err = cli(["train", *flags, "--name", "vine-whole"], capsys)
    assert code == 0, err
    original, calls = train_module.training_values, []

    def stopped_in_step_2(*args, **kwargs):
        calls.append(kwargs["step"])
        if kwargs["step"] == 1:  # the values of step 2 (the loop's step index 1)
            os.kill(os.getpid(), signal.SIGTERM)  # as `kill PID`: the handler asks a stop
        return original(*args, **kwargs)

    monkeypatch.setattr(train_module, "training_values", stopped_in_step_2)
    with pytest.warns(UserWarning, match=r"^step 2 stopped in its Monte-Carlo values"):
        code, _, err = cli(["train", *flags, "--name", "vine-stopped"], capsys)
    monkeypatch.setattr(train_module, "training_values", original)
    run = runs / "vine-stopped"
    assert code == 128 + signal.SIGTERM and calls == [0, 1], err
    assert "checkpoint of step 1 written" in err and "continue with:" in err, err
    assert [r["step"] for r in read_metrics(run)] == [0, 1]
    assert json.loads((run / "checkpoint" / "state.json").read_text())["step"] == 1
    code, _, err = cli(resume(runs, "vine-stopped"), capsys)
    assert code == 0, err
    assert records(run) == records(runs / "vine-whole")


@pytest.mark.slow  # a process of its own: started first among the workers
@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM to a child process is POSIX")
def test_sigterm_ends_a_step_of_4096_rollouts_within_seconds(tmp_path):
    """Issue 61, late 5, as the issue met it: VinePPO with ``rollouts=4096`` (in bounds), a
    first step of some 8 million oracle tokens (minutes on a CPU); SIGTERM printed
    "stopping after this step" and the process was still in step 1 ten minutes later. Now
    the oracle stops before its next sampling call: the process ends within a minute, exit
    code 143, and the run can be resumed (from step 0: it has no whole step yet)."""
    from tests.safety_helpers import python_cli, tiny_flags

    argv = python_cli("train", *tiny_flags(tmp_path, steps=2), "--name", "big",
                      "--algo", "vineppo", "--algo-args", "rollouts=4096",
                      "--prompts-per-step", "64", "--group-size", "8")  # fmt: skip
    run = tmp_path / "big"
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and proc.poll() is None:
            if (run / "metrics.jsonl").is_file() and (run / "metrics.jsonl").read_text():
                break  # step 0 is logged: step 1 samples, then its values
            time.sleep(0.2)
        assert proc.poll() is None, proc.communicate()
        time.sleep(3)
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        _, err = proc.communicate(timeout=60)
        waited = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    err = err.decode()
    assert proc.returncode == 143 and waited < 60, (proc.returncode, waited, err)
    assert "step 1 stopped in its Monte-Carlo values" in err and "Traceback" not in err, err
    assert [r["step"] for r in read_metrics(run)] == [0]
    saved = read_saved_run(run)
    cfg = config_from_record(saved.config, "--resume")
    preflight(dataclasses.replace(cfg, resume=True, runs_dir=tmp_path, name="big"), saved)


# ---------------------------------------------------------------------------------------------
# compare: --runs-dir and --train.resume.
# ---------------------------------------------------------------------------------------------


def test_compare_takes_runs_dir_and_resumes_what_exists(tmp_path, runs, base, capsys):
    train_flags = []
    for flag in tiny_flags(runs):
        train_flags.append(flag.replace("--", "--train.", 1) if flag.startswith("--") else flag)
    i = train_flags.index("--train.runs-dir")
    del train_flags[i : i + 2]  # compare's runs go to --runs-dir
    train_flags.remove("--train.no-progress")  # compare sets each run's progress bar
    argv = ["compare", "--algos", "grpo", "--seeds", "0", "--workers", "1", "--name", "cmp"]
    argv += ["--runs-dir", tmp_path, *train_flags, "--train.steps", "2"]
    code, out, err = cli([*argv, "--train.eval-samples", "2"], capsys)
    assert code == 0, err
    # The message 17: the footnote said "16 samples" whatever --train.eval-samples.
    assert "pass@k: unbiased, from 2 samples per problem (pass@16 needs 16: nan)" in out, out
    run = tmp_path / "cmp" / "grpo-s0"
    assert [r["step"] for r in read_metrics(run)] == [0, 1, 2]
    assert (tmp_path / "cmp" / "compare.png").exists()
    before = records(run)
    code, _, err = cli(
        [*argv, "--train.eval-samples", "2", "--algos", "grpo,gtpo", "--train.resume"], capsys
    )
    assert code == 0, err  # grpo-s0 is continued (already finished), gtpo-s0 is started
    assert records(run) == before
    assert [r["step"] for r in read_metrics(tmp_path / "cmp" / "gtpo-s0")] == [0, 1, 2]
