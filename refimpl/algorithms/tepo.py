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

Equations (no equation numbers are public)
------------------------------------------
    Advantage (GRPO's) [A: ``advantage``]:
        A_i = (r_i − mean_G r) / (std_G r + eps)             broadcast to every token of o_i

    Sequence likelihood ratio (length-normalised, geometric mean of token ratios) [S]:
        s_i = exp( (1/|o_i|) Σ_t (logp − logp_old)[i,t] )

    GSPO-token form, value s_i, gradient through token t only [A: ``ratio``]:
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

Assumptions [A] (each is a Config field; ``docs/fidelity.md`` lists them)
-------------------------------------------------------------------------
* ``advantage``: ``"grpo"`` (default) GRPO's z-score; ``"centred"`` the centred reward
  r_i − mean_G r (Dr. GRPO's, no std).
* ``ratio``: ``"gspo_token"`` (default) the GSPO-token s[i,t], the reading of "sequence-level
  likelihood ... via token-level aggregation"; ``"token"`` GRPO's per-token ratio w[i,t] (the
  KL mask on a DAPO-style loss). With ``kl_coef = 0`` the default is exactly verl's ``gspo``
  policy loss called with ``loss_agg_mode="token-mean"`` (verl's function defaults to
  ``seq-mean-token-mean``; its actor config passes ``token-mean``).
* ``clip_eps_low/high = 0.2/0.28`` (DAPO's), ``kl_coef = β = 0.04`` (GRPO's).
* ``kl_anchor``: ``"ref"`` (default) KL to the frozen reference, as GRPO; ``"old"`` KL to the
  rollout policy (a trust-region reading of "mitigate abrupt policy updates").
* ``kl_mask``: ``True`` (default) is the paper's mask; ``False`` puts the KL on every response
  token (the ablation).
* ``kl_denominator``: ``"all"`` (default) the KL term's token-mean divides by all response
  tokens (Σ m), so the mask only removes terms; ``"masked"`` divides by the masked tokens
  (Σ M), the KL's mean over the tokens it constrains.
* ``entropy_source``: ``"current"`` (default) compares the entropy H_θ of the policy being
  trained (passed to :func:`loss`, detached) with the rollout entropy H_old at the same
  position: "decreasing" under the update. ``"sequence"`` compares H_old[i,t] with
  H_old[i,t−1]: entropy falling along the completion (needs no current entropy; never at the
  first token).
* ``entropy_strict``: ``True`` (default) "decreasing" is the strict H < H' − τ; ``False``
  uses ≤ (with τ = 0 an unchanged entropy then counts as decreasing).
* ``entropy_decrease_tol`` τ = 1e-4 nats: H_θ < H_old − τ. Without the margin the mask is
  noise whenever θ = θ_old (the first minibatch of every rollout, and every minibatch with one
  update per rollout): the two entropies then come from two float32 computations of the same
  distribution and differ by rounding (~1e-6), so "H_θ < H_old" would hold on about half the
  tokens at random. With τ the mask switches on only once the policy has actually moved, i.e.
  with ``ppo_epochs > 1`` or ``minibatches > 1``. The argument needs both entropies in
  float32: under bf16 autocast they differ by up to ~7e-3 at θ = θ_old (2-3 % of the toy
  model's tokens by more than τ, measured on CPU), so under ``--dtype bfloat16`` the trainer
  recomputes both in float32 (``Config.reads_current_entropy()``).
* DAPO's batch mechanisms (``dynamic_sampling``, ``overlong_shaping``, ``overlong_filter``)
  off, as the contract's defaults: the paper does not state them.

Worked example: ``docs/algorithms/tepo.md`` computes one group by hand;
``tests/spec/test_tepo.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Float32, Shaped
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "tepo"

ADVANTAGES = ("grpo", "centred")
RATIOS = ("gspo_token", "token")
KL_ANCHORS = ("ref", "old")
KL_DENOMINATORS = ("all", "masked")
ENTROPY_SOURCES = ("current", "sequence")
#: Aggregations the loss supports (its loss is per token).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """TEPO hyper-parameters; a reconstruction (see the module docstring)."""

    advantage: str = "grpo"  # A_i: GRPO's z-score; "centred" = r − mean (Dr. GRPO's) [A]
    ratio: str = "gspo_token"  # s[i,t] = sg[s_i]·π_θ/sg[π_θ]; "token" = w[i,t] [A]
    clip_eps_low: contract.ClipLow = 0.2  # ε_low of the clip on s[i,t] (DAPO's) [A]
    clip_eps_high: contract.ClipHigh = 0.28  # ε_high, clip-higher (DAPO's) [A]
    kl_coef: float = 0.04  # β, weight of the masked KL term (GRPO's value) [A]
    kl_anchor: str = "ref"  # KL to π_ref ("ref") or to π_old ("old") [A]
    kl_mask: bool = True  # M[i,t] = 1[A>0]·1[entropy decreased]; False = KL on every token [C]
    kl_denominator: str = "all"  # β·Σ M·kl / Σ m ("all") or / Σ M ("masked") [A]
    entropy_source: str = "current"  # H_θ vs H_old; "sequence": H_old[t] vs H_old[t−1] [A]
    entropy_strict: bool = True  # "decreasing" is H < H' − τ; False: H ≤ H' − τ [A]
    entropy_decrease_tol: contract.NonNegative = 1e-4  # τ (nats): smaller falls are float noise [A]
    loss_agg_mode: str = "token-mean"  # "token-level aggregation" (abstract) [C]/[A]
    eps: contract.Positive = core.EPS  # in the std denominator (verl's; TRL uses 1e-4) [C]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)
        contract.require_choice(self.advantage, "Config.advantage", ADVANTAGES)
        contract.require_choice(self.ratio, "Config.ratio", RATIOS)
        contract.require_choice(self.kl_anchor, "Config.kl_anchor", KL_ANCHORS)
        contract.require_choice(self.kl_denominator, "Config.kl_denominator", KL_DENOMINATORS)
        contract.require_choice(self.entropy_source, "Config.entropy_source", ENTROPY_SOURCES)

    def advantage_std_set(self) -> str | None:
        # A_i is GRPO's z-score, or with advantage="centred" r − mean_G r (no std division).
        return None if self.advantage == "centred" else "group"

    def needs_reference(self) -> bool:
        # The KL term reads π_ref only when anchored there (kl_anchor="old" uses π_old).
        return self.kl_coef > 0 and self.kl_anchor == "ref"

    def reads_current_entropy(self) -> bool:
        # The mask compares H_θ with H_old only with entropy_source="current".
        return self.kl_coef > 0 and self.kl_mask and self.entropy_source == "current"

    def needs_float32_entropy(self) -> bool:
        # The mask compares H_θ with H_old to τ = 1e-4 nats; bf16 logits move each by up to
        # ~7e-3, so a bf16 loop computes both in float32.
        return self.reads_current_entropy()


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: the group-normalised outcome reward on every response token."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    # GRPO §4.1.2 [A]: A_i = (r_i − mean_G r) / (std_G r + eps); "centred": r_i − mean_G r.
    A_seq = core.group_normalize(
        batch.rewards, batch.group_size, scale_by_std=cfg.advantage == "grpo", eps=cfg.eps
    )
    # Outcome supervision: every token of o_i gets A_i; padding gets exactly 0.
    return core.broadcast_to_tokens(A_seq, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over groups, completions and positions: GRPO's group
    z-score (or, ``advantage="centred"``, without the std), whose loops the spec writes once
    (``core.reference_group_zscore``)."""
    return core.reference_group_zscore(batch, cfg.eps, scale_by_std=cfg.advantage == "grpo")


def policy_ratio(
    logp: Float[Tensor, "B T"],
    logp_old: Float[Tensor, "B T"],
    mask: Shaped[Tensor, "B T"],
    ratio: str,
) -> Float32[Tensor, "B T"]:
    """``[B, T]`` ratio of the policy term, 1 on padding, float32: the GSPO-token
    ``s[i,t] = sg[s_i]·π_θ(o_{i,t})/sg[π_θ(o_{i,t})]`` (value ``s_i``, gradient ``s_i`` through
    its own token only), or (``ratio="token"``) the token ratio ``w[i,t]``."""
    contract.require_choice(ratio, "ratio", RATIOS)
    if ratio == "gspo_token":
        return core.sequence_token_ratio(logp, logp_old, mask)
    return core.token_ratio(logp, logp_old, mask)


def kl_mask(
    adv: Float[Tensor, "B T"],
    entropy: Float[Tensor, "B T"] | None,
    entropy_old: Float[Tensor, "B T"],
    mask: Shaped[Tensor, "B T"],
    cfg: Config | None = None,
) -> Float32[Tensor, "B T"]:
    """``[B, T]`` float ``M[i,t] = 1[A[i,t] > 0] · 1[entropy decreased at (i,t)]``, 0 on padding.

    The same rule as :func:`loss` applies with ``cfg`` (default: ``Config()``).
    "Decreased" (τ = ``cfg.entropy_decrease_tol``, ``<`` or ``≤`` by ``cfg.entropy_strict``):
    ``entropy_source="current"``: ``H_θ[i,t] < H_old[i,t] − τ`` with ``H_θ = entropy`` (the
    current policy's, detached: the mask selects tokens, it carries no gradient);
    ``"sequence"``: ``H_old[i,t] < H_old[i,t−1] − τ``, false at a completion's first token.
    """
    cfg = Config() if cfg is None else cfg
    positive = adv.detach() > 0
    tol = cfg.entropy_decrease_tol
    if cfg.entropy_source == "current":
        contract.require(
            entropy is not None, "entropy", "the current policy's [B, T] entropy for the mask"
        )
        new = entropy.detach().float()  # type: ignore[union-attr]
        old = entropy_old.detach().float()
        earlier = torch.ones_like(positive)
    else:
        new = core.masked(entropy_old.detach().float(), mask)
        old = torch.zeros_like(new)
        old[:, 1:] = new[:, :-1]  # H_old[i,t−1]
        earlier = torch.zeros_like(positive)
        earlier[:, 1:] = mask.bool()[:, :-1]  # position t−1 is a response token
    fell = new < old - tol if cfg.entropy_strict else new <= old - tol
    return core.masked((positive & fell & earlier).float(), mask)


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """GSPO-token clipped surrogate, token-mean, plus the masked KL term.

    Args:
        batch: the rollout (``logp_old``, ``entropy_old``; ``logp_ref`` when
            ``kl_coef > 0`` and ``kl_anchor="ref"``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: ``[B, T]`` entropy ``H_θ`` of the policy being trained at each position;
            required when the mask compares it (``kl_mask``, ``kl_coef > 0`` and
            ``entropy_source="current"``); detached.
    """
    contract.check_config_type(cfg, Config)  # another algorithm's Config: refused
    contract.check_policy_tensor(logp, batch, "logp")
    contract.check_advantages(adv, batch)
    mask = batch.response_mask
    # Loss math in float32 even when the model runs in bf16/fp16.
    logp = logp.float()
    adv = adv.float()

    # s[i,t]: the sequence likelihood ratio s_i, applied per token (GSPO-token form) [A].
    w = policy_ratio(logp, batch.logp_old, mask, cfg.ratio)
    # Token-level aggregation of −min(s[i,t]·A, clip(s[i,t], 1−ε_low, 1+ε_high)·A).
    token_loss = -core.clipped_surrogate(w, adv, cfg.clip_eps_low, cfg.clip_eps_high)

    metrics: dict[str, float] = {}
    M = None
    if entropy is not None:
        contract.check_policy_tensor(entropy, batch, "entropy")
    if entropy is not None or cfg.entropy_source == "sequence":
        M = kl_mask(adv, entropy, batch.entropy_old, mask, cfg)
        metrics["kl_mask_frac"] = float(core.masked_mean(M, mask))
    kl_term = torch.zeros((), device=logp.device)
    if cfg.kl_coef > 0:
        if cfg.kl_mask:
            contract.require(
                M is not None,
                "entropy",
                "the current policy's [B, T] entropy: TEPO's KL mask needs it "
                "(or set kl_mask=False, kl_coef=0 or entropy_source='sequence')",
            )
        else:
            M = mask  # ablation: KL on every response token
        if cfg.kl_anchor == "ref":
            contract.require(
                batch.logp_ref is not None,
                "batch.logp_ref",
                "reference log-probs when kl_coef > 0 and kl_anchor='ref'",
            )
            anchor = batch.logp_ref
        else:
            anchor = batch.logp_old
        # k3 estimate of KL(π_θ ‖ π_anchor), kept only where M[i,t] = 1.
        kl = core.kl_k3(logp, anchor, mask)
        if cfg.kl_denominator == "all":
            # β·Σ M·kl / Σ m: the masked KL joins the per-token loss and its aggregation.
            token_loss = token_loss + cfg.kl_coef * core.masked(kl, M)
        else:
            # β·Σ M·kl / Σ M: the KL's mean over the tokens it constrains.
            kl_term = cfg.kl_coef * core.masked_mean(kl, M)
        metrics[f"kl_{cfg.kl_anchor}"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode) + kl_term
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
