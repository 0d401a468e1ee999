#!/usr/bin/env bash
# The ceiling of token credit (docs/credit.md, "What credit is worth"): every result file the
# section reads, then the section itself.
#
#   bash scripts/experiments/ceiling/run.sh              # reuses the runs that finished
#   WORKERS=1 bash scripts/experiments/ceiling/run.sh    # one run at a time
#
# The regime is the long chain's (`--preset longchain`: chain with 10-12 operators, the
# preset's warm start, 64 prompts × G = 8 per step, 4 minibatches, lr 1e-4) at a budget of 50
# GRPO-sized steps of sampled tokens, evaluated on 500 held-out problems every 10 steps.
# 1. The ceiling: VinePPO against GRPO, and GRPO without its KL term (the matched-scale arm),
#    on 5 paired seeds (a seed's runs share the warm start and the training problems).
# 2. Every other arm on the same seeds: DAPO, GTPO, GTPO with α₂ = 0, GRPO-S, TEPO, forking
#    tokens, forking tokens on a random 20 %, STEER.
# 3. The page: python scripts/experiments/ceiling/report.py.
# Costs on the 2-core AMD EPYC: see docs/credit.md ("What VinePPO pays").
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
RUNS=${RUNS:-runs}
OUT=${OUT:-scripts/experiments/ceiling/results}
BENCH="$RUNS/bench/ceiling"
mkdir -p "$OUT"
bench() {
  "$PY" -m refimpl.cli bench-learning --preset longchain --runs-dir "$RUNS" --out "$BENCH" \
    --seeds "${SEEDS:-0,1,2,3,4}" --budget-steps 50 --eval-every 10 --eval-problems 500 \
    --ablation-tasks chain --workers "${WORKERS:-2}" "$@"
}
# 1. The ceiling first: it decides whether the rest can be read.
bench --algos vineppo,grpo --ablations "grpo kl_coef=0.0"
# 2. Every arm (the finished runs of step 1 are reused, not retrained).
bench --algos vineppo,grpo,dapo,gtpo,grpo_s,tepo,forking_tokens,steer \
  --ablations "grpo kl_coef=0.0,gtpo alpha_2=0.0,forking_tokens selection=random"
cp "$BENCH/results.json" "$OUT/learning.json"
"$PY" scripts/experiments/ceiling/collect.py --bench "$BENCH" --out "$OUT/runs.json"
"$PY" scripts/experiments/ceiling/report.py --results "$OUT"
