"""RefimplGRPOTrainer in two processes (accelerate, DDP over gloo, CPU) equals one process on
the same global batch: gathered advantages, updated weights and TRL's logged metrics.

The batch is 3 groups × G = 4; with 6 rows per process, group 1 (rows 4-7) spans both
processes, so its advantages need the cross-process gather, and each process's loss needs the
rescaling ``local / (count_global / num_processes · steps)`` for DDP's gradient average to be
the whole-batch gradient. The optimizer is plain SGD without clipping, so a loss scale error
shows up in the weights (Adam's first step is nearly scale-free and would hide it).

Cost (2-core CI machine): two launches, about 25 s (one process) and 60 s (two processes),
most of it imports; ``trl_multiprocess_run.py`` does the work, these tests only compare."""

from __future__ import annotations

import math

import pytest
import torch

from tests.scaleup.multiproc import HERE, child_env, launch, run_once, save_tiny_qwen2

pytestmark = [pytest.mark.multiprocess, pytest.mark.slow]

SCRIPT = HERE / "trl_multiprocess_run.py"
ALGORITHMS = ("grpo", "dapo", "gpg", "gtpo", "tepo")
ACCUMULATED = ("grpo", "dapo")  # also run as 2 processes × 2 accumulated micro-batches
G, ROWS, LR = 4, 12, 0.5
#: Logged values that are not functions of the batch and weights.
NOT_COMPARED = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    def produce(root):
        model = save_tiny_qwen2(root / "model")
        env = child_env(TRL_EXPERIMENTAL_SILENCE="1")
        one = f"12x1:{','.join(ALGORITHMS)}"
        _, one_s = launch([str(SCRIPT), str(root / "one"), str(model), one], env)
        two = f"6x1:{','.join(ALGORITHMS)};3x2:{','.join(ACCUMULATED)}"
        accelerate = ["-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2"]
        accelerate += ["--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no"]
        _, two_s = launch([*accelerate, str(SCRIPT), str(root / "two"), str(model), two], env)
        print(f"TRL runs: one process {one_s:.1f} s, two processes {two_s:.1f} s")

    root = run_once(tmp_path_factory, "trl_multiprocess", produce)
    model = root / "model"

    def load(folder, name):
        return torch.load(root / folder / f"{name}.pt", weights_only=False)

    from transformers import AutoModelForCausalLM

    initial = AutoModelForCausalLM.from_pretrained(model).state_dict()
    return {
        "one": {n: load("one/12x1", n) for n in ALGORITHMS},
        "two": {n: load("two/6x1", n) for n in ALGORITHMS},
        "accumulated": {n: load("two/3x2", n) for n in ACCUMULATED},
        "initial": initial,
    }


def test_the_two_process_run_is_distributed_over_gloo(runs) -> None:
    for name in ALGORITHMS:
        one, two = runs["one"][name], runs["two"][name]
        assert one["num_processes"] == 1 and two["num_processes"] == 2
        assert two["distributed_type"] == "DistributedType.MULTI_CPU"
        assert two["backend"] == "gloo"


@pytest.mark.parametrize("name", ALGORITHMS)
def test_same_global_batch_with_a_group_split_across_processes(runs, name) -> None:
    one, two = runs["one"][name], runs["two"][name]
    assert torch.equal(one["prompt_ids"], two["prompt_ids"])
    assert torch.equal(one["completion_ids"], two["completion_ids"])
    assert one["completion_ids"].shape[0] == ROWS
    per_process = ROWS // 2
    # Group 1 = rows 4..7: two rows on each process.
    assert per_process % G != 0 and (per_process // G) * G < per_process
    # ...and it carries a gradient: its rows' advantages are not all zero.
    assert bool(two["advantages"][G : 2 * G].abs().sum() > 0)


def test_dapo_dynamic_sampling_drops_the_uniform_group_in_both_runs(runs) -> None:
    """Group 2 (rows 8-11) has equal rewards: out of the loss mask and the logged fraction
    of kept groups is 2/3 in both runs (a whole-batch quantity, computed after the gather)."""
    for run in ("one", "two"):
        dapo = runs[run]["dapo"]
        assert bool((dapo["loss_mask"][2 * G :] == 0).all())
        assert bool((dapo["loss_mask"][: 2 * G].sum(1) > 0).all())
        assert dapo["log"]["refimpl/kept_groups_frac"] == pytest.approx(2 / 3)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_gathered_advantages_equal_the_one_process_run(runs, name) -> None:
    """Same rows, same estimator on the gathered batch. Not bit-equal in general: GTPO reads
    rollout entropies, which each process computes in a forward pass of its own batch shape,
    so float32 default tolerances."""
    one, two = runs["one"][name], runs["two"][name]
    torch.testing.assert_close(two["advantages"], one["advantages"])
    torch.testing.assert_close(two["loss_mask"], one["loss_mask"])
    assert two["refimpl_count"] == one["refimpl_count"]


@pytest.mark.parametrize(
    ("name", "run"),
    [(n, "two") for n in ALGORITHMS] + [(n, "accumulated") for n in ACCUMULATED],
)
def test_updated_weights_equal_the_one_process_run(runs, name, run) -> None:
    """After one SGD step (lr 0.5) the weights agree to 1e-6. Why not exactly: DDP averages
    two partial gradients, each a float32 sum in another order than the one-process sum;
    the differences seen are ~1e-8. A loss scale error by a factor of 2 moves them by ~0.05."""
    one, other = runs["one"][name]["weights"], runs[run][name]["weights"]
    assert set(one) == set(other)
    moved = max(float((one[k] - runs["initial"][k]).abs().max()) for k in one)
    assert moved > 1e-3  # the step did something
    for key in one:
        torch.testing.assert_close(other[key], one[key], rtol=0, atol=1e-6, msg=key)


@pytest.mark.parametrize("name", ALGORITHMS)
def test_logged_metrics_equal_the_one_process_run(runs, name) -> None:
    """Every number TRL logs for the step (its own and ours under refimpl/) agrees, except
    timings: TRL logs from the main process, so ours must be pooled over processes."""
    one, two = runs["one"][name]["log"], runs["two"][name]["log"]
    keys = {k for k, v in one.items() if isinstance(v, int | float)} - NOT_COMPARED
    assert {"loss", "grad_norm", "entropy", "refimpl/adv_std", "refimpl/entropy_old"} <= keys
    mismatched = {
        k: (one[k], two.get(k))
        for k in sorted(keys)
        if two.get(k) is None or not math.isclose(one[k], two[k], rel_tol=1e-5, abs_tol=1e-6)
    }
    assert not mismatched
