"""What a loss reports beside the scalar it returns: the metrics every algorithm's ``loss``
logs, computed once for every file.

They explain a step and never change it (computed without gradient, returned as floats): how
many tokens the clip switched off and the mean ratio (``ratio_metrics``), the approximate KL
to the rollout policy and the advantages' mean and spread (``common_metrics``). The
mathematics they read is ``refimpl.core``'s (``masked_mean``, ``kl_k3``); an algorithm file
adds its own metrics (KL-Cov's penalised fraction, TEPO's mask fraction, ...) beside them.
"""

from __future__ import annotations

import torch
from jaxtyping import Float, Shaped
from torch import Tensor

from refimpl.contract import RolloutBatch
from refimpl.core import kl_k3, masked_mean


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
