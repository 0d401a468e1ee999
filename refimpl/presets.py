"""Named training regimes: the settings that make one phenomenon visible, as one word.

    refimpl compare --preset onpolicy --algos grpo,tepo     # every ratio is 1: nothing clips
    refimpl compare --preset collapse --seeds 0,1,2         # long horizon: entropy collapses

A preset changes fields of ``TrainConfig`` (``train``) and of the comparison (algorithms,
seeds). It applies only to fields still at their default, so an explicit flag wins:
``--preset collapse --train.steps 100`` runs the collapse regime for 100 steps. (A flag set to
exactly its default value cannot be told apart from no flag, and the preset's value is used.)

``default`` is ``TrainConfig``'s own defaults: the regime where every mechanism acts, chosen
by ``scripts/regime_sweep.py`` (docs/benchmarks.md has the sweep). The others are written out
below with the reason for each value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal


@dataclass(frozen=True)
class Preset:
    """A named regime: its purpose, and the fields it sets."""

    description: str
    train: dict[str, Any] = field(default_factory=dict)
    """TrainConfig fields"""
    compare: dict[str, Any] = field(default_factory=dict)
    """comparison fields (algos, seeds)"""
    bench: dict[str, Any] = field(default_factory=dict)
    """learning-benchmark fields (tasks, algos, seeds, ablations, budget_steps, ...)"""


PRESETS: dict[str, Preset] = {
    "default": Preset("TrainConfig's defaults: several optimizer steps per rollout"),
    "onpolicy": Preset(
        "the first wave's regime: one optimizer step per rollout, so the loss always runs at "
        "θ = θ_old, every ratio is 1 and no clip or mask can act (for comparison)",
        train=dict(prompts_per_step=16, minibatches=1, ppo_epochs=1, lr=5e-5),
    ),
    "collapse": Preset(
        "the default regime on countdown (many right answers) for a long horizon: GRPO's "
        "entropy falls below half its start and pass@16 below its start; are the "
        "entropy-aware methods any different?",
        # diag_every: the entropy change's attribution to token classes every 10 steps, for
        # notebook 03's attribution over training (about +10 % of a run's time)
        train=dict(task="countdown", steps=200, diag_every=10),
        compare=dict(algos="grpo,dapo,gspo,gtpo,grpo_s,tepo", seeds="0,1,2"),
        bench=dict(
            tasks="countdown",
            algos="grpo,dapo,gspo,gtpo,grpo_s,tepo",
            seeds="0,1,2",
            ablations="",
            ablation_tasks="countdown",
            budget_steps=200,
            eval_every=50,
        ),
    ),
}


def fill_defaults(obj: Any, values: dict[str, Any]) -> Any:
    """``obj`` (a dataclass instance) with ``values`` set on the fields that still hold their
    class default; a field the caller changed keeps its value."""
    defaults = type(obj)()
    unknown = set(values) - {f.name for f in dataclasses.fields(obj)}
    if unknown:
        raise ValueError(f"preset: {type(obj).__name__} has no field(s) {sorted(unknown)}")
    keep = {k: v for k, v in values.items() if getattr(obj, k) == getattr(defaults, k)}
    return dataclasses.replace(obj, **keep)


def get(name: str) -> Preset:
    """The preset called ``name``; a ValueError lists the valid names."""
    if name not in PRESETS:
        raise ValueError(f"--preset: expected one of {', '.join(PRESETS)}, got {name!r}")
    return PRESETS[name]


#: The preset names as a type, so that ``--preset`` lists its choices in ``--help``.
PresetName = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
