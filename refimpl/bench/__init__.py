"""Benchmarks: ``refimpl bench-learning`` and ``refimpl bench-speed`` (``docs/benchmarks.md``).

* :mod:`refimpl.bench.learning` — does token-level credit assignment help? Every algorithm ×
  seeds × tasks from one warm start per task, each run stopped at the same budget of *sampled
  tokens*; per algorithm: tokens and steps to a target held-out success, final success, area
  under the success curve, end entropy and an entropy-collapse verdict, plus the ablations.
* :mod:`refimpl.bench.speed` — how fast is the reference? KV-cache sampling, one RL step
  broken down and set against a measured matmul peak, per-algorithm overhead, vectorised vs
  reference loops, and our trainer against TRL's ``GRPOTrainer`` on the GPT-2 twin.

* :mod:`refimpl.bench.credit` — ``refimpl credit``: every algorithm's token credit scored
  against the oracle's true advantages on one batch.

They are benchmarks, not tests: the ``--quick`` sizes exist so that ``tests/test_bench.py``
can check the reports are produced. They measure and judge no paper's claim: the verdicts are
read off ``results.json`` by ``scripts/experiments/learning/verdicts.py``, outside the package.
"""

from __future__ import annotations

import os
import platform
import time


def machine_info() -> dict[str, object]:
    """What the figures were measured on: CPU model, cores, load, versions, date."""
    import torch

    from refimpl.runs.cpu_kernels import cpu_name

    cpu = cpu_name()  # the model name, or "unrecorded (<architecture>)": never the arch alone
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    from refimpl.bench.result_header import UNRECORDED, current_commit

    commit = current_commit()
    commit = "" if commit == UNRECORDED else commit  # machine_info's old form: empty
    return {
        "date": time.strftime("%Y-%m-%d %H:%M %Z"),
        "cpu": cpu,
        "cores": os.cpu_count(),
        "load_1_5_15": [round(x, 2) for x in load],
        "python": platform.python_version(),
        "torch": torch.__version__,
        "commit": commit,
    }


def format_machine(info: dict[str, object]) -> str:
    load = info.get("load_1_5_15", [])
    return (
        f"{info['date']}, {info['cpu']}, {info['cores']} cores (load average "
        f"{', '.join(str(x) for x in load)}), Python {info['python']}, torch "
        f"{info['torch']}, commit {info.get('commit') or '?'}"
    )


def markdown_table(header: list[str], rows: list[list[object]]) -> str:
    """A GitHub-flavoured markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
