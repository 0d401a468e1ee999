#!/usr/bin/env bash
# More seeds for the claims ledger's long-chain row (GRPO-S against DAPO and GRPO on the long
# chain, every arm read on one grid of sampled tokens): the three arms on seeds SEEDS (default
# 5-10, so that with the credit study's seeds 0-4 the row has 11), in the regime of the credit
# study's learning benchmark (`refimpl bench-learning --preset longchain`, its defaults: 100
# GRPO-sized steps of sampled tokens, evaluation every 20 steps), from the preset's warm start.
#
#   bash scripts/experiments/claims/run_long_chain.sh            # skips the seeds whose file exists
#   SEEDS=5,6 bash scripts/experiments/claims/run_long_chain.sh
#
# One `refimpl bench-learning` per seed, so that an interrupted run leaves whole seeds; each
# seed's results.json is copied to results/long_chain/seed<N>.json, which long_chain_rows.py
# reads beside the credit study's file only if it ran on the same CPU from the same warm start
# (one machine per pair). About 4.5 CPU-minutes a run on an idle core of the 2-core AMD EPYC
# (the credit study's files), three runs a seed. Then: python scripts/experiments/claims/claims_page.py
set -euo pipefail
cd "$(dirname "$0")/../../.."  # the repository root (this file: scripts/experiments/claims/)
PY=${PY:-.venv/bin/python}
RUNS=${RUNS:-runs}
OUT=${OUT:-scripts/experiments/claims/results/long_chain}
mkdir -p "$OUT"
for seed in $(echo "${SEEDS:-5,6,7,8,9,10}" | tr ',' ' '); do
  if [[ -e "$OUT/seed$seed.json" ]]; then echo "skip seed $seed (done)"; continue; fi
  "$PY" -m refimpl.cli bench-learning --preset longchain --algos grpo,dapo,grpo_s --ablations "" \
    --seeds "$seed" --runs-dir "$RUNS" --out "$RUNS/claims/longchain/s$seed" --workers 1 --lr-warmup 0
  cp "$RUNS/claims/longchain/s$seed/results.json" "$OUT/seed$seed.json"
done
