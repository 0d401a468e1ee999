"""DAPO's settings in the Configs that take them are DAPO's (issue 60, item 5).

Six algorithms run on DAPO's recipe: Clip-Cov, KL-Cov, the forking tokens and the entropy bonus
take all of DAPO's settings (clip-higher, no KL, token-mean, its ``eps``, dynamic sampling,
overlong shaping), and GTPO and GRPO-S take some of them. Each ``Config`` writes those
defaults itself, so that its file reads on its own (an algorithm file imports no other, and
``contract``, below it, names no algorithm: a shared ``DAPO_SWITCHES`` or a DAPO base class
would break one rule or the other). The copies are what could drift, so these tests make them
fail instead: every setting a Config takes from DAPO has DAPO's default, and in the four full
copies its line (type, default and the comment that cites DAPO's paper) is DAPO's line.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import textwrap

import pytest

from refimpl import algorithms

#: DAPO's settings: the ratio clip, the KL and aggregation choices, the z-score's eps and the
#: batch mechanisms (``contract.AlgorithmConfig``'s fields).
ALL = (
    "clip_eps_low",
    "clip_eps_high",
    "kl_coef",
    "loss_agg_mode",
    "eps",
    "success_threshold",
    "dynamic_sampling",
    "overlong_shaping",
    "overlong_cache_frac",
    "overlong_penalty_scale",
    "overlong_filter",
)

#: Which of DAPO's settings each Config takes, as its docstring and comments say.
TAKES = {
    "clip_cov": ALL,
    "kl_cov": tuple(f for f in ALL if not f.startswith("clip_eps")),  # no clip (KL-Cov's §)
    "forking_tokens": ALL,
    "entropy_bonus": ALL,
    # GTPO and GRPO-S: DAPO's clip-higher and dynamic sampling, no overlong shaping (not in
    # §3's runs); GRPO-S aggregates one loss per sequence.
    "gtpo": (
        "clip_eps_low",
        "clip_eps_high",
        "kl_coef",
        "loss_agg_mode",
        "eps",
        "dynamic_sampling",
    ),
    "grpo_s": ("clip_eps_low", "clip_eps_high", "kl_coef", "eps", "dynamic_sampling"),
}

#: The Configs whose DAPO lines are DAPO's, character for character.
SAME_LINES = ("clip_cov", "kl_cov", "forking_tokens", "entropy_bonus")


def field_lines(config: type) -> dict[str, str]:
    """``{field: its line}`` of the fields a ``Config`` class writes in its own body."""
    source = textwrap.dedent(inspect.getsource(config))
    lines = source.splitlines()
    return {
        node.target.id: lines[node.lineno - 1].strip()
        for node in ast.parse(source).body[0].body
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
    }


def drifted(name: str, config: type, dapo: type, fields: tuple[str, ...], lines: bool) -> list:
    """``"name.field: ..."`` for every setting of ``fields`` where ``config`` is not ``dapo``:
    a default that differs, or (``lines``) a line that differs from DAPO's."""
    ours, base = config(), dapo()
    out = [
        f"{name}.{f}: {getattr(ours, f)!r}, DAPO's is {getattr(base, f)!r}"
        for f in fields
        if getattr(ours, f) != getattr(base, f)
    ]
    if lines:
        own, dapos = field_lines(config), field_lines(dapo)
        out += [
            f"{name}.{f}: line {own.get(f)!r}, DAPO's is {dapos[f]!r}"
            for f in fields
            if f in dapos and own.get(f) != dapos[f]
        ]
    return out


@pytest.mark.parametrize("name", sorted(TAKES))
def test_dapos_settings_are_dapos(name):
    dapo = algorithms.get("dapo").Config
    config = algorithms.get(name).Config
    assert drifted(name, config, dapo, TAKES[name], name in SAME_LINES) == []


def test_every_config_on_dapos_recipe_is_listed():
    """A Config that switches on DAPO's dynamic sampling by default is on its recipe: it is
    listed above (so a new one is checked too)."""
    on = {n for n in algorithms.NAMES if algorithms.get(n).Config().dynamic_sampling}
    assert on == set(TAKES) | {"dapo"}


def test_the_check_sees_a_drifted_copy():
    """A changed default and a changed comment are each found; DAPO against itself is not."""
    dapo = algorithms.get("dapo").Config
    assert drifted("dapo", dapo, dapo, ALL, True) == []

    @dataclasses.dataclass(frozen=True)
    class Config(dapo):
        clip_eps_high: float = 0.3  # ε_high > ε_low: clip-higher (§3.1) [C]
        dynamic_sampling: bool = True  # keep the groups with 0 < #successful < G [C]

    found = drifted("x", Config, dapo, ALL, True)
    assert found[0] == "x.clip_eps_high: 0.3, DAPO's is 0.28"
    assert [f.split(":")[0] for f in found[1:]] == [
        "x.clip_eps_low",
        "x.clip_eps_high",
        "x.kl_coef",
        "x.loss_agg_mode",
        "x.eps",
        "x.dynamic_sampling",
        "x.overlong_shaping",
    ]
