"""Ctrl-C (or SIGTERM) during a run: stop after the step in progress, with a checkpoint."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from pathlib import Path
from typing import Any


class Interrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM) stopped a run after a whole step and its checkpoint."""

    def __init__(self, message: str = "interrupted", signum: int = signal.SIGINT):
        super().__init__(message)  # message first, signum with a default: picklable, so a
        self.signum = signum  # compare worker can raise it in the parent process


class StopRequest:
    """The first SIGINT/SIGTERM becomes a request to stop after the current step (the loop
    then writes a checkpoint); a second one raises ``KeyboardInterrupt`` at once. Signal
    handlers can only be set in the main thread; elsewhere Ctrl-C behaves as usual."""

    SIGNALS = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM") if hasattr(signal, n))

    def __init__(self) -> None:
        self.requested: int | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                if signal.getsignal(sig) is signal.SIG_IGN:
                    continue  # started immune to it (e.g. `cmd &` in a script): stay so
                try:
                    self._previous[sig] = signal.signal(sig, self._handle)
                except (ValueError, OSError):
                    pass
        return self

    def asked(self) -> bool:
        """Whether a stop was asked: the loop ends after the step in progress, and the
        oracle's sampling of a step's values (``monte_carlo_values.StopFn``) at once."""
        return self.requested is not None

    def _handle(self, signum, frame) -> None:
        if self.requested is not None:
            self._restore()
            raise KeyboardInterrupt
        self.requested = signum
        # os.write, not print: a handler may run while tqdm is writing to stderr.
        os.write(
            2,
            b"\nrefimpl: stopping after this step to write a checkpoint (a step's "
            b"Monte-Carlo values stop at once; Ctrl-C again stops at once, keeping the last "
            b"checkpoint)\n",
        )

    def _restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        self._previous.clear()

    def __exit__(self, *exc) -> None:
        self._restore()


def report_interrupt(run_dir: Path, runs_dir: Path, name: str | None, step: int, signum: int):
    """After Ctrl-C stopped a run at ``step`` (its checkpoint written): print where it stopped
    and the command that continues it, and raise ``Interrupted`` saying the same."""
    resume = (
        f"refimpl train --resume --runs-dir {shlex.quote(str(runs_dir))} "
        f"--name {shlex.quote(name or Path(run_dir).name)}"
    )
    if step > 0:
        where = f"checkpoint of step {step} written to {Path(run_dir) / 'checkpoint'}"
    else:
        where = "stopped before the first step (nothing to checkpoint)"
    print(
        f"refimpl: interrupted: {where}\nrefimpl: continue with: {resume}",
        file=sys.stderr,
        flush=True,
    )
    raise Interrupted(f"interrupted at step {step}; continue with: {resume}", signum)
