"""Group sampling for RL: ``G`` completions per prompt, with the rollout policy's records.

Every group-relative algorithm starts the same way: repeat each prompt ``G`` times, sample a
completion for each copy, score them, and compare completions *within* a group. Besides the
tokens, the losses need two numbers per generated token from the policy that sampled it
(``π_old``):

* ``logp_old[i,t] = log μ(o_{i,t} | q, o_{i,<t})`` under the distribution ``μ`` the token was
  actually drawn from (the behaviour policy), the denominator of the importance ratio
  ``w = π_θ / μ``;
* ``entropy_old[i,t] = H(π_old(· | q, o_{i,<t}))`` over the **full vocabulary**, which the
  entropy-weighted algorithms (GTPO, GRPO-S) turn into token-level credit.

Both are recorded here from the very logits the token was drawn from, so that the first
optimisation step is exactly on-policy (ratio 1). ``policy_logprobs`` recomputes the same two
quantities for the policy being trained, in one forward pass with gradient.

Temperature, top-k and top-p
----------------------------
The sampling distribution is the *temperature-scaled* one, ``softmax(logits / τ)``: with
``τ ≠ 1`` the policy being optimised is the tempered model, and ``policy_logprobs`` must be
called with the same ``temperature`` (verl and TRL do the same). With top-k / top-p the token
is drawn from the truncated, renormalised distribution ``μ``, and ``logp_old`` records ``log μ``
of the drawn token: the probability it was actually sampled with, so ``w = π_θ / μ`` is the
correct importance ratio. Right after sampling it is then not 1 but the mass ``π_θ`` puts on
the kept tokens (≤ 1). ``entropy_old`` stays the *untruncated* distribution's entropy (the
policy's uncertainty, which GTPO and TEPO read and compare with ``policy_logprobs``).
Leave ``top_k`` / ``top_p`` unset for on-policy RL; they are there for evaluation.

Layout of a batch
-----------------
``B = len(prompts) · G`` rows; row ``r`` answers prompt ``r // G`` (groups in consecutive
rows, as ``refimpl.contract.RolloutBatch`` expects). Prompts are left-padded to a common length
``P`` so that all rows generate their next token at the same column; responses are
right-padded to ``T``, the longest response actually generated.

Where things are
----------------
This file is what a reader follows: ``Samples``, ``sample_groups``, ``policy_logprobs``.
``refimpl.sampling.distribution`` draws one token and says what is recorded of it;
``refimpl.sampling.decoding`` holds the machinery of speed (the KV caches, each group's prompt
run once, the finished rows left out of the forward pass); ``refimpl.sampling.checks`` checks
the arguments.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from refimpl.contract import RolloutBatch, require
from refimpl.model import GPT
from refimpl.sampling.checks import check_logprob_args, check_sampling_args
from refimpl.sampling.decoding import (
    decode,
    groups_share_prompts,
    masked_forward,
    response_logits_shared_prompts,
)
from refimpl.sampling.distribution import entropy_from_logp

# ---------------------------------------------------------------------------------------------
# What sampling returns.
# ---------------------------------------------------------------------------------------------


@dataclass
class Samples:
    """A batch of ``B = N·G`` sampled completions with the rollout policy's records.

    Attributes:
        prompt_ids: ``[B, P]`` long, left-padded prompts (each prompt repeated ``G`` times).
        prompt_mask: ``[B, P]`` long, 1 on prompt tokens, 0 on the left padding.
        response_ids: ``[B, T]`` long, generated tokens, ``pad_id`` after the EOS.
        response_mask: ``[B, T]`` float32, 1.0 on generated tokens *including* the EOS, 0.0
            after it; a row that reached ``max_new_tokens`` without EOS is all ones.
        logp_old: ``[B, T]`` float32, log-prob of each generated token under the distribution
            it was drawn from (temperature-scaled, truncated by top-k/top-p when set); 0 on
            padding.
        entropy_old: ``[B, T]`` float32, full-vocabulary entropy of the temperature-scaled
            distribution (before truncation) at each position; 0 on padding.
        truncated: ``[B]`` bool, the row hit the token budget without emitting EOS.
        group_size: ``G``.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    response_ids: Tensor
    response_mask: Tensor
    logp_old: Tensor
    entropy_old: Tensor
    truncated: Tensor
    group_size: int

    @property
    def lengths(self) -> Tensor:
        """``|o_i|``, the number of generated tokens of each row (EOS included), long ``[B]``."""
        return self.response_mask.sum(dim=1).long()

    def responses(self) -> list[list[int]]:
        """The generated tokens of each row as Python lists (EOS included when emitted)."""
        return [row[: int(n)].tolist() for row, n in zip(self.response_ids, self.lengths)]

    def to(self, device: torch.device | str) -> Samples:
        """The same samples with every tensor on ``device``."""
        return replace(self, **{name: t.to(device) for name, t in self._tensors().items()})

    def select_groups(self, keep: Tensor) -> Samples:
        """The rows of the groups where ``keep`` (bool ``[N]``) holds."""
        rows = keep.repeat_interleave(self.group_size)
        return replace(self, **{name: t[rows] for name, t in self._tensors().items()})

    def policy_logprobs(
        self,
        model: nn.Module,
        rows: Tensor | slice = slice(None),
        *,
        temperature: float = 1.0,
        with_entropy: bool = True,
        group_size: int | None = None,
    ) -> tuple[Tensor, Tensor | None]:
        """:func:`policy_logprobs` of ``model`` on the rows ``rows`` of these samples, with
        gradient: ``log π_θ`` of each sampled token and (``with_entropy``) the entropy ``H_θ``
        at each position. Consecutive runs of ``group_size`` rows share a prompt (default: the
        samples' ``G``)."""
        return policy_logprobs(
            model,
            self.prompt_ids[rows],
            self.prompt_mask[rows],
            self.response_ids[rows],
            self.response_mask[rows],
            temperature=temperature,
            with_entropy=with_entropy,
            group_size=group_size or self.group_size,
        )

    def _tensors(self) -> dict[str, Tensor]:
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if isinstance(getattr(self, f.name), Tensor)
        }

    def to_rollout_batch(
        self, rewards: Tensor, group_size: int | None = None, logp_ref: Tensor | None = None
    ) -> RolloutBatch:
        """Package the samples, their ``[B]`` rewards and (when a KL term needs them) the
        reference log-probs as a validated ``RolloutBatch``."""
        group_size = self.group_size if group_size is None else group_size
        require(
            group_size == self.group_size,
            "group_size",
            f"the group size the samples were drawn with ({self.group_size}), got {group_size}",
        )
        rewards = torch.as_tensor(rewards, dtype=torch.float32, device=self.response_mask.device)
        return RolloutBatch(
            response_ids=self.response_ids,
            response_mask=self.response_mask,
            rewards=rewards,
            logp_old=self.logp_old,
            entropy_old=self.entropy_old,
            group_size=group_size,
            logp_ref=logp_ref,
        )


# ---------------------------------------------------------------------------------------------
# Group sampling.
# ---------------------------------------------------------------------------------------------


@torch.no_grad()
def sample_groups(
    model: nn.Module,
    prompts: list[list[int]],
    *,
    group_size: int,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    shared_prefix_cache: bool = True,
) -> Samples:
    """Sample ``group_size`` completions of every prompt in one batched pass.

    Rows finish when they emit ``eos_id``; sampling stops when every row has finished or after
    ``max_new_tokens`` tokens, and a row still running then is truncated (all its tokens
    masked in, ``truncated`` set). Runs under ``no_grad`` with the model in eval mode (its
    previous mode is restored). Deterministic for a seeded ``generator``.

    Args:
        model: ``refimpl.model.GPT``, or any causal LM with the same call signature whose
            output is the logits or has ``.logits`` / ``.past_key_values`` (Hugging Face).
        prompts: ``N`` non-empty lists of token ids.
        group_size: ``G``, completions per prompt.
        max_new_tokens: token budget of each completion (EOS included).
        eos_id, pad_id: end-of-sequence and padding token ids (``pad_id`` fills the left of
            short prompts and the right of short responses; it is never attended to).
        temperature: sample from and record ``softmax(logits / temperature)``.
        top_k, top_p: optional truncation of the sampling distribution; ``logp_old`` records
            the truncated distribution's log-probs, ``entropy_old`` the untruncated entropy
            (see the module docstring).
        generator: seeded ``torch.Generator`` (any device) for reproducible sampling.
        use_cache: decode incrementally with the KV cache; ``False`` recomputes the whole
            prefix at every step (slow; kept for the benchmark and as a test oracle).
        shared_prefix_cache: with our ``GPT``, decode into a ``model.SharedPrefixKVCache``:
            each prompt's keys and values stored once for its ``G`` rows, generated ones in a
            preallocated buffer. The same distribution as the list cache that repeats the
            prompt per row and grows by concatenation (``False``, the plain reference path,
            and the only one for other models), up to float rounding, several times faster
            at thousands of rows (``tests/test_sampling.py``, ``docs/benchmarks.md`` § 4).
    """
    check_sampling_args(
        model, prompts, group_size, max_new_tokens, eos_id, pad_id, temperature, top_k, top_p
    )
    device = _model_device(model)
    prompt_ids, prompt_mask = _left_pad(prompts, pad_id)
    prompt_ids = prompt_ids.repeat_interleave(group_size, dim=0).to(device)  # row r: prompt r//G
    prompt_mask = prompt_mask.repeat_interleave(group_size, dim=0).to(device)
    was_training = model.training
    model.eval()
    try:
        steps = decode(
            model,
            prompt_ids,
            prompt_mask,
            group_size=group_size,
            max_new_tokens=max_new_tokens,
            eos_id=eos_id,
            pad_id=pad_id,
            sampling=(temperature, top_k, top_p, generator),
            use_cache=use_cache,
            shared_cache=shared_prefix_cache and use_cache and isinstance(model, GPT),
        )
    finally:
        model.train(was_training)
    tokens, alive_steps, logps, entropies, finished = steps
    return Samples(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        response_ids=torch.stack(tokens, dim=1),
        response_mask=torch.stack(alive_steps, dim=1).float(),
        logp_old=torch.stack(logps, dim=1),
        entropy_old=torch.stack(entropies, dim=1),
        truncated=~finished,
        group_size=group_size,
    )


# ---------------------------------------------------------------------------------------------
# Log-probs (and entropies) of given responses under the policy being trained.
# ---------------------------------------------------------------------------------------------


def policy_logprobs(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    *,
    temperature: float = 1.0,
    with_entropy: bool = True,
    group_size: int | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Per-token log-probs (and full-vocabulary entropies) of the responses, with gradient.

    One forward pass over ``[prompt ‖ response]``: the logits at column ``P − 1 + t`` predict
    response token ``t``. The distribution is ``softmax(logits / temperature)`` in float32,
    the same one ``sample_groups`` records, so right after sampling ``logp == logp_old`` and
    ``entropy == entropy_old`` (up to float rounding). Padding tokens are never attended to,
    so whatever ``response_ids`` holds there is irrelevant.

    Args:
        prompt_ids, prompt_mask: ``[B, P]``, left-padded (the last column is a real token).
        response_ids, response_mask: ``[B, T]``, right-padded.

    Returns:
        ``(logp, entropy)``, both float32 ``[B, T]`` and exactly 0 on padding; ``entropy`` is
        ``None`` when ``with_entropy`` is false.

    With ``group_size = G`` and our ``GPT``, rows in consecutive groups of ``G`` whose prompts
    are identical (as ``sample_groups`` lays them out) run their prompt once: its keys and
    values are repeated ``G`` times, with gradient, and only the responses go through the
    model as new tokens. Causality makes this the same computation (prompt positions never
    see the response), with ``G``-fold fewer prompt tokens; other inputs take the plain path.
    """
    check_logprob_args(prompt_ids, prompt_mask, response_ids, response_mask, temperature)

    P, T = prompt_ids.shape[1], response_ids.shape[1]
    real = response_mask.bool()
    # Padding may hold anything (RolloutBatch allows it); give the embedding a valid id.
    response_ids = torch.where(real, response_ids, torch.zeros_like(response_ids))
    attention_mask = torch.cat([prompt_mask.long(), real.long()], dim=1)
    if groups_share_prompts(model, prompt_ids, prompt_mask, group_size):
        logits = response_logits_shared_prompts(
            model, prompt_ids, prompt_mask, response_ids, attention_mask, int(group_size)
        )
        scaled = logits.float() / temperature  # column t predicts response token t
    else:
        input_ids = torch.cat([prompt_ids, response_ids], dim=1)
        logits, _ = masked_forward(model, input_ids, attention_mask)
        scaled = logits[:, P - 1 : P + T - 1, :].float() / temperature  # predicts token t
    logp_all = F.log_softmax(scaled, dim=-1)
    logp = logp_all.gather(-1, response_ids[:, :, None]).squeeze(-1)
    logp = torch.where(real, logp, torch.zeros_like(logp))
    if not with_entropy:
        return logp, None
    entropy = entropy_from_logp(logp_all)  # = entropy_from_logits(scaled)
    return logp, torch.where(real, entropy, torch.zeros_like(entropy))


# ---------------------------------------------------------------------------------------------
# Seeds, stacking and padding.
# ---------------------------------------------------------------------------------------------


def seeded_generator(seed: int, *salt: int, device: torch.device | str = "cpu") -> torch.Generator:
    """A torch generator seeded by ``(seed, *salt)`` (numpy's ``SeedSequence`` mixes them):
    step ``s`` of a run draws from its own stream, not from one that runs through the whole
    run, so a run resumed at step ``s`` samples exactly what it would have."""
    derived = int(np.random.default_rng([seed, *salt]).integers(2**62))
    return torch.Generator(device=device).manual_seed(derived)


def concat_samples(parts: list[Samples], pad_id: int) -> Samples:
    """Stack sample batches of different lengths: prompts padded on the left, responses on
    the right, token ids with ``pad_id`` (padding is masked everywhere, so its value never
    matters)."""
    if len(parts) == 1:
        return parts[0]
    out = {}
    for f in fields(parts[0]):
        values = [getattr(p, f.name) for p in parts]
        if not isinstance(values[0], Tensor) or values[0].dim() < 2:
            out[f.name] = torch.cat(values) if isinstance(values[0], Tensor) else values[0]
            continue
        width = max(v.shape[1] for v in values)
        left = f.name.startswith("prompt")
        pad_value = pad_id if not values[0].is_floating_point() else 0.0
        padded = []
        for v in values:
            extra = width - v.shape[1]
            padded.append(F.pad(v, (extra, 0) if left else (0, extra), value=pad_value))
        out[f.name] = torch.cat(padded)
    return Samples(**out)


def _left_pad(prompts: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """``[N, P]`` left-padded ids and mask: every prompt ends at the last column."""
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), P), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, P - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[i, P - len(prompt) :] = 1
    return ids, mask


def _model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device
