"""Every path of the repository that the docs, the notebooks and the code name exists.

What is read: the pages (``docs/**/*.md``), ``README.md``, ``CONTRIBUTING.md``, every
``README.md`` under ``notebooks/`` and ``scripts/``, the notebooks' markdown and code cells
(not their outputs), and the docstrings and comments of the Python files (and the comments of
the shell scripts) under ``refimpl/``, ``toy_envs/``, ``scripts/`` and ``examples/``.

What is checked:

* every path that starts with ``refimpl/``, ``toy_envs/``, ``scripts/``, ``tests/``,
  ``docs/``, ``notebooks/`` or ``examples/`` (read from the repository's root; a trailing
  ``#anchor``, ``::name`` or ``:line`` is dropped) is a file or a folder of the tree;
* every relative markdown link ``[text](target)`` in those markdown files and notebook cells
  resolves from the file's own folder.

What is not a path of the tree, and so not checked (the rule, one case each):

1. a pattern or a placeholder, which names many files or none: it holds ``*``, ``?``, ``<``,
   ``>``, ``{``, ``}``, ``$`` or ``…``, or a word in capitals where the reader puts a name
   (``refimpl/algorithms/NAME.py``, ``tests/spec/test_NAME.py``; ``README``, ``LICENSE`` and
   the like excepted);
2. an output a command writes when it runs: the value of ``--out``/``--output``/``-o`` or of
   a ``>`` redirection (``runs/...`` and ``/tmp/...`` start with no prefix above, so are never
   read as paths), and the files the add-an-algorithm tutorial has the reader create (its
   algorithm is called ``TUTORIAL_NAME``);
3. a name that is not a file: a gymnasium environment id (``toy_envs/Chain-v0``) or a TRL log
   key ``refimpl/<key>`` whose ``<key>`` is a metric name the code writes as a string;
4. a path that is not this repository's and that the text says so of: a former location, or
   a file of another repository (``NOT_HERE``, with where it is);
5. the "was" column of ``docs/design.md``'s "Where things moved" table: a former location by
   definition (its "is now" column is checked).
"""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PREFIXES = ("refimpl", "toy_envs", "scripts", "tests", "docs", "notebooks", "examples")
#: A path token: a prefix and what follows up to a space, quote, bracket or separator.
PATH = re.compile(rf"(?<![\w./~-])((?:{'|'.join(PREFIXES)})/[^\s`'\"()\[\],;|]*)")
#: ``[text](target)``: a markdown link (or image).
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
PLACEHOLDER = re.compile(r"[*?<>{}$…]")
CAPITALS = re.compile(r"^[A-Z]{2,}$")
USUAL_CAPITALS = {"README", "LICENSE", "CONTRIBUTING", "CITATION", "CHANGELOG", "MANIFEST"}
OUTPUT_FLAG = re.compile(r"(?:--out|--output|-o)[= ]$|>\s*$")
GYM_ID = re.compile(r"^toy_envs/[A-Z]\w*-v\d+$")
TRL_KEY = re.compile(r"^refimpl/([a-z][a-z0-9_]*)$")
#: The algorithm docs/adding_an_algorithm.md has the reader create (its files exist only then).
TUTORIAL_NAME = "my_rloo"
#: Paths a text names as no longer, or never, this repository's: where each is.
NOT_HERE = {
    "docs/claims/real": "moved to scripts/experiments/claims/results/ (its README says so)",
    "examples/data_preprocess/gsm8k.py": "in verl's repository (docs/scaleup.md says so)",
}


def _python_texts(path: Path) -> str:
    """The docstrings and the comments of a Python file."""
    source = path.read_text(encoding="utf-8")
    parts = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring:
                parts.append(docstring)
    tokens = tokenize.generate_tokens(io.StringIO(source).readline)
    parts += [t.string for t in tokens if t.type == tokenize.COMMENT]
    return "\n".join(parts)


def _notebook_cells(path: Path, kinds: tuple[str, ...]) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] in kinds)


def markdown_files(root: Path = ROOT) -> list[Path]:
    found = sorted((root / "docs").rglob("*.md"))
    found += [root / name for name in ("README.md", "CONTRIBUTING.md") if (root / name).is_file()]
    for folder in ("notebooks", "scripts"):
        found += sorted((root / folder).rglob("README.md"))
    return found


def without_former_locations(text: str) -> str:
    """``text`` with the first cell of each row of its "Where things moved" table blanked
    (rule 5): those cells name where things were."""
    out, moved = [], False
    for line in text.splitlines():
        if line.startswith("## "):
            moved = line.strip() == "## Where things moved"
        if moved and line.startswith("| ") and line.count("|") >= 3:
            line = "| |" + line.split("|", 2)[2]
        out.append(line)
    return "\n".join(out)


def texts(root: Path = ROOT) -> Iterator[tuple[Path, str]]:
    """``(file, text)`` of every text whose paths are checked (the module docstring's list)."""
    for path in markdown_files(root):
        text = path.read_text(encoding="utf-8")
        yield path, without_former_locations(text) if path.name == "design.md" else text
    for path in sorted((root / "notebooks").glob("*.ipynb")):
        yield path, _notebook_cells(path, ("markdown", "code"))
    for folder in ("refimpl", "toy_envs", "scripts", "examples"):
        for path in sorted((root / folder).rglob("*.py")):
            yield path, _python_texts(path)
        for path in sorted((root / folder).rglob("*.sh")):
            lines = path.read_text(encoding="utf-8").splitlines()
            yield path, "\n".join(line for line in lines if line.lstrip().startswith("#"))


def code_strings(root: Path = ROOT) -> set[str]:
    """Every string constant in ``refimpl/``'s code (the metric names among them)."""
    out = set()
    for path in (root / "refimpl").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
    return out


def is_exempt(path: str, before: str, strings: set[str]) -> bool:
    """Whether ``path`` (found after the text ``before``) is not a path of the tree: the
    module docstring's rules 1-4."""
    if PLACEHOLDER.search(path):
        return True
    words = [w for segment in path.split("/") for w in segment.split(".")[0].split("_")]
    if any(CAPITALS.match(w) and w not in USUAL_CAPITALS for w in words):
        return True
    if OUTPUT_FLAG.search(before) or TUTORIAL_NAME in path:
        return True
    key = TRL_KEY.match(path)
    return bool(GYM_ID.match(path) or (key and key.group(1) in strings) or path in NOT_HERE)


def missing_paths(root: Path = ROOT) -> list[str]:
    """``file: path`` for every named path (module docstring) that is not in the tree."""
    strings = code_strings(root)
    out = []
    for file, text in texts(root):
        for match in PATH.finditer(text):
            path = re.sub(r"(::.*|:[\d-]+|#.*)$", "", match.group(1)).rstrip(".:,;!")
            before = text[max(0, match.start() - 12) : match.start()]
            if not is_exempt(path, before, strings) and not (root / path).exists():
                out.append(f"{file.relative_to(root)}: {path}")
    return sorted(set(out))


def broken_links(root: Path = ROOT) -> list[str]:
    """``file: target`` for every relative markdown link that does not resolve from the
    file's folder (web addresses, ``mailto:`` and in-page ``#anchors`` are not files)."""
    sources = [(p, p.read_text(encoding="utf-8")) for p in markdown_files(root)]
    sources += [
        (p, _notebook_cells(p, ("markdown",))) for p in (root / "notebooks").glob("*.ipynb")
    ]
    out = []
    for file, text in sources:
        for match in LINK.finditer(text):
            target = match.group(1).split("#")[0]
            if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue
            if not PLACEHOLDER.search(target) and not (file.parent / target).exists():
                out.append(f"{file.relative_to(root)}: {target}")
    return sorted(set(out))


def test_every_named_path_exists():
    assert missing_paths() == []


def test_every_relative_link_resolves():
    assert broken_links() == []


def test_the_checks_see_a_broken_path_and_leave_the_exempt_ones(tmp_path):
    """Both checks can fail: a stale path in a docstring, a comment, a page, a notebook cell
    and a README, and a broken link, are each found; what the rules exempt is not."""
    for folder in ("refimpl", "docs", "notebooks", "scripts/x"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "refimpl" / "core.py").write_text(
        '"""See ``scripts/gone.py`` and ``refimpl/core.py``."""\n'
        "x = {'adv_std': 1}  # refimpl/old.py, refimpl/adv_std (a log key)\n"
        "y = 'scripts/not_a_docstring.py'\n"
    )
    (tmp_path / "docs" / "page.md").write_text(
        "`docs/missing.md`, [a link](nowhere.md), [fine](page.md), [web](https://x.org/a)\n"
        "`refimpl/algorithms/NAME.py`, `runs/<arm>_seed<seed>.json`, `docs/*.md`,\n"
        "`toy_envs/Chain-v0`, `python x.py --out scripts/x/new.json`, `docs/claims/real`,\n"
        "`refimpl/algorithms/my_rloo.py`, `refimpl/core.py::masked_mean`, `refimpl/core.py:12`\n"
    )
    notebook = {"cells": [
        {"cell_type": "markdown", "source": ["[up](../docs/page.md) [down](../docs/no.md)"]},
        {"cell_type": "code", "source": ["# notebooks/lost.ipynb\n"], "outputs": []},
    ]}  # fmt: skip
    (tmp_path / "notebooks" / "01.ipynb").write_text(json.dumps(notebook))
    (tmp_path / "scripts" / "x" / "README.md").write_text("Run `scripts/x/run.py`.\n")
    assert missing_paths(tmp_path) == [
        "docs/page.md: docs/missing.md",
        "notebooks/01.ipynb: notebooks/lost.ipynb",
        "refimpl/core.py: refimpl/old.py",
        "refimpl/core.py: scripts/gone.py",
        "scripts/x/README.md: scripts/x/run.py",
    ]
    assert broken_links(tmp_path) == [
        "docs/page.md: nowhere.md",
        "notebooks/01.ipynb: ../docs/no.md",
    ]


#: ``tests/FILE.py::TEST``: a test the safety page names as the one holding a promise.
NAMED_TEST = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")


def test_every_promise_of_the_safety_page_names_a_test_that_exists():
    """docs/safety.md, "What each command promises" (issue 61): every ``refimpl`` command has
    a list there, every promise of it names at least one test, and every test named is
    defined in the file named (a renamed or deleted test leaves its promise unheld)."""
    from refimpl.cli import COMMANDS

    text = (ROOT / "docs" / "safety.md").read_text(encoding="utf-8")
    section = text.split("\n## What each command promises\n", 1)[1].split("\n## ", 1)[0]
    headings = re.findall(r"^### (.+)$", section, re.M)
    for command in COMMANDS:
        assert any(f"`refimpl {command}`" in h for h in headings), command
    promises = re.split(r"\n(?=- )", section.split("\n### ", 1)[1])
    promises = [p for p in promises if p.startswith("- ")]
    assert len(promises) >= 40
    for promise in promises:
        named = NAMED_TEST.findall(promise)
        assert named, f"a promise names no test: {promise[:80]!r}"
        for file, test in named:
            source = (ROOT / file).read_text(encoding="utf-8")
            assert re.search(rf"^def {test}\(", source, re.M), f"{file}::{test} is not defined"


def test_only_the_former_locations_of_the_moved_table_go_unchecked():
    """Rule 5 blanks the "was" cells of "Where things moved" and nothing else: its "is now"
    cells, and a table of another section, are still read."""
    page = (
        "## Where things moved\n| was | is now |\n| `scripts/gone.py` | `scripts/here.py` |\n"
        "## Next\n| `scripts/kept.py` | x |\n"
    )
    kept = without_former_locations(page)
    assert "scripts/gone.py" not in kept
    assert "scripts/here.py" in kept and "scripts/kept.py" in kept
