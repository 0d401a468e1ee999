"""The arms of the claims experiment, the names the pages give them, and the first pass's
seeds and files.

An *arm* is an algorithm at its paper's defaults, or one named change of it: on the real model
the ``--arm`` of ``run_real.py`` (``gtpo_alpha0``), on the toy the label of the collapse
benchmark's ``results.json`` (an ablation by its change, ``"gtpo alpha_2=0.0"``).
"""

from __future__ import annotations

#: The seeds of the first pass, where every arm ran (later passes add seeds to some arms).
FIRST_SEEDS = (0, 1, 2)
MAIN_ARMS = ("dapo", "gtpo", "grpo_s", "tepo")
#: Real-model arms, in the order of the tables.
REAL_ARMS = ("base", "dapo", "dapo_noshape", "gtpo", "grpo_s", "tepo", "grpo", "gtpo_alpha0",
             "gtpo_batch", "tepo_nomask")  # fmt: skip
#: The two DAPO arms: the DAPO paper's default (overlong shaping on) and without the shaping.
REAL_DAPOS = ("dapo", "dapo_noshape")
TOY_DAPOS = ("dapo", "dapo overlong_shaping=False")
NOSHAPE = "DAPO without overlong shaping"
NAMES = {
    "base": "base model",
    "dapo": "DAPO",
    "dapo_noshape": NOSHAPE,
    "dapo overlong_shaping=False": NOSHAPE,
    "gtpo": "GTPO (α₂ = 0.1)",
    "grpo_s": "GRPO-S",
    "tepo": "TEPO",
    "grpo": "GRPO",
    "gspo": "GSPO",
    "gtpo_alpha0": "GTPO, α₂ = 0",
    "gtpo_batch": "GTPO, stats = batch (Eq. 4 literal)",
    "gtpo alpha_2=0.0": "GTPO, α₂ = 0",
    "gtpo stats=batch": "GTPO, stats = batch (Eq. 4 literal)",
    "tepo kl_mask=False": "TEPO without its mask",
    "tepo_nomask": "TEPO without its mask",
}

#: The first pass's files (2026-12-03): they record only the architecture ("x86_64"), not the
#: CPU, so the page says their machine is unrecorded (issue 47: no machine from outside the
#: file). Named here for the cross-machine reruns of them.
FIRST_PASS_FILES = frozenset(
    {(a, s) for a in ("base", "dapo", "gtpo", "grpo_s", "tepo", "grpo", "gtpo_alpha0",
                      "tepo_nomask") for s in FIRST_SEEDS} | {("gtpo_batch", 0)}
)  # fmt: skip
