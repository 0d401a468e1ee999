"""The lab's one driver: run the experiments of a declaration, then its page.

A declaration (``DECLARATION`` in ``scripts/experiments/<study>/<study>_study.py``) says what a study runs and
nothing of how: each of its ``experiment`` entries is its arms (name → flags, seeds), its budget and
evaluation grid (flags), the command that trains it and the result file it leaves. This file
turns it into commands and runs them:

    python scripts/experiments/run_experiment.py scripts/experiments/ceiling/ceiling_study.py --dry-run
    python scripts/experiments/run_experiment.py DECL                 # every result file missing
    python scripts/experiments/run_experiment.py DECL --only warmup   # one experiment
    python scripts/experiments/run_experiment.py DECL --runs /tmp/r --out /tmp/results  # elsewhere

* **Declaration.** Top level: ``results`` (the folder of the result files), ``page`` and
  ``page_check`` (the report, run after the experiments: ``page`` when the results are the
  committed ones, ``page_check`` with ``{out}`` otherwise), ``kind`` (the header's), and
  ``defaults``, which any experiment key may take. An experiment: ``name``, ``result`` (a
  path under ``results``; ``{seed}`` or ``{arm}`` in it make one result file per seed or per
  arm and seed), ``run`` (the command each arm runs), ``budget`` and ``grid`` (flags after it),
  ``arms`` (``{name: {"seeds": [...], "flags": "..."}}``), ``seeds`` (the arms' default),
  ``bench`` (a folder the commands share), ``then`` (commands after the arms: gathering the
  runs into the result file) and ``copy`` (a file the result is copied from, the first that
  holds ``copy_if``).
  Commands are written as typed (``refimpl ...``, ``python ...``) and may name ``{runs}``,
  ``{out}``, ``{bench}``, ``{result}``, ``{seeds}``, ``{seed}``, ``{arm}`` and ``{workers}``.
* **Everything is refused before anything is written**: an unknown key, a seed that is no
  integer, an ``--only`` that names no experiment, a result folder that is a file, a result
  file that exists but is damaged or has no valid header (named, never overwritten).
* **Resume.** A result file that exists with a valid header is done and skipped, so a study
  stopped anywhere loses at most the unit it was in; ``bench-learning`` and ``compare`` reuse
  the runs that finished.
* **The header.** A result file a unit's commands leave without the standard header
  (``refimpl.bench.result_header``) gets one, naming the unit's commands; one left without a
  valid header stops the driver.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import runpy
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from refimpl.bench.result_header import (  # noqa: E402
    ResultFileError,
    check_header,
    make_header,
    read_result,
)
from refimpl.runs.runlog import write_text_atomic  # noqa: E402

TOP_KEYS = {"results", "page", "page_check", "kind", "defaults", "experiment"}
EXPERIMENT_KEYS = {"name", "result", "run", "budget", "grid", "arms", "seeds", "bench", "then",
                   "copy", "copy_if", "workers"}  # fmt: skip
ARM_KEYS = {"seeds", "flags"}
WORKERS = 2


class DeclarationError(ValueError):
    """A declaration (or the driver's arguments) that cannot be run: nothing was written."""


@dataclass(frozen=True)
class Unit:
    """One result file and the commands that leave it."""

    experiment: str
    result: Path
    seeds: list[int]
    commands: list[list[str]]
    copy: tuple[str, str] | None  # (glob, the text the file copied must hold)
    kind: str
    grid: str


def _seeds(value: object, where: str) -> list[int]:
    if not (isinstance(value, list) and value
            and all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in value)):  # fmt: skip
        raise DeclarationError(f"{where}: expected a non-empty list of seeds (integers ≥ 0)")
    return value


def _text(value: object, where: str) -> str:
    if not isinstance(value, str):
        raise DeclarationError(f"{where}: expected text, got {value!r}")
    return value


def _fill(template: str, where: str, **names: object) -> list[str]:
    """The command ``template`` split as a shell would, each word with its ``{names}``."""
    try:
        return [word.format(**names) for word in shlex.split(template)]
    except (KeyError, IndexError, ValueError) as err:
        raise DeclarationError(f"{where}: {template!r}: {err}") from None


def load(path: Path) -> dict:
    """The declaration at ``path``, its keys checked (``DeclarationError`` naming the first)."""
    try:
        decl = runpy.run_path(str(path))["DECLARATION"]
    except (OSError, SyntaxError, KeyError) as err:
        raise DeclarationError(f"{path}: not a declaration (a DECLARATION dict): {err!r}") from None
    if not isinstance(decl, dict):
        raise DeclarationError(f"{path}: DECLARATION: expected a dict")
    for key in decl.keys() - TOP_KEYS:
        raise DeclarationError(f"{path}: unknown key {key!r} (expected {sorted(TOP_KEYS)})")
    _text(decl.get("results"), f"{path}: results")
    experiments = decl.get("experiment")
    if not (isinstance(experiments, list) and experiments):
        raise DeclarationError(f"{path}: no experiment")
    names = [e.get("name") for e in experiments]
    if len(set(names)) != len(names):
        raise DeclarationError(f"{path}: two experiments share a name ({names})")
    for exp in [decl.get("defaults", {}), *experiments]:
        for key in exp.keys() - EXPERIMENT_KEYS:
            raise DeclarationError(f"{path}: {exp.get('name', 'defaults')}: unknown key {key!r}")
    return decl


def units(decl: dict, *, runs: str, out: Path, only: list[str] | None = None,
          seeds: list[int] | None = None, workers: int | None = None) -> list[Unit]:  # fmt: skip
    """Every result file of the declaration's experiments (those of ``only``), with the
    commands that leave it; ``seeds`` replaces every arm's."""
    experiments = decl["experiment"]
    unknown = set(only or []) - {e["name"] for e in experiments}
    if unknown:
        raise DeclarationError(f"--only: no experiment {sorted(unknown)} "
                               f"(the declaration has {[e['name'] for e in experiments]})")  # fmt: skip
    out_units = []
    for exp in experiments:
        if only and exp["name"] not in only:
            continue
        out_units += _experiment_units({**decl.get("defaults", {}), **exp}, decl, runs, out,
                                       seeds, workers)  # fmt: skip
    return out_units


def _experiment_units(exp: dict, decl: dict, runs: str, out: Path, seeds_override, workers):
    name = _text(exp.get("name"), "experiment: name")
    where = f"experiment {name}"
    result = _text(exp.get("result"), f"{where}: result")
    arms = exp.get("arms", {"": {}})
    if not isinstance(arms, dict) or not arms:
        raise DeclarationError(f"{where}: arms: expected a table of arms")
    for arm, spec in arms.items():
        for key in spec.keys() - ARM_KEYS:
            raise DeclarationError(f"{where}: arm {arm!r}: unknown key {key!r}")
    arm_seeds = {a: seeds_override or _seeds(s.get("seeds", exp.get("seeds")), f"{where}: {a} seeds")
                 for a, s in arms.items()}  # fmt: skip
    base = dict(runs=runs, out=out, workers=workers or exp.get("workers", WORKERS))
    per_arm, per_seed = "{arm}" in result, "{seed}" in result
    every = sorted({s for a in arms for s in arm_seeds[a]})
    if per_arm:  # seed by seed, the arms of a seed together: an interrupted study leaves seeds
        keys = [(a, s) for s in every for a in arms if s in arm_seeds[a]]
    else:
        keys = [("", s) for s in every] if per_seed else [("", -1)]
    made = []
    for arm_key, seed in keys:
        path = out / result.format(arm=arm_key, seed=seed)
        bench = _fill(exp.get("bench", ""), where, **base, seed=seed, arm=arm_key)
        names = {**base, "result": path, "bench": bench[0] if bench else ""}
        commands, unit_seeds = [], set()
        for arm, spec in arms.items():
            chosen = [s for s in arm_seeds[arm] if seed < 0 or s == seed]
            if (per_arm and arm != arm_key) or not chosen or "run" not in exp:
                continue
            unit_seeds |= set(chosen)
            words = " ".join([exp["run"], exp.get("budget", ""), exp.get("grid", ""),
                              spec.get("flags", "")])  # fmt: skip
            extra = {"seeds": ",".join(map(str, chosen)), "seed": chosen[0], "arm": arm}
            commands.append(_fill(words, f"{where}: {arm}", **names, **extra))
        if not unit_seeds:
            unit_seeds = {s for a in arms for s in arm_seeds[a] if seed < 0 or s == seed}
        extra = {"seeds": ",".join(map(str, sorted(unit_seeds))), "seed": seed, "arm": arm_key}
        commands += [_fill(t, f"{where}: then", **names, **extra) for t in exp.get("then", [])]
        copy = None
        if "copy" in exp:
            copy = (exp["copy"].format(**names, **extra), exp.get("copy_if", ""))
        made.append(Unit(name, path, sorted(unit_seeds), commands, copy,
                         decl.get("kind", name), exp.get("grid", "")))  # fmt: skip
    return made


def done(unit: Unit) -> bool:
    """Whether ``unit``'s result file is there with a valid header; a file that is there
    without one is refused (``ResultFileError`` naming it), never overwritten."""
    if not unit.result.exists() and not unit.result.is_symlink():
        return False
    check_header(read_result(unit.result, f"experiment {unit.experiment}"), unit.result)
    return True


def argv_of(command: list[str]) -> list[str]:
    """The command to execute: ``refimpl`` and ``python`` as this interpreter runs them."""
    if command[0] == "refimpl":
        return [sys.executable, "-m", "refimpl.cli", *command[1:]]
    if command[0] == "python":
        return [sys.executable, *command[1:]]
    return command


def _copy_source(unit: Unit) -> Path:
    pattern, holds = unit.copy
    for match in sorted(glob.glob(pattern)):
        if holds in Path(match).read_text(encoding="utf-8", errors="replace"):
            return Path(match)
    raise DeclarationError(
        f"experiment {unit.experiment}: copy: no file {pattern!r} holds {holds!r}"
    )


def finish(unit: Unit) -> None:
    """Leave ``unit.result`` with the standard header: the copy it names made, a header added
    to a file its commands wrote without one."""
    source = _copy_source(unit) if unit.copy else unit.result
    data = read_result(source, f"experiment {unit.experiment}")
    if "header" not in data:
        command = " && ".join(shlex.join(c) for c in unit.commands) or f"copy of {source}"
        grid = {"flags": unit.grid} if unit.grid else "unrecorded"
        header = make_header(unit.kind, command=command, seeds=unit.seeds, evaluation_grid=grid)
        data = {"header": header, **data}
    check_header(data, source)
    if source != unit.result or "header" not in read_result(unit.result):
        unit.result.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(unit.result, json.dumps(data, indent=1) + "\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="scripts/experiments/run_experiment.py", description=__doc__.splitlines()[0]
    )
    parser.add_argument("declaration", type=Path, help="a study's declaration (<study>_study.py)")
    parser.add_argument("--dry-run", action="store_true", help="print what would run; run nothing")
    parser.add_argument("--only", action="append", help="only this experiment (repeatable)")
    parser.add_argument("--seeds", help="these seeds for every arm, e.g. 0,1,2 (default: declared)")
    parser.add_argument("--runs", default="runs", help="where the runs go (default runs)")
    parser.add_argument("--out", type=Path, help="where the result files go (default: declared)")
    parser.add_argument("--workers", type=int, help="runs at a time (default: declared, or 2)")
    parser.add_argument("--no-page", action="store_true", help="do not run the page after")
    return parser.parse_args(argv)


def plan(args: argparse.Namespace) -> tuple[dict, list[Unit], Path]:
    """The declaration and its units, every input checked (``DeclarationError``)."""
    decl = load(args.declaration)
    out = args.out or Path(decl["results"])
    if out.exists() and not out.is_dir():
        raise DeclarationError(f"--out: {out} is not a folder")
    seeds = None
    if args.seeds is not None:
        try:
            seeds = _seeds([int(s) for s in args.seeds.split(",")], "--seeds")
        except ValueError:
            raise DeclarationError(f"--seeds: {args.seeds!r}, expected e.g. 0,1,2") from None
    if args.workers is not None and args.workers < 1:
        raise DeclarationError(f"--workers: {args.workers}, expected at least 1")
    return decl, units(decl, runs=args.runs, out=out, only=args.only, seeds=seeds,
                       workers=args.workers), out  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    from tqdm import tqdm

    args = parse_args(argv)
    args.declaration = args.declaration.resolve()
    args.out = args.out.resolve() if args.out else None
    args.runs = args.runs if args.runs == "runs" else str(Path(args.runs).resolve())
    os.chdir(ROOT)  # the declarations' paths are the repository's
    try:
        decl, todo, out = plan(args)
        status = {u.result: done(u) for u in todo}
    except (DeclarationError, ResultFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for u in todo:
        print(f"# {u.experiment}: {u.result} ({'done' if status[u.result] else 'to run'})")
        for c in u.commands:
            print(shlex.join(c))
        if u.copy:
            print(
                f"# copy {u.copy[0]}"
                + (f" (the first that holds {u.copy[1]!r})" if u.copy[1] else "")
            )
    if args.dry_run:
        return 0
    out.mkdir(parents=True, exist_ok=True)
    for u in tqdm([u for u in todo if not status[u.result]], desc="result files", unit="file"):
        tqdm.write(f"# {u.experiment}: {u.result}")
        for c in u.commands:
            tqdm.write(shlex.join(c))
            if subprocess.run(argv_of(c), cwd=ROOT).returncode != 0:
                print(f"error: {shlex.join(c)} failed ({u.result} not written)", file=sys.stderr)
                return 1
        try:
            finish(u)
        except (DeclarationError, ResultFileError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    committed = out.resolve() == (ROOT / decl["results"]).resolve()
    page = decl.get("page" if committed else "page_check")
    if page and not args.no_page and not args.only:
        return subprocess.run(argv_of(_fill(page, "page", out=out)), cwd=ROOT).returncode
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
