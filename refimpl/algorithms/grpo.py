"""GRPO: Group Relative Policy Optimization.

Paper: Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical Reasoning in Open
Language Models", arXiv 2402.03300 (v3), §4.1. Confidence: [C] throughout. (The marks of
every file: [C] confirmed by the paper or its official code, [S] by independent
re-implementations only, [A] assumed here, with the Config field that switches it;
docs/fidelity.md lists them.)

Idea
----
PPO without a value network. Sample a group of ``G`` completions for the same prompt and use
the group itself as the baseline: a completion's advantage is how much better its reward is
than its siblings', in units of the group's spread. Every token of a completion receives that
same advantage; there is no token-level credit assignment.

Equations
---------
    Advantage (§4.1.2, outcome supervision):
        A_i = (r_i − mean_G r) / (std_G r + eps)             broadcast to every token of o_i

    Token ratio:
        w[i,t] = π_θ(o_{i,t} | q, o_{i,<t}) / π_old(o_{i,t} | q, o_{i,<t})

    Per-token loss (Eq. 3, negated to be minimised):
        ℓ[i,t] = −min( w·A_i, clip(w, 1−ε_low, 1+ε_high)·A_i ) + β·kl[i,t]
        kl[i,t] = exp(logp_ref − logp) − (logp_ref − logp) − 1          (Eq. 4, k3 estimator)

    Aggregation "seq-mean-token-mean" (Eq. 3's 1/G Σ_i 1/|o_i| Σ_t):
        L = mean_i ( Σ_t m[i,t] ℓ[i,t] / |o_i| )

Relative to GRPO
----------------
This *is* the baseline every other file is compared against: ``diff grpo.py <other>.py``
shows what the other algorithm changes in its advantage, its loss and its ``Config``. The
batch-level mechanisms of DAPO (dynamic sampling, overlong shaping and overlong filter) run in
the training loops, not in the algorithm file; their switches, off, are declared once in
``contract.AlgorithmConfig``, and a ``Config`` names only those its paper turns on: such a
diff shows only the switches (see ``dapo.py``'s "Relative to GRPO").

Assumptions
-----------
None beyond the shared notation: unbiased group std (verl and TRL) and ``eps = 1e-6`` in the
denominator (verl's value; TRL 1.16 adds 1e-4) [C].

Worked example: ``docs/algorithms/grpo.md`` computes one group by hand;
``tests/spec/test_grpo.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxtyping import Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "grpo"

#: Aggregations the loss supports (its loss is per token; L_max-normalisation is Dr. GRPO's).
LOSS_AGG_MODES = ("seq-mean-token-mean", "token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """GRPO hyper-parameters; defaults from DeepSeekMath unless marked."""

    clip_eps_low: contract.ClipLow = 0.2  # ε, symmetric clip (§4.1, PPO default) [C]
    clip_eps_high: contract.ClipHigh = 0.2  # ε [C]
    kl_coef: float = 0.04  # β, KL penalty to the reference policy (§4.2) [C]
    loss_agg_mode: str = "seq-mean-token-mean"  # Eq. 3: 1/G Σ_i 1/|o_i| Σ_t [C]
    eps: contract.Positive = core.EPS  # in the std denominator (verl's; TRL uses 1e-4) [C]

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
    """Clipped surrogate plus k3 KL, aggregated seq-mean-token-mean (Eq. 3).

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by GRPO (part of the shared signature).
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
        # Eq. 4: k3 estimate of KL(π_θ ‖ π_ref), added per token with weight β.
        kl = core.kl_k3(logp, batch.logp_ref, mask)
        token_loss = token_loss + cfg.kl_coef * kl
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)
    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
