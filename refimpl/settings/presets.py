"""Named training regimes: the settings that make one phenomenon visible, as one word.

    refimpl compare --preset onpolicy --algos grpo,tepo     # every ratio is 1: nothing clips
    refimpl compare --preset collapse --seeds 0,1,2         # long horizon: entropy collapses

A preset changes fields of ``TrainConfig`` (``train``) and of the comparison (algorithms,
seeds). It never overrides a flag you typed: ``--preset collapse --train.steps 100`` runs the
collapse regime for 100 steps, and ``--preset collapse --train.task chain --seeds 0`` runs it
on chain with seed 0, although those are the defaults. The command line says which flags
were typed (``explicit_fields``); called from Python without that list, a field counts as set
when it differs from its default.

``default`` is ``TrainConfig``'s own defaults: the regime where every mechanism acts, chosen
by ``scripts/experiments/regime/sweep.py`` (docs/benchmarks.md has the sweep). The others are written out
below with the reason for each value.
"""

from __future__ import annotations

import dataclasses
import typing
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
    "default": Preset(
        "TrainConfig's defaults: several optimizer steps per rollout",
        # The learning benchmark's ablations: GTPO without its entropy term and with subgroup
        # statistics, TEPO without its KL mask and on one minibatch.
        bench=dict(
            ablations="gtpo alpha_2=0.0,gtpo stats=subgroup,tepo kl_mask=False,tepo minibatches=1"
        ),
    ),
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
    "longchain": Preset(
        "chain with 10 to 12 operators (completions of 30 to 50 tokens): long enough that which "
        "token of a completion gets the credit can matter; the warm start is the first 1,800 "
        "steps of a 2,400-step run on the 1-to-12-operator mix, on a 96-position model "
        "(docs/credit.md has the calibration: the full run solves 91 % greedily, past RL's "
        "working band)",
        # The default regime's 64 prompts × G = 8 in 4 minibatches: with 16 prompts GRPO did
        # not move held-out success in 150 steps; larger learning rates collapse it (docs/credit.md,
        # "The long-chain regime": scripts/experiments/credit/credit_study.py).
        train=dict(
            task="chain",
            task_args=("num_ops=12", "min_ops=10"),
            steps=100,
            eval_every=20,
            warmstart={"steps": 1800, "schedule_steps": 2400, "model": {"block_size": 96}},
        ),
        compare=dict(algos="grpo,dapo,gtpo,grpo_s,tepo,forking_tokens", seeds="0,1,2,3,4"),
        bench=dict(
            tasks="chain",
            algos="grpo,dapo,gtpo,grpo_s,tepo,forking_tokens",
            seeds="0,1,2,3,4",
            ablations="gtpo alpha_2=0.0",
            ablation_tasks="chain",
            budget_steps=100,
            eval_every=20,
        ),
    ),
}


def explicit_fields(argv: list[str], cls: type) -> frozenset[str]:
    """The fields of the dataclass ``cls`` that the command line ``argv`` sets, as dotted
    names: ``--train.steps 5`` → ``train.steps``, ``--train.no-plot`` → ``train.plot``,
    ``--seeds=0`` → ``seeds``. Tokens that name no field (values, unknown flags) are ignored."""

    def known(dotted: str) -> bool:
        kind: Any = cls
        for part in dotted.split("."):
            hints = typing.get_type_hints(kind) if dataclasses.is_dataclass(kind) else {}
            if part not in hints:
                return False
            kind = hints[part]
        return True

    found = set()
    for token in argv:
        if not token.startswith("--") or token == "--":
            continue
        name = token[2:].split("=", 1)[0].replace("-", "_")
        head, _, last = name.rpartition(".")
        negated = (head + "." if head else "") + last.removeprefix("no_")
        if known(name):
            found.add(name)
        elif last.startswith("no_") and known(negated):
            found.add(negated)
    return frozenset(found)


def fill_defaults(
    obj: Any, values: dict[str, Any], explicit: frozenset[str] | None = None, prefix: str = ""
) -> Any:
    """``obj`` (a dataclass instance) with ``values`` set on the fields the caller did not
    set: those not in ``explicit`` (dotted names, ``prefix`` + field, from
    ``explicit_fields``), or, when ``explicit`` is None, those still at their class default.
    A dict value for a dataclass field (``warmstart={"steps": 2400}``) fills that field's own
    fields the same way, so ``--train.warmstart.steps 100`` typed beside the preset wins."""
    defaults = type(obj)()
    unknown = set(values) - {f.name for f in dataclasses.fields(obj)}
    if unknown:
        raise ValueError(f"preset: {type(obj).__name__} has no field(s) {sorted(unknown)}")
    keep = {}
    for k, v in values.items():
        current = getattr(obj, k)
        if isinstance(v, dict) and dataclasses.is_dataclass(current):
            keep[k] = fill_defaults(current, v, explicit, prefix + k + ".")
        elif explicit is None and current == getattr(defaults, k):
            keep[k] = v
        elif explicit is not None and prefix + k not in explicit:
            keep[k] = v
    return dataclasses.replace(obj, **keep)


def get_preset(name: str) -> Preset:
    """The preset called ``name``; a ValueError lists the valid names."""
    if name not in PRESETS:
        raise ValueError(f"--preset: expected one of {', '.join(PRESETS)}, got {name!r}")
    return PRESETS[name]


#: The preset names as a type, so that ``--preset`` lists its choices in ``--help``.
PresetName = Literal[tuple(PRESETS)]  # type: ignore[valid-type]
