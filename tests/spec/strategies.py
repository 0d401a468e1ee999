"""Hypothesis strategies that generate valid ``RolloutBatch``es, and helpers to transform them.

Import from the spec tests as ``from tests.spec.strategies import rollout_batches, ...``.

What a generated batch looks like
---------------------------------
* ``N`` groups (1..4 by default) of ``G`` completions (2..6), ``T`` positions (1..8); groups
  are consecutive rows, as ``RolloutBatch`` requires.
* Ragged **prefix** masks: row ``i`` has ``|o_i|`` response tokens followed by padding.
  Lengths 0 (empty completion), 1 and ``T`` (no padding) are drawn on purpose, not left to
  chance, so every run of 40 examples meets them.
* Rewards (float32 ``[B]``): binary ``{0, 1}`` or "real" (multiples of 0.01 in ``[-4, 4]``;
  the grid keeps two distinct rewards at least 0.01 apart, so ``std ≫ eps`` and affine maps
  ``a·r + b`` stay exact enough to compare). Some groups have all-equal rewards on purpose,
  and a real reward is exactly 0.5, the default ``success_threshold``, with a fair chance
  (``r ≥ threshold`` is a success: a slip to ``>`` shows only there).
* ``entropy_old`` (float32 ``[B, T]``, ≥ 0): per batch one regime among zero (what a one-hot
  next-token distribution gives), tiny (≤ 1e-6), subnormal (each element one of exact 0, the
  smallest float32 subnormal 2⁻¹⁴⁹ ≈ 1.4e-45, a random subnormal below 2⁻¹²⁶ ≈ 1.2e-38, or
  values up to 1e-30, 1e-6 and 5: what a near-one-hot distribution's entropy rounds to),
  ordinary (≤ 5), huge (≤ 1e3), mixed (all scales at once, with exact zeros) and near-equal
  (one value, some elements one or two float32 ulps away: statistics over a subgroup then
  have a std of ~1e-8 relative, the case that amplifies a division by the std).
* ``logp_old`` (float32 ``[B, T]``, ≤ 0, ≥ −50): per batch one regime among near 0
  (≥ −1e-3), ordinary (≥ −5), very negative (−50 … −40) and mixed.
* ``logp_ref`` (float32 ``[B, T]``), present unless ``with_ref=False``: ``logp_old`` moved by
  up to ±1, clamped to ≤ 0.
* ``token_values`` (float64 ``[B, T]``, what VinePPO reads): Monte-Carlo values ``c/8`` in
  [0, 1] (0 and 1 often) at the first token of every row and at about half of the others,
  NaN (not valued) at the rest, so the steps are of random lengths.
* Padding positions hold arbitrary finite garbage by default (large values of either sign),
  ``padding="zero"`` gives zeros and ``padding="nan"`` NaN (ids: arbitrary token ids).
  Nothing an algorithm computes may depend on them; :func:`pad_with` rewrites them.

Bulk tensor contents come from a ``torch.Generator`` seeded by a drawn integer: structure
(shapes, lengths, rewards, regimes) is drawn by hypothesis and shrinks well; the float
contents of the ``[B, T]`` tensors are reproducible from the seed. Everything is float32.

Strategies: :func:`rollout_batches`, :func:`current_logp`, :func:`current_entropy`,
:func:`batch_and_policy`, :func:`group_permutations`, :func:`configs` (every switch
combination of an algorithm's ``Config``).
Helpers: :func:`pad_with`, :func:`pad_tensor`, :func:`add_padding_columns`,
:func:`add_padding_columns_tensor`, :func:`permute_within_groups`, :func:`row_permutation`,
:func:`concat_batches`, :func:`with_requested_values`.
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from torch import Tensor

from refimpl import algorithms
from refimpl.contract import RolloutBatch

#: Size of the token vocabulary used for ``response_ids`` (the ids are never read by the losses).
VOCAB = 16

ENTROPY_REGIMES = ("ordinary", "zero", "tiny", "subnormal", "huge", "mixed", "near_equal")
LOGP_REGIMES = ("ordinary", "near_zero", "very_negative", "mixed")

# Fields of a RolloutBatch that are per-token [B, T] tensors.
_TOKEN_FIELDS = (
    "response_ids",
    "response_mask",
    "logp_old",
    "entropy_old",
    "logp_ref",
    "token_values",
)


def _prefix_mask(lengths: list[int], T: int) -> Tensor:
    """``[B, T]`` float32 mask with ``lengths[i]`` ones then zeros in row ``i``."""
    positions = torch.arange(T)[None, :]
    return (positions < torch.tensor(lengths)[:, None]).to(torch.float32)


def _entropies(gen: torch.Generator, shape: tuple[int, int], regime: str) -> Tensor:
    u = torch.rand(shape, generator=gen)
    if regime == "zero":
        return torch.zeros(shape)
    if regime == "tiny":
        return u * 1e-6
    if regime == "huge":
        return u * 1e3
    if regime == "subnormal":
        # Exact 0, the smallest subnormal, random subnormals, then 1e-30, 1e-6 and ordinary.
        smallest = torch.nextafter(torch.zeros(()), torch.ones(()))  # 2⁻¹⁴⁹
        normal_min = torch.finfo(torch.float32).tiny  # 2⁻¹²⁶, below it subnormals
        choices = torch.stack(
            [
                torch.zeros(shape),
                smallest.expand(shape),
                u * normal_min,
                u * 1e-30,
                u * 1e-6,
                u * 5.0,
            ]
        )
        pick = torch.randint(0, len(choices), shape, generator=gen)
        return choices.gather(0, pick[None]).squeeze(0)
    if regime == "mixed":
        # Each element on its own scale in {0, 1e-6, 1e-2, 1, 10, 1e3}: exact zeros included.
        scales = torch.tensor([0.0, 1e-6, 1e-2, 1.0, 10.0, 1e3])
        pick = torch.randint(0, len(scales), shape, generator=gen)
        return u * scales[pick]
    if regime == "near_equal":
        # One value in (0.1, 5]; each element moved up by 0, 1 or 2 float32 ulps.
        x = torch.full(shape, 0.1 + 4.9 * float(u.flatten()[0]))
        steps = torch.randint(0, 3, shape, generator=gen)
        for k in (1, 2):
            x = torch.where(steps >= k, torch.nextafter(x, torch.tensor(float("inf"))), x)
        return x
    return u * 5.0  # ordinary: a small vocabulary's entropy is at most log(|V|)


def _logps(gen: torch.Generator, shape: tuple[int, int], regime: str) -> Tensor:
    u = torch.rand(shape, generator=gen)
    if regime == "near_zero":
        return -u * 1e-3
    if regime == "very_negative":
        return -40.0 - 10.0 * u
    if regime == "mixed":
        scales = torch.tensor([1e-4, 1.0, 5.0, 50.0])
        pick = torch.randint(0, len(scales), shape, generator=gen)
        return -u * scales[pick]
    return -5.0 * u


def _garbage(gen: torch.Generator, shape: tuple[int, int], padding: str) -> Tensor:
    if padding == "zero":
        return torch.zeros(shape)
    if padding == "nan":
        return torch.full(shape, float("nan"))
    # "random": large finite values of either sign, the kind of thing a careless x·m leaks.
    return (torch.rand(shape, generator=gen) - 0.5) * 2e4


@st.composite
def rollout_batches(
    draw: st.DrawFn,
    *,
    min_groups: int = 1,
    max_groups: int = 4,
    min_group_size: int = 2,
    max_group_size: int = 6,
    min_len: int = 1,
    max_len: int = 8,
    binary_rewards: bool | None = None,
    with_ref: bool | None = True,
    allow_empty: bool = True,
    equal_groups: bool | None = None,
    entropy_regime: str | None = None,
    logp_regime: str | None = None,
    padding: str = "random",
) -> RolloutBatch:
    """A valid :class:`RolloutBatch` (see the module docstring for what it contains).

    Args:
        min_groups, max_groups: range of ``N``.
        min_group_size, max_group_size: range of ``G`` (``≥ 2``).
        min_len, max_len: range of ``T`` (the padded width).
        binary_rewards: ``True`` rewards in {0, 1}; ``False`` real rewards; ``None`` either.
        with_ref: ``True`` always a ``logp_ref``; ``False`` never; ``None`` either.
        allow_empty: allow completions of length 0 (``False``: every ``|o_i| ≥ 1``).
        equal_groups: ``True`` every group has all-equal rewards; ``False`` no group is
            *forced* equal (binary groups may still be equal by chance); ``None`` some are.
        entropy_regime: one of ``ENTROPY_REGIMES`` or ``None`` for any.
        logp_regime: one of ``LOGP_REGIMES`` or ``None`` for any.
        padding: what padding positions hold: ``"random"``, ``"zero"`` or ``"nan"``.
    """
    N = draw(st.integers(min_groups, max_groups))
    G = draw(st.integers(min_group_size, max_group_size))
    T = draw(st.integers(min_len, max_len))
    B = N * G

    # Lengths: special values 0, 1 and T are drawn explicitly, each with a fair chance.
    low = 0 if allow_empty else 1
    special = [v for v in (0, 1, T) if v >= low]
    length = st.one_of(st.sampled_from(special), st.integers(low, T))
    lengths = draw(st.lists(length, min_size=B, max_size=B))

    binary = draw(st.booleans()) if binary_rewards is None else binary_rewards
    if binary:
        value = st.sampled_from([0.0, 1.0])
    else:
        value = st.one_of(st.just(0.5), st.integers(-400, 400).map(lambda k: k / 100.0))
    rewards: list[float] = []
    for _ in range(N):
        equal = draw(st.booleans()) if equal_groups is None else equal_groups
        if equal:
            rewards += [draw(value)] * G
        else:
            rewards += draw(st.lists(value, min_size=G, max_size=G))

    e_regime = entropy_regime or draw(st.sampled_from(ENTROPY_REGIMES))
    l_regime = logp_regime or draw(st.sampled_from(LOGP_REGIMES))
    ref = draw(st.booleans()) if with_ref is None else with_ref
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)

    mask = _prefix_mask(lengths, T)
    active = mask.bool()
    logp_old = _logps(gen, (B, T), l_regime)
    entropy_old = _entropies(gen, (B, T), e_regime)
    logp_ref = None
    if ref:
        logp_ref = (logp_old + 2.0 * torch.rand((B, T), generator=gen) - 1.0).clamp(max=0.0)
    ids = torch.randint(0, VOCAB, (B, T), generator=gen)
    # VinePPO's values from a stream of their own, so the other fields are what they were.
    vgen = torch.Generator().manual_seed(seed + 1)
    values = torch.randint(0, 9, (B, T), generator=vgen).to(torch.float64) / 8
    valued = (torch.rand((B, T), generator=vgen) < 0.5) | (torch.arange(T) == 0)
    token_values = torch.where(valued, values, float("nan"))
    token_values = torch.where(active, token_values, _garbage(vgen, (B, T), padding).double())

    # Fill the padding with garbage (or zeros / NaN) so that a leak shows.
    def fill(x: Tensor) -> Tensor:
        return torch.where(active, x, _garbage(gen, (B, T), padding))

    return RolloutBatch(
        response_ids=torch.where(active, ids, torch.randint(0, VOCAB, (B, T), generator=gen)),
        response_mask=mask,
        rewards=torch.tensor(rewards, dtype=torch.float32),
        logp_old=fill(logp_old),
        entropy_old=fill(entropy_old),
        group_size=G,
        logp_ref=None if logp_ref is None else fill(logp_ref),
        token_values=token_values,
    )


@st.composite
def current_logp(
    draw: st.DrawFn, batch: RolloutBatch, max_log_ratio: float = 0.5, exact_fraction: bool = True
) -> Tensor:
    """``logp`` of a current policy near ``logp_old``: ``logp_old + δ``, ``|δ| ≤ max_log_ratio``.

    Clamped to ``≤ 0`` (a log-probability). With ``exact_fraction`` some tokens have ``δ = 0``
    exactly (ratio exactly 1). Padding holds garbage. Float32, no ``requires_grad`` (tests
    call ``.requires_grad_()`` themselves).
    """
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(batch.response_mask.shape)
    delta = (2.0 * torch.rand(shape, generator=gen) - 1.0) * max_log_ratio
    if exact_fraction and draw(st.booleans()):
        delta = torch.where(torch.rand(shape, generator=gen) < 0.3, torch.zeros(()), delta)
    active = batch.response_mask.bool()
    old = torch.where(active, batch.logp_old, torch.zeros(()))
    logp = (old + delta).clamp(max=0.0)
    return torch.where(active, logp, _garbage(gen, shape, "random")).float()


@st.composite
def current_entropy(draw: st.DrawFn, batch: RolloutBatch, max_log_change: float = 0.5) -> Tensor:
    """Entropy ``H_θ`` of the current policy: ``entropy_old · exp(u)``, ``|u| ≤ max_log_change``.

    Some tokens keep exactly ``entropy_old`` (no decrease, no increase), some are a fresh
    ordinary value (so zero ``entropy_old`` positions can increase too). Non-negative on
    response tokens, garbage on padding, float32, detached.
    """
    seed = draw(st.integers(0, 2**31 - 1))
    gen = torch.Generator().manual_seed(seed)
    shape = tuple(batch.response_mask.shape)
    old = torch.where(batch.response_mask.bool(), batch.entropy_old, torch.zeros(()))
    u = (2.0 * torch.rand(shape, generator=gen) - 1.0) * max_log_change
    h = old * torch.exp(u)
    pick = torch.rand(shape, generator=gen)
    h = torch.where(pick < 0.2, old, h)
    h = torch.where(pick > 0.9, 5.0 * torch.rand(shape, generator=gen), h)
    return torch.where(batch.response_mask.bool(), h, _garbage(gen, shape, "random")).float()


@st.composite
def batch_and_policy(
    draw: st.DrawFn, max_log_ratio: float = 0.5, **batch_kwargs: object
) -> tuple[RolloutBatch, Tensor, Tensor]:
    """``(batch, logp, entropy)``: a batch and a current policy's log-probs and entropies."""
    batch = draw(rollout_batches(**batch_kwargs))  # type: ignore[arg-type]
    logp = draw(current_logp(batch, max_log_ratio=max_log_ratio))
    entropy = draw(current_entropy(batch))
    return batch, logp, entropy


@st.composite
def group_permutations(draw: st.DrawFn, batch: RolloutBatch) -> list[list[int]]:
    """One permutation of ``range(G)`` per group (``[N][G]``), for :func:`permute_within_groups`."""
    G = batch.group_size
    return [draw(st.permutations(list(range(G)))) for _ in range(batch.num_groups)]


# ---------------------------------------------------------------------------------------------
# Helpers: transformations whose effect on the advantages/loss the spec tests predict.
# ---------------------------------------------------------------------------------------------


def pad_tensor(x: Tensor, mask: Tensor, value: float) -> Tensor:
    """``x`` with every padding position (``mask == 0``) set to ``value`` (NaN allowed)."""
    return torch.where(mask.bool(), x, torch.full_like(x, value))


def pad_with(batch: RolloutBatch, value: float, ids_value: int = 0) -> RolloutBatch:
    """The same batch with new padding contents: ``value`` in ``logp_old``, ``entropy_old``,
    ``logp_ref`` and ``ids_value`` in ``response_ids``. Response tokens are untouched."""
    m = batch.response_mask
    return batch.replace(
        response_ids=torch.where(
            m.bool(), batch.response_ids, torch.full_like(batch.response_ids, ids_value)
        ),
        logp_old=pad_tensor(batch.logp_old, m, value),
        entropy_old=pad_tensor(batch.entropy_old, m, value),
        logp_ref=None if batch.logp_ref is None else pad_tensor(batch.logp_ref, m, value),
        token_values=None
        if batch.token_values is None
        else pad_tensor(batch.token_values, m, value),
    )


def with_requested_values(batch: RolloutBatch, cfg: object, seed: int = 0) -> RolloutBatch:
    """``batch`` as a training loop hands it to ``advantages`` under ``cfg``: when
    ``cfg.values_needed()`` asks for Monte-Carlo values (VinePPO), ``token_values`` gets a
    value ``c/8`` in [0, 1] at every prefix (every prefix is a step start, which satisfies any
    request), drawn from a generator seeded by ``seed``; otherwise the batch is unchanged.
    For tests whose subject is not the values (shapes, bounds, engines' losses)."""
    if cfg.values_needed() is None:
        return batch
    gen = torch.Generator().manual_seed(seed)
    values = torch.randint(0, 9, tuple(batch.response_mask.shape), generator=gen) / 8
    return batch.replace(token_values=values.to(batch.response_mask.device, torch.float64))


def add_padding_columns_tensor(x: Tensor, k: int, value: float = 0.0) -> Tensor:
    """``[B, T] → [B, T+k]``: ``k`` extra columns holding ``value`` on the right."""
    extra = torch.full((x.shape[0], k), value, dtype=x.dtype)
    return torch.cat([x, extra], dim=1)


def add_padding_columns(batch: RolloutBatch, k: int, value: float = 0.0) -> RolloutBatch:
    """The same batch ``k`` columns wider: the new columns are padding (mask 0) and hold
    ``value`` (ids hold 0). Every response token keeps its position."""
    changes: dict[str, Tensor] = {}
    for name in _TOKEN_FIELDS:
        x = getattr(batch, name)
        if x is None:
            continue
        fill = 0 if name in ("response_ids", "response_mask") else value
        changes[name] = add_padding_columns_tensor(x, k, fill)
    return batch.replace(**changes)


def row_permutation(batch: RolloutBatch, perm: list[int] | list[list[int]]) -> Tensor:
    """``[B]`` long row index: new row ``g·G + j`` is old row ``g·G + perm_g[j]``.

    ``perm`` is one permutation of ``range(G)`` applied to every group, or one per group.
    Index any ``[B, ...]`` tensor with it to follow the permutation (``adv[index]``).
    """
    G, N = batch.group_size, batch.num_groups
    perms = perm if perm and isinstance(perm[0], (list, tuple)) else [perm] * N
    if len(perms) != N or any(sorted(p) != list(range(G)) for p in perms):  # type: ignore[arg-type]
        raise ValueError(f"perm: expected permutations of range({G}), one or {N} of them")
    return torch.tensor([g * G + j for g, p in enumerate(perms) for j in p], dtype=torch.long)


def permute_within_groups(batch: RolloutBatch, perm: list[int] | list[list[int]]) -> RolloutBatch:
    """The batch with the completions of each group reordered (see :func:`row_permutation`)."""
    index = row_permutation(batch, perm)
    changes = {
        name: getattr(batch, name)[index]
        for name in (*_TOKEN_FIELDS, "rewards", "outcome_rewards")
        if getattr(batch, name) is not None
    }
    return batch.replace(**changes)


def flush_tiny_entropies(batch: RolloutBatch, below: float = 1e-20) -> RolloutBatch:
    """``batch`` with every rollout entropy in ``(0, below)`` set to exact 0.

    For tests whose derivation needs the floor eps_H to be negligible beside every non-zero
    entropy, and a scaling by 2^k to be exact in float32 (it is not for subnormals, which lose
    bits or flush to 0). The "subnormal" regime's exact zeros and ordinary values are kept.
    """
    H = batch.entropy_old
    return batch.replace(entropy_old=torch.where(H < below, torch.zeros_like(H), H))


def concat_batches(a: RolloutBatch, b: RolloutBatch) -> RolloutBatch:
    """``a``'s groups followed by ``b``'s (same ``G``). The narrower one gets padding columns
    (holding 0) so the widths match; ``logp_ref`` is kept only when both have it."""
    if a.group_size != b.group_size:
        raise ValueError(
            f"group_size: expected equal group sizes, got {a.group_size} and {b.group_size}"
        )
    Ta, Tb = a.response_mask.shape[1], b.response_mask.shape[1]
    if Ta < Tb:
        a = add_padding_columns(a, Tb - Ta)
    elif Tb < Ta:
        b = add_padding_columns(b, Ta - Tb)
    both_ref = a.logp_ref is not None and b.logp_ref is not None
    both_values = a.token_values is not None and b.token_values is not None

    def outcome(x: RolloutBatch) -> Tensor:
        return x.rewards if x.outcome_rewards is None else x.outcome_rewards

    any_outcome = a.outcome_rewards is not None or b.outcome_rewards is not None
    return RolloutBatch(
        response_ids=torch.cat([a.response_ids, b.response_ids]),
        response_mask=torch.cat([a.response_mask, b.response_mask]),
        rewards=torch.cat([a.rewards, b.rewards]),
        logp_old=torch.cat([a.logp_old, b.logp_old]),
        entropy_old=torch.cat([a.entropy_old, b.entropy_old]),
        group_size=a.group_size,
        logp_ref=torch.cat([a.logp_ref, b.logp_ref]) if both_ref else None,
        outcome_rewards=torch.cat([outcome(a), outcome(b)]) if any_outcome else None,
        token_values=torch.cat([a.token_values, b.token_values]) if both_values else None,
    )


# ---------------------------------------------------------------------------------------------
# Configurations: every switch of an algorithm, drawn.
# ---------------------------------------------------------------------------------------------

#: For each ``str`` switch of a ``Config``, the module constant that lists its choices.
CHOICES = {
    "loss_agg_mode": "LOSS_AGG_MODES",
    "stats": "STATS",
    "negative_shaping": "NEGATIVE_SHAPING",
    "entropy_mean": "ENTROPY_MEANS",
    "ratio": "RATIOS",
    "kl_anchor": "KL_ANCHORS",
    "advantage": "ADVANTAGES",
    "kl_denominator": "KL_DENOMINATORS",
    "entropy_source": "ENTROPY_SOURCES",
    "mapping": "MAPPINGS",
    "normalise": "NORMALISE_SETS",
    "boundaries": "BOUNDARIES",
    "selection": "SELECTIONS",
}

#: Numeric fields drawn from a few values (the others keep their defaults).
NUMERIC = {
    "kl_coef": (0.0, 0.04, 1.0),
    "alpha_1": (0.0, 1.0, 3.0),
    "alpha_2": (0.0, 0.1, 1.0),
    "beta_1": (0.0, 1.0, 3.0),
    "beta_2": (0.0, 0.1, 1.0),
    "entropy_decrease_tol": (0.0, 1e-4),
    "max_len": (None, 16),
    "omega_power": (1, 2),
}


def switch_strategies(name: str) -> dict[str, st.SearchStrategy]:
    """One strategy per switch of ``name``'s ``Config``: every ``bool`` field, every ``str``
    field (its choices from the module constant in :data:`CHOICES`; a ``str`` field without
    one raises ``KeyError``, so a new switch cannot escape the tests) and the numeric fields
    in :data:`NUMERIC`."""
    import dataclasses

    mod = algorithms.get(name)
    out: dict[str, st.SearchStrategy] = {}
    for f in dataclasses.fields(mod.Config):
        default = getattr(mod.Config(), f.name)
        if isinstance(default, bool):
            out[f.name] = st.booleans()
        elif isinstance(default, str):
            out[f.name] = st.sampled_from(getattr(mod, CHOICES[f.name]))
        elif f.name in NUMERIC:
            out[f.name] = st.sampled_from(NUMERIC[f.name])
    return out


@st.composite
def configs(draw: st.DrawFn, name: str, **fixed: object):
    """A valid ``Config`` of algorithm ``name`` with every switch drawn (``fixed`` pins some)."""
    mod = algorithms.get(name)
    values = {k: draw(v, label=k) for k, v in switch_strategies(name).items() if k not in fixed}
    return mod.Config(**values, **fixed)
