"""VinePPO: PPO whose advantages are Monte-Carlo values of the rollout policy, no value network.

Paper: Kazemnejad et al., "VinePPO: Refining Credit Assignment in RL Training of LLMs",
arXiv 2410.01679 (v2, ICML 2025); code: the public repository McGill-NLP/VinePPO (configs
``polIter_*_vineppo_*.jsonnet``, ``math_episode_generator_with_mc_advantages.py``,
``ppo_trainer.py``). Confidence: [C] where the authors' code or configs state it (each line
below), [A] where this project chose. ``docs/fidelity.md`` lists every element.

Idea
----
A language environment can be reset to any prefix: feed the prefix back to the policy and
sample. So the value of a state needs no critic: continue the prefix ``K`` times with ``π_old``
and count the successes. Every step of a completion then gets its own advantage, the change in
the chance of success it caused. The auxiliary continuations only value states; they are never
trained on. This is the credit oracle of ``refimpl credit`` (``credit_oracle.py``) used to
train: the ceiling of token credit in this project.

Equations
---------
    Steps: the response is cut into steps; step k covers tokens s_k … s_{k+1}−1 (s_0 = 0).
        boundaries="step": a step ends with a token in STEP_ENDS (the toy tasks' ",", "#" and
        the operators "+-*/"), or with the last token; boundaries="token": every token is a step.

    Value of a step start (the loop computes it, before this file is called):
        V̂(s_k) = (1/K) Σ_{j=1..K} 1[continuation j of (q, o_<s_k) under π_old succeeds]
    and the state after the last token is the outcome:  V(s_end) = 1[r ≥ success_threshold]

    Advantage of step k, given to every token of it (γ = λ = 1, reward only at the end):
        A[i,t] = V̂(s_{k+1}) − V̂(s_k)              for s_k ≤ t < s_{k+1}
    so the step advantages of a completion telescope:  Σ_k A_k = 1[success_i] − V̂(q).
    With boundaries="token" this is the oracle's A*[t] = V̂(q, o_≤t) − V̂(q, o_<t) exactly.

    Optional whitening over the batch's response tokens (the authors' trainer):
        A ← (A − mean A) / (std A + eps)

    Token ratio, clipped surrogate (PPO), token-mean:
        ℓ[i,t] = −min( w·A, clip(w, 1−ε, 1+ε)·A ),    w = π_θ / π_old,   ε = 0.2
        L_pg   = Σ_{i,t} m ℓ / Σ_{i,t} m

    KL to the reference, summed over a sequence's tokens, averaged over sequences:
        L = L_pg + β · mean_i Σ_t m[i,t] · min(kl[i,t], 10),    kl = k3,   β = 1e-4

Relative to GRPO
----------------
The advantage is not read from the group at all: it comes from ``batch.token_values``, the
values ``V̂(q, o_<t)`` the loop estimated because ``Config.values_needed()`` asked for them
(the same credit-oracle code ``refimpl credit`` runs, on π_old, before ``advantages``), and it
changes from step to step within a completion. The loss is PPO's clipped surrogate as in GRPO,
but token-mean, and its KL term is summed per sequence with a much smaller β.

Assumptions
-----------
* Steps of the toy tasks [A]: the paper splits a solution at line breaks (and sentence ends)
  [C code: ``split_solution_inplace``]; the toy completions have none, so a step ends with a
  token that closes a value in the scratchpad: "," and "#" (chain, multiplication), or an
  operator "+-*/" (countdown: "3*5+7" is "3*", "5+", "7<eos>"). A completion without such a
  token is one step (addition): its advantage is r − V̂(q), a per-prompt Monte-Carlo baseline.
* Whitening off by default [departure]: the authors' trainer whitens the advantages over each
  training batch (``whiten_advantages: true`` in the PPO config the VinePPO configs extend)
  [C code]; here the default trains on the values themselves, so that the advantages are the
  oracle's A* (the ceiling the credit benchmark compares with) and a group's advantages depend
  on its own completions only. ``whiten_advantages=True`` is the authors' setting (a z-score
  over the batch's response tokens with the project's ``std + eps``, not ``rsqrt(var + 1e-8)``).
* The steps beyond ``max_step_for_value_estimation = 20`` are not valued in the authors' code
  [C code]; here every step is (the toy completions have at most a dozen).
* The KL mean runs over the non-empty sequences of the batch the loss sees [A].
* Success ``r ≥ success_threshold`` (0.5) is the value after the last token, as the oracle
  decides it [A: the authors use the reward itself, 1 or 0 on MATH, which is the same].

Worked example: ``docs/algorithms/vineppo.md`` computes one group by hand;
``tests/spec/test_vineppo.py::test_worked_example`` checks every number of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import torch
from jaxtyping import Float
from torch import Tensor

from refimpl import contract, core, loss_metrics
from refimpl.contract import RolloutBatch

NAME = "vineppo"

#: Aggregations the loss supports (its loss is per token; L_max-normalisation is Dr. GRPO's).
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-mean")

#: Where the loop values prefixes: at step starts, or before every token (the oracle's A*).
BOUNDARIES = ("step", "token")

#: The characters whose token closes a step of a toy completion (see Assumptions).
STEP_ENDS = ",#+-*/"

#: kl[i,t] is clamped to at most this before it is summed (the authors' kl_penalty_loss_clip_max).
KL_CLIP_MAX = 10.0


@dataclass(frozen=True)
class Config(contract.AlgorithmConfig):
    """VinePPO hyper-parameters; defaults from the authors' configs unless marked."""

    rollouts: Annotated[int, contract.Range(2, 4096, text="an integer in [2, 4096]")] = 9
    # ^ K, continuations per valued state (configs/episode_generators/9rolls.jsonnet) [C]
    boundaries: str = "step"  # value step starts (the paper's), or every token [C]
    whiten_advantages: bool = False  # the authors' trainer whitens; off here [departure]
    clip_eps_low: contract.ClipLow = 0.2  # ε, PPO's symmetric clip (cliprange 0.2) [C]
    clip_eps_high: contract.ClipHigh = 0.2  # ε [C]
    kl_coef: float = 1e-4  # β, KL to the reference in the loss (refKl0.0001.jsonnet) [C]
    loss_agg_mode: str = "token-mean"  # masked mean over the batch's tokens (ppo_trainer) [C]
    eps: contract.Positive = core.EPS  # in the whitening's std denominator [A]

    def __post_init__(self) -> None:
        contract.check_config(self, LOSS_AGG_MODES)
        contract.require_choice(self.boundaries, "boundaries", BOUNDARIES)

    def advantage_std_set(self) -> str:
        # V̂(s_{k+1}) − V̂(s_k), or with whitening one z-score over the batch's tokens.
        return "batch_tokens" if self.whiten_advantages else "value_difference"

    def values_needed(self) -> contract.ValueRequest:
        """K continuations of π_old at every step start (or every prefix)."""
        step_ends = STEP_ENDS if self.boundaries == "step" else None
        return contract.ValueRequest(rollouts=self.rollouts, step_ends=step_ends)


def _step_values(batch: RolloutBatch, cfg: Config) -> tuple[Tensor, Tensor]:
    """``[B, T]`` float64 ``V̂(s_k)`` and ``V̂(s_{k+1})``: the values at the start and at the
    end of the step each token belongs to (the outcome after the last step)."""
    contract.require(
        batch.token_values is not None,
        "batch.token_values",
        "the Monte-Carlo values V̂(q, o_<t) of π_old (the training loops set them when "
        "Config.values_needed() asks; credit_oracle.training_values computes them)",
    )
    mask = batch.response_mask.bool()
    B, T = mask.shape
    V = batch.token_values.to(torch.float64)
    starts = mask & ~torch.isnan(V)  # s_k: the prefixes the loop valued
    position = torch.arange(T, device=mask.device).expand(B, T)
    # s_k of token t: the last step start at or before t (t = 0 always is one).
    start = torch.where(starts, position, 0).cummax(dim=1).values
    # s_{k+1} of token t: the first step start after t; T when t is in the last step.
    later = torch.where(starts, position, T)
    first_at_or_after = later.flip(1).cummin(dim=1).values.flip(1)
    next_start = torch.cat([first_at_or_after[:, 1:], torch.full_like(later[:, :1], T)], 1)
    value = torch.where(starts, V, 0.0)  # NaN (not valued) and padding read as 0, never used
    value_start = value.gather(1, start)
    # V(s_end) of the finished completion: 1[r ≥ threshold], nothing sampled.
    outcome = core.successful(batch, cfg.success_threshold).to(torch.float64)[:, None]
    value_next = value.gather(1, next_start.clamp(max=T - 1))
    value_end = torch.where(next_start < T, value_next, outcome.expand(B, T))
    return value_start, value_end


def advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """``[B, T]`` advantages: each step's change of the Monte-Carlo value, on its tokens."""
    contract.check_config_type(cfg, Config)  # another algorithm's Config (or None): refused
    contract.check_batch(batch)  # None, or anything but a RolloutBatch: refused
    value_start, value_end = _step_values(batch, cfg)
    # A[i,t] = V̂(s_{k+1}) − V̂(s_k) on every token of step k; exactly 0 on padding.
    A = core.masked(value_end - value_start, batch.response_mask)
    if cfg.whiten_advantages:
        # The authors' whitening: one z-score over every response token of the batch.
        A = core.masked(core.masked_zscore(A[None], batch.response_mask[None], cfg.eps)[0],
                        batch.response_mask)  # fmt: skip
    contract.check_advantage_values(A)
    return A.to(torch.float32)


def reference_advantages(batch: RolloutBatch, cfg: Config) -> Float[Tensor, "B T"]:
    """The same advantages as plain loops over completions, steps and positions."""
    B, T = batch.response_mask.shape
    A = torch.zeros(B, T, dtype=torch.float64)
    outcome = batch.rewards if batch.outcome_rewards is None else batch.outcome_rewards
    for i in range(B):
        L = int(batch.response_mask[i].sum())
        values = [float(v) for v in batch.token_values[i, :L]]
        starts = [t for t in range(L) if values[t] == values[t]]  # not NaN: a step start
        ends = starts[1:] + [L]
        for s, e in zip(starts, ends):
            after = (
                values[e] if e < L else (1.0 if float(outcome[i]) >= cfg.success_threshold else 0.0)
            )
            for t in range(s, e):
                A[i, t] = after - values[s]
    if cfg.whiten_advantages:
        tokens = [
            float(A[i, t]) for i in range(B) for t in range(int(batch.response_mask[i].sum()))
        ]
        n = len(tokens)
        mean = sum(tokens) / max(n, 1)
        std = (sum((x - mean) ** 2 for x in tokens) / (n - 1)) ** 0.5 if n > 1 else 0.0
        for i in range(B):
            for t in range(int(batch.response_mask[i].sum())):
                A[i, t] = (
                    0.0
                    if n < 2 or max(tokens) == min(tokens)
                    else (A[i, t] - mean) / (std + cfg.eps)
                )
    return A.to(torch.float32)


def loss(
    batch: RolloutBatch,
    logp: Float[Tensor, "B T"],
    adv: Float[Tensor, "B T"],
    cfg: Config,
    entropy: Float[Tensor, "B T"] | None = None,
) -> tuple[Float[Tensor, ""], dict[str, float]]:
    """PPO's clipped surrogate, token-mean, plus β · mean over sequences of the summed k3 KL.

    Args:
        batch: the rollout (``logp_old``; ``logp_ref`` when ``kl_coef > 0``).
        logp: ``[B, T]`` log-probs under the policy being trained (carries gradient).
        adv: ``[B, T]`` advantages from :func:`advantages`.
        cfg: the configuration.
        entropy: unused by VinePPO (part of the shared signature).
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
    # PPO: −min(w·A, clip(w, 1−ε, 1+ε)·A) for every token.
    token_loss = -core.clipped_surrogate(w, adv, cfg.clip_eps_low, cfg.clip_eps_high)
    total = core.aggregate(token_loss, mask, cfg.loss_agg_mode)

    metrics: dict[str, float] = {}
    if cfg.kl_coef > 0:
        contract.require(
            batch.logp_ref is not None, "batch.logp_ref", "reference log-probs when kl_coef > 0"
        )
        # The authors' KL loss: k3 per token, clamped to ≤ 10, summed over the sequence,
        # averaged over the sequences ("seq-mean" of the per-sequence sums), weight β.
        kl = core.kl_k3(logp, batch.logp_ref, mask).clamp(max=KL_CLIP_MAX)
        kl_per_sequence = core.masked_sum(kl, mask, dim=1)
        total = total + cfg.kl_coef * core.aggregate(kl_per_sequence, mask, "seq-mean")
        metrics["kl_ref"] = float(core.masked_mean(kl.detach(), mask))

    metrics.update(loss_metrics.ratio_metrics(w, adv, mask, cfg.clip_eps_low, cfg.clip_eps_high))
    metrics.update(loss_metrics.common_metrics(batch, logp, adv))
    return total, metrics
