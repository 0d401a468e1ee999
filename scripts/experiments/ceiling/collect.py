"""Gather the ceiling benchmark's runs into one committed result file.

``ceiling_study.py`` declares the runs with ``refimpl bench-learning`` into ``<bench>/<task>/`` (chain or
countdown), or with ``refimpl compare`` into ``<bench>/`` (the step-bounded sample-matched
arm): one directory per arm and seed. This script reads each run's ``config.json`` and
``metrics.jsonl`` and writes what ``ceiling_page.py`` needs, per arm and seed, into one JSON file:

* the evaluation grid: step, the policy's sampled tokens, the values' sampled tokens (VinePPO's
  continuations: zero for every other arm), held-out greedy success, pass@1 and pass@16;
* the entropy of the sampled tokens at every step;
* what a step costs: its wall time, the time of its advantages (VinePPO's values included),
  the prefixes valued and the tokens their continuations sampled;
* whether the run reached its token budget (an unfinished run is kept, marked, and left out of
  every comparison by the report).

    python scripts/experiments/ceiling/collect.py --bench runs/bench/ceiling \\
        --out scripts/experiments/ceiling/results/runs.json
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from refimpl.bench import machine_info  # noqa: E402
from refimpl.bench.result_header import base_models_of, make_header  # noqa: E402
from refimpl.runs.runlog import read_json, read_metrics, write_text_atomic  # noqa: E402

#: The evaluation's keys, as the result file names them.
EVAL_KEYS = {"heldout_greedy": "greedy", "heldout_pass@1": "pass1", "heldout_pass@16": "pass16"}


#: The training settings an arm may change beside its Config, and their values in the runs the
#: ceiling first ran (before ``lr_warmup`` existed its records lack it: no warm-up).
ARM_TRAIN_SETTINGS = {"ppo_epochs": 1, "temperature": 1.0, "top_p": None, "lr_warmup": 0}


def arm_label(train: dict) -> str:
    """``"grpo"``, ``"gtpo alpha_2=0.0"``, ``"vineppo lr_warmup=8"``: the algorithm, its Config
    overrides and the settings of ``ARM_TRAIN_SETTINGS`` it changes, as the benchmark's
    ``--ablations`` spell them."""
    changed = [
        f"{key}={train.get(key, first)}"
        for key, first in ARM_TRAIN_SETTINGS.items()
        if train.get(key, first) != first
    ]
    return " ".join([train["algo"], *train.get("algo_args", []), *changed])


def evaluations(records: list[dict]) -> list[dict]:
    """The evaluation grid of one run, with the sampled tokens of both kinds so far."""
    out, value_tokens = [], 0
    for r in records:
        value_tokens += int(r.get("value_sampled_tokens", 0))
        if "heldout_greedy" in r:
            row = {"step": int(r["step"]), "sampled_tokens": int(r.get("sampled_tokens", 0))}
            row["value_sampled_tokens"] = value_tokens
            row.update({name: float(r[key]) for key, name in EVAL_KEYS.items()})
            out.append(row)
    return out


def _median(records: list[dict], key: str) -> float:
    values = [r[key] for r in records if key in r]
    return float(np.median(values)) if values else math.nan


def one_run(run_dir: Path) -> dict:
    """The record of one run directory (see the module docstring)."""
    config = read_json(run_dir / "config.json")
    train = config["train_config"]
    records = read_metrics(run_dir)
    steps = [r for r in records if "entropy_mean" in r]
    evals = evaluations(records)
    budget = train["max_sampled_tokens"]  # None: the run is bounded by its steps
    finished = bool(evals) and (
        evals[-1]["sampled_tokens"] >= budget if budget else evals[-1]["step"] >= train["steps"]
    )
    clip = [r.get("clip_frac_low", 0.0) + r.get("clip_frac_high", 0.0) for r in steps]
    return {
        "label": arm_label(train),
        "seed": int(train["seed"]),
        "finished": finished,
        "budget_tokens": budget,
        "steps": int(records[-1]["step"]) if records else 0,
        "evals": evals,
        "entropy": [float(r["entropy_mean"]) for r in steps],
        "clip_frac": float(np.mean(clip)) if clip else math.nan,
        "value_prefixes_per_step": _median(steps, "value_prefixes"),
        "value_tokens_per_step": _median(steps, "value_sampled_tokens"),
        "policy_tokens_per_step": float(
            np.median(np.diff([0] + [r["sampled_tokens"] for r in steps if "sampled_tokens" in r]))
        )
        if steps
        else math.nan,  # fmt: skip
        "seconds_per_step": _median(steps, "time_step"),
        "advantage_seconds_per_step": _median(steps, "time_adv"),
        "seconds": float(sum(r.get("time_step", 0.0) + r.get("time_eval", 0.0) for r in records)),
        "algo_config": config["algo_config"],
        "base_model": config.get("base_model"),  # its name and sha256 (None: not recorded)
    }


def collect(bench: Path, probe: str = "", command: str | None = None) -> dict:
    """Every run under ``bench/chain``, grouped by arm and seed."""
    # bench-learning's layout (<bench>/<task>/<run>) or compare's (<bench>/<run>)
    tasks = [bench / t for t in ("chain", "countdown") if (bench / t).is_dir()]
    task_dir = tasks[0] if tasks else bench
    if not task_dir.is_dir():
        raise SystemExit(
            f"--bench: {task_dir} is not a directory (run the benchmark first: ceiling_study.py)"
        )
    arms: dict[str, dict[str, dict]] = {}
    for run_dir in sorted(p for p in task_dir.iterdir() if (p / "config.json").is_file()):
        if not (run_dir / "metrics.jsonl").is_file():
            continue  # planned, never started
        run = one_run(run_dir)
        arms.setdefault(run["label"], {})[str(run["seed"])] = run
    if not arms:
        raise SystemExit(f"--bench: no run under {task_dir}")
    runs = [r for seeds in arms.values() for r in seeds.values()]
    header = make_header(
        "ceiling",
        command=" ".join(["python scripts/experiments/ceiling/collect.py", *sys.argv[1:]])
        if command is None else command,
        seeds=sorted({r["seed"] for r in runs}),
        base_models=base_models_of([r["base_model"] for r in runs]),
        evaluation_grid={"steps": sorted({e["step"] for r in runs for e in r["evals"]}),
                         "read_at": "update 20, or the end of the token budget"},
    )  # fmt: skip
    return {"header": header, "machine": machine_info(), "bench": str(bench), "probe": probe,
            "arms": arms}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, default=Path("runs/bench/ceiling"))
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "runs.json")
    parser.add_argument(
        "--probe",
        default="",
        help='the one setting this bench changes from the design, e.g. "lr=3e-4" ("": none)',
    )
    args = parser.parse_args(argv)
    result = collect(args.bench, args.probe)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(result, indent=1, allow_nan=True) + "\n")
    counts = {k: sum(r["finished"] for r in v.values()) for k, v in result["arms"].items()}
    print(f"{args.out}: finished runs per arm {counts}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
