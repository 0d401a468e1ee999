"""The countdown warm start on each CPU kernel path, and what refimpl's pinned path costs.

Run from the repository root:

    python scripts/numeric_paths.py [--steps 600] [--repeats 5]

It prints two tables (markdown).

1. **Which path gives which model.** The default countdown warm start (``--steps`` steps, one
   thread, seed 0), each in a fresh process under one kernel-path setting: refimpl's pinned
   path (``REFIMPL_NUMERICS`` unset) with nothing, ATen's plain kernels or AVX-512 asked for
   in the environment, and the native path (``REFIMPL_NUMERICS=native``) with the
   environment's choice. Columns: held-out greedy and sampled success (200 problems), the
   training time, and the first 12 hex digits of the weights' SHA-256 (equal digits: equal
   weights, bit for bit).
2. **What the pin costs.** Fresh processes on the native path, on AVX2 without MKL's
   reproducibility mode (what a CPU without AVX-512 runs natively) and on the pinned path
   alternate, each timing 40 warm-start steps and three RL rollouts (64 prompts × 8) on one
   thread, in CPU seconds (other jobs on the machine change CPU time much less than wall
   time); medians over ``--repeats``, and the ratio of the total to the native path's.

Then the machine (CPU, torch's native capability), the date and the load average.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KNOBS = (
    "REFIMPL_NUMERICS",
    "ATEN_CPU_CAPABILITY",
    "MKL_CBWR",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
)

#: (label, environment) of table 1.
VARIANTS = [
    ("pinned (nothing set)", {}),
    ("pinned, ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE", {
        "ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}),
    ("pinned, ATEN_CPU_CAPABILITY=avx512 MKL_CBWR=AVX512", {
        "ATEN_CPU_CAPABILITY": "avx512", "MKL_CBWR": "AVX512"}),
    ("native (REFIMPL_NUMERICS=native)", {"REFIMPL_NUMERICS": "native"}),
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
    digest = hashlib.sha256((cache / "model.safetensors").read_bytes()).hexdigest()[:12]
    return {**state["report"], "sha": digest, "numerics": state["numerics"]}


#: (label, environment) of table 2: native, AVX2 without MKL's reproducibility mode (what an
#: AVX2-only machine runs natively), and the pin.
COST_VARIANTS = [
    ("native", {"REFIMPL_NUMERICS": "native"}),
    ("native AVX2 (no CNR)", {"REFIMPL_NUMERICS": "native", "ATEN_CPU_CAPABILITY": "avx2",
                              "MKL_ENABLE_INSTRUCTIONS": "AVX2"}),
    ("pinned", {}),
]  # fmt: skip


def worker() -> None:
    """Table 2's workload, in this process on the path its environment sets; prints the CPU
    seconds of each phase as JSON. CPU time, not wall time, so that other jobs on the machine
    change it little (one thread: the process's CPU time is its compute)."""
    import time

    import numpy as np
    import torch
    import torch.nn.functional as F

    import refimpl  # noqa: F401  (pins the path, unless REFIMPL_NUMERICS=native)
    from refimpl.evaluate import encode_prompts
    from refimpl.sampling import sample_groups
    from refimpl.warmstart import WARMSTART_MIX, WarmstartConfig, _training_batch
    from toy_envs import TOKENIZER, get_task

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = WarmstartConfig().model.build()
    task = get_task("countdown", **WARMSTART_MIX.get("countdown", {}))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    out = {}
    t = time.process_time()
    for step in range(40):  # the warm start's step: 128 sequences, forward, backward, AdamW
        ids, mask, target = _training_batch(
            task, task.sample(128, np.random.default_rng([0, step]))
        )
        logits = model(ids, attention_mask=mask)[:, :-1]
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                              reduction="none")  # fmt: skip
        loss = (nll * target[:, 1:].reshape(-1).float()).sum() / target.sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    out["warm_start_40_steps"] = time.process_time() - t
    prompts = encode_prompts(task.sample(64, np.random.default_rng([1, 0])))
    t = time.process_time()
    for r in range(3):  # an RL rollout: 64 prompts × G = 8, KV-cache sampling
        sample_groups(model, prompts, group_size=8, max_new_tokens=task.max_new_tokens,
                      eos_id=TOKENIZER.eos_id, pad_id=TOKENIZER.pad_id,
                      generator=torch.Generator().manual_seed(r))  # fmt: skip
    out["rollout_3x512"] = time.process_time() - t
    print(json.dumps(out))


def cpu_times(extra: dict[str, str]) -> dict[str, float]:
    result = subprocess.run(
        [sys.executable, __file__, "--worker"], env=_env(extra), check=True,
        capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    return json.loads(result.stdout.splitlines()[-1])


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=600, help="warm-start steps of table 1")
    parser.add_argument("--repeats", type=int, default=5, help="alternations of table 2")
    parser.add_argument("--skip-paths", action="store_true", help="only table 2")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_paths:
            print(f"| path | greedy success | sampled success | time ({args.steps} steps) | "
                  "weights (SHA-256) | ATen kernels |")  # fmt: skip
            print("|---|---|---|---|---|---|")
            for i, (label, extra) in enumerate(VARIANTS):
                r = warm_start(extra, args.steps, Path(tmp) / f"paths{i}")
                print(
                    f"| {label} | {r['greedy_success']:.3f} | {r['sampled_success']:.3f} | "
                    f"{r['train_seconds']:.0f} s | `{r['sha']}` | "
                    f"{r['numerics']['cpu_capability']} |",
                    flush=True,
                )
            print()
        times: dict[str, list[dict[str, float]]] = {label: [] for label, _ in COST_VARIANTS}
        for _ in range(args.repeats):
            for label, extra in COST_VARIANTS:
                times[label].append(cpu_times(extra))
    phases = list(times["native"][0])
    med = {k: {p: statistics.median(t[p] for t in v) for p in phases} for k, v in times.items()}
    print("| path | " + " | ".join(f"{p} (CPU s)" for p in phases) + " | / native |")
    print("|---|" + "---|" * (len(phases) + 1))
    for label, _ in COST_VARIANTS:
        ratio = sum(med[label].values()) / sum(med["native"].values())
        cells = " | ".join(f"{med[label][p]:.2f}" for p in phases)
        print(f"| {label} | {cells} | {ratio:.2f} |")
    import torch  # noqa: PLC0415  (after refimpl would pin it: this process stays native)

    print(
        f"\n{_cpu_name()}, {os.cpu_count()} CPUs, torch "
        f"{torch.__version__} native capability {torch.backends.cpu.get_cpu_capability()}; "
        f"{datetime.date.today()}; load average {os.getloadavg()[0]:.2f}; one torch thread, "
        f"medians over {args.repeats} alternating repeats; table 1's times are wall times"
    )


if __name__ == "__main__":
    main()
