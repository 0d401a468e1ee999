"""Reading the result files a report generator turns into a page.

``scripts/experiments/credit/report.py`` and ``scripts/experiments/claims/report.py`` rebuild
tables of docs/ from committed JSON files. A file that is missing, truncated, of another
shape (``{}``, ``[1, 2]``, a run without evaluations) must stop the generator with one line
naming the file and what is wrong with it, before the page is touched: never a traceback
(``KeyError: 'evals'``) that names no file, and never a page rewritten as "not measured".

``read_result`` parses a file into dicts and lists that remember where they came from: a key
or an index the file lacks raises ``ResultFileError`` naming the file and the place in it
(``results.json: no key 'runs' at results.countdown``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from refimpl.runs.runlog import read_text_bounded

#: The most bytes a result file may have (the largest committed one holds about 2 MB).
MAX_RESULT_BYTES = 256 << 20


class ResultFileError(ValueError):
    """A result file is missing, unreadable, or lacks what the page is built from."""


def _where(place: str) -> str:
    return f" at {place}" if place else ""


class _Dict(dict):
    """A JSON object of the file ``_path``: a missing key names the file and the place."""

    _path: Path
    _place: str

    def __missing__(self, key: object) -> Any:
        raise ResultFileError(
            f"{self._path}: no key {key!r}{_where(self._place)} (written by another version, "
            "or edited or damaged?)"
        )


class _List(list):
    """A JSON array of the file ``_path``: an index out of range names the file and place."""

    _path: Path
    _place: str

    def __getitem__(self, index: Any) -> Any:
        try:
            return super().__getitem__(index)
        except IndexError:
            raise ResultFileError(
                f"{self._path}: no item {index}{_where(self._place)} (it has {len(self)}; "
                "written by another version, or edited or damaged?)"
            ) from None


def _wrap(value: Any, path: Path, place: str) -> Any:
    if isinstance(value, dict):
        out = _Dict(
            (k, _wrap(v, path, f"{place}.{k}" if place else str(k))) for k, v in value.items()
        )
    elif isinstance(value, list):
        out = _List(_wrap(v, path, f"{place}[{i}]") for i, v in enumerate(value))
    else:
        return value
    out._path, out._place = path, place
    return out


def read_result(path: Path | str, needed_by: str = "") -> dict[str, Any]:
    """The JSON object in the result file ``path``; ``ResultFileError`` naming it when it is
    missing (``needed_by``: what needs it, for the message), not a regular file, not valid
    JSON (truncated?), or not an object."""
    path = Path(path)
    why = f" ({needed_by})" if needed_by else ""
    if not path.exists():
        raise ResultFileError(f"{path}: missing{why}")
    try:
        text = read_text_bounded(path, MAX_RESULT_BYTES)
    except (OSError, UnicodeDecodeError) as err:
        detail = getattr(err, "strerror", None) or str(err)
        raise ResultFileError(f"{path}: not readable ({detail}){why}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise ResultFileError(
            f"{path}: not valid JSON ({err.msg} at line {err.lineno}, column {err.colno}; "
            "truncated or damaged?)"
        ) from None
    if not isinstance(data, dict):
        raise ResultFileError(
            f"{path}: a JSON {type(data).__name__}, expected an object (not a result file?)"
        )
    return _wrap(data, path, "")


def expect(condition: bool, path: Path | str, what: str) -> None:
    """``ResultFileError("<path>: <what>")`` unless ``condition``."""
    if not condition:
        raise ResultFileError(f"{path}: {what}")
