"""What a notebook leaves in its saved outputs: progress bars that keep their final state, and
the sentence that says whether the runs a figure draws learned (notebook 05).

``refimpl.notebook_figures.notebook_size``, which every notebook calls first, installs the bars.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def bars_save_their_final_state() -> None:
    """In a Jupyter kernel, make every bar of ``tqdm.auto`` (the runs' progress bars there,
    and the libraries' that draw through it) leave its final state in the saved notebook.

    tqdm's notebook bar is a widget; the notebook file keeps, beside it, a plain-text copy of
    the bar as it was when first shown ("0/30"), and a notebook executed by ``jupyter
    nbconvert --execute`` and saved (or read on a code host, where widgets do not run) shows
    that stale copy for ever. Here the bar is shown under a display id, and when it closes its
    output is replaced by its final text ("30/30 [00:13<00:00]"): an update that JupyterLab and
    nbconvert both write into the saved output. While it runs, the bar is tqdm's widget. Outside
    a kernel (a script, a terminal) nothing changes."""
    import sys

    if "ipykernel" not in sys.modules:
        return
    import tqdm.auto
    import tqdm.notebook

    if not issubclass(tqdm.auto.tqdm, tqdm.notebook.tqdm):  # no widgets here: text bars
        return
    if getattr(tqdm.auto.tqdm, "saves_final_state", False):  # installed already
        return
    tqdm.auto.tqdm = _final_state_bar(tqdm.auto.tqdm)


def _final_state_bar(widget_bar: type) -> type:
    from IPython.display import display

    class FinalStateBar(widget_bar):
        saves_final_state = True

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            show = kwargs.pop("display", True)
            super().__init__(*args, display=False, **kwargs)
            self._handle = None
            if show and not self.disable and getattr(self, "container", None) is not None:
                self._handle = display(self.container, display_id=True)
                self.displayed = True

        def close(self) -> None:
            super().close()
            handle, self._handle = getattr(self, "_handle", None), None
            if handle is not None:
                handle.update({"text/plain": self.format_meter(**self.format_dict)}, raw=True)

    return FinalStateBar


def learning_verdict(rows: Sequence[dict[str, Any]], problems: int) -> str:
    """One sentence on whether the runs of ``rows`` (``entropy_success_table``'s) learned:
    their held-out greedy success rose by more than twice the standard error of the change
    between two evaluations on ``problems`` problems, or it did not (said plainly, with the
    numbers: a figure of runs that learned nothing must not pass for one that shows learning);
    and what their entropy did."""
    if not rows:
        return "No run to judge."
    learned, flat = [], []
    for r in rows:
        start, end = float(r["greedy_start"]), float(r["greedy_end"])
        se = float(np.sqrt((start * (1 - start) + end * (1 - end)) / problems))
        (learned if end - start > 2 * se else flat).append(f"{r['algo']} {start:.3f} → {end:.3f}")
    moved = sum(abs(float(r["entropy_end"]) - float(r["entropy_start"])) > 1e-3 for r in rows)
    entropy = (
        f"mean token entropy moved in {moved} of {len(rows)} runs"
        if moved
        else "mean token entropy did not move in any run ("
        + ", ".join(f"{r['entropy_start']:.3f} → {r['entropy_end']:.3f}" for r in rows[:3])
        + ("…" if len(rows) > 3 else "")
        + ")"
    )
    if not learned:
        return (
            f"**These runs did not learn**: held-out greedy success ({', '.join(flat)}) rose by "
            f"no more than twice its standard error on {problems} problems in any run, and "
            f"{entropy}; the curves show no learning."
        )
    text = f"Held-out greedy success rose beyond twice its standard error in {len(learned)} of "
    text += f"{len(rows)} runs ({', '.join(learned)})"
    text += f"; not in {', '.join(flat)}" if flat else ""
    return text + f"; {entropy}."
