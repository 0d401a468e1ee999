"""A run directory is owned by one process (issue: nothing lost, nothing silently wrong).

Real processes on real (tiny) runs: a second ``train``, ``--resume`` or ``--overwrite`` of a
run that is still training is refused with one line and exit 2, and the running run's log is
intact; two ``train`` started together: exactly one trains; the lock is released by the
kernel when the holder is killed; ``--overwrite`` deletes only what a run writes, at every
depth.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest

from tests.safety_helpers import (
    ROOT,
    cli,
    copy_run,
    error_lines,
    make_run,
    python_cli,
    resume,
    snapshot,
    steps_logged,
    tiny_flags,
)

POSIX = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def base(runs) -> Path:
    return make_run(runs, "base", "--algo", "grpo")


def wait_for_steps(proc: subprocess.Popen, metrics: Path, n: int, timeout: float = 300) -> None:
    """Until ``metrics`` holds ``n`` lines (the process still running)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= n:
            return
        time.sleep(0.1)
    out, err = proc.communicate(timeout=60) if proc.poll() is not None else ("", "")
    raise AssertionError(f"the run did not log {n} lines: {err}")


def logged_steps(run_dir: Path) -> list[int]:
    with warnings.catch_warnings():  # the killed process may have torn its last line
        warnings.simplefilter("ignore")
        return steps_logged(run_dir)


@POSIX
def test_a_running_run_is_refused_to_a_second_process_and_freed_when_it_dies(tmp_path, capsys):
    """While a run trains, ``--overwrite``, ``--resume`` and a plain ``train`` of the same
    name are one line each, exit 2, and change nothing of it (the issue's data losses 1 and
    2: ``--overwrite`` deleted it, ``--resume`` appended a second history into it). Killed
    with SIGKILL, it leaves no stale lock: ``--resume`` then continues it."""
    runs, run = tmp_path, tmp_path / "busy"
    flags = tiny_flags(runs, steps=100_000)
    proc = subprocess.Popen(
        python_cli("train", *flags, "--name", "busy"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_steps(proc, run / "metrics.jsonl", 3)
        config = (run / "config.json").read_text()
        for argv in (
            ["train", *tiny_flags(runs), "--name", "busy", "--overwrite"],
            resume(runs, "busy", "--steps", 100_000),
            ["train", *tiny_flags(runs), "--name", "busy"],
        ):
            logged_before = logged_steps(run)
            code, _, err = cli(argv, capsys)
            assert code == 2, (argv, err)
            assert len(error_lines(err)) == 1 and err.count("\n") == 1, err
            assert "in use by another refimpl process" in err and f"pid {proc.pid}" in err, err
            assert proc.poll() is None  # the run goes on
            assert logged_steps(run)[: len(logged_before)] == logged_before
        assert (run / "config.json").read_text() == config
        assert "resumed" not in json.loads(config)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    logged = logged_steps(run)
    assert logged == list(range(len(logged)))  # one history, no step twice
    # The kernel released the lock with the process: the run continues from its checkpoint.
    state = json.loads((run / "checkpoint" / "state.json").read_text())
    code, _, err = cli(resume(runs, "busy", "--steps", state["step"] + 1), capsys)
    assert code == 0, err
    assert steps_logged(run) == list(range(state["step"] + 2))


# Widens the window between creating a run directory and writing its config.json (on the
# code before the lock, a second process saw an empty directory there and trained into it).
SLOW_CREATION = """
import sys, time
from pathlib import Path
import refimpl.runs.rundir as rundir
write = rundir.write_text_atomic
def slow(path, text):
    if Path(path).name == "config.json" and not Path(path).exists():
        time.sleep(3)
    return write(path, text)
rundir.write_text_atomic = slow
from refimpl.cli import main
sys.exit(main(sys.argv[1:]))
"""


@POSIX
def test_two_trains_started_together_one_trains_and_the_other_exits_2(tmp_path):
    """The issue's data loss 2: two ``refimpl train --name X`` at once. Exactly one
    proceeds; the other is one line, exit 2; the winner's log holds each step once."""
    argv = ["train", *tiny_flags(tmp_path), "--name", "race"]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SLOW_CREATION, *map(str, argv)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    results = [(p.wait(timeout=600), *p.communicate()) for p in procs]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], results
    loser_err = next(err for code, _, err in results if code == 2)
    assert len(error_lines(loser_err)) == 1 and "Traceback" not in loser_err, loser_err
    assert "in use by another refimpl process" in loser_err or "already exists" in loser_err
    run = tmp_path / "race"
    assert steps_logged(run) == [0, 1, 2, 3]
    assert json.loads((run / "config.json").read_text())["train_config"]["name"] == "race"


def test_overwrite_deletes_only_what_a_run_writes_at_every_depth(runs, base, capsys):
    """The issue's data loss 3: ``--overwrite`` checked only the top-level names, so it
    deleted ``checkpoint/notes.txt`` and ``tensorboard/other/...``. Now anything a run does
    not write, at any depth, is refused naming it; a run's own files (TensorBoard's event
    files included) are deleted, its lock file is kept."""
    flags = [*tiny_flags(runs), "--algo", "grpo", "--overwrite"]
    foreign = {  # what is put into a copy of the run → what the refusal names
        "checkpoint/notes.txt": "checkpoint/notes.txt",
        "tensorboard/other/events.out.tfevents.1": "tensorboard/other",
        "notes/a": "notes",
    }
    for extra, named in foreign.items():
        run = copy_run(base, "deep-" + extra.split("/")[0])
        (run / extra).parent.mkdir(parents=True, exist_ok=True)
        (run / extra).write_text("keep me")
        before = snapshot(run)
        code, _, err = cli(["train", *flags, "--name", run.name], capsys)
        assert code == 2 and len(error_lines(err)) == 1, err
        assert named in err and "refusing to delete it" in err, err
        assert snapshot(run) == before
    link = copy_run(base, "deep-link")
    (link / "checkpoint" / "elsewhere").symlink_to(runs)
    code, _, err = cli(["train", *flags, "--name", link.name], capsys)
    assert code == 2 and "checkpoint/elsewhere" in err, err
    # A run with what a run writes, TensorBoard included, is overwritten; the lock file stays.
    ok = copy_run(base, "deep-ok")
    (ok / "tensorboard").mkdir()
    (ok / "tensorboard" / "events.out.tfevents.1.host.1.0").write_bytes(b"x")
    code, _, err = cli(["train", *flags, "--name", ok.name, "--steps", "1"], capsys)
    assert code == 0, err
    assert steps_logged(ok) == [0, 1] and not (ok / "tensorboard").exists()
    assert (ok / "run.lock").exists()  # the lock file stays (it is held)


def test_a_run_directory_that_is_a_symbolic_link_is_never_followed(runs, base, capsys, tmp_path):
    """The issue's data loss 1: ``runs/O12 -> /elsewhere/run`` (a whole run outside the
    runs directory), and ``train --name O12 --overwrite`` exited 0 after deleting and
    rewriting the files in /elsewhere/run. Every mode is refused, naming the link; the run
    it points to is untouched."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = copy_run(base, "O12-target")
    target = target.rename(elsewhere / "run")
    (runs / "O12").symlink_to(target)
    before = snapshot(target)
    flags = [*tiny_flags(runs), "--algo", "grpo", "--name", "O12"]
    for argv in (["train", *flags, "--overwrite"], ["train", *flags], resume(runs, "O12")):
        code, _, err = cli(argv, capsys)
        assert code == 2 and len(error_lines(err)) == 1 and "Traceback" not in err, err
        line = error_lines(err)[0]
        assert f"--name: {runs / 'O12'} is a symbolic link" in line, line
        assert f"--runs-dir {elsewhere} --name run" in line, line  # the way to use it
        assert snapshot(target) == before


@pytest.mark.parametrize("flag", ["--runs-dir", "--warmstart.runs-dir"])
def test_a_symbolic_link_loop_in_a_runs_dir_is_one_line(tmp_path, capsys, flag):
    """The issue's traceback 9: a symbolic link loop in ``--runs-dir`` or
    ``--warmstart.runs-dir`` was ``RuntimeError: Symlink loop`` from rundir.py."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    runs = loop if flag == "--runs-dir" else tmp_path / "runs"
    argv = ["train", *tiny_flags(runs, warmstart=False), "--name", "x"]
    if flag == "--warmstart.runs-dir":
        argv += ["--warmstart.runs-dir", loop]
    code, _, err = cli(argv, capsys)
    assert code == 2 and len(error_lines(err)) == 1 and "Traceback" not in err, err
    assert error_lines(err)[0].startswith(f"refimpl: error: {flag}: {loop}"), err
    assert "symbolic links" in err and sorted(p.name for p in tmp_path.iterdir()) == ["loop"]


def lock_is_free(run_dir: Path) -> bool:
    """No process holds the run's lock (this process can take it, and releases it)."""
    import fcntl

    fd = os.open(run_dir / "run.lock", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def holder_pid(run_dir: Path) -> int | None:
    try:
        return int((run_dir / "run.lock").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return None


@POSIX
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_a_signal_to_compare_s_process_alone_stops_its_workers(tmp_path, sig):
    """The issue's signals 19: ``kill -INT`` of ``compare``'s pid (not a terminal's Ctrl-C,
    which reaches the whole group) never told the running runs to stop, they trained to
    their last step; SIGTERM or ``kill -9`` left the workers orphaned, holding their locks,
    and a rerun was blocked. Now the parent forwards SIGINT and SIGTERM to its workers, which
    stop after a whole step with a checkpoint (exit 128 + the signal); after ``kill -9`` the
    workers notice the dead parent and stop the same way. Either way no lock stays held."""
    train = []
    for flag in tiny_flags(tmp_path, steps=100_000):
        train.append(flag.replace("--", "--train.", 1) if flag.startswith("--") else flag)
    i = train.index("--train.runs-dir")
    del train[i : i + 2]
    train.remove("--train.no-progress")
    i = train.index("--train.checkpoint-every")
    train[i + 1] = "100000"  # only the stop writes a checkpoint
    argv = ["compare", "--algos", "grpo,dapo", "--seeds", "0", "--workers", "2", "--name", "c"]
    proc = subprocess.Popen(
        python_cli(*argv, "--runs-dir", tmp_path, *train),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # signals reach it only from this test
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    runs = [tmp_path / "c" / "grpo-s0", tmp_path / "c" / "dapo-s0"]
    try:
        for run in runs:
            wait_for_steps(proc, run / "metrics.jsonl", 3)
        os.kill(proc.pid, getattr(signal, sig))
        if sig != "SIGKILL":
            _, err = proc.communicate(timeout=120)  # a step and a checkpoint: seconds
            assert proc.returncode == 128 + getattr(signal, sig), err
            assert "Traceback" not in err, err
        else:
            proc.wait(timeout=60)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not all(lock_is_free(r) for r in runs):
            time.sleep(0.5)
        assert all(lock_is_free(r) for r in runs)
        for run in runs:  # each stopped after a whole step, with its checkpoint
            state = json.loads((run / "checkpoint" / "state.json").read_text())
            assert state["step"] == logged_steps(run)[-1] < 100_000
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
        for run in runs:  # a worker still training (the failure this test is about)
            pid = holder_pid(run)
            if pid is not None and not lock_is_free(run):
                os.kill(pid, signal.SIGKILL)
