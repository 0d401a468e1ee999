"""The docs hooks without a site build (fast): the algorithm pages' Quick facts and loop are
read off the code, so changing a Config changes them; the notebook cleaning drops exactly the
widget outputs. ``tests/test_docs.py`` checks the built pages."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from refimpl import algorithms

ROOT = Path(__file__).resolve().parents[1]


def _hook(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pages = _hook("_algorithm_pages")
offline = _hook("_offline")


def _facts(name: str, cfg=None) -> dict[str, str]:
    return dict(pages.quick_facts(name, cfg))


def test_facts_follow_the_config_they_are_read_from():
    """Switching a field of the Config changes the fact: nothing is written by hand."""
    dapo = algorithms.get("dapo")
    assert _facts("dapo")["dynamic sampling"].startswith("**on**")
    off = dapo.Config(dynamic_sampling=False, overlong_shaping=False, kl_coef=0.1)
    facts = _facts("dapo", off)
    assert facts["dynamic sampling"].startswith("off")
    assert facts["overlong shaping"].startswith("off")
    assert facts["reference model π_ref"] == "**yes**: k3 KL to the frozen warm start, β = 0.1"
    tepo = algorithms.get("tepo")
    assert _facts("tepo")["current entropy H_θ"].startswith("**read**")
    assert _facts("tepo", tepo.Config(kl_mask=False))["current entropy H_θ"] == "not read"
    assert (
        "`stats=subgroup`"
        in _facts("gtpo", algorithms.get("gtpo").Config(stats="subgroup"))["its own knobs"]
    )


def test_the_loop_marks_what_differs_from_grpo():
    """GRPO's loop has no mark; DAPO's marks its filter, its shaping and its loss; a DAPO
    Config set back to GRPO's choices marks nothing."""
    assert not any(differs for _, differs in pages.loop("grpo"))
    marked = [step for step, differs in pages.loop("dapo") if differs]
    assert len(marked) == 3
    assert "dynamic sampling" in marked[0] and "R_len" in marked[1] and "token-mean" in marked[2]
    grpo = algorithms.get("grpo").Config()
    as_grpo = algorithms.get("dapo").Config(
        **{f.name: getattr(grpo, f.name) for f in dataclasses.fields(grpo)}
    )
    assert not any(differs for _, differs in pages.loop("dapo", as_grpo))
    tepo = [step for step, differs in pages.loop("tepo") if differs]
    assert len(tepo) == 1 and "M[i,t] = 1[A_i > 0]" in tepo[0]  # TEPO's mask


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_probes_agree_with_what_each_file_reads(name):
    """The probes call the algorithm: only GTPO's advantages vary within a completion; GTPO's
    and GRPO-S's advantages read the rollout entropy (their shaping), TEPO's and forking
    tokens' losses do (the KL mask, the token selection); no other algorithm reads it."""
    probe = pages.probes(name)
    assert probe["token_credit"] == (name == "gtpo")
    assert probe["advantage_reads_entropy"] == (name in ("gtpo", "grpo_s"))
    assert probe["loss_reads_entropy"] == (name in ("tepo", "forking_tokens"))
    assert pages.render(name).startswith('!!! info "Quick facts"')


def test_a_page_without_the_marker_is_a_warning(caplog):
    """A missing marker, or an algorithm page for a name outside NAMES, warns, so
    ``mkdocs build --strict`` fails on it; the marker is replaced once."""

    def page(uri: str):
        return SimpleNamespace(file=SimpleNamespace(src_uri=uri))

    with caplog.at_level(logging.WARNING):
        assert pages.on_page_markdown("# GRPO\n", page("algorithms/grpo.md"), {}, None)
        assert pages.on_page_markdown("# PPO\n", page("algorithms/ppo.md"), {}, None)
    assert len(caplog.records) == 2
    out = pages.on_page_markdown(f"# GRPO\n\n{pages.MARKER}\n", page("algorithms/grpo.md"), {}, 0)
    assert pages.MARKER not in out and "Quick facts" in out and "The loop" in out


def test_notebook_cleaning_drops_widget_outputs_and_state_only():
    notebook = {
        "metadata": {"widgets": {"state": {}}, "kernelspec": {"name": "python3"}},
        "cells": [
            {"cell_type": "markdown", "source": ["text"]},
            {
                "cell_type": "code",
                "outputs": [
                    {"output_type": "stream", "text": ["loaded\n"]},
                    {
                        "output_type": "display_data",
                        "data": {offline.WIDGET_MIME: {"model_id": "x"}, "text/plain": ["0%"]},
                    },
                    {"output_type": "display_data", "data": {"image/png": "iVBOR"}},
                ],
            },
        ],
    }
    cleaned = offline.clean_notebook(notebook)
    assert cleaned["metadata"] == {"kernelspec": {"name": "python3"}}
    assert [o["output_type"] for o in cleaned["cells"][1]["outputs"]] == ["stream", "display_data"]
    assert "image/png" in cleaned["cells"][1]["outputs"][1]["data"]
    assert "widgets" in notebook["metadata"]  # the input is not modified
