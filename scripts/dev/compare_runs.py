"""Are two sets of runs the same? ``python scripts/dev/compare_runs.py BEFORE AFTER``.

For every run directory in BEFORE (as ``scripts/dev/seeded_runs.sh`` writes them): its
``metrics.jsonl`` and ``probes.jsonl`` against AFTER's, line by line, keys in the same order,
values equal, timing keys (``time_*``) aside; and the SHA-256 of its last checkpoint's weights.
Prints one line per run; exits 1 when anything differs.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _untimed(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time")} for r in rows]


def _weights(run: Path) -> str:
    return hashlib.sha256((run / "checkpoint" / "model.safetensors").read_bytes()).hexdigest()


def main(before: Path, after: Path) -> int:
    differs = 0
    runs = sorted(p for p in before.iterdir() if (p / "metrics.jsonl").exists())
    for run in runs:
        other = after / run.name
        same_logs = True
        for name in ("metrics.jsonl", "probes.jsonl"):
            a, b = _lines(run / name), _lines(other / name)
            same_logs &= _untimed(a) == _untimed(b) and [list(r) for r in a] == [list(r) for r in b]
        same_weights = _weights(run) == _weights(other)
        differs += (not same_logs) + (not same_weights)
        print(
            f"{run.name:15s} metrics+probes {'identical' if same_logs else 'DIFFER'}; "
            f"weights {'identical' if same_weights else 'DIFFER'}"
        )
    print(f"{len(runs)} runs compared")
    return 1 if differs or not runs else 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
