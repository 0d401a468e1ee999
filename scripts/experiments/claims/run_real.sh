#!/usr/bin/env bash
# Every real-model run docs/claims.md reads, two at a time (one CPU thread each), in the
# order the ledger needs them:
#   1. the first pass (2026-12-03, a 2-core Intel Xeon): the base model and the four arms of
#      seeds 0-2, GTPO's two variants on seed 0, GRPO's three seeds, and the two ablations
#      (GTPO with α₂ = 0, TEPO without its mask) on seeds 0-2;
#   2. the second pass (2026-12-04, a 2-core AMD EPYC): DAPO without overlong shaping on
#      seeds 0-2, then seeds 3-7 of the base model, both DAPO arms, GTPO and GTPO with
#      α₂ = 0, evaluated after the last step only (the evaluations run under a forked
#      random-number generator, so fewer of them do not change what an arm trains);
#   3. the third pass (2026-12-06, the AMD EPYC): the seeds that can decide the α₂ row
#      (the base model, GTPO and GTPO with α₂ = 0 on seeds 6-17: 18 seeds for an MDD near
#      0.05; the base model's evaluation is the step-0 point every arm of a seed needs), then GRPO-S
#      on seeds 3-5, so that GRPO-S − DAPO without overlong shaping pairs on one machine.
# PASSES picks the passes (default "1 2 3"; PASSES=3 runs the third alone).
# A run whose result file exists is skipped, so the script can be stopped and started again;
# each run's log goes to runs/claims/<arm>_seed<seed>.log. About 7.5 minutes per run on the
# Xeon, 6 on the EPYC, two at a time. Extra arguments go to every run of run_real.py (beside
# this file). Run from anywhere; to rerun everything into an empty directory (the committed
# files untouched): OUT=/tmp/claims-real bash scripts/experiments/claims/run_real.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."  # the repository root (this file: scripts/experiments/claims/)
PY=${PY:-.venv/bin/python}
OUT=${OUT:-scripts/experiments/claims/results/real}
JOBS=${JOBS:-2}
mkdir -p runs/claims
PASSES=${PASSES:-1 2 3}
queue=()
if [[ " $PASSES " == *" 1 "* ]]; then
  queue+=(
    "base 0" "dapo 0" "gtpo 0" "grpo_s 0" "tepo 0"
    "base 1" "dapo 1" "gtpo 1" "grpo_s 1" "tepo 1"
    "base 2" "dapo 2" "gtpo 2" "grpo_s 2" "tepo 2"
    "gtpo_alpha0 0" "gtpo_batch 0" "grpo 0" "grpo 1" "grpo 2" "tepo_nomask 0"
    "gtpo_alpha0 1" "gtpo_alpha0 2" "tepo_nomask 1" "tepo_nomask 2"
    "dapo_noshape 0" "dapo_noshape 1" "dapo_noshape 2"
  )
fi
if [[ " $PASSES " == *" 2 "* ]]; then
  for seed in 3 4 5 6 7; do
    queue+=("base $seed")
    for arm in dapo dapo_noshape gtpo gtpo_alpha0; do
      queue+=("$arm $seed --eval-at 12")
    done
  done
fi
if [[ " $PASSES " == *" 3 "* ]]; then
  for seed in $(seq 6 17); do  # a seed's base model and its two arms together: each lands whole
    queue+=("base $seed" "gtpo $seed --eval-at 12" "gtpo_alpha0 $seed --eval-at 12")
  done
  queue+=("grpo_s 3 --eval-at 12" "grpo_s 4 --eval-at 12" "grpo_s 5 --eval-at 12")
fi
run_one() {
  local arm=$1 seed=$2
  shift 2
  if [[ -e "$OUT/${arm}_seed${seed}.json" ]]; then
    echo "skip $arm seed $seed (done)"
    return 0
  fi
  echo "start $arm seed $seed $(date -u +%H:%M:%S)"
  "$PY" scripts/experiments/claims/run_real.py --arm "$arm" --seed "$seed" --out-dir "$OUT" "$@" \
    >"runs/claims/${arm}_seed${seed}.log" 2>&1 || { echo "FAILED $arm seed $seed"; return 1; }
  echo "done  $arm seed $seed $(date -u +%H:%M:%S)"
}
export -f run_one
export PY OUT
# Each queue entry is "ARM SEED [ARGS...]"; the script's own arguments follow them.
printf '%s\n' "${queue[@]}" | xargs -P "$JOBS" -I{} bash -c 'run_one $1 "${@:2}"' _ {} "$@"
