"""Which numpy generator draws which problems: every problem stream of a run, in one place.

A problem is drawn by ``task.sample(n, numpy.random.default_rng(key))``, the key a short list
of integers that numpy's ``SeedSequence`` hashes into the generator's state:

    held-out problems        [HELD_OUT_SEED, 0] = [10000, 0]    held_out_rng()
    training prompts         [s', step, round]                  training_rng(seed, step, round)
    warm-start problems      [s', step]                         warmstart_rng(seed, step)

with ``s' = stream_seed(seed)``. ``SeedSequence`` reads a key as 32-bit words and pads it
with zero words before it hashes it, so two keys that differ only by trailing zeros are one
stream: ``default_rng([10000, 0, 0])`` is ``default_rng([10000, 0])``. With the run's seed as
the first word, ``--seed 10000`` therefore trained at step 0 on exactly the held-out problems
(64 of 64, on every task), and ``--warmstart.seed 10000`` did at its own step 0.

The construction that rules it out: the first word 10000 belongs to the evaluation streams.
A run's seed ``s`` enters a training or warm-start key as

    s' = s        for s < 10000        (every stream of these seeds is what it always was)
    s' = s + 1    for s ≥ 10000

which is injective and never 10000; and ``s ≤ SEED_MAX`` keeps ``s'`` one 32-bit word (a
larger int would be split into several words, the first of them anything). So the first
word of every training and warm-start key differs from 10000, and no such stream can equal
a key whose first word is 10000, whatever the step and round. The probe prompts of the
entropy snapshots (``[20000, 0]``, ``refimpl.diagnostics.observers``) are not an evaluation
and are not reserved.
"""

from __future__ import annotations

import numpy as np

#: The first key word of the evaluation streams: the held-out problems are
#: ``default_rng([HELD_OUT_SEED, 0])``.
HELD_OUT_SEED = 10_000
#: The largest run seed (``--seed``, ``--warmstart.seed``): ``stream_seed`` of it is
#: 2^32 − 1, still one 32-bit word of a key.
SEED_MAX = 2**32 - 2


def stream_seed(seed: int) -> int:
    """``s'``, the first key word of the training and warm-start streams of seed ``s``: ``s``
    below ``HELD_OUT_SEED``, ``s + 1`` from it on (never ``HELD_OUT_SEED``). ``ValueError``
    naming ``seed`` outside ``0 … SEED_MAX``."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed: expected an int, got {seed!r}")
    if not 0 <= seed <= SEED_MAX:
        raise ValueError(f"seed: expected an integer in [0, {SEED_MAX}], got {seed}")
    seed = int(seed)
    return seed if seed < HELD_OUT_SEED else seed + 1


def training_rng(seed: int, step: int, round_: int) -> np.random.Generator:
    """The prompts of sampling round ``round_`` of RL step ``step`` of a run seeded ``seed``."""
    return np.random.default_rng([stream_seed(seed), step, round_])


def warmstart_rng(seed: int, step: int) -> np.random.Generator:
    """The problems of step ``step`` of a warm start seeded ``seed``."""
    return np.random.default_rng([stream_seed(seed), step])


def held_out_rng() -> np.random.Generator:
    """The held-out problems (the same for every run and every seed)."""
    return np.random.default_rng([HELD_OUT_SEED, 0])
