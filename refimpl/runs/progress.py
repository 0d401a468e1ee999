"""Progress that stays readable in a log: a tqdm bar on a terminal (or in a notebook), one
plain line every 10 % or so when stderr is a file or a pipe (``make demo > log``), never the
carriage-return redraws of a bar."""

from __future__ import annotations

import sys
from typing import Any


class LineProgress:
    """The part of tqdm's interface the runs use (``update``, ``set_postfix``, ``n``,
    ``close``, a context manager), written as one line per ``every`` of the total."""

    def __init__(
        self, total: int, desc: str, *, initial: int = 0, unit: str = "step", every: float = 0.1
    ):
        self.total, self.desc, self.unit, self.n = total, desc, unit, initial
        self.step = max(1, round(total * every))
        self._next = (initial // self.step + 1) * self.step
        self._postfix: dict[str, Any] = {}
        self._shown = initial

    def update(self, n: int = 1) -> None:
        self.n += n
        if self.n >= self._next or self.n >= self.total:
            self._show()
            self._next = (self.n // self.step + 1) * self.step

    def set_postfix(self, refresh: bool = False, **values: Any) -> None:
        self._postfix = values

    def _show(self) -> None:
        if self.n == self._shown:
            return
        self._shown = self.n
        pct = 100 * self.n / self.total if self.total else 100.0
        extra = "".join(f", {k}={v}" for k, v in self._postfix.items())
        units = self.unit + ("es" if self.unit.endswith(("s", "x")) else "s")
        print(f"{self.desc}: {self.n}/{self.total} {units} ({pct:.0f} %){extra}",
              file=sys.stderr, flush=True)  # fmt: skip

    def close(self) -> None:
        self._show()

    def __enter__(self) -> LineProgress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(total: int, desc: str, *, initial: int = 0, disable: bool = False, unit: str = "step"):
    """A tqdm bar where one is drawn (a terminal, a notebook), else a ``LineProgress``."""
    from tqdm.auto import tqdm

    stderr_is_terminal = getattr(sys.stderr, "isatty", lambda: False)()
    interactive = "ipykernel" in sys.modules or stderr_is_terminal
    if disable or interactive:
        return tqdm(
            total=total,
            initial=initial,
            desc=desc,
            unit=unit,
            disable=disable,
            dynamic_ncols=True,
        )
    return LineProgress(total, desc, initial=initial, unit=unit)
