"""The result record: the one header every committed result file carries, and the one reader
of result files.

A page's claim ("one machine per pair", "the same warm start", "read on one grid") is only as
good as what the files record. Every result file therefore opens with the same ``header``:

    machine          the CPU model name as the OS reports it, the core count, the ISA features
                     that change numerics (which kernels torch and oneDNN may pick), torch's
                     version and the CPU capability it dispatches to
    commit, command  what produced the file
    seeds            the seeds it holds
    base_models      each base model's name and sha256
    evaluation_grid  where the runs were evaluated (steps, sampled tokens), or "none"

A field whose truth the file cannot show reads ``"unrecorded"``, never a guess: a file written
before the header existed keeps what it recorded and says "unrecorded" for the rest
(``scripts/dev/add_result_headers.py`` added those headers from each file's own records).
``check_header`` validates a header; ``tests/test_result_headers.py`` runs it over every
committed result file.

``read_result`` reads a file a report generator turns into a page. A file that is missing,
truncated, of another shape (``{}``, ``[1, 2]``, a run without evaluations) stops the
generator with one line naming the file and what is wrong with it, before the page is touched:
never a traceback (``KeyError: 'evals'``) that names no file, and never a page rewritten as
"not measured". It parses a file into dicts and lists that remember where they came from: a
key or an index the file lacks raises ``ResultFileError`` naming the file and the place in it
(``results.json: no key 'runs' at results.countdown``).
"""

from __future__ import annotations

import json
import os
import subprocess
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


UNRECORDED = "unrecorded"
HEADER_FORMAT = 1
#: The CPU features whose presence changes which floating-point kernels run (and so the digits
#: a run computes): the vector widths, fused multiply-add, and the bf16/int8 matrix units.
NUMERIC_ISA = (
    "sse4_2", "avx", "f16c", "fma", "avx2", "avx512f", "avx512bw", "avx512vl", "avx512_vnni",
    "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8", "asimd", "sve",
)  # fmt: skip
MACHINE_KEYS = ("cpu_model", "cores", "isa", "torch", "torch_cpu_capability")
HEADER_KEYS = ("format", "kind", "machine", "commit", "command", "seeds", "base_models",
               "evaluation_grid")  # fmt: skip


def machine_identity() -> dict[str, Any]:
    """This machine, in the header's form: enough to tell two machines apart."""
    import torch

    from refimpl.runs.cpu_kernels import cpu_name

    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("flags", "Features"):
                flags |= set(value.split())
    except OSError:
        pass
    model = cpu_name()
    capability = getattr(getattr(torch.backends, "cpu", None), "get_cpu_capability", None)
    return {
        "cpu_model": model if not model.startswith(UNRECORDED) else UNRECORDED,
        "cores": os.cpu_count() or UNRECORDED,
        "isa": sorted(f for f in flags if f in NUMERIC_ISA) if flags else UNRECORDED,
        "torch": torch.__version__,
        "torch_cpu_capability": capability() if capability else UNRECORDED,
    }


def command_line() -> str:
    """The command that is running, as typed (``refimpl`` or ``python -m …`` and its args)."""
    import shlex
    import sys

    return " ".join(shlex.quote(a) for a in [Path(sys.argv[0]).name, *sys.argv[1:]]) or UNRECORDED


def current_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=5).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        out = ""
    return out or UNRECORDED


def make_header(
    kind: str,
    *,
    command: str,
    seeds: list[int] | str = UNRECORDED,
    base_models: list[dict[str, str]] | str = UNRECORDED,
    evaluation_grid: dict[str, Any] | str = UNRECORDED,
) -> dict[str, Any]:
    """The header of a result file written now, on this machine, at this commit."""
    header = {
        "format": HEADER_FORMAT,
        "kind": kind,
        "machine": machine_identity(),
        "commit": current_commit(),
        "command": command,
        "seeds": seeds,
        "base_models": base_models,
        "evaluation_grid": evaluation_grid,
    }
    check_header({"header": header}, "a new result file")
    return header


def base_models_of(records: list[dict[str, Any]]) -> list[dict[str, str]] | str:
    """Each distinct base model of runs' ``base`` records (a config.json's, with ``name`` for
    a shipped model and ``sha256`` always), or "unrecorded" when a run has none."""
    out: list[dict[str, str]] = []
    for r in records:
        if not isinstance(r, dict) or not isinstance(r.get("sha256"), str):
            return UNRECORDED
        entry = {"name": str(r.get("name") or r.get("cache") or UNRECORDED), "sha256": r["sha256"]}
        if entry not in out:
            out.append(entry)
    return out or UNRECORDED


def _fail(path: Path | str, what: str) -> None:
    raise ResultFileError(f"{path}: header.{what}")


def check_header(data: Any, path: Path | str) -> dict[str, Any]:
    """The file's header, validated: every field present, each either a value of its kind or
    "unrecorded" (``ResultFileError`` naming the file and the field otherwise)."""
    if not isinstance(data, dict) or not isinstance(data.get("header"), dict):
        raise ResultFileError(f"{path}: no header (every result file opens with one)")
    h = data["header"]
    missing = [k for k in HEADER_KEYS if k not in h]
    if missing:
        _fail(path, f"{missing[0]}: missing")
    if h["format"] != HEADER_FORMAT:
        _fail(path, f"format: {h['format']!r}, expected {HEADER_FORMAT}")
    if not (isinstance(h["kind"], str) and h["kind"]):
        _fail(path, "kind: expected the kind of result")
    m = h["machine"]
    if not isinstance(m, dict) or any(k not in m for k in MACHINE_KEYS):
        _fail(path, f"machine: expected {', '.join(MACHINE_KEYS)}")
    for key in ("cpu_model", "torch", "torch_cpu_capability"):
        if not (isinstance(m[key], str) and m[key]) or m[key] in ("x86_64", "aarch64", "arm64"):
            _fail(path, f"machine.{key}: {m[key]!r}, expected a name or {UNRECORDED!r}")
    if m["cores"] != UNRECORDED and not (isinstance(m["cores"], int) and m["cores"] > 0):
        _fail(path, f"machine.cores: {m['cores']!r}")
    if m["isa"] != UNRECORDED and not (
        isinstance(m["isa"], list) and all(f in NUMERIC_ISA for f in m["isa"])
    ):
        _fail(path, f"machine.isa: {m['isa']!r}, expected features of {NUMERIC_ISA}")
    for key in ("commit", "command"):
        if not (isinstance(h[key], str) and h[key]):
            _fail(path, f"{key}: expected text or {UNRECORDED!r}")
    seeds = h["seeds"]
    if seeds != UNRECORDED and not (
        isinstance(seeds, list)
        and all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        _fail(path, f"seeds: {seeds!r}, expected a list of integers or {UNRECORDED!r}")
    bases = h["base_models"]
    if bases != UNRECORDED and not (
        isinstance(bases, list)
        and all(isinstance(b, dict) and isinstance(b.get("name"), str)
                and isinstance(b.get("sha256"), str) and len(b["sha256"]) == 64 for b in bases)
    ):  # fmt: skip
        _fail(path, f"base_models: expected [{{name, sha256}}, …] or {UNRECORDED!r}")
    grid = h["evaluation_grid"]
    if grid not in (UNRECORDED, "none") and not isinstance(grid, dict):
        _fail(path, f"evaluation_grid: {grid!r}, expected an object, 'none' or {UNRECORDED!r}")
    return h
