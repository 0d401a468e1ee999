"""docs/adding_an_algorithm.md, followed literally on a scratch copy of the repository.

The page's steps are its code blocks: a ``bash`` block's ``.venv/bin/python`` lines are run
(with this interpreter, in the copy), and a ``python`` block whose first line is a comment
``# PATH: ACTION`` is pasted into ``PATH``, ACTION being one of

* ``the whole file``; ``replace the module docstring``; ``replace def NAME`` (a top-level
  function); ``replace class Config``; ``add to class Config``; ``replace the line of "KEY"``
  (the line that holds ``"KEY":``); ``add to the imports`` (before the first top-level import
  of a module outside the standard library, where ``import torch`` sorts);

and a ``markdown`` block whose first line is a comment ``<!-- PATH: add before the section
"TITLE" -->`` is inserted into ``PATH`` before its line ``## TITLE``.

The pytest commands of its step 6 then run in the copy, and then what ``make test`` would run
over the new name: the whole spec (``tests/spec``) and the tests that iterate over the
algorithms (the registry, the layout, the docs and their build, the README). ``make`` and
``refimpl`` lines (the whole suite, a training run) are left out: they take minutes.

Which tests that second run keeps (``ONLY_THE_NEW_ALGORITHM``; the suite itself runs every
one of the others on this checkout, where the page was not followed):

* a test parametrised by an algorithm (by name, or by its module): kept for the new one only;
* every other test (the registry's, the layout's, the docs', ``tests/spec/test_core.py``,
  ``test_fidelity.py``, ``test_shapes.py``, ...): kept, since any of them may read the registry,
  the algorithm files or the pages the walk edits;
* except the tests of another algorithm's own spec module (``tests/spec/test_<name>.py``,
  ``name`` in ``NAMES``), which test that algorithm alone: left out, unless the test's own source
  reads the registry (``NAMES``, ``BASELINE``, ``algorithms.get(``: e.g. "every other algorithm
  asks for no values"), and only when the walk changed no code they import (no Python file
  under ``refimpl/``, ``tests/`` or ``toy_envs/`` but the registry, the new algorithm's file and
  its spec module; otherwise they all run);
* and a test that already passed in the page's own pytest commands (the same id, in the same
  copy) is not run a second time.

That is about a minute less of the walk (other algorithms' own tests were 80 of its 140 s) with
the same checks of what the page produces.
"""

from __future__ import annotations

import ast
import hashlib
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
MARKDOWN_STEP = re.compile(r"^<!-- (\S+): (.+) -->$")
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
    elif action == "replace class Config":
        found = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Config"]
        assert found, f"{path} has no class Config"
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


def paste_markdown(root: Path, path: str, action: str, text: str) -> None:
    """Apply one ``markdown`` block of the page to ``root / path``."""
    m = re.fullmatch(r'add before the section "(.+)"', action)
    assert m, f"the page asks for an unknown step: {path}: {action}"
    target = root / path
    lines = target.read_text(encoding="utf-8").splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if line.startswith(f"## {m[1]}")]
    assert len(hits) == 1, f"{path}: {len(hits)} sections ## {m[1]}"
    lines.insert(hits[0], text)
    target.write_text("".join(lines), encoding="utf-8")


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
        elif language == "markdown":
            first, _, text = body.partition("\n")
            step = MARKDOWN_STEP.match(first)
            assert step, f"a markdown block of the page names no place: {first!r}"
            paste_markdown(root, step[1], step[2], text)
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


#: The new algorithm's name on the page.
NEW = "my_rloo"
#: What ``make test`` runs that reads the algorithms, besides the spec: the registry, the
#: layout, the docs (their hooks and pages; the strict build is second-tier), the README, the
#: library's safety checks, the figures' colours, the success threshold. (The CLI's lists of names, the
#: trainer's and the scale-up's runs of every algorithm take minutes: the suite runs them.)
ACROSS_ALGORITHMS = ("tests/spec", "tests/test_registry.py", "tests/test_layout.py",
                     "tests/test_docs_hooks.py", "tests/test_docs.py", "tests/test_readme.py",
                     "tests/test_safety_library.py", "tests/test_plots.py",
                     "tests/test_success_threshold.py")  # fmt: skip

#: A pytest plugin for the page's own pytest commands in the copy: it writes down the id of
#: every test that passes (``WALK_PASSED``), for ``ONLY_THE_NEW_ALGORITHM`` to leave out.
RECORD_WHAT_PASSED = """
import os

def pytest_runtest_logreport(report):
    if report.when == "call" and report.passed:
        with open(os.environ["WALK_PASSED"], "a", encoding="utf-8") as f:
            f.write(report.nodeid + "\\n")
"""

#: A pytest plugin for the copy's run of ``ACROSS_ALGORITHMS`` (the module docstring says what
#: it keeps, and why): an item parametrised by another algorithm than the new one (by name, or
#: by its module) is left out; so is an item of another algorithm's own spec module whose
#: source does not read the registry, when ``WALK_OTHERS_UNTOUCHED`` is set; so is an item that
#: already passed (``WALK_PASSED``).
ONLY_THE_NEW_ALGORITHM = """
import inspect, os, re, types

REGISTRY = re.compile(r"\\bNAMES\\b|\\bBASELINE\\b|algorithms\\.get\\(")

def pytest_collection_modifyitems(config, items):
    from refimpl import algorithms
    others = set(algorithms.NAMES) - {os.environ["WALK_NEW_ALGORITHM"]}
    own_modules = {f"test_{name}.py" for name in others}
    untouched = os.environ.get("WALK_OTHERS_UNTOUCHED") == "1"
    with open(os.environ["WALK_PASSED"], encoding="utf-8") as f:
        passed = set(f.read().splitlines())
    keep, drop = [], []
    for item in items:
        values = getattr(getattr(item, "callspec", None), "params", {}).values()
        names = {v if isinstance(v, str) else v.__name__.rsplit(".", 1)[-1]
                 for v in values if isinstance(v, (str, types.ModuleType))}
        another_algorithms_own = (
            untouched and item.path.parent.name == "spec" and item.path.name in own_modules
            and not REGISTRY.search(inspect.getsource(getattr(item, "function", item.module)))
        )
        left_out = names & others or another_algorithms_own or item.nodeid in passed
        (drop if left_out else keep).append(item)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep
"""

#: The Python files whose change leaves other algorithms' own spec tests to run in the walk:
#: every one but these (``{new}``: the new algorithm's name).
WALK_MAY_CHANGE = ("refimpl/algorithms/__init__.py", "refimpl/algorithms/{new}.py",
                   "tests/spec/test_{new}.py")  # fmt: skip


def python_files(root: Path) -> dict[str, str]:
    """``{path: sha256}`` of the Python files of the copy that the tests import."""
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for top in ("refimpl", "tests", "toy_envs")
        for p in sorted((root / top).rglob("*.py"))
    }


def scratch_copy(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    for name in COPY:
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, root / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, root / name)
    return root


@pytest.mark.slow
def test_the_page_followed_literally_passes_the_suite(tmp_path):
    """Every step of the page in a scratch copy, then its pytest commands, then the whole spec
    and every test that reads the algorithms over the new name (``ACROSS_ALGORITHMS``), in the
    first tier: what ``make test`` runs on a repository where the page was followed literally
    (the second tier's site build runs over the whole tree in ``make test-all``). The README keeps
    room for its row. The second run keeps what the module docstring says: the new algorithm's
    tests and every test that reads the registry or the files the page edits, not the other
    algorithms' own spec tests (unchanged code) nor what the page's commands already passed."""
    root = scratch_copy(tmp_path)
    before = python_files(root)
    text = PAGE.read_text(encoding="utf-8")
    tests = walk(root, text)
    assert tests, "the page runs no tests"
    init = (root / "refimpl" / "algorithms" / "__init__.py").read_text(encoding="utf-8")
    assert f'"{NEW}"' in init
    after = python_files(root)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    untouched = changed <= {p.format(new=NEW) for p in WALK_MAY_CHANGE}
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    (plugins / "record_what_passed.py").write_text(RECORD_WHAT_PASSED, encoding="utf-8")
    (plugins / "only_the_new_algorithm.py").write_text(ONLY_THE_NEW_ALGORITHM, encoding="utf-8")
    passed = tmp_path / "passed.txt"
    passed.write_text("", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), str(plugins)]),
           "WALK_NEW_ALGORITHM": NEW, "WALK_PASSED": str(passed),
           "WALK_OTHERS_UNTOUCHED": "1" if untouched else "", "OMP_NUM_THREADS": "1"}  # fmt: skip
    everything = [sys.executable, "-m", "pytest", *ACROSS_ALGORITHMS, "-q",
                  "-m", "not second_tier", "-p", "only_the_new_algorithm"]  # fmt: skip
    for argv in [*[[*t, "-p", "record_what_passed"] for t in tests], everything]:
        argv = [*argv, "-p", "no:cacheprovider", "-n", "0", "-W", "ignore::DeprecationWarning"]
        done = subprocess.run(argv, cwd=root, env=env, capture_output=True, text=True)
        assert done.returncode == 0, f"{shlex.join(argv[1:])}\n{done.stdout[-4000:]}"
        assert " passed" in done.stdout.splitlines()[-1], done.stdout[-2000:]
    assert passed.read_text(encoding="utf-8").strip(), "the page's commands passed no test"


def test_the_edits_the_page_counts_are_its_blocks():
    """Step 2 says how many edits it makes, in words, and gives exactly that many blocks."""
    text = PAGE.read_text(encoding="utf-8")
    step = text.split("## 2.", 1)[1].split("\n## 3.", 1)[0]
    m = re.search(r"For RLOO, (\w+) edits", step)
    assert m, "step 2 does not say how many edits it makes"
    words = "zero one two three four five six seven eight nine ten".split()
    assert words.index(m[1]) == len([b for lang, b in blocks(step) if lang == "python"])


def test_the_example_config_is_step_zeros():
    """Step 0's table (token-mean, no KL) is what the page's Config block writes: the example
    does not keep GRPO's aggregation and β = 0.04."""
    text = PAGE.read_text(encoding="utf-8")
    (config,) = [b for lang, b in blocks(text) if lang == "python" and "class Config" in b]
    assert 'loss_agg_mode: str = "token-mean"' in config and "kl_coef: float = 0.0" in config
    assert "`token-mean`" in text.split("## 1.", 1)[0] and "`kl_coef = 0`" in text


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


def _scratch_for_the_script(tmp_path: Path) -> Path:
    """A copy of what ``scripts/dev/new_algorithm.py`` reads and writes (its ``PLACES``, the
    base's file), so that a test of a bad input never writes into this checkout."""
    root = tmp_path / "repo"
    for rel in ("scripts/dev/new_algorithm.py", "refimpl/algorithms/__init__.py",
                "refimpl/algorithms/grpo.py", "docs/_algorithm_blocks.py", "mkdocs.yml",
                "docs/math.md", "docs/spec.md", "docs/api/algorithms.md", "README.md"):  # fmt: skip
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / rel, root / rel)
    return root


def _new_algorithm(root: Path, name: str, title: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "scripts/dev/new_algorithm.py", name, "--title", title, "--arxiv",
         "2402.14740", "--summary", "x"],
        cwd=root, capture_output=True, text=True,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "title", "named"),
    [
        ("x1", 'T"""', "--title"),  # the issue's: the spec module was a SyntaxError
        ("x1", "T\\", "--title"),  # a backslash ends the docstring's quote
        ("x1", "A: B", "--title"),  # a second colon breaks mkdocs.yml's nav
        ("x1", "A ] B", "--title"),  # a bracket breaks the Markdown link
        ("class", "T", "NAME"),  # keywords: `from refimpl.algorithms import class`
        ("import", "T", "NAME"),
        ("get", "T", "NAME"),  # refimpl.algorithms.get would be the module
        ("a" * 300, "T", "NAME"),  # the traceback 7: File name too long
    ],
)
def test_the_script_refuses_what_would_not_compile_or_be_written(tmp_path, name, title, named):
    """Issue 61, silent 3 and traceback 7: ``--title 'T\"\"\"'`` printed the list of edits,
    exited 0 and left a ``tests/spec/test_x1.py`` that did not compile; ``class`` and
    ``import`` were accepted as names; a 300-character name was ``OSError: File name too
    long`` with a traceback. Each is one line naming NAME or the flag, exit code 2, and
    nothing written."""
    root = _scratch_for_the_script(tmp_path)
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    done = _new_algorithm(root, name, title)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith(f"new_algorithm.py: error: {named}: "), done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before


def test_what_the_script_writes_compiles(tmp_path):
    """A title with every character the script allows: each Python file it writes or edits
    compiles, and the nav it edits is YAML."""
    import yaml

    root = _scratch_for_the_script(tmp_path)
    done = _new_algorithm(root, "bobs_rloo", "Bob's RLOO (v2, +KL/2) - x.y")
    assert done.returncode == 0, done.stderr
    for rel in ("refimpl/algorithms/bobs_rloo.py", "refimpl/algorithms/__init__.py",
                "tests/spec/test_bobs_rloo.py", "docs/_algorithm_blocks.py"):  # fmt: skip
        compile((root / rel).read_text(encoding="utf-8"), rel, "exec")
    site = yaml.load((root / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)

    def entries(node) -> list:  # every {title: page} of the nav, at any depth
        if isinstance(node, dict):
            return [node] + [e for v in node.values() for e in entries(v)]
        return [e for v in node for e in entries(v)] if isinstance(node, list) else []

    assert {"Bob's RLOO (v2, +KL/2) - x.y": "algorithms/bobs_rloo.md"} in entries(site["nav"])
