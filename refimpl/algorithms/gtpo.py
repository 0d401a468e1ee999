"""GTPO: Group Token Policy Optimization (entropy-weighted token rewards).

Paper: Tan et al., "GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy
Entropy", arXiv 2508.04349, cited from the v5 full text (§2.2, §2.4, §3.1; equation numbers
are v5's). No official code. Confidence: [C] for the token rewards, the hyper-parameters and
the loss, which v5 states; the normalisation set is the text's "batch" but our default is a
documented departure from it (below); the rest are [A] choices, each a Config field.
([C]: confirmed by the paper or its official code; [S]: by independent re-implementations
only; [A]: assumed here, switchable by a Config field; docs/fidelity.md lists them.)

Idea
----
GRPO gives every token of a completion the same advantage. GTPO redistributes the outcome
reward over the tokens by the rollout policy's entropy: at each position, the tokens of the
*correct* completions share a bonus in proportion to their entropy (high-entropy "forks" get
more), and the tokens of the *wrong* completions share a penalty in proportion to their
*inverse* entropy (confident mistakes get more). The token rewards are then normalised into
token-specific advantages and trained with a PPO-clipped, token-mean loss.

Equations (v5 numbering)
------------------------
    O⁺ = { i : r_i ≥ success_threshold },  O⁻ = the rest of the group      (n = |O⁺|, m = |O⁻|)
    d_t = #{ k ∈ O⁺ : m[k,t] = 1 },  h_t = #{ k ∈ O⁻ : m[k,t] = 1 }        (active at t)
    H̃[i,t] = H[i,t] + eps_H           (π_old's entropy, detached, floored by eps_H [A])

    Successful token reward (Eq. 2), i ∈ O⁺, m[i,t] = 1:
        r⁺[i,t] = α₁·r_i + α₂ · ( H̃[i,t] / Σ_{k∈O⁺, m[k,t]=1} H̃[k,t] ) · d_t
    Failed token reward (Eq. 3), j ∈ O⁻, m[j,t] = 1:
        r⁻[j,t] = −α₁ − α₂ · ( (1/H̃[j,t]) / Σ_{k∈O⁻, m[k,t]=1} (1/H̃[k,t]) ) · h_t
    (r⁺ = 0 on tokens of O⁻, r⁻ = 0 on tokens of O⁺, both 0 on padding; a finished completion
    counts as entropy 0 at later positions, so the sums run over active completions, §2.2.)

    Conservation (§2.4.2): the entropy weights at t sum to d_t (resp. h_t), so with
    α₁ + α₂ = 1 and r_i = 1:  Σ_{i∈O⁺ active at t} r⁺[i,t] = d_t,  Σ_{j∈O⁻} r⁻[j,t] = −h_t.

    Geometric weights (§2.4.1, entropy_mean="geometric"): the same rewards with the set's
    arithmetic mean replaced by its geometric mean, over the same active set at t:
        r⁺[i,t] = α₁·r_i + α₂ · H̃[i,t] / GM_{k∈O⁺ active at t} H̃[k,t]
        r⁻[j,t] = −α₁ − α₂ · (1/H̃[j,t]) / GM_{k∈O⁻ active at t} (1/H̃[k,t])
    (the arithmetic form is H̃ / AM(H̃), since (H̃/ΣH̃)·d_t = H̃ / (ΣH̃/d_t)). The weights'
    product over the set is 1, where the arithmetic weights' sum was d_t.

    Advantages (Eq. 4), R⁺ and R⁻ normalised separately:
        A⁺[i,t] = (r⁺[i,t] − mean(R⁺)) / (std(R⁺) + eps)
        A⁻[j,t] = (r⁻[j,t] − mean(R⁻)) / (std(R⁻) + eps)
        A[i,t]  = A⁺[i,t] for i ∈ O⁺,  A⁻[i,t] for i ∈ O⁻,  0 on padding
    §2.2 fixes R⁺ as every shaped token reward of every successful sequence in the *batch*
    (R⁻ likewise): our stats="batch". Read that way, mean(R⁺) = α₁ + α₂ exactly (the weights
    at each position sum to d_t), so α₁ cancels and the advantages of O⁺'s tokens are
    zero-mean: the outcome's sign is gone. Our default, stats="group", is the departure
    argued below.

    Loss (Eq. 5), PPO's clipped surrogate with the token-level aggregation 1/Σ_k |o_k|:
        ℓ[i,t] = −min( w·A[i,t], clip(w, 1−ε_low, 1+ε_high)·A[i,t] ),   w = π_θ / π_old
        L = Σ_{i,t} m ℓ / Σ_{i,t} m                                         ("token-mean")
    Eq. 5 writes one ε; §3.1 gives ε_low = 0.2, ε_high = 0.28 (it says "entropy is clipped";
    we read it as the ratio clip, DAPO's clip-higher, because no entropy enters any clip).

Relative to GRPO
----------------
The advantage is per *token* (entropy-shaped rewards, Eq. 2/3/4) instead of per completion;
the loss is token-mean with clip-higher, no KL, and DAPO's dynamic sampling on.

Choices [A] and departures (each is a Config field; ``docs/fidelity.md`` lists them)
----------------------------------------------------------------------------------
* ``stats``: which tokens enter mean(R⁺), std(R⁺) (and R⁻). ``"batch"`` is Eq. 4 as §2.2
  states it: the subgroup's tokens pooled over every group of the batch, O⁺ tokens as one set
  and O⁻ tokens as another. ``"subgroup"``: the same per group. In both, α₁ cancels and the
  outcome's sign is lost (``tests/spec/test_gtpo.py``, the literal Eq. 4 tests).
  ``"group"`` (default, a departure from Eq. 4): every active token of all G completions of
  the group, the zeros of the other subgroup included. That is the set of the baseline
  advantage that §2.4.2 and Appendix B.2 compare GTPO with (mean(R) = Σ|o_i| r_i / Σ|o_i|
  over the group's tokens) and the only one of the three for which §2.4.2's claim
  E[A⁺] ≈ E[Â] can hold; α₂ = 0 then gives back a token-level DAPO advantage. Measured
  reason: ``docs/benchmarks.md`` ("GTPO read literally"). The token rewards (Eq. 2/3) stay
  per group in every scope.
* Statistics: unbiased std; a set with < 2 tokens or all-equal values normalises to exactly
  0 (never NaN). So a group with no successful completion has A⁺ ≡ 0.
* ``entropy_mean``: ``"arithmetic"`` (default) is Eq. 2/3; ``"geometric"`` is §2.4.1's
  variant above. §2.4.1's indices are garbled in the text (a product over k = 1…|o_i| of
  H_{k,t}); we read them as the same set as Eq. 2's sum, the completions active at t, because
  §2.4.1's GRPO-S line (a product over the n successful sequences, exponent 1/n) is
  unambiguous and the alternatives are not scale-free (``docs/algorithms/gtpo.md``).
* ``negative_shaping``: ``"paper"`` (default) is Eq. 3; ``"none"`` is the early (Aug 2025
  abstract) form, which shapes the rewards of correct answers only: r⁻ ≡ 0, and a failed token
  gets what the normalisation of its own set gives its reward of 0. With ``stats="group"``
  that set is the whole group, so A[j,t] = (0 − mean(R⁺)) / (std(R⁺) + eps). With
  ``stats="subgroup"`` it is O⁻'s tokens, all 0, so A[j,t] = 0: failed completions get no
  gradient. So every advantage is the z-score of a member of the set whose statistics it
  uses, and |A| ≤ (L − 1)/√L with L the size of that set (Samuelson's inequality with the
  unbiased std), for any entropies, exact zeros and subnormals included, and any eps_H > 0
  (``tests/spec/test_tiny_entropies.py``).
* ``entropy_eps``: every entropy is floored as H̃ = H + eps_H on *both* sides, so that 1/H̃ is
  finite and a position where all entropies are 0 splits the bonus uniformly (the limit of
  equal entropies). Conservation stays exact; invariance to scaling all entropies by c > 0 is
  exact only as eps_H → 0.
* ``success_threshold = 0.5``: r_i ≥ 0.5 is success (binary toy rewards), decided on the
  outcome reward before any reward shaping (``RolloutBatch.outcome_rewards``), as dynamic
  sampling decides it. With ``overlong_shaping`` on (off by default; not in the paper) the
  shaped r_i enters α₁·r_i of Eq. 2, while Eq. 3 has no r_j: the length penalty then reaches
  successful completions only.
* DAPO's batch mechanisms: ``dynamic_sampling`` on, as DAPO (the paper's baseline; v5 does
  not say); ``overlong_shaping`` and ``overlong_filter`` off, as the contract's defaults (not
  used in §3's runs; App. C's group-relative overlong punishment is not implemented).

Worked example: ``docs/algorithms/gtpo.md`` computes one group by hand;
``tests/spec/test_gtpo.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from jaxtyping import Float, Float64
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "gtpo"

STATS = ("group", "subgroup", "batch")
NEGATIVE_SHAPING = ("paper", "none")
ENTROPY_MEANS = ("arithmetic", "geometric")
#: Aggregations the loss supports (its loss is per token).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """GTPO hyper-parameters; defaults from the paper (v5) unless marked."""

    alpha_1: contract.Coef = 1.0  # α₁, weight of the outcome reward in Eq. 2/3 (§3.1) [C]
    alpha_2: contract.Coef = 0.1  # α₂, weight of the entropy-shaped part (§3.1); α₁+α₂ ≠ 1 here [C]
    stats: str = "group"  # set of mean/std(R⁺, R⁻) in Eq. 4; "batch" is §2.2's [departure]
    entropy_mean: str = "arithmetic"  # Eq. 2/3; "geometric" = §2.4.1's weights [C]
    negative_shaping: str = "paper"  # "paper" = Eq. 3; "none" = early form, r⁻ ≡ 0 [A]
    entropy_eps: contract.Positive = core.EPS  # H̃ = H + eps_H, so 1/H̃ is finite [A]
    clip_eps_low: contract.ClipLow = 0.2  # ε_low of the ratio clip (§3.1; Eq. 5 writes one ε) [C]
    clip_eps_high: contract.ClipHigh = 0.28  # ε_high of the ratio clip, clip-higher (§3.1) [C]
    kl_coef: float = 0.0  # β: no KL term in Eq. 5 [C]
    loss_agg_mode: str = "token-mean"  # Eq. 5: 1/Σ_k |o_k| Σ_i Σ_t, token-level [C]
    eps: contract.Positive = core.EPS  # std denominators of Eq. 4 (verl's; TRL uses 1e-4) [C]
    dynamic_sampling: bool = True  # DAPO's filter 0 < #successful < G, as in DAPO [A]

    def __post_init__(self) -> None:
        # Every field's type and range (alpha_1, alpha_2 ≥ 0; entropy_eps > 0): its annotation.
        contract.check_config(self, LOSS_AGG_MODES)
        contract.require_choice(self.stats, "Config.stats", STATS)
        contract.require_choice(self.entropy_mean, "Config.entropy_mean", ENTROPY_MEANS)
        contract.require_choice(self.negative_shaping, "Config.negative_shaping", NEGATIVE_SHAPING)

    def advantage_std_set(self) -> str | None:
        # Eq. 4: token rewards z-scored over the group's response tokens (stats="batch": the
        # batch's; a subgroup's set lies inside its group's).
        return "batch_tokens" if self.stats == "batch" else "group_tokens"

    def reads_rollout_entropy(self) -> bool:
        # Eq. 2/3: the token rewards are shaped by the rollout's entropies H_old.
        return True


def token_rewards(
    batch: RolloutBatch, cfg: Config
) -> tuple[Float64[Tensor, "B T"], Float64[Tensor, "B T"]]:
    """``(r_plus, r_minus)``, each ``[B, T]`` float64: the token rewards of Eq. 2 and 3
    (``entropy_mean="geometric"``: §2.4.1's geometric-mean weights).

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
    # Entropies of π_old, detached (§2.4.2), floored by eps_H [A]; 1 on padding so that
    # nothing below divides by a garbage value (every use is masked again anyway).
    entropy_old = core.group_view(batch.entropy_old.detach().to(torch.float64), G)
    one = torch.ones((), dtype=torch.float64)
    h_tilde = torch.where(active, entropy_old + cfg.entropy_eps, one)

    # d_t and h_t: how many successful / failed completions are active at position t.
    d_t = active_plus.sum(dim=1, keepdim=True).to(torch.float64)  # [N, 1, T]
    h_t = active_minus.sum(dim=1, keepdim=True).to(torch.float64)  # [N, 1, T]

    if cfg.entropy_mean == "geometric":
        # §2.4.1: the weight is H̃ over the geometric mean of H̃ over the same active set,
        # computed in log space (no product can overflow). On the failed side
        # (1/H̃) / GM(1/H̃) = GM(H̃) / H̃. Each set's weights multiply to 1.
        log_h = torch.log(h_tilde)
        log_gm_plus = core.masked_mean(log_h, active_plus, dim=1)[:, None, :]  # [N, 1, T]
        log_gm_minus = core.masked_mean(log_h, active_minus, dim=1)[:, None, :]
        weight_plus_d = torch.exp(log_h - log_gm_plus)  # H̃ / GM⁺(H̃), replaces (H̃/ΣH̃)·d_t
        weight_minus_h = torch.exp(log_gm_minus - log_h)  # (1/H̃) / GM⁻(1/H̃)
    else:
        # Eq. 2: the entropy weight H̃[i,t] / Σ_{k∈O⁺ active at t} H̃[k,t], times d_t.
        entropy_sum_plus = core.masked_sum(h_tilde, active_plus, dim=1)[:, None, :]  # [N, 1, T]
        weight_plus = h_tilde / torch.where(d_t > 0, entropy_sum_plus, torch.ones_like(d_t))
        weight_plus_d = weight_plus * d_t
        # Eq. 3: inverse-entropy weight (1/H̃[j,t]) / Σ_{k∈O⁻ active at t} (1/H̃[k,t]), times
        # h_t; numerator and denominator multiplied by min_k H̃[k,t] so that no term exceeds 1:
        # 1/H̃ alone overflows float64 once eps_H < 5.6e-309 and every H = 0.
        inf = torch.tensor(float("inf"), dtype=torch.float64)
        h_min = torch.where(active_minus, h_tilde, inf).amin(dim=1, keepdim=True)
        inverse_entropy = torch.where(h_t > 0, h_min, one) / h_tilde
        inverse_sum_minus = core.masked_sum(inverse_entropy, active_minus, dim=1)[:, None, :]
        weight_minus = inverse_entropy / torch.where(
            h_t > 0, inverse_sum_minus, torch.ones_like(h_t)
        )
        weight_minus_h = weight_minus * h_t
    r_plus = core.masked(cfg.alpha_1 * rewards + cfg.alpha_2 * weight_plus_d, active_plus)
    if cfg.negative_shaping == "paper":
        r_minus = core.masked(-cfg.alpha_1 - cfg.alpha_2 * weight_minus_h, active_minus)
    else:
        # Early (Aug 2025) form: no token reward on failed completions [A].
        r_minus = torch.zeros_like(r_plus)
    return r_plus.reshape(batch.response_mask.shape), r_minus.reshape(batch.response_mask.shape)


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` token advantages: R⁺ and R⁻ normalised separately (Eq. 4), over the set
    ``cfg.stats`` names."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
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

    # Eq. 4; a set with < 2 tokens or zero variance gives 0 (so no success ⇒ A⁺ ≡ 0).
    A_plus = zscore(r_plus, set_plus)
    # A failed token is normalised with the statistics of its own set (so |A| stays bounded).
    # "paper": its reward r⁻ (Eq. 3). "none": r⁻ ≡ 0 and the early form's one reward is r⁺, which
    # is 0 on failed tokens [A]: "group" gives (0 − mean(R⁺))/(std(R⁺) + eps); "subgroup"
    # normalises O⁻'s zeros among themselves, which gives 0.
    failed_rewards = r_minus if cfg.negative_shaping == "paper" else r_plus
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
            # §2.4.1's geometric means of H̃ over the same sets (powers first: no underflow)
            gm_H_plus = math.prod((H[k][t] + cfg.entropy_eps) ** (1 / d_t) for k in plus_t)
            gm_inv_H_minus = math.prod((H[k][t] + cfg.entropy_eps) ** (-1 / h_t) for k in minus_t)
            for i in rows:
                if m[i][t] != 1:
                    continue
                r_plus[i, t] = 0.0
                r_minus[i, t] = 0.0
                H_i = H[i][t] + cfg.entropy_eps
                if i in plus_t:
                    if cfg.entropy_mean == "geometric":  # §2.4.1
                        r_plus[i, t] = alpha_1 * r[i] + alpha_2 * H_i / gm_H_plus
                    else:  # Eq. 2
                        r_plus[i, t] = alpha_1 * r[i] + alpha_2 * H_i / sum_H * d_t
                elif cfg.negative_shaping == "paper":
                    if cfg.entropy_mean == "geometric":  # §2.4.1
                        r_minus[i, t] = -alpha_1 - alpha_2 * (1.0 / H_i) / gm_inv_H_minus
                    else:  # Eq. 3
                        r_minus[i, t] = -alpha_1 - alpha_2 * (1.0 / H_i) / sum_inv_H * h_t

        def normalise(rewards: dict, members: list[int]) -> dict:
            # Eq. 4 over the tokens of `members`; degenerate set -> mean 0, scale None.
            R = [v for (i, _t), v in rewards.items() if i in members]
            if len(R) < 2 or max(R) == min(R):
                return {key: 0.0 for key in rewards}
            mean = sum(R) / len(R)
            std = (sum((x - mean) ** 2 for x in R) / (len(R) - 1)) ** 0.5  # Bessel-corrected
            return {key: (v - mean) / (std + cfg.eps) for key, v in rewards.items()}

        # "none": the failed tokens' reward is r⁺ = 0, normalised within their own set [A].
        failed_rewards = r_minus if cfg.negative_shaping == "paper" else r_plus
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
    """Clipped surrogate with token advantages, aggregated token-mean (Eq. 5).

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by GTPO (its entropies are the rollout's, in ``batch.entropy_old``).
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
    # Eq. 5: −min(w·A[i,t], clip(w, 1−ε_low, 1+ε_high)·A[i,t]), A now differs per token.
    token_loss = -core.clipped_surrogate(w, adv, cfg.clip_eps_low, cfg.clip_eps_high)

    metrics: dict[str, float] = {}
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # Optional k3 KL to the reference (off in the paper), as in GRPO's Eq. 4.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
