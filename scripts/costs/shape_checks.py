"""What the shape annotations cost: nothing outside the tests, and this much inside them.

Run from the repository root:

    python scripts/costs/shape_checks.py [--groups 64] [--group-size 8] [--length 32]

It prints

1. the import time of ``jaxtyping`` (the only cost the annotations add to a training run:
   ``refimpl.core`` imports ``Float``, ``Shaped``, ... once), in a fresh interpreter that has
   already imported torch, median of 5;
2. the time of one GTPO step's math, ``advantages`` + ``loss`` + ``backward``, on
   ``groups × group_size`` completions of ``length`` tokens, with three copies of the modules
   interleaved in one process (so that all see the same machine load), median over the
   repetitions: plain (as in training); shape-checked as in the test session (tests/conftest.py
   wraps the public functions with a shape annotation in ``jaxtyped(typechecker=beartype)``);
   and under jaxtyping's import hook, which wraps every function, method and dataclass of the
   modules (the alternative tests/conftest.py rejected for its cost);
3. the machine (CPU count, torch threads), the date and the load average.
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository (this file: scripts/costs/)
CHECKER = "beartype.beartype(conf=beartype.BeartypeConf(is_pep484_tower=True))"
IMPORT_JAXTYPING = (
    "import time, torch; t = time.perf_counter(); import jaxtyping; print(time.perf_counter() - t)"
)


def import_seconds(repeats: int = 5) -> float:
    """Median time of ``import jaxtyping`` in a fresh interpreter (torch already imported)."""
    times = []
    for _ in range(repeats):
        out = subprocess.run(
            [sys.executable, "-c", IMPORT_JAXTYPING], capture_output=True, text=True, check=True
        )
        times.append(float(out.stdout.strip()))
    return statistics.median(times)


def load_refimpl(mode: str):
    """``(contract, gtpo)`` imported afresh: ``"plain"``, ``"conftest"`` (wrapped by
    tests/conftest.py, as in the test session) or ``"hook"`` (jaxtyping's import hook)."""
    for name in [m for m in sys.modules if m == "refimpl" or m.startswith("refimpl.")]:
        del sys.modules[name]
    hook = None
    if mode == "conftest":
        sys.modules.pop("tests.conftest", None)
        importlib.import_module("tests.conftest")  # imports refimpl and wraps it
    elif mode == "hook":
        import jaxtyping

        hook = jaxtyping.install_import_hook(
            ["refimpl.contract", "refimpl.core", "refimpl.algorithms"], CHECKER
        )
    try:
        from refimpl import contract
        from refimpl.algorithms import gtpo
    finally:
        if hook is not None:
            hook.uninstall()
    assert hasattr(gtpo.loss, "__wrapped__") == (mode != "plain")
    assert hasattr(contract.require, "__wrapped__") == (mode == "hook")
    return contract, gtpo


def make_batch(contract, groups: int, group_size: int, length: int, seed: int = 0):
    import torch

    g = torch.Generator().manual_seed(seed)
    B, T = groups * group_size, length
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    return contract.RolloutBatch(
        response_ids=torch.randint(0, 100, (B, T), generator=g),
        response_mask=mask,
        rewards=(torch.rand(B, generator=g) < 0.5).float(),
        logp_old=-torch.rand(B, T, generator=g) * 3,
        entropy_old=torch.rand(B, T, generator=g) * 2,
        group_size=group_size,
    )


def step_seconds(contract, gtpo, batch) -> float:
    cfg = gtpo.Config()
    logp = batch.logp_old.clone().requires_grad_(True)
    t = time.perf_counter()
    adv = gtpo.advantages(batch, cfg)
    total, _ = gtpo.loss(batch, logp, adv, cfg)
    total.backward()
    return time.perf_counter() - t


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, default=64)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    import torch

    load_before = os.getloadavg()
    t_import = import_seconds()
    modes = ("plain", "conftest", "hook")
    loaded = {mode: load_refimpl(mode) for mode in modes}
    assert "beartype" in sys.modules
    shape = (args.groups, args.group_size, args.length)
    batches = {mode: make_batch(loaded[mode][0], *shape) for mode in modes}
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for mode in modes:  # warm-up, not timed
        step_seconds(*loaded[mode], batches[mode])
    for rep in range(args.repeats):
        order = modes[rep % 3 :] + modes[: rep % 3]  # rotate who goes first
        for mode in order:
            times[mode].append(step_seconds(*loaded[mode], batches[mode]))
    median = {mode: statistics.median(times[mode]) for mode in modes}
    load_after = os.getloadavg()

    B = args.groups * args.group_size
    print(f"date (UTC): {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M}")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__} "
        f"with {torch.get_num_threads()} threads, Python {platform.python_version()}"
    )
    print(f"load average (1, 5, 15 min) before: {load_before}, after: {load_after}")
    print(f"import jaxtyping after torch, median of 5 fresh interpreters: {t_import * 1e3:.1f} ms")
    print(
        f"gtpo advantages + loss + backward, B = {args.groups}×{args.group_size} = {B}, "
        f"T = {args.length}, median of {args.repeats} interleaved:"
    )
    labels = {
        "plain": "plain (training)",
        "conftest": "shape-checked (test session)",
        "hook": "import hook (every function)",
    }
    for mode in modes:
        extra = median[mode] - median["plain"]
        print(
            f"  {labels[mode]:<30} {median[mode] * 1e3:8.2f} ms  "
            f"({extra * 1e3:+.2f} ms, ×{median[mode] / median['plain']:.2f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
