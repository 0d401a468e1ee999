"""docs/adding_an_algorithm.md, followed literally on a scratch copy of the repository.

The page's steps are its code blocks: a ``bash`` block's ``.venv/bin/python`` lines are run
(with this interpreter, in the copy), and a ``python`` block whose first line is a comment
``# PATH: ACTION`` is pasted into ``PATH``, ACTION being one of

* ``the whole file``; ``replace the module docstring``; ``replace def NAME`` (a top-level
  function); ``add to class Config``; ``replace the line of "KEY"`` (the line that holds
  ``"KEY":``); ``add to the imports`` (before the first top-level import of a module outside
  the standard library, where ``import torch`` sorts).

The pytest commands of its step 6 then run in the copy, so the page's new algorithm passes the
guard, its own spec module and every test parametrised over ``NAMES``. ``make`` and
``refimpl`` lines (the whole suite, a training run) are left out: they take minutes.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "adding_an_algorithm.md"
STDLIB = sys.stdlib_module_names | {"__future__"}
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```$", re.M | re.S)
STEP = re.compile(r"^# (\S+): (.+)$")
#: What a scratch copy needs of the repository (the rest is build output and caches).
COPY = ("refimpl", "toy_envs", "tests", "docs", "scripts", "mkdocs.yml", "README.md",
        "pyproject.toml", "CONTRIBUTING.md", "LICENSE", "CITATION.cff", "examples", "notebooks")  # fmt: skip


def blocks(text: str) -> list[tuple[str, str]]:
    """``(language, body)`` of every fenced code block of ``text``, in order."""
    return [(m.group(1), m.group(2)) for m in BLOCK.finditer(text)]


def _lines_of(source: str, node: ast.AST) -> tuple[int, int]:
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return start - 1, node.end_lineno


def paste(root: Path, path: str, action: str, code: str) -> None:
    """Apply one ``python`` block of the page to ``root / path``."""
    target = root / path
    if action == "the whole file":
        target.write_text(code, encoding="utf-8")
        return
    source = target.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    tree = ast.parse(source)
    if action == "replace the module docstring":
        first, last = _lines_of(source, tree.body[0])
        assert isinstance(tree.body[0], ast.Expr), f"{path} has no module docstring"
    elif m := re.fullmatch(r"replace def (\w+)", action):
        found = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == m[1]]
        assert found, f"{path} has no top-level def {m[1]}"
        first, last = _lines_of(source, found[0])
    elif action == "add to class Config":
        found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Config"]
        assert found, f"{path} has no class Config"
        first = last = found[0].end_lineno
        code = "\n" + code
    elif action == "add to the imports":
        imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        modules = [(n.names[0].name if isinstance(n, ast.Import) else n.module) for n in imports]
        after = [n for n, m in zip(imports, modules) if m.split(".")[0] not in STDLIB]
        assert after, f"{path} imports nothing outside the standard library"
        first = last = after[0].lineno - 1
    elif m := re.fullmatch(r'replace the line of "(\w+)"', action):
        hits = [i for i, line in enumerate(lines) if f'"{m[1]}":' in line]
        assert len(hits) == 1, f'{path}: {len(hits)} lines hold "{m[1]}":'
        first, last = hits[0], hits[0] + 1
    else:
        raise AssertionError(f"the page asks for an unknown step: {path}: {action}")
    target.write_text("".join(lines[:first]) + code + "".join(lines[last:]), encoding="utf-8")


def walk(root: Path, text: str) -> list[list[str]]:
    """Follow the page in ``root``: run its scripts, paste its code; return its pytest
    commands (run by the caller)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    tests = []
    for language, body in blocks(text):
        if language == "python":
            first, _, code = body.partition("\n")
            step = STEP.match(first)
            assert step, f"a python block of the page names no place: {first!r}"
            paste(root, step[1], step[2], code)
        elif language == "bash":
            for line in body.splitlines():
                if not line.startswith(".venv/bin/python "):
                    continue  # make, refimpl, a profile switch: too slow for a test
                argv = [sys.executable, *shlex.split(line.split("  #")[0])[1:]]
                if argv[1:3] == ["-m", "pytest"]:
                    tests.append(argv)
                    continue
                done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
                assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    return tests


@pytest.mark.slow
def test_the_page_followed_literally_passes_its_tests(tmp_path):
    """Every step of the page, then its pytest commands, in a scratch copy: the new algorithm
    is registered everywhere, and the guard, its spec module and the tests parametrised over
    ``NAMES`` pass for it. The README keeps room for its row."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, root / name)
    text = PAGE.read_text(encoding="utf-8")
    tests = walk(root, text)
    assert tests, "the page runs no tests"
    init = (root / "refimpl" / "algorithms" / "__init__.py").read_text(encoding="utf-8")
    assert '"my_rloo"' in init
    env = {**os.environ, "PYTHONPATH": str(root)}
    for argv in tests:
        argv = [*argv, "-p", "no:cacheprovider", "-n", "0", "-W", "ignore::DeprecationWarning"]
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{shlex.join(argv[1:])}\n{done.stdout[-4000:]}"


def test_every_python_block_names_its_place():
    """The page's ``python`` blocks all say where they go, in a form the walk above reads."""
    python = [body for lang, body in blocks(PAGE.read_text(encoding="utf-8")) if lang == "python"]
    assert len(python) >= 5
    for body in python:
        assert STEP.match(body.partition("\n")[0]), body.partition("\n")[0]


def test_a_taken_name_is_refused_before_anything_is_written(tmp_path):
    """The script the page starts with never overwrites: ``rloo`` (taken) is refused, and
    the repository is unchanged."""
    before = (ROOT / "refimpl" / "algorithms" / "rloo.py").read_bytes()
    done = subprocess.run(
        [sys.executable, "scripts/dev/new_algorithm.py", "rloo", "--title", "X", "--arxiv",
         "2402.14740", "--summary", "x"],
        cwd=ROOT, capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 2 and "already in NAMES" in done.stderr, done.stderr
    assert (ROOT / "refimpl" / "algorithms" / "rloo.py").read_bytes() == before
