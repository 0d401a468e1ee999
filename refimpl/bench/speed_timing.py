"""How ``refimpl bench-speed`` times a figure, and the machine's yardsticks.

Every figure is a median over repeats; every comparison is a ratio of two timings taken in the
same run, interleaved (A, B, A, B, ...), so that load from other processes on a shared machine
hits both sides alike. A share of the machine is measured against the fp32 matmul peak at the
same thread count, with the model's matmul FLOPs counted per decoded token
(``decode_flops_per_token``). The peak a share divides by is measured interleaved with the
workload (``peak_probe`` as one more function of ``interleaved``: each round times the workload
and the matmul beside it), so that load from other processes lowers both alike;
``matmul_peak``, the best of a few matmuls at one moment, is the report's headline yardstick.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def median_time(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Time each function ``repeats`` times, round-robin, after one warm-up call each."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return times


def median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(num, den))


def matmul_peak(repeats: int, n: int = 1024) -> float:
    """FLOP/s of an ``n × n`` fp32 matmul at the current thread count (best of the repeats:
    a peak, not a typical figure)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(max(3, repeats)):
        t0 = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b, out=out)
        best = min(best, (time.perf_counter() - t0) / 4)
    return 2 * n**3 / best


def peak_probe(n: int = 1024) -> tuple[Callable[[], Any], float]:
    """A function to time beside a workload (four ``n × n`` fp32 matmuls) and its FLOPs."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)

    def run() -> None:
        for _ in range(4):
            torch.mm(a, b, out=out)

    return run, 4 * 2 * n**3


def share_of_peak(work_flops: float, work_times: list[float], peak_times: list[float],
                  peak_flops: float) -> float:  # fmt: skip
    """The workload's FLOP/s over the matmul's FLOP/s measured in the same round, median over
    the rounds of an ``interleaved`` run (not over a peak measured at another moment)."""
    return statistics.median(
        (work_flops / w) / (peak_flops / p) for w, p in zip(work_times, peak_times, strict=True)
    )


def decode_flops_per_token(n_layer: int, n_embd: int, vocab_size: int) -> int:
    """Matmul FLOPs of one decoded token of the GPT: ``2 · (12 · n_layer · d² + V · d)`` (the
    q/k/v, output and MLP projections of every layer and the tied head; attention over the
    cache is not counted, as in ``bench_step``)."""
    return 2 * (12 * n_layer * n_embd**2 + vocab_size * n_embd)
