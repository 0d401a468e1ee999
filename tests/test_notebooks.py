"""Execute every notebook ``notebooks/0*.ipynb`` at its fast size and check it draws.

Each notebook reads ``REFIMPL_NOTEBOOK_SIZE`` in its first cell; ``fast`` shrinks the warm
start and the RL runs to seconds (the committed outputs come from the ``full`` size). The
notebooks share one runs directory here, so the tiny warm start is trained once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("0*.ipynb"))
TIMEOUT_S = 600  # per cell; the whole fast notebook takes seconds


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("notebook-runs")


def _kernel_env(runs_dir: Path) -> dict[str, str]:
    env = {
        "REFIMPL_NOTEBOOK_SIZE": "fast",
        "MPLBACKEND": "Agg",
        "REFIMPL_NOTEBOOK_RUNS_DIR": str(runs_dir),
        "TQDM_DISABLE": "1",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    # The kernel runs this interpreter (the venv's), whatever kernelspec is installed.
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    return env


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_and_draws(path: Path, runs_dir: Path, monkeypatch) -> None:
    for key, value in _kernel_env(runs_dir).items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    # Start the kernel with this interpreter: the installed kernelspec may point elsewhere.
    client.kernel_manager_class = _kernel_manager_class()
    client.execute()  # raises CellExecutionError on the first failing cell

    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: error outputs {errors}"
    images = sum(
        1
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    )
    assert images >= 1, f"{path.name}: no figure in the outputs"


def test_notebooks_exist() -> None:
    names = {p.name for p in NOTEBOOKS}
    for expected in (
        "01_quickstart.ipynb",
        "02_advantages_side_by_side.ipynb",
        "03_entropy_dynamics.ipynb",
        "04_token_credit_on_a_real_model.ipynb",
        "05_entropy_interventions.ipynb",
        "06_token_credit.ipynb",
    ):
        assert expected in names


def _kernel_manager_class():
    from jupyter_client.manager import KernelManager

    class ThisInterpreterKernelManager(KernelManager):
        """A python3 kernel run by ``sys.executable`` (the venv that runs the tests)."""

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if cmd and Path(cmd[0]).name.startswith("python"):
                cmd[0] = sys.executable
            return cmd

    return ThisInterpreterKernelManager
