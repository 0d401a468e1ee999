"""Write the generated Quick facts, loop and equations into every algorithm page (docs/algorithms/).

Run from the repository root after changing an algorithm's ``Config``, its code (the loop's
◀ marks come from calling its ``advantages`` and ``loss`` on a probe batch), the *Equations*
section of its docstring, or adding an algorithm (its page needs the line
``<!-- quick-facts -->`` under its title and ``<!-- equations -->`` under its
``## Key equations``):

    .venv/bin/python scripts/dev/algorithm_pages.py          # rewrite the blocks, list the pages
    .venv/bin/python scripts/dev/algorithm_pages.py --check  # list the stale pages (exit code 1)

``tests/test_docs_hooks.py`` runs the same check in ``make test``.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file: scripts/dev/)


def _pages():
    spec = importlib.util.spec_from_file_location(
        "docs_algorithm_blocks", ROOT / "docs" / "_algorithm_blocks.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--check", action="store_true", help="change nothing; exit code 1 if a page is stale"
    )
    args = parser.parse_args(argv)
    pages = _pages()
    if args.check:
        found = pages.stale()
        print("\n".join(found) if found else "every algorithm page is current")
        return 1 if found else 0
    try:
        changed = pages.write()
    except ValueError as err:
        print(err, file=sys.stderr)
        return 2
    print("\n".join(f"wrote {page}" for page in changed) if changed else "nothing to change")
    return 0


if __name__ == "__main__":
    sys.exit(main())
