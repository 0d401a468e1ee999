"""The ceiling's result files read back (``collect.py`` writes them): every figure the page's
tables read is checked first, so a damaged file stops ``ceiling_page.py`` on one line naming the file
and the place (the lab's page writer then leaves the page as it was)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the lab's page writer

from page_writer import finite  # noqa: E402

from refimpl.bench.result_header import expect, read_result  # noqa: E402

#: What every run of a collected file must hold as a finite number (``collect.py`` writes them;
#: ``value_*`` and ``clip_frac`` are NaN for an arm without values or without a clip).
RUN_NUMBERS = ("policy_tokens_per_step", "seconds_per_step", "advantage_seconds_per_step",
               "seconds")  # fmt: skip
EVAL_NUMBERS = ("step", "sampled_tokens", "value_sampled_tokens", "greedy", "pass1", "pass16")


def check_collected(data: dict, path: Path) -> dict[str, dict[str, dict]]:
    """``{arm: {seed: run}}`` of the finished runs of a file ``collect.py`` wrote, every
    figure the tables read checked first: the wrong shape, a string or a non-finite number
    where a figure is read is ``ResultFileError`` naming the file and the place. A run that
    did not finish is left out, and only its ``finished`` flag is read."""
    arms = data["arms"]
    expect(isinstance(arms, dict) and arms, path, "arms: expected an object of arms")
    expect(isinstance(data["machine"], dict), path, "machine: expected an object")
    out = {}
    for label, seeds in arms.items():
        expect(isinstance(seeds, dict) and seeds, path, f"arms.{label}: expected its seeds")
        out[label] = {}
        for seed, run in seeds.items():
            where = f"arms.{label}.{seed}"
            expect(isinstance(run, dict), path, f"{where}: expected a run")
            expect(isinstance(run["finished"], bool), path, f"{where}.finished: expected a bool")
            if not run["finished"]:  # left out of every table: an interrupted run may have
                continue  # no step (NaN costs) and no evaluation yet
            for key in RUN_NUMBERS:
                finite(run[key], path, f"{where}.{key}")
            for key in ("value_prefixes_per_step", "value_tokens_per_step"):
                expect(isinstance(run[key], int | float) and not isinstance(run[key], bool), path,
                       f"{where}.{key}: expected a number (NaN: no values)")  # fmt: skip
            evals, entropy = run["evals"], run["entropy"]
            expect(isinstance(evals, list) and evals and all(isinstance(e, dict) for e in evals),
                   path, f"{where}.evals: expected a non-empty list of evaluations")  # fmt: skip
            for i, e in enumerate(evals):
                for key in EVAL_NUMBERS:
                    finite(e[key], path, f"{where}.evals[{i}].{key}")
            expect(isinstance(entropy, list) and entropy, path, f"{where}.entropy: expected a list")
            for i, h in enumerate(entropy):
                finite(h, path, f"{where}.entropy[{i}]")
            out[label][seed] = run
    return out


def load_runs(results: Path) -> dict[str, dict[str, dict]]:
    """``{arm: {seed: run}}`` of the finished runs in ``runs.json``."""
    path = results / "runs.json"
    return check_collected(read_result(path, "the ceiling section of docs/credit.md"), path)


def load_extra(results: Path, stem: str) -> dict | None:
    """``{arm: {seed: run}}`` of a further result file (``collect.py``), None when absent."""
    path = results / f"{stem}.json"
    if not path.exists() and not path.is_symlink():
        return None
    return check_collected(read_result(path, "the ceiling section"), path)
