"""Entropy bonus: DAPO plus an entropy regularisation term on every response token.

Sources: maximum-entropy regularisation of policy gradients (Williams & Peng 1991; the
``entropy_coeff`` of PPO implementations, verl's ``actor.entropy_coeff``, TRL's
``entropy_coef``); Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning
Language Models", arXiv 2505.22617, which test it as an "entropy loss" baseline.
Confidence: [C] for the term, [S] for its coefficient (below).

Idea
----
The undifferentiated way to fight entropy collapse: reward the policy for being uncertain,
everywhere. Every response token adds −β_H·H_θ to the loss, whatever its advantage, its
entropy or its covariance. This is the baseline TEPO's abstract contrasts itself with
("undifferentiated token-level entropy regularization ... easily leads to entropy collapse or
model degradation"), and Cui et al. report it is fragile: small coefficients do not stop the
collapse, a larger one makes the entropy explode.

Equations
---------
    Advantage, ratio, clip-higher: DAPO's (Eq. 9-10)
        A_i = (r_i − mean_G r) / (std_G r + eps),   w[i,t] = π_θ / π_old
        ℓ[i,t] = −min( w·A_i, clip(w, 1−ε_low, 1+ε_high)·A_i )

    Entropy of the policy being trained at each position (full vocabulary, *with* gradient):
        H_θ[i,t] = −Σ_v π_θ(v | q, o_{i,<t}) log π_θ(v | q, o_{i,<t})

    Loss, "token-mean" (the bonus is aggregated like the policy term):
        L = Σ_{i,t} m·( ℓ[i,t] − β_H·H_θ[i,t] ) / Σ_{i,t} m,      β_H = 1e-3

    Its gradient through the entropy: ∂L/∂H_θ[i,t] = −β_H / Σ m on every response token, so
    descending L raises every token's entropy at the same rate.

Relative to DAPO
----------------
One term: −β_H·H_θ joins the per-token loss. With β_H = 0 the loss is DAPO's exactly. The
entropy is the one the trainer computes with the log-probs, and the gradient must flow
through it: the trainers pass it undetached when ``cfg.differentiates_entropy()``.

Assumptions
-----------
* ``entropy_coef`` β_H = 1e-3 [S]: the middle of the coefficients Cui et al. try for their
  entropy-loss baseline (1e-4 and 1e-3 did not stop the collapse, 1e-2 made the entropy
  explode, as summarised in secondary sources); the right size for the toy model is
  unknown [A]. verl and TRL default to 0 (off).
* Aggregation: the bonus uses the policy term's mode (verl: ``agg_loss`` of the entropy with
  the actor's ``loss_agg_mode``; TRL: the mean per-token entropy, the same under token-mean)
  [C].
* DAPO's batch mechanisms (dynamic sampling, soft overlong punishment) as in ``dapo.py`` [A]:
  the baseline TEPO names has no other change.

Worked example: ``docs/algorithms/entropy_bonus.md`` computes one group by hand;
``tests/spec/test_entropy_bonus.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxtyping import Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "entropy_bonus"

#: Aggregations the loss supports (its loss is per token; L_max-normalisation is Dr. GRPO's).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """Entropy-bonus hyper-parameters: DAPO's, plus β_H; defaults from the sources unless marked."""

    entropy_coef: contract.Coef = 1e-3  # β_H, weight of the bonus (Cui et al.'s middle value) [S]
    clip_eps_low: contract.ClipLow = 0.2  # ε_low (§3.1, clip-higher) [C]
    clip_eps_high: contract.ClipHigh = 0.28  # ε_high > ε_low: clip-higher (§3.1) [C]
    kl_coef: float = 0.0  # β: the KL term is removed (§2.3) [C]
    loss_agg_mode: str = "token-mean"  # token-level policy gradient loss (§3.3, Eq. 12) [C]
    eps: contract.Positive = core.EPS  # in the std denominator (verl's; TRL uses 1e-4) [C]
    dynamic_sampling: bool = True  # keep groups with 0 < #successful < G (§3.2, Eq. 11) [C]
    overlong_shaping: bool = True  # soft overlong punishment added to r (§3.4, Eq. 13) [C]

    def differentiates_entropy(self) -> bool:
        # The bonus −β_H·H_θ trains H_θ itself: the trainers pass it with its gradient.
        return self.entropy_coef > 0

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)


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


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """DAPO's clip-higher surrogate minus β_H·H_θ on every token, aggregated token-mean.

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: ``[B, T]`` entropy ``H_θ`` of the policy being trained, *with* gradient
            (required when ``entropy_coef > 0``; a detached one gives the right value and no
            gradient).
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

    metrics: dict[str, float] = {}
    if cfg.entropy_coef > 0:
        contract.require(entropy is not None, "entropy", "the current policy's [B, T] entropy H_θ")
        contract.check_policy_tensor(entropy, batch, "entropy")  # type: ignore[arg-type]
        # −β_H·H_θ on every response token: the undifferentiated entropy bonus.
        H = core.masked(entropy.float(), mask)  # type: ignore[union-attr]
        token_loss = token_loss - cfg.entropy_coef * H
        metrics["entropy_current"] = float(core.masked_mean(H.detach(), mask))
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
