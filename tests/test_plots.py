"""The split of the figures: run/compare figures in ``refimpl.plots``, notebook helpers in
``refimpl.notebook_figures`` (which imports plots, never the reverse), colours from the registry."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

from refimpl import algorithms, notebook_figures, plots
from refimpl.runs import runlog

ROOT = Path(__file__).resolve().parents[1]


def test_every_algorithm_has_its_own_colour():
    """A colour per name of ``NAMES``, all different, taken by position from the palette (so
    a name added to the registry gets the next colour without touching plots.py)."""
    assert list(plots.ALGO_COLORS) == list(algorithms.NAMES)
    assert len(set(plots.ALGO_COLORS.values())) == len(algorithms.NAMES)
    for i, name in enumerate(algorithms.NAMES):
        assert plots.ALGO_COLORS[name] == plots.PALETTE[i]
    # The figures keep the colours they had before the palette (hand-copied from git history).
    assert plots.ALGO_COLORS["grpo"] == "#1f77b4" and plots.ALGO_COLORS["tepo"] == "#d62728"


def _imports(path: Path) -> set[str]:
    """The ``refimpl.*`` modules that ``path`` imports anywhere (inside functions too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # from refimpl import x
    return {name for name in found if name.startswith("refimpl.")}


def test_no_import_circle_in_refimpl():
    """The import graph of refimpl/ (every import statement, lazy ones in functions included)
    has no cycle: plots.py once reached notebook_figures.py, which imports plots, through a module
    ``__getattr__``."""
    modules = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in (ROOT / "refimpl").rglob("*.py")
    }
    graph = {m: _imports(p) & modules.keys() for m, p in modules.items()}
    for m in graph:  # importing refimpl.a.b runs refimpl/a/__init__.py first: not a cycle
        graph[m] = {d for d in graph[m] if not m.startswith(d + ".")}
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in sorted(graph[m]):
            assert state.get(d) != 1, "import circle: " + " -> ".join([*path, m, d])
            if d not in state:
                visit(d, [*path, m])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])


def test_no_module_getattr_shims():
    for path in (ROOT / "refimpl").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "__getattr__" not in names, path


@pytest.mark.parametrize(
    "path", sorted((ROOT / "notebooks").glob("0*.ipynb")), ids=lambda p: p.stem
)
def test_notebooks_call_helpers_where_they_live(path):
    """Every ``plots.<name>`` and ``notebook_figures.<name>`` in a notebook's code exists in
    that module (the notebook helpers are in notebook_figures; plots no longer forwards
    them)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if cell["cell_type"] != "code":
            continue
        source = "".join(cell["source"])
        for module, name in re.findall(r"(?<![\w.])(plots|notebook_figures)\.(\w+)", source):
            assert hasattr({"plots": plots, "notebook_figures": notebook_figures}[module], name), (
                f"{path.name}: {module}.{name}"
            )


def test_one_metrics_reader():
    assert plots.load_metrics is runlog.read_metrics
    with pytest.raises(AttributeError):
        plots.no_such_helper  # noqa: B018
