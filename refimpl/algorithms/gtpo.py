"""GTPO: Group Token Policy Optimization (entropy-weighted token rewards).

Paper: Tan et al., "GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy
Entropy", arXiv 2508.04349 (v6), §2. Confidence: [S] (no official code; the v6 equations as
restated by two independent re-implementations that agree), plus the [A] choices below.

Idea
----
GRPO gives every token of a completion the same advantage. GTPO redistributes the outcome
reward over the tokens by the rollout policy's entropy: at each position, the tokens of the
*correct* completions share a bonus in proportion to their entropy (high-entropy "forks" get
more), and the tokens of the *wrong* completions share a penalty in proportion to their
*inverse* entropy (confident mistakes get more). The token rewards are then group-normalised
into token-specific advantages and trained with DAPO's loss.

Equations (numbers are v6's)
----------------------------
    O⁺ = { i : r_i ≥ success_threshold },  O⁻ = the rest of the group      (n = |O⁺|, m = |O⁻|)
    d_t = #{ k ∈ O⁺ : m[k,t] = 1 },  h_t = #{ k ∈ O⁻ : m[k,t] = 1 }        (active at t)
    H̃[i,t] = H[i,t] + eps_H           (rollout entropy, detached, floored by eps_H [A])

    Successful token reward (Eq. 3), i ∈ O⁺, m[i,t] = 1:
        r⁺[i,t] = α₁·r_i + α₂ · ( H̃[i,t] / Σ_{k∈O⁺, m[k,t]=1} H̃[k,t] ) · d_t
    Failed token reward (Eq. 5), j ∈ O⁻, m[j,t] = 1:
        r⁻[j,t] = −α₁ − α₂ · ( (1/H̃[j,t]) / Σ_{k∈O⁻, m[k,t]=1} (1/H̃[k,t]) ) · h_t
    (r⁺ = 0 on tokens of O⁻, r⁻ = 0 on tokens of O⁺, both 0 on padding.)

    Conservation (Proposition 2.2): the entropy weights at t sum to d_t (resp. h_t), so with
    α₁ + α₂ = 1 and r_i = 1:  Σ_{i∈O⁺ active at t} r⁺[i,t] = d_t,  Σ_{j∈O⁻} r⁻[j,t] = −h_t.

    Advantages (Eq. 6), R⁺ / R⁻ normalised separately within the group:
        A⁺[i,t] = (r⁺[i,t] − mean(R⁺)) / (std(R⁺) + eps)
        A⁻[j,t] = (r⁻[j,t] − mean(R⁻)) / (std(R⁻) + eps)
        A[i,t]  = A⁺[i,t] for i ∈ O⁺,  A⁻[i,t] for i ∈ O⁻,  0 on padding

    Loss (Eq. 7), DAPO's clip-higher and token-level aggregation:
        ℓ[i,t] = −min( w·A[i,t], clip(w, 1−ε_low, 1+ε_high)·A[i,t] ),   w = π_θ / π_old
        L = Σ_{i,t} m ℓ / Σ_{i,t} m                                         ("token-mean")

Relative to GRPO
----------------
The advantage is per *token* (entropy-shaped rewards, Eq. 3/5/6) instead of per completion;
the loss is DAPO's (clip 0.2/0.28, token-mean, no KL, dynamic sampling on).

Assumptions [A] (each is a Config field; ``docs/fidelity.md`` lists them)
------------------------------------------------------------------------
* ``stats``: which tokens enter mean(R⁺), std(R⁺) (and R⁻). ``"group"`` (default): every
  active token of all G completions, the zeros of the other subgroup included; then α₂ = 0
  gives back a token-level DAPO advantage (the z-score of r over the group's tokens, see
  ``tests/spec/test_gtpo.py``). ``"subgroup"``: only the subgroup's own active tokens (α₁
  then cancels). ``"batch"``: the subgroup's tokens pooled over every group of the batch, O⁺
  tokens as one set and O⁻ tokens as another (the public re-implementations' reading: a verl
  fork whitens each sign over the batch, textpolicy normalises each sign over all the episodes
  it is handed; ``docs/fidelity.md``, "Peer readings"). The token rewards (Eq. 3/5) stay per
  group in every scope.
* Statistics: unbiased std; a set with < 2 tokens or all-equal values normalises to exactly
  0 (never NaN). So a group with no successful completion has A⁺ ≡ 0.
* ``negative_shaping``: ``"v6"`` (default) is Eq. 5; ``"none"`` is the early (Aug 2025) form,
  which shapes the rewards of correct answers only: r⁻ ≡ 0, and a failed token gets what the
  normalisation of its own set gives its reward of 0. With ``stats="group"`` that set is the
  whole group, so A[j,t] = (0 − mean(R⁺)) / (std(R⁺) + eps): one normalisation over all the
  group's tokens. With ``stats="subgroup"`` it is O⁻'s tokens, all 0, so A[j,t] = 0: failed
  completions get no gradient. (Normalising the 0 with O⁺'s statistics instead, a set it does
  not belong to, is unbounded: −34.8 in the worked example of ``docs/algorithms/gtpo.md`` and
  −1.1e6 when two successful entropies differ by one float32 ulp.) So every advantage is the
  z-score of a member of the set whose statistics it uses, and |A| ≤ (L − 1)/√L with L the
  size of that set (Samuelson's inequality with the unbiased std), at most the group's
  active-token count (the batch's with ``stats="batch"``). The bound holds for any entropies,
  exact zeros and subnormals included, and any eps_H > 0 (``tests/spec/test_tiny_entropies.py``).
* ``entropy_eps``: every entropy is floored as H̃ = H + eps_H on *both* sides, so that 1/H̃ is
  finite and a position where all entropies are 0 splits the bonus uniformly (the limit of
  equal entropies). Conservation stays exact; invariance to scaling all entropies by c > 0 is
  exact only as eps_H → 0.
* ``success_threshold = 0.5``: r_i ≥ 0.5 is success (binary toy rewards), decided on the
  outcome reward before any reward shaping (``RolloutBatch.outcome_rewards``), as dynamic
  sampling decides it. With ``overlong_shaping`` on (off by default; not in the paper) the
  shaped r_i enters α₁·r_i of Eq. 3, while Eq. 5 has no r_j: the length penalty then reaches
  successful completions only.

Worked example: ``docs/algorithms/gtpo.md`` computes one group by hand;
``tests/spec/test_gtpo.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Float64
from torch import Tensor

from refimpl import core
from refimpl.core import RolloutBatch

NAME = "gtpo"

STATS = ("group", "subgroup", "batch")
NEGATIVE_SHAPING = ("v6", "none")
#: Aggregations the loss supports (its loss is per token).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


@dataclass(frozen=True)
class Config(core.AlgorithmConfig):
    """GTPO hyper-parameters; defaults from the v6 paper unless marked."""

    alpha_1: float = 1.0  # α₁, weight of the outcome reward in Eq. 3/5 (v6 experiments) [S]
    alpha_2: float = 0.1  # α₂, weight of the entropy-shaped part (v6); α₁+α₂ ≠ 1 here [S]
    stats: str = "group"  # tokens entering mean/std of R⁺, R⁻ in Eq. 6: group/subgroup/batch [A]
    negative_shaping: str = "v6"  # "v6" = Eq. 5; "none" = early version, r⁻ ≡ 0 [A]
    entropy_eps: float = core.EPS  # H̃ = H + eps_H, so 1/H̃ is finite [A]
    clip_eps_low: float = 0.2  # ε_low, DAPO clip-higher (Eq. 7 uses DAPO's objective) [S]
    clip_eps_high: float = 0.28  # ε_high, DAPO clip-higher [S]
    kl_coef: float = 0.0  # β: no KL term (DAPO's objective) [S]
    loss_agg_mode: str = "token-mean"  # Eq. 7: 1/Σ|o_i| Σ_i Σ_t (DAPO's token-level loss) [S]
    eps: float = core.EPS  # in the std denominators of Eq. 6 (verl's; TRL uses 1e-4) [C]
    success_threshold: float = 0.5  # r_i ≥ this ⇒ i ∈ O⁺, and for dynamic sampling [A]
    dynamic_sampling: bool = True  # DAPO's filter 0 < #successful < G, as in DAPO [A]
    overlong_shaping: bool = False  # DAPO's length penalty; not used by the paper [A]
    overlong_cache_frac: float = 0.2  # L_cache / L_max when overlong_shaping is on (DAPO) [C]
    overlong_penalty_scale: float = 0.5  # R_len × half the reward range, as DAPO on ±1 [C]
    overlong_filter: bool = False  # DAPO's truncated-sample masking; off [A]

    def __post_init__(self) -> None:
        core.check_config(self, LOSS_AGG_MODES)
        for name in ("alpha_1", "alpha_2"):
            value = getattr(self, name)
            core.require(
                isinstance(value, (int, float)) and 0.0 <= value < float("inf"),
                f"Config.{name}",
                f"a finite value ≥ 0, got {value!r}",
            )
        core.require_choice(self.stats, "Config.stats", STATS)
        core.require_choice(self.negative_shaping, "Config.negative_shaping", NEGATIVE_SHAPING)
        core.require(
            isinstance(self.entropy_eps, (int, float)) and 0.0 < self.entropy_eps < float("inf"),
            "Config.entropy_eps",
            f"a finite value > 0, got {self.entropy_eps!r}",
        )


def token_rewards(
    batch: RolloutBatch, cfg: Config
) -> tuple[Float64[Tensor, "B T"], Float64[Tensor, "B T"]]:
    """``(r_plus, r_minus)``, each ``[B, T]`` float64: the token rewards of v6 Eq. 3 and 5.

    ``r_plus`` is non-zero only on tokens of successful completions, ``r_minus`` only on tokens
    of failed ones (and ``r_minus ≡ 0`` when ``negative_shaping="none"``); both are exactly 0
    on padding. Vectorised on ``[N, G, T]`` views: sums over ``dim=1`` run over the group's
    completions at each position.
    """
    G = batch.group_size
    active = core.group_view(batch.response_mask.bool(), G)  # [N, G, T]
    rewards = core.group_view(batch.rewards.to(torch.float64), G)[:, :, None]  # [N, G, 1]
    success = core.group_view(core.successful(batch, cfg.success_threshold), G)[:, :, None]
    active_plus = active & success  # tokens of O⁺ still generating
    active_minus = active & ~success  # tokens of O⁻ still generating
    # Entropies of π_old, detached (Remark 2.5), floored by eps_H [A]; 1 on padding so that
    # nothing below divides by a garbage value (every use is masked again anyway).
    entropy_old = core.group_view(batch.entropy_old.detach().to(torch.float64), G)
    one = torch.ones((), dtype=torch.float64)
    h_tilde = torch.where(active, entropy_old + cfg.entropy_eps, one)

    # d_t and h_t: how many successful / failed completions are active at position t.
    d_t = active_plus.sum(dim=1, keepdim=True).to(torch.float64)  # [N, 1, T]
    h_t = active_minus.sum(dim=1, keepdim=True).to(torch.float64)  # [N, 1, T]

    # v6 Eq. 3: the entropy weight H̃[i,t] / Σ_{k∈O⁺ active at t} H̃[k,t], times d_t.
    entropy_sum_plus = core.masked_sum(h_tilde, active_plus, dim=1)[:, None, :]  # [N, 1, T]
    weight_plus = h_tilde / torch.where(d_t > 0, entropy_sum_plus, torch.ones_like(d_t))
    r_plus = core.masked(cfg.alpha_1 * rewards + cfg.alpha_2 * weight_plus * d_t, active_plus)

    if cfg.negative_shaping == "v6":
        # v6 Eq. 5: inverse-entropy weight (1/H̃[j,t]) / Σ_{k∈O⁻ active at t} (1/H̃[k,t]),
        # numerator and denominator multiplied by min_k H̃[k,t] so that no term exceeds 1:
        # 1/H̃ alone overflows float64 once eps_H < 5.6e-309 and every H = 0.
        inf = torch.tensor(float("inf"), dtype=torch.float64)
        h_min = torch.where(active_minus, h_tilde, inf).amin(dim=1, keepdim=True)
        inverse_entropy = torch.where(h_t > 0, h_min, one) / h_tilde
        inverse_sum_minus = core.masked_sum(inverse_entropy, active_minus, dim=1)[:, None, :]
        weight_minus = inverse_entropy / torch.where(
            h_t > 0, inverse_sum_minus, torch.ones_like(h_t)
        )
        r_minus = core.masked(-cfg.alpha_1 - cfg.alpha_2 * weight_minus * h_t, active_minus)
    else:
        # Early (Aug 2025) form: no token reward on failed completions [A].
        r_minus = torch.zeros_like(r_plus)
    return r_plus.reshape(batch.response_mask.shape), r_minus.reshape(batch.response_mask.shape)


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` token advantages: R⁺ and R⁻ group-normalised separately (v6 Eq. 6)."""
    G = batch.group_size
    active = core.group_view(batch.response_mask.bool(), G)  # [N, G, T]
    success = core.group_view(core.successful(batch, cfg.success_threshold), G)[:, :, None]
    r_plus, r_minus = (core.group_view(r, G) for r in token_rewards(batch, cfg))

    # Which tokens enter mean(R⁺)/std(R⁺) and mean(R⁻)/std(R⁻) [A]: "group" = every active
    # token of the group (the other subgroup's zeros included); "subgroup" = its own tokens;
    # "batch" = its own tokens in every group, one set per sign over the batch.
    if cfg.stats == "group":
        set_plus, set_minus = active, active
    else:
        set_plus, set_minus = active & success, active & ~success

    def zscore(values: Tensor, in_set: Tensor) -> Tensor:
        if cfg.stats == "batch":  # one normalisation set for the whole batch
            flat = core.masked_zscore(values.reshape(1, -1), in_set.reshape(1, -1), cfg.eps)
            return flat.reshape(values.shape)
        return core.masked_zscore(values, in_set, cfg.eps)

    # v6 Eq. 6; a set with < 2 tokens or zero variance gives 0 (so no success ⇒ A⁺ ≡ 0).
    A_plus = zscore(r_plus, set_plus)
    # A failed token is normalised with the statistics of its own set (so |A| stays bounded).
    # "v6": its reward r⁻ (Eq. 5). "none": r⁻ ≡ 0 and the early form's one reward is r⁺, which
    # is 0 on failed tokens [A]: "group" gives (0 − mean(R⁺))/(std(R⁺) + eps); "subgroup"
    # normalises O⁻'s zeros among themselves, which gives 0.
    failed_rewards = r_minus if cfg.negative_shaping == "v6" else r_plus
    A_minus = zscore(failed_rewards, set_minus)
    A = torch.where(success, A_plus, A_minus)
    return core.masked(A, active).reshape(batch.response_mask.shape).to(torch.float32)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over groups, completions and positions."""
    B, T = batch.response_mask.shape
    G = batch.group_size
    A = torch.zeros(B, T, dtype=torch.float32)
    r = batch.rewards.tolist()
    outcome = r if batch.outcome_rewards is None else batch.outcome_rewards.tolist()
    m = batch.response_mask.tolist()
    H = batch.entropy_old.tolist()
    alpha_1, alpha_2 = cfg.alpha_1, cfg.alpha_2
    pooled: list[tuple[dict, dict, list[int], list[int]]] = []  # per group, for "batch"
    for g in range(batch.num_groups):
        rows = range(g * G, g * G + G)
        O_plus = [i for i in rows if outcome[i] >= cfg.success_threshold]  # on the outcome
        O_minus = [i for i in rows if outcome[i] < cfg.success_threshold]
        r_plus = {}  # (i, t) -> r⁺[i,t] for every active token of the group
        r_minus = {}  # (i, t) -> r⁻[i,t]
        for t in range(T):
            plus_t = [k for k in O_plus if m[k][t] == 1]  # O⁺ active at t
            minus_t = [k for k in O_minus if m[k][t] == 1]  # O⁻ active at t
            d_t, h_t = len(plus_t), len(minus_t)
            sum_H = sum(H[k][t] + cfg.entropy_eps for k in plus_t)
            sum_inv_H = sum(1.0 / (H[k][t] + cfg.entropy_eps) for k in minus_t)
            for i in rows:
                if m[i][t] != 1:
                    continue
                r_plus[i, t] = 0.0
                r_minus[i, t] = 0.0
                if i in plus_t:
                    # v6 Eq. 3
                    H_i = H[i][t] + cfg.entropy_eps
                    r_plus[i, t] = alpha_1 * r[i] + alpha_2 * H_i / sum_H * d_t
                elif cfg.negative_shaping == "v6":
                    # v6 Eq. 5
                    inv_H = 1.0 / (H[i][t] + cfg.entropy_eps)
                    r_minus[i, t] = -alpha_1 - alpha_2 * inv_H / sum_inv_H * h_t

        def normalise(rewards: dict, members: list[int]) -> dict:
            # v6 Eq. 6 over the tokens of `members`; degenerate set -> mean 0, scale None.
            R = [v for (i, _t), v in rewards.items() if i in members]
            if len(R) < 2 or max(R) == min(R):
                return {key: 0.0 for key in rewards}
            mean = sum(R) / len(R)
            std = (sum((x - mean) ** 2 for x in R) / (len(R) - 1)) ** 0.5  # Bessel-corrected
            return {key: (v - mean) / (std + cfg.eps) for key, v in rewards.items()}

        # "none": the failed tokens' reward is r⁺ = 0, normalised within their own set [A].
        failed_rewards = r_minus if cfg.negative_shaping == "v6" else r_plus
        if cfg.stats == "batch":
            pooled.append((r_plus, failed_rewards, O_plus, O_minus))
            continue
        everyone = list(rows)
        A_plus = normalise(r_plus, everyone if cfg.stats == "group" else O_plus)
        A_minus = normalise(failed_rewards, everyone if cfg.stats == "group" else O_minus)
        for i, t in r_plus:
            A[i, t] = A_plus[i, t] if i in O_plus else A_minus[i, t]
    if cfg.stats == "batch":
        # One set per sign over the batch: the O⁺ tokens of every group, the O⁻ tokens.
        all_plus = {k: v for r_p, _, _, _ in pooled for k, v in r_p.items()}
        all_failed = {k: v for _, r_f, _, _ in pooled for k, v in r_f.items()}
        plus_rows = [i for _, _, O_p, _ in pooled for i in O_p]
        minus_rows = [i for _, _, _, O_m in pooled for i in O_m]
        A_plus = normalise(all_plus, plus_rows)
        A_minus = normalise(all_failed, minus_rows)
        for i, t in all_plus:
            A[i, t] = A_plus[i, t] if i in plus_rows else A_minus[i, t]
    return A


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """Clipped surrogate with token advantages, aggregated token-mean (v6 Eq. 7).

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by GTPO (its entropies are the rollout's, in ``batch.entropy_old``).
    """
    core.check_config_type(cfg, Config)  # another algorithm's Config: refused
    core.check_policy_tensor(logp, batch, "logp")
    core.check_advantages(adv, batch)
    mask = batch.response_mask
    # Loss math in float32 even when the model runs in bf16/fp16.
    logp = logp.float()
    adv = adv.float()

    # w[i,t] = π_θ / π_old, the per-token importance ratio.
    w = core.token_ratio(logp, batch.logp_old, mask)
    # v6 Eq. 7: −min(w·A[i,t], clip(w, 1−ε_low, 1+ε_high)·A[i,t]), A now differs per token.
    token_loss = -core.clipped_surrogate(w, adv, cfg.clip_eps_low, cfg.clip_eps_high)

    metrics: dict[str, float] = {}
    if cfg.kl_coef > 0:
        core.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # Optional k3 KL to the reference (off in the paper), as in GRPO's Eq. 4.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)
    metrics.update(core.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(core.common_metrics(batch, logp, adv))
    return total, metrics
