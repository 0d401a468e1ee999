"""``FIELD=VALUE`` overrides from the command line, typed by the annotations of the fields
they set.

Used for ``--algo-args`` (an algorithm's ``Config`` fields) and ``--task-args`` (a task's
knobs), whose sets of fields depend on the chosen algorithm or task and so cannot be
ordinary flags. A value is parsed as its field's annotation says
(``refimpl.types.typecheck``'s ``type_options``: ``float | None`` takes ``none``); the range
is the ``Config``'s or the task's own check.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import tyro

from refimpl.types import typecheck

#: A list of KEY=VALUE flags (``--algo-args``, ``--task-args``); its help says "(default: none)"
#: where tyro would print an empty "(default: )".
KeyValues = Annotated[tuple[str, ...], tyro.conf.arg(help_behavior_hint="(default: none)")]


def parse_value(raw: str, hint: Any) -> Any:
    """``raw`` as the annotation ``hint`` reads it: ``true``/``false``/``1``/``0`` for a bool,
    an int, a float, ``none`` for None where allowed, a ``Path``; anything else (a string, a
    choice) as written. ``ValueError`` when it is not one."""
    options, optional = typecheck.type_options(hint)
    if optional and raw.lower() == "none":
        return None
    kind = options[0] if len(options) == 1 else None
    if kind is bool:
        if raw.lower() not in ("true", "false", "1", "0"):
            raise ValueError(raw)
        return raw.lower() in ("true", "1")
    if kind in (int, float, Path):
        return kind(raw)  # type: ignore[operator]
    return raw


def parse_overrides(
    pairs: tuple[str, ...] | list[str], hints: dict[str, Any], flag: str
) -> dict[str, Any]:
    """``("alpha_2=0.2", ...)`` → ``{"alpha_2": 0.2}``, each value parsed as its field's
    annotation in ``hints`` (``{field: annotation}``) says; ``ValueError`` naming ``flag``."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"{flag}: expected FIELD=VALUE, got {pair!r}")
        key, raw = (s.strip() for s in pair.split("=", 1))
        key = key.replace("-", "_")
        if key not in hints:
            raise ValueError(
                f"{flag}: unknown field {key!r}; valid fields: {', '.join(sorted(hints))}"
            )
        if key in given:  # the last one would win silently: a typo, or a forgotten earlier value
            raise ValueError(
                f"{flag}: {key} is given twice ({given[key]!r} and {pair!r}); keep one"
            )
        given[key] = pair
        try:
            out[key] = parse_value(raw, hints[key])
        except ValueError:
            options, _ = typecheck.type_options(hints[key])
            name = getattr(options[0], "__name__", "value")
            raise ValueError(f"{flag}: {key}={raw!r} is not a valid {name}") from None
    return out
