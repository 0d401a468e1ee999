"""The real model's runs (SmolLM2-135M through TRL, ``run_real.py``): each run's final
held-out evaluation, and one arm against another, paired by seed on the seeds both ran on one
machine.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import runpy
from collections.abc import Callable
from pathlib import Path

import numpy as np
from arms import NAMES, REAL_DAPOS
from claims_results import cpu_record

from refimpl.bench.stats import Comparison, over_seeds, paired

#: Real model: a held-out success at least the seed's base success + this counts as reached
#: (docs/claims.md, "Steps to a held-out threshold", says why 0.10).
REAL_THRESHOLD_GAIN = 0.10


def final(result: dict) -> dict:
    return result["evals"][-1]


def eval_at(result: dict, step: int) -> dict | None:
    return next((e for e in result["evals"] if e["step"] == step), None)


def seeds_of(real: dict, arm: str) -> list[int]:
    return sorted(s for a, s in real if a == arm)


def n_samples(real: dict) -> int:
    any_result = next(iter(real.values()))
    return int(any_result["args"]["eval_samples"])


def one_machine(real: dict, a: str, b: str, seed: int) -> bool:
    """Both arms of ``seed`` ran on one machine, by their files' own records: the same CPU
    record. The first pass's files all record the same bare "x86_64" (one machine, one
    pass); a file that names a CPU model never pairs with one that does not."""
    return cpu_record(real[(a, seed)]) == cpu_record(real[(b, seed)])


def mixed_seeds(real: dict, a: str, b: str) -> list[int]:
    """The seeds both arms have but ran on different machines: left out of every pair."""
    return [s for s in seeds_of(real, a) if (b, s) in real and not one_machine(real, a, b, s)]


#: The declaration of every run the claims pages read, with the real model's passes.
STUDY = Path(__file__).resolve().parent / "claims_study.py"


@functools.cache
def passes() -> tuple[dict[str, frozenset[int]], ...]:
    """The real model's passes, in order, each {arm: its seeds}: the declaration's ``real pass
    N`` entries (the entries of one N are one pass)."""
    by_pass: dict[int, dict[str, set[int]]] = {}
    for exp in runpy.run_path(str(STUDY))["DECLARATION"]["experiment"]:
        m = re.match(r"real pass (\d+)", exp["name"])
        if m:
            arms = by_pass.setdefault(int(m.group(1)), {})
            for arm, spec in exp["arms"].items():
                arms.setdefault(arm, set()).update(spec["seeds"])
    return tuple({a: frozenset(s) for a, s in by_pass[k].items()} for k in sorted(by_pass))


def looks(a: str, b: str, seeds=None) -> int:
    """How often a − b was read before it stopped (``claims_study.py``, "Looks"): the passes,
    in order, after which the seeds both arms have grew, counting only ``seeds`` (those both
    arms have in the files read; every declared seed when None); at least 1. Every bar of
    the comparison is taken at α / looks (``refimpl.bench.stats``)."""
    have_a, have_b, paired_seeds, n = set(), set(), set(), 0
    for run in passes():
        have_a |= run.get(a, set())
        have_b |= run.get(b, set())
        both = have_a & have_b & (set(seeds) if seeds is not None else have_a)
        if both - paired_seeds:
            paired_seeds, n = both, n + 1
    return max(n, 1)


def real_compare(real: dict, a: str, b: str, get: Callable | None = None) -> Comparison:
    """a − b on the seeds both arms have, run on one machine (``one_machine``; the others are
    ``mixed_seeds``, left out): per seed the paired difference of the final held-out
    evaluations (with its s.e. over problems), or of ``get(real, arm, seed)``; corrected for
    the comparison's ``looks``."""
    seeds = [s for s in seeds_of(real, a) if (b, s) in real and one_machine(real, a, b, s)]
    n = looks(a, b, [s for s in seeds_of(real, a) if (b, s) in real])
    if get is None:
        per = {s: paired(final(real[(a, s)]), final(real[(b, s)])) for s in seeds}
        c = over_seeds({s: d for s, (d, _) in per.items()}, {s: e for s, (_, e) in per.items()},
                       looks=n)  # fmt: skip
    else:
        c = over_seeds({s: get(real, a, s) - get(real, b, s) for s in seeds}, looks=n)
    return dataclasses.replace(c, left_out=tuple(mixed_seeds(real, a, b)))


def eval_entropy(real: dict, arm: str, seed: int) -> float:
    return final(real[(arm, seed)])["entropy"]


def real_dapos(real: dict, arm: str, key: str = "final") -> dict[str, Comparison]:
    """{DAPO arm's name: ``arm`` − that DAPO} on the real model (final success, or the
    held-out entropy with ``key="entropy"``)."""
    get = None if key == "final" else eval_entropy
    return {NAMES[d]: real_compare(real, arm, d, get) for d in REAL_DAPOS}


def kept_groups(result: dict) -> float:
    """The mean kept fraction over the steps that log it (a rollout's first step only)."""
    vals = [h["refimpl/kept_groups_frac"] for h in result["steps"]
            if "refimpl/kept_groups_frac" in h]  # fmt: skip
    return float(np.mean(vals)) if vals else math.nan


def grid_seeds(real: dict, arms) -> list[int]:
    """Seeds on which every arm of ``arms`` was evaluated at the same several steps (a curve,
    not only the end)."""
    out = []
    for s in sorted({s for _, s in real}):
        grids = [tuple(e["step"] for e in real[(a, s)]["evals"]) for a in arms if (a, s) in real]
        if len(grids) == len(arms) and len(set(grids)) == 1 and len(grids[0]) > 1:
            out.append(s)
    return out
