"""mkdocs hook: links from the docs to files outside docs/ (algorithm files, tests, notebooks).

The pages link to the code the way a code host shows it, with relative paths such as
``../refimpl/core.py`` or ``../notebooks/01_quickstart.ipynb``, so that they work when read on
the code host. mkdocs only knows the files under ``docs/``, and ``--strict`` fails on every
such link. This hook makes the site self-contained instead:

* every file outside ``docs/`` that a page links to (and every notebook) is added to the site
  at its path in the repository (top-level markdown files under ``repo/``): source files are
  copied as they are, notebooks are rendered by mkdocs-jupyter, markdown files become pages;
* each such link is rewritten to point there; a link to a directory points at its
  ``__init__.py`` (the package's docstring says what is in it).

A link to a file that does not exist is left alone, so ``mkdocs build --strict`` still fails
on it.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

PREFIX = "repo"
# [text](target) and [text](target "title"); images too. Code spans/blocks are not excluded,
# but nothing in the docs writes a markdown link inside code.
LINK = re.compile(r"(\]\()([^)\s#]+)([^)]*\))")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _roots(config) -> tuple[Path, Path]:
    docs = Path(config["docs_dir"]).resolve()
    return docs, docs.parent


def _outside_target(src: Path, target: str, docs: Path, repo: Path) -> Path | None:
    """The repository file that ``target`` (a link written in ``src``) names, when it lies
    outside docs/ and exists; None otherwise."""
    if SCHEME.match(target) or target.startswith("/"):
        return None
    path = Path(posixpath.normpath((src.parent / target).as_posix()))
    if path.is_relative_to(docs) or not path.is_relative_to(repo):
        return None
    if path.is_dir() and (path / "__init__.py").is_file():
        path = path / "__init__.py"
    return path if path.is_file() else None


def _virtual_uri(path: Path, repo: Path) -> str:
    """Where a repository file lives in the site: its own path (``refimpl/core.py``,
    ``notebooks/01_quickstart.ipynb``), except for the top-level markdown files, which would
    clash with the site's index and go under ``repo/``."""
    rel = path.relative_to(repo).as_posix()
    return f"{PREFIX}/{rel}" if "/" not in rel and rel.endswith(".md") else rel


def _file(path: Path, repo: Path, config) -> File:
    uri = _virtual_uri(path, repo)
    if uri.startswith(PREFIX + "/"):
        return File.generated(config, uri, abs_src_path=str(path))
    # A File with a real source directory: mkdocs-jupyter's wrapper of a notebook needs it.
    return File(uri, str(repo), config["site_dir"], config["use_directory_urls"])


@event_priority(100)  # before mkdocs-jupyter, which turns the added notebooks into pages
def on_files(files: Files, config) -> Files:
    docs, repo = _roots(config)
    wanted = set((repo / "notebooks").glob("*.ipynb")) | {repo / "notebooks" / "README.md"}
    todo = [Path(f.abs_src_path) for f in files.documentation_pages()] + sorted(wanted)
    seen: set[Path] = set()
    while todo:
        src = todo.pop()
        if src in seen or src.suffix != ".md":
            continue
        seen.add(src)
        for match in LINK.finditer(src.read_text(encoding="utf-8")):
            path = _outside_target(src, match.group(2), docs, repo)
            if path is not None and path not in wanted:
                wanted.add(path)
                todo.append(path)  # a linked markdown file becomes a page: follow its links
    for path in sorted(wanted):
        files.append(_file(path, repo, config))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    docs, repo = _roots(config)
    src = Path(page.file.abs_src_path)
    page_dir = posixpath.dirname(page.file.src_uri)

    def rewrite(match: re.Match) -> str:
        path = _outside_target(src, match.group(2), docs, repo)
        if path is None:
            if not src.is_relative_to(docs):  # a page from outside docs/: its links into docs/
                target = Path(posixpath.normpath((src.parent / match.group(2)).as_posix()))
                if target.is_relative_to(docs) and target.exists():
                    uri = target.relative_to(docs).as_posix()
                    return match.group(1) + posixpath.relpath(uri, page_dir or ".") + match.group(3)
            return match.group(0)
        new = posixpath.relpath(_virtual_uri(path, repo), page_dir or ".")
        return match.group(1) + new + match.group(3)

    return LINK.sub(rewrite, markdown)


HREF = re.compile(r'(\bhref=")([^"#?]+)([^"]*")')


def on_page_content(html: str, page, config, files) -> str:
    """A notebook's links are written for the code host too (``../docs/math.md`` from
    ``notebooks/``): point the ones that name a file of the site at its page or copy."""
    if not page.file.src_uri.endswith(".ipynb"):
        return html
    docs, repo = _roots(config)
    site = {}
    for f in files:
        site[docs / f.src_uri] = f
        site[repo / f.src_uri.removeprefix(PREFIX + "/")] = f
    here = repo / page.file.src_uri  # the notebook's place in the repository

    def rewrite(match: re.Match) -> str:
        target = match.group(2)
        if SCHEME.match(target) or target.startswith("/"):
            return match.group(0)
        path = Path(posixpath.normpath((here.parent / target).as_posix()))
        file = site.get(path)
        if file is None or file is page.file:
            return match.group(0)
        return match.group(1) + get_relative_url(file.url, page.url) + match.group(3)

    return HREF.sub(rewrite, html)
