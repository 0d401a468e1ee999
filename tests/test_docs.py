"""The docs site builds with ``mkdocs build --strict``: a broken link (also into the code, the
tests or the notebooks), a broken anchor, a page missing from the nav or a docstring that
mkdocstrings cannot render fails the test suite. ``make docs`` runs the same build into site/.

The build reads only the repository and the installed packages: no network, neither when it
builds nor when a page is viewed (MathJax is the site's own copy; no page loads a script or a
stylesheet from another host). The build takes about 15 s of CPU on one core (20 s with the
checks), so the module is marked slow, and the tests that need the built site (the ``site``
fixture) are in the second tier: ``make test-all`` runs them, ``make test`` does not.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from refimpl import algorithms, contract, core

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]

# A URL that leaves the site: scheme-relative ``//host/...`` or ``scheme://...``.
EXTERNAL = re.compile(r"^\s*(?:[a-z][a-z0-9+.-]*:)?//", re.I)
# XML namespaces in inline SVG code name a URL but load nothing.
NAMESPACE = re.compile(r"^https?://www\.w3\.org/")
QUOTED_URL = re.compile(r"""["'`]((?:https?:)?//[^"'`\s]+)""")


def _attr(tag: str, name: str) -> str | None:
    m = re.search(rf"""\b{name}\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+))""", tag, re.I)
    return next((g for g in m.groups() if g is not None), None) if m else None


def external_references(html: str) -> list[str]:
    """The scripts and stylesheets on other hosts that ``html`` loads or may load: a
    ``<script src>``, a URL written in an inline script (``import("https://...")``, a ``src``
    assigned in code), a ``<link>`` stylesheet / preload, an ``@import`` or ``url()`` in an
    inline style."""
    found = []
    for attrs, body in re.findall(r"<script\b([^>]*)>(.*?)</script>", html, re.S | re.I):
        src = _attr(attrs, "src")
        if src and EXTERNAL.match(src):
            found.append(src)
        found += [url for url in QUOTED_URL.findall(body) if not NAMESPACE.match(url)]
    for tag in re.findall(r"<link\b[^>]*>", html, re.I):
        href, rel = _attr(tag, "href"), _attr(tag, "rel") or ""
        if href and EXTERNAL.match(href) and re.search(r"stylesheet|preload|import", rel, re.I):
            found.append(href)
    for body in re.findall(r"<style\b[^>]*>(.*?)</style>", html, re.S | re.I):
        found += re.findall(r"""(?:@import\s+|url\(\s*)["']?((?:https?:)?//[^"')\s]+)""", body)
    return found


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
    for path in ("", "design", "math", "algorithms/grpo", "spec", "api/core"):
        assert (site / path / "index.html").is_file(), path


def test_equations_are_marked_for_math_rendering(site):
    """The ``$$ … $$`` blocks of the mathematics page and the inline ``$ … $`` of an
    algorithm page's prose come out as arithmatex elements (MathJax typesets them in the
    browser), not as literal dollar signs."""
    for path in ("math", "algorithms/rloo"):
        html = _page(site, path)
        assert html.count('class="arithmatex"') >= 2, path
        assert "$$" not in html, path


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_key_equations_are_the_docstrings_in_a_text_block(site, name):
    """Each algorithm page's *Key equations* section shows its file's docstring equations as
    one preformatted block, every line of them, not reflowed into a paragraph."""
    import html as html_lib

    page = _page(site, f"algorithms/{name}")
    section = page.split('id="key-equations"', 1)[1].split("<h2", 1)[0]
    blocks = re.findall(r"<pre[^>]*>(.*?)</pre>", section, re.S)
    assert len(blocks) == 1, name
    shown = html_lib.unescape(re.sub(r"<[^>]+>", "", blocks[0]))
    doc = re.split(r"^Equations.*\n-+\n", algorithms.get(name).__doc__, maxsplit=1, flags=re.M)
    for line in doc[1].splitlines()[:4]:
        assert line.strip() in shown, (name, line)


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
    """The API pages hold the contract's functions of every algorithm file, the contract's
    types and core's primitives, with their docstrings."""
    from refimpl import algorithms

    html = _page(site, "api/algorithms")
    for name in algorithms.NAMES:
        for function in ("advantages", "reference_advantages", "loss"):
            assert f'id="refimpl.algorithms.{name}.{function}"' in html, (name, function)
    contract_page = _page(site, "api/contract")
    assert 'id="refimpl.contract.RolloutBatch"' in contract_page
    assert "full-vocabulary entropy" in contract_page  # RolloutBatch's attribute docs
    assert 'id="refimpl.core.group_normalize"' in _page(site, "api/core")


def test_links_to_code_stay_inside_the_site(site):
    """A page's link to a file outside docs/ (``../refimpl/algorithms/grpo.py``) points at a
    copy inside the site, which exists."""
    html = _page(site, "algorithms/grpo")
    targets = set(re.findall(r'href="([^"#]*grpo\.py)"', html))
    assert targets, "the GRPO page links to grpo.py"
    for target in targets:
        assert (site / "algorithms" / "grpo" / target).resolve().is_file(), target


def test_the_external_reference_check_finds_what_the_old_site_loaded():
    """The checker flags each way the site once reached a CDN (MathJax's script tag, the
    notebooks' mermaid import and widget loader) and none of the local or inert URLs."""
    html = """
    <script src="https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js"></script>
    <script type="module">const m = await import("https://cdnjs.cloudflare.com/m.mjs");</script>
    <script>var widgetRendererSrc = 'https://unpkg.com/@jupyter-widgets/embed-amd.js';</script>
    <link rel="stylesheet" href="//fonts.example.org/a.css">
    <style>@import url("https://fonts.example.org/b.css");</style>
    <script src="../assets/mathjax/tex-chtml.js"></script>
    <script>el.setAttributeNS("http://www.w3.org/2000/svg", "x", 1)</script>
    <a href="https://arxiv.org/abs/2402.03300">a link is not a script</a>
    <link rel="canonical" href="https://example.org/page/">
    """
    assert external_references(html) == [
        "https://cdn.jsdelivr.net/npm/mathjax@3/es5/tex-mml-chtml.js",
        "https://cdnjs.cloudflare.com/m.mjs",
        "https://unpkg.com/@jupyter-widgets/embed-amd.js",
        "//fonts.example.org/a.css",
        "https://fonts.example.org/b.css",
    ]


def test_no_page_loads_a_script_or_stylesheet_from_another_host(site):
    """The site works offline: no built page (notebooks and API pages included) and no
    stylesheet of the site references a script or stylesheet on another host."""
    pages = sorted(site.rglob("*.html"))
    assert len(pages) > 30
    found = {
        p.relative_to(site).as_posix(): external_references(p.read_text("utf-8")) for p in pages
    }
    assert {page: urls for page, urls in found.items() if urls} == {}
    for css in site.rglob("*.css"):
        text = css.read_text("utf-8")
        imports = re.findall(r"""(?:@import\s+|url\(\s*)["']?((?:https?:)?//[^"')\s]+)""", text)
        assert imports == [], css


def _scripts(html: str) -> list[str]:
    return [
        _attr(attrs, "src") for attrs in re.findall(r"<script\b([^>]*)>", html) if "src" in attrs
    ]


def test_math_is_typeset_by_the_sites_own_mathjax_on_math_pages_only(site):
    """Every page with an equation loads the settings and then MathJax from the site itself
    (the files exist, fonts included); a page without one loads neither."""
    assert (site / "assets/mathjax/output/chtml/fonts/woff-v2/MathJax_Main-Regular.woff").is_file()
    assert (site / "assets/mathjax/LICENSE").is_file()
    with_math = set()
    for page in sorted(site.rglob("index.html")):
        html = page.read_text("utf-8")
        loaded = [src for src in _scripts(html) if "mathjax" in src.lower()]
        if 'class="arithmatex"' in html:
            with_math.add(page.parent.relative_to(site).as_posix())
            assert [Path(src).name for src in loaded] == ["mathjax.js", "tex-chtml.js"], page
            for src in loaded:
                assert (page.parent / src).resolve().is_file(), (page, src)
        else:
            assert loaded == [], page
    assert {"math", "algorithms/rloo"} <= with_math
    for plain in ("design", "notebooks/01_quickstart", "algorithms/grpo"):
        assert not [s for s in _scripts(_page(site, plain)) if "mathjax" in s.lower()], plain


def test_math_list_items_keep_their_equations(site):
    """math.md's display equations inside list items stay in their item (a ``$$`` block at
    column 0 once ended the list, so the KL bullet ran into the paragraph above it)."""
    html = _page(site, "math")
    items = re.findall(r"<li>(.*?)</li>", html, re.S)
    for words in (
        "group-relative advantage",
        "The clipped surrogate of a ratio",
        "KL penalty uses the k3 estimator",
    ):
        item = next(i for i in items if words in i)
        assert 'class="arithmatex"' in item, words
    surrogate = next(i for i in items if "The clipped surrogate of a ratio" in i)
    assert "clip\\_obj" in surrogate and "and the loss is its negative" in surrogate


def test_notebooks_render_without_widgets_and_their_tables_unwrapped(site):
    """Widget outputs (tqdm bars, empty without a widget manager) and widget state are left
    out of the pages, not out of the notebooks; printed tables keep their lines whole."""
    committed = json.loads((ROOT / "notebooks/04_token_credit_on_a_real_model.ipynb").read_text())
    assert "widgets" in committed["metadata"]  # the notebook itself still has them
    for name in ("03_entropy_dynamics", "04_token_credit_on_a_real_model"):
        html = _page(site, f"notebooks/{name}")
        for gone in ("widget-state+json", "widget-view+json", "widgetRendererSrc"):
            assert gone not in html, (name, gone)
        assert "stylesheets/extra.css" in html
    css = (site / "stylesheets/extra.css").read_text("utf-8")
    rule = re.search(r"\.md-typeset \.jupyter-wrapper \.jp-OutputArea-output pre \{([^}]*)\}", css)
    assert rule and "white-space: pre;" in rule.group(1) and "overflow-x: auto" in rule.group(1)


def test_notebook_links_to_docs_pages_resolve(site):
    """A notebook's code-host link (``../docs/entropy_mechanism.md``) points at the page."""
    html = _page(site, "notebooks/03_entropy_dynamics")
    for href in re.findall(r'href="([^"#]*entropy_mechanism[^"#]*)"', html):
        target = (site / "notebooks/03_entropy_dynamics" / href).resolve()
        assert (target / "index.html").is_file() or target.is_file(), href


def test_api_pages_have_no_rest_literal_markers(site):
    """The docstrings are rendered as Markdown (google style): no reST ``::`` ends a
    paragraph of the API pages."""
    for path in ("api/core", "api/algorithms"):
        assert "::</p>" not in _page(site, path), path


def _facts(html: str) -> dict[str, str]:
    box = html.split("Quick facts", 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>\s*<td>(.*?)</td>\s*<td>(.*?)</td>\s*</tr>", box, re.S)
    return {re.sub(r"<[^>]+>", "", k).strip(): re.sub(r"<[^>]+>", "", v).strip() for k, v in rows}


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_algorithm_pages_open_with_facts_read_off_their_config(site, name):
    """Every algorithm page opens with the Quick facts box and the loop, before its first
    section, and each fact agrees with the default Config's contract methods and switches."""
    html = _page(site, f"algorithms/{name}")
    body = html.split('<h1 id="', 1)[1]
    first_section = body.index("<h2")
    assert -1 < body.find("Quick facts") < body.find("The loop") < first_section
    cfg = algorithms.get(name).Config()
    facts = _facts(html)
    assert facts["reference model π_ref"].startswith("yes") == cfg.needs_reference()
    assert facts["dynamic sampling"].startswith("on") == cfg.dynamic_sampling
    assert facts["overlong shaping"].startswith("on") == cfg.overlong_shaping
    assert facts["overlong filter"].startswith("on") == cfg.overlong_filter
    level = "token-level" if cfg.loss_agg_mode in core.TOKEN_AGG_MODES else "sequence-level"
    assert facts["loss"].startswith(f"{level} ({cfg.loss_agg_mode})")
    current = facts["current entropy H_θ"]
    assert current.startswith("trained") == cfg.differentiates_entropy()
    assert current.startswith("read") == cfg.reads_current_entropy()
    shared = set(contract.CONFIG_FIELDS) | {"clip_eps_low", "clip_eps_high", "eps", "entropy_eps"}
    for field in dataclasses.fields(cfg):
        if field.name not in shared:
            assert f"{field.name}={getattr(cfg, field.name)}" in facts["its own knobs"]
    loop = body[body.index("The loop") : first_section]
    assert ("◀" in loop) == (name != "grpo")


#: A figure still to be filled in: an all-caps name ending in _LINE, _NUMBERS or _TABLE
#: standing for a measurement (what a draft leaves where the run's output goes).
PLACEHOLDER = re.compile(r"\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)*_(?:LINE|NUMBERS|TABLE)\b")


def _reader_pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if "site" not in p.relative_to(ROOT).parts[:2]]


def test_no_page_holds_a_placeholder_for_a_figure():
    found = [
        f"{page.relative_to(ROOT)}:{n}: {m.group(0)}"
        for page in _reader_pages()
        for n, line in enumerate(page.read_text().splitlines(), 1)
        for m in PLACEHOLDER.finditer(line)
    ]
    assert not found, "figures still to be filled in:\n" + "\n".join(found)


def test_the_placeholder_check_sees_a_placeholder():
    assert PLACEHOLDER.search("the cost: COST_LINE.")
    assert PLACEHOLDER.search("MEASURED_NUMBERS")
    assert not PLACEHOLDER.search("`ENTROPY_CHANGE_GROUPS` and MKL_CBWR=AVX2,STRICT")


NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen twenty"
).split()
#: Prose that counts the registry (``algorithms.NAMES``), with what the count leaves out:
#: "<n> algorithm files" counts every name, "GRPO and <n> algorithms" every name but GRPO.
ALGORITHM_COUNTS = (
    (re.compile(r"\b(\w+)\s+algorithm\s+files\b", re.I), 0),
    (re.compile(r"\bGRPO\s+and\s+(\w+)\s+(?:other\s+)?algorithms\b"), 1),
)


def written_algorithm_counts(text: str) -> list[tuple[str, int, int]]:
    """``(phrase, the count it writes, the registry's count)`` for every phrase of ``text``
    that writes a count of the algorithms as a number word or in digits."""
    found = []
    for pattern, left_out in ALGORITHM_COUNTS:
        for m in pattern.finditer(text):
            word = m.group(1).lower()
            if not (word.isdigit() or word in NUMBER_WORDS):
                continue  # "the algorithm files", "all algorithm files": no count
            n = int(word) if word.isdigit() else NUMBER_WORDS.index(word)
            found.append((" ".join(m.group(0).split()), n, len(algorithms.NAMES) - left_out))
    return found


def test_every_written_algorithm_count_is_the_registrys():
    """A count of the algorithms in the README or the docs is the registry's
    (``refimpl.algorithms.NAMES``): adding an algorithm fails here, naming each sentence to
    update, instead of leaving a stale "thirteen"."""
    wrong = [
        f"{page.relative_to(ROOT)}: {phrase!r} says {n}, the registry has {expected}"
        for page in [*_reader_pages(), ROOT / "CONTRIBUTING.md"]
        for phrase, n, expected in written_algorithm_counts(page.read_text())
        if n != expected
    ]
    assert not wrong, "\n".join(wrong)


def test_the_count_check_sees_a_stale_count():
    n = len(algorithms.NAMES)
    text = (
        f"the {NUMBER_WORDS[n - 1]} algorithm\nfiles, GRPO and {n} algorithms; the algorithm files"
    )
    assert written_algorithm_counts(text) == [
        (f"{NUMBER_WORDS[n - 1]} algorithm files", n - 1, n),
        (f"GRPO and {n} algorithms", n, n - 1),
    ]
