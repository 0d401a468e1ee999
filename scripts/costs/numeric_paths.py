"""The countdown warm start on each CPU kernel path, and what each path costs.

Run from the repository root:

    python scripts/costs/numeric_paths.py [--steps 600] [--repeats 20] [--skip-paths]

It prints two tables (markdown); docs/numerics.md quotes them.

1. **Which path gives which model.** The default countdown warm start (``--steps`` steps, one
   thread, seed 0), each in a fresh process under one kernel-path setting: refimpl's pinned
   path (``REFIMPL_NUMERICS`` unset) with nothing, ATen's plain kernels or AVX-512 asked for
   in the environment; the native path (``REFIMPL_NUMERICS=native``) with the environment's
   choice, among them issue 30's candidate (ATen's AVX2 kernels with MKL's ``COMPATIBLE``
   branch, the one meant to agree across Intel and AMD). Columns: held-out greedy and sampled
   success (200 problems), the training time, the first 16 hex digits of the weights' SHA-256
   (equal digits: equal weights, bit for bit), ATen's kernels and MKL's branch as reported.
   tests/golden/cross_machine.json records the ``--steps 50`` digits of an Intel and an AMD CPU.
2. **What each path costs.** One process per path (native, pinned, the COMPATIBLE candidate),
   alive at once, take turns (round by round, so that all see the same machine load) timing
   one chunk each: 5 warm-start steps, one RL rollout (64 prompts × 8) and one RL update on
   it (DAPO's loss over 4 minibatches, backward, gradient clip, Adam), one thread; medians
   over ``--repeats`` rounds, each phase's ratio to the native path's, and the total's.

Then the machine (CPU, torch's native capability), the date and the load average.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file: scripts/costs/)
KNOBS = (
    "REFIMPL_NUMERICS",
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
)

#: Issue 30's candidate for agreeing across Intel and AMD: ATen's AVX2 kernels with MKL's
#: COMPATIBLE branch (meant to agree across vendors), outside the pin.
COMPATIBLE = {"REFIMPL_NUMERICS": "native", "ATEN_CPU_CAPABILITY": "avx2",
              "MKL_CBWR": "COMPATIBLE,STRICT", "ONEDNN_MAX_CPU_ISA": "AVX2"}  # fmt: skip

#: (label, environment) of table 1.
VARIANTS = [
    ("pinned (nothing set)", {}),
    ("pinned, ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE", {
        "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}),
    ("pinned, ATEN_CPU_CAPABILITY=avx512 MKL_CBWR=AVX512", {
        "ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512"}),
    ("native (REFIMPL_NUMERICS=native)", {"REFIMPL_NUMERICS": "native"}),
    ("native, ATen avx2, MKL COMPATIBLE,STRICT", COMPATIBLE),
    ("native, ATEN_CPU_CAPABILITY=avx2", {
        "REFIMPL_NUMERICS": "native", "ATEN_CPU_CAPABILITY": "avx2"}),
    ("native, ATEN_CPU_CAPABILITY=default", {
        "REFIMPL_NUMERICS": "native", "ATEN_CPU_CAPABILITY": "default"}),
]  # fmt: skip


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KNOBS}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["TQDM_DISABLE"] = "1"
    return {**env, **extra}


def _run(args: list[str], extra: dict[str, str]) -> None:
    subprocess.run(
        [sys.executable, "-m", "refimpl.cli", *args],
        env=_env(extra),
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def _cache(runs: Path) -> Path:
    (cache,) = [p for p in (runs / "warmstart").iterdir() if p.is_dir()]
    return cache


def warm_start(extra: dict[str, str], steps: int, runs: Path) -> dict:
    _run(["warmstart", "--task", "countdown", "--steps", str(steps), "--runs-dir", str(runs),
          "--no-progress"], extra)  # fmt: skip
    cache = _cache(runs)
    state = json.loads((cache / "state.json").read_text())
    digest = hashlib.sha256((cache / "model.safetensors").read_bytes()).hexdigest()[:16]
    return {**state["report"], "sha": digest, "numerics": state["numerics"]}


#: (label, environment) of table 2.
COST_VARIANTS = [
    ("native", {"REFIMPL_NUMERICS": "native"}),
    ("pinned", {}),
    ("COMPATIBLE", COMPATIBLE),
]


def worker() -> None:
    """Table 2's workload, in this process on the path its environment sets. It prepares,
    prints ``ready``, then runs one chunk per line read from stdin and prints that chunk's
    seconds per phase as JSON, so the parent can interleave the paths chunk by chunk."""
    import time

    import numpy as np
    import torch
    import torch.nn.functional as F

    from refimpl import algorithms, contract
    from refimpl.evaluate import encode_prompts
    from refimpl.sampling.groups import policy_logprobs, sample_groups
    from refimpl.settings.warmstart_config import WARMSTART_MIX, WarmstartConfig
    from refimpl.warmstart import _training_batch
    from toy_envs import TOKENIZER, get_task

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = WarmstartConfig().model.build()
    task = get_task("countdown", **WARMSTART_MIX.get("countdown", {}))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    prompts = encode_prompts(task.sample(64, np.random.default_rng([1, 0])))
    print("ready", flush=True)
    for chunk, _ in enumerate(sys.stdin):
        out = {}
        t = time.perf_counter()
        for step in range(5):  # warm-start steps: 128 sequences, forward, backward, AdamW
            problems = task.sample(128, np.random.default_rng([chunk, step]))
            ids, mask, target = _training_batch(task, problems)
            logits = model(ids, attention_mask=mask)[:, :-1]
            nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                  reduction="none")  # fmt: skip
            loss = (nll * target[:, 1:].reshape(-1).float()).sum() / target.sum()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        out["warm_start_5_steps"] = time.perf_counter() - t
        t = time.perf_counter()
        samples = sample_groups(model, prompts, group_size=8, max_new_tokens=task.max_new_tokens,
                                eos_id=TOKENIZER.eos_id, pad_id=TOKENIZER.pad_id,
                                generator=torch.Generator().manual_seed(chunk))  # fmt: skip
        out["rollout_64x8"] = time.perf_counter() - t
        t = time.perf_counter()
        rl_update(model, samples, torch.rand(len(samples.response_ids)).round(), algorithms, contract,
                  policy_logprobs)  # fmt: skip
        out["rl_update_4_minibatches"] = time.perf_counter() - t
        print(json.dumps(out), flush=True)


def rl_update(model, samples, rewards, algorithms, contract, policy_logprobs) -> None:
    """One RL update on a sampled batch: DAPO's loss over 4 minibatches of whole groups,
    backward, gradient clip, Adam (the trainer's inner loop, without its bookkeeping)."""
    import torch

    dapo = algorithms.get("dapo")
    cfg = dapo.Config()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    rows = len(rewards)
    for part in torch.arange(rows).chunk(4):
        batch = contract.RolloutBatch(
            response_ids=samples.response_ids[part], response_mask=samples.response_mask[part],
            rewards=rewards[part], logp_old=samples.logp_old[part],
            entropy_old=samples.entropy_old[part], group_size=samples.group_size,
        )  # fmt: skip
        logp, entropy = policy_logprobs(
            model, samples.prompt_ids[part], samples.prompt_mask[part],
            samples.response_ids[part], samples.response_mask[part],
        )  # fmt: skip
        loss, _ = dapo.loss(batch, logp, dapo.advantages(batch, cfg), cfg, entropy=entropy)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()


def interleaved_times(rounds: int) -> dict[str, list[dict[str, float]]]:
    """One worker per path of COST_VARIANTS, alive at once; each round asks each in turn for
    one chunk, so that all paths see the same machine load, chunk by chunk."""
    procs = {
        label: subprocess.Popen(
            [sys.executable, __file__, "--worker"],
            env=_env(extra),
            cwd=ROOT,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )  # fmt: skip
        for label, extra in COST_VARIANTS
    }
    try:
        for p in procs.values():
            assert p.stdout.readline().strip() == "ready"
        times: dict[str, list[dict[str, float]]] = {label: [] for label in procs}
        for _ in range(rounds + 1):  # the first round warms up and is dropped
            for label, p in procs.items():
                p.stdin.write("go\n")
                p.stdin.flush()
                times[label].append(json.loads(p.stdout.readline()))
        return {label: t[1:] for label, t in times.items()}
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600, help="warm-start steps of table 1")
    parser.add_argument("--repeats", type=int, default=20, help="interleaved rounds of table 2")
    parser.add_argument("--skip-paths", action="store_true", help="only table 2")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_paths:
            print(f"| setting | greedy success | sampled success | time ({args.steps} steps) | "
                  "weights (SHA-256) | ATen kernels | MKL branch |")  # fmt: skip
            print("|---|---|---|---|---|---|---|")
            for i, (label, extra) in enumerate(VARIANTS):
                r = warm_start(extra, args.steps, Path(tmp) / f"paths{i}")
                print(
                    f"| {label} | {r['greedy_success']:.3f} | {r['sampled_success']:.3f} | "
                    f"{r['train_seconds']:.0f} s | `{r['sha']}` | "
                    f"{r['numerics']['cpu_capability']} | {r['numerics']['mkl_branch']} |",
                    flush=True,
                )
            print()
        times = interleaved_times(args.repeats)
    phases = list(times["native"][0])
    med = {k: {p: statistics.median(t[p] for t in v) for p in phases} for k, v in times.items()}
    print("| setting | " + " | ".join(f"{p} (s)" for p in phases) + " | total / native |")
    print("|---|" + "---|" * (len(phases) + 1))
    for label, _ in COST_VARIANTS:
        ratio = sum(med[label].values()) / sum(med["native"].values())
        cells = " | ".join(
            f"{med[label][p]:.2f} ({med[label][p] / med['native'][p]:.2f}×)" for p in phases
        )
        print(f"| {label} | {cells} | {ratio:.2f} |")
    import torch  # noqa: PLC0415  (after refimpl would pin it: this process stays native)

    from refimpl.runs.cpu_kernels import cpu_name

    print(
        f"\n{cpu_name()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__} native capability {torch.backends.cpu.get_cpu_capability()}; "
        f"{datetime.date.today()}; load average {os.getloadavg()[0]:.2f}; one torch thread, "
        f"table 2: medians over {args.repeats} interleaved rounds"
    )


if __name__ == "__main__":
    main()
