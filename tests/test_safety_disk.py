"""A full disk (issue: nothing lost, nothing silently wrong).

A checkpoint that cannot be written is one line naming the file, ``checkpoint.tmp`` is
removed (it no longer fills the disk) and the previous checkpoint is intact. Two ways: each
writer made to fail with ENOSPC the way it really does (``torch.save`` raises a RuntimeError
from the OSError, safetensors its own error), and, where the platform has it, a real write
failure from the kernel: a file-size limit (``RLIMIT_FSIZE``) below the checkpoint's size,
which needs no root and no special file system.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from refimpl.runs import checkpoint as ckpt
from refimpl.runs.cache import cache_dir
from tests.safety_helpers import (
    ROOT,
    cli,
    copy_run,
    error_lines,
    make_run,
    resume,
    snapshot,
    steps_logged,
    tiny_flags,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def base(runs) -> Path:
    """A finished 2-step run with a checkpoint of step 2."""
    return make_run(runs, "base", "--algo", "grpo", steps=2)


def full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def torch_save_full(*args, **kwargs):
    """What torch.save raises on a full disk: its zip writer's RuntimeError, from the
    OSError of the write."""
    try:
        full()
    except OSError as err:
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos") from err


def state_json_full(original):
    def write_text(self, *args, **kwargs):
        if self.name == "state.json" and self.parent.name == "checkpoint.tmp":
            full()
        return original(self, *args, **kwargs)

    return write_text


@pytest.mark.parametrize("writer", ["model.safetensors", "optimizer.pt", "state.json"])
def test_a_full_disk_mid_save_is_one_line_and_keeps_the_previous_checkpoint(
    runs, base, capsys, monkeypatch, writer
):
    """The issue's crash: a full disk mid-save gave a raw torch.save traceback and left
    checkpoint.tmp filling the disk."""
    run = copy_run(base, f"full-{writer}")
    before = snapshot(run / "checkpoint")
    with monkeypatch.context() as m:
        if writer == "model.safetensors":
            m.setattr(ckpt, "save_file", full)
        elif writer == "optimizer.pt":
            m.setattr(ckpt.torch, "save", torch_save_full)
        else:
            m.setattr(Path, "write_text", state_json_full(Path.write_text))
        code, _, err = cli(resume(runs, run.name, "--steps", 3), capsys)
    assert code == 1, err
    lines = error_lines(err)
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(run / "checkpoint.tmp" / writer) in lines[0], err
    assert "No space left on device" in lines[0] and "is intact" in lines[0], err
    assert not (run / "checkpoint.tmp").exists()
    assert snapshot(run / "checkpoint") == before
    # Space freed: the run resumes from the intact checkpoint.
    code, _, err = cli(resume(runs, run.name, "--steps", 3), capsys)
    assert code == 0, err
    assert steps_logged(run) == [0, 1, 2, 3]


FILE_SIZE_LIMIT = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
limit = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
from refimpl.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.skipif(
    sys.platform == "win32", reason="RLIMIT_FSIZE (a real write failure without root) is POSIX"
)
def test_a_real_write_failure_keeps_the_previous_checkpoint(runs, base):
    """The kernel refuses to write past a file-size limit set below the weights' size (the
    logs and config.json are smaller): the save of step 3 fails for real."""
    run = copy_run(base, "fsize")
    weights = (run / "checkpoint" / "model.safetensors").stat().st_size
    logs = max(p.stat().st_size for p in run.iterdir() if p.is_file())
    assert logs * 3 < weights  # room for the logs to grow by a step, none for the weights
    before = snapshot(run / "checkpoint")
    argv = [str(a) for a in resume(runs, run.name, "--steps", 3)]
    proc = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMIT, str(weights // 2), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(run / "checkpoint.tmp" / "model.safetensors") in lines[0], proc.stderr
    assert "File too large" in lines[0] and "is intact" in lines[0], proc.stderr
    assert not (run / "checkpoint.tmp").exists()
    assert snapshot(run / "checkpoint") == before


# ---------------------------------------------------------------------------------------------
# Issue 41: links inside a run, files a resume did not write, torch's own write error, and
# files that are no regular files.
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def precious(tmp_path) -> Path:
    """A user's file outside every run directory."""
    file = tmp_path / "precious.txt"
    file.write_text("three years of work")
    return file


@pytest.mark.parametrize("name", ["curves.png", "run.lock", "metrics.jsonl", "config.json.tmp"])
def test_a_link_inside_a_run_is_never_written_through(runs, base, capsys, precious, name):
    """The issue's data loss 1: ``ln -s ~/precious.txt R/a/curves.png`` and ``--resume
    --plot`` overwrote the outside file with a PNG; ``run.lock`` as a link had the file
    replaced by the lock text. Every writer refuses such a link before anything changes,
    naming it."""
    run = copy_run(base, f"link-{name}")
    (run / name).unlink(missing_ok=True)
    (run / name).symlink_to(precious)
    before = snapshot(run)
    code, _, err = cli(resume(runs, run.name, "--steps", 4, "--plot"), capsys)
    assert code == 2 and len(error_lines(err)) == 1 and "Traceback" not in err, err
    assert f"{run / name} is a symbolic link" in err, err
    assert precious.read_text() == "three years of work"
    assert snapshot(run) == before


def test_plot_never_writes_through_a_link(runs, base, capsys, precious):
    """``refimpl plot R/a`` with ``R/a/curves.png`` a link: one line naming it, the file it
    points to untouched."""
    run = copy_run(base, "link-plot")
    (run / "curves.png").symlink_to(precious)
    code, _, err = cli(["plot", run], capsys)
    assert code == 2 and len(error_lines(err)) == 1, err
    assert str(run / "curves.png") in err and "symbolic link" in err, err
    assert precious.read_text() == "three years of work"


def test_a_new_run_never_writes_its_lock_through_a_link(runs, capsys, precious):
    """A directory holding only ``run.lock`` (a run that never started) is a new run's; a
    ``run.lock`` there that is a link is refused, not opened for writing."""
    run = runs / "fresh-link"
    run.mkdir()
    (run / "run.lock").symlink_to(precious)
    code, _, err = cli(["train", *tiny_flags(runs), "--name", run.name], capsys)
    assert code == 2 and len(error_lines(err)) == 1, err
    assert f"{run / 'run.lock'} is a symbolic link" in err, err
    assert precious.read_text() == "three years of work"


def test_resume_keeps_what_it_did_not_write_in_the_checkpoint(runs, base, capsys):
    """The issue's data loss 2: a note and a folder in ``RUN/checkpoint/`` were deleted by
    the next save of a resumed run (``--overwrite`` refuses them). The resume is refused
    before it trains, naming them; they are kept."""
    run = copy_run(base, "notes")
    (run / "checkpoint" / "NOTES.txt").write_text("x")
    (run / "checkpoint" / "best").mkdir()
    before = snapshot(run)
    code, _, err = cli(resume(runs, run.name, "--steps", 6, "--checkpoint-every", 2), capsys)
    assert code == 2 and len(error_lines(err)) == 1, err
    assert "checkpoint/NOTES.txt" in err and "checkpoint/best/" in err, err
    assert snapshot(run) == before and (run / "checkpoint" / "best").is_dir()


def test_a_symlinked_checkpoint_directory_is_refused_not_renamed(runs, base, capsys, tmp_path):
    """The issue's silent result 7: a ``checkpoint/`` that is a link was renamed by the first
    save, the cleanup failed silently, and every later save failed with "Not a directory".
    ``--resume`` refuses it naming the link, and so does the library's save."""
    import torch

    run = copy_run(base, "linked-checkpoint")
    elsewhere = tmp_path / "elsewhere-checkpoint"
    (run / "checkpoint").rename(elsewhere)
    (run / "checkpoint").symlink_to(elsewhere)
    target_before = snapshot(elsewhere)
    code, _, err = cli(resume(runs, run.name, "--steps", 3), capsys)
    assert code == 2 and len(error_lines(err)) == 1, err
    assert f"{run / 'checkpoint'} is a symbolic link" in err, err
    with pytest.raises(ckpt.CheckpointError, match="symbolic link"):
        ckpt.save_checkpoint(run / "checkpoint", torch.nn.Linear(2, 2), None, {"step": 3})
    assert (run / "checkpoint").is_symlink() and snapshot(elsewhere) == target_before
    assert not (run / "checkpoint.old").exists() and not (run / "checkpoint.tmp").exists()


def test_a_symlinked_warm_start_cache_is_refused_before_training(tmp_path, capsys):
    """The same for the warm-start cache: a cache directory that is a link to an empty
    directory (so the model has to be trained) was renamed by the save; the run is refused
    before anything is trained, naming the link. A link to a whole cache is read."""
    import dataclasses

    from tests.safety_helpers import warmstart_dir
    from tests.tiny import tiny_warmstart

    ws_runs = tmp_path / "ws"
    ws = dataclasses.replace(tiny_warmstart(ws_runs), task_args=("num_ops=1",))
    empty = tmp_path / "empty"
    empty.mkdir()
    cache_dir(ws).parent.mkdir(parents=True)
    cache_dir(ws).symlink_to(empty)
    flags = [*tiny_flags(tmp_path / "runs", warmstart=False), "--warmstart.runs-dir", ws_runs]
    code, _, err = cli(["train", *flags, "--name", "a"], capsys)
    assert code == 2 and len(error_lines(err)) == 1, err
    assert "--warmstart.runs-dir" in err and f"{cache_dir(ws)}: a symbolic link" in err, err
    assert cache_dir(ws).is_symlink() and not any(empty.iterdir())
    assert not (tmp_path / "runs" / "a").exists()
    # A link to a cache that holds the model: read through it (nothing is written there).
    shared = cache_dir(dataclasses.replace(ws, runs_dir=warmstart_dir()))
    cli(["train", *tiny_flags(tmp_path / "runs"), "--name", "warm", "--steps", 1], capsys)
    cache_dir(ws).unlink()
    cache_dir(ws).symlink_to(shared)
    before = snapshot(shared)
    code, _, err = cli(["train", *flags, "--name", "b", "--steps", 1], capsys)
    assert code == 0, err
    assert snapshot(shared) == before


@pytest.mark.skipif(
    sys.platform == "win32", reason="RLIMIT_FSIZE (a real write failure without root) is POSIX"
)
def test_a_real_write_failure_of_the_optimizer_state_is_one_line(runs, base):
    """The issue's traceback 13: a full disk while ``optimizer.pt`` was written was a raw
    ``RuntimeError: [enforce fail at inline_container.cc…]`` from torch's writer. The file
    size limit here lets the weights through and stops the optimizer state (twice their
    size): one line naming the file, the previous checkpoint intact."""
    run = copy_run(base, "fsize-optimizer")
    weights = (run / "checkpoint" / "model.safetensors").stat().st_size
    optimizer = (run / "checkpoint" / "optimizer.pt").stat().st_size
    limit = (weights + optimizer) // 2
    assert weights < limit < optimizer
    before = snapshot(run / "checkpoint")
    argv = [str(a) for a in resume(runs, run.name, "--steps", 3)]
    proc = subprocess.run(
        [sys.executable, "-c", FILE_SIZE_LIMIT, str(limit), *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 1, proc.stderr
    lines = error_lines(proc.stderr)
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert str(run / "checkpoint.tmp" / "optimizer.pt") in lines[0], proc.stderr
    assert "File too large" in lines[0] and "is intact" in lines[0], proc.stderr
    assert not (run / "checkpoint.tmp").exists()
    assert snapshot(run / "checkpoint") == before


def run_cli_subprocess(*argv: object, timeout: float = 120) -> subprocess.CompletedProcess:
    """``refimpl ARGV`` in a new process with a 4 GB address-space limit: a reader that
    blocks or reads without end fails the test by its timeout or its memory, instead of
    hanging the test run or filling the machine."""
    limit = "import resource; resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30)); "
    code = limit + "import sys; from refimpl.cli import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, argv)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.skipif(sys.platform == "win32", reason="FIFOs and /dev/zero are POSIX")
def test_a_fifo_or_a_device_as_a_run_file_is_refused_without_reading(tmp_path, base):
    """The issue's hang 18: a FIFO as ``metrics.jsonl`` (or as ``--config``) blocked
    ``refimpl runs``, ``--resume`` and ``plot`` forever; a link to ``/dev/zero`` reached 16 GB
    in 40 s. Only regular files are read: each is one line (``runs``: a damaged row) within
    seconds, and the FIFO was never opened for reading by anyone waiting on it."""
    listing = tmp_path / "listing"  # the two runs alone, for refimpl runs
    fifo_run, zero_run = listing / "fifo", listing / "zero"
    for run in (fifo_run, zero_run):
        shutil.copytree(base, run)
        (run / "metrics.jsonl").unlink()
    os.mkfifo(fifo_run / "metrics.jsonl")
    (zero_run / "metrics.jsonl").symlink_to("/dev/zero")
    proc = run_cli_subprocess("runs", listing)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines()}
    assert "damaged: metrics.jsonl: not readable (not a regular file: a FIFO" in rows["fifo"]
    assert "not a regular file: a character device" in rows["zero"], proc.stdout
    proc = run_cli_subprocess(*resume(listing, fifo_run.name, "--steps", 4))
    assert proc.returncode == 1 and len(error_lines(proc.stderr)) == 1, proc.stderr
    assert f"{fifo_run / 'metrics.jsonl'}: not readable (not a regular file" in proc.stderr
    proc = run_cli_subprocess("plot", zero_run)
    assert proc.returncode == 2 and len(error_lines(proc.stderr)) == 1, proc.stderr
    assert "not a regular file: a character device" in proc.stderr, proc.stderr
    config = tmp_path / "config.fifo"
    os.mkfifo(config)
    proc = run_cli_subprocess("train", "--config", config, "--runs-dir", tmp_path / "r")
    assert proc.returncode == 2 and len(error_lines(proc.stderr)) == 1, proc.stderr
    assert f"--config: {config}: not readable (not a regular file: a FIFO" in proc.stderr


def test_a_log_larger_than_any_run_writes_is_refused_before_it_is_read(
    runs, base, capsys, monkeypatch
):
    """The issue's hang 18: a 20 GB sparse ``metrics.jsonl`` got ``refimpl runs`` killed by
    the kernel. A log larger than ``MAX_LOG_BYTES`` is refused by its size (the bound is
    lowered to 1 MiB here, the file a sparse one of 2 MiB)."""
    from refimpl.runs import runlog

    monkeypatch.setattr(runlog, "MAX_LOG_BYTES", 1 << 20)
    run = copy_run(base, "sparse")
    with open(run / "metrics.jsonl", "r+b") as f:
        f.truncate(2 << 20)
    code, out, _ = cli(["runs", runs], capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("sparse "))
    assert "damaged: metrics.jsonl: not readable (2,097,152 bytes, more than" in row, row
