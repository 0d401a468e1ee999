"""The split of the figures: run/compare figures in ``refimpl.plots``, notebook helpers in
``refimpl.nbplots`` (still reachable as ``plots.<name>``), colours from the registry."""

from __future__ import annotations

import pytest

from refimpl import algorithms, nbplots, plots, runlog


def test_every_algorithm_has_its_own_colour():
    """A colour per name of ``NAMES``, all different, taken by position from the palette (so
    a name added to the registry gets the next colour without touching plots.py)."""
    assert list(plots.ALGO_COLORS) == list(algorithms.NAMES)
    assert len(set(plots.ALGO_COLORS.values())) == len(algorithms.NAMES)
    for i, name in enumerate(algorithms.NAMES):
        assert plots.ALGO_COLORS[name] == plots.PALETTE[i]
    # The figures keep the colours they had before the palette (hand-copied from git history).
    assert plots.ALGO_COLORS["grpo"] == "#1f77b4" and plots.ALGO_COLORS["tepo"] == "#d62728"


@pytest.mark.parametrize("name", plots.NOTEBOOK_HELPERS)
def test_notebook_helpers_are_found_through_plots(name):
    assert getattr(plots, name) is getattr(nbplots, name)


def test_one_metrics_reader():
    assert plots.load_metrics is runlog.read_metrics
    with pytest.raises(AttributeError):
        plots.no_such_helper  # noqa: B018
