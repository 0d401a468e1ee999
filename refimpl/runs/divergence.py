"""Divergence: a run whose policy has become NaN or inf stops at once, with the last good
checkpoint kept.

The loss and the gradient norm are checked inside each optimizer step (``Trainer``); that
check never runs on a step whose every group was skipped (dynamic sampling found no group
with both right and wrong answers), which is exactly what a diverged policy produces: its
completions are garbage, every reward is 0, every group is skipped, and the run went on for
hours logging NaN entropies and saving NaN checkpoints. ``DivergenceGuard.check`` therefore
looks at every step's record, skipped or not, and at the weights themselves, before the step
is logged or checkpointed. A run whose every group is skipped for ``SKIPPED_STEPS_WARNING``
steps in a row is not diverged but not learning either: it warns.
"""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import torch

from refimpl.runs.checkpoint import CheckpointError, find_checkpoint, read_state

#: After this many steps in a row with every group skipped, the run warns (once per streak).
SKIPPED_STEPS_WARNING = 10


class NonFiniteLossError(RuntimeError):
    """The loss, the gradient, the weights or the entropy of a step were NaN/inf: the run
    stops, the step is not checkpointed and the last good checkpoint is kept."""


def watched(key: str) -> bool:
    """The metrics whose NaN/inf means a diverged policy (an entropy of any kind, the loss,
    the gradient norm); others may legitimately be missing or undefined."""
    return key in ("loss", "grad_norm") or key.startswith("entropy")


def non_finite_weight(model: torch.nn.Module) -> str | None:
    """The name of the first parameter holding NaN or inf, or None."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not bool(torch.isfinite(p).all()):
                return name
    return None


class DivergenceGuard:
    """Checks each step of a ``Trainer``'s run in ``run_dir``, trained at the learning rate
    ``lr`` (``check``): stops a diverged run, warns about one that skips every group for
    ``SKIPPED_STEPS_WARNING`` steps in a row."""

    def __init__(self, run_dir: Path, *, lr: float):
        self.run_dir, self.lr = Path(run_dir), lr
        self.skipped_in_a_row = 0

    def check(self, metrics: dict[str, Any], model: torch.nn.Module) -> None:
        """Raise ``NonFiniteLossError`` naming the step (``metrics["step"]``) when its record
        or the weights of ``model`` after it are not finite; call it before the step is logged
        or checkpointed."""
        step = metrics["step"]
        bad = sorted(
            k
            for k, v in metrics.items()
            if watched(k) and isinstance(v, float) and not math.isfinite(v)
        )
        weight = non_finite_weight(model)
        if bad or weight is not None:
            what = f"{bad[0]} = {metrics[bad[0]]}" if bad else f"the weight {weight}"
            skipped = " (every group skipped)" if metrics.get("skipped") else ""
            raise NonFiniteLossError(
                f"step {step}{skipped}: the policy diverged, {what} is not finite; most likely "
                f"the learning rate is too high (--lr {self.lr:g}); {self.kept()}"
            )
        self.skipped_in_a_row = self.skipped_in_a_row + 1 if metrics.get("skipped") else 0
        if self.skipped_in_a_row == SKIPPED_STEPS_WARNING:
            warnings.warn(
                f"step {step}: every group was skipped in the last {SKIPPED_STEPS_WARNING} "
                "steps in a row (each group's completions all got the same reward): the run "
                "is not learning; the task may be too easy or too hard for the base model "
                "(see --task-args), or --resample-rounds too low",
                stacklevel=2,
            )

    def kept(self) -> str:
        """Which checkpoint the stopped run keeps."""
        run_dir = self.run_dir
        checkpoint = find_checkpoint(run_dir / "checkpoint", warn=False)
        if checkpoint is None:
            return f"nothing was checkpointed ({run_dir} holds no checkpoint yet)"
        try:
            at = f" (step {read_state(checkpoint)['step']})"
        except (CheckpointError, KeyError):
            at = ""
        return f"no checkpoint was written for it: the last good one{at} in {checkpoint} is kept"
