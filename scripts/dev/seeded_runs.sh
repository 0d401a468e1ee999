#!/usr/bin/env bash
# Eight short seeded runs (seven algorithms, one of them resumed half-way), every diagnostic on,
# into OUTDIR: the behaviour check of a refactor. Run it from two checkouts (before and after),
# then compare the two directories with scripts/dev/compare_runs.py:
#
#   (cd OLD && bash scripts/dev/seeded_runs.sh /tmp/before)
#   bash scripts/dev/seeded_runs.sh /tmp/after
#   python scripts/dev/compare_runs.py /tmp/before /tmp/after
#
# PY chooses the interpreter (default .venv/bin/python of the current checkout).
set -euo pipefail
OUT=${1:?usage: seeded_runs.sh OUTDIR}
PY=${PY:-.venv/bin/python}
mkdir -p "$OUT"
WS="--warmstart.steps 200 --warmstart.batch-size 64 --warmstart.model.n-layer 1 --warmstart.model.n-embd 32 --warmstart.model.n-head 2 --warmstart.eval-problems 20 --warmstart.runs-dir $OUT/warmstart-cache"
COMMON="--steps 4 --prompts-per-step 8 --group-size 4 --minibatches 2 --eval-every 2 --eval-problems 16 --eval-samples 4 --probe-every 2 --probe-prompts 2 --diag-every 2 --threads 1 --no-progress --no-plot --runs-dir $OUT --overwrite"
for spec in "grpo:" "dapo:" "tepo:" "entropy_bonus:" "gpg:" "gtpo:" "dr_grpo:kl_coef=0.01"; do
  algo=${spec%%:*}; args=${spec#*:}
  extra=""; [ -n "$args" ] && extra="--algo-args $args"
  # shellcheck disable=SC2086
  $PY -m refimpl.cli train --algo "$algo" $extra $COMMON $WS --name "$algo" > "$OUT/$algo.out" 2>&1
done
# shellcheck disable=SC2086
$PY -m refimpl.cli train --algo dapo $COMMON $WS --name resumed --steps 2 --checkpoint-every 1 > "$OUT/resumed1.out" 2>&1
# shellcheck disable=SC2086
$PY -m refimpl.cli train --resume --runs-dir "$OUT" --name resumed --steps 4 --no-progress --no-plot $WS > "$OUT/resumed2.out" 2>&1
echo "8 runs in $OUT"
