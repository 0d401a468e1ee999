"""``refimpl bench-speed``: how close to the machine, how far ahead of the peers.

Every figure is a median over ``--repeats`` timings; every comparison is a ratio of two
timings taken in the same run, interleaved (A, B, A, B, ...), so that load from other
processes on a shared machine hits both sides alike (``refimpl.bench.speed_timing``). Five
measurements:

1. **Sampling** tokens/s with and without the KV cache at response lengths 32 and 128
   (a 2-layer d = 128 model with ``block_size`` ≥ prompt + 128; ``<eos>`` is masked out of
   the logits so every row generates exactly the requested length).
2. **One RL step** of the real trainer (chain task, 16 prompts × G = 8, GRPO) split into
   sample / score / advantages / loss + backward + optimizer, and the FLOPs of the step
   (``torch.utils.flop_counter``: matmuls of every forward and backward; attention scores
   are not counted, ≈ L/(6d) ≈ 4 % more) over its time, against a measured fp32 matmul peak
   at the same thread count.
3. **Algorithm overhead**: advantages + loss + its backward (to ``logp``) of every algorithm
   relative to GRPO, at the trainer's batch shape and as a fraction of the measured step.
4. **Vectorised vs reference loops**: ``advantages`` against ``reference_advantages`` (the
   paper's equations as plain Python loops) at ``B = 512, T = 128``.
5. **Our trainer vs TRL's GRPOTrainer** on the same weights (the GPT-2 twin from
   ``refimpl.scaleup.hf.to_hf_gpt2``), same batch (16 prompts × 8), group size, completion
   budget, temperature, threads; TRL's loss set to ours (``loss_type="grpo"``, ε = 0.2,
   β = 0: GRPO's seq-mean-token-mean clipped surrogate; our GRPO with ``kl_coef=0``).

This module holds the command: its settings, the run of every measurement and the README's
two jobs timed end to end. The measurements are in ``speed_sampling`` (1), ``speed_step``
(2-4) and ``speed_trl`` (5); the report in ``speed_report``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

import torch

from refimpl.bench import machine_info
from refimpl.bench.result_header import command_line, make_header
from refimpl.bench.speed_report import format_speed
from refimpl.bench.speed_sampling import bench_oracle, bench_sampling
from refimpl.bench.speed_settings import SpeedConfig
from refimpl.bench.speed_step import bench_algorithms, bench_reference, bench_step
from refimpl.bench.speed_timing import matmul_peak
from refimpl.bench.speed_trl import bench_trl
from refimpl.runs.runlog import check_output_file, write_text_atomic

# ---------------------------------------------------------------------------------------------
# The README's two jobs, end to end.
# ---------------------------------------------------------------------------------------------


def bench_commands() -> dict[str, Any]:
    """Wall time of the demo from an empty runs directory and of the test suite, each run
    once in a subprocess (they are minutes long: one timing each, not a median)."""
    import re
    import subprocess
    import sys
    import tempfile

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "refimpl.demo", "--runs-dir", tmp],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        out["demo_s"] = time.perf_counter() - start
    repo = Path(__file__).resolve().parents[2]
    if (repo / "tests").is_dir():
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "auto", "-q", "-p", "no:cacheprovider"],
            cwd=repo, capture_output=True, text=True,
        )  # fmt: skip
        out["tests_s"] = time.perf_counter() - start
        summary = [line for line in done.stdout.splitlines() if re.search(r"\d+ passed", line)]
        out["tests_summary"] = summary[-1].strip("= ") if summary else f"exit {done.returncode}"
    return out


# ---------------------------------------------------------------------------------------------
# Every measurement, and the files.
# ---------------------------------------------------------------------------------------------


def run_speed(cfg: SpeedConfig) -> tuple[dict[str, Any], Path]:
    """Run every measurement; write ``results.json`` and ``report.md`` under ``cfg.out``."""
    for name in ("results.json", "report.md"):  # before an hour of measurement
        check_output_file(cfg.out / name, "--out")
    torch.set_num_threads(cfg.threads)
    cfg.out.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    model_size = (
        dict(n_layer=1, n_embd=32, n_head=2) if cfg.quick else dict(n_layer=2, n_embd=128, n_head=4)
    )
    started = time.perf_counter()
    results: dict[str, Any] = {
        "header": make_header(
            "speed",
            command=command_line(),
            seeds="unrecorded",
            base_models="unrecorded",
            evaluation_grid="none",
        ),  # fmt: skip
        "machine": info,
        "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()
        },
    }
    results["matmul_peak_flops_per_s"] = peak = matmul_peak(cfg.repeats)
    results["sampling"] = bench_sampling(cfg, model_size)
    results["oracle_sampling"] = bench_oracle(cfg, model_size, peak)
    results["step"] = step = bench_step(cfg, peak)
    results["algorithms"] = bench_algorithms(
        cfg, step["rows"], step["max_new_tokens"], step["time_step"]
    )
    results["reference"] = bench_reference(cfg, *cfg.big_batch)
    results["big_batch_algorithms"] = bench_algorithms(
        cfg, *cfg.big_batch, step_time=step["time_step"]
    )
    if cfg.trl:
        results["trl"] = bench_trl(cfg)
    if cfg.commands:
        results["commands"] = bench_commands()
    results["machine_after"] = machine_info()
    results["wall_s"] = time.perf_counter() - started
    write_text_atomic(cfg.out / "results.json", json.dumps(results, indent=2))
    report = cfg.out / "report.md"
    write_text_atomic(report, format_speed(results))
    return results, report


def main(cfg: SpeedConfig) -> Path:
    _results, report = run_speed(cfg)
    print(report.read_text())
    print(f"report: {report}")
    return report
