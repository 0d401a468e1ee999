"""Clip-Cov: DAPO with the gradient of a few high-covariance tokens switched off.

Paper: Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning Language
Models", arXiv 2505.22617 (its Clip-Cov method). Code: the authors' adaptation in verl,
``compute_policy_loss_clip_cov`` (``loss_mode="clip_cov"``). Confidence: [C] (paper and
code agree), with the [A] choices below.

Idea
----
Under a policy gradient the entropy of a state falls by about the covariance between a
token's log-probability and its advantage: confident tokens that are rewarded sharpen the
policy (``docs/entropy_mechanism.md``). A tiny fraction of tokens carries most of that
covariance. Clip-Cov picks, at random, a fraction r of the batch's tokens among those whose
covariance lies in a band [ω_low, ω_high] far above the mean, and removes them from the
gradient, so they cannot drive the entropy down.

Equations
---------
    Advantage, ratio, clip-higher: DAPO's (Eq. 9-10)
        A_i = (r_i − mean_G r) / (std_G r + eps),   w[i,t] = π_θ / π_old
        ℓ[i,t] = −min( w·A_i, clip(w, 1−ε_low, 1+ε_high)·A_i )

    Centred covariance of each token (means over the batch's N = Σ m response tokens):
        cov[i,t] = (A[i,t] − mean A) · (log π_θ[i,t] − mean log π_θ)           (detached)

    Candidates: inside the band and not already clipped by the PPO clip:
        C = { (i,t) : m = 1,  ω_low < cov[i,t] < ω_high,  clip(w)·A ≥ w·A }
    Selected: a uniformly random subset of C of size min(|C|, n),
        n = max(1, ⌊r·N⌋),   r = 2e-4,  ω_low = 1,  ω_high = 5

    Loss, "token-mean"; a selected token's term is set to 0 (value and gradient), it stays
    in the normaliser:
        L = Σ_{i,t} m·(1 − S[i,t])·ℓ[i,t] / Σ_{i,t} m,      S = 1 on the selected tokens

Relative to DAPO
----------------
One factor: the per-token loss is multiplied by (1 − S). When no token's covariance falls in
the band, S = 0 and the loss is DAPO's exactly.

Assumptions
-----------
* At least one token: n = max(1, ⌊r·N⌋) [C: the code]. The toy minibatches have under a
  thousand response tokens, so ⌊2e-4·N⌋ = 0 and Clip-Cov acts on exactly one token per
  loss call whenever a candidate exists (the paper's batches have millions of tokens: r·N is
  hundreds). ``clip_cov_ratio`` is the field to raise for a visible effect at toy scale.
* The selected term is *zeroed* (the code's ``corr = 0``): the paper says "detach"; the
  gradient is the same, the loss value lacks the selected terms, and it equals verl's [C].
* The covariance uses the log-probs of the policy being trained (the code's ``log_prob``),
  which equal the rollout's on the first minibatch of a step [C].
* ``seed`` [A]: with an int (default 0) the random subset is drawn from a generator seeded
  by ``seed`` and the batch's response tokens, so a run is reproducible and every batch gets
  its own draw; with ``None`` it is drawn from torch's global generator, as verl does.
* DAPO's batch mechanisms (dynamic sampling, soft overlong punishment) as in ``dapo.py`` [A]:
  the paper's Clip-Cov runs on DAPO-style clip-higher.

Worked example: ``docs/algorithms/clip_cov.md`` computes one group by hand;
``tests/spec/test_clip_cov.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Bool, Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "clip_cov"

#: Aggregations the loss supports (its loss is per token; L_max-normalisation is Dr. GRPO's).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """Clip-Cov hyper-parameters: DAPO's, plus r and the band; defaults from the paper/verl."""

    clip_cov_ratio: contract.Fraction = 2e-4  # r, fraction of the batch's tokens to switch off [C]
    clip_cov_lb: float = 1.0  # ω_low, lower end of the covariance band [C]
    clip_cov_ub: float = 5.0  # ω_high, upper end of the covariance band [C]
    seed: contract.Seed | None = 0  # random subset seeded by (seed, batch); None: torch's RNG [A]
    clip_eps_low: contract.ClipLow = 0.2  # ε_low (§3.1, clip-higher) [C]
    clip_eps_high: contract.ClipHigh = 0.28  # ε_high > ε_low: clip-higher (§3.1) [C]
    kl_coef: float = 0.0  # β: the KL term is removed (§2.3) [C]
    loss_agg_mode: str = "token-mean"  # token-level policy gradient loss (§3.3, Eq. 12) [C]
    eps: contract.Positive = core.EPS  # in the std denominator (verl's; TRL uses 1e-4) [C]
    dynamic_sampling: bool = True  # keep groups with 0 < #successful < G (§3.2, Eq. 11) [C]
    overlong_shaping: bool = True  # soft overlong punishment added to r (§3.4, Eq. 13) [C]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)
        contract.require(
            isinstance(self.clip_cov_lb, (int, float))
            and isinstance(self.clip_cov_ub, (int, float))
            and self.clip_cov_lb < self.clip_cov_ub,
            "Config.clip_cov_lb",
            f"ω_low < ω_high, got {self.clip_cov_lb!r} and {self.clip_cov_ub!r}",
        )


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: the group-normalised outcome reward on every response token."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    # §4.1.2: A_i = (r_i − mean_G r) / (std_G r + eps); one value per completion.
    A_seq = core.group_normalize(batch.rewards, batch.group_size, eps=cfg.eps)
    # Outcome supervision: every token of o_i gets A_i; padding gets exactly 0.
    return core.broadcast_to_tokens(A_seq, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over groups, completions and positions: GRPO's group
    z-score, whose loops the spec writes once (``core.reference_group_zscore``)."""
    return core.reference_group_zscore(batch, cfg.eps)


def clip_cov_mask(
    batch: RolloutBatch, logp: Float[Tensor, "B T"], adv: Float[Tensor, "B T"], cfg: Config
) -> Bool[Tensor, "B T"]:
    """``[B, T]`` bool ``S``: the tokens whose term Clip-Cov switches off (0 on padding).

    A uniformly random subset of size ``min(|C|, max(1, ⌊r·N⌋))`` of the candidates
    ``C`` (in band, response token, not clipped), drawn as verl draws it: ``torch.randperm``
    over the candidates in row-major order, first ones kept.
    """
    mask = batch.response_mask
    w = core.token_ratio(logp.detach(), batch.logp_old, mask)
    adv = adv.detach().float()
    # The PPO clip already stopped this token's gradient: clip(w)·A < w·A.
    lo, hi = 1.0 - cfg.clip_eps_low, 1.0 + cfg.clip_eps_high
    clipped = torch.clamp(w, lo, hi) * adv < w * adv
    # cov[i,t] = (A − mean A)(log π_θ − mean log π_θ), over the batch's response tokens.
    cov = core.token_covariance(logp, adv, mask)
    in_band = (cov > cfg.clip_cov_lb) & (cov < cfg.clip_cov_ub)
    candidates = torch.nonzero(mask.bool() & in_band & ~clipped)
    n = min(core.covariance_selection_count(cfg.clip_cov_ratio, mask), len(candidates))
    selected = torch.zeros_like(mask, dtype=torch.bool)
    if n > 0:
        perm = torch.randperm(len(candidates), generator=core.batch_generator(batch, cfg.seed))
        chosen = candidates[perm[:n].to(candidates.device)]
        selected[chosen[:, 0], chosen[:, 1]] = True
    return selected


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """DAPO's clip-higher surrogate with the selected tokens' terms zeroed, token-mean.

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by Clip-Cov (part of the shared signature).
    """
    contract.check_config_type(cfg, Config)  # another algorithm's Config: refused
    contract.check_policy_tensor(logp, batch, "logp")
    contract.check_advantages(adv, batch)
    mask = batch.response_mask
    # Loss math in float32 even when the model runs in bf16/fp16.
    logp = logp.float()
    adv = adv.float()

    # w[i,t] = π_θ / π_old, the per-token importance ratio.
    w = core.token_ratio(logp, batch.logp_old, mask)
    # Eq. 10: −min(w·A, clip(w, 1−ε_low, 1+ε_high)·A) for every token (clip-higher).
    token_loss = -core.clipped_surrogate(w, adv, cfg.clip_eps_low, cfg.clip_eps_high)
    # S[i,t]: a random few high-covariance tokens lose their term, value and gradient.
    selected = clip_cov_mask(batch, logp, adv, cfg)
    token_loss = core.masked(token_loss, ~selected)

    metrics: dict[str, float] = {
        "cov_selected": float(selected.sum()),
        "cov_selected_frac": float(core.masked_mean(selected.float(), mask)),
    }
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # Off in DAPO (β = 0); kept so the KL can be switched back on: GRPO's Eq. 4 k3 term.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
