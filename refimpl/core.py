"""The mathematics every algorithm file shares: masking, groups, ratios, KL, aggregation.

Written once, for the algorithm files in ``refimpl/algorithms``, which hold only what
distinguishes one algorithm from another: an algorithm file plus this one is the whole reading
list of that algorithm. What an algorithm is given and declares, and the checks of its inputs,
are the contract's (``refimpl.contract``); what the loops do to a batch around an algorithm is
``refimpl.batch_stages``'. This module knows nothing of models, tokenizers or tasks.

Notation
--------
A batch holds ``N`` groups of ``G`` completions, ``B = N·G`` rows, groups stored as
consecutive rows: rows ``g·G … g·G+G−1`` answer prompt ``g``. Per-token tensors are
``[B, T]``; ``m[i,t] ∈ {0,1}`` is the response mask and ``|o_i| = Σ_t m[i,t]``.

Shapes in the signatures
------------------------
Tensor shapes are jaxtyping annotations, one dimension name per quantity, the same in the
contract and the algorithm files: ``B`` rows (completions, ``B = N·G``), ``T`` padded length,
``G`` group size, ``N`` groups. ``Float[Tensor, "B T"]`` is per token, ``Float[Tensor, " B"]``
per completion (the leading space only keeps linters from reading the string as Python),
``Float[Tensor, ""]`` a scalar; a mask may be float 0/1 or bool (``Shaped``: any dtype);
``"*dims"`` is any shape, the same for every argument naming it. They are checked at run
time only in the test session (``tests/conftest.py`` wraps the public functions in
``jaxtyped(typechecker=beartype)``; ``tests/spec/test_shapes.py`` shows both): anywhere else
they are plain annotations, with no cost.

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

The first three are verl 0.9.1's ``agg_loss`` modes, the same formulas (its
``loss_scale_factor`` is our ``L_max``; older verl had no ``1/B'``), which
``tests/spec/test_peers.py`` checks when verl is installed; ``seq-mean`` is ours.

Sequences with ``|o_i| = 0`` are skipped by every mode: the "mean over sequences" runs over
the ``B'`` non-empty rows. An empty batch (no response token at all) gives loss 0, still
attached to the graph, with a warning.
"""

from __future__ import annotations

import hashlib
import warnings

import torch
from jaxtyping import Bool, Float, Float32, Float64, Shaped
from torch import Tensor

from refimpl.contract import RolloutBatch, check_advantage_values, require

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
    # Per-group mean and unbiased (Bessel-corrected) std, in float64, broadcast back to [B].
    r = group_view(rewards.to(torch.float64), group_size)
    mean = r.mean(dim=1, keepdim=True).expand_as(r).reshape(-1)
    std = r.std(dim=1, unbiased=True, keepdim=True).expand_as(r).reshape(-1)
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
# Per-token quantities several algorithm files share (Clip-Cov, KL-Cov, the forking tokens).
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
