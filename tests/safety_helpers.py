"""Helpers of the run-safety tests (tests/test_safety_*.py): the smallest runs that exercise a
run directory, and one tiny warm start shared by every test of the process.

A run here is 2 groups × 2 completions for a few steps on one-operation chains, with no probe
and almost no held-out evaluation, from a 1-layer d = 32 warm start trained once per test
process (about 2 s on an idle core) in a temporary directory removed at exit.
"""

from __future__ import annotations

import atexit
import hashlib
import shutil
import sys
import tempfile
from pathlib import Path

from refimpl.cli import main as cli_main
from refimpl.runs.runlog import read_metrics

ROOT = Path(__file__).resolve().parent.parent
TIMING_KEYS = {"time_sample", "time_score", "time_adv", "time_loss", "time_step", "time_eval"}

_shared: dict[str, Path] = {}


def warmstart_dir() -> Path:
    """A directory, shared by the whole test process, that caches the tiny warm start."""
    if "dir" not in _shared:
        path = Path(tempfile.mkdtemp(prefix="refimpl-safety-ws-"))
        atexit.register(shutil.rmtree, path, ignore_errors=True)
        _shared["dir"] = path
    return _shared["dir"]


def tiny_flags(runs: Path, *, steps: int = 3, warmstart: bool = True) -> list[str]:
    """Flags of a run of ``steps`` tiny steps in ``runs`` (a checkpoint after every step);
    ``warmstart``: with ``--warmstart.runs-dir`` set to the shared cache."""
    flags = [
        "--task-args", "num_ops=1", "--steps", str(steps), "--prompts-per-step", "2",
        "--group-size", "2", "--minibatches", "1", "--eval-every", "1000",
        "--eval-problems", "4", "--eval-samples", "2", "--probe-every", "0",
        "--checkpoint-every", "1", "--lr", "1e-3", "--runs-dir", str(runs),
        "--no-progress", "--no-plot",
        "--warmstart.steps", "200", "--warmstart.batch-size", "64",
        "--warmstart.eval-problems", "20", "--warmstart.model.n-layer", "1",
        "--warmstart.model.n-embd", "32", "--warmstart.model.n-head", "2",
    ]  # fmt: skip
    if warmstart:
        flags += ["--warmstart.runs-dir", str(warmstart_dir())]
    return flags


def cli(argv: list, capsys) -> tuple[int, str, str]:
    """``refimpl ARGV`` in this process: (exit code, stdout, stderr)."""
    code = cli_main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def python_cli(*argv: object) -> list[str]:
    """The command line of ``refimpl ARGV`` in a new Python process."""
    return [sys.executable, "-m", "refimpl.cli", *(str(a) for a in argv)]


def resume(runs: Path, name: str, *extra: object) -> list:
    return ["train", "--resume", "--runs-dir", runs, "--name", name, *extra]


def steps_logged(run_dir: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run_dir)]


def records(run_dir: Path) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING_KEYS} for r in read_metrics(run_dir)]


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` with the hash of its bytes (to show nothing changed)."""
    return {
        str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("refimpl: error")]


def make_run(runs: Path, name: str, *extra: object, steps: int = 3) -> Path:
    """Train a tiny run ``runs/name`` (``extra``: more flags); its directory."""
    code = cli_main(
        [str(a) for a in ["train", *tiny_flags(runs, steps=steps), "--name", name, *extra]]
    )
    assert code == 0
    return runs / name


def copy_run(src: Path, name: str) -> Path:
    dst = src.parent / name
    shutil.copytree(src, dst)
    return dst
