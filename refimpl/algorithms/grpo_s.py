"""GRPO-S: Sequence-Level GRPO with entropy-weighted sequence rewards.

Paper: Tan et al., "GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy
Entropy", arXiv 2508.04349, cited from the v5 full text (§2.3, §2.4, Algorithm 1, §3.1;
equation numbers are v5's). No official code. Confidence: [C] for the rewards, the
normalisation, the ratio and the hyper-parameters, which v5 states; the rest are [A] choices,
each a Config field.

Idea
----
The sequence-level twin of GTPO: instead of shaping each token's reward by its entropy,
shape each *completion's* reward by its mean entropy. Among the correct completions, the
more exploratory (higher mean entropy) ones get a larger reward; among the wrong ones, the
more confident (lower mean entropy) ones get the larger penalty. The shaped rewards are
normalised over the group as GRPO normalises its rewards, and trained with a sequence-level
clipped surrogate on the geometric mean of the token ratios.

Equations (v5 numbering)
------------------------
    Non-empty completions only (|o_i| > 0) [A];  O⁺ = { i : r_i ≥ success_threshold },
    O⁻ = the rest;  n = |O⁺|,  m = |O⁻|.
    Mean entropy (§2.3):  Ĥ_i = (1/|o_i|) Σ_t m[i,t] H[i,t],   H̃_i = Ĥ_i + eps_H  [A]

    Sequence rewards (Eq. 6):
        r̂⁺_i = β₁·r_i + β₂ · ( H̃_i / Σ_{k∈O⁺} H̃_k ) · n                     i ∈ O⁺
        r̂⁻_j = −β₁ − β₂ · ( (1/H̃_j) / Σ_{k∈O⁻} (1/H̃_k) ) · m               j ∈ O⁻
    Conservation (Appendix B.3): with β₁ + β₂ = 1 and r_i = 1,  Σ_{O⁺} r̂⁺_i = n,
    Σ_{O⁻} r̂⁻_j = −m.

    Geometric means (§2.4.1, entropy_mean="geometric"): Ĥ_i becomes the geometric mean of the
    completion's floored token entropies, and each set's arithmetic mean in the weights its
    geometric mean:
        H̃_i = ( Π_t (H[i,t] + eps_H) )^(1/|o_i|)
        r̂⁺_i = β₁·r_i + β₂ · H̃_i / GM_{k∈O⁺} H̃_k
        r̂⁻_j = −β₁ − β₂ · (1/H̃_j) / GM_{k∈O⁻} (1/H̃_k)

    Advantage (§2.3, "analogously to Eq. 1 ... over the G sequences in the group"): one
    z-score of the shaped reward r̂_i = r̂⁺_i + r̂⁻_i (disjoint supports) over the group,
        Â_i = (r̂_i − mean_G r̂) / (std_G r̂ + eps),   broadcast to every token of o_i.

    Sequence ratio (§2.4.1 and Algorithm 1: "the geometric importance weight"):
        ŵ_i = exp( (1/|o_i|) Σ_t log w[i,t] )          (ratio="geometric", default)
        ŵ_i = (1/|o_i|) Σ_t w[i,t]                     (ratio="arithmetic", Eq. 8)
    Loss (Eq. 7), one clipped surrogate per sequence, 1/G:
        ℓ_i = −min( ŵ_i·Â_i, clip(ŵ_i, 1−ε_low, 1+ε_high)·Â_i )
        L = mean_{i: |o_i|>0} ℓ_i                                           ("seq-mean")

Relative to GRPO
----------------
The reward is entropy-shaped per completion before GRPO's group normalisation; the ratio is
one per *sequence* (GSPO's geometric mean) and the loss a plain mean over sequences; clip
0.2/0.28 (§3.1); no KL.

Choices [A] (each is a Config field; ``docs/fidelity.md`` lists them)
-------------------------------------------------------------------
* ``stats``: which completions enter the statistics. ``"joint"`` (default, §2.3): one
  z-score of r̂ over the group's non-empty completions. Its sign is the outcome's whenever
  β₂·(G − 2) < 2·β₁ (``tests/spec/test_grpo_s.py``). ``"group"``: GTPO's Eq. 4 per sequence,
  R̂⁺ and R̂⁻ normalised separately over all non-empty completions, the other subgroup's
  zeros included (this project's earlier default); ``"subgroup"``: each subgroup over its own
  completions only (β₁ then cancels).
* Statistics: unbiased std; a set with < 2 members or all-equal values normalises to 0.
* Empty completions (|o_i| = 0) have no mean entropy: they are excluded from O⁺/O⁻, from n
  and m, from the statistics and from the loss, and get advantage 0.
* ``entropy_mean``: ``"arithmetic"`` (default, Eq. 6 and §2.3's Ĥ) or ``"geometric"``
  (§2.4.1). §2.4.1's failed-side product runs over k = 1…|o_j| in the text; we read it as
  the m failed completions, as its successful-side product runs over the n successful ones.
* ``negative_shaping``: as GTPO, ``"paper"`` (default) is r̂⁻ above; ``"none"`` sets
  r̂⁻ ≡ 0 (the early form): with ``stats="joint"`` the failed completions then share the
  reward 0 in the group's z-score; with ``"group"`` a failed completion gets the R̂⁺
  normalisation of its 0, −mean(R̂⁺)/(std(R̂⁺) + eps); with ``"subgroup"`` O⁻'s zeros among
  themselves, 0. Every advantage is the z-score of a member of the set whose statistics it
  uses: |Â| ≤ (G − 1)/√G (Samuelson's inequality), for any entropies and any eps_H > 0.
* ``entropy_eps``: H̃_i = Ĥ_i + eps_H on both sides (finite 1/H̃, uniform split at H = 0);
  in the geometric mean the floor is applied per token, before the logarithm.
* ``success_threshold``: decided on the outcome reward before any shaping, as GTPO.
* DAPO's batch mechanisms as GTPO: ``dynamic_sampling`` on; ``overlong_shaping`` and
  ``overlong_filter`` off, as the contract's defaults (not used in §3's runs).

Worked example: ``docs/algorithms/grpo_s.md`` computes one group by hand;
``tests/spec/test_grpo_s.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Float, Float32, Float64, Shaped
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "grpo_s"

STATS = ("joint", "group", "subgroup")
NEGATIVE_SHAPING = ("paper", "none")
ENTROPY_MEANS = ("arithmetic", "geometric")
RATIOS = ("geometric", "arithmetic")
#: Aggregations the loss supports (one loss per sequence).
LOSS_AGG_MODES = ("seq-mean",)


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """GRPO-S hyper-parameters; defaults from the paper (v5) unless marked."""

    beta_1: contract.Coef = 1.0  # β₁, weight of the outcome reward in Eq. 6 (§3.1) [C]
    beta_2: contract.Coef = 0.1  # β₂, weight of the entropy-shaped part (§3.1) [C]
    stats: str = "joint"  # one z-score of r̂ over the group (§2.3) [C]; group/subgroup [A]
    entropy_mean: str = "arithmetic"  # Eq. 6; "geometric" = §2.4.1's means [C]
    negative_shaping: str = "paper"  # "paper" = r̂⁻ of Eq. 6; "none" = r̂⁻ ≡ 0 [A]
    ratio: str = "geometric"  # ŵ_i: §2.4.1 / Algorithm 1 [C]; "arithmetic" = Eq. 8 [C]
    entropy_eps: contract.Positive = core.EPS  # H̃_i = Ĥ_i + eps_H, so 1/H̃ is finite [A]
    clip_eps_low: contract.ClipLow = 0.2  # ε_low of the ratio clip (§3.1; Eq. 7 writes one ε) [C]
    clip_eps_high: contract.ClipHigh = 0.28  # ε_high of the ratio clip, clip-higher (§3.1) [C]
    kl_coef: float = 0.0  # β: no KL term in Eq. 7 [C]
    loss_agg_mode: str = "seq-mean"  # Eq. 7: 1/G Σ_i ℓ_i, one loss per sequence [C]
    eps: contract.Positive = core.EPS  # in the std denominators (verl's; TRL uses 1e-4) [C]
    dynamic_sampling: bool = True  # DAPO's filter 0 < #successful < G, as GTPO [A]

    def __post_init__(self) -> None:
        # Every field's type and range (beta_1, beta_2 ≥ 0; entropy_eps > 0): its annotation.
        contract.check_config(self, LOSS_AGG_MODES)
        contract.require_choice(self.stats, "Config.stats", STATS)
        contract.require_choice(self.entropy_mean, "Config.entropy_mean", ENTROPY_MEANS)
        contract.require_choice(self.negative_shaping, "Config.negative_shaping", NEGATIVE_SHAPING)
        contract.require_choice(self.ratio, "Config.ratio", RATIOS)

    def reads_rollout_entropy(self) -> bool:
        # Eq. 6: the sequence rewards are shaped by the rollout's mean entropies Ĥ_i.
        return True


def sequence_rewards(
    batch: RolloutBatch, cfg: Config
) -> tuple[Float64[Tensor, " B"], Float64[Tensor, " B"]]:
    """``(r_hat_plus, r_hat_minus)``, each ``[B]`` float64: the GRPO-S rewards of Eq. 6
    (``entropy_mean="geometric"``: §2.4.1's geometric means).

    ``r_hat_plus`` is non-zero only on successful non-empty completions, ``r_hat_minus`` only
    on failed non-empty ones (``≡ 0`` when ``negative_shaping="none"``); empty completions get
    0 in both. Vectorised on ``[N, G]`` views: sums over ``dim=1`` run over the group.
    """
    G = batch.group_size
    mask = batch.response_mask
    nonempty = core.group_view(mask.sum(dim=1) > 0, G)  # [N, G]
    rewards = core.group_view(batch.rewards.to(torch.float64), G)
    success = core.group_view(core.successful(batch, cfg.success_threshold), G)
    in_plus = nonempty & success  # O⁺
    in_minus = nonempty & ~success  # O⁻
    n = in_plus.sum(dim=1, keepdim=True).to(torch.float64)  # [N, 1]
    m = in_minus.sum(dim=1, keepdim=True).to(torch.float64)  # [N, 1]
    entropy_old = batch.entropy_old.detach().to(torch.float64)  # π_old's, detached

    if cfg.entropy_mean == "geometric":
        # §2.4.1: H̃_i = exp(mean_t log(H + eps_H)), the floor per token before the log; the
        # weights are H̃_i over the set's geometric mean (log space: nothing can overflow).
        log_entropy = torch.log(torch.where(mask.bool(), entropy_old, 0.0) + cfg.entropy_eps)
        log_h = core.group_view(core.masked_mean(log_entropy, mask, dim=1), G)  # log H̃_i
        log_gm_plus = core.masked_mean(log_h, in_plus, dim=1)[:, None]  # [N, 1]
        log_gm_minus = core.masked_mean(log_h, in_minus, dim=1)[:, None]
        weight_plus_n = torch.exp(log_h - log_gm_plus)  # H̃_i / GM⁺(H̃)
        weight_minus_m = torch.exp(log_gm_minus - log_h)  # (1/H̃_j) / GM⁻(1/H̃)
    else:
        # Ĥ_i = (1/|o_i|) Σ_t H[i,t] over the completion's own tokens, + eps_H (§2.3).
        mean_entropy = core.masked_mean(entropy_old, mask, dim=1)
        h_tilde = core.group_view(mean_entropy, G) + cfg.entropy_eps  # [N, G]
        # Eq. 6, successful side: weight H̃_i / Σ_{k∈O⁺} H̃_k, times n.
        entropy_sum_plus = core.masked_sum(h_tilde, in_plus, dim=1)[:, None]
        weight_plus_n = h_tilde / torch.where(n > 0, entropy_sum_plus, torch.ones_like(n)) * n
        # Eq. 6, failed side: weight (1/H̃_j) / Σ_{k∈O⁻} (1/H̃_k), times m; both scaled by
        # min_k H̃_k so that no term exceeds 1 (1/H̃ overflows for tiny eps_H).
        inf = torch.tensor(float("inf"), dtype=torch.float64)
        h_min = torch.where(in_minus, h_tilde, inf).amin(dim=1, keepdim=True)
        inverse_entropy = torch.where(m > 0, h_min, torch.ones_like(m)) / h_tilde
        inverse_sum_minus = core.masked_sum(inverse_entropy, in_minus, dim=1)[:, None]
        weight_minus = inverse_entropy / torch.where(m > 0, inverse_sum_minus, torch.ones_like(m))
        weight_minus_m = weight_minus * m
    r_hat_plus = core.masked(cfg.beta_1 * rewards + cfg.beta_2 * weight_plus_n, in_plus)
    if cfg.negative_shaping == "paper":
        r_hat_minus = core.masked(-cfg.beta_1 - cfg.beta_2 * weight_minus_m, in_minus)
    else:
        r_hat_minus = torch.zeros_like(r_hat_plus)  # early form: no failed-side reward [A]
    return r_hat_plus.reshape(-1), r_hat_minus.reshape(-1)


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: the shaped rewards normalised over the group (§2.3; ``stats``
    picks the set), each completion's value on every one of its tokens."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    G = batch.group_size
    nonempty = core.group_view(batch.response_mask.sum(dim=1) > 0, G)  # [N, G]
    success = core.group_view(core.successful(batch, cfg.success_threshold), G)
    r_hat_plus, r_hat_minus = (core.group_view(r, G) for r in sequence_rewards(batch, cfg))

    if cfg.stats == "joint":
        # §2.3: "analogously to Eq. 1", GRPO's z-score over the group's G sequences, of the
        # shaped reward r̂ = r̂⁺ + r̂⁻ (disjoint supports).
        A_hat = core.masked_zscore(r_hat_plus + r_hat_minus, nonempty, cfg.eps)
    else:
        # GTPO's Eq. 4 per sequence [A]: R̂⁺ and R̂⁻ separately, over all non-empty
        # completions ("group", the other subgroup's zeros included) or the subgroup's own.
        if cfg.stats == "group":
            set_plus, set_minus = nonempty, nonempty
        else:
            set_plus, set_minus = nonempty & success, nonempty & ~success
        # A set with < 2 members or zero variance gives 0.
        A_plus = core.masked_zscore(r_hat_plus, set_plus, cfg.eps)
        # A failed completion is normalised with the statistics of its own set: "none" gives
        # it r̂⁺ = 0, the early form's one reward [A] ("subgroup": O⁻'s zeros, hence 0).
        failed_rewards = r_hat_minus if cfg.negative_shaping == "paper" else r_hat_plus
        A_minus = core.masked_zscore(failed_rewards, set_minus, cfg.eps)
        A_hat = torch.where(success, A_plus, A_minus)
    # Sequence-level advantage: every token of o_i gets Â_i; padding gets exactly 0.
    A_hat = core.masked(A_hat, nonempty).reshape(-1)
    return core.broadcast_to_tokens(A_hat, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over groups, completions and positions."""
    B, T = batch.response_mask.shape
    G = batch.group_size
    A = torch.zeros(B, T, dtype=torch.float32)
    r = batch.rewards.tolist()
    outcome = r if batch.outcome_rewards is None else batch.outcome_rewards.tolist()
    mask = batch.response_mask.tolist()
    H = batch.entropy_old.tolist()
    beta_1, beta_2 = cfg.beta_1, cfg.beta_2
    for g in range(batch.num_groups):
        rows = [i for i in range(g * G, g * G + G) if sum(mask[i]) > 0]  # |o_i| > 0 only [A]
        H_hat = {}  # H̃_i: Ĥ_i + eps_H (§2.3), or the floored tokens' geometric mean (§2.4.1)
        for i in rows:
            tokens = [H[i][t] for t in range(T) if mask[i][t] == 1]
            if cfg.entropy_mean == "geometric":
                H_hat[i] = math.prod((h + cfg.entropy_eps) ** (1 / len(tokens)) for h in tokens)
            else:
                H_hat[i] = sum(tokens) / len(tokens) + cfg.entropy_eps
        O_plus = [i for i in rows if outcome[i] >= cfg.success_threshold]  # on the outcome
        O_minus = [i for i in rows if outcome[i] < cfg.success_threshold]
        n, m = len(O_plus), len(O_minus)
        r_hat_plus = {i: 0.0 for i in rows}
        r_hat_minus = {i: 0.0 for i in rows}
        for i in O_plus:
            if cfg.entropy_mean == "geometric":  # §2.4.1: over the n successes' GM
                gm_H = math.prod(H_hat[k] ** (1 / n) for k in O_plus)
                r_hat_plus[i] = beta_1 * r[i] + beta_2 * H_hat[i] / gm_H
            else:  # Eq. 6, successful side
                sum_H = sum(H_hat[k] for k in O_plus)
                r_hat_plus[i] = beta_1 * r[i] + beta_2 * H_hat[i] / sum_H * n
        if cfg.negative_shaping == "paper":
            for j in O_minus:
                if cfg.entropy_mean == "geometric":  # §2.4.1: over the m failures' GM of 1/H̃
                    gm_inv_H = math.prod((1.0 / H_hat[k]) ** (1 / m) for k in O_minus)
                    r_hat_minus[j] = -beta_1 - beta_2 * (1.0 / H_hat[j]) / gm_inv_H
                else:  # Eq. 6, failed side
                    inv_sum = sum(1.0 / H_hat[k] for k in O_minus)
                    r_hat_minus[j] = -beta_1 - beta_2 * (1.0 / H_hat[j]) / inv_sum * m

        def normalise(rewards: dict, members: list[int]) -> dict:
            # a z-score with the statistics of `members`; degenerate set -> 0.
            R = [rewards[i] for i in members]
            if len(R) < 2 or max(R) == min(R):
                return {i: 0.0 for i in rewards}
            mean = sum(R) / len(R)
            std = (sum((x - mean) ** 2 for x in R) / (len(R) - 1)) ** 0.5  # Bessel-corrected
            return {i: (v - mean) / (std + cfg.eps) for i, v in rewards.items()}

        if cfg.stats == "joint":  # §2.3: one z-score of r̂⁺ + r̂⁻ over the group
            joint = normalise({i: r_hat_plus[i] + r_hat_minus[i] for i in rows}, rows)
            for i in rows:
                for t in range(T):
                    if mask[i][t] == 1:
                        A[i, t] = joint[i]
            continue
        A_plus = normalise(r_hat_plus, rows if cfg.stats == "group" else O_plus)
        # "none": the failed completions' reward is r̂⁺ = 0, normalised within their own set [A].
        failed_rewards = r_hat_minus if cfg.negative_shaping == "paper" else r_hat_plus
        A_minus = normalise(failed_rewards, rows if cfg.stats == "group" else O_minus)
        for i in rows:
            A_hat_i = A_plus[i] if i in O_plus else A_minus[i]
            for t in range(T):
                if mask[i][t] == 1:
                    A[i, t] = A_hat_i
    return A


def sequence_ratio(
    logp: Float[Tensor, "B T"],
    logp_old: Float[Tensor, "B T"],
    mask: Shaped[Tensor, "B T"],
    ratio: str,
) -> Float32[Tensor, " B"]:
    """``[B]`` ŵ_i: the geometric mean of the token ratios over the completion's tokens,
    ``exp(mean_t log w)`` (``ratio="geometric"``, §2.4.1; GSPO's ``s_i``), or their arithmetic
    mean (``"arithmetic"``, Eq. 8). Empty rows: 1 / 0."""
    contract.require_choice(ratio, "ratio", RATIOS)
    if ratio == "arithmetic":
        return core.masked_mean(core.token_ratio(logp, logp_old, mask), mask, dim=1)
    return torch.exp(core.sequence_log_ratio(logp, logp_old, mask))


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """Sequence-level clipped surrogate, aggregated seq-mean (Eq. 7).

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`; Â_i is read as the mean of
            ``adv`` over the completion's tokens (its value on each of them).
        cfg: the configuration.
        entropy: unused by GRPO-S (its entropies are the rollout's, in ``batch.entropy_old``).
    """
    contract.check_config_type(cfg, Config)  # another algorithm's Config: refused
    contract.check_policy_tensor(logp, batch, "logp")
    contract.check_advantages(adv, batch)
    mask = batch.response_mask
    # Loss math in float32 even when the model runs in bf16/fp16.
    logp = logp.float()
    adv = adv.float()

    # ŵ_i, one importance ratio per completion (arithmetic or geometric mean of w[i,t]).
    w_hat = sequence_ratio(logp, batch.logp_old, mask, cfg.ratio)
    A_hat = core.masked_mean(adv, mask, dim=1)
    # Eq. 7: −min(ŵ_i·Â_i, clip(ŵ_i, 1−ε_low, 1+ε_high)·Â_i), one value per completion.
    seq_loss = -core.clipped_surrogate(w_hat, A_hat, cfg.clip_eps_low, cfg.clip_eps_high)

    metrics: dict[str, float] = {}
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # Optional k3 KL to the reference (off in the paper), averaged over each completion.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        seq_loss = seq_loss + cfg.kl_coef * core.masked_mean(kl, mask, dim=1)
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(seq_loss, mask, cfg.loss_agg_mode)
    # Clip fractions count *sequences* here (the ratio is per sequence).
    nonempty = (mask.sum(dim=1, keepdim=True) > 0).float()
    metrics.update(
        loss_metrics.ratio_metrics(
            w_hat[:, None], A_hat[:, None], nonempty, cfg.clip_eps_low, cfg.clip_eps_high
        )
    )
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
