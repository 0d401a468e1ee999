"""``FIELD=VALUE`` overrides from the command line, typed like the defaults they replace.

Used for ``--algo-args`` (an algorithm's ``Config`` fields) and ``--task-args`` (a task's
knobs), whose sets of fields depend on the chosen algorithm or task and so cannot be
ordinary flags.
"""

from __future__ import annotations

from typing import Any


def parse_overrides(
    pairs: tuple[str, ...] | list[str], fields_: dict[str, Any], flag: str
) -> dict[str, Any]:
    """``("alpha_2=0.2", ...)`` → ``{"alpha_2": 0.2}``, typed like the defaults in ``fields_``."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"{flag}: expected FIELD=VALUE, got {pair!r}")
        key, raw = (s.strip() for s in pair.split("=", 1))
        key = key.replace("-", "_")
        if key not in fields_:
            raise ValueError(
                f"{flag}: unknown field {key!r}; valid fields: {', '.join(sorted(fields_))}"
            )
        if key in given:  # the last one would win silently: a typo, or a forgotten earlier value
            raise ValueError(
                f"{flag}: {key} is given twice ({given[key]!r} and {pair!r}); keep one"
            )
        given[key] = pair
        default = fields_[key]
        try:
            if isinstance(default, bool):
                if raw.lower() not in ("true", "false", "1", "0"):
                    raise ValueError(raw)
                value: Any = raw.lower() in ("true", "1")
            elif isinstance(default, int):
                value = int(raw)
            elif isinstance(default, float):
                value = float(raw)
            elif default is None and raw.lower() == "none":
                value = None
            elif default is None:
                value = int(raw) if raw.lstrip("-").isdigit() else float(raw)
            else:
                value = raw
        except ValueError:
            raise ValueError(
                f"{flag}: {key}={raw!r} is not a valid {type(default).__name__}"
            ) from None
        out[key] = value
    return out
