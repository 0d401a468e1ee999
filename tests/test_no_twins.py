"""No twins, and files a reader can hold (issue 60, items 4 and 6).

A name says where a thing is: two scripts called ``report.py``, or two functions called
``config_from_record`` that return different things, send a reader to the wrong one. So

* no two Python modules or shell scripts of the repository share a file name, read without
  case and underscores (``result_files.py`` and ``resultfiles.py``, ``_algorithm_pages.py``
  and ``algorithm_pages.py`` are twins); ``__init__.py``, the test files and ``conftest.py``
  are named by their folder or their subject and are left out;
* no top-level name (a ``def``, a ``class``, a module-level assignment) is defined in two
  modules of ``refimpl``, apart from the names that are parallel on purpose (``PARALLEL``);

and ``core.py``, the mathematics a reader follows from every algorithm file, stays within
``CORE_MAX_LINES``, and no function of ``refimpl`` reaches ``FUNCTION_LINES`` lines.
"""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Folders that hold no source of ours.
SKIP = {".venv", "site", "build", "node_modules", "runs", "__pycache__"}

#: File names that are not twins however often they occur: a package's ``__init__.py`` is
#: named by its folder, ``conftest.py`` is pytest's.
NOT_NAMES = {"__init__.py", "conftest.py"}

#: Names defined in several modules of ``refimpl`` on purpose. ``main``: every command's entry
#: point is called so. ``__all__``: a module's export list.
EXEMPT_NAMES = {"main", "__all__"}


def _parallel_unit(rel: str) -> str:
    """The unit a module of ``refimpl`` counts as, for the twins: files parallel on purpose
    count as one, so a name they share is one name.

    * The algorithm files (``refimpl/algorithms/<name>.py``): each defines ``NAME``,
      ``Config``, ``advantages``, ``reference_advantages``, ``loss`` (the contract,
      docs/design.md) and is written so that ``diff grpo.py <name>.py`` is the lesson.
    * The reader's two loops, ``refimpl/loop.py`` and ``refimpl/scaleup/hf_by_hand.py``: the
      same loop on the toy model and on a Hugging Face model, read side by side (``rollout``,
      ``update``).
    """
    parts = rel.split("/")
    if parts[:2] == ["refimpl", "algorithms"] and parts[-1] != "__init__.py":
        return "refimpl/algorithms/<name>.py"
    if rel in ("refimpl/loop.py", "refimpl/scaleup/hf_by_hand.py"):
        return "the reader's loops"
    return rel


def source_files(root: Path, suffixes: tuple[str, ...] = (".py", ".sh")) -> list[Path]:
    """Every file of ours under ``root`` with one of ``suffixes``."""
    return [
        p
        for p in sorted(root.rglob("*"))
        if p.suffix in suffixes
        and p.is_file()
        and not any(part in SKIP or part.startswith(".") for part in p.relative_to(root).parts)
    ]


def twin_file_names(root: Path = ROOT) -> dict[str, list[str]]:
    """``{name read without case and underscores: [paths]}`` for every name two modules or
    scripts share (test files, ``__init__.py`` and ``conftest.py`` aside)."""
    found = defaultdict(list)
    for path in source_files(root):
        rel = path.relative_to(root)
        if path.name in NOT_NAMES or path.name.startswith("test_") or rel.parts[0] == "tests":
            continue
        found[path.name.replace("_", "").lower()].append(str(rel))
    return {name: paths for name, paths in found.items() if len(paths) > 1}


def top_level_names(source: str) -> set[str]:
    """The names a module defines at its top level: functions, classes and assignments."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                names |= {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
    return names


def twin_names(root: Path = ROOT) -> dict[str, list[str]]:
    """``{name: [units]}`` for every top-level name defined in two units of ``refimpl``."""
    found = defaultdict(set)
    for path in source_files(root / "refimpl", (".py",)):
        rel = str(path.relative_to(root))
        for name in top_level_names(path.read_text(encoding="utf-8")) - EXEMPT_NAMES:
            found[name].add(_parallel_unit(rel))
    return {name: sorted(units) for name, units in sorted(found.items()) if len(units) > 1}


def test_no_two_modules_or_scripts_share_a_file_name():
    assert twin_file_names() == {}


def test_no_top_level_name_is_defined_twice_in_the_package():
    assert twin_names() == {}


def test_the_twin_checks_see_twins(tmp_path):
    """Each check can fail: a twin file name (across case and underscores), a twin function,
    and a twin constant are found; the parallel files' shared names and the test files are
    not."""
    files = {
        "scripts/a/report.py": "",
        "scripts/b/report.py": "",
        "docs/_page_blocks.py": "",
        "scripts/dev/page_blocks.py": "",
        "scripts/c/run.sh": "",
        "scripts/d/run.sh": "",
        "tests/test_x.py": "",
        "tests/spec/test_x.py": "",
        "refimpl/a.py": "SEED = 1\ndef train(): ...\ndef main(): ...\n",
        "refimpl/b/c.py": "SEED: int = 1\nclass train: ...\ndef main(): ...\n",
        "refimpl/algorithms/grpo.py": "NAME = 'grpo'\ndef loss(): ...\n",
        "refimpl/algorithms/dapo.py": "NAME = 'dapo'\ndef loss(): ...\n",
        "refimpl/loop.py": "def rollout(): ...\n",
        "refimpl/scaleup/hf_by_hand.py": "def rollout(): ...\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    assert twin_file_names(tmp_path) == {
        "report.py": ["scripts/a/report.py", "scripts/b/report.py"],
        "pageblocks.py": ["docs/_page_blocks.py", "scripts/dev/page_blocks.py"],
        "run.sh": ["scripts/c/run.sh", "scripts/d/run.sh"],
    }
    assert twin_names(tmp_path) == {
        "SEED": ["refimpl/a.py", "refimpl/b/c.py"],
        "train": ["refimpl/a.py", "refimpl/b/c.py"],
    }


# ---------------------------------------------------------------------------------------------
# Files a reader holds at once.
# ---------------------------------------------------------------------------------------------

#: ``core.py`` holds the mathematics a reader follows from an algorithm file, and nothing else:
#: at most this many lines (issue 60: "at most about 400"; it was 471).
CORE_MAX_LINES = 400
#: No function of ``refimpl`` reaches this many lines, its ``def`` line to its last line
#: (docstring and comments included); ``tests/test_layout.py`` bounds the whole repository at
#: 80 inclusive, this bounds the package strictly below it.
FUNCTION_LINES = 80


def long_functions(root: Path = ROOT, limit: int = FUNCTION_LINES) -> list[str]:
    """``path:line name (n lines)`` of every function of ``refimpl`` under ``root`` (methods
    and nested functions included) of ``limit`` lines or more."""
    out = []
    for path in source_files(root / "refimpl", (".py",)):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines >= limit:
                    out.append(
                        f"{path.relative_to(root)}:{node.lineno} {node.name} ({lines} lines)"
                    )
    return out


def test_no_function_of_the_package_reaches_the_limit():
    assert long_functions() == []


def test_core_holds_the_mathematics_in_a_sitting():
    lines = len((ROOT / "refimpl" / "core.py").read_text(encoding="utf-8").splitlines())
    assert lines <= CORE_MAX_LINES


def test_the_function_check_sees_a_function_at_the_limit(tmp_path):
    """A method of exactly ``FUNCTION_LINES`` lines is found; one line shorter is not."""
    body = "\n".join(f"        x{i} = {i}" for i in range(FUNCTION_LINES - 1))
    (tmp_path / "refimpl").mkdir()
    (tmp_path / "refimpl" / "m.py").write_text(
        f"class C:\n    def f(self):\n{body}\n    def g(self):\n        return 1\n"
    )
    assert long_functions(tmp_path) == [f"refimpl/m.py:2 f ({FUNCTION_LINES} lines)"]
    assert long_functions(tmp_path, FUNCTION_LINES + 1) == []


# ---------------------------------------------------------------------------------------------
# Renamed without aliases: docs/design.md's "Where things moved" holds against the tree.
# ---------------------------------------------------------------------------------------------


def resolve(dotted: str) -> bool:
    """Whether ``refimpl.a.b.name`` names something: the longest importable module prefix,
    then attributes."""
    parts = dotted.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def defined(dotted: str) -> bool:
    """Whether ``refimpl.a.b.name`` is defined (not imported) at the top level of module
    ``refimpl.a.b``; a module is defined when it imports."""
    if is_module(dotted):
        return True
    module, _, name = dotted.rpartition(".")
    if not is_module(module):
        return resolve(dotted)  # an attribute of a class, say
    source = Path(importlib.import_module(module).__file__).read_text(encoding="utf-8")
    return name in top_level_names(source)


def is_module(dotted: str) -> bool:
    try:
        importlib.import_module(dotted)
    except ImportError:
        return False
    return True


def moved_names(text: str) -> list[tuple[str, str]]:
    """``(was, is now)`` for every row of the "Where things moved" table whose first cell
    begins with a dotted ``refimpl.`` name in backticks and whose second names one."""
    import re

    section = text.split("## Where things moved", 1)[1].split("\n## ", 1)[0]
    out = []
    for was, now in re.findall(r"^\| (.+?) \| (.+?) \|$", section, re.M):
        a = re.match(r"`(refimpl(?:\.\w+)+)`(?=[ ,]|$)", was)
        b = re.search(r"`(refimpl(?:\.\w+)+)`", now)
        if a and b:
            out.append((a.group(1), b.group(1)))
    return out


def test_every_moved_name_is_gone_and_its_new_home_is_there():
    rows = moved_names((ROOT / "docs" / "design.md").read_text(encoding="utf-8"))
    assert ("refimpl.algorithms.SUCCESS_THRESHOLD", "refimpl.contract.SUCCESS_THRESHOLD") in rows
    # No alias left behind: a function or a constant that moved is gone from its old module
    # (a module split into a package of the same name keeps its name, so is not asked).
    assert [was for was, _ in rows if not is_module(was) and defined(was)] == []
    assert [now for _, now in rows if not defined(now)] == []


def test_the_moved_check_sees_an_alias_and_a_missing_home():
    assert defined("refimpl.contract.SUCCESS_THRESHOLD")
    assert not defined("refimpl.evaluate.SUCCESS_THRESHOLD")  # imported there, not defined
    assert not defined("refimpl.contract.NO_SUCH_NAME")
    assert not resolve("refimpl.no_such_module.NAME")
    table = "## Where things moved\n| was | is now |\n| `refimpl.a.B` (why) | `refimpl.c.D`, x |\n"
    assert moved_names(table) == [("refimpl.a.B", "refimpl.c.D")]
