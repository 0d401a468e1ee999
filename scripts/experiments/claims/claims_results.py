"""The result files the claims report reads, in ``results/`` beside it, and the machine
each one records.

``load_real`` (one file per arm and seed, from ``run_real.py``), ``load_cross`` (first-pass
runs repeated on a second machine) and ``load_toy`` (the collapse benchmark) refuse a missing
or damaged file with ``ResultFileError``, naming it. ``machine_of`` and ``cpu_record`` name a
file's machine from its own record only.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent  # scripts/experiments/claims/
ROOT = HERE.parents[2]  # the repository
if str(HERE.parent) not in sys.path:  # the lab's page writer (its checks of a figure)
    sys.path.insert(0, str(HERE.parent))
REAL = HERE / "results" / "real"
CROSS = REAL / "cross_machine"
TOY = HERE / "results" / "toy" / "results.json"
#: Every real-model run, into an empty directory (the committed files untouched).
REAL_CMD_EMPTY = (
    "python scripts/experiments/run_experiment.py scripts/experiments/claims/claims_study.py "
    "--out /tmp/claims-results"
)


def read_file(path: Path) -> dict:
    """One result file the claims pages read: ``ResultFileError`` naming it when it is
    missing or damaged."""
    from refimpl.bench.result_header import read_result

    return read_result(path, "docs/claims.md reads it")


def _with_samples(result: dict, path: Path) -> dict:
    """``result`` with each evaluation's ``n_samples`` (the run's ``--eval-samples``); a
    file without evaluations is refused, naming it."""
    from page_writer import finite

    from refimpl.bench.result_header import expect

    evals = result["evals"]
    expect(isinstance(evals, list) and len(evals) > 0 and all(isinstance(e, dict) for e in evals),
           path, "evals: expected a non-empty list of evaluations")  # fmt: skip
    for i, e in enumerate(evals):  # every figure the tables read: a finite number
        for key in ("success", "pass@1", "entropy"):
            if key in e:
                finite(e[key], path, f"evals[{i}].{key}")
        correct = e["correct"]
        expect(isinstance(correct, list) and all(isinstance(c, int) and not isinstance(c, bool)
                                                 and c >= 0 for c in correct),
               path, f"evals[{i}].correct: expected counts per problem")  # fmt: skip
        e.setdefault("n_samples", int(result["args"]["eval_samples"]))
    return result


def load_real(directory: Path | None = None) -> dict[tuple[str, int], dict]:
    """``{(arm, seed): result}`` of every ``<arm>_seed<seed>.json`` in ``directory`` (default
    REAL); each evaluation gets its ``n_samples`` (the run's ``--eval-samples``). A directory
    without such files, a damaged file, or an arm's seed without the base file it is compared
    with: ``ResultFileError`` naming it."""
    from refimpl.bench.result_header import ResultFileError

    directory = directory or REAL
    if not directory.is_dir():
        raise ResultFileError(f"{directory}: missing (the real-model result files)")
    out = {}
    for path in sorted(directory.glob("*_seed*.json")):
        m = re.fullmatch(r"(.+)_seed(\d+)\.json", path.name)
        if m:
            out[(m.group(1), int(m.group(2)))] = _with_samples(read_file(path), path)
    if not out:
        raise ResultFileError(f"{directory}: no <arm>_seed<seed>.json result file")
    for arm, seed in sorted(out):
        if ("base", seed) not in out:
            raise ResultFileError(
                f"{directory / f'base_seed{seed}.json'}: missing ({arm}_seed{seed}.json is "
                "compared with the base model of its seed)"
            )
    return out


def load_cross(directory: Path | None = None) -> dict[str, dict]:
    """``{file name: result}`` of the cross-machine reruns (``<arm>_seed<seed>_<machine>.json``)."""
    from refimpl.bench.result_header import ResultFileError

    directory = directory or CROSS
    if not directory.is_dir():
        raise ResultFileError(f"{directory}: missing (the cross-machine result files)")
    out = {}
    for path in sorted(directory.glob("*_seed*_*.json")):
        out[path.name] = _with_samples(read_file(path), path)
    return out


def load_toy(path: Path | None = None) -> dict:
    """The collapse benchmark's ``results.json``: ``ResultFileError`` naming it when it is
    missing or damaged (the page's toy tables are built from it)."""
    return read_file(path or TOY)


def machine_of(result: dict, key: tuple[str, int] | None = None) -> str:
    """The machine a result file was computed on, from its own record only: the CPU's model
    name (and numeric path, torch, threads where recorded); "unrecorded" where the file does
    not name its CPU model (the first pass's files record only "x86_64")."""
    from refimpl.runs.cpu_kernels import names_cpu_model

    m = result.get("machine", {})
    cpu = str(m.get("cpu", ""))
    if not names_cpu_model(cpu):
        return f"unrecorded (the file records only “{cpu or '?'}”)"
    if not m.get("path"):  # a benchmark's machine record: no numeric path in it
        return f"{cpu}, {m.get('cores', '?')} cores, {m.get('date', '?')}, commit {m.get('commit', '?')}"
    threads = m.get("threads", m.get("torch_threads"))
    return (f"{cpu}, {m['path']} path, torch {m.get('torch', '?')}, {threads} "
            f"thread{'' if threads == 1 else 's'}")  # fmt: skip


def cpu_record(result: dict) -> str:
    """The CPU a result file records (``machine.cpu``): a model name ("AMD EPYC"), or the
    first pass's bare "x86_64"."""
    return str(result.get("machine", {}).get("cpu", ""))
