#!/usr/bin/env bash
# GTPO (default) or TEPO with verl 0.9.1's PPO trainer, on GPUs.
#
#   ALGO=gtpo bash examples/verl_gtpo_tepo.sh            # or ALGO=tepo
#   ALGO=tepo bash examples/verl_gtpo_tepo.sh trainer.total_epochs=2   # extra overrides go last
#
# Needs verl with its GPU extras (vLLM, TransferQueue: e.g. `pip install "verl[vllm]==0.9.1"`)
# and this package (`pip install -e .`) in every Ray worker's environment; the parquet files come
# from verl's own data preparation (examples/data_preprocess/gsm8k.py in verl's repository).
# tests/scaleup/test_verl_launch.py composes verl's trainer config with exactly these overrides
# on a CPU machine, so a key that does not exist or a value verl rejects fails a test.
set -euo pipefail

ALGO="${ALGO:-gtpo}"
MODEL="${MODEL:-Qwen/Qwen2.5-0.5B-Instruct}"
DATA="${DATA:-$HOME/data/gsm8k}"

# verl imports this module in the driver and in every Ray worker: it registers our estimators
# and losses (refimpl_<name>, and gtpo/grpo_s/tepo) and installs the entropy hooks.
export VERL_USE_EXTERNAL_MODULES=refimpl.scaleup.verl
# Hyper-parameters of our Config classes (JSON per algorithm); forwarded to the workers below.
DEFAULT_REFIMPL_CONFIG='{"gtpo": {"alpha_2": 0.1}}'
export REFIMPL_CONFIG="${REFIMPL_CONFIG:-$DEFAULT_REFIMPL_CONFIG}"

case "$ALGO" in
  # GTPO has no KL term: no reference model.
  gtpo) KL=(actor_rollout_ref.actor.use_kl_loss=False) ;;
  # TEPO's own masked KL replaces verl's: keep the reference model (so ref_log_prob exists) and
  # give verl's KL loss a zero weight.
  tepo) KL=(actor_rollout_ref.actor.use_kl_loss=True actor_rollout_ref.actor.kl_loss_coef=0.0) ;;
  *) echo "ALGO must be gtpo or tepo, got '$ALGO'" >&2; exit 2 ;;
esac

OVERRIDES=(
  algorithm.adv_estimator="$ALGO"
  actor_rollout_ref.actor.policy_loss.loss_mode="$ALGO"
  # Entropies of the rollout (GTPO's token rewards) and of the current policy (TEPO's mask).
  actor_rollout_ref.actor.calculate_entropy=True
  "${KL[@]}"
  actor_rollout_ref.rollout.n=8
  actor_rollout_ref.model.path="$MODEL"
  data.train_files="$DATA/train.parquet"
  data.val_files="$DATA/test.parquet"
  data.train_batch_size=64
  data.max_response_length=512
  actor_rollout_ref.actor.ppo_mini_batch_size=32
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
  actor_rollout_ref.rollout.name=vllm
  trainer.n_gpus_per_node=1
  trainer.nnodes=1
  # Quoted for Hydra too: unquoted, Hydra parses the JSON as its own syntax and rejects it.
  "+ray_kwargs.ray_init.runtime_env.env_vars.REFIMPL_CONFIG='$REFIMPL_CONFIG'"
)

# PYTHON and VERL_ENTRY exist for the test, which swaps in a config check for the trainer.
exec "${PYTHON:-python3}" -m "${VERL_ENTRY:-verl.trainer.main_ppo}" "${OVERRIDES[@]}" "$@"
