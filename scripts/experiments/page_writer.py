"""The lab's one page writer: every report generator builds its page blocks from its result
files and hands them here, which owns what happens to a page.

    blocks    {page path: {block name: markdown}}: what a report computed, for the text
              between ``<!-- PREFIX:NAME -->`` and ``<!-- /PREFIX:NAME -->`` of each page

The guarantees, each tried by ``tests/test_page_writer.py``:

* **Every input is read before any page is touched.** The report's ``build`` runs to the end
  first; a result file that is missing, truncated, of the wrong shape or holds a non-finite
  number where a figure is read stops it with one line that names the file
  (``ResultFileError``), exit 2, and no page changed. Any other failure of a report's reading
  (a string where a number belongs) is one line too, naming the results it read.
* **A page is a regular file**, never a link and never a folder, and every block's markers are
  in it, checked for every page before the first is written.
* **Each page is written whole and atomically** (``write_text_atomic``: a temporary file and a
  rename, never through a link; a full disk leaves the page as it was).
* **``--check`` writes nothing**, prints each row that differs as ``old → new`` and exits 1
  when a page is stale, 0 when every page is current.
"""

from __future__ import annotations

import argparse
import difflib
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

from refimpl.bench.result_header import ResultFileError
from refimpl.runs.runlog import read_text_bounded, write_text_atomic

#: The most bytes a docs page may have before it is refused (the largest is about 80 kB).
MAX_PAGE_BYTES = 4 << 20
#: The most differing rows ``--check`` prints per page.
MAX_DIFF_ROWS = 12

Blocks = dict[Path, dict[str, str]]


class PageError(ValueError):
    """A page cannot be read or lacks a block's markers: nothing was written."""


def read_page(path: Path) -> str:
    """The text of the page ``path``: a regular file, not a link (``PageError`` naming it)."""
    path = Path(path)
    if path.is_symlink():
        raise PageError(f"{path}: a symbolic link; a page is written only as a regular file")
    if not path.exists():
        raise PageError(f"{path}: missing (the page whose blocks are written)")
    if not path.is_file():
        raise PageError(f"{path}: not a regular file (a folder?)")
    try:
        return read_text_bounded(path, MAX_PAGE_BYTES)
    except (OSError, UnicodeDecodeError) as err:
        raise PageError(f"{path}: not readable ({getattr(err, 'strerror', None) or err})") from None


def render(text: str, blocks: dict[str, str], prefix: str, path: Path) -> str:
    """``text`` with each block's body between its markers (``PageError`` for a missing
    marker, naming the page and the block)."""
    for name, body in blocks.items():
        start, end = f"<!-- {prefix}:{name} -->", f"<!-- /{prefix}:{name} -->"
        pattern = re.compile(re.escape(start) + r"\n?.*?" + re.escape(end), re.S)
        if not pattern.search(text):
            raise PageError(f"{path}: no markers {start} … {end}")
        whole = f"{start}\n{body.rstrip(chr(10))}\n{end}"  # one line break on each side
        text = pattern.sub(lambda _m, whole=whole: whole, text, count=1)
    return text


def changed_rows(old: str, new: str) -> list[str]:
    """The lines of the page that differ, as ``old → new`` pairs (a line only in one side
    shows ``—`` on the other), at most ``MAX_DIFF_ROWS``."""
    out: list[str] = []
    matcher = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        before, after = matcher.a[i1:i2], matcher.b[j1:j2]
        for k in range(max(len(before), len(after))):
            a = before[k] if k < len(before) else "—"
            b = after[k] if k < len(after) else "—"
            out.append(f"  {a}\n    → {b}")
    if len(out) > MAX_DIFF_ROWS:
        out = out[:MAX_DIFF_ROWS] + [f"  … and {len(out) - MAX_DIFF_ROWS} more"]
    return out


def finite(value: object, path: Path | str, where: str) -> float:
    """``value`` as a float, or ``ResultFileError`` naming the file and the place when it is
    not a finite number (a string, null, NaN, an infinity, a bool)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ResultFileError(f"{path}: {where} is {value!r}, expected a finite number")
    return float(value)


def main(
    argv: list[str] | None,
    *,
    prog: str,
    description: str,
    prefix: str,
    build: Callable[[argparse.Namespace], Blocks],
    add_arguments: Callable[[argparse.ArgumentParser], None] | None = None,
    after_write: Callable[[argparse.Namespace], None] | None = None,
    inputs: Callable[[argparse.Namespace], list[Path]] | None = None,
) -> int:
    """The command line every report shares: ``--check``, ``--print``, the report's own
    arguments (``add_arguments``), then build → check → write whole pages. ``after_write``
    (the figures) runs only after every page is written; ``inputs`` names the result files (or
    their folder) the report reads, for the line that refuses a figure its tables cannot read.
    Exit 0 (written, or current), 1 (stale, with ``--check``) or 2 (an input refused, named on
    one line; nothing written)."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if stale")
    parser.add_argument("--print", action="store_true", help="print the blocks, write nothing")
    if add_arguments is not None:
        add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        generated = build(args)  # every input read and validated here, before any page
        rendered = {}
        for path, blocks in generated.items():  # every page rendered before one is written
            old = read_page(path)
            rendered[path] = (old, render(old, blocks, prefix, path))
    except (ResultFileError, PageError) as err:
        print(f"{prog}: error: {err} (no page was changed)", file=sys.stderr)
        return 2
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, ZeroDivisionError,
            ArithmeticError) as err:  # fmt: skip
        named = ", ".join(map(str, inputs(args))) + ": " if inputs is not None else ""
        print(f"{prog}: error: {named or 'a result file is '}not what the tables read "
              f"({type(err).__name__}: {err}); no page was changed", file=sys.stderr)  # fmt: skip
        return 2
    if args.print:
        for blocks in generated.values():
            for name, body in blocks.items():
                print(f"## {name}\n\n{body}\n")
        return 0
    stale = {path: pair for path, pair in rendered.items() if pair[0] != pair[1]}
    if args.check:
        for path, (old, new) in stale.items():
            print(f"{path}: out of date; run python {prog} (rows that differ, old → new):")
            print("\n".join(changed_rows(old, new)))
        if not stale:
            print(f"{prog}: every page is current")
        return 1 if stale else 0
    try:
        for path, (_, new) in stale.items():
            write_text_atomic(path, new)  # whole or not at all, never through a link
    except OSError as err:
        print(f"{prog}: error: {err}", file=sys.stderr)
        return 1
    if after_write is not None:
        after_write(args)
    for path in stale:
        print(f"wrote {path}")
    return 0
