"""Start a new algorithm: every place ``tests/test_registry.py`` checks, in one command.

    .venv/bin/python scripts/dev/new_algorithm.py NAME --title TITLE --arxiv ID --summary TEXT

copies ``refimpl/algorithms/grpo.py`` (or ``--base``'s file) to ``refimpl/algorithms/NAME.py``
and registers it everywhere a new algorithm must appear; docs/adding_an_algorithm.md then says
what to change in each. Every check is done before the first write: a name that is taken (in
``NAMES``, or by any of the files below) is refused, so nothing is ever overwritten.

The places, in the order ``tests/test_registry.py`` checks them (``PLACES``):

1. ``refimpl/algorithms/NAME.py``: the base's file, its ``NAME`` changed;
2. ``NAMES`` in ``refimpl/algorithms/__init__.py``: the name appended (the existing algorithms
   keep their colours in figures; a new one gets the palette's next colour);
3. ``tests/spec/test_NAME.py``: the spec module, with a ``test_worked_example`` that fails
   until you write its numbers;
4. ``docs/algorithms/NAME.md``: the page, with its Quick facts and equations markers and its
   sections;
5. ``mkdocs.yml``: the page in the site's nav;
6. ``docs/math.md``: a row in the side-by-side table (the base's, to edit) and a line in
   its list of pages;
7. ``docs/spec.md``: the index of the spec module;
8. ``docs/api/algorithms.md``: the API reference entry;
9. ``README.md``: a row in the table of algorithms.

Then run ``scripts/dev/algorithm_pages.py`` (it writes the page's Quick facts and loop, read
off the code, and its equations from the docstring: no line to add for them).
verl and TRL need no line: they register every name in ``NAMES``.
"""

from __future__ import annotations

import argparse
import ast
import keyword
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: What this script writes or edits, relative to the repository root ("{name}": the new one).
PLACES = (
    "refimpl/algorithms/{name}.py",
    "refimpl/algorithms/__init__.py",
    "tests/spec/test_{name}.py",
    "docs/algorithms/{name}.md",
    "mkdocs.yml",
    "docs/math.md",
    "docs/spec.md",
    "docs/api/algorithms.md",
    "README.md",
)

SPEC_MODULE = '''"""{title}'s own invariants (the common ones, in ``test_common.py``, run on it already).

Each test states its invariant and the equation it follows from; ``docs/spec.md`` indexes them.
"""

from __future__ import annotations

import pytest

from refimpl.algorithms import {name}
from tests.spec import worked


def test_worked_example():
    """The numbers of the worked example in ``docs/algorithms/{name}.md``, derived by hand."""
    batch, logp = worked.batch()
    adv = {name}.advantages(batch, {name}.Config())
    pytest.fail(f"write the worked example's numbers, computed by hand; the code gives {{adv}}")
'''

PAGE = """# {title}

{MARKER}

{summary} ({paper}). The file: [`{name}.py`](../../refimpl/algorithms/{name}.py); its spec:
[`test_{name}.py`](../../tests/spec/test_{name}.py).

## Key equations

<!-- equations -->

## Worked example

The group of [`tests/spec/worked.py`](../../tests/spec/worked.py), by hand; `test_worked_example`
asserts every number.

## What it does to entropy

Not measured yet.

## Other implementations

## References

- {paper}
"""


def _fail(message: str) -> None:
    print(f"new_algorithm.py: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def _read(path: str) -> str:
    return (ROOT / path).read_text(encoding="utf-8")


def _insert_after_last(
    text: str, pattern: str, line: str, where: str, *, item: bool = False
) -> str:
    """``text`` with ``line`` inserted after the last line matching ``pattern`` (``item``:
    after that list item's indented continuation lines too)."""
    matches = list(re.finditer(pattern, text, re.M))
    if not matches:
        _fail(f"{where}: no line matches {pattern!r} (edited by hand?)")
    end = text.find("\n", matches[-1].end()) + 1 or len(text)
    while item and text.startswith("  ", end) and text[end:].split("\n", 1)[0].strip():
        end = text.index("\n", end) + 1
    return text[:end] + line + "\n" + text[end:]


def _names() -> tuple[str, ...]:
    tree = ast.parse(_read("refimpl/algorithms/__init__.py"))
    for node in tree.body:
        target = getattr(node, "target", None) or (getattr(node, "targets", None) or [None])[0]
        if isinstance(target, ast.Name) and target.id == "NAMES":
            return tuple(ast.literal_eval(node.value))
    _fail("refimpl/algorithms/__init__.py: no NAMES")
    return ()


def plan(name: str, base: str, title: str, arxiv: str, summary: str) -> dict[str, str]:
    """``{path: new text}`` for every place, computed before anything is written; refuses a
    taken name, an unknown base, or a field that would break a table."""
    _check_plan(name, base, title, arxiv, summary)
    paper = f"arXiv {arxiv}"
    out: dict[str, str] = {}
    _plan_code(out, name, base, title, summary, paper)
    _plan_docs(out, name, base, title, summary, paper)
    for path, text in out.items():  # what it writes compiles, or nothing is written
        if path.endswith(".py"):
            try:
                compile(text, path, "exec")
            except SyntaxError as err:
                _fail(f"{path} would not compile ({err.msg}, line {err.lineno}); check NAME "
                      "and --title")  # fmt: skip
    return out


#: The longest NAME: a short identifier, so that every file it names (``tests/spec/
#: test_NAME.py``) stays far below a file system's 255 bytes and a table cell stays readable.
NAME_MAX_LENGTH = 64
#: A title is pasted into a docstring (the spec module), a YAML nav entry (mkdocs.yml), and
#: Markdown links and tables: letters, digits, spaces and ``. , + ( ) / ' -`` are safe in all
#: of them (a quote, a backslash, a colon, ``#``, ``[`` or ``|`` breaks one of them).
TITLE = re.compile(r"[^\W_][\w .,+()/'-]*")


def _check_plan(name: str, base: str, title: str, arxiv: str, summary: str) -> None:
    """The name is new, short and an identifier an import can name, the base exists, the
    title fits every place it is pasted into, the fields fit one table cell."""
    _check_name(name)
    names = _names()
    if name in names:
        _fail(f"NAME: {name} is already in NAMES (pick a new name)")
    if base not in names:
        _fail(f"--base: {base} is not in NAMES ({', '.join(names)})")
    for place in PLACES:
        path = ROOT / place.format(name=name)
        if "{name}" in place and path.exists():
            _fail(f"NAME: {path.relative_to(ROOT)} exists already (pick a new name)")
    if not re.fullmatch(r"\d{4}\.\d{4,5}", arxiv):
        _fail(f"--arxiv: {arxiv!r} is not an arXiv id like 2402.14740")
    for flag, value in (("--title", title), ("--summary", summary)):
        if not value.strip() or "|" in value or not value.isprintable():
            _fail(f"{flag}: {value!r} must be one non-empty line of printable text without '|'")
    if not TITLE.fullmatch(title) or title != title.strip():
        _fail(
            f"--title: {title!r} holds a character that breaks a place it is pasted into (the "
            "spec module's docstring, mkdocs.yml, a Markdown link); use letters, digits, "
            "spaces and . , + ( ) / ' -"
        )


def _check_name(name: str) -> None:
    """NAME is a lower-case identifier that ``from refimpl.algorithms import NAME`` reads as
    the new module: no keyword (``class``), no name the package itself defines (``get``,
    ``NAMES``), short enough for a file name."""
    if len(name) > NAME_MAX_LENGTH:
        _fail(f"NAME: {len(name)} characters, expected at most {NAME_MAX_LENGTH} (a short name)")
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        _fail(f"NAME: {name!r} is not a lower-case Python identifier (e.g. my_rloo)")
    if keyword.iskeyword(name):
        _fail(f"NAME: {name!r} is a Python keyword (`from refimpl.algorithms import {name}` "
              "would not compile); pick another name")  # fmt: skip
    if name in _package_names():
        _fail(f"NAME: {name!r} is a name refimpl/algorithms/__init__.py defines (the module "
              "would hide it); pick another name")  # fmt: skip


def _package_names() -> set[str]:
    """The names bound at the top level of refimpl/algorithms/__init__.py."""
    bound: set[str] = set()
    for node in ast.parse(_read("refimpl/algorithms/__init__.py")).body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            bound |= {(a.asname or a.name).split(".")[0] for a in node.names}
        for target in getattr(node, "targets", []) + [getattr(node, "target", None)]:
            if isinstance(target, ast.Name):
                bound.add(target.id)
    return bound


def _plan_code(out: dict, name: str, base: str, title: str, summary: str, paper: str) -> None:
    """The algorithm file, the registry, the spec module and the page."""
    source = _read(f"refimpl/algorithms/{base}.py")
    if not re.search(rf'^NAME = "{base}"$', source, re.M):
        _fail(f'refimpl/algorithms/{base}.py: no line NAME = "{base}"')
    out[f"refimpl/algorithms/{name}.py"] = re.sub(
        rf'^NAME = "{base}"$', f'NAME = "{name}"', source, count=1, flags=re.M
    )

    init = _read("refimpl/algorithms/__init__.py")
    m = re.search(r"^NAMES: tuple\[str, \.\.\.\] = \((.*?)^\)", init, re.M | re.S)
    if not m:
        _fail("refimpl/algorithms/__init__.py: NAMES is not a tuple literal")
    out["refimpl/algorithms/__init__.py"] = (
        init[: m.end() - 1] + f'    "{name}",\n' + init[m.end() - 1 :]
    )

    out[f"tests/spec/test_{name}.py"] = SPEC_MODULE.format(name=name, title=title)
    out[f"docs/algorithms/{name}.md"] = PAGE.format(
        name=name, title=title, summary=summary, paper=paper, MARKER="<!-- quick-facts -->"
    )


def _plan_docs(out: dict, name: str, base: str, title: str, summary: str, paper: str) -> None:
    """The nav, the tables and indexes, the README's row."""
    nav = _read("mkdocs.yml")
    entry = r"^( *)- [^:\n]+: algorithms/\w+\.md[ \t]*$"
    indent = (re.findall(entry, nav, re.M) or [""])[-1]
    out["mkdocs.yml"] = _insert_after_last(
        nav, entry, f"{indent}- {title}: algorithms/{name}.md", "mkdocs.yml"
    )

    table = _read("docs/math.md")
    rows = re.findall(rf"^\| \[[^]]+\]\(algorithms/{base}\.md\) \|.*$", table, re.M)
    if not rows:
        _fail(f"docs/math.md: no table row for {base}")
    row = re.sub(r"^\| \[[^]]+\]\([^)]+\)", f"| [{title}](algorithms/{name}.md)", rows[0])
    table = _insert_after_last(table, r"^\| \[[^]]+\]\(algorithms/\w+\.md\) \|", row,
                               "docs/math.md")  # fmt: skip
    out["docs/math.md"] = _insert_after_last(
        table,
        r"^- \[[^]]+\]\(algorithms/\w+\.md\)",
        f"- [{title}](algorithms/{name}.md): {summary}.",
        "docs/math.md",
        item=True,
    )

    spec = _read("docs/spec.md")
    last = list(
        re.finditer(r"^\[`tests/spec/test_\w+\.py`\].*· page: \[algorithms/.*$", spec, re.M)
    )
    if not last:
        _fail("docs/spec.md: no index of an algorithm's spec module")
    section = (
        f"## {title}\n\n[`tests/spec/test_{name}.py`](../tests/spec/test_{name}.py) · page: "
        f"[algorithms/{name}.md](algorithms/{name}.md)\n\n"
        f"- [`test_worked_example`](../tests/spec/test_{name}.py): The numbers of the worked "
        f"example in `docs/algorithms/{name}.md`, each derived by hand on the page.\n\n"
    )
    # After the last algorithm's section: before the next "## " heading that follows it.
    nxt = spec.index("\n## ", last[-1].end()) + 1
    out["docs/spec.md"] = spec[:nxt] + section + spec[nxt:]

    out["docs/api/algorithms.md"] = _insert_after_last(
        _read("docs/api/algorithms.md"), r"^::: refimpl\.algorithms\.\w+[ \t]*$",
        f"\n::: refimpl.algorithms.{name}", "docs/api/algorithms.md"
    )  # fmt: skip

    readme = _read("README.md")
    out["README.md"] = _insert_after_last(
        readme, r"^\|.*\(refimpl/algorithms/\w+\.py\) \|$",
        f"| {title} | {paper} | {summary} | [{name}.py](refimpl/algorithms/{name}.py) |",
        "README.md"
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("name", help="the new algorithm's name, a lower-case identifier")
    parser.add_argument("--title", required=True, help="its display name, e.g. 'My RLOO'")
    parser.add_argument("--arxiv", required=True, help="the paper's arXiv id, e.g. 2402.14740")
    parser.add_argument("--summary", required=True, help="what it changes, in a few words")
    parser.add_argument("--base", default="grpo", help="the algorithm file to start from")
    args = parser.parse_args(argv)
    texts = plan(args.name, args.base, args.title, args.arxiv, args.summary)
    for place in PLACES:
        path = ROOT / place.format(name=args.name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(texts[place.format(name=args.name)], encoding="utf-8")
        except OSError as err:  # a full disk, a read-only checkout: the places before it stay
            _fail(f"{path.relative_to(ROOT)}: not written ({err.strerror or err}); the places "
                  "listed above were, and git restores them")  # fmt: skip
        print(f"{'wrote ' if '{name}' in place else 'edited'} {path.relative_to(ROOT)}")
    print(
        f"next: .venv/bin/python scripts/dev/algorithm_pages.py, then edit "
        f"refimpl/algorithms/{args.name}.py (docs/adding_an_algorithm.md, step 2)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
