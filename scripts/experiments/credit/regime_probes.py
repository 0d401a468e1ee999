"""Gather the regime probes (``credit_study.py``: GRPO on the longchain preset, seed 0, one
setting changed at a time) into one result file: each probe's settings, its held-out greedy
success and pass@1 at every evaluation, the sampled tokens so far, and the machine (this one,
where the probes ran just before, with each run's own numeric record).

    python scripts/experiments/credit/regime_probes.py --runs runs --out OUT n16 lr3e-4 lr1e-3 n64
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from refimpl.bench import machine_info  # noqa: E402
from refimpl.runs.runlog import read_json, read_metrics, write_text_atomic  # noqa: E402


def probe(run_dir: Path, machine: dict) -> dict:
    """One probe's record (``run_dir``: its run directory)."""
    config = read_json(run_dir / "config.json")
    evals = [r for r in read_metrics(run_dir) if "heldout_greedy" in r]
    train = config["train_config"]
    return {
        "settings": {k: train[k] for k in ("prompts_per_step", "group_size", "lr", "steps")},
        "step": [r["step"] for r in evals],
        "heldout_greedy": [r["heldout_greedy"] for r in evals],
        "heldout_pass@1": [r["heldout_pass@1"] for r in evals],
        "sampled_tokens": [r.get("sampled_tokens", 0) for r in evals],
        "machine": {**machine, "numerics": config["numerics"]},
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=Path, default=Path("runs"), help="the runs' folder")
    parser.add_argument("--out", type=Path, required=True, help="the result file to write")
    parser.add_argument("probes", nargs="+", help="the probes' names (run probe-NAME/grpo-s0)")
    args = parser.parse_args(argv)
    machine = machine_info()
    probes = {name: probe(args.runs / f"probe-{name}" / "grpo-s0", machine) for name in args.probes}
    write_text_atomic(args.out, json.dumps(probes, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
