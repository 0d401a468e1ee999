"""Whether a run directory holds a finished run: what its ``config.json`` planned (``steps``,
``max_sampled_tokens``) against what its ``metrics.jsonl`` logged. A figure or table drawn
from several runs reads :func:`complete_runs` first, so that an interrupted run is never shown
as if it had finished (the notebooks do)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from refimpl.runs.runlog import read_metrics, read_run_config


class RunBudget(NamedTuple):
    """How long a run goes: ``steps``, or until it has sampled ``max_sampled_tokens``
    completion tokens when that is set, whichever comes first (``--steps``,
    ``--max-sampled-tokens``). The one rule the Trainer stops on, and a log is read by."""

    steps: int
    max_sampled_tokens: int | None = None

    def spent(self, step: int, sampled_tokens: int) -> bool:
        """Whether a run that has done ``step`` steps and sampled ``sampled_tokens`` tokens
        has spent its budget."""
        budget = self.max_sampled_tokens
        return step >= self.steps or (budget is not None and sampled_tokens >= budget)


def run_status(run_dir: Path | str) -> dict[str, Any]:
    """What a run planned (``config.json``: ``steps``, ``max_sampled_tokens``) against what it
    logged (the last record of ``metrics.jsonl``): ``complete`` is the trainer's own end
    condition (``RunBudget.spent``: the step budget, or the sampled-token budget when one is
    set, is spent) with the final evaluation logged. ``label`` says it in words, e.g.
    ``"partial: step 29 of 200, 81,000 of 400,000 sampled tokens"``."""
    run_dir = Path(run_dir)
    try:
        tc = read_run_config(run_dir)["train_config"]
        records = read_metrics(run_dir, missing_ok=True)
    except (OSError, ValueError) as err:
        return {
            "run_dir": run_dir,
            "complete": False,
            "step": 0,
            "steps": None,
            "sampled_tokens": 0,
            "max_sampled_tokens": None,
            "label": f"unreadable: {err}",
        }
    steps, budget = int(tc["steps"]), tc.get("max_sampled_tokens")
    last = records[-1] if records else {}
    step, tokens = int(last.get("step", 0)), int(last.get("sampled_tokens", 0))
    spent = RunBudget(steps, None if budget is None else int(budget)).spent(step, tokens)
    evaluated = any(k.startswith("heldout_") for k in last)
    complete = bool(records) and spent and evaluated
    plan = f"step {step} of {steps}"
    if budget is not None:
        plan += f", {tokens:,} of {int(budget):,} sampled tokens"
    if complete:
        label = f"complete: {plan}"
    elif spent:
        label = f"partial: {plan}, without its final evaluation"
    else:
        label = f"partial: {plan}"
    return {
        "run_dir": run_dir,
        "complete": complete,
        "step": step,
        "steps": steps,
        "sampled_tokens": tokens,
        "max_sampled_tokens": budget,
        "label": label,
    }


def complete_runs(run_dirs: Sequence[Path | str]) -> tuple[list[Path], list[dict[str, Any]]]:
    """``(complete, refused)``: the run directories whose run finished, and the
    :func:`run_status` of every other one (missing, interrupted, or without its final
    evaluation), for the caller to print. A figure drawn from ``complete`` never shows a
    truncated run as if it had finished."""
    done, refused = [], []
    for d in run_dirs:
        status = run_status(d)
        (done.append(Path(d)) if status["complete"] else refused.append(status))
    return done, refused
