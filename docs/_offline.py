"""mkdocs hook: the site works with no network.

* **Math** is typeset by a copy of MathJax 3 served from the site itself (``assets/mathjax/``),
  taken at build time from the ``django-static-mathjax`` package of the ``docs`` extra (its
  browser files only: no Django is involved). Only the TeX-to-HTML bundle, its fonts and the
  TeX extensions it may load on demand are copied (about 2 MB, into the built site, not the
  repository), with MathJax's licence. The two scripts are added only to pages that hold math
  (an ``arithmatex`` element), so the other pages load nothing.
* **Notebooks** are rendered by mkdocs-jupyter from a cleaned copy: widget outputs (tqdm
  progress bars, which are empty without a widget manager) and the widget state are dropped,
  so no page loads the widget manager script from a CDN. The notebook template's CDN loaders
  (MathJax 2, with an empty URL here, and mermaid, which no notebook uses) are removed from
  the rendered pages. The notebooks in ``notebooks/`` are not modified.

``tests/test_docs.py`` fails when a built page still references a script or stylesheet on
another host.
"""

from __future__ import annotations

import json
import re
import tempfile
from importlib import metadata
from pathlib import Path

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files
from mkdocs.utils import get_relative_url

MATHJAX_DIST = "django-static-mathjax"
MATHJAX_ES5 = "mathjax/static/mathjax/es5"  # in the distribution
SITE_DIR = "assets/mathjax"  # in the site
# The TeX input + CommonHTML output bundle, the fonts it loads relative to itself, the TeX
# extensions its autoload may fetch, and the licence.
MATHJAX_FILES = (
    "tex-chtml.js",
    "output/chtml/fonts/woff-v2/*.woff",
    "input/tex/extensions/*.js",
)
CONFIG_JS = "javascripts/mathjax.js"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"

_tmp: tempfile.TemporaryDirectory | None = None


def _mathjax_root() -> tuple[Path, Path]:
    """MathJax's ``es5`` directory and the installation root of its distribution."""
    try:
        dist = metadata.distribution(MATHJAX_DIST)
    except metadata.PackageNotFoundError:
        raise RuntimeError(
            f"the docs need the {MATHJAX_DIST} package (the `docs` extra of pyproject.toml): "
            'pip install -e ".[docs]"'
        ) from None
    return Path(dist.locate_file(MATHJAX_ES5)), Path(dist.locate_file(""))


def _mathjax_files(config) -> list[File]:
    root, site_packages = _mathjax_root()
    out = []
    for pattern in MATHJAX_FILES:
        paths = sorted(root.glob(pattern))
        if not paths:
            raise RuntimeError(f"{MATHJAX_DIST}: no {pattern} under {root}")
        for path in paths:
            uri = f"{SITE_DIR}/{path.relative_to(root).as_posix()}"
            out.append(File.generated(config, uri, abs_src_path=str(path)))
    licence = next(site_packages.glob("django_static_mathjax-*.dist-info/LICENSE"), None)
    if licence is not None:
        out.append(File.generated(config, f"{SITE_DIR}/LICENSE", abs_src_path=str(licence)))
    return out


def clean_notebook(notebook: dict) -> dict:
    """The notebook without widget state and without the outputs that need a widget manager
    (their plain-text fallback is a progress bar frozen at its first frame)."""
    notebook = json.loads(json.dumps(notebook))  # a deep copy
    notebook.get("metadata", {}).pop("widgets", None)
    for cell in notebook.get("cells", []):
        if "outputs" in cell:
            cell["outputs"] = [o for o in cell["outputs"] if WIDGET_MIME not in o.get("data", {})]
    return notebook


def on_config(config):
    global _tmp
    _tmp = tempfile.TemporaryDirectory(prefix="refimpl-docs-")
    return config


@event_priority(50)  # after docs/_hooks.py added the notebooks, before mkdocs-jupyter
def on_files(files: Files, config) -> Files:
    for file in list(files):
        if file.abs_src_path and file.abs_src_path.endswith(".ipynb"):
            source = Path(file.abs_src_path)
            notebook = json.loads(source.read_text(encoding="utf-8"))
            cleaned = clean_notebook(notebook)
            if cleaned != notebook:
                copy = Path(_tmp.name) / file.src_uri
                copy.parent.mkdir(parents=True, exist_ok=True)
                copy.write_text(json.dumps(cleaned, indent=1, ensure_ascii=False), "utf-8")
                # mkdocs-jupyter's wrapper derives the path from src_dir and src_uri.
                file.src_dir = _tmp.name
                file.__dict__.pop("abs_src_path", None)
    for file in _mathjax_files(config):
        files.append(file)
    return files


# The notebook template's loaders: MathJax 2 (config included) and mermaid from a CDN.
_NB_MATHJAX = re.compile(r"<!-- Load mathjax -->.*?<!-- End of mathjax configuration -->", re.S)
_NB_MERMAID = re.compile(r'<script type="module">(?:(?!</script>).)*?mermaid.*?</script>', re.S)


def on_page_content(html: str, page, config, files) -> str:
    if page.file.src_uri.endswith(".ipynb"):
        html = _NB_MERMAID.sub("", _NB_MATHJAX.sub("", html))
    return html


def on_post_page(output: str, page, config) -> str:
    if 'class="arithmatex"' not in output:
        return output
    scripts = "".join(
        f'<script src="{get_relative_url(uri, page.url)}"{extra}></script>'
        for uri, extra in ((CONFIG_JS, ""), (f"{SITE_DIR}/tex-chtml.js", " defer"))
    )
    return output.replace("</body>", scripts + "</body>", 1)


def on_post_build(config) -> None:
    global _tmp
    if _tmp is not None:
        _tmp.cleanup()
        _tmp = None


def on_build_error(error) -> None:
    on_post_build(None)
