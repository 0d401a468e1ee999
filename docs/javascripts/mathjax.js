// MathJax 3 settings for pymdownx.arithmatex (generic mode): \( \) inline, \[ \] display.
// docs/_offline.py loads this, then the site's own MathJax, on the pages that hold math only.
// Every page is a full load (mkdocs.yml leaves material's navigation.instant off, which would
// swap pages without loading their scripts), so MathJax's startup typesets each page once.
// No re-typeset on material's document$: its first emission is this same page load, and
// clearing MathJax's caches then leaves every glyph without its CSS (blank equations).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};
