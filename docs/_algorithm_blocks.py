"""Every algorithm page opens with a *Quick facts* box and the RL loop in pseudocode, both
generated from the algorithm's own code and written into the page's Markdown, so that they
read the same on the code host and on the site, and cannot drift from the code.

A page ``docs/algorithms/<name>.md`` holds the generated block between two markers, each on a
line of its own (after its title)::

    <!-- quick-facts -->
    ...generated: do not edit by hand...
    <!-- /quick-facts -->

``python scripts/dev/algorithm_pages.py`` (re)writes the block of every page from the code (a new
page needs only the first marker), and ``--check`` lists the stale ones;
``tests/test_docs_hooks.py`` regenerates every block in memory and fails on a page whose
block differs, naming that command. The block holds

* **Quick facts**, read off ``refimpl.algorithms.<name>``: the default ``Config``'s contract
  methods (``needs_reference``, ``reads_current_entropy``, ``differentiates_entropy``), its
  shared switches (``dynamic_sampling``, ``overlong_shaping``, ``overlong_filter``), its loss
  aggregation and clip range, its own fields with their defaults, and two probes that call
  the algorithm on a small fixed batch: whether its advantages vary within a completion
  (token-level credit), and whether its advantages or its loss read the rollout entropy;
* **the loop**: the training step every algorithm shares (``train`` in
  ``refimpl/loop.py``), with the lines this algorithm changes marked ``◀``. The shared steps
  appear when the ``Config`` switches them on. The advantage and loss lines name the
  algorithm's ``advantages`` and ``loss`` and point to its *Key equations*: they restate no
  algorithm's mathematics (this module holds no table keyed by algorithm names), and show
  only what they read off the ``Config`` (aggregation, clip, KL coefficient). A line is marked
  where it differs from GRPO's, the baseline: a shared step where its text does, the
  advantage and loss steps where the code says so (:func:`differs_from_grpo` calls both
  algorithms on :func:`probe_batch`), the loss step also where its ``Config`` line does.

A page holds a second generated block, under its ``## Key equations`` heading::

    <!-- equations -->
    ...generated: do not edit by hand...
    <!-- /equations -->

It is the *Equations* section of the algorithm file's module docstring, verbatim in a text
block: the docstring is the one place where an algorithm's equations are written, and the page
and ``docs/math.md`` (which links to each page's block) do not restate them. ``--check`` and
the test fail when a docstring changes and its page's copy does not.

The site build (mkdocs) renders the Markdown as it is: it runs no code of this module.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # the checkout's code, whatever directory mkdocs runs from
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from refimpl import algorithms, contract, core  # noqa: E402

MARKER = "<!-- quick-facts -->"  # where the generated block begins
END = "<!-- /quick-facts -->"  # where it ends
EQ_MARKER = "<!-- equations -->"  # where the equations block begins (under "## Key equations")
EQ_END = "<!-- /equations -->"  # where it ends
COMMAND = "python scripts/dev/algorithm_pages.py"  # what regenerates the blocks
PAGES = REPO / "docs" / "algorithms"

# Fields every Config shares, shown in their own rows rather than among "its own knobs".
_SHOWN = set(contract.CONFIG_FIELDS) | {"clip_eps_low", "clip_eps_high", "eps", "entropy_eps"}


def _clip_eps(cfg) -> tuple[float, float] | None:
    """The Config's ratio clip (ε_low, ε_high), None for a loss without one."""
    lo, hi = getattr(cfg, "clip_eps_low", None), getattr(cfg, "clip_eps_high", None)
    return None if lo is None else (lo, hi)


def _clip(cfg) -> str:
    eps = _clip_eps(cfg)
    return "none" if eps is None else f"clip(·, 1 − {eps[0]:g}, 1 + {eps[1]:g})"


def _kl(cfg) -> str:
    """The Config's KL coefficient, as the loss step names it."""
    if cfg.needs_reference():
        return f"KL to π_ref β = {cfg.kl_coef:g}"
    if cfg.kl_coef > 0:
        return f"β = {cfg.kl_coef:g}, not to π_ref"
    return "no KL to π_ref"


# ---------------------------------------------------------------------------------------------
# Probes: call the algorithm on a small fixed batch.
# ---------------------------------------------------------------------------------------------


def probe_batch(entropy_seed: int = 0) -> contract.RolloutBatch:
    """Two groups of four completions of lengths 2 to 6, each group with two successes and
    two failures; log-probs and entropies drawn from fixed seeds (``entropy_seed`` redraws
    only the rollout entropies)."""
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([6, 3, 5, 2, 4, 6, 3, 5])
    mask = (torch.arange(6)[None, :] < lengths[:, None]).float()
    logp_old = -torch.rand(8, 6, generator=g) * 2 - 0.05
    logp_ref = logp_old - torch.rand(8, 6, generator=g) * 0.2
    entropy = torch.rand(8, 6, generator=torch.Generator().manual_seed(100 + entropy_seed))
    return contract.RolloutBatch(
        response_ids=torch.randint(3, 18, (8, 6), generator=g),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]),
        logp_old=logp_old,
        entropy_old=entropy * 2 + 0.05,
        group_size=4,
        logp_ref=logp_ref,
        # VinePPO's V̂(q, o_<t): every prefix valued (multiples of 1/8, a fixed seed).
        token_values=torch.randint(0, 9, (8, 6), generator=torch.Generator().manual_seed(7))
        .double()
        .div(8),
    )


def _current_logp(batch: contract.RolloutBatch) -> torch.Tensor:
    """The current policy's log-probs on :func:`probe_batch`: π_old's moved by a fixed draw,
    still log-probs (the losses refuse others)."""
    moved = 0.3 * torch.randn(8, 6, generator=torch.Generator().manual_seed(1))
    return (batch.logp_old + moved).clamp(max=0.0)


def probes(name: str, cfg=None) -> dict[str, bool]:
    """What the algorithm does on :func:`probe_batch`: ``token_credit`` (its advantages vary
    within a completion), ``advantage_reads_entropy`` and ``loss_reads_entropy`` (redrawing
    the rollout entropies changes its advantages / the value of its loss, for the same
    advantages and the same current entropy)."""
    algo = algorithms.get(name)
    cfg = algo.Config() if cfg is None else cfg
    batch, other = probe_batch(0), probe_batch(1)
    mask = batch.response_mask.bool()
    adv = algo.advantages(batch, cfg)
    spread = [float(adv[i][mask[i]].max() - adv[i][mask[i]].min()) for i in range(8)]
    logp = _current_logp(batch)
    current = batch.entropy_old * 0.9  # H_θ, the same in both calls
    loss_a, _ = algo.loss(batch, logp, adv, cfg, entropy=current)
    loss_b, _ = algo.loss(other, logp, adv, cfg, entropy=current)
    return {
        "token_credit": max(spread) > 1e-6,
        "advantage_reads_entropy": not torch.allclose(adv, algo.advantages(other, cfg)),
        "loss_reads_entropy": not torch.isclose(loss_a, loss_b),
    }


# ---------------------------------------------------------------------------------------------
# The box and the loop.
# ---------------------------------------------------------------------------------------------


def _on(flag: bool, text: str, field: str) -> str:
    return (f"**on**: {text}" if flag else "off") + f" (`{field}`)"


def quick_facts(name: str, cfg=None) -> list[tuple[str, str]]:
    """The rows of the Quick facts box of algorithm ``name`` (its default ``Config`` unless
    ``cfg`` is given): ``(fact, value)`` pairs, values in markdown."""
    algo = algorithms.get(name)
    cfg = algo.Config() if cfg is None else cfg
    probe = probes(name, cfg)
    mode = cfg.loss_agg_mode
    level = "token-level" if mode in core.TOKEN_AGG_MODES else "sequence-level"
    others = [f"`{m}`" for m in algo.LOSS_AGG_MODES if m != mode]
    reads = [
        where
        for where, hit in (("the advantages", "advantage"), ("the loss", "loss"))
        if probe[f"{hit}_reads_entropy"]
    ]
    if cfg.differentiates_entropy():
        current = "**trained**: the loss carries its gradient (`differentiates_entropy`)"
    elif cfg.reads_current_entropy():
        current = "**read**: compared with H_old, without gradient (`reads_current_entropy`)"
    else:
        current = "not read"
    if cfg.needs_reference():
        reference = f"**yes**: k3 KL to the frozen warm start, β = {cfg.kl_coef:g}"
    elif cfg.kl_coef > 0:
        reference = f"no (its KL term, β = {cfg.kl_coef:g}, is not anchored at π_ref)"
    else:
        reference = "no (`kl_coef` = 0)"
    own = [
        f"`{f.name}={getattr(cfg, f.name)}`"
        for f in dataclasses.fields(cfg)
        if f.name not in _SHOWN
    ]
    return [
        ("policy", "on-policy: every step trains on groups just sampled from π_θ (= π_old)"),
        ("reference model π_ref", reference),
        (
            "credit",
            "**per token**: advantages vary within a completion"
            if probe["token_credit"]
            else "per completion: one advantage on every token of o_i",
        ),
        ("loss", f"{level} (`{mode}`)" + (f"; also {', '.join(others)}" if others else "")),
        ("clip", _clip(cfg).replace("·", "ratio", 1)),
        (
            "rollout entropy H_old",
            f"**read** by {' and '.join(reads)}" if reads else "not read",
        ),
        ("current entropy H_θ", current),
        (
            "dynamic sampling",
            _on(
                cfg.dynamic_sampling,
                "trains on groups with 0 < #successful < G",
                "dynamic_sampling",
            ),
        ),
        (
            "overlong shaping",
            _on(
                cfg.overlong_shaping,
                f"soft penalty over the last {cfg.overlong_cache_frac:.0%} of the budget",
                "overlong_shaping",
            ),
        ),
        (
            "overlong filter",
            _on(cfg.overlong_filter, "truncated completions leave the loss", "overlong_filter"),
        ),
        ("its own knobs", ", ".join(own) if own else "none"),
    ]


def differs_from_grpo(name: str, cfg=None) -> dict[str, bool]:
    """Whether algorithm ``name`` (its default ``Config`` unless ``cfg`` is given) computes
    other numbers than GRPO (its default ``Config``) on :func:`probe_batch`: ``advantage``,
    its advantages; ``loss``, the value of its loss or its gradient (in the log-probs and in
    the current entropy), both losses given GRPO's advantages and the same current policy.
    The marks of the loop come from here: the code says what differs, no table does."""
    algo, grpo = algorithms.get(name), algorithms.get("grpo")
    cfg = algo.Config() if cfg is None else cfg
    base = grpo.Config()
    batch = probe_batch(0)
    adv = grpo.advantages(batch, base)
    logp_start = _current_logp(batch)

    def run(module, config) -> list[torch.Tensor]:
        logp = logp_start.clone().requires_grad_(True)
        entropy = (batch.entropy_old * 0.9).requires_grad_(True)  # H_θ
        value, _ = module.loss(batch, logp, adv, config.for_update(batch, adv), entropy=entropy)
        grads = torch.autograd.grad(value, (logp, entropy), allow_unused=True)
        zero = torch.zeros_like(logp_start)
        return [value.detach()] + [zero if g is None else g for g in grads]

    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.shape == b.shape and torch.allclose(a.float(), b.float(), rtol=1e-5, atol=1e-7)

    return {
        "advantage": not same(algo.advantages(batch, cfg), adv),
        "loss": not all(same(a, b) for a, b in zip(run(algo, cfg), run(grpo, base), strict=True)),
    }


def loop(name: str, cfg=None) -> list[tuple[str, bool]]:
    """The training loop of algorithm ``name`` as ``(step, differs from GRPO)`` pairs; a step
    may span several lines. A step every algorithm shares (written here, shown when the
    ``Config`` switches it on) differs when its text does; the advantage step when
    :func:`differs_from_grpo` finds other advantages; the loss step when it finds another
    loss, or when the facts the step reads off the ``Config`` (aggregation, clip, KL) differ.
    """
    cfg = algorithms.get(name).Config() if cfg is None else cfg
    grpo = {kind: step for step, kind in _loop_steps(algorithms.get("grpo").Config())}
    differs = differs_from_grpo(name, cfg)
    return [
        (step, differs[kind] or step != grpo[kind] if kind in differs else step not in grpo)
        for step, kind in _loop_steps(cfg)
    ]


def _loop_steps(cfg) -> list[tuple[str, str]]:
    """The loop's steps for ``cfg`` as ``(text, kind)`` pairs: ``kind`` is ``"advantage"``,
    ``"loss"``, or the step's own text (a shared step). The advantage and loss steps name the
    algorithm's functions, whose equations its page shows under *Key equations*: they are not
    restated here. The loss step's second line is read off the ``Config`` (the same text for
    every algorithm with the same aggregation, clip and KL coefficient)."""
    steps = [
        "for step = 1 … steps:",
        "    sample N prompts × G completions from π_θ (now π_old); keep logp_old, H_old",
        "    r_i ← the task's outcome reward (1 right, 0 wrong)",
    ]
    if cfg.dynamic_sampling:
        steps.append(
            f"    keep the groups with 0 < #(r_i ≥ {cfg.success_threshold:g}) < G;"
            "\n        sample more groups until N are kept (DAPO's dynamic sampling)"
        )
    if cfg.overlong_shaping:
        steps.append(
            f"    r_i ← r_i + {cfg.overlong_penalty_scale:g}·R_len(|o_i|)"
            "   (DAPO's soft overlong punishment)"
        )
    if cfg.needs_reference():
        steps.append("    logp_ref ← log-probs under the frozen reference π_ref")
    request = cfg.values_needed()
    if request is not None:
        where = "every prefix" if request.step_ends is None else "each step start"
        steps.append(
            f"    V̂ ← success rate of {request.rollouts} continuations of π_old from {where}"
            " (credit oracle)"
        )
    out = [(step, step) for step in steps]
    out.append(('    A ← advantages(batch, cfg)   [B, T], see "Key equations" below', "advantage"))
    tail = []
    if cfg.overlong_filter:
        tail.append("    m[i,t] ← 0 on every completion cut at the budget (overlong filter)")
    tail += [
        "    repeat ppo_epochs × minibatches (whole groups each):",
        "        logp, H_θ ← the current policy on the minibatch"
        + (" (H_θ keeps its gradient)" if cfg.differentiates_entropy() else ""),
    ]
    out += [(step, step) for step in tail]
    eps = _clip_eps(cfg)
    clip = "no ratio clip" if eps is None else f"ratio clip [1 − {eps[0]:g}, 1 + {eps[1]:g}]"
    out.append(
        (
            '        L ← loss(minibatch, logp, A, cfg, H_θ)   see "Key equations" below; cfg:'
            f"\n            {cfg.loss_agg_mode}, {clip}, {_kl(cfg)}",
            "loss",
        )
    )
    last = "        θ ← Adam step on ∇L (gradient norm clipped)"
    return out + [(last, last)]


def _legend(name: str, title: str, steps: list[tuple[str, bool]]) -> str:
    if name == "grpo":
        return (
            "GRPO is the baseline of the marks, so no line is marked (another algorithm's page"
            " marks the steps that differ from these: its `advantages` and `loss` where they"
            " compute other numbers than GRPO's on a fixed probe batch)."
        )
    marked = sum(differs for _, differs in steps)
    if not marked:  # a new algorithm's file, still a copy of GRPO's
        return (
            f"No line is marked: these are GRPO's steps, and the `advantages` and `loss` of"
            f" `{name}.py` compute GRPO's numbers on a fixed probe batch."
        )
    kept = {step for step, _ in steps}
    dropped = [s.strip() for s, _ in _loop_steps(algorithms.get("grpo").Config())]
    dropped = [s for s in dropped if not any(s == k.strip() for k in kept)]
    dropped = [s.split(" ←")[0] for s in dropped if s.startswith("logp_ref")]
    text = (
        f"The {'step' if marked == 1 else f'{marked} steps'} marked ◀ "
        f"{'is' if marked == 1 else 'are'} where {title} differs from GRPO (for `advantages` and"
        " `loss`: other numbers than GRPO's on a fixed probe batch, or another aggregation,"
        " clip or KL in the `Config`)"
    )
    if dropped:
        text += "; it needs no reference model, so GRPO's `logp_ref` step is gone"
    return text + "."


def render(name: str) -> str:
    """The generated block of ``docs/algorithms/<name>.md``, from its first marker to its
    last, both included."""
    code = f"../../refimpl/algorithms/{name}.py"
    title = algorithms.get(name).__doc__.split(":", 1)[0].strip()
    rows = "\n".join(f"| {fact} | {value} |" for fact, value in quick_facts(name))
    steps = loop(name)
    body = "\n".join(
        ("◀ " if differs else "  ") + line for step, differs in steps for line in step.split("\n")
    )
    return f"""{MARKER}
<!-- generated from refimpl/algorithms/{name}.py by `{COMMAND}`: do not edit by hand -->

**Quick facts**, read off the default `Config` of [`{name}.py`]({code}); any field can be
changed with `--algo-args FIELD=VALUE`.

| fact | default `Config` |
| --- | --- |
{rows}

**The loop**: one step of the toy loop (`train` in `refimpl/loop.py`; the Trainer runs the same step).
`advantages` and `loss` are the functions of [`{name}.py`]({code}); their equations are under
[Key equations](#key-equations). {_legend(name, title, steps)}

```text
{body}
```
{END}"""


# ---------------------------------------------------------------------------------------------
# The equations: the docstring's own section, verbatim.
# ---------------------------------------------------------------------------------------------

# A section heading of a module docstring: a line at the margin over a line of dashes.
_HEADING = re.compile(r"^(\S[^\n]*)\n-{3,}[ \t]*$", re.M)


def equations(name: str, doc: str | None = None) -> tuple[str, str]:
    """The *Equations* section of the module docstring of algorithm ``name`` (or of ``doc``):
    its heading (``"Equations"``, or with a qualifier, ``"Equations (v5 numbering)"``) and its
    body, dedented, up to the next section heading. A docstring without the section is an
    error naming the file."""
    doc = inspect.cleandoc(algorithms.get(name).__doc__ if doc is None else doc)
    headings = list(_HEADING.finditer(doc))
    for k, heading in enumerate(headings):
        if heading.group(1).startswith("Equations"):
            end = headings[k + 1].start() if k + 1 < len(headings) else len(doc)
            body = textwrap.dedent(doc[heading.end() : end]).strip("\n").rstrip()
            if body:
                return heading.group(1).strip(), body
    raise ValueError(
        f"refimpl/algorithms/{name}.py: its docstring has no 'Equations' section "
        "(a line 'Equations' over a line of dashes, then the equations)"
    )


def render_equations(name: str) -> str:
    """The equations block of ``docs/algorithms/<name>.md``, from its marker to its end
    marker, both included."""
    heading, body = equations(name)
    if "```" in body:
        raise ValueError(f"refimpl/algorithms/{name}.py: its equations hold a ``` fence")
    code = f"../../refimpl/algorithms/{name}.py"
    return f"""{EQ_MARKER}
<!-- generated from the docstring of refimpl/algorithms/{name}.py by `{COMMAND}`: do not edit by hand -->

Written once, in the *{heading}* section of the docstring of
[`{name}.py`]({code}) ([notation](../math.md#notation)):

```text
{body}
```
{EQ_END}"""


# ---------------------------------------------------------------------------------------------
# The pages: write the blocks, find the stale ones.
# ---------------------------------------------------------------------------------------------


def _block(marker: str, end: str) -> re.Pattern:
    """From a line holding ``marker`` to the line holding ``end`` (or the marker alone)."""
    return re.compile(rf"^{re.escape(marker)}[ \t]*$(?:.*?^{re.escape(end)}[ \t]*$)?", re.M | re.S)


_BLOCK = _block(MARKER, END)
_EQ_BLOCK = _block(EQ_MARKER, EQ_END)


def update_facts(markdown: str, name: str) -> str:
    """``markdown`` (the page of algorithm ``name``) with its Quick facts block rewritten."""
    if not _BLOCK.search(markdown):
        raise ValueError(f"docs/algorithms/{name}.md: no {MARKER} line (put it under the title)")
    return _BLOCK.sub(lambda _: render(name), markdown, count=1)


def update_equations(markdown: str, name: str) -> str:
    """``markdown`` (the page of algorithm ``name``) with its equations block rewritten."""
    if not _EQ_BLOCK.search(markdown):
        raise ValueError(
            f"docs/algorithms/{name}.md: no {EQ_MARKER} line (put it under '## Key equations')"
        )
    return _EQ_BLOCK.sub(lambda _: render_equations(name), markdown, count=1)


def update(markdown: str, name: str) -> str:
    """``markdown`` (the page of algorithm ``name``) with both generated blocks rewritten: the
    text from each first marker to its end marker, or the first marker alone on a page that has
    no block yet. A page without a marker is an error."""
    return update_equations(update_facts(markdown, name), name)


def stale(pages: Path = PAGES) -> list[str]:
    """One line for each algorithm in ``NAMES`` whose page under ``pages`` is missing, lacks a
    marker, or holds a generated block that differs from what the code generates now (one line
    per stale block)."""
    found = []
    for name in algorithms.NAMES:
        page = pages / f"{name}.md"
        if not page.is_file():
            found.append(f"docs/algorithms/{name}.md: missing")
            continue
        text = page.read_text(encoding="utf-8")
        for what, rewrite in (
            ("its generated block", update_facts),
            ("its equations block (from the docstring)", update_equations),
        ):
            try:
                if rewrite(text, name) != text:
                    found.append(f"docs/algorithms/{name}.md: {what} is stale")
            except ValueError as err:
                found.append(str(err))
    return found


def write(pages: Path = PAGES) -> list[str]:
    """Rewrite the generated blocks of every algorithm page under ``pages``; the paths of the
    pages that changed. A page without a marker is an error, raised before any page is
    written."""
    texts = {name: (pages / f"{name}.md").read_text(encoding="utf-8") for name in algorithms.NAMES}
    new = {name: update(text, name) for name, text in texts.items()}
    changed = [name for name in algorithms.NAMES if new[name] != texts[name]]
    for name in changed:
        (pages / f"{name}.md").write_text(new[name], encoding="utf-8")
    return [f"docs/algorithms/{name}.md" for name in changed]
