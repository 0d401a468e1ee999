"""DAPO: Decoupled Clip and Dynamic sAmpling Policy Optimization.

Paper: Yu et al., "DAPO: An Open-Source LLM Reinforcement Learning System at Scale",
arXiv 2503.14476 (v2), §3. Confidence: [C] throughout (paper and the authors' verl recipe).

Idea
----
GRPO with four fixes for long chain-of-thought RL: raise the upper clip bound so that
low-probability tokens can grow (entropy does not collapse), drop groups whose completions all
succeed or all fail (their advantage is zero, so they only shrink the batch), average the loss
over *tokens* rather than sequences (long answers are not under-weighted), and penalise
completions that run into the length budget softly instead of with a cliff.

Equations
---------
    Advantage (Eq. 9), as GRPO:
        A_i = (r_i − mean_G r) / (std_G r + eps)             broadcast to every token of o_i

    Token ratio (Eq. 9):
        w[i,t] = π_θ(o_{i,t} | q, o_{i,<t}) / π_old(o_{i,t} | q, o_{i,<t})

    Per-token loss with clip-higher (Eq. 8/10, negated; no KL term, §2.3):
        ℓ[i,t] = −min( w·A_i, clip(w, 1−ε_low, 1+ε_high)·A_i ),     ε_low = 0.2, ε_high = 0.28

    Aggregation "token-mean" (Eq. 8/12's 1/Σ_i|o_i| Σ_i Σ_t):
        L = Σ_{i,t} m[i,t] ℓ[i,t] / Σ_{i,t} m[i,t]

    Dynamic sampling (Eq. 11), applied by every training loop with ``batch_stages.keep_groups``
    (the ``informative_groups`` when ``dynamic_sampling`` is on) on the outcome rewards:
        keep a group only if 0 < |{o_i : r_i ≥ success_threshold}| < G

    Soft overlong punishment (Eq. 13), added to r_i by the trainer with
    ``batch_stages.shape_rewards`` after dynamic sampling and before the advantage:
        R_len(|o|) = 0                                 if |o| ≤ L_max − L_cache
                   = ((L_max − L_cache) − |o|) / L_cache    if L_max − L_cache < |o| ≤ L_max
                   = −1                                if |o| > L_max
        r̃_i = r_i + c·R_len(|o_i|),   c = half the reward range (0.5 for {0, 1} rewards)

Relative to GRPO
----------------
Only the configuration changes: ``clip_eps_high`` 0.2 → 0.28 (clip-higher), ``kl_coef``
0.04 → 0, ``loss_agg_mode`` seq-mean-token-mean → token-mean, ``dynamic_sampling`` and
``overlong_shaping`` on. The advantage and the loss code are GRPO's line for line; the two
batch-level mechanisms live once in ``refimpl.batch_stages`` (``keep_groups``, ``shape_rewards``),
called by the training loops (they need the sampler and the length budget ``L_max``, which an
advantage function does not see).

Assumptions
-----------
The paper's rewards are ±1; the toy tasks' are {0, 1}. Group normalisation is invariant to
an affine map of r, but only if the *whole* reward is mapped: DAPO's shaped reward
(2r − 1) + R_len equals 2·(r + R_len/2) − 1, so the penalty is added at half its size,
``overlong_penalty_scale = 0.5`` (half the reward range). Then the shaped rewards of (correct,
truncated correct, wrong, truncated wrong) are 1, 0.5, 0, −0.5, an affine image of DAPO's
1, 0, −1, −2, and every advantage is DAPO's [C]. (Adding R_len at full size to {0, 1} would
double the penalty relative to the correct/wrong gap and tie a truncated correct answer,
1 − 1 = 0, with a short wrong one.)
Dynamic sampling counts *successful* completions on the outcome rewards (``r ≥
success_threshold``, 0.5 [A]), as Eq. 11 counts correct answers, not "reward std > 0": after
shaping the rewards of an all-wrong group can differ, and such a group must still be dropped.
Order in every trainer: outcome → dynamic sampling → shaping → advantages → overlong filter
(which masks truncated rows out of the loss; they still count in their group's statistics).
``L_cache / L_max`` = 4096 / 20480 = 0.2 as in the paper; the toy ``L_max`` is the trainer's
generation budget [C]. The overlong filter (§3.4, ``overlong_filter``) stays off: the paper's
final recipe uses the soft punishment instead [C]. These four values are the defaults every
``Config`` shares (``contract.AlgorithmConfig``); ``Config`` below names what DAPO turns on.

Worked example: ``docs/algorithms/dapo.md`` computes one group by hand;
``tests/spec/test_dapo.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from jaxtyping import Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "dapo"

#: Aggregations the loss supports (its loss is per token; L_max-normalisation is Dr. GRPO's).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """DAPO hyper-parameters; defaults from the DAPO paper unless marked."""

    clip_eps_low: contract.ClipLow = 0.2  # ε_low (§3.1, clip-higher) [C]
    clip_eps_high: contract.ClipHigh = 0.28  # ε_high > ε_low: clip-higher (§3.1) [C]
    kl_coef: float = 0.0  # β: the KL term is removed (§2.3) [C]
    loss_agg_mode: str = "token-mean"  # token-level policy gradient loss (§3.3, Eq. 12) [C]
    eps: contract.Positive = core.EPS  # in the std denominator (verl's; TRL uses 1e-4) [C]
    dynamic_sampling: bool = True  # keep groups with 0 < #successful < G (§3.2, Eq. 11) [C]
    overlong_shaping: bool = True  # soft overlong punishment added to r (§3.4, Eq. 13) [C]

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
    """Clip-higher surrogate (plus k3 KL when ``kl_coef > 0``), aggregated token-mean (Eq. 8).

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by DAPO (part of the shared signature).
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
