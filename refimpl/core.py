"""Shared plumbing for every algorithm file: the rollout batch and the tensor primitives.

Everything here is written once and used by the algorithm files in ``refimpl/algorithms``
(directly, or through the functions they call); those files hold only the mathematics that
distinguishes one algorithm from another, so an algorithm file plus this one is the whole
reading list of that algorithm. What the training loops do to a batch around an algorithm
(dynamic sampling, reward shaping, minibatch splits) lives in ``refimpl.mechanisms``. This
module knows nothing of models, tokenizers or tasks.

Notation
--------
A batch holds ``N`` groups of ``G`` completions, ``B = N·G`` rows, groups stored as
consecutive rows: rows ``g·G … g·G+G−1`` answer prompt ``g``. Per-token tensors are
``[B, T]``; ``m[i,t] ∈ {0,1}`` is the response mask and ``|o_i| = Σ_t m[i,t]``.

Shapes in the signatures
------------------------
The public functions here and in the algorithm files state their tensor shapes with
jaxtyping annotations, one dimension name per quantity, the same everywhere:

    B   completions in the batch (rows), B = N·G
    T   padded length of a completion (columns of a per-token tensor)
    G   group size (completions per prompt)
    N   groups (prompts) in the batch

``Float[Tensor, "B T"]`` is a per-token float tensor, ``Float[Tensor, " B"]`` one value per
completion, ``Float[Tensor, ""]`` a scalar, ``Float[Tensor, "N G T"]`` a grouped view (a
leading space, as in ``" B"``, means nothing to jaxtyping: it only keeps linters from reading
the string as a Python expression). Masks may be
float 0/1 or bool, hence ``Shaped[Tensor, "B T"]`` (any dtype); ``Bool`` is a bool tensor,
``Real`` a float or integer one. ``"*dims"`` is any shape, the same for every argument
that names it (the elementwise primitives). A dimension name binds at its first use in a
call: every tensor of that call must agree with it.

The annotations are checked at run time only in the test session: ``tests/conftest.py``
wraps the public functions of this module and of the algorithm files whose annotations fix a
rank in ``jaxtyped(typechecker=beartype)``. Anywhere else (training, the notebooks) they are
plain annotations: no wrapper, no check, no cost (``tests/spec/test_shapes.py`` shows both).

Masking convention
------------------
Padding positions (``m = 0``) may hold *anything*, NaN included: every primitive here
selects with ``torch.where(mask, x, 0)`` rather than multiplying ``x·m`` (``NaN·0 = NaN``),
so no value on padding can reach a result or a gradient. The property tests rely on this.

Aggregation modes over a per-token loss ``ℓ[i,t]``:

    token-mean               Σ_{i,t} m ℓ / Σ_{i,t} m                     DAPO, GTPO, TEPO, GPG
    seq-mean-token-mean      mean_i ( Σ_t m ℓ / |o_i| )                  GRPO
    seq-mean-token-sum-norm  Σ_{i,t} m ℓ / (B' · L_max),  L_max constant Dr. GRPO
    seq-mean                 mean_i ℓ_i   for a per-sequence loss ℓ_i     GRPO-S, GSPO

The first three names are verl's ``agg_loss`` modes, and with verl 0.9.1 they compute the
same formulas (``seq-mean-token-sum-norm`` there is the seq-mean of token sums divided by
``loss_scale_factor``, our ``L_max``; older verl releases divided the batch's token sum by
the horizon only, with no ``1/B'``). ``seq-mean`` is ours: verl has no per-sequence loss.
``tests/spec/test_peers.py`` compares the three with verl's ``agg_loss`` when verl is
installed.

Sequences with ``|o_i| = 0`` are skipped by every mode: the "mean over sequences" runs over
the ``B'`` non-empty rows. An empty batch (no response token at all) gives loss 0, still
attached to the graph, with a warning.
"""

from __future__ import annotations

import functools
import hashlib
import math
import numbers
import os
import types
import typing
import warnings
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Annotated, Literal

import torch
from jaxtyping import Bool, Float, Float32, Float64, Shaped
from torch import Tensor

AggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm", "seq-mean"]
AGG_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum-norm",
    "seq-mean",
)

#: Per-token modes (a loss that has one value per token, as every surrogate except
#: GSPO's and GRPO-S's sequence forms).
TOKEN_AGG_MODES: tuple[str, ...] = AGG_MODES[:3]

#: Default ``eps`` in every std denominator: verl's value (TRL 1.16 uses 1e-4).
EPS = 1e-6

# ---------------------------------------------------------------------------------------------
# Input validation: every public function fails with a ValueError that names the argument.
# ---------------------------------------------------------------------------------------------


def require(condition: bool, argument: str, expectation: str) -> None:
    """Raise ``ValueError("<argument>: expected <expectation>")`` unless ``condition``."""
    if not condition:
        raise ValueError(f"{argument}: expected {expectation}")


# ---------------------------------------------------------------------------------------------
# The ranges of Config fields. A Config declares each field's range in its annotation,
# ``alpha_2: core.Coef = 0.1``: ``Coef`` is ``Annotated[float, Range(0, COEF_LIMIT)]``, a float
# in that range. ``check_config`` reads the annotation; a numeric field without a range must
# only be finite. The common kinds of range are below; an algorithm with a range of its own
# writes ``Annotated[float, core.Range(...)]`` in its file (STEER's token weights).
#
# The bounds keep every loss finite: no finite value of a field can make it inf or NaN
# (``kl_coef=1e300`` did). The loss is a float32 sum over the tokens (at most 2^128 ≈ 3.4e38),
# and ``check_advantages`` keeps Σ|A| ≤ 2^120:
#  - the clipped surrogate of a token is at most (1 + ε_high)·|A| where A > 0 (the clip's own
#    bound), so ``ClipHigh`` ≤ CLIP_HIGH_LIMIT = 10 keeps its sum ≤ 11·2^120 < 2^124 (papers use
#    0.2-0.28; a clip at 11 × the old probability no longer trusts any region);
#  - each other term is a coefficient times a per-token factor that is bounded whatever the
#    batch: k3 ≤ e^20 (its Δ is clamped to ±20), an entropy ≤ log V (< 45 for any vocabulary
#    that int64 ids can index), KL-Cov's |log w| < 89 wherever w itself fits in float32. With
#    every coefficient ≤ COEF_LIMIT = 1e4 (``Coef``) a term is ≤ 1e4·e^20 ≈ 4.9e12 per token,
#    so the sum stays finite up to 3e25 tokens (any batch that fits in memory has fewer);
#  - the reward weights (GTPO's α, GRPO-S's β, DAPO's overlong penalty scale) are bounded the
#    same way: their products with float32 rewards stay finite in the float64 advantages.
# tests/test_safety_library.py computes every loss at these edges (finite) and refuses a value
# just beyond them.
# ---------------------------------------------------------------------------------------------

#: The largest loss coefficient and reward weight a Config takes (see above).
COEF_LIMIT = 1e4
#: The largest ``clip_eps_high`` (the clip at ``1 + ε_high`` bounds the surrogate by it).
CLIP_HIGH_LIMIT = 10.0
#: float32's largest value: a number every loss must be able to hold.
FLOAT32_MAX = float(torch.finfo(torch.float32).max)


@dataclass(frozen=True)
class Range:
    """The values a numeric field takes: ``low`` to ``high``, each end closed unless it is
    ``*_open``. ``text`` is how an error states it (default: ``a value in [low, high]``)."""

    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    text: str = ""

    def __contains__(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return bool(above and below)

    def __str__(self) -> str:
        left, right = "(["[not self.low_open], ")]"[not self.high_open]
        return self.text or f"a value in {left}{self.low:g}, {self.high:g}{right}"


#: A loss coefficient or reward weight, in [0, COEF_LIMIT].
Coef = Annotated[float, Range(0.0, COEF_LIMIT)]
#: A fraction of the batch's tokens, or of L_max, in (0, 1].
Fraction = Annotated[float, Range(0.0, 1.0, low_open=True, text="a fraction in (0, 1]")]
#: The lower clip range ε_low, in [0, 1) (the clip at 1 − ε_low stays above 0).
ClipLow = Annotated[float, Range(0.0, 1.0, high_open=True)]
#: The upper clip range ε_high, in [0, CLIP_HIGH_LIMIT].
ClipHigh = Annotated[float, Range(0.0, CLIP_HIGH_LIMIT)]
#: A value > 0 (an eps in a denominator).
Positive = Annotated[float, Range(0.0, math.inf, low_open=True, text="a value > 0")]
#: A finite value ≥ 0 (a tolerance).
NonNegative = Annotated[float, Range(0.0, math.inf, text="a finite value ≥ 0")]
#: A length in tokens: a positive int below 2^31.
Length = Annotated[
    int, Range(0, 2**31, low_open=True, high_open=True, text="a positive length below 2^31 tokens")
]
#: A seed of ``torch.Generator.manual_seed`` or numpy's ``default_rng``: an int ≥ 0.
Seed = Annotated[int, Range(0, math.inf, text="an integer ≥ 0 (or None)")]


class AlgorithmConfig:
    """The contract every algorithm's ``Config`` fulfils: a frozen dataclass that subclasses
    this class and has (at least) the fields annotated here, which every training loop reads
    directly. Each algorithm declares them with its own defaults and adds its own fields; a
    field it annotates with a plain type keeps the range annotated here.

    The methods answer, for one configuration, what a training loop must provide; an
    algorithm whose answer differs from the default here overrides them (TEPO: the reference
    and the current entropy, in float32; GTPO: the rollout's entropies in its advantages;
    Dr. GRPO: the generation budget; the entropy bonus: the gradient through the entropy; GPG:
    the batch-wide advantage scale α). A training loop reads them and never an algorithm's
    name.
    """

    kl_coef: Coef  # β of a k3 KL term (0: none)
    loss_agg_mode: str  # one of AGG_MODES the algorithm's loss supports
    success_threshold: float  # r ≥ this counts as a success (dynamic sampling, O⁺/O⁻ splits)
    dynamic_sampling: bool  # DAPO's filter: train on groups with 0 < #successful < G only
    overlong_shaping: bool  # DAPO's soft length penalty added to the reward (Eq. 13)
    overlong_cache_frac: Fraction  # its band L_cache as a fraction of L_max
    overlong_penalty_scale: Annotated[float, Range(0.0, COEF_LIMIT, low_open=True)]  # its weight
    overlong_filter: bool  # DAPO's truncation mask: rows without EOS leave the loss

    def needs_reference(self) -> bool:
        """Whether the loss reads ``batch.logp_ref`` (a KL term to the frozen reference)."""
        return self.kl_coef > 0

    def reads_rollout_entropy(self) -> bool:
        """Whether the advantages read ``batch.entropy_old``, the rollout's per-token
        entropies (a loop that computes advantages without them, as verl's estimators are
        called, must hand them over)."""
        return False

    def reads_current_entropy(self) -> bool:
        """Whether the loss compares the current policy's entropy with the rollout's."""
        return False

    def differentiates_entropy(self) -> bool:
        """Whether the loss needs the gradient *through* the current entropy (a bonus on it)."""
        return False

    def needs_float32_entropy(self) -> bool:
        """Whether the loss compares entropies more finely than bfloat16 logits resolve, so
        that a loop running its model in bf16 must compute ``entropy_old`` and the current
        entropy in float32."""
        return False

    def advantage_std_set(self) -> str | None:
        """Over which values the advantages are divided by a standard deviation: ``"group"``,
        the ``G`` rewards (or completions) of a group, as GRPO's z-score; ``"group_tokens"`` or
        ``"batch_tokens"``, the response tokens of a group or of the whole batch (token
        rewards normalised per token); ``None``, no std division: the advantage is a reward
        minus an average of the group's rewards; ``"value_difference"``, no std division and
        no reward: the advantage is a difference of two values, each a probability of success
        (VinePPO). What it answers bounds every advantage (a z-score among ``L`` values is at
        most ``(L−1)/√L`` in size, a centred reward at most the group's reward range, a value
        difference at most 1), which the spec checks for every algorithm."""
        return "group"

    def advantage_scale(self, batch: RolloutBatch) -> float:
        """A constant of the whole batch that the loss multiplies every advantage by (GPG's α;
        1 for every other algorithm). A loop whose loss sees micro-batches that split groups
        (TRL, verl) cannot let the loss compute it, so it folds it into the advantages
        (``refimpl.mechanisms.kept_group_advantages``)."""
        return 1.0

    def values_needed(self) -> ValueRequest | None:
        """The Monte-Carlo values of ``π_old`` the advantages read (``batch.token_values``),
        or ``None``: every algorithm but VinePPO. A loop that gets a request runs the credit
        oracle (``refimpl.diagnostics.credit_oracle.training_values``) on the rollout policy,
        after sampling and before ``advantages``."""
        return None

    def for_generation_budget(self, max_new_tokens: int) -> AlgorithmConfig:
        """This configuration for completions of at most ``max_new_tokens`` tokens: itself,
        unless a field defaults to that budget (Dr. GRPO's ``max_len``)."""
        return self

    def for_update(self, batch: RolloutBatch, adv: Tensor) -> AlgorithmConfig:
        """This configuration for one update on the whole rollout ``batch`` (advantages
        ``adv``), whose loss calls see it in minibatches: itself, unless the loss reads a
        constant of the whole batch that a minibatch cannot give (STEER's |Ω| range with
        ``normalise="batch"``). A loop that splits a rollout calls it once per rollout and
        passes the result to every loss call of that rollout."""
        return self


@dataclass(frozen=True)
class ValueRequest:
    """What ``Config.values_needed`` asks a training loop for: ``V̂(q, o_<t)`` of the rollout
    policy, each from ``rollouts`` (K) continuations at the run's sampling settings, at the
    prefixes ``o_<t`` that start a step. ``step_ends``: the characters whose token closes a
    step (a prefix is valued at ``t = 0`` and right after each of them); ``None``: every
    prefix (every token is a step, the credit oracle's own definition)."""

    rollouts: int
    step_ends: str | None = None


#: The fields every algorithm's ``Config`` has (``AlgorithmConfig``'s annotations).
CONFIG_FIELDS: tuple[str, ...] = tuple(AlgorithmConfig.__annotations__)


# ---------------------------------------------------------------------------------------------
# Types from annotations: the one check of a value against its annotation, for a Config's
# fields (``check_config``) and for the settings of a run read from config.json or the
# command line (``refimpl.settings``).
# ---------------------------------------------------------------------------------------------


def type_options(hint: object) -> tuple[tuple[object, ...], bool]:
    """The types the annotation ``hint`` allows besides None, and whether it allows None:
    ``float | None`` → ``((float,), True)``, ``Literal["a", "b"]`` → one option."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return tuple(a for a in args if a is not type(None)), type(None) in args
    return (hint,), False


def _fits(value: object, kind: object) -> bool:
    origin = typing.get_origin(kind)
    if origin is Literal:  # its choices are checked where the setting is (naming them)
        return isinstance(value, str)
    if origin is tuple:  # tuple[str, ...]: a list of strings in JSON
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    if kind is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):  # a bool is an int to Python, never to a setting
        return False
    if kind is int:
        return isinstance(value, numbers.Integral)
    if kind is float:
        return isinstance(value, numbers.Real)
    if kind is str:
        return isinstance(value, str)
    if kind is Path:
        return isinstance(value, (str, os.PathLike))
    return True  # a type this check does not know: left to the setting's own check


def fits_type(value: object, hint: object) -> bool:
    """Whether ``value`` fits the annotation ``hint``: a bool for ``bool`` (never 1 or
    ``"no"``, which is truthy), an int that is not a bool for ``int``, a number that is not a
    bool for ``float``, a string for ``str``, a ``Literal`` (its choices are the setting's own
    check) and ``Path``, a list or tuple of strings for ``tuple[str, ...]``; None where the
    annotation allows it. A type it does not know fits."""
    options, optional = type_options(hint)
    if value is None and optional:
        return True
    return any(_fits(value, kind) for kind in options)


_TYPE_NAMES = {bool: "a bool (True or False)", int: "an int", float: "a float", str: "a string"}
_JSON_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def expected_type(hint: object, *, json: bool = False) -> str:
    """What ``fits_type`` expects of ``hint``, as an error says it: in Python's words (``a
    float``), or with ``json`` in JSON's (``a number or null``)."""
    options, optional = type_options(hint)
    if not json:
        return _TYPE_NAMES.get(options[0], "a string")  # type: ignore[call-overload]
    names = [
        "a list of strings"
        if typing.get_origin(o) is tuple
        else _JSON_TYPE_NAMES.get(o, "a string")  # type: ignore[call-overload]
        for o in options
    ]
    return " or ".join(names) + (" or null" if optional else "")


def _split_range(hint: object) -> tuple[object, Range | None]:
    """An annotation without its ``Range`` (``Annotated[float, Range(...)] | None`` →
    ``float | None``), and the range."""
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        return base, next((e for e in extras if isinstance(e, Range)), None)
    options, optional = type_options(hint)
    if len(options) == 1 and options[0] is not hint:
        base, found = _split_range(options[0])
        return (base | None if optional else base), found  # type: ignore[operator]
    return hint, None


@functools.cache
def _field_specs(cls: type) -> dict[str, tuple[object, Range | None]]:
    """``{field: (annotation, range)}`` of the dataclass ``cls``: its own annotation's range,
    else the contract's (``AlgorithmConfig``'s annotation of a shared field)."""
    own = typing.get_type_hints(cls, include_extras=True)
    contract = typing.get_type_hints(AlgorithmConfig, include_extras=True)
    out = {}
    for f in fields(cls):
        hint, found = _split_range(own[f.name])
        if found is None and f.name in contract:
            found = _split_range(contract[f.name])[1]
        out[f.name] = (hint, found)
    return out


def _shown(value: object) -> str:
    """``repr(value)``, except for an int too long to read (``2**1100`` has 332 digits)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"{'-' if value < 0 else ''}an int of {value.bit_length()} bits"
    return repr(value)


def _is_number(value: object, kind: object) -> bool:
    """A Config's numbers fit a tensor operation: an int an int64, a float finite (an int
    given for a float field one that a float holds: it is stored as that float)."""
    if kind is int:
        return -(2**63) <= value < 2**63  # type: ignore[operator]
    if kind is float:
        try:
            return math.isfinite(float(value))  # type: ignore[arg-type]
        except OverflowError:  # an int that no float holds (2**1100)
            return False
    return True


def check_config(cfg: object, agg_modes: tuple[str, ...] = AGG_MODES) -> None:
    """Validate every field of an algorithm ``Config``: its type (``fits_type`` of its
    annotation; numbers finite and within int64), its range (the annotation's ``Range``), and
    ``loss_agg_mode`` in ``agg_modes`` (the modes the algorithm's loss supports). Raises
    ``ValueError`` naming ``Config.<field>``; the file's own checks (choices, cross-field
    rules) come after this call. An int given for a float field is stored as that float
    (``eps=1`` is ``eps=1.0``): a Python int beyond int64 (``2**70``) would otherwise overflow
    in the first tensor operation."""
    cls = type(cfg).__qualname__
    for name, (hint, found) in _field_specs(type(cfg)).items():
        value = getattr(cfg, name)
        argument = f"{cls}.{name}"
        options, optional = type_options(hint)
        if value is None and optional:
            continue
        kind = options[0] if len(options) == 1 and options[0] in _TYPE_NAMES else None
        if kind is not None:
            got = f"got {_shown(value)}"
            if isinstance(value, bool) and kind is not bool:
                got += " (a bool)"
            elif kind is float and isinstance(value, numbers.Real):
                got += " (finite values only)"
            elif kind is int and isinstance(value, numbers.Integral):
                got += " (an int64 only)"
            ok = fits_type(value, kind) and _is_number(value, kind)
            require(ok, argument, f"{expected_type(kind)}, {got}")
            if kind is float and not isinstance(value, float):
                object.__setattr__(cfg, name, float(value))  # a frozen dataclass: its own field
                value = getattr(cfg, name)
        if name == "loss_agg_mode":
            require(value in agg_modes, argument, f"one of {agg_modes}, got {value!r}")
        elif found is not None:
            ok = fits_type(value, float) and _is_number(value, float) and value in found
            require(ok, argument, f"{found}, got {_shown(value)}")


def check_config_type(cfg: object, config_class: type) -> None:
    """Refuse another algorithm's ``Config``, or None or anything else that is not one
    (``config_class`` is the calling algorithm's; its ``advantages`` and ``loss`` call this):
    the fields would be read by name, so GSPO's clip range (3e-4) would silently become
    GRPO's, or a missing field would fail deep inside the loss."""
    if isinstance(cfg, config_class):
        return
    own = config_class.__module__.rsplit(".", 1)[-1]
    other = type(cfg)
    if not isinstance(cfg, AlgorithmConfig):  # None, a dict, ...
        got = "None" if cfg is None else f"a {other.__qualname__}"
        raise ValueError(f"cfg: expected a {own}.Config, got {got} (pass {own}.Config(...))")
    got = f"{other.__module__.rsplit('.', 1)[-1]}.{other.__qualname__}"
    raise ValueError(
        f"cfg: expected a {own}.Config, got {got} (another algorithm's settings; pass "
        f"{own}.Config(...) to {own}'s functions)"
    )


def require_choice(value: object, argument: str, choices: tuple[str, ...]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    require(value in choices, argument, f"one of {choices}, got {value!r}")


def _check_matrix(x: Tensor, name: str, shape: tuple[int, int]) -> None:
    require(isinstance(x, Tensor), name, f"a torch.Tensor, got {type(x).__name__}")
    require(tuple(x.shape) == shape, name, f"shape {list(shape)}, got {list(x.shape)}")
    require(x.is_floating_point(), name, f"a floating-point tensor, got {x.dtype}")


# ---------------------------------------------------------------------------------------------
# The rollout batch: the one data structure every algorithm reads.
# ---------------------------------------------------------------------------------------------


@dataclass
class RolloutBatch:
    """``B = N·G`` sampled completions, groups in consecutive rows (see module docstring).

    Attributes:
        response_ids: ``[B, T]`` long, the generated tokens (padding arbitrary).
        response_mask: ``[B, T]`` 1.0 on generated tokens (EOS included), 0.0 on padding.
        rewards: ``[B]`` outcome reward of each completion; finite.
        logp_old: ``[B, T]`` log-prob of each token under the rollout policy ``π_old``.
        entropy_old: ``[B, T]`` full-vocabulary entropy of ``π_old`` at each position,
            detached (never carries gradient); ≥ 0 on response tokens.
        group_size: ``G ≥ 2``, divides ``B``.
        logp_ref: ``[B, T]`` under the frozen reference model, when a KL term needs it.
        outcome_rewards: optional ``[B]`` outcome rewards *before* reward shaping: each loop
            (``loop.py``, the Trainer, the TRL and HF paths) sets them to the verifier's
            rewards, because :func:`refimpl.mechanisms.shape_rewards` may change ``rewards``.
            Success (``r ≥ success_threshold``: GTPO's and GRPO-S's O⁺/O⁻ split, dynamic
            sampling) is decided on these, so shaping changes how much a completion is worth,
            never whether it succeeded. ``None``: ``rewards`` are the outcome rewards.
        token_values: optional ``[B, T]`` float, ``V̂(q, o_<t)``: the rollout policy's
            Monte-Carlo value of the prefix before token ``t``, in [0, 1], where the loop
            valued that prefix (a step start: always ``t = 0``), NaN where it did not; set by
            the loops when ``Config.values_needed()`` asks (VinePPO). Padding arbitrary.
    """

    response_ids: Tensor
    response_mask: Tensor
    rewards: Tensor
    logp_old: Tensor
    entropy_old: Tensor
    group_size: int
    logp_ref: Tensor | None = None
    outcome_rewards: Tensor | None = None
    token_values: Tensor | None = None

    def __post_init__(self) -> None:
        self.validate()

    # -- shape helpers --------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        """``B``, the number of completions."""
        return int(self.response_mask.shape[0])

    @property
    def num_groups(self) -> int:
        """``N = B / G``."""
        return self.batch_size // self.group_size

    @property
    def lengths(self) -> Tensor:
        """``|o_i|`` as a float ``[B]`` tensor."""
        return self.response_mask.sum(dim=1)

    def replace(self, **changes: object) -> RolloutBatch:
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def select_groups(self, keep: Bool[Tensor, " N"]) -> RolloutBatch:
        """The sub-batch made of the groups where ``keep`` (bool ``[N]``) is true."""
        require(
            keep.dtype == torch.bool and keep.shape == (self.num_groups,),
            "keep",
            f"a bool tensor of shape [{self.num_groups}]",
        )
        rows = keep.repeat_interleave(self.group_size)
        changes = {
            f.name: getattr(self, f.name)[rows]
            for f in fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }
        return replace(self, **changes)

    # -- validation -----------------------------------------------------------------------
    def validate(self) -> None:
        """Check shapes, dtypes and value ranges; raise ``ValueError`` naming the field."""
        m = self.response_mask
        require(isinstance(m, Tensor) and m.dim() == 2, "response_mask", "a 2-D [B, T] tensor")
        require(
            m.device.type != "meta",
            "response_mask",
            "a tensor with values (not one on the meta device, which holds none)",
        )
        self._validate_devices(m.device)
        B, T = m.shape
        # One message for every empty shape: the algorithms reshape into [N, G, T] groups and
        # take means over them, which an empty batch cannot give (GTPO and GRPO-S fail in a
        # reshape, the others return NaN statistics).
        require(
            B > 0 and T > 0,
            "response_mask",
            f"a non-empty batch (B ≥ 1 completions of T ≥ 1 positions), got shape [{B}, {T}]",
        )
        require(
            isinstance(self.group_size, int)
            and not isinstance(self.group_size, bool)
            and self.group_size >= 2,
            "group_size",
            f"an int ≥ 2 (a group needs at least two completions), got {self.group_size!r}",
        )
        require(
            B % self.group_size == 0,
            "group_size",
            f"to divide the batch size B={B}, got group_size={self.group_size}",
        )
        require(bool(((m == 0) | (m == 1)).all()), "response_mask", "values in {0, 1}")
        require(
            isinstance(self.response_ids, Tensor)
            and tuple(self.response_ids.shape) == (B, T)
            and not self.response_ids.is_floating_point(),
            "response_ids",
            f"an integer tensor of shape [{B}, {T}]",
        )
        require(
            isinstance(self.rewards, Tensor) and tuple(self.rewards.shape) == (B,),
            "rewards",
            f"a tensor of shape [{B}]",
        )
        for name in ("rewards", "outcome_rewards"):
            r = getattr(self, name)
            if r is None and name == "outcome_rewards":
                continue
            require(
                isinstance(r, Tensor) and tuple(r.shape) == (B,),
                name,
                f"{'None or ' if name == 'outcome_rewards' else ''}a tensor of shape [{B}]",
            )
            require(not r.is_complex(), name, f"a real-valued tensor, got {r.dtype}")
            require(bool(torch.isfinite(r).all()), name, "finite values (no NaN or inf)")
            require(
                not r.requires_grad,
                name,
                "a detached tensor (rewards are constants of the loss: with a gradient, the "
                f"advantages would carry one into them; pass {name}.detach())",
            )
        self._validate_records(m.bool())
        if self.token_values is not None:
            self._validate_token_values(m.bool())

    def _validate_token_values(self, active: Tensor) -> None:
        """``token_values``: a detached ``[B, T]`` float tensor, in [0, 1] or NaN (not valued)
        on response tokens, valued at the first token of every non-empty row (``V̂(q)``)."""
        V = self.token_values
        B, T = active.shape
        _check_matrix(V, "token_values", (B, T))
        v = V[active]
        require(
            bool((torch.isnan(v) | ((v >= 0) & (v <= 1))).all()),
            "token_values",
            "values in [0, 1] (or NaN where a prefix was not valued) on response tokens",
        )
        require(
            not bool(torch.isnan(V[:, 0][active[:, 0]]).any()),
            "token_values",
            "a value at the first token of every non-empty row (V̂(q), the prompt's value)",
        )
        require(not V.requires_grad, "token_values", "a detached tensor (values are constants)")

    def _validate_devices(self, device: torch.device) -> None:
        """Every tensor field on the device of ``response_mask``."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Tensor) and f.name != "response_mask":
                require(
                    value.device == device,
                    f.name,
                    f"a tensor on the device of response_mask ({device}), got {value.device}",
                )

    def _validate_records(self, active: Tensor) -> None:
        """The per-token records of the rollout (and the reference): ``[B, T]`` floats,
        finite on response tokens, log-probs ≤ 0 and entropies ≥ 0, never carrying
        gradient (they are constants of the loss: with a gradient, ``w = exp(logp −
        logp_old)`` would carry none when ``logp_old`` is ``logp``, on-policy)."""
        B, T = active.shape
        _check_matrix(self.logp_old, "logp_old", (B, T))
        require(
            bool(torch.isfinite(self.logp_old[active]).all()),
            "logp_old",
            "finite log-probs on response tokens",
        )
        require(
            bool((self.logp_old[active] <= LOGP_TOLERANCE).all()),
            "logp_old",
            "log-probs ≤ 0 on response tokens",
        )
        require(
            not self.logp_old.requires_grad,
            "logp_old",
            "a detached tensor (the rollout policy's log-probs never carry gradient: "
            "pass logp_old.detach())",
        )
        _check_matrix(self.entropy_old, "entropy_old", (B, T))
        h = self.entropy_old[active]
        require(
            bool(torch.isfinite(h).all()) and bool((h >= 0).all()),
            "entropy_old",
            "finite, non-negative entropies on response tokens",
        )
        require(
            not self.entropy_old.requires_grad,
            "entropy_old",
            "a detached tensor (rollout entropies never carry gradient)",
        )
        if self.logp_ref is not None:
            _check_matrix(self.logp_ref, "logp_ref", (B, T))
            require(
                bool(torch.isfinite(self.logp_ref[active]).all()),
                "logp_ref",
                "finite log-probs on response tokens",
            )
            require(
                bool((self.logp_ref[active] <= LOGP_TOLERANCE).all()),
                "logp_ref",
                "log-probs ≤ 0 on response tokens",
            )
            require(
                not self.logp_ref.requires_grad,
                "logp_ref",
                "a detached tensor (the frozen reference's log-probs never carry gradient: "
                "pass logp_ref.detach())",
            )


#: How far above 0 a recorded log-prob may lie (float32 rounding of a log-softmax near 0).
LOGP_TOLERANCE = 1e-4

#: What a tensor of the current policy holds on response tokens, by its argument's name: a
#: log-prob above 0 is a probability above 1, an entropy below 0 no entropy.
POLICY_RANGES: dict[str, tuple[object, str]] = {
    "logp": (lambda x: x <= LOGP_TOLERANCE, "log-probs ≤ 0 on response tokens"),
    "entropy": (lambda x: x >= 0, "entropies ≥ 0 on response tokens"),
}


def check_batch(batch: object) -> None:
    """``ValueError`` naming ``batch`` unless it is a :class:`RolloutBatch` (``advantages``
    and ``loss`` call it first: None would be an AttributeError deep inside)."""
    if not isinstance(batch, RolloutBatch):
        got = "None" if batch is None else f"a {type(batch).__qualname__}"
        raise ValueError(f"batch: expected a RolloutBatch, got {got}")


def check_policy_tensor(x: Tensor, batch: RolloutBatch, name: str) -> None:
    """Validate a ``[B, T]`` tensor computed under the current policy (``logp``, ``entropy``,
    and the advantages ``adv``): the batch's shape and device, finite values on response
    tokens, and the range ``POLICY_RANGES`` gives its name."""
    check_batch(batch)
    _check_matrix(x, name, tuple(batch.response_mask.shape))  # type: ignore[arg-type]
    device = batch.response_mask.device
    require(x.device == device, name, f"a tensor on the batch's device ({device}), got {x.device}")
    values = x.detach()[batch.response_mask.bool()]
    require(bool(torch.isfinite(values).all()), name, "finite values on response tokens")
    if name in POLICY_RANGES:
        rule, expectation = POLICY_RANGES[name]
        require(bool(rule(values).all()), name, expectation)  # type: ignore[operator]


#: The largest total ``Σ_{i,t} m·|A|`` a loss accepts. Every loss sums per-token terms of size
#: about ``w·|A|`` in float32 (largest 2^128 ≈ 3.4e38); advantages this large would overflow
#: that sum to inf (rewards of ±3e38 do: Dr. GRPO's, GPG's and RLOO's unscaled advantages
#: are as large as the rewards). 2^120 leaves a factor 256 for the ratios, GPG's α and the
#: KL term.
ADVANTAGE_TOTAL_LIMIT = 2.0**120


def check_advantages(adv: Tensor, batch: RolloutBatch) -> None:
    """Validate advantages passed to a ``loss``: ``[B, T]``, finite on response tokens, and
    small enough that the float32 loss cannot overflow (``ADVANTAGE_TOTAL_LIMIT``)."""
    check_policy_tensor(adv, batch, "adv")
    total = float(masked_sum(adv.detach().double().abs(), batch.response_mask))
    require(
        total <= ADVANTAGE_TOTAL_LIMIT,
        "adv",
        f"advantages whose magnitudes sum to at most 2^120 ≈ {ADVANTAGE_TOTAL_LIMIT:.2g} over "
        f"the response tokens (the float32 loss would overflow), got {total:.3g}: rescale the "
        "rewards",
    )


def check_advantage_values(adv: Tensor) -> None:
    """Refuse (``ValueError`` naming the rewards) advantages that are not finite or do not fit
    in float32: computed from rewards near float32's largest value, they would silently become
    ±inf (call it on the float64 result before the cast, or on a float32 one after scaling)."""
    largest = float(adv.detach().abs().max()) if adv.numel() else 0.0
    limit = torch.finfo(torch.float32).max
    require(
        math.isfinite(largest) and largest <= limit,
        "rewards",
        f"rewards whose advantages fit in float32 (|A| ≤ {limit:.3g}), got |A| up to "
        f"{largest:.3g}: rescale the rewards",
    )


# ---------------------------------------------------------------------------------------------
# Masked reductions.
# ---------------------------------------------------------------------------------------------


def masked(x: Float[Tensor, "*dims"], mask: Shaped[Tensor, "*dims"]) -> Float[Tensor, "*dims"]:
    """``x`` where ``mask`` is 1, exactly 0 elsewhere (NaN-safe, unlike ``x * mask``)."""
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_sum(
    x: Float[Tensor, "*dims"], mask: Shaped[Tensor, "*dims"], dim: int | None = None
) -> Float[Tensor, "*reduced"]:
    """``Σ m·x`` over ``dim`` (all elements when ``None``)."""
    y = masked(x, mask)
    return y.sum() if dim is None else y.sum(dim=dim)


def masked_mean(
    x: Float[Tensor, "*dims"], mask: Shaped[Tensor, "*dims"], dim: int | None = None
) -> Float[Tensor, "*reduced"]:
    """``Σ m·x / Σ m`` over ``dim``; 0 where the mask is empty (never NaN)."""
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def group_view(x: Shaped[Tensor, " B *rest"], group_size: int) -> Shaped[Tensor, "N G *rest"]:
    """``[B, ...] → [N, G, ...]``: rows ``g·G … g·G+G−1`` become group ``g``."""
    return x.reshape(-1, group_size, *x.shape[1:])


def broadcast_to_tokens(
    per_sequence: Float[Tensor, " B"], mask: Shaped[Tensor, "B T"]
) -> Float32[Tensor, "B T"]:
    """``[B] → [B, T]``: the sequence value on every response token, exactly 0 on padding."""
    return masked(per_sequence[:, None].expand_as(mask).to(torch.float32), mask)


# ---------------------------------------------------------------------------------------------
# Group statistics of outcome rewards.
# ---------------------------------------------------------------------------------------------


def group_mean_std(
    values: Float[Tensor, " B"], group_size: int
) -> tuple[Float64[Tensor, " B"], Float64[Tensor, " B"]]:
    """Per-group mean and unbiased (Bessel-corrected) std, broadcast back to ``[B]``."""
    v = group_view(values.to(torch.float64), group_size)
    mean = v.mean(dim=1, keepdim=True).expand_as(v)
    std = v.std(dim=1, unbiased=True, keepdim=True).expand_as(v)
    return mean.reshape(-1), std.reshape(-1)


def group_degenerate(values: Float[Tensor, " B"], group_size: int) -> Bool[Tensor, " B"]:
    """``[B]`` bool: the row's group has all-equal values (zero variance)."""
    v = group_view(values, group_size)
    flat = v.amax(dim=1) == v.amin(dim=1)
    return flat.repeat_interleave(group_size)


def group_normalize(
    rewards: Float[Tensor, " B"], group_size: int, *, scale_by_std: bool = True, eps: float = EPS
) -> Float32[Tensor, " B"]:
    """Group-relative advantage ``[B]``: ``(r − mean_G r) / (std_G r + eps)``.

    With ``scale_by_std=False`` it is ``r − mean_G r`` (Dr. GRPO, GPG). A group whose rewards
    are all equal gets exactly 0 (its mean is subtracted in float64 and then forced to 0 so
    that rounding in the mean cannot leak a tiny non-zero value through ``1/eps``).
    Computed in float64 and returned as float32; a value that does not fit float32 is
    refused (``check_advantage_values``), never turned into inf.
    """
    mean, std = group_mean_std(rewards, group_size)
    centred = rewards.to(torch.float64) - mean
    adv = centred / (std + eps) if scale_by_std else centred
    adv = torch.where(group_degenerate(rewards, group_size), torch.zeros_like(adv), adv)
    check_advantage_values(adv)
    return adv.to(torch.float32)


def successful(batch: RolloutBatch, threshold: float) -> Bool[Tensor, " B"]:
    """``[B]`` bool: completion ``i`` succeeded, ``r_i ≥ threshold`` (every Config's
    ``success_threshold``, 0.5 for the toy tasks' {0, 1} rewards), decided on the *outcome*
    rewards (before any reward shaping; see ``RolloutBatch.outcome_rewards``)."""
    outcome = batch.rewards if batch.outcome_rewards is None else batch.outcome_rewards
    return outcome >= threshold


# ---------------------------------------------------------------------------------------------
# Ratios, the clipped surrogate and the KL estimator.
# ---------------------------------------------------------------------------------------------


def token_ratio(
    logp: Float[Tensor, "B T"], logp_old: Float[Tensor, "B T"], mask: Shaped[Tensor, "B T"]
) -> Float32[Tensor, "B T"]:
    """``w[i,t] = exp(logp − logp_old)`` on response tokens, 1 on padding (float32)."""
    log_ratio = masked(logp.float() - logp_old.float(), mask)
    return torch.exp(log_ratio)


def sequence_log_ratio(
    logp: Float[Tensor, "B T"], logp_old: Float[Tensor, "B T"], mask: Shaped[Tensor, "B T"]
) -> Float32[Tensor, " B"]:
    """``log s_i = (1/|o_i|) Σ_t (logp − logp_old)[i,t]`` (GSPO Eq. 7); 0 for empty rows."""
    return masked_mean(logp.float() - logp_old.float(), mask, dim=1)


def sequence_token_ratio(
    logp: Float[Tensor, "B T"], logp_old: Float[Tensor, "B T"], mask: Shaped[Tensor, "B T"]
) -> Float32[Tensor, "B T"]:
    """``[B, T]`` GSPO-token ratio ``s[i,t] = sg[s_i] · π_θ(o_{i,t}) / sg[π_θ(o_{i,t})]``
    (GSPO Eq. 13-14), 1 on padding, float32.

    Its value is exactly ``s_i = exp(log s_i)`` on every response token; its gradient reaches
    ``logp[i,t]`` alone, with weight ``s_i`` (the stop-gradients remove the ``1/|o_i|``
    coupling of the plain geometric mean). The exponent is ``sg[log s_i] + (logp − sg[logp])``
    with the bracket evaluated first: it is exactly 0 in value, so the sum is exactly
    ``log s_i``. Evaluated left to right, ``log s_i + logp`` would first round to the float32
    spacing of ``|logp|`` (3.8e-6 at ``|logp| ≈ 45``) and move the value of ``s_i``.
    """
    logp = logp.float()
    log_s = sequence_log_ratio(logp, logp_old, mask)
    # Value log s_i exactly; d/dlogp[i,t] = 1 at t only.
    log_ratio = log_s.detach()[:, None] + (logp - logp.detach())
    return torch.exp(masked(log_ratio, mask))


def clipped_surrogate(
    ratio: Float[Tensor, "*dims"],
    adv: Float[Tensor, "*dims"],
    clip_eps_low: float,
    clip_eps_high: float,
) -> Float[Tensor, "*dims"]:
    """``clipped(x, A) = min(x·A, clip(x, 1−ε_low, 1+ε_high)·A)``, elementwise.

    The loss is its negative. The gradient through ``x`` vanishes once the ratio leaves the
    trust region *in the direction the advantage pushes it*: above ``1+ε_high`` for ``A > 0``,
    below ``1−ε_low`` for ``A < 0``.
    """
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps_low, 1.0 + clip_eps_high) * adv
    return torch.minimum(unclipped, clipped)


def dual_clipped_surrogate(
    ratio: Float[Tensor, "*dims"],
    adv: Float[Tensor, "*dims"],
    clip_eps_low: float,
    clip_eps_high: float,
    clip_ratio_c: float,
) -> Float[Tensor, "*dims"]:
    """Dual-clip PPO (Ye et al. 2020, verl's ``compute_policy_loss_vanilla``), elementwise:
    ``clipped(x, A)`` for ``A ≥ 0``, ``max(clipped(x, A), c·A)`` for ``A < 0``; the loss is its
    negative.

    For ``A < 0`` the plain clipped surrogate ``x·A`` falls without bound as the ratio grows;
    the dual clip stops it at ``c·A`` (``c > 1``), so a token the policy has already made far
    more likely than ``π_old`` cannot dominate the loss. Above ``x = c`` its gradient is 0.
    """
    surrogate = clipped_surrogate(ratio, adv, clip_eps_low, clip_eps_high)
    capped = torch.maximum(surrogate, clip_ratio_c * adv)
    return torch.where(adv < 0, capped, surrogate)


def kl_k3(
    logp: Float[Tensor, "*dims"],
    logp_ref: Float[Tensor, "*dims"],
    mask: Shaped[Tensor, "*dims"] | None = None,
) -> Float32[Tensor, "*dims"]:
    """Schulman's k3 estimator of ``KL(π_θ ‖ π_ref)``: ``exp(Δ) − Δ − 1``, ``Δ = logp_ref − logp``.

    Non-negative, unbiased in expectation over tokens sampled from ``π_θ``. ``Δ`` is clamped
    to ±20 (as verl does) so a single wild token cannot overflow ``exp``. With ``mask``,
    ``Δ`` is set to 0 on padding *before* ``exp`` (so ``kl = 0`` there): a NaN on padding
    then reaches neither the value nor the gradient (``0 · NaN`` in a backward pass is NaN).
    """
    delta = logp_ref.float() - logp.float()
    if mask is not None:
        delta = masked(delta, mask)
    delta = torch.clamp(delta, -20.0, 20.0)
    # expm1(Δ) − Δ, not exp(Δ) − Δ − 1: for |Δ| near float32's resolution the latter cancels
    # to a *negative* value (Δ = −5.96e-8 gave −5.96e-8; found by the thorough test profile).
    return torch.expm1(delta) - delta


# ---------------------------------------------------------------------------------------------
# Aggregation of a per-token (or per-sequence) loss into the scalar that is minimised.
# ---------------------------------------------------------------------------------------------


def aggregate(
    loss: Float[Tensor, "B T"] | Float[Tensor, " B"],
    mask: Shaped[Tensor, "B T"],
    mode: str,
    *,
    max_len: int | None = None,
) -> Float[Tensor, ""]:
    """Reduce ``loss`` to a scalar with one of the modes in the module docstring.

    Args:
        loss: ``[B, T]`` per-token loss, or ``[B]`` per-sequence loss for ``"seq-mean"``.
        mask: ``[B, T]`` response mask (``[B, T]`` also for ``"seq-mean"``, to find the
            empty rows).
        mode: one of ``AGG_MODES``.
        max_len: the constant ``L_max`` of ``"seq-mean-token-sum-norm"`` (Dr. GRPO).
    """
    require(mode in AGG_MODES, "loss_agg_mode", f"one of {AGG_MODES}, got {mode!r}")
    lengths = mask.sum(dim=1)
    nonempty = lengths > 0
    n_seq = nonempty.sum()
    if n_seq == 0:
        warnings.warn("empty batch: no response token to train on; loss is 0", stacklevel=2)
        return masked_sum(loss if loss.dim() == 2 else loss[:, None].expand_as(mask), mask)
    if mode == "token-mean":
        return masked_sum(loss, mask) / mask.sum()
    if mode == "seq-mean-token-mean":
        per_seq = masked_sum(loss, mask, dim=1) / lengths.clamp(min=1)
        return masked_sum(per_seq, nonempty) / n_seq
    if mode == "seq-mean-token-sum-norm":
        require(
            max_len is not None and max_len > 0,
            "max_len",
            "a positive constant L_max for seq-mean-token-sum-norm",
        )
        return masked_sum(loss, mask) / (n_seq * max_len)
    # "seq-mean": loss is already one value per sequence.
    require(
        loss.dim() == 1 and loss.shape[0] == mask.shape[0],
        "loss",
        f"a per-sequence [B] loss for seq-mean, got shape {list(loss.shape)}",
    )
    return masked_sum(loss, nonempty) / n_seq


# ---------------------------------------------------------------------------------------------
# Per-token quantities several algorithm files share (Clip-Cov, KL-Cov) and the loss metrics.
# ---------------------------------------------------------------------------------------------


def token_covariance(
    logp: Float[Tensor, "B T"], adv: Float[Tensor, "B T"], mask: Shaped[Tensor, "B T"]
) -> Float32[Tensor, "B T"]:
    """``[B, T]`` float32 centred covariance term of Cui et al. (Clip-Cov, KL-Cov), 0 on padding:

        cov[i,t] = (A[i,t] − mean A) · (logp[i,t] − mean logp),  means over the response tokens

    Detached: it selects tokens and carries no gradient. Its mean over the response tokens is
    ``diagnostics.logp_advantage_covariance``."""
    logp = logp.detach().float()
    adv = adv.detach().float()
    centred = (adv - masked_mean(adv, mask)) * (logp - masked_mean(logp, mask))
    return masked(centred, mask)


def covariance_selection_count(fraction: float, mask: Shaped[Tensor, "B T"]) -> int:
    """How many tokens Clip-Cov / KL-Cov act on: ``max(1, ⌊fraction · Σ m⌋)``, 0 when the batch
    has no response token (the authors' code, as in verl: at least one token per batch)."""
    n_tokens = float(mask.sum())
    return max(int(fraction * n_tokens), 1) if n_tokens > 0 else 0


def batch_generator(batch: RolloutBatch, seed: int | None) -> torch.Generator | None:
    """A CPU generator for an algorithm's random token subset, seeded by ``seed`` and the
    batch's response tokens (in row order, padding excluded): the same batch always draws the
    same subset, different batches draw independently, and a run is reproducible. ``None``
    (torch's global generator) when ``seed`` is ``None``. Clip-Cov's subset and the forking
    tokens' random control draw from it."""
    if seed is None:
        return None
    tokens = batch.response_ids[batch.response_mask.bool()].to("cpu", torch.int64).numpy()
    digest = hashlib.blake2b(tokens.tobytes(), digest_size=8, key=str(seed).encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)


def ratio_metrics(
    ratio: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    mask: Shaped[Tensor, "B T"],
    clip_eps_low: float,
    clip_eps_high: float,
) -> dict[str, float]:
    """Clip fractions (tokens whose gradient the clip switched off, low and high side) and
    the mean ratio, over response tokens."""
    with torch.no_grad():
        high = (ratio > 1.0 + clip_eps_high) & (adv > 0)
        low = (ratio < 1.0 - clip_eps_low) & (adv < 0)
        return {
            "clip_frac_high": float(masked_mean(high.float(), mask)),
            "clip_frac_low": float(masked_mean(low.float(), mask)),
            "ratio_mean": float(masked_mean(ratio, mask)),
        }


def common_metrics(
    batch: RolloutBatch, logp: Float[Tensor, "B T"], adv: Float[Tensor, "B T"]
) -> dict[str, float]:
    """Metrics every loss reports: approximate KL to the rollout policy (k3 of π_θ against
    π_old, averaged over response tokens) and the advantage mean/std over response tokens."""
    with torch.no_grad():
        mask = batch.response_mask
        kl_old = masked_mean(kl_k3(logp.detach(), batch.logp_old, mask), mask)
        a_mean = masked_mean(adv.float(), mask)
        a_var = masked_mean((adv.float() - a_mean) ** 2, mask)
        return {
            "approx_kl_old": float(kl_old),
            "adv_mean": float(a_mean),
            "adv_std": float(a_var.sqrt()),
        }


# ---------------------------------------------------------------------------------------------
# Normalisation over a masked set (GTPO Eq. 4 and GRPO-S normalise token or sequence
# rewards over a chosen subset of a group, then apply the statistics to every member).
# ---------------------------------------------------------------------------------------------


def masked_zscore(
    values: Float[Tensor, " N *rest"], in_set: Shaped[Tensor, " N *rest"], eps: float = EPS
) -> Float64[Tensor, " N *rest"]:
    """``(x − mean_S x) / (std_S x + eps)`` with the statistics of a masked set ``S``.

    ``values`` and ``in_set`` are ``[N, ...]``. For each leading index ``n`` the mean and the
    unbiased (Bessel-corrected) std run over the elements of ``values[n]`` where ``in_set[n]``
    is true; *every* element of ``values[n]`` (inside ``S`` or not) is then normalised with
    them. When ``S`` holds fewer than 2 elements or all its values are equal, the result is
    exactly 0 for that ``n`` (never NaN, and no rounding residue amplified by ``1/eps``).
    Elements outside ``S`` must be finite. Computed and returned in float64.
    """
    shape = values.shape
    x = values.to(torch.float64).reshape(shape[0], -1)
    s = in_set.bool().reshape(shape[0], -1)
    count = s.sum(dim=1)
    mean = masked_sum(x, s, dim=1) / count.clamp(min=1)
    centred = x - mean[:, None]
    var = masked_sum(centred**2, s, dim=1) / (count - 1).clamp(min=1)
    inf = torch.tensor(float("inf"), dtype=torch.float64, device=x.device)
    highest = torch.where(s, x, -inf).amax(dim=1)
    lowest = torch.where(s, x, inf).amin(dim=1)
    degenerate = (count < 2) | (highest == lowest)
    z = centred / (var.sqrt()[:, None] + eps)
    z = torch.where(degenerate[:, None], torch.zeros((), dtype=torch.float64), z)
    return z.reshape(shape)


# ---------------------------------------------------------------------------------------------
# The spec's reference: GRPO's group z-score written as the paper writes it.
# ---------------------------------------------------------------------------------------------


def reference_group_zscore(
    batch: RolloutBatch, eps: float, *, scale_by_std: bool = True
) -> Float32[Tensor, "B T"]:
    """GRPO's outcome advantage (§4.1.2) as plain loops over groups, completions and positions:
    the reference the spec compares an algorithm's vectorised ``advantages`` with when that
    algorithm's advantage *is* this z-score (its ``reference_advantages`` returns this).

        A_{i,t} = (r_i − mean_G r) / (std_G r + eps)   on every response token of o_i

    with the Bessel-corrected std, ``A = 0`` for a group whose rewards are all equal (its
    z-score is 0/0) and on padding. With ``scale_by_std=False`` the std is left out,
    ``A_{i,t} = r_i − mean_G r``, as ``group_normalize``'s switch does. Written without
    tensors and sharing no code with ``group_normalize``, so that a slip in either shows up as
    a difference (``tests/spec/test_common.py::test_vectorised_equals_reference``)."""
    B, T = batch.response_mask.shape
    G = batch.group_size
    A = torch.zeros(B, T, dtype=torch.float32)
    r = batch.rewards.tolist()
    for g in range(batch.num_groups):
        rows = range(g * G, g * G + G)
        rewards = [r[i] for i in rows]
        mean = sum(rewards) / G
        std = (sum((x - mean) ** 2 for x in rewards) / (G - 1)) ** 0.5  # Bessel-corrected
        scale = std + eps if scale_by_std else 1.0
        for i in rows:
            A_i = 0.0 if max(rewards) == min(rewards) else (r[i] - mean) / scale
            for t in range(T):
                if batch.response_mask[i, t] == 1:
                    A[i, t] = A_i
    return A
