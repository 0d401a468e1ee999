"""Shared plumbing: the rollout batch, the tensor primitives of the algorithm files, and the
batch-level mechanisms the training loops run around an algorithm.

Everything here is written once. Most of it is what the algorithm files in
``refimpl/algorithms`` are built from, so that those files hold only the mathematics that
distinguishes one algorithm from another. The rest is called by the training loops only,
never by an algorithm file: the wrappers of the ``Config``'s contract methods
(``needs_reference``, ``reads_current_entropy``, ``differentiates_entropy``), DAPO's dynamic
sampling (``keep_groups``), overlong shaping (``shape_rewards``, ``overlong_cache_len``,
``overlong_penalty``) and overlong filter (``overlong_filter``), the minibatch split
(``split_groups``) and the advantages of split micro-batches (``kept_group_advantages``).
This module knows nothing of models, tokenizers or tasks.

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

import math
import warnings
from dataclasses import dataclass, fields, replace
from types import ModuleType
from typing import Literal

import torch
from jaxtyping import Bool, Float, Float32, Float64, Real, Shaped
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


class AlgorithmConfig:
    """The contract every algorithm's ``Config`` fulfils: a frozen dataclass that subclasses
    this class and has (at least) the fields annotated here, which every training loop reads
    directly. Each algorithm declares them with its own defaults and adds its own fields.

    The four methods answer, for one configuration, what a training loop must provide; an
    algorithm whose answer differs from the default here overrides them (TEPO: the reference
    and the current entropy, Dr. GRPO: the generation budget, the entropy bonus: the gradient
    through the entropy).
    """

    kl_coef: float  # β of a k3 KL term (0: none)
    loss_agg_mode: str  # one of AGG_MODES the algorithm's loss supports
    success_threshold: float  # r ≥ this counts as a success (dynamic sampling, O⁺/O⁻ splits)
    dynamic_sampling: bool  # DAPO's filter: train on groups with 0 < #successful < G only
    overlong_shaping: bool  # DAPO's soft length penalty added to the reward (Eq. 13)
    overlong_cache_frac: float  # its band L_cache as a fraction of L_max
    overlong_penalty_scale: float  # its weight (half the reward range)
    overlong_filter: bool  # DAPO's truncation mask: rows without EOS leave the loss

    def needs_reference(self) -> bool:
        """Whether the loss reads ``batch.logp_ref`` (a KL term to the frozen reference)."""
        return self.kl_coef > 0

    def reads_current_entropy(self) -> bool:
        """Whether the loss compares the current policy's entropy with the rollout's."""
        return False

    def differentiates_entropy(self) -> bool:
        """Whether the loss needs the gradient *through* the current entropy (a bonus on it)."""
        return False

    def for_generation_budget(self, max_new_tokens: int) -> AlgorithmConfig:
        """This configuration for completions of at most ``max_new_tokens`` tokens: itself,
        unless a field defaults to that budget (Dr. GRPO's ``max_len``)."""
        return self


#: The fields every algorithm's ``Config`` has (``AlgorithmConfig``'s annotations).
CONFIG_FIELDS: tuple[str, ...] = tuple(AlgorithmConfig.__annotations__)


# Checks for the config fields that several algorithms share; each algorithm's Config calls
# ``check_config(self)`` from ``__post_init__`` and checks its own extra fields next to it.
_SHARED_FIELD_RULES: dict[str, tuple[object, str]] = {
    "clip_eps_low": (lambda v: 0.0 <= v < 1.0, "a value in [0, 1)"),
    "clip_eps_high": (lambda v: v >= 0.0, "a value ≥ 0"),
    "kl_coef": (lambda v: v >= 0.0, "a value ≥ 0"),
    "eps": (lambda v: v > 0.0, "a value > 0"),
    "success_threshold": (lambda v: True, "a finite value"),
    "max_len": (lambda v: v > 0, "a positive length"),
    "overlong_cache_frac": (lambda v: 0.0 < v <= 1.0, "a fraction in (0, 1]"),
    "overlong_penalty_scale": (lambda v: v > 0.0, "a value > 0"),
}

# Fields that may be None (meaning "filled in by the trainer"): Dr. GRPO's max_len.
_OPTIONAL_FIELDS = ("max_len",)


def check_config(cfg: object, agg_modes: tuple[str, ...] = AGG_MODES) -> None:
    """Validate the fields every algorithm ``Config`` may share (clip ε, β, eps, …);
    ``loss_agg_mode`` must be one of ``agg_modes`` (the modes the algorithm's loss supports)."""
    cls = type(cfg).__qualname__
    for f in fields(cfg):  # type: ignore[arg-type]
        value = getattr(cfg, f.name)
        if f.name in _OPTIONAL_FIELDS and value is None:
            continue
        if f.name in _SHARED_FIELD_RULES:
            rule, expectation = _SHARED_FIELD_RULES[f.name]
            ok = isinstance(value, (int, float)) and math.isfinite(value) and rule(value)  # type: ignore[operator]
            require(ok, f"{cls}.{f.name}", f"{expectation}, got {value!r}")
        elif f.name == "loss_agg_mode":
            require(
                value in agg_modes, f"{cls}.loss_agg_mode", f"one of {agg_modes}, got {value!r}"
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
        outcome_rewards: optional ``[B]`` outcome rewards *before* reward shaping, set by
            :func:`shape_rewards`. Success (``r ≥ success_threshold``: GTPO's and GRPO-S's
            O⁺/O⁻ split, dynamic sampling) is decided on these, so shaping changes how much a
            completion is worth, never whether it succeeded. ``None``: ``rewards`` are the
            outcome rewards.
    """

    response_ids: Tensor
    response_mask: Tensor
    rewards: Tensor
    logp_old: Tensor
    entropy_old: Tensor
    group_size: int
    logp_ref: Tensor | None = None
    outcome_rewards: Tensor | None = None

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
        B, T = m.shape
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
        require(
            bool(torch.isfinite(self.rewards).all()), "rewards", "finite values (no NaN or inf)"
        )
        if self.outcome_rewards is not None:
            require(
                isinstance(self.outcome_rewards, Tensor)
                and tuple(self.outcome_rewards.shape) == (B,)
                and bool(torch.isfinite(self.outcome_rewards).all()),
                "outcome_rewards",
                f"None or a finite tensor of shape [{B}]",
            )
        active = m.bool()
        _check_matrix(self.logp_old, "logp_old", (B, T))
        require(
            bool(torch.isfinite(self.logp_old[active]).all()),
            "logp_old",
            "finite log-probs on response tokens",
        )
        require(
            bool((self.logp_old[active] <= 1e-4).all()),
            "logp_old",
            "log-probs ≤ 0 on response tokens",
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


def check_policy_tensor(x: Tensor, batch: RolloutBatch, name: str) -> None:
    """Validate a ``[B, T]`` tensor computed under the current policy (``logp``, ``entropy``)."""
    _check_matrix(x, name, tuple(batch.response_mask.shape))  # type: ignore[arg-type]
    require(
        bool(torch.isfinite(x.detach()[batch.response_mask.bool()]).all()),
        name,
        "finite values on response tokens",
    )


def check_advantages(adv: Tensor, batch: RolloutBatch) -> None:
    """Validate advantages passed to a ``loss``: ``[B, T]``, finite on response tokens."""
    check_policy_tensor(adv, batch, "adv")


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
    Computed in float64 and returned as float32.
    """
    mean, std = group_mean_std(rewards, group_size)
    centred = rewards.to(torch.float64) - mean
    adv = centred / (std + eps) if scale_by_std else centred
    adv = torch.where(group_degenerate(rewards, group_size), torch.zeros_like(adv), adv)
    return adv.to(torch.float32)


def success(rewards: Float[Tensor, " B"], threshold: float) -> Bool[Tensor, " B"]:
    """``[B]`` bool: completion ``i`` is successful when ``r_i ≥ threshold`` (every Config's
    ``success_threshold``, 0.5 for the toy tasks' {0, 1} rewards)."""
    return rewards >= threshold


def successful(batch: RolloutBatch, threshold: float) -> Bool[Tensor, " B"]:
    """``[B]`` bool: which completions succeeded, decided on the *outcome* rewards (before any
    reward shaping; see ``RolloutBatch.outcome_rewards``)."""
    outcome = batch.rewards if batch.outcome_rewards is None else batch.outcome_rewards
    return success(outcome, threshold)


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
# Mechanisms shared by several algorithms; each Config decides whether it is on.
# ---------------------------------------------------------------------------------------------


def needs_reference(cfg: AlgorithmConfig) -> bool:
    """Whether an algorithm's loss reads ``batch.logp_ref``: a KL term (``kl_coef > 0``)
    anchored at the frozen reference (not, as TEPO's ``kl_anchor="old"``, at ``π_old``).
    The trainers use it to decide whether to run the reference model at all."""
    return cfg.needs_reference()


def reads_current_entropy(cfg: AlgorithmConfig) -> bool:
    """Whether an algorithm's loss compares the current policy's entropy ``H_θ`` with the
    rollout's (TEPO's KL mask with ``entropy_source="current"``). Such a comparison is sound
    only when both entropies are computed in float32 (see ``Trainer``'s bf16 handling)."""
    return cfg.reads_current_entropy()


def differentiates_entropy(cfg: AlgorithmConfig) -> bool:
    """Whether an algorithm's loss needs the gradient *through* the current entropy ``H_θ``
    (an entropy bonus, ``entropy_coef > 0``); the trainers then pass ``H_θ`` undetached."""
    return cfg.differentiates_entropy()


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


def informative_groups(
    rewards: Float[Tensor, " B"], group_size: int, threshold: float
) -> Bool[Tensor, " N"]:
    """DAPO dynamic sampling (Eq. 11): ``[N]`` bool, keep groups with ``0 < #successful < G``.

    Pass the *outcome* rewards (before shaping) and the Config's ``success_threshold``.
    """
    n_success = group_view(success(rewards, threshold), group_size).sum(dim=1)
    return (n_success > 0) & (n_success < group_size)


def keep_groups(
    outcome: Float[Tensor, " B"], group_size: int, cfg: AlgorithmConfig
) -> Bool[Tensor, " N"]:
    """The groups a training loop trains on, ``[N]`` bool: with ``cfg.dynamic_sampling``
    DAPO's informative groups (:func:`informative_groups` at ``cfg.success_threshold``), else
    every group. Pass the outcome rewards (before shaping)."""
    if cfg.dynamic_sampling:
        return informative_groups(outcome, group_size, cfg.success_threshold)
    return torch.ones(outcome.shape[0] // group_size, dtype=torch.bool, device=outcome.device)


def overlong_filter(
    response_mask: Shaped[Tensor, "B T"], truncated: Bool[Tensor, " B"], cfg: AlgorithmConfig
) -> Shaped[Tensor, "B T"]:
    """The loss mask: with ``cfg.overlong_filter`` (DAPO's overlong filtering) the rows that
    hit the length budget without EOS (``truncated``, ``[B]`` bool) leave the loss; else
    ``response_mask`` itself. Apply it after the advantages: a truncated row still counts in
    its group's statistics, it only gets no gradient."""
    if not cfg.overlong_filter:
        return response_mask
    return torch.where(truncated[:, None], torch.zeros_like(response_mask), response_mask)


def gpg_alpha(rewards: Float[Tensor, " B"], group_size: int) -> float:
    """GPG's ``α = B / (B − M)`` (GPG §3), ``M`` the rows whose group has all-equal rewards
    (they carry no gradient); 1 when every group is flat (every advantage is 0 then)."""
    n_rows = rewards.shape[0]
    n_flat = int(group_degenerate(rewards, group_size).sum())
    return n_rows / (n_rows - n_flat) if n_rows > n_flat else 1.0


def kept_group_advantages(
    algorithm: ModuleType, batch: RolloutBatch, keep: Bool[Tensor, " N"], cfg: AlgorithmConfig
) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages of ``algorithm`` on the groups where ``keep`` holds, 0 on the
    others, for a loop whose loss sees micro-batches that split groups (TRL, verl).

    GPG's ``α`` is a constant of the whole batch, which such a micro-batch cannot compute:
    it is folded into the advantages (``−α·A·logp`` is linear in ``A``), and the loss then
    sees no rewards and computes ``α = 1``. A loop whose loss sees whole groups (the toy
    trainer) calls ``algorithm.advantages`` directly and lets the loss compute ``α``.
    """
    adv = torch.zeros_like(batch.response_mask)
    if not bool(keep.any()):
        return adv
    kept = batch.select_groups(keep)
    kept_adv = algorithm.advantages(kept, cfg)
    if algorithm.NAME == "gpg":
        kept_adv = kept_adv * gpg_alpha(kept.rewards, kept.group_size)
    adv[keep.repeat_interleave(batch.group_size)] = kept_adv.to(adv.dtype)
    return adv


def split_groups(n_groups: int, minibatches: int) -> list[range]:
    """The groups of each minibatch: ``minibatches`` consecutive ranges whose sizes differ by
    at most one (7 groups in 2 minibatches: 4 and 3, never 3, 3 and 1).

    With fewer groups than minibatches (dynamic sampling kept few), every group is its own
    minibatch: ``n_groups`` optimizer steps instead of ``minibatches``. No range is empty.
    """
    require(n_groups >= 0, "n_groups", f"a count ≥ 0, got {n_groups}")
    require(minibatches >= 1, "minibatches", f"a count ≥ 1, got {minibatches}")
    parts = min(minibatches, n_groups)
    bounds = [(k * n_groups) // parts for k in range(parts + 1)] if parts else [0]
    return [range(a, b) for a, b in zip(bounds[:-1], bounds[1:])]


def overlong_cache_len(max_len: int, cache_frac: float) -> int:
    """``L_cache = round(frac · L_max)``, at least 1: the soft-punishment band of DAPO Eq. 13.

    DAPO uses ``L_max = 20480``, ``L_cache = 4096`` (``frac = 0.2``); a Config stores the
    fraction (``overlong_cache_frac``) because ``L_max`` is the trainer's generation budget.
    """
    require(max_len > 0, "max_len", "a positive length budget L_max")
    require(
        0.0 < cache_frac <= 1.0, "overlong_cache_frac", f"a fraction in (0, 1], got {cache_frac}"
    )
    return max(1, min(max_len, round(cache_frac * max_len)))


def shape_rewards(
    rewards: Float[Tensor, " B"], lengths: Real[Tensor, " B"], max_len: int, cfg: AlgorithmConfig
) -> Float[Tensor, " B"]:
    """The reward the advantage sees: DAPO's soft overlong punishment added to the outcome
    reward when ``cfg.overlong_shaping`` is on, on the outcome's scale; else ``rewards``.

        r̃_i = r_i + c · R_len(|o_i|),   c = cfg.overlong_penalty_scale,
        R_len from :func:`overlong_penalty` with L_cache = overlong_cache_len(L_max, frac)

    DAPO adds ``R_len ∈ [−1, 0]`` to ±1 rewards (Eq. 13), whose range is 2: ``c`` is half the
    reward range, 0.5 for the toy tasks' {0, 1} rewards. Then ``2·r̃ − 1 = (2r − 1) + R_len``
    is exactly DAPO's shaped reward, an affine image of ``r̃``, so group-normalised advantages
    are DAPO's (a truncated correct answer scores 0.5, between a correct 1 and a wrong 0, as
    DAPO's 0 lies between 1 and −1). ``c = 1`` would double the penalty relative to the
    correct/wrong gap and tie a truncated correct answer with a short wrong one.

    Every trainer calls this once, after dynamic sampling (which counts successes on the
    outcome) and before the advantages; keep the outcome in ``RolloutBatch.outcome_rewards``
    so that success is still decided on it. ``lengths`` are the true ``|o_i|`` (before any
    overlong filtering masks rows out).
    """
    if not cfg.overlong_shaping:
        return rewards
    cache_len = overlong_cache_len(max_len, cfg.overlong_cache_frac)
    penalty = overlong_penalty(lengths.to(rewards.device), max_len, cache_len)
    return rewards + cfg.overlong_penalty_scale * penalty.to(rewards.dtype)


def overlong_penalty(
    lengths: Real[Tensor, " B"], max_len: int, cache_len: int
) -> Float32[Tensor, " B"]:
    """DAPO soft overlong punishment ``R_len(|o|)``, added to the reward (DAPO Eq. 13).

    ``0`` for ``|o| ≤ L_max − L_cache``; ``((L_max − L_cache) − |o|) / L_cache`` on the
    cache band; ``−1`` beyond ``L_max``. Continuous, non-increasing, in ``[−1, 0]``.
    """
    require(max_len > 0, "max_len", "a positive length budget L_max")
    require(0 < cache_len <= max_len, "cache_len", f"0 < L_cache ≤ L_max={max_len}")
    lengths = lengths.to(torch.float32)
    soft = (max_len - cache_len - lengths) / cache_len
    return torch.clamp(soft, min=-1.0, max=0.0)


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
# Normalisation over a masked set (GTPO v6 Eq. 6 and GRPO-S normalise token or sequence
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
