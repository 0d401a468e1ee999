"""One file per algorithm, each with the same contract:

``Config`` (frozen dataclass of paper defaults), ``advantages(batch, cfg)``,
``reference_advantages(batch, cfg)`` and ``loss(batch, logp, adv, cfg, entropy=None)``.

Every ``Config`` subclasses ``refimpl.contract.AlgorithmConfig`` and so has the fields it
declares (``contract.CONFIG_FIELDS``: ``kl_coef``, ``loss_agg_mode``, which each ``Config``
states, and DAPO's switches ``success_threshold``, ``dynamic_sampling``, ``overlong_shaping``,
``overlong_cache_frac``, ``overlong_penalty_scale``, ``overlong_filter``, whose defaults are
the contract's and which a ``Config`` names only where its paper changes them), which the
training loops read directly; ``tests/spec/test_contract.py`` checks it.

>>> from refimpl import algorithms
>>> algorithms.get("gtpo").Config().alpha_2
0.1
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Every algorithm, in the order the docs present them: the baselines, the token-level
#: methods, RLOO (the worked example of docs/adding_an_algorithm.md), then the entropy
#: interventions the seed papers argue against, STEER (the reweighting TEPO's paper builds
#: on), and VinePPO (trained on the credit oracle's values). A new name goes at the end, so
#: the colours derived from this order stay those
#: of existing figures.
NAMES: tuple[str, ...] = (
    "grpo",
    "dapo",
    "dr_grpo",
    "gspo",
    "gpg",
    "gtpo",
    "grpo_s",
    "tepo",
    "rloo",
    "clip_cov",
    "kl_cov",
    "forking_tokens",
    "entropy_bonus",
    "steer",
    "vineppo",
)

#: The algorithm every other is compared against (``diff grpo.py <other>.py``), and the one an
#: entry point that takes an algorithm uses when none is named.
BASELINE = "grpo"


def get(name: str) -> ModuleType:
    """The algorithm module called ``name`` (one of ``NAMES``); ``-`` is read as ``_``."""
    key = str(name).strip().lower().replace("-", "_")
    if key not in NAMES:
        raise ValueError(f"algorithm: expected one of {', '.join(NAMES)}, got {name!r}")
    return importlib.import_module(f"{__name__}.{key}")
