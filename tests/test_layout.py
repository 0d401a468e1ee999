"""The code stays readable in one sitting: no function in ``refimpl/`` or ``toy_envs/`` is
longer than ``MAX_FUNCTION_LINES`` (its ``def`` line to its last line, docstring and
comments included), so that a reader can hold each one at once."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (n lines)`` of every function (methods and nested ones included)
    longer than ``limit`` lines."""
    out = []
    for package in ("refimpl", "toy_envs"):
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        rel = path.relative_to(ROOT)
                        out.append(f"{rel}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_is_longer_than_the_limit():
    assert long_functions() == []


def test_the_check_sees_a_long_function(tmp_path, monkeypatch):
    """The walk finds methods and nested functions too (a check that cannot fail is none)."""
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "refimpl").mkdir()
    (tmp_path / "toy_envs").mkdir()
    (tmp_path / "refimpl" / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert long_functions() == [f"refimpl/m.py:2 f ({MAX_FUNCTION_LINES + 1} lines)"]


#: What ``refimpl/loop.py`` may import of ours: the algorithms and what they run on.
LOOP_IMPORTS = {"refimpl.algorithms", "refimpl.core", "refimpl.mechanisms", "refimpl.model"}
LOOP_IMPORTS |= {"refimpl.sampling", "refimpl.streams", "toy_envs"}
LOOP_MAX_LINES = 200


def own_imports(path: Path) -> set[str]:
    """The modules of ours (``refimpl``, ``toy_envs``) that ``path`` imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
            out |= {n for n in names if n.split(".")[0] in ("refimpl", "toy_envs")}
            if node.module.split(".")[0] == "toy_envs":
                out.add("toy_envs")
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] in ("refimpl", "toy_envs")}
    return out


def test_loop_is_one_sitting_and_imports_nothing_of_run_management():
    path = ROOT / "refimpl" / "loop.py"
    assert len(path.read_text(encoding="utf-8").splitlines()) <= LOOP_MAX_LINES
    modules = {m for m in own_imports(path) if m.startswith("refimpl.")}
    allowed = {m for m in modules if any(m.startswith(a) for a in LOOP_IMPORTS)}
    assert modules - allowed == set()
    assert own_imports(path) & {"toy_envs.TOKENIZER", "toy_envs.get_task"}


def test_the_trainer_names_no_algorithm():
    """What an algorithm needs of the Trainer its Config declares: no algorithm's name (as a
    word, in any case) appears in the Trainer's file, comments included."""
    import re

    from refimpl import algorithms

    text = (ROOT / "refimpl" / "train.py").read_text(encoding="utf-8").lower()
    found = [n for n in algorithms.NAMES if re.search(rf"\b{n.replace('_', '[-_ ]?')}\b", text)]
    assert found == []


#: The top level of ``refimpl/`` shows the architecture: the algorithms' support, the loop, the
#: Trainer and the entry points; run management and diagnostics are packages of their own.
MAX_TOP_LEVEL_MODULES = 14
TRAIN_MAX_LINES = 400


def test_the_top_level_is_small_and_the_trainer_fits_in_a_sitting():
    modules = sorted(p.name for p in (ROOT / "refimpl").glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules
    assert len((ROOT / "refimpl" / "train.py").read_text().splitlines()) <= TRAIN_MAX_LINES
    for package in ("runs", "diagnostics"):
        assert (ROOT / "refimpl" / package / "__init__.py").is_file()


def re_exports(root: Path = ROOT) -> list[str]:
    """``path:line`` of every module-level import in ``refimpl/`` whose unused names are kept
    with ``noqa: F401``: a re-export, so that callers import a name from a module where it
    does not live."""
    out = []
    for path in sorted((root / "refimpl").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.parse("\n".join(lines)).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if "noqa: F401" in text:
                    out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def test_no_module_re_exports_another_modules_names(tmp_path):
    assert re_exports() == []
    (tmp_path / "refimpl").mkdir()
    hub = "from refimpl.runs.config import (  # noqa: F401\n    TrainConfig,\n)\n"
    (tmp_path / "refimpl" / "hub.py").write_text(hub)
    assert re_exports(tmp_path) == ["refimpl/hub.py:1"]
