"""What it costs that the log reaches the disk before each checkpoint.

``Trainer.save`` fsyncs ``metrics.jsonl`` and ``probes.jsonl`` before it writes the checkpoint
of a step, so that a power cut cannot leave a checkpoint ahead of its log. Run from the
repository root:

    python scripts/costs/log_fsync.py [--dir runs] [--repeats 21] [--lines 200]

It prints, as medians over ``--repeats`` interleaved repetitions in a directory on the file
system of ``--dir`` (where runs go: the cost of an fsync is the file system's):

1. one checkpoint save of the default model (2 layers, d = 128) with its Adam state, as the
   trainer writes it (``save_checkpoint``: three files, each fsynced, and two renames);
2. appending one metrics line to a log of ``--lines`` lines and fsyncing it and the
   probes log, the trainer's addition before each checkpoint;
3. (2) as a share of (1), and the machine and file system it ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from refimpl.runs.checkpoint import save_checkpoint
from refimpl.runs.runlog import fsync_file
from refimpl.settings.warmstart_config import ModelSize


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("runs"))
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--lines", type=int, default=200)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="fsync-cost-", dir=args.dir))
    try:
        model = ModelSize().build()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        model(torch.zeros(1, 8, dtype=torch.long)).sum().backward()
        optimizer.step()  # Adam's moments exist, as in a run's checkpoint
        metrics, probes = work / "metrics.jsonl", work / "probes.jsonl"
        line = json.dumps({"step": 0, **{f"metric_{i}": 0.123456789 for i in range(60)}}) + "\n"
        metrics.write_text(line * args.lines)
        probes.write_text(line)
        saves, syncs = [], []
        for step in range(args.repeats):
            t0 = time.perf_counter()
            with open(metrics, "a") as f:
                f.write(line)
                f.flush()
            fsync_file(metrics)
            fsync_file(probes)
            t1 = time.perf_counter()
            save_checkpoint(work / "checkpoint", model, optimizer, {"step": step})
            t2 = time.perf_counter()
            syncs.append(t1 - t0)
            saves.append(t2 - t1)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    save, sync = statistics.median(saves), statistics.median(syncs)
    print(f"checkpoint save (median of {args.repeats}): {save * 1e3:.2f} ms")
    print(f"log append + fsync of both logs (median of {args.repeats}): {sync * 1e3:.3f} ms")
    print(f"added to each checkpoint: {100 * sync / save:.1f} %")
    print(
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}; "
        f"directory {args.dir.resolve()}"
    )


if __name__ == "__main__":
    main()
