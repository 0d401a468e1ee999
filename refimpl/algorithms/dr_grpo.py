"""Dr. GRPO: GRPO Done Right.

Paper: Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective",
arXiv 2503.20783 (v1; COLM 2025), §3.2 "Dr. GRPO". Confidence: [C] (paper and the authors'
``understand-r1-zero`` / Oat code).

Idea
----
GRPO's objective carries two normalisations that bias optimisation: dividing a completion's
loss by its own length ``|o_i|`` makes a *wrong* answer's penalty per token smaller the longer
it is (so wrong answers grow long), and dividing the advantage by the group's reward std
up-weights prompts that are too easy or too hard. Dr. GRPO removes both: advantages are plain
centred rewards and every token weighs the same constant ``1/(B·L_max)``.

Equations
---------
    Advantage (§3.2, GRPO's Eq. 2 with the std denominator removed):
        A_i = r_i − mean_G r                                 broadcast to every token of o_i

    Token ratio:
        w[i,t] = π_θ(o_{i,t} | q, o_{i,<t}) / π_old(o_{i,t} | q, o_{i,<t})

    Per-token loss (§3.2, negated; no KL term):
        ℓ[i,t] = −min( w·A_i, clip(w, 1−ε_low, 1+ε_high)·A_i ),         ε = 0.2

    Aggregation "seq-mean-token-sum-norm" (§3.2: the 1/|o_i| becomes a constant):
        L = Σ_{i,t} m[i,t] ℓ[i,t] / (B' · L_max)
    with L_max the generation budget, a constant, and B' the number of non-empty completions
    (every mode in ``core.aggregate`` skips empty rows; B' = B whenever none is empty).

Relative to GRPO
----------------
The advantage is not divided by the group std (``scale_by_std=False``), the aggregation is
``seq-mean-token-sum-norm`` instead of ``seq-mean-token-mean``, and ``kl_coef`` is 0. The
ratio, the clip and the loss code are GRPO's.

Assumptions
-----------
``max_len`` is the constant ``L_max``; the trainer fills it with its generation budget. When
it is ``None`` the loss uses the batch's padded width ``T``, which is a constant only if the
trainer pads every batch to the budget; otherwise the per-token weight would change from batch
to batch [A]. A group whose rewards are all equal has ``A_i = 0`` exactly (no rounding
residue from the mean) [C]. The names of the aggregation modes are verl's; with verl 0.9.1
its ``seq-mean-token-sum-norm`` with ``loss_scale_factor = L_max`` is this formula (older
verl releases left out the ``1/B'``).

Worked example: ``docs/algorithms/dr_grpo.md`` computes one group by hand;
``tests/spec/test_dr_grpo.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from jaxtyping import Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "dr_grpo"

#: Aggregations the loss supports (its loss is per token).
LOSS_AGG_MODES = ("seq-mean-token-sum-norm", "seq-mean-token-mean", "token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """Dr. GRPO hyper-parameters; defaults from the paper unless marked."""

    clip_eps_low: contract.ClipLow = 0.2  # ε, symmetric clip (§4, PPO default) [C]
    clip_eps_high: contract.ClipHigh = 0.2  # ε [C]
    kl_coef: float = 0.0  # β: no KL term in the R1-Zero recipe (§4) [C]
    loss_agg_mode: str = "seq-mean-token-sum-norm"  # §3.2: constant normaliser, no 1/|o_i| [C]
    max_len: contract.Length | None = None  # L_max, the generation budget; None → the batch's T [A]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)

    def advantage_std_set(self) -> str | None:
        # §3.2: A_i = r_i − mean_G r, no std division.
        return None

    def for_generation_budget(self, max_new_tokens: int) -> Config:
        # §3.2: the constant L_max is the generation budget, unless max_len sets it.
        return self if self.max_len is not None else replace(self, max_len=max_new_tokens)


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: the group-centred outcome reward on every response token."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    # §3.2: A_i = r_i − mean_G r; no division by the std (it biases towards easy/hard prompts).
    A_seq = core.group_normalize(batch.rewards, batch.group_size, scale_by_std=False)
    # Outcome supervision: every token of o_i gets A_i; padding gets exactly 0.
    return core.broadcast_to_tokens(A_seq, batch.response_mask)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over groups, completions and positions: GRPO's group
    loops with the std left out (``core.reference_group_zscore``, written once for the spec)."""
    return core.reference_group_zscore(batch, core.EPS, scale_by_std=False)


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """Clipped surrogate (plus k3 KL when ``kl_coef > 0``), aggregated over a constant L_max.

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by Dr. GRPO (part of the shared signature).
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
    # Eq. 3: −min(w·A, clip(w, 1−ε, 1+ε)·A) for every token.
    token_loss = -core.clipped_surrogate(w, adv, cfg.clip_eps_low, cfg.clip_eps_high)

    metrics: dict[str, float] = {}
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # Off in Dr. GRPO (β = 0); kept so the KL can be switched back on: GRPO's Eq. 4 k3.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    # §3.2: every token weighs 1/(B'·L_max) whatever its completion's length.
    max_len = cfg.max_len if cfg.max_len is not None else mask.shape[1]
    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode, max_len=max_len)
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
