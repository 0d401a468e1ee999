"""How a setting is named: its flag (``--warmstart.model.n-layer``), and a nested record of
settings as the dotted names its flags spell (``{"warmstart": {"steps": 5}}`` →
``warmstart.steps``). The settings, run management and the warm start name a setting in their
messages the same way; and which settings a resumed run may change, by name (its flags
are checked against them, and its checkpoint is). Nothing of ours is imported.
"""

from __future__ import annotations

from typing import Any


def flag(name: str, prefix: str = "--") -> str:
    """The flag of the setting ``name`` (a field, or a dotted path of fields)."""
    return prefix + name.replace("_", "-")


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested record as dotted keys: ``{"warmstart": {"steps": 5}}`` → ``{"warmstart.steps": 5}``."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[prefix + k] = v
    return out


#: The settings a resumed run may change (dotted field names): how long it goes and how it is
#: watched, never what a step computes. Any other difference from the run's config.json is an
#: error naming the flag. The warm-start fields here are those outside its cache key.
RESUME_MAY_CHANGE = frozenset(
    {
        "steps",  # extend the run (not below the step it has reached)
        "max_sampled_tokens",  # extend or set the token budget
        "checkpoint_every",
        "progress",
        "plot",
        "tensorboard",
        "threads",
        "device",
        "runs_dir",  # where the run is now
        "name",
        "resume",
        "overwrite",
        "fresh_optimizer",
        "config",
        "warmstart.runs_dir",
        "warmstart.threads",
        "warmstart.progress",
        "warmstart.force",
        "warmstart.eval_problems",
    }
)
#: Of those, the settings config.json records when a resumed run changes them (they say how
#: long the run is, so that a later --resume or --config gets them back).
RESUME_RECORDED = ("steps", "max_sampled_tokens")


def may_differ(key: str) -> bool:
    """Whether a resumed run may change the dotted setting ``key`` (``RESUME_MAY_CHANGE``;
    warmstart.task/task_args: the trainer uses --task/--task-args)."""
    return key in RESUME_MAY_CHANGE or key.startswith("warmstart.task")
