"""Forking tokens: DAPO trained only on the batch's highest-entropy tokens ("80/20").

Paper: Wang et al., "Beyond the 80/20 Rule: High-Entropy Minority Tokens Drive Effective
Reinforcement Learning for LLM Reasoning", arXiv 2506.01939 (NeurIPS 2025).
Confidence: [C] for the rule (the paper's objective, and TRL's ``top_entropy_quantile``, which
implements it), [A] for the entropy it reads and for the random control (below).

Idea
----
Most tokens of a chain of thought are generated with low entropy; a minority of
high-entropy "forking" tokens decide which way the reasoning goes. Keep DAPO's objective but
let only the top-ρ (ρ = 0.2) highest-entropy tokens of the batch carry policy gradient; the
other 80 % contribute nothing. The paper reports that this matches full-gradient DAPO on
Qwen3-8B and beats it on 14B and 32B, and that training on the low-entropy 80 % instead fails.
Li et al., "Not All Tokens Learn Alike" (arXiv 2605.07660), report that a *random* 20 % of
the tokens recovers most of full-token training too; ``selection="random"`` is that control:
as many tokens, drawn without looking at their entropy.

Equations
---------
    Advantage, ratio, clip-higher: DAPO's (Eq. 9-10)
        A_i = (r_i − mean_G r) / (std_G r + eps),   w[i,t] = π_θ / π_old
        ℓ[i,t] = −min( w·A_i, clip(w, 1−ε_low, 1+ε_high)·A_i )

    Entropy threshold of the batch (the (1−ρ)-quantile of its response-token entropies):
        τ_ρ = quantile_{1−ρ}{ H[i,t] : m[i,t] = 1 }                    (linear interpolation)
    Forking-token mask (selection="entropy", the paper's):
        F[i,t] = m[i,t] · 1[ H[i,t] ≥ τ_ρ ]
    Random control (selection="random"): n of the batch's N response tokens, uniformly
    without replacement, n the count the entropy rule keeps when no two entropies tie
    (the order statistics at and above position (1 − ρ)(N − 1)):
        F = 1 on S,   S ~ Uniform{ n-subsets of the response tokens },   n = N − ⌈(1 − ρ)(N − 1)⌉

    Loss, "token-mean" over *all* response tokens (the indicator sits inside DAPO's sum):
        L = Σ_{i,t} m·F·ℓ[i,t] / Σ_{i,t} m

Relative to DAPO
----------------
One factor: the per-token loss is multiplied by F. With ρ = 1 the threshold is the batch's
smallest entropy (and the random control keeps every token), F = m, and the loss is DAPO's
exactly. The normaliser stays Σ m, so the selected tokens get the gradient they get under
DAPO (not a gradient ×1/ρ).

Assumptions
-----------
* Entropy: the rollout entropy ``batch.entropy_old`` [A] (this project's choice: it is
  fixed for the whole step, so the same tokens train in every epoch and minibatch). The paper
  and TRL compute the mask from the entropy of the policy being trained; with one update per
  rollout (θ = θ_old) the two are the same.
* "The batch" is the batch the loss sees: a minibatch when the trainer splits the step [A]
  (TRL: the micro-batch gathered over processes).
* Ties: every token whose entropy equals τ_ρ is kept, so with many equal entropies (all
  zero, say) more than a ρ-fraction trains [C: TRL's ``≥``]. The random control keeps n
  whatever the entropies (it reads none).
* The random control's draw [A]: ``torch.randperm`` over the response tokens in row-major
  order, first n kept, from ``core.batch_generator(batch, seed)``: a generator seeded by the
  Config's ``seed`` and the batch's response tokens, so a run is reproducible, the same
  minibatch keeps the same tokens in every epoch (as the entropy rule does, on H_old), and
  different batches draw independently; ``seed=None`` draws from torch's global generator
  instead. (On verl, whose policy loss sees no token ids, the draw depends on the
  micro-batch's mask only.)
* DAPO's batch mechanisms (dynamic sampling, soft overlong punishment) as in ``dapo.py``: the
  paper trains on top of DAPO [C].

Worked example: ``docs/algorithms/forking_tokens.md`` computes one group by hand;
``tests/spec/test_forking_tokens.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from jaxtyping import Float, Float32, Shaped
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "forking_tokens"

#: Aggregations the loss supports (its loss is per token; L_max-normalisation is Dr. GRPO's).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")

#: Which tokens train: the top-ρ by rollout entropy (the paper's), or a random ρ (the control).
SELECTIONS = ("entropy", "random")


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """Forking-token hyper-parameters: DAPO's, plus ρ; defaults from the papers unless marked."""

    top_entropy_frac: contract.Fraction = 0.2  # ρ, fraction of the batch's tokens that train [C]
    selection: str = "entropy"  # the top ρ by H_old [C], or a random ρ (2605.07660's control) [A]
    seed: contract.Seed | None = 0  # the random draw: seeded by (seed, batch); None: torch RNG [A]
    clip_eps_low: contract.ClipLow = 0.2  # ε_low (§3.1, clip-higher) [C]
    clip_eps_high: contract.ClipHigh = 0.28  # ε_high > ε_low: clip-higher (§3.1) [C]
    kl_coef: float = 0.0  # β: the KL term is removed (§2.3) [C]
    loss_agg_mode: str = "token-mean"  # token-level policy gradient loss (§3.3, Eq. 12) [C]
    eps: contract.Positive = core.EPS  # in the std denominator (verl's; TRL uses 1e-4) [C]
    dynamic_sampling: bool = True  # keep groups with 0 < #successful < G (§3.2, Eq. 11) [C]
    overlong_shaping: bool = True  # soft overlong punishment added to r (§3.4, Eq. 13) [C]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)
        contract.require_choice(self.selection, "selection", SELECTIONS)


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


def forking_mask(
    entropy: Float[Tensor, "B T"], mask: Shaped[Tensor, "B T"], top_entropy_frac: float
) -> Float32[Tensor, "B T"]:
    """``[B, T]`` float ``F[i,t] = m[i,t]·1[H[i,t] ≥ τ_ρ]``: 1 on the forking tokens, with τ_ρ
    the ``(1 − ρ)``-quantile of the entropies of the batch's response tokens; 0 on padding
    (and everywhere when the batch has no response token)."""
    contract.require(
        0.0 < top_entropy_frac <= 1.0,
        "top_entropy_frac",
        f"a fraction in (0, 1], got {top_entropy_frac}",
    )
    active = mask.bool()
    H = entropy.detach().float()
    if not bool(active.any()):
        return torch.zeros_like(H)
    # τ_ρ: the entropy above which a fraction ρ of the batch's response tokens lies.
    threshold = torch.quantile(H[active], 1.0 - top_entropy_frac)
    return core.masked((H >= threshold).float(), mask)


def kept_count(num_tokens: int, top_entropy_frac: float) -> int:
    """``n``: how many of ``N`` tokens the entropy rule keeps when no two entropies tie, the
    order statistics at and above position ``(1 − ρ)(N − 1)``. Counted by the same quantile
    as τ_ρ, on the ranks ``0 … N − 1`` (a closed form ``N − ⌈(1 − ρ)(N − 1)⌉`` in floats
    would round ``(1 − 0.7)·10`` up to 4, where the quantile keeps rank 3)."""
    if num_tokens == 0:
        return 0
    ranks = torch.arange(num_tokens, dtype=torch.float32)
    return int((ranks >= torch.quantile(ranks, 1.0 - top_entropy_frac)).sum())


def random_mask(
    mask: Shaped[Tensor, "B T"], top_entropy_frac: float, generator: torch.Generator | None
) -> Float32[Tensor, "B T"]:
    """``[B, T]`` float ``F``: 1 on ``n = kept_count(N, ρ)`` of the ``N`` response tokens,
    drawn uniformly without replacement (``randperm`` over them in row-major order, on the
    CPU ``generator``), 0 elsewhere. The entropies are not read: the control's only link to
    the entropy rule is the count."""
    active = mask.bool()
    N = int(active.sum())
    chosen = torch.randperm(N, generator=generator)[: kept_count(N, top_entropy_frac)]
    kept = torch.zeros(N, dtype=torch.float32)
    kept[chosen] = 1.0
    F = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)
    F[active] = kept.to(mask.device)
    return F


def token_selection(batch: RolloutBatch, cfg: Config) -> Float32[Tensor, "B T"]:
    """``F``, the tokens whose policy term trains: the forking tokens (``selection="entropy"``)
    or the random control's draw (``selection="random"``)."""
    if cfg.selection == "random":
        generator = core.batch_generator(batch, cfg.seed)
        return random_mask(batch.response_mask, cfg.top_entropy_frac, generator)
    return forking_mask(batch.entropy_old, batch.response_mask, cfg.top_entropy_frac)


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """DAPO's clip-higher surrogate on the forking tokens only, token-mean over all tokens.

    Args:
        batch: the rollout (``logp_old``, ``entropy_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused: the mask reads the rollout entropy, the random control none (part of
            the shared signature).
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
    # F[i,t]: only the top-ρ highest-entropy tokens of the batch (or the control's random
    # ρ) keep their term.
    forks = token_selection(batch, cfg)
    token_loss = core.masked(token_loss, forks)

    metrics: dict[str, float] = {"forking_frac": float(core.masked_mean(forks, mask))}
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
