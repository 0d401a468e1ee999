"""TEPO: Token-Level Policy Optimization (sequence likelihood + token-level KL mask).

Paper: "Token-Level Policy Optimization: Linking Group-Level Rewards to Token-Level
Aggregation via Sequence-Level Likelihood", arXiv 2604.12736 (v1 was 2510.09369).
Confidence: [S/A]. There is no official code and no public full text of the method section:
this file is a **reconstruction** from the abstract [C], a secondary summary [S] and the
choices marked [A] below (``docs/fidelity.md`` says which knob changes which choice).

Idea
----
Link the group-level reward to each token through the *sequence* likelihood: every token is
trained with the length-normalised sequence ratio s_i (the geometric mean of its completion's
token ratios, as in GSPO), but the loss is aggregated over *tokens* (every token weighs the
same, unlike GSPO's per-sequence mean). A KL penalty is applied only to the tokens where the
policy is being sharpened on a good answer: positive advantage and decreasing entropy, the
tokens that drive entropy collapse and "abrupt policy updates".

Equations (ALGORITHMS.md, "TEPO"; no equation numbers are public)
----------------------------------------------------------------
    Advantage (GRPO's) [A]:
        A_i = (r_i − mean_G r) / (std_G r + eps)             broadcast to every token of o_i

    Sequence likelihood ratio (length-normalised, geometric mean of token ratios) [S]:
        s_i = exp( (1/|o_i|) Σ_t (logp − logp_old)[i,t] )

    GSPO-token form, value s_i, gradient through token t only [A]:
        s[i,t] = sg[s_i] · π_θ(o_{i,t}) / sg[π_θ(o_{i,t})]
        ∂s[i,t]/∂logp[i,t'] = s_i · 1[t = t']          (plain s_i: s_i / |o_i| for every t')

    Token-level KL mask [C: "positive advantages and decreasing entropy"]:
        M[i,t] = 1[A[i,t] > 0] · 1[H_θ[i,t] < H_old[i,t] − τ]     (H_θ detached, τ ≥ 0 [A])

    Loss ("token-mean" over response tokens) [A]:
        L = Σ_{i,t} m·( −min(s[i,t]·A, clip(s[i,t], 1−ε_low, 1+ε_high)·A) ) / Σ m
            + β · Σ_{i,t} m·M·kl[i,t] / Σ m
        kl[i,t] = exp(logp_a − logp) − (logp_a − logp) − 1,  a = ref (default) or old

Relative to GRPO
----------------
Same advantage. The ratio is the sequence ratio s_i applied per token (GSPO-token); the loss
is token-mean (DAPO-style) with clip-higher; the KL term is masked to tokens with A > 0 whose
entropy decreased, and can anchor at π_old instead of π_ref.

Assumptions [A] (each is a Config field)
----------------------------------------
* The ratio form (GSPO-token s[i,t]) and token-mean aggregation: the reading of "sequence-level
  likelihood ... via token-level aggregation". With ``kl_coef = 0`` this is exactly verl's
  ``gspo`` policy loss with ``loss_agg_mode="token-mean"``.
* ``clip_eps_low/high = 0.2/0.28`` (DAPO's), ``kl_coef = β = 0.04`` (GRPO's).
* ``kl_anchor``: ``"ref"`` (default) KL to the frozen reference, as GRPO; ``"old"`` KL to the
  rollout policy (a trust-region reading of "mitigate abrupt policy updates").
* ``kl_mask``: ``True`` (default) is the paper's mask; ``False`` puts the KL on every response
  token (the ablation).
* The KL term's token-mean divides by all response tokens (Σ m), not by the masked ones.
* "Decreasing entropy" compares the current policy's entropy H_θ (passed to :func:`loss`,
  detached) with the rollout entropy H_old: H_θ < H_old − τ, ``entropy_decrease_tol`` τ =
  1e-4 nats. Without the margin the mask is noise whenever θ = θ_old (the first minibatch of
  every rollout, and every minibatch with one update per rollout): the two entropies then come
  from two computations of the same distribution and differ by float rounding (~1e-6), so
  "H_θ < H_old" would hold on about half the tokens at random. With τ the mask switches on only
  once the policy has actually moved, i.e. with ``ppo_epochs > 1`` or ``minibatches > 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from refimpl import core
from refimpl.core import RolloutBatch

NAME = "tepo"

KL_ANCHORS = ("ref", "old")


@dataclass(frozen=True)
class Config:
    """TEPO hyper-parameters; a reconstruction (see the module docstring)."""

    clip_eps_low: float = 0.2  # ε_low of the clip on s[i,t] (DAPO's) [A]
    clip_eps_high: float = 0.28  # ε_high, clip-higher (DAPO's) [A]
    kl_coef: float = 0.04  # β, weight of the masked KL term (GRPO's value) [A]
    kl_anchor: str = "ref"  # KL to π_ref ("ref") or to π_old ("old") [A]
    kl_mask: bool = True  # M[i,t] = 1[A>0]·1[H_θ<H_old−τ]; False = KL on every token [C]/[A]
    entropy_decrease_tol: float = 1e-4  # τ in nats: smaller falls are float noise [A]
    loss_agg_mode: str = "token-mean"  # "token-level aggregation" (abstract) [C]/[A]
    eps: float = core.EPS  # in the std denominator (verl/TRL) [C]
    dynamic_sampling: bool = False  # DAPO's filter; not stated for TEPO [A]
    overlong_shaping: bool = False  # DAPO's length penalty; not stated for TEPO [A]
    overlong_cache_frac: float = 0.2  # L_cache / L_max when overlong_shaping is on (DAPO) [C]
    overlong_filter: bool = False  # DAPO's truncation mask (the trainer applies it); off [A]

    def __post_init__(self) -> None:
        core.check_config(self)
        core.require(
            self.loss_agg_mode in ("token-mean", "seq-mean-token-mean"),
            "Config.loss_agg_mode",
            f"a per-token mode ('token-mean' or 'seq-mean-token-mean'), got {self.loss_agg_mode!r}",
        )
        core.require_choice(self.kl_anchor, "Config.kl_anchor", KL_ANCHORS)
        core.require(
            isinstance(self.kl_mask, bool), "Config.kl_mask", f"a bool, got {self.kl_mask!r}"
        )
        core.require(
            isinstance(self.entropy_decrease_tol, (int, float))
            and 0.0 <= self.entropy_decrease_tol < float("inf"),
            "Config.entropy_decrease_tol",
            f"a finite value ≥ 0, got {self.entropy_decrease_tol!r}",
        )


def advantages(batch: RolloutBatch, cfg: Config) -> Tensor:
    """``[B, T]`` advantages: the group-normalised outcome reward on every response token."""
    # GRPO §4.1.2 [A]: A_i = (r_i − mean_G r) / (std_G r + eps); one value per completion.
    A_seq = core.group_normalize(batch.rewards, batch.group_size, eps=cfg.eps)
    # Outcome supervision: every token of o_i gets A_i; padding gets exactly 0.
    return core.broadcast_to_tokens(A_seq, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Tensor:
    """The same advantages as plain loops over groups, completions and positions."""
    B, T = batch.response_mask.shape
    G = batch.group_size
    A = torch.zeros(B, T, dtype=torch.float32)
    r = batch.rewards.tolist()
    for g in range(batch.num_groups):
        rows = range(g * G, g * G + G)
        rewards = [r[i] for i in rows]
        mean = sum(rewards) / G
        std = (sum((x - mean) ** 2 for x in rewards) / (G - 1)) ** 0.5  # Bessel-corrected
        for i in rows:
            A_i = 0.0 if max(rewards) == min(rewards) else (r[i] - mean) / (std + cfg.eps)
            for t in range(T):
                if batch.response_mask[i, t] == 1:
                    A[i, t] = A_i
    return A


def sequence_token_ratio(logp: Tensor, logp_old: Tensor, mask: Tensor) -> Tensor:
    """``[B, T]`` GSPO-token ratio ``s[i,t] = sg[s_i] · π_θ(o_{i,t}) / sg[π_θ(o_{i,t})]``.

    Its value is ``s_i`` on every response token (1 on padding); its gradient reaches
    ``logp[i,t]`` alone, with weight ``s_i`` (the stop-gradients remove the ``1/|o_i|``
    coupling of the plain geometric mean). Float32.
    """
    logp = logp.float()
    # log s_i = (1/|o_i|) Σ_t (logp − logp_old)[i,t]  (GSPO's length-normalised ratio).
    log_s = core.sequence_log_ratio(logp, logp_old, mask)
    # sg[log s_i] + logp − sg[logp]: value log s_i, d/dlogp[i,t] = 1 at t only.
    log_ratio = log_s.detach()[:, None] + logp - logp.detach()
    return torch.exp(core.masked(log_ratio, mask))


def kl_mask(
    adv: Tensor, entropy: Tensor, entropy_old: Tensor, mask: Tensor, tol: float = 0.0
) -> Tensor:
    """``[B, T]`` float ``M[i,t] = 1[A[i,t] > 0] · 1[H_θ[i,t] < H_old[i,t] − tol]``, 0 on padding.

    ``entropy`` (the current policy's, ``H_θ``) is detached: the mask selects tokens, it
    carries no gradient. ``loss`` passes ``tol = cfg.entropy_decrease_tol``.
    """
    positive = adv.detach() > 0
    entropy_decreased = entropy.detach().float() < entropy_old.detach().float() - tol
    return core.masked((positive & entropy_decreased).float(), mask)


def loss(
    batch: RolloutBatch,
    logp: Tensor,
    adv: Tensor,
    cfg: Config,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GSPO-token clipped surrogate, token-mean, plus the masked KL term.

    Args:
        batch: the rollout (``logp_old``, ``entropy_old``; ``logp_ref`` when
            ``kl_coef > 0`` and ``kl_anchor="ref"``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: ``[B, T]`` entropy ``H_θ`` of the policy being trained at each position;
            required when the KL mask is on (``kl_mask`` and ``kl_coef > 0``); detached.
    """
    core.check_policy_tensor(logp, batch, "logp")
    core.check_advantages(adv, batch)
    mask = batch.response_mask
    # Loss math in float32 even when the model runs in bf16/fp16.
    logp = logp.float()
    adv = adv.float()

    # s[i,t]: the sequence likelihood ratio s_i, applied per token (GSPO-token form) [A].
    w = sequence_token_ratio(logp, batch.logp_old, mask)
    # Token-level aggregation of −min(s[i,t]·A, clip(s[i,t], 1−ε_low, 1+ε_high)·A).
    token_loss = -core.clipped_surrogate(w, adv, cfg.clip_eps_low, cfg.clip_eps_high)

    metrics: dict[str, float] = {}
    if entropy is not None:
        core.check_policy_tensor(entropy, batch, "entropy")
        M = kl_mask(adv, entropy, batch.entropy_old, mask, cfg.entropy_decrease_tol)
        metrics["kl_mask_frac"] = float(core.masked_mean(M, mask))
    if cfg.kl_coef > 0:
        if cfg.kl_mask:
            core.require(
                entropy is not None,
                "entropy",
                "the current policy's [B, T] entropy: TEPO's KL mask needs it "
                "(or set kl_mask=False or kl_coef=0)",
            )
        else:
            M = mask  # ablation: KL on every response token
        if cfg.kl_anchor == "ref":
            core.require(
                batch.logp_ref is not None,
                "batch.logp_ref",
                "reference log-probs when kl_coef > 0 and kl_anchor='ref'",
            )
            anchor = batch.logp_ref
        else:
            anchor = batch.logp_old
        # k3 estimate of KL(π_θ ‖ π_anchor), kept only where M[i,t] = 1.
        kl = core.kl_k3(logp, anchor, mask)
        token_loss = token_loss + cfg.kl_coef * core.masked(kl, M)
        metrics[f"kl_{cfg.kl_anchor}"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)
    metrics.update(core.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(core.common_metrics(batch, logp, adv))
    return total, metrics
