"""The docs generators and hooks without a site build (fast): the algorithm pages' Quick facts
and loop are read off the code, so changing a Config changes them, and every page's generated
block is what the code generates now; the notebook cleaning drops exactly the widget outputs.
``tests/test_docs.py`` checks the built pages."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest

from refimpl import algorithms

ROOT = Path(__file__).resolve().parents[1]


def _hook(name: str):
    spec = importlib.util.spec_from_file_location(f"docs_{name}", ROOT / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


pages = _hook("_algorithm_blocks")
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


def _as_grpo(name: str):
    """Algorithm ``name``'s Config with every field GRPO's Config has set to GRPO's value."""
    grpo = algorithms.get("grpo").Config()
    return algorithms.get(name).Config(
        **{f.name: getattr(grpo, f.name) for f in dataclasses.fields(grpo)}
    )


def _marked(name: str, cfg=None) -> list[str]:
    return [step for step, differs in pages.loop(name, cfg) if differs]


def test_the_loop_marks_what_differs_from_grpo():
    """GRPO's loop has no mark; DAPO's marks its filter, its shaping and its loss (other
    numbers on the probe batch, and token-mean); a DAPO Config set back to GRPO's choices marks
    nothing (DAPO's code computes GRPO's numbers then); RLOO marks its advantage and its loss;
    TEPO its loss only (its advantages are GRPO's z-score)."""
    assert _marked("grpo") == []
    marked = _marked("dapo")
    assert len(marked) == 3
    assert "dynamic sampling" in marked[0] and "R_len" in marked[1] and "token-mean" in marked[2]
    assert _marked("dapo", _as_grpo("dapo")) == []
    assert [step.split(" ←")[0].strip() for step in _marked("rloo")] == ["A", "L"]
    assert [step.split(" ←")[0].strip() for step in _marked("tepo")] == ["L"]


def test_the_marks_of_advantage_and_loss_come_from_the_code(monkeypatch):
    """The advantage and loss steps read the same on every page; their marks come from calling
    the code on the probe batch. A Config-only copy of GRPO (DAPO set to GRPO's choices) is
    marked nowhere; give it other advantages and its advantage step is marked, and only it;
    give it a loss of the same value and another gradient (what Clip-Cov does) and its loss
    step is marked, and only it."""
    dapo, grpo = algorithms.get("dapo"), algorithms.get("grpo")
    cfg = _as_grpo("dapo")
    assert pages.differs_from_grpo("dapo", cfg) == {"advantage": False, "loss": False}
    legend = pages._legend("dapo", "DAPO", pages.loop("dapo", cfg))
    assert legend.startswith("No line is marked: these are GRPO's steps"), legend
    with monkeypatch.context() as patch:
        patch.setattr(dapo, "advantages", lambda b, c: 2 * grpo.advantages(b, grpo.Config()))
        assert [step.split(" ←")[0].strip() for step in _marked("dapo", cfg)] == ["A"]
    loss = dapo.loss

    def same_value_other_gradient(batch, logp, adv, c, entropy=None):
        value, metrics = loss(batch, logp, adv, c, entropy=entropy)
        return value + 0.1 * (logp - logp.detach()).sum(), metrics

    with monkeypatch.context() as patch:
        patch.setattr(dapo, "loss", same_value_other_gradient)
        assert [step.split(" ←")[0].strip() for step in _marked("dapo", cfg)] == ["L"]


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_the_advantage_mark_agrees_with_what_the_config_declares(name):
    """Read another way: an algorithm's advantages are GRPO's exactly when its Config declares
    GRPO's group z-score of the rewards (``advantage_std_set() == "group"``) and reads
    neither the rollout entropy nor Monte-Carlo values. In the repository that marks Dr. GRPO,
    GPG and RLOO (no std), GTPO and GRPO-S (entropy shaping) and VinePPO (values), and leaves
    the others unmarked (DAPO, GSPO, TEPO, the covariance and entropy methods, STEER)."""
    cfg = algorithms.get(name).Config()
    own = (
        cfg.advantage_std_set() != "group"
        or cfg.reads_rollout_entropy()
        or cfg.values_needed() is not None
    )
    assert pages.differs_from_grpo(name)["advantage"] == own


def test_no_algorithm_math_is_restated_in_the_generator():
    """Issue 60, "each idea once": an algorithm's equations are written in its docstring, and
    the page generator holds no second copy. ``docs/_algorithm_blocks.py`` names no algorithm
    but GRPO (the baseline of the marks) and holds no table keyed by algorithm names, and its
    loop's advantage and loss steps are one text for every algorithm, up to the line read off
    the Config (aggregation, clip, KL)."""
    import ast

    source = (ROOT / "docs" / "_algorithm_blocks.py").read_text(encoding="utf-8")
    named = {
        node.value
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and node.value in algorithms.NAMES
    }
    assert named <= {"grpo"}, f"docs/_algorithm_blocks.py names {sorted(named - {'grpo'})}"
    for attribute, value in vars(pages).items():
        if isinstance(value, dict):
            assert not set(value) & set(algorithms.NAMES), f"{attribute} is keyed by algorithms"
    shown = set()
    for name in algorithms.NAMES:
        cfg = algorithms.get(name).Config()
        steps = {kind: text for text, kind in pages._loop_steps(cfg)}
        shown.add((steps["advantage"], steps["loss"].split("\n")[0]))
    assert len(shown) == 1, shown


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_probes_agree_with_what_each_file_reads(name):
    """The probes call the algorithm: only GTPO's and VinePPO's (its steps' Monte-Carlo
    values) advantages vary within a completion; GTPO's
    and GRPO-S's advantages read the rollout entropy (their shaping), TEPO's, forking tokens'
    and STEER's losses do (the KL mask, the token selection, Ω's H_old); no other algorithm
    reads it."""
    probe = pages.probes(name)
    assert probe["token_credit"] == (name in ("gtpo", "vineppo"))
    assert probe["advantage_reads_entropy"] == (name in ("gtpo", "grpo_s"))
    assert probe["loss_reads_entropy"] == (name in ("tepo", "forking_tokens", "steer"))
    block = pages.render(name)
    assert block.startswith(pages.MARKER) and block.endswith(pages.END)
    assert block.index("**Quick facts**") < block.index("**The loop**")


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_generated_block_is_current(name):
    """``docs/algorithms/<name>.md`` holds the Quick facts and the loop its code generates now
    (regenerated here in memory): a block edited by hand, or left behind by a change of the
    Config or of its code, fails, as does a new page with the bare marker only."""
    path = ROOT / "docs" / "algorithms" / f"{name}.md"
    text = path.read_text(encoding="utf-8")
    fix = f"run `.venv/bin/{pages.COMMAND}` and commit the page"
    assert pages.update(text, name) == text, f"docs/algorithms/{name}.md is stale: {fix}"


def _copy_pages(tmp_path: Path) -> Path:
    for page in (ROOT / "docs" / "algorithms").glob("*.md"):
        (tmp_path / page.name).write_text(page.read_text(encoding="utf-8"), encoding="utf-8")
    return tmp_path


def test_the_staleness_check_sees_a_hand_edit_and_a_code_change(tmp_path, monkeypatch):
    """The check that ``test_generated_block_is_current`` makes can fail: a fact edited by
    hand, a changed Config default and a change of an algorithm's code that changes a mark
    each make the page stale, and rewriting the blocks makes it current again."""
    pages_dir = _copy_pages(tmp_path)
    assert pages.stale(pages_dir) == []
    dapo = pages_dir / "dapo.md"
    text = dapo.read_text(encoding="utf-8")
    dapo.write_text(text.replace("1 + 0.28)", "1 + 0.3)", 1), encoding="utf-8")  # by hand
    assert pages.stale(pages_dir) == ["docs/algorithms/dapo.md: its generated block is stale"]
    assert pages.write(pages_dir) == ["docs/algorithms/dapo.md"]
    assert dapo.read_text(encoding="utf-8") == text and pages.stale(pages_dir) == []

    module = algorithms.get("gtpo")

    @dataclasses.dataclass(frozen=True)
    class Config(module.Config):
        alpha_2: float = 0.2  # the code changed, the page did not

    with monkeypatch.context() as patch:
        patch.setattr(module, "Config", Config)
        assert pages.stale(pages_dir) == ["docs/algorithms/gtpo.md: its generated block is stale"]
    with monkeypatch.context() as patch:  # DAPO's advantages are GRPO's: now they are not
        grpo = algorithms.get("grpo")
        patch.setattr(
            algorithms.get("dapo"), "advantages", lambda b, c: -grpo.advantages(b, grpo.Config())
        )
        assert pages.stale(pages_dir) == ["docs/algorithms/dapo.md: its generated block is stale"]


def test_a_new_page_gets_its_block_under_the_bare_marker(tmp_path):
    """A page with only the marker (a new algorithm's) is stale until the blocks are written;
    writing puts the block under the title and keeps the rest of the page; a page without the
    marker is an error naming it, and nothing is written."""
    pages_dir = _copy_pages(tmp_path)
    page = pages_dir / "rloo.md"
    rest = page.read_text(encoding="utf-8").split(pages.END, 1)[1]
    page.write_text(f"# RLOO\n\n{pages.MARKER}{rest}", encoding="utf-8")
    assert pages.stale(pages_dir) == ["docs/algorithms/rloo.md: its generated block is stale"]
    assert pages.write(pages_dir) == ["docs/algorithms/rloo.md"]
    assert page.read_text(encoding="utf-8") == f"# RLOO\n\n{pages.render('rloo')}{rest}"
    page.write_text(f"# RLOO\n{rest}", encoding="utf-8")
    assert pages.stale(pages_dir) == [
        f"docs/algorithms/rloo.md: no {pages.MARKER} line (put it under the title)"
    ]
    with pytest.raises(ValueError, match="rloo.md: no"):
        pages.write(pages_dir)


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_equations_block_is_the_docstrings_section_verbatim(name):
    """Each page's equations block holds the lines of its file's docstring section
    *Equations* (from the line after its dashes to the next section heading), dedented and in
    order, inside one text fence: written once, in the docstring, and copied, not rewritten."""
    doc = algorithms.get(name).__doc__.splitlines()
    start = next(i for i, line in enumerate(doc) if line.startswith("Equations")) + 2
    stop = next(
        (i for i in range(start, len(doc) - 1) if doc[i][:1].strip() and doc[i + 1][:3] == "---"),
        len(doc),
    )
    section = [line[4:] if line.startswith("    ") else line for line in doc[start:stop]]
    text = (ROOT / "docs" / "algorithms" / f"{name}.md").read_text(encoding="utf-8")
    block = text.split(pages.EQ_MARKER, 1)[1].split(pages.EQ_END, 1)[0]
    fenced = block.split("```text\n", 1)[1].split("\n```", 1)[0]
    assert fenced == "\n".join(section).strip("\n").rstrip()
    assert text.index(pages.END) < text.index("## Key equations") < text.index(pages.EQ_MARKER)


def test_the_staleness_check_sees_a_docstring_change(tmp_path, monkeypatch):
    """Editing an equation in an algorithm file's docstring makes its page's equations block
    stale, and only that block; rewriting the blocks brings the edit onto the page. A
    docstring without an *Equations* section, and a page without the equations marker, are
    errors that name the file."""
    pages_dir = _copy_pages(tmp_path)
    module = algorithms.get("gspo")
    edited = module.__doc__.replace("ε_high = 4e-4", "ε_high = 5e-4", 1)
    assert edited != module.__doc__
    with monkeypatch.context() as patch:
        patch.setattr(module, "__doc__", edited)
        assert pages.stale(pages_dir) == [
            "docs/algorithms/gspo.md: its equations block (from the docstring) is stale"
        ]
        assert pages.write(pages_dir) == ["docs/algorithms/gspo.md"]
        assert "ε_high = 5e-4" in (pages_dir / "gspo.md").read_text(encoding="utf-8")
        assert pages.stale(pages_dir) == []
        patch.setattr(module, "__doc__", edited.replace("Equations\n---------", "Math\n----"))
        with pytest.raises(ValueError, match=r"gspo\.py: its docstring has no 'Equations'"):
            pages.render_equations("gspo")
    assert pages.write(pages_dir) == ["docs/algorithms/gspo.md"]  # the docstring is back
    assert pages.stale(pages_dir) == []
    page = pages_dir / "dapo.md"
    page.write_text(page.read_text(encoding="utf-8").replace(pages.EQ_MARKER, ""), "utf-8")
    assert pages.stale(pages_dir) == [
        f"docs/algorithms/dapo.md: no {pages.EQ_MARKER} line (put it under '## Key equations')"
    ]


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
