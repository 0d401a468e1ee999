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
