#!/usr/bin/env bash
# The ceiling of token credit (docs/credit.md, "What credit is worth"): every result file the
# section reads, then the section itself.
#
#   bash scripts/experiments/ceiling/ceiling_runs.sh              # reuses the runs that finished
#   WORKERS=1 bash scripts/experiments/ceiling/ceiling_runs.sh    # one run at a time
#
# The regime is the long chain's (`--preset longchain`: chain with 10-12 operators, the
# preset's warm start, 64 prompts × G = 8 per step, 4 minibatches, lr 1e-4) at a budget of 20
# GRPO-sized steps of sampled tokens (the learning benchmark's is 100: VinePPO's values cost
# about 26 times the policy's tokens per step, docs/credit.md has the costs), evaluated on 300
# held-out problems (16 samples each for pass@k) every 5 steps.
# 1. The ceiling: VinePPO against GRPO, and GRPO without its KL term (the matched-scale arm),
#    on 5 paired seeds (SEEDS; a seed's runs share the warm start and the training problems).
# 2. Every other arm: DAPO, GTPO, GTPO with α₂ = 0, GRPO-S, TEPO, forking tokens, forking
#    tokens on a random 20 %, STEER, on the seeds ARM_SEEDS (the first 3 of the 5, by default:
#    what the session that made the committed files could afford; ARM_SEEDS=0,1,2,3,4 runs all).
# 3. A probe: the ceiling with one setting changed; 4. countdown; 5. the sample-matched arm
# (each below). 6. The page: python scripts/experiments/ceiling/ceiling_page.py.
# Every step trains seed by seed: an interrupted run of this script leaves whole seeds, and a
# rerun reuses every finished run.
# Costs on the 2-core AMD EPYC: see docs/credit.md ("What VinePPO pays").
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY=${PY:-.venv/bin/python}
RUNS=${RUNS:-runs}
OUT=${OUT:-scripts/experiments/ceiling/results}
BENCH="$RUNS/bench/ceiling"
mkdir -p "$OUT"
bench() {  # bench OUT SEEDS ARGS...
  local out=$1 seeds=$2
  shift 2
  "$PY" -m refimpl.cli bench-learning --preset longchain --runs-dir "$RUNS" --out "$out" \
    --seeds "$seeds" --budget-steps 20 --eval-every 5 --eval-problems 300 \
    --ablation-tasks chain --workers "${WORKERS:-2}" "$@"
}
# 1. The ceiling first: it decides whether the rest can be read.  2. Every other arm.
# Each step is skipped when its result file exists: in a checkout with the committed files
# this script does nothing; OUT=/tmp/ceiling-results reruns everything into an empty place.
if [[ ! -e "$OUT/runs.json" ]]; then
  bench "$BENCH" "${SEEDS:-0,1,2,3,4}" --lr-warmup 0 --algos vineppo,grpo --ablations "grpo kl_coef=0.0"
  bench "$BENCH" "${ARM_SEEDS:-0,1,2}" --lr-warmup 0 --algos grpo,dapo,gtpo,grpo_s,tepo,forking_tokens,steer \
    --ablations "gtpo alpha_2=0.0,forking_tokens selection=random"
  "$PY" scripts/experiments/ceiling/collect.py --bench "$BENCH" --out "$OUT/runs.json"
fi
OUT="$OUT" bash scripts/experiments/ceiling/credit.sh
# 3. The probes: the ceiling again with one setting changed (the first: the learning rate,
#    3e-4, where GRPO fell in the regime probes), VinePPO and GRPO on 3 seeds.
if [[ ! -e "$OUT/probe_lr3e-4.json" ]]; then
  "$PY" -m refimpl.cli bench-learning --preset longchain --runs-dir "$RUNS" --lr-warmup 0 \
    --out "$RUNS/bench/ceiling-probe-lr3e-4" --seeds 0,1,2 --budget-steps 20 --eval-every 5 \
    --eval-problems 300 --workers "${WORKERS:-2}" --algos vineppo,grpo --ablations "" --lr 0.0003
  "$PY" scripts/experiments/ceiling/collect.py --bench "$RUNS/bench/ceiling-probe-lr3e-4" \
    --probe "lr=3e-4" --out "$OUT/probe_lr3e-4.json"
fi
# 4. The second testbed: countdown (`--preset collapse`), VinePPO and GRPO on 20 seeds (the
#    committed files ran seeds 0-4 first, then 5-19 when 5 left H at 1.1 times its MDD).
if [[ ! -e "$OUT/countdown.json" ]]; then
  "$PY" -m refimpl.cli bench-learning --preset collapse --runs-dir "$RUNS" --lr-warmup 0 \
    --out "$RUNS/bench/ceiling-countdown" --seeds "$(seq -s, 0 19)" --budget-steps 20 --eval-every 5 \
    --eval-problems 300 --workers "${WORKERS:-2}" --algos vineppo,grpo --ablations ""
  "$PY" scripts/experiments/ceiling/collect.py --bench "$RUNS/bench/ceiling-countdown" \
    --probe "countdown" --out "$OUT/countdown.json"
fi
# 5. The sample-matched arm: GRPO with G = 64 for the same 20 updates (a token budget would
#    stop it after 3 updates, so it runs by steps, through `refimpl compare`), 2 seeds (what
#    the session that made the committed files could afford; MATCHED_SEEDS=0,1,2 for more).
if [[ ! -e "$OUT/sample_matched.json" ]]; then
  "$PY" -m refimpl.cli compare --preset longchain --train.lr-warmup 0 --algos grpo --seeds "${MATCHED_SEEDS:-0,1}" \
    --name ceiling-matched-G64 --runs-dir "$RUNS" --workers "${WORKERS:-2}" \
    --train.group-size 64 --train.steps 20 --train.eval-every 5 --train.eval-problems 300 \
    --train.probe-every 5 --train.threads 1 --train.no-plot
  "$PY" scripts/experiments/ceiling/collect.py --bench "$RUNS/ceiling-matched-G64" \
    --probe "GRPO G=64" --out "$OUT/sample_matched.json"
fi
# 7. The ceiling again with the learning-rate warm-up (--lr-warmup 8: the first 8 optimizer
#    updates take lr·k/8; docs/first_update.md), on the 5 paired seeds: VinePPO as the runs
#    above train it, VinePPO as its authors run it where this testbed allows (advantages
#    whitened, 2 epochs, sampling at T = 0.6 and top-p 0.9), and GRPO.
if [[ ! -e "$OUT/warmup.json" ]]; then
  bench "$RUNS/bench/ceiling-warmup" "${SEEDS:-0,1,2,3,4}" --lr-warmup 8 --algos vineppo,grpo \
    --ablations "vineppo whiten_advantages=True ppo_epochs=2 temperature=0.6 top_p=0.9"
  "$PY" scripts/experiments/ceiling/collect.py --bench "$RUNS/bench/ceiling-warmup" \
    --probe "lr_warmup=8" --out "$OUT/warmup.json"
fi
# 8. The learning-rate probe with the warm-up: VinePPO and GRPO at lr 3e-4 on 3 seeds (without
#    it, 3e-4 made VinePPO fall further than GRPO in every seed). 1e-3 is not run: the warm-up
#    does not tame its first step (docs/first_update.md); LRS="3e-4 1e-3" runs it too.
for lr in ${LRS:-3e-4}; do
  if [[ ! -e "$OUT/warmup_lr$lr.json" ]]; then
    bench "$RUNS/bench/ceiling-warmup-lr$lr" 0,1,2 --lr-warmup 8 --lr "$lr" --algos vineppo,grpo \
      --ablations ""
    "$PY" scripts/experiments/ceiling/collect.py --bench "$RUNS/bench/ceiling-warmup-lr$lr" \
      --probe "lr=$lr lr_warmup=8" --out "$OUT/warmup_lr$lr.json"
  fi
done
# 6. The page (its tables against the committed page when OUT is elsewhere).
if [[ "$OUT" == scripts/experiments/ceiling/results ]]; then
  "$PY" scripts/experiments/ceiling/ceiling_page.py
else
  "$PY" scripts/experiments/ceiling/ceiling_page.py --results "$OUT" --check --no-figure ||
    echo "the tables from $OUT differ from docs/credit.md (another machine computes other digits)"
fi
