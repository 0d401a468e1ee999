#!/usr/bin/env bash
# The credit agreement of every arm of the ceiling benchmark, on one long-chain warm-start batch
# (16 prompts × G = 8, the oracle at K = 64): the x axis of the scatter in docs/credit.md.
# The arms with a Config override (forking tokens on a random 20 %, GTPO with α₂ = 0) are
# scored in their own call on the same batch (the same seed gives the same completions).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-scripts/experiments/ceiling/results}
credit() {  # credit FILE ARGS...: skipped when FILE exists
  local out=$1; shift
  [[ -e "$out" ]] && { echo "skip $out (done)"; return 0; }
  "$PY" -m refimpl.cli credit --preset longchain --prompts 16 --rollouts 64 --threads 1 \
    --out "$out" "$@"
}
credit "$OUT/credit_warmstart.json"
credit "$OUT/credit_forking_random.json" --algos forking_tokens \
  --train.algo forking_tokens --train.algo-args selection=random
credit "$OUT/credit_gtpo_alpha2_0.json" --algos gtpo --train.algo gtpo --train.algo-args alpha_2=0.0
