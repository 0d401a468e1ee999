"""The docs site builds with ``mkdocs build --strict``: a broken link (also into the code, the
tests or the notebooks), a broken anchor, a page missing from the nav or a docstring that
mkdocstrings cannot render fails the test suite. ``make docs`` runs the same build into site/.

The build reads only the repository: no network (MathJax is loaded by the browser when a page
is viewed, not at build time). The build takes about 15 s of CPU on one core (20 s with the
checks), so the module is marked slow: ``make test`` runs it, ``make test-fast`` does not.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    log = result.stdout + result.stderr
    problems = [line for line in log.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert result.returncode == 0, "mkdocs build --strict failed:\n" + "\n".join(problems or [log])
    return out


def _page(site: Path, path: str) -> str:
    return (site / path / "index.html").read_text(encoding="utf-8")


def test_strict_build_renders_every_nav_page(site):
    """Every page of the nav exists in the built site (the build itself fails on a nav entry
    without a file, so this checks that the pages land where the links expect them)."""
    for path in ("", "design", "math", "algorithms", "algorithms/grpo", "spec", "api/core"):
        assert (site / path / "index.html").is_file(), path


def test_equations_are_marked_for_math_rendering(site):
    """The ``$$ … $$`` blocks of the mathematics page and the algorithm pages come out as
    arithmatex blocks (MathJax typesets them in the browser), not as literal dollar signs."""
    for path in ("math", "algorithms/grpo"):
        html = _page(site, path)
        assert html.count('class="arithmatex"') >= 2, path
        assert "$$" not in html, path


def test_notebooks_are_rendered_with_their_outputs(site):
    """Each notebook is a page that carries its committed outputs: every PNG figure the
    notebook holds appears as an inline image (no cell is executed at build time)."""
    total = 0
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        notebook = json.loads(path.read_text(encoding="utf-8"))
        figures = sum(
            "image/png" in output.get("data", {})
            for cell in notebook["cells"]
            for output in cell.get("outputs", [])
        )
        html = _page(site, f"notebooks/{path.stem}")
        assert len(re.findall(r'<img[^>]+src="data:image/png;base64,', html)) >= figures, path
        total += figures
    assert total > 0, "no committed notebook holds a figure to check"


def test_api_reference_comes_from_the_docstrings(site):
    """The API pages hold the contract's functions of every algorithm file and core's
    primitives, with their docstrings."""
    from refimpl import algorithms

    html = _page(site, "api/algorithms")
    for name in algorithms.NAMES:
        for function in ("advantages", "reference_advantages", "loss"):
            assert f'id="refimpl.algorithms.{name}.{function}"' in html, (name, function)
    core = _page(site, "api/core")
    assert 'id="refimpl.core.RolloutBatch"' in core
    assert "full-vocabulary entropy" in core  # RolloutBatch's attribute docs


def test_links_to_code_stay_inside_the_site(site):
    """A page's link to a file outside docs/ (``../refimpl/algorithms/grpo.py``) points at a
    copy inside the site, which exists."""
    html = _page(site, "algorithms/grpo")
    targets = set(re.findall(r'href="([^"#]*grpo\.py)"', html))
    assert targets, "the GRPO page links to grpo.py"
    for target in targets:
        assert (site / "algorithms" / "grpo" / target).resolve().is_file(), target
