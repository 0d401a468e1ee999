#!/usr/bin/env bash
# How the longchain preset's RL regime was chosen: GRPO, seed 0, from the preset's warm start,
# with one setting changed at a time (docs/credit.md, "The long-chain regime"):
#   16 prompts per step for 150 steps (the first choice: a long-chain step samples ~6× the
#   tokens of a countdown step), the learning rate at 3e-4 and 1e-3 for 50 steps, and the
#   preset's own 64 prompts for 100 steps. Held-out greedy success and pass@1 every 20-25
#   steps go to results/regime_probes.json.
#
#   bash scripts/experiments/credit/regime_probes.sh        # ~15 minutes on one core
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
RUNS=${RUNS:-runs}
OUT=${OUT:-scripts/experiments/credit/results}
probe() {  # probe NAME FLAGS...: one GRPO run of the longchain preset with FLAGS
  local name=$1
  shift
  "$PY" -m refimpl.cli compare --preset longchain --algos grpo --seeds 0 --name "probe-$name" \
    --runs-dir "$RUNS" --workers 1 --train.threads 1 --train.lr-warmup 0 --train.no-plot "$@" >/dev/null
}
probe n16 --train.prompts-per-step 16 --train.steps 150 --train.eval-every 25
probe lr3e-4 --train.lr 3e-4 --train.steps 50 --train.eval-every 25
probe lr1e-3 --train.lr 1e-3 --train.steps 50 --train.eval-every 25
probe n64 --train.steps 100
"$PY" - "$RUNS" "$OUT/regime_probes.json" <<'EOF'
import json, sys
from pathlib import Path
from refimpl.bench import machine_info
from refimpl.runs import numerics
runs, out = Path(sys.argv[1]), Path(sys.argv[2])
probes = {}
# The machine: this one (the probes ran here just before), with each run's own numeric record.
machine = machine_info()
for name in ("n16", "lr3e-4", "lr1e-3", "n64"):
    d = runs / f"probe-{name}" / "grpo-s0"
    config = json.loads((d / "config.json").read_text())["train_config"]
    evals = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in evals if "heldout_greedy" in r]
    probes[name] = {
        "settings": {k: config[k] for k in ("prompts_per_step", "group_size", "lr", "steps")},
        "step": [r["step"] for r in evals],
        "heldout_greedy": [r["heldout_greedy"] for r in evals],
        "heldout_pass@1": [r["heldout_pass@1"] for r in evals],
        "sampled_tokens": [r.get("sampled_tokens", 0) for r in evals],
        "machine": {**machine, "numerics": json.loads((d / "config.json").read_text())["numerics"]},
    }
out.write_text(json.dumps(probes, indent=1) + "\n")
print(f"wrote {out}")
EOF
