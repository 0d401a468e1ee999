"""The distribution one token is drawn from, and what is recorded of it.

The sampler draws from the temperature-scaled distribution ``softmax(logits / τ)``, in
float32, truncated by top-k / top-p when they are set (``μ``, renormalised). It records, per
token, ``log μ`` of the drawn token (``logp_old``: the importance ratio's denominator) and the
entropy of the *untruncated* distribution (``entropy_old``), both from the very logits the
token was drawn from (``refimpl.sampling.groups`` says why). ``entropy_from_logits`` is the
same entropy for any logits, and ``TEMPERATURE_MIN`` / ``TOP_P_MIN`` are the smallest
settings under which float32 still trains.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Full-vocabulary entropy ``H = −Σ_v p_v log p_v`` over the last dimension, in float32.

    Computed from ``log_softmax`` (which subtracts the max logit first) rather than from
    ``log(softmax)``, so it is stable for large logits; an underflowed ``p_v = 0`` contributes
    ``0 · (finite log p_v) = 0``. Differentiable.
    """
    return entropy_from_logp(F.log_softmax(logits.float(), dim=-1))


#: The smallest temperature (``--temperature``): where training still means something. The sampler and the
#: loss take ``softmax(logits / τ)`` in float32, whose smallest normal value is about e^-87:
#: at τ = 0.01 a gap of 0.87 between the two largest logits already leaves the runner-up
#: nothing, so a smaller τ samples greedily, records entropy 0, and every gradient (which
#: scales with 1 − π of the token sampled) is 0: the run updates nothing, silently. (1e-30
#: was the old bound, where logits / τ still fit float32: it trained nothing.)
TEMPERATURE_MIN = 0.01


#: The smallest top-p (``--top-p``): float32's smallest normal value (the nucleus keeps the most
#: likely token; 1e-46 rounds to 0 in float32, and every token was dropped).
TOP_P_MIN = float(torch.finfo(torch.float32).tiny)


def entropy_from_logp(logp: Tensor) -> Tensor:
    """``−Σ_v exp(logp_v) · logp_v``, clamped at 0 against rounding."""
    return (-(logp.exp() * logp).sum(dim=-1)).clamp(min=0.0)


# ---------------------------------------------------------------------------------------------
# Drawing one token per row.
# ---------------------------------------------------------------------------------------------


def sample_token(
    logits: Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    u: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Draw one token per row from ``[B, V]`` last-position logits with the ``[B, 1]`` uniform
    draws ``u``. Returns the ``[B]`` tokens, the ``[B, V]`` log-probs of the distribution they
    were drawn from and the ``[B]`` entropies before truncation."""
    # The temperature-scaled distribution in float32, from one log-softmax: its entropy
    # before truncation, the probabilities drawn from, the log-prob of the drawn token.
    scaled = logits.float() / temperature
    logp_all = F.log_softmax(scaled, dim=-1)
    probs = logp_all.exp()
    entropy = (-(probs * logp_all).sum(dim=-1)).clamp(min=0.0)  # as entropy_from_logp
    truncated = truncate(scaled, top_k, top_p)  # `scaled` itself without top-k/top-p
    if truncated is scaled:
        return _draw(probs, u), logp_all, entropy
    logp_all = F.log_softmax(truncated, dim=-1)  # μ, the distribution sampled from
    return _draw(logp_all.exp(), u), logp_all, entropy


def truncate(logits: Tensor, top_k: int | None, top_p: float | None) -> Tensor:
    """Set logits outside the top-k and outside the top-p nucleus to −inf (sampling only)."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # Keep a token when the mass strictly before it is < top_p: the smallest prefix of
        # the sorted vocabulary whose mass reaches top_p (the most likely token always stays).
        mass_before = probs.cumsum(dim=-1) - probs
        drop_sorted = mass_before >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def uniforms(rows: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """``[rows, 1]`` uniform draws from ``generator`` on *its* device, moved to ``device``: a
    seeded CPU generator drives sampling on any device, and the random stream does not depend
    on where the model runs. One draw per row at every step, whether the row is still
    generating or not, so the stream does not depend on which rows finished."""
    rng_device = generator.device if generator is not None else device
    return torch.rand(rows, 1, generator=generator, device=rng_device).to(device)


def _draw(probs: Tensor, u: Tensor) -> Tensor:
    """One token per row by inverse-CDF sampling: the first token whose cumulative probability
    exceeds the row's uniform draw ``u·Σp`` (equivalent to ``torch.multinomial``)."""
    cdf = probs.cumsum(dim=-1)
    # right=True: first index with cdf > u·total, which skips zero-probability tokens.
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return token.squeeze(-1).clamp(max=probs.shape[-1] - 1)
