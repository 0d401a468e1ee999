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
import subprocess
import sys
from pathlib import Path

import pytest

from refimpl.runs import checkpoint as ckpt
from tests.safety_helpers import (
    ROOT,
    cli,
    copy_run,
    error_lines,
    make_run,
    resume,
    snapshot,
    steps_logged,
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
