"""Execute every notebook at one size and record its wall time: the figures of notebooks/README.md.

    python scripts/dev/time_notebooks.py                       # every notebook, default size
    python scripts/dev/time_notebooks.py --inplace             # ... and keep the outputs
    python scripts/dev/time_notebooks.py --notebooks 02,06     # some of them
    python scripts/dev/time_notebooks.py --size full           # the long runs (an hour and more)
    python scripts/dev/time_notebooks.py --notebooks 04 --merge --inplace  # retime one, keep the rest

The notebooks run one at a time, in order, each in a fresh kernel of this interpreter, as a
newcomer would run them on a fresh clone: by default in a new, empty runs directory (so every
warm start and run is trained, none reused; `--runs-dir` to reuse one), with progress bars
off (`TQDM_DISABLE=1`) so that `--inplace` commits no bar. The result file
(`notebooks/timings.json` by default) is rewritten after each notebook, so an interrupted
timing keeps the notebooks it finished; it records the machine, its load average before and
after each notebook, the date and the commit, and the CPU time of each notebook's kernel and
of the processes it waited for. A shared or loaded machine gives upper bounds of the wall time;
the CPU time depends much less on the load (two cores give at most twice it per second).
The table printed at the end is the one notebooks/README.md shows.

`--merge` times only the notebooks selected and keeps every other notebook's row of the
existing result file, each row with the measurement it came from (date, commit, machine, load,
runs directory, `--note`); the table then names each row's measurement, so that a row retimed
after a change never passes for a measurement of the whole set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

REPO = Path(__file__).resolve().parents[2]
NOTEBOOK_DIR = REPO / "notebooks"


@dataclass
class TimeConfig:
    """Time the notebooks at one size."""

    size: str = "small"
    """REFIMPL_NOTEBOOK_SIZE: small (the default a reader gets), full or fast"""
    notebooks: str = ""
    """comma-separated notebook numbers or names (empty: every notebooks/0*.ipynb)"""
    runs_dir: Path | None = None
    """where the notebooks train (None: a new empty temporary directory, as on a fresh clone)"""
    inplace: bool = False
    """write each executed notebook back, outputs included (the committed outputs then come
    from this size)"""
    out: Path = NOTEBOOK_DIR / "timings.json"
    """the result file (JSON)"""
    cell_timeout: int = 3600
    """seconds one cell may run"""
    merge: bool = False
    """keep the other notebooks' rows of the existing result file (--out), each with its own
    measurement (same --size only)"""
    note: str = ""
    """what else ran on the machine, in words (the load average does not say at what priority);
    kept with the measurement and printed with the table"""


def select(spec: str) -> list[Path]:
    """The notebooks named by `spec` ("01,03" or full names), in order; every one when empty."""
    every = sorted(NOTEBOOK_DIR.glob("0*.ipynb"))
    if not spec.strip():
        return every
    chosen = []
    for item in (s.strip() for s in spec.split(",") if s.strip()):
        hits = [p for p in every if p.name == item or p.stem == item or p.name.startswith(item)]
        if len(hits) != 1:
            names = ", ".join(p.name for p in every)
            raise ValueError(f"--notebooks: {item!r} matches {len(hits)} of {names}")
        chosen.append(hits[0])
    return chosen


def kernel_manager_class():
    """A python3 kernel run by `sys.executable` (the installed kernelspec may point elsewhere)."""
    from jupyter_client.manager import KernelManager

    class ThisInterpreterKernelManager(KernelManager):
        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if cmd and Path(cmd[0]).name.startswith("python"):
                cmd[0] = sys.executable
            return cmd

    return ThisInterpreterKernelManager


def execute(path: Path, cell_timeout: int) -> tuple[object, float, float, str | None]:
    """`(notebook, wall seconds, CPU seconds, error)`: the notebook executed top to bottom in a
    kernel this process starts and reaps, so that the CPU time of the kernel and of every
    process it waited for (03's parallel runs) is in this process's RUSAGE_CHILDREN."""
    import resource

    import nbclient
    import nbformat

    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=cell_timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    client.kernel_manager_class = kernel_manager_class()

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime

    # The kernel's process, reaped below: a kernel slow to exit (a loaded machine) is killed
    # by jupyter_client, which waits 5 s for it and then goes on without reaping it, and an
    # unreaped child's CPU time is missing from RUSAGE_CHILDREN (it read 0 once).
    kernels = []
    client.on_notebook_start = lambda **_: kernels.append(client.km.provisioner.process)
    start, cpu_start = time.perf_counter(), cpu()
    error = None
    try:
        client.execute()  # shuts the kernel down at the end
    except Exception as err:  # a failing cell: record it, time the rest of the set
        error = f"{type(err).__name__}: {str(err).strip().splitlines()[-1][:300]}"
    seconds = time.perf_counter() - start
    for process in kernels:
        try:
            process.wait(timeout=600)  # reaps it, if jupyter_client did not
        except subprocess.TimeoutExpired:
            error = error or f"the kernel (pid {process.pid}) did not exit: CPU time unknown"
    return nb, seconds, cpu() - cpu_start, error


def measurement_of(row: dict, result: dict) -> dict:
    """The measurement a row comes from: its own (a merged file), else the file's."""
    return row.get("measurement") or {
        "machine": result["machine"],
        "fresh_runs_dir": result["fresh_runs_dir"],
        "runs_dir": result.get("runs_dir", ""),
        "note": result.get("note", ""),
    }


def describe(size: str, measurement: dict) -> str:
    m = measurement["machine"]
    where = (
        "a new empty runs directory"
        if measurement["fresh_runs_dir"]
        else f"runs in {measurement['runs_dir']}"
    )
    note = f"; {measurement['note']}" if measurement.get("note") else ""
    return (
        f"Size `{size}`, {m['date']}, {m['cpu']}, {m['cores']} cores, commit {m['commit']}, "
        f"{where}{note}."
    )


def markdown_table(result: dict) -> str:
    rows = result["notebooks"]
    measurements: list[dict] = []  # distinct, in the order of the rows
    for r in rows:
        if measurement_of(r, result) not in measurements:
            measurements.append(measurement_of(r, result))
    several = len(measurements) > 1
    label = {i: chr(ord("A") + i) for i in range(len(measurements))}
    if several:
        lines = [
            f"Measurement {label[i]}: {describe(result['size'], m)}"
            for i, m in enumerate(measurements)
        ]
        lines += ["", "Each row names its measurement; the sum adds rows of different ones.", ""]
        lines += [
            "| notebook | measurement | wall time | CPU time (kernel and its workers) | load average (1 min) before → after |",
            "|---|---|---|---|---|",
        ]
    else:
        lines = [
            describe(result["size"], measurements[0])
            if measurements
            else f"Size `{result['size']}`.",
            "",
            "| notebook | wall time | CPU time (kernel and its workers) | load average (1 min) before → after |",
            "|---|---|---|---|",
        ]
    for r in rows:
        status = f" (failed: {r['error']})" if r["error"] else ""
        which = f" {label[measurements.index(measurement_of(r, result))]} |" if several else ""
        lines.append(
            f"| `{r['notebook']}` |{which} {r['seconds'] / 60:.1f} min ({r['seconds']:.0f} s){status} | "
            f"{r['cpu_seconds'] / 60:.1f} min | {r['load_before'][0]:.1f} → {r['load_after'][0]:.1f} |"
        )
    total = sum(r["seconds"] for r in rows)
    cpu_total = sum(r["cpu_seconds"] for r in rows)
    lines.append(
        f"| **all** |{' |' if several else ''} **{total / 60:.1f} min** | {cpu_total / 60:.1f} min | |"
    )
    return "\n".join(lines)


def earlier_rows(out: Path, size: str, timed: list[Path]) -> list[dict]:
    """The rows of ``out`` for the notebooks not in ``timed``, each with its measurement
    (``ValueError`` when ``out`` is missing, unreadable or of another size)."""
    try:
        old = json.loads(out.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"--merge: expected a readable result file at {out} ({err})") from err
    if old.get("size") != size:
        raise ValueError(f"--merge: {out} holds size {old.get('size')!r}, not {size!r}")
    names = {p.name for p in timed}
    return [
        {**r, "measurement": measurement_of(r, old)}
        for r in old.get("notebooks", [])
        if r["notebook"] not in names
    ]


def kernel_env(size_variable: str, size: str, runs_dir: Path) -> dict[str, str]:
    """What every kernel runs with: the size, its runs directory, no progress bars, Agg."""
    return {
        size_variable: size,
        "REFIMPL_NOTEBOOK_RUNS_DIR": str(runs_dir),
        "TQDM_DISABLE": "1",
        "MPLBACKEND": "Agg",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""),
        # The kernels import this checkout's refimpl (they start in notebooks/, where a
        # relative PYTHONPATH would point elsewhere).
        "PYTHONPATH": os.pathsep.join([str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]),
    }


def main(cfg: TimeConfig) -> int:
    sys.path.insert(0, str(REPO))
    from refimpl.bench import machine_info
    from refimpl.bench.result_header import command_line, make_header
    from refimpl.notebook_figures import SIZE_VARIABLE, SIZES
    from refimpl.runs.runlog import check_output_file, write_text_atomic

    if cfg.size not in SIZES:
        print(f"--size: expected one of {', '.join(SIZES)}, got {cfg.size!r}", file=sys.stderr)
        return 2
    try:
        paths = select(cfg.notebooks)
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    try:  # before anything runs: --out can be written (never through a link), and a merge
        # needs a result file of the same size there
        check_output_file(cfg.out, "--out")
        kept = earlier_rows(cfg.out, cfg.size, paths) if cfg.merge else []
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    fresh = cfg.runs_dir is None
    runs_dir = Path(tempfile.mkdtemp(prefix="refimpl-nbtime-")) if fresh else cfg.runs_dir
    os.environ.update(kernel_env(SIZE_VARIABLE, cfg.size, runs_dir))  # kernels inherit it
    this_measurement = {
        "machine": machine_info(),
        "fresh_runs_dir": fresh,
        "runs_dir": str(runs_dir),
        "note": cfg.note,
    }
    result = {
        # the one header every result file opens with (tests/test_result_headers.py)
        "header": make_header("notebook timings", command=command_line(), evaluation_grid="none"),
        "size": cfg.size,
        **this_measurement,
        "complete": False,
        "merged": bool(kept),
        "notebooks": [],
    }

    def write() -> None:  # the rows in notebook order, the kept ones among them; whole
        result["notebooks"].sort(key=lambda r: r["notebook"])
        cfg.out.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(cfg.out, json.dumps(result, indent=2) + "\n")

    result["notebooks"] += kept
    print(f"{len(paths)} notebooks at size {cfg.size}, runs in {runs_dir}", flush=True)
    for i, path in enumerate(paths, 1):
        print(f"[{i}/{len(paths)}] {path.name} ...", end=" ", flush=True)
        load_before = list(os.getloadavg())
        nb, seconds, cpu_seconds, error = execute(path, cfg.cell_timeout)
        print(
            f"{seconds:.0f} s ({cpu_seconds:.0f} CPU s)" + (f"  FAILED: {error}" if error else ""),
            flush=True,
        )
        if cfg.inplace and not error:
            import nbformat

            nbformat.write(nb, path)
        result["notebooks"].append(
            {
                "notebook": path.name,
                "seconds": round(seconds, 1),
                "cpu_seconds": round(cpu_seconds, 1),
                "error": error,
                "load_before": [round(x, 2) for x in load_before],
                "load_after": [round(x, 2) for x in os.getloadavg()],
                **({"measurement": this_measurement} if kept else {}),
            }
        )
        write()  # after each: nothing lost
    result["complete"] = True
    result["total_seconds"] = round(sum(r["seconds"] for r in result["notebooks"]), 1)
    result["total_cpu_seconds"] = round(sum(r["cpu_seconds"] for r in result["notebooks"]), 1)
    write()
    print()
    print(markdown_table(result))
    print(f"\nresult: {cfg.out}")
    return 1 if any(r["error"] for r in result["notebooks"]) else 0


if __name__ == "__main__":
    sys.exit(main(tyro.cli(TimeConfig, description=__doc__)))
