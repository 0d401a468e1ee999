#!/usr/bin/env bash
# Every result file docs/credit.md reads, then the page's tables and figures.
#
#   bash scripts/experiments/credit/credit_runs.sh            # skips what is already in results/
#   OUT=/tmp/credit bash scripts/experiments/credit/credit_runs.sh   # into an empty directory
#
# 1. Two tasks, three batches each (16 prompts × G = 8, the oracle at K = 16, 32 and 64):
#    - the long chain (`--preset longchain`: chain with 10-12 operators) at its warm start,
#      and after 40 and 100 GRPO steps of one run (`refimpl compare`, resumed);
#    - countdown (`--preset collapse`) at its warm start, after 50 and 200 GRPO steps.
# 2. The long-chain learning benchmark: GRPO, DAPO, GTPO, GTPO with α₂ = 0, GRPO-S, TEPO
#    and forking tokens × 5 paired seeds at one sampled-token budget (35 runs).
# 3. The real model: SmolLM2-135M, one batch of 16 replies, the oracle at K = 8 and at K = 32;
#    and a batch of 16 problems × 8 replies at K = 32 (the claims ledger's credit rows).
# 4. The page: python scripts/experiments/credit/credit_page.py.
# Costs on the 2-core AMD EPYC of 2026-12-04, next to other jobs: see docs/credit.md.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
RUNS=${RUNS:-runs}
OUT=${OUT:-scripts/experiments/credit/results}
K=16,32,64
N=16
mkdir -p "$OUT"
refimpl() { "$PY" -m refimpl.cli "$@"; }

credit() {  # credit OUTFILE ARGS...: one batch, skipped when its file exists
  local out=$1
  shift
  if [[ -e "$out" ]]; then echo "skip $out (done)"; return 0; fi
  refimpl credit --prompts "$N" --rollouts "$K" --threads 1 --out "$out" "$@"
}

grpo_to() {  # grpo_to PRESET NAME STEPS: one GRPO run of the preset, trained (on) to STEPS
  local preset=$1 name=$2 steps=$3 resume=()
  [[ -e "$RUNS/$name/grpo-s0/config.json" ]] && resume=(--train.resume)
  refimpl compare --preset "$preset" --algos grpo --seeds 0 --name "$name" --runs-dir "$RUNS" \
    --workers 1 --train.lr-warmup 0 --train.steps "$steps" --train.threads 1 --train.no-plot "${resume[@]}"
}

for spec in "longchain 40 100" "collapse 50 200"; do
  read -r preset first last <<<"$spec"
  task=$([[ $preset == longchain ]] && echo longchain || echo countdown)
  credit "$OUT/${task}_step0.json" --preset "$preset" --train.runs-dir "$RUNS"
  for steps in "$first" "$last"; do
    if [[ ! -e "$OUT/${task}_step${steps}.json" ]]; then
      grpo_to "$preset" "credit-$task" "$steps"
      credit "$OUT/${task}_step${steps}.json" --run "$RUNS/credit-$task/grpo-s0"
    fi
  done
done

# The preset's warm start as its cache recorded it (the page's first table).
[[ -e "$OUT/warmstart_longchain.json" ]] ||
  cp "$(grep -l '"min_ops=10"' "$RUNS"/warmstart/chain-*/state.json | head -1)" "$OUT/warmstart_longchain.json"

# The oracle's cost target (64 completions of the long chain at K = 32, 2 threads): time it
# on an otherwise idle machine (the batch is the warm start's first 8 prompts).
[[ -e "$OUT/cost_longchain.json" ]] || refimpl credit --preset longchain --train.runs-dir "$RUNS" \
  --prompts 8 --rollouts 32 --threads 2 --out "$OUT/cost_longchain.json"

# How the regime was chosen (GRPO with one setting changed at a time).
[[ -e "$OUT/regime_probes.json" ]] || RUNS="$RUNS" OUT="$OUT" bash scripts/experiments/credit/regime_probes.sh

if [[ ! -e "$OUT/longchain_learning.json" ]]; then
  refimpl bench-learning --preset longchain --runs-dir "$RUNS" --out "$RUNS/bench/longchain" \
    --lr-warmup 0 --workers "${WORKERS:-1}"
  cp "$RUNS/bench/longchain/results.json" "$OUT/longchain_learning.json"
fi

[[ -e "$OUT/real_smollm2.json" ]] || "$PY" scripts/experiments/credit/real_model.py --out "$OUT/real_smollm2.json"
# The same batch (the same seed) at K = 32: the oracle's noise at K = 8 is as large as A*.
[[ -e "$OUT/real_smollm2_k32.json" ]] ||
  "$PY" scripts/experiments/credit/real_model.py --rollouts 32 --out "$OUT/real_smollm2_k32.json"
# 16 problems at K = 32: the claims ledger takes the prompt as the unit and tests a batch of
# at least 16 prompts (docs/claims.md); about 7 minutes of oracle on one thread.
[[ -e "$OUT/real_smollm2_p16_k32.json" ]] ||
  "$PY" scripts/experiments/credit/real_model.py --prompts 16 --rollouts 32 --out "$OUT/real_smollm2_p16_k32.json"
if [[ "$OUT" == scripts/experiments/credit/results ]]; then
  "$PY" scripts/experiments/credit/credit_page.py
else  # a rerun elsewhere: say whether it gives the committed page's tables
  "$PY" scripts/experiments/credit/credit_page.py --results "$OUT" --check --no-figure ||
    echo "the tables from $OUT differ from docs/credit.md (another machine computes other digits)"
fi
