"""The contract between an algorithm file and every loop that drives it.

What an algorithm is given and what it declares, and the checks at that boundary:

- ``RolloutBatch``: the one data structure every algorithm reads (``B = N·G`` completions,
  groups in consecutive rows; ``refimpl.core``'s docstring has the notation), validated when
  it is made, and the checks of what a loop passes beside it (``check_batch``,
  ``check_policy_tensor``, ``check_advantages``);
- ``AlgorithmConfig``: the fields every algorithm's ``Config`` has and what it answers a
  loop, the ranges a ``Config``'s annotations state (``contract.Coef``, ``contract.Range``,
  ...), and ``check_config``, which reads those annotations when a ``Config`` is made (the
  same type check reads a run's settings in ``refimpl.settings``).

Every check raises ``ValueError("<argument>: expected ...")`` naming the argument. The
mathematics the algorithms share is in ``refimpl.core``, which reads this module; this module
reads only ``refimpl.types.typecheck``, the one check of a value against its annotation.
"""

from __future__ import annotations

import functools
import math
import typing
from dataclasses import dataclass, fields, replace
from typing import Annotated, NamedTuple

import torch
from jaxtyping import Bool
from torch import Tensor

from refimpl.types.typecheck import check_value, type_options

# ---------------------------------------------------------------------------------------------
# Input validation: every public function fails with a ValueError that names the argument.
# ---------------------------------------------------------------------------------------------


def require(condition: bool, argument: str, expectation: str) -> None:
    """Raise ``ValueError("<argument>: expected <expectation>")`` unless ``condition``."""
    if not condition:
        raise ValueError(f"{argument}: expected {expectation}")


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
    """``B = N·G`` sampled completions, groups in consecutive rows (``refimpl.core``'s
    notation).

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
            rewards, because :func:`refimpl.batch_stages.shape_rewards` may change ``rewards``.
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
        self._validate_logp("logp_old", active, "the rollout policy's")
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
            self._validate_logp("logp_ref", active, "the frozen reference's")

    def _validate_logp(self, name: str, active: Tensor, whose: str) -> None:
        """A recorded log-prob field: ``[B, T]`` floats, finite and ≤ 0 on response tokens,
        detached."""
        x = getattr(self, name)
        _check_matrix(x, name, tuple(active.shape))  # type: ignore[arg-type]
        require(bool(torch.isfinite(x[active]).all()), name, "finite log-probs on response tokens")
        require(bool((x[active] <= LOGP_TOLERANCE).all()), name, "log-probs ≤ 0 on response tokens")
        require(
            not x.requires_grad,
            name,
            f"a detached tensor ({whose} log-probs never carry gradient: pass {name}.detach())",
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
    magnitudes = torch.where(batch.response_mask.bool(), adv.detach().double().abs(), 0.0)
    total = float(magnitudes.sum())
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
# The ranges of Config fields. A Config declares each field's range in its annotation,
# ``alpha_2: contract.Coef = 0.1``: ``Coef`` is ``Annotated[float, Range(0, COEF_LIMIT)]``, a
# float in that range. ``check_config`` reads the annotation; a numeric field without a range
# must only be finite. The common kinds of range are below; an algorithm with a range of its
# own writes ``Annotated[float, contract.Range(...)]`` in its file (STEER's token weights).
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
SUCCESS_THRESHOLD = 0.5  # outcome r ≥ this: a success, every Config's default (toy r ∈ {0, 1})


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


@dataclass(frozen=True)
class AlgorithmConfig:
    """The contract every algorithm's ``Config`` fulfils: a frozen dataclass that subclasses
    this one, so it has the fields below, which every training loop reads directly. Each
    ``Config`` states ``kl_coef`` and ``loss_agg_mode``; the other six set DAPO's batch
    mechanisms (run by the loops, ``refimpl.batch_stages``): off, with DAPO's values for when
    on. A ``Config`` names one only where its paper changes it (``diff grpo.py dapo.py``).
    An algorithm adds its own fields; one it annotates with a plain type keeps the range here.

    The methods answer, for one configuration, what a training loop must provide; an
    algorithm whose answer differs from the default here overrides them (TEPO: the reference
    and the current entropy, in float32; GTPO: the rollout's entropies in its advantages;
    Dr. GRPO: the generation budget; the entropy bonus: the gradient through the entropy; GPG:
    the batch-wide advantage scale α). A training loop reads them and never an algorithm's
    name.
    """

    kl_coef: Coef  # β of a k3 KL term (0: none)
    loss_agg_mode: str  # one of core.AGG_MODES the algorithm's loss supports
    success_threshold: float = SUCCESS_THRESHOLD  # a success (dynamic sampling, O⁺/O⁻) [A]
    dynamic_sampling: bool = False  # DAPO's filter: only groups with 0 < #successful < G (Eq. 11)
    overlong_shaping: bool = False  # DAPO's soft length penalty r + scale·R_len(|o|) (Eq. 13)
    overlong_cache_frac: Fraction = 0.2  # its band L_cache / L_max = 4096 / 20480 (DAPO §4.1) [C]
    # its scale: half the reward range, DAPO's ±1 penalty on {0, 1} rewards (dapo.py) [C]
    overlong_penalty_scale: Annotated[float, Range(0.0, COEF_LIMIT, low_open=True)] = 0.5
    overlong_filter: bool = False  # DAPO's truncation mask: rows without EOS leave the loss

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
        (``refimpl.batch_stages.kept_group_advantages``)."""
        return 1.0

    def values_needed(self) -> ValueRequest | None:
        """The Monte-Carlo values of ``π_old`` the advantages read (``batch.token_values``),
        or ``None``: every algorithm but VinePPO. A loop that gets a request runs the credit
        oracle (``refimpl.sampling.monte_carlo_values.training_values``) on the rollout policy,
        after sampling and before ``advantages``."""
        return None

    def for_generation_budget(self, max_new_tokens: int) -> AlgorithmConfig:
        """This configuration for completions of at most ``max_new_tokens`` tokens: itself,
        unless a field defaults to that budget (Dr. GRPO's ``max_len``)."""
        return self

    def for_run(self, max_new_tokens: int) -> RunNeeds:
        """Everything above that a run needs, asked once where a run is resolved
        (``refimpl.settings.plan.resolve``): this configuration for the run's budget and its
        answers (the reader's loop asks each question where it uses the answer)."""
        cfg = self.for_generation_budget(max_new_tokens)
        return RunNeeds(cfg, cfg.needs_reference(), cfg.reads_current_entropy(),
                        cfg.needs_float32_entropy(), cfg.values_needed())  # fmt: skip

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


class RunNeeds(NamedTuple):
    """``AlgorithmConfig.for_run``: a Config for a run's budget, and what it asks of the run."""

    config: AlgorithmConfig  # for completions of at most L_max tokens (for_generation_budget)
    reference: bool  # needs_reference(): π_ref, a frozen copy of the warm start
    current_entropy: bool  # reads_current_entropy(): H_θ against the rollout's H_old
    float32_entropy: bool  # needs_float32_entropy(): both entropies in float32 under bf16
    values: ValueRequest | None  # values_needed(): V̂ of π_old (VinePPO's), None for none


#: The fields every algorithm's ``Config`` has (``AlgorithmConfig``'s annotations).
CONFIG_FIELDS: tuple[str, ...] = tuple(AlgorithmConfig.__annotations__)


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
    shared = typing.get_type_hints(AlgorithmConfig, include_extras=True)
    out = {}
    for f in fields(cls):
        hint, found = _split_range(own[f.name])
        if found is None and f.name in shared:
            found = _split_range(shared[f.name])[1]
        out[f.name] = (hint, found)
    return out


def check_config(cfg: object, agg_modes: tuple[str, ...]) -> None:
    """Validate every field of an algorithm ``Config``: its type (``check_value`` of its
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
        checked = check_value(value, hint, argument, None if name == "loss_agg_mode" else found)
        if checked is not value:  # an int for a float, stored as that float
            object.__setattr__(cfg, name, checked)  # a frozen dataclass: its own field
        if name == "loss_agg_mode":
            require(value in agg_modes, argument, f"one of {agg_modes}, got {value!r}")


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
