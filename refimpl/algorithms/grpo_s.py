"""GRPO-S: Sequence-Level GRPO with entropy-weighted sequence rewards.

Paper: Tan et al., "GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy
Entropy", arXiv 2508.04349 (v6), §2 (the sequence-level analogue of GTPO). Confidence: [S]
(no official code; the v6 equations as restated by two independent re-implementations that
agree), plus the [A] choices below.

Idea
----
The sequence-level twin of GTPO: instead of shaping each token's reward by its entropy,
shape each *completion's* reward by its mean entropy. Among the correct completions, the
more exploratory (higher mean entropy) ones get a larger reward; among the wrong ones, the
more confident (lower mean entropy) ones get the larger penalty. The loss is a sequence-level
clipped surrogate on the mean token ratio, which the paper finds more stable on long CoT.

Equations (our sources do not pin v6's numbers for GRPO-S, so each line cites the GTPO
equation it is the per-sequence analogue of)
-----------------------------------------------------------------------------------------
    Non-empty completions only (|o_i| > 0) [A];  O⁺ = { i : r_i ≥ success_threshold },
    O⁻ = the rest;  n = |O⁺|,  m = |O⁻|.
    Mean entropy:  Ĥ_i = (1/|o_i|) Σ_t m[i,t] H[i,t],   H̃_i = Ĥ_i + eps_H  [A]

    Successful sequence reward (analogue of Eq. 3), i ∈ O⁺:
        r̂⁺_i = β₁·r_i + β₂ · ( H̃_i / Σ_{k∈O⁺} H̃_k ) · n
    Failed sequence reward (analogue of Eq. 5), j ∈ O⁻:
        r̂⁻_j = −β₁ − β₂ · ( (1/H̃_j) / Σ_{k∈O⁻} (1/H̃_k) ) · m
    Conservation: with β₁ + β₂ = 1 and r_i = 1,  Σ_{i∈O⁺} r̂⁺_i = n,  Σ_{j∈O⁻} r̂⁻_j = −m.

    Advantage (analogue of Eq. 6), R̂⁺ and R̂⁻ normalised separately within the group:
        Â_i = (r̂⁺_i − mean(R̂⁺)) / (std(R̂⁺) + eps)   for i ∈ O⁺   (likewise R̂⁻ for O⁻)
    broadcast to every token of o_i.

    Sequence ratio and loss (GRPO-S objective):
        ŵ_i = (1/|o_i|) Σ_t w[i,t]          (arithmetic, default)  or
        ŵ_i = s_i = exp( (1/|o_i|) Σ_t log w[i,t] )   (ratio="geometric", GSPO's ratio)
        ℓ_i = −min( ŵ_i·Â_i, clip(ŵ_i, 1−ε_low, 1+ε_high)·Â_i )
        L = mean_{i: |o_i|>0} ℓ_i                                           ("seq-mean")

Relative to GRPO
----------------
The reward is entropy-shaped per completion and the two subgroups are normalised separately
(Eq. 6 per sequence); the ratio is one per *sequence* and the loss is a plain mean over
sequences; DAPO's clip-higher; no KL.

Assumptions [A] (each is a Config field; ``docs/fidelity.md`` lists them)
------------------------------------------------------------------------
* ``stats``: which completions enter mean(R̂⁺), std(R̂⁺) (and R̂⁻): ``"group"`` (default) all
  non-empty completions of the group, the other subgroup's zeros included; ``"subgroup"``
  only the subgroup's own completions; ``"joint"``: one z-score of the shaped reward
  r̂_i = r̂⁺_i + r̂⁻_i over the group's non-empty completions, GRPO's normalisation applied to
  the shaped rewards (a verl fork's reading; ``docs/fidelity.md``, "Peer readings"). With
  ``"joint"`` the bound below holds as well (one set of at most G members).
* Statistics: unbiased std; a set with < 2 members or all-equal values normalises to 0.
* Empty completions (|o_i| = 0) have no mean entropy: they are excluded from O⁺/O⁻, from n
  and m, from the statistics and from the loss, and get advantage 0.
* ``negative_shaping``: as GTPO, ``"v6"`` (default) is the failed reward above; ``"none"``
  sets r̂⁻ ≡ 0 and a failed completion gets the normalisation of its reward 0 within its own
  set: with ``stats="group"`` the R̂⁺ normalisation over the group, −mean(R̂⁺)/(std(R̂⁺) + eps);
  with ``"subgroup"`` O⁻'s zeros among themselves, 0. Every advantage is then the z-score of a
  member of the set whose statistics it uses: |Â| ≤ (G − 1)/√G (Samuelson's inequality),
  for any entropies (exact zeros, subnormals) and any eps_H > 0.
* ``entropy_eps``: H̃_i = Ĥ_i + eps_H on both sides (finite 1/H̃, uniform split at H = 0).
* ``ratio``: the arithmetic mean, as the secondary sources restate it [S]; ``"geometric"`` is
  GSPO's s_i.
* ``success_threshold``: decided on the outcome reward before any shaping, as GTPO.

Worked example: ``docs/algorithms/grpo_s.md`` computes one group by hand;
``tests/spec/test_grpo_s.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Float32, Float64, Shaped
from torch import Tensor

from refimpl import core
from refimpl.core import RolloutBatch

NAME = "grpo_s"

STATS = ("group", "subgroup", "joint")
NEGATIVE_SHAPING = ("v6", "none")
RATIOS = ("arithmetic", "geometric")
#: Aggregations the loss supports (one loss per sequence).
LOSS_AGG_MODES = ("seq-mean",)


@dataclass(frozen=True)
class Config(core.AlgorithmConfig):
    """GRPO-S hyper-parameters; defaults from the v6 paper unless marked."""

    beta_1: float = 1.0  # β₁, weight of the outcome reward in r̂⁺, r̂⁻ (v6) [S]
    beta_2: float = 0.1  # β₂, weight of the entropy-shaped part (v6) [S]
    stats: str = "group"  # completions entering mean/std of R̂⁺, R̂⁻: group/subgroup/joint [A]
    negative_shaping: str = "v6"  # "v6" = failed reward above; "none" = r̂⁻ ≡ 0 [A]
    ratio: str = "arithmetic"  # ŵ_i: mean of token ratios [S]; "geometric" = GSPO's s_i [A]
    entropy_eps: float = core.EPS  # H̃_i = Ĥ_i + eps_H, so 1/H̃ is finite [A]
    clip_eps_low: float = 0.2  # ε_low, DAPO clip-higher [S]
    clip_eps_high: float = 0.28  # ε_high, DAPO clip-higher [S]
    kl_coef: float = 0.0  # β: no KL term [S]
    loss_agg_mode: str = "seq-mean"  # GRPO-S objective: 1/G Σ_i ℓ_i, one loss per sequence [S]
    eps: float = core.EPS  # in the std denominators (verl's; TRL uses 1e-4) [C]
    success_threshold: float = 0.5  # r_i ≥ this ⇒ i ∈ O⁺, and for dynamic sampling [A]
    dynamic_sampling: bool = True  # DAPO's filter 0 < #successful < G, as GTPO [A]
    overlong_shaping: bool = False  # DAPO's length penalty; not used by the paper [A]
    overlong_cache_frac: float = 0.2  # L_cache / L_max when overlong_shaping is on (DAPO) [C]
    overlong_penalty_scale: float = 0.5  # R_len × half the reward range, as DAPO on ±1 [C]
    overlong_filter: bool = False  # DAPO's truncated-sample masking; off [A]

    def __post_init__(self) -> None:
        core.check_config(self, LOSS_AGG_MODES)
        for name in ("beta_1", "beta_2"):
            value = getattr(self, name)
            core.require(
                isinstance(value, (int, float)) and 0.0 <= value < float("inf"),
                f"Config.{name}",
                f"a finite value ≥ 0, got {value!r}",
            )
        core.require_choice(self.stats, "Config.stats", STATS)
        core.require_choice(self.negative_shaping, "Config.negative_shaping", NEGATIVE_SHAPING)
        core.require_choice(self.ratio, "Config.ratio", RATIOS)
        core.require(
            isinstance(self.entropy_eps, (int, float)) and 0.0 < self.entropy_eps < float("inf"),
            "Config.entropy_eps",
            f"a finite value > 0, got {self.entropy_eps!r}",
        )


def sequence_rewards(
    batch: RolloutBatch, cfg: Config
) -> tuple[Float64[Tensor, " B"], Float64[Tensor, " B"]]:
    """``(r_hat_plus, r_hat_minus)``, each ``[B]`` float64: the GRPO-S rewards
    (the per-sequence analogues of v6 Eq. 3 and 5).

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
    # Ĥ_i = (1/|o_i|) Σ_t H[i,t] over the completion's own tokens (π_old's, detached), + eps_H.
    mean_entropy = core.masked_mean(batch.entropy_old.detach().to(torch.float64), mask, dim=1)
    h_tilde = core.group_view(mean_entropy, G) + cfg.entropy_eps  # [N, G]

    n = in_plus.sum(dim=1, keepdim=True).to(torch.float64)  # [N, 1]
    m = in_minus.sum(dim=1, keepdim=True).to(torch.float64)  # [N, 1]

    # Success reward (v6 Eq. 3 per sequence): weight H̃_i / Σ_{k∈O⁺} H̃_k, times n.
    entropy_sum_plus = core.masked_sum(h_tilde, in_plus, dim=1)[:, None]
    weight_plus = h_tilde / torch.where(n > 0, entropy_sum_plus, torch.ones_like(n))
    r_hat_plus = core.masked(cfg.beta_1 * rewards + cfg.beta_2 * weight_plus * n, in_plus)

    if cfg.negative_shaping == "v6":
        # Failed reward (v6 Eq. 5 per sequence): weight (1/H̃_j) / Σ_{k∈O⁻} (1/H̃_k), times m;
        # both scaled by min_k H̃_k so that no term exceeds 1 (1/H̃ overflows for tiny eps_H).
        inf = torch.tensor(float("inf"), dtype=torch.float64)
        h_min = torch.where(in_minus, h_tilde, inf).amin(dim=1, keepdim=True)
        inverse_entropy = torch.where(m > 0, h_min, torch.ones_like(m)) / h_tilde
        inverse_sum_minus = core.masked_sum(inverse_entropy, in_minus, dim=1)[:, None]
        weight_minus = inverse_entropy / torch.where(m > 0, inverse_sum_minus, torch.ones_like(m))
        r_hat_minus = core.masked(-cfg.beta_1 - cfg.beta_2 * weight_minus * m, in_minus)
    else:
        r_hat_minus = torch.zeros_like(r_hat_plus)  # early form: no failed-side reward [A]
    return r_hat_plus.reshape(-1), r_hat_minus.reshape(-1)


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: R̂⁺ and R̂⁻ normalised separately (v6 Eq. 6 per sequence), each
    completion's value on every one of its tokens."""
    G = batch.group_size
    nonempty = core.group_view(batch.response_mask.sum(dim=1) > 0, G)  # [N, G]
    success = core.group_view(core.successful(batch, cfg.success_threshold), G)
    r_hat_plus, r_hat_minus = (core.group_view(r, G) for r in sequence_rewards(batch, cfg))

    # Which completions enter the statistics [A]: "group" = all non-empty completions (the
    # other subgroup's zeros included); "subgroup" = the subgroup's own completions.
    if cfg.stats == "group":
        set_plus, set_minus = nonempty, nonempty
    else:
        set_plus, set_minus = nonempty & success, nonempty & ~success
    if cfg.stats == "joint":
        # GRPO's z-score of the shaped reward r̂⁺ + r̂⁻ (disjoint supports) over the group [A].
        A_hat = core.masked_zscore(r_hat_plus + r_hat_minus, nonempty, cfg.eps)
        A_hat = core.masked(A_hat, nonempty).reshape(-1)
        return core.broadcast_to_tokens(A_hat, batch.response_mask)
    # v6 Eq. 6 per sequence; a set with < 2 members or zero variance gives 0.
    A_plus = core.masked_zscore(r_hat_plus, set_plus, cfg.eps)
    # A failed completion is normalised with the statistics of its own set: "none" gives it
    # r̂⁺ = 0, the early form's one reward [A] ("subgroup": O⁻'s zeros, hence 0).
    failed_rewards = r_hat_minus if cfg.negative_shaping == "v6" else r_hat_plus
    A_minus = core.masked_zscore(failed_rewards, set_minus, cfg.eps)
    A_hat = core.masked(torch.where(success, A_plus, A_minus), nonempty).reshape(-1)
    # Sequence-level advantage: every token of o_i gets Â_i; padding gets exactly 0.
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
        H_hat = {}  # Ĥ_i + eps_H
        for i in rows:
            length = sum(mask[i])
            H_hat[i] = sum(H[i][t] for t in range(T) if mask[i][t] == 1) / length
            H_hat[i] += cfg.entropy_eps
        O_plus = [i for i in rows if outcome[i] >= cfg.success_threshold]  # on the outcome
        O_minus = [i for i in rows if outcome[i] < cfg.success_threshold]
        n, m = len(O_plus), len(O_minus)
        r_hat_plus = {i: 0.0 for i in rows}
        r_hat_minus = {i: 0.0 for i in rows}
        for i in O_plus:
            # v6 GRPO-S success reward (Eq. 3 per sequence)
            sum_H = sum(H_hat[k] for k in O_plus)
            r_hat_plus[i] = beta_1 * r[i] + beta_2 * H_hat[i] / sum_H * n
        if cfg.negative_shaping == "v6":
            for j in O_minus:
                # v6 GRPO-S failed reward (Eq. 5 per sequence)
                inv_sum = sum(1.0 / H_hat[k] for k in O_minus)
                r_hat_minus[j] = -beta_1 - beta_2 * (1.0 / H_hat[j]) / inv_sum * m

        def normalise(rewards: dict, members: list[int]) -> dict:
            # v6 Eq. 6 per sequence with the statistics of `members`; degenerate set -> 0.
            R = [rewards[i] for i in members]
            if len(R) < 2 or max(R) == min(R):
                return {i: 0.0 for i in rewards}
            mean = sum(R) / len(R)
            std = (sum((x - mean) ** 2 for x in R) / (len(R) - 1)) ** 0.5  # Bessel-corrected
            return {i: (v - mean) / (std + cfg.eps) for i, v in rewards.items()}

        if cfg.stats == "joint":  # one z-score of r̂⁺ + r̂⁻ over the group [A]
            joint = normalise({i: r_hat_plus[i] + r_hat_minus[i] for i in rows}, rows)
            for i in rows:
                for t in range(T):
                    if mask[i][t] == 1:
                        A[i, t] = joint[i]
            continue
        A_plus = normalise(r_hat_plus, rows if cfg.stats == "group" else O_plus)
        # "none": the failed completions' reward is r̂⁺ = 0, normalised within their own set [A].
        failed_rewards = r_hat_minus if cfg.negative_shaping == "v6" else r_hat_plus
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
    """``[B]`` ŵ_i of GRPO-S objective: the arithmetic mean of the token ratios over the completion's
    tokens, or (``ratio="geometric"``) GSPO's ``s_i = exp(mean_t log w)``. Empty rows: 0 / 1."""
    core.require_choice(ratio, "ratio", RATIOS)
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
    """Sequence-level clipped surrogate, aggregated seq-mean (GRPO-S objective).

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`; Â_i is read as the mean of
            ``adv`` over the completion's tokens (its value on each of them).
        cfg: the configuration.
        entropy: unused by GRPO-S (its entropies are the rollout's, in ``batch.entropy_old``).
    """
    core.check_config_type(cfg, Config)  # another algorithm's Config: refused
    core.check_policy_tensor(logp, batch, "logp")
    core.check_advantages(adv, batch)
    mask = batch.response_mask
    # Loss math in float32 even when the model runs in bf16/fp16.
    logp = logp.float()
    adv = adv.float()

    # ŵ_i, one importance ratio per completion (arithmetic or geometric mean of w[i,t]).
    w_hat = sequence_ratio(logp, batch.logp_old, mask, cfg.ratio)
    A_hat = core.masked_mean(adv, mask, dim=1)
    # GRPO-S objective: −min(ŵ_i·Â_i, clip(ŵ_i, 1−ε_low, 1+ε_high)·Â_i), one value per completion.
    seq_loss = -core.clipped_surrogate(w_hat, A_hat, cfg.clip_eps_low, cfg.clip_eps_high)

    metrics: dict[str, float] = {}
    if cfg.kl_coef > 0:
        core.require(
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
        core.ratio_metrics(
            w_hat[:, None], A_hat[:, None], nonempty, cfg.clip_eps_low, cfg.clip_eps_high
        )
    )
    metrics.update(core.common_metrics(batch, logp, adv))
    return total, metrics
