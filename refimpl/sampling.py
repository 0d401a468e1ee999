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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from refimpl.contract import RolloutBatch, require
from refimpl.model import GPT, SharedPrefixKVCache, positions_from_mask


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Full-vocabulary entropy ``H = −Σ_v p_v log p_v`` over the last dimension, in float32.

    Computed from ``log_softmax`` (which subtracts the max logit first) rather than from
    ``log(softmax)``, so it is stable for large logits; an underflowed ``p_v = 0`` contributes
    ``0 · (finite log p_v) = 0``. Differentiable.
    """
    return _entropy_from_logp(F.log_softmax(logits.float(), dim=-1))


#: The smallest temperature (``--temperature``): where training still means something. The sampler and the
#: loss take ``softmax(logits / τ)`` in float32, whose smallest normal value is about e^-87:
#: at τ = 0.01 a gap of 0.87 between the two largest logits already leaves the runner-up
#: nothing, so a smaller τ samples greedily, records entropy 0, and every gradient (which
#: scales with 1 − π of the token sampled) is 0: the run updates nothing, silently. (1e-30
#: was the old bound, where logits / τ still fit float32: it trained nothing.)
TEMPERATURE_MIN = 0.01
#: The smallest top-p (``--top-p``): float32's smallest normal value (the nucleus keeps the most
#: likely token; 1e-46 rounds to 0 in float32, and every token was dropped).
TOP_P_MIN = float(torch.finfo(torch.float32).tiny)


def _entropy_from_logp(logp: Tensor) -> Tensor:
    """``−Σ_v exp(logp_v) · logp_v``, clamped at 0 against rounding."""
    return (-(logp.exp() * logp).sum(dim=-1)).clamp(min=0.0)


def _logits_and_cache(output: object) -> tuple[Tensor, object]:
    """Accept both ``refimpl.model.GPT`` outputs (a tensor, or ``GPTOutput``) and Hugging Face
    outputs (an object with ``.logits`` and ``.past_key_values``)."""
    if isinstance(output, Tensor):
        return output, None
    return output.logits, getattr(output, "past_key_values", None)  # type: ignore[attr-defined]


def _model_device(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


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


# ---------------------------------------------------------------------------------------------
# Drawing one token per row.
# ---------------------------------------------------------------------------------------------


def _truncate(logits: Tensor, top_k: int | None, top_p: float | None) -> Tensor:
    """Set logits outside the top-k and outside the top-p nucleus to −inf (sampling only)."""
    if top_k is not None and top_k < logits.shape[-1]:
        kth_largest = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth_largest, float("-inf"))
    if top_p is not None and top_p < 1.0:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(dim=-1)
        # Keep a token when the mass strictly before it is < top_p: the smallest prefix of
        # the sorted vocabulary whose mass reaches top_p (the most likely token always stays).
        mass_before = probs.cumsum(dim=-1) - probs
        drop_sorted = mass_before >= top_p
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _uniforms(rows: int, generator: torch.Generator | None, device: torch.device) -> Tensor:
    """``[rows, 1]`` uniform draws from ``generator`` on *its* device, moved to ``device``: a
    seeded CPU generator drives sampling on any device, and the random stream does not depend
    on where the model runs. One draw per row at every step, whether the row is still
    generating or not, so the stream does not depend on which rows finished."""
    rng_device = generator.device if generator is not None else device
    return torch.rand(rows, 1, generator=generator, device=rng_device).to(device)


def _draw(probs: Tensor, u: Tensor) -> Tensor:
    """One token per row by inverse-CDF sampling: the first token whose cumulative probability
    exceeds the row's uniform draw ``u·Σp`` (equivalent to ``torch.multinomial``)."""
    cdf = probs.cumsum(dim=-1)
    # right=True: first index with cdf > u·total, which skips zero-probability tokens.
    token = torch.searchsorted(cdf, u * cdf[:, -1:], right=True)
    return token.squeeze(-1).clamp(max=probs.shape[-1] - 1)


# ---------------------------------------------------------------------------------------------
# Group sampling.
# ---------------------------------------------------------------------------------------------


def _left_pad(prompts: list[list[int]], pad_id: int) -> tuple[Tensor, Tensor]:
    """``[N, P]`` left-padded ids and mask: every prompt ends at the last column."""
    P = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), P), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), P), dtype=torch.long)
    for i, prompt in enumerate(prompts):
        ids[i, P - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[i, P - len(prompt) :] = 1
    return ids, mask


def _prefill(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    group_size: int,
    max_new_tokens: int,
    shared_cache: bool,
) -> tuple[Tensor, object]:
    """Run the prompts through the model, returning the last logits and the filled cache.

    The ``G`` copies of a prompt have identical prefixes, so with our ``GPT`` (whose cache is
    a plain list of tensors) each prompt is run once and its cache repeated ``G`` times: the
    prefill, otherwise the largest single cost of cached sampling, shrinks ``G``-fold.
    Other models prefill every row. With ``shared_cache`` (our ``GPT`` only) the prompts'
    keys and values are not repeated at all: they go into a ``SharedPrefixKVCache``, which keeps
    one copy per group and lets the ``G`` rows of a group attend to it together.
    """
    share = isinstance(model, GPT) and (group_size > 1 or shared_cache)
    if share:
        prompt_ids, prompt_mask = prompt_ids[::group_size], prompt_mask[::group_size]
    output = model(
        prompt_ids,
        attention_mask=prompt_mask,
        position_ids=positions_from_mask(prompt_mask),
        use_cache=True,
    )
    logits, cache = _logits_and_cache(output)
    logits = logits[:, -1:, :]
    if share:
        logits = logits.repeat_interleave(group_size, dim=0)
    if share and shared_cache:
        return logits, SharedPrefixKVCache(cache, prompt_mask, group_size, max_new_tokens)
    if share:
        cache = [
            (k.repeat_interleave(group_size, 0), v.repeat_interleave(group_size, 0))
            for k, v in cache
        ]  # type: ignore[union-attr]
    return logits, cache


def _check_sampling_args(
    model: nn.Module,
    prompts: list[list[int]],
    group_size: int,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
) -> None:
    """``sample_groups``'s arguments, token ids and lengths checked against the model's
    vocabulary and block size when its config states them."""
    require(
        isinstance(prompts, list)
        and len(prompts) > 0
        and all(isinstance(p, list) and len(p) > 0 for p in prompts),
        "prompts",
        "a non-empty list of non-empty token-id lists",
    )
    require(
        isinstance(group_size, int) and group_size >= 1,
        "group_size",
        f"a positive int, got {group_size!r}",
    )
    require(
        isinstance(max_new_tokens, int) and max_new_tokens >= 1,
        "max_new_tokens",
        f"a positive int, got {max_new_tokens!r}",
    )
    require(
        math.isfinite(temperature) and temperature > 0,
        "temperature",
        f"a finite value > 0, got {temperature!r}",
    )
    require(
        top_k is None or (isinstance(top_k, int) and top_k >= 1),
        "top_k",
        f"None or an int ≥ 1, got {top_k!r}",
    )
    require(
        top_p is None or 0.0 < top_p <= 1.0, "top_p", f"None or a value in (0, 1], got {top_p!r}"
    )
    vocab_size = getattr(getattr(model, "config", None), "vocab_size", None)
    if vocab_size is not None:
        for name, value in (("eos_id", eos_id), ("pad_id", pad_id)):
            require(0 <= value < vocab_size, name, f"a token id in [0, {vocab_size}), got {value}")
        require(
            all(0 <= t < vocab_size for p in prompts for t in p),
            "prompts",
            f"token ids in [0, {vocab_size})",
        )
    block_size = getattr(getattr(model, "config", None), "block_size", None)
    longest = max(len(p) for p in prompts)
    if block_size is not None:
        require(
            longest + max_new_tokens <= block_size,
            "max_new_tokens",
            f"longest prompt ({longest}) + max_new_tokens ≤ block_size={block_size}, "
            f"got {max_new_tokens}",
        )


def _forward(
    model: nn.Module, input_ids: Tensor, mask: Tensor, cache: object = None
) -> tuple[Tensor, object]:
    """Logits (and the KV cache) of ``input_ids``, the last columns of a sequence whose
    attention mask is ``mask``; with ``cache``, the columns before them are cached."""
    positions = positions_from_mask(mask)[:, -input_ids.shape[1] :]
    if cache is None:
        return _logits_and_cache(model(input_ids, attention_mask=mask, position_ids=positions))
    output = model(
        input_ids,
        attention_mask=mask,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    )
    return _logits_and_cache(output)


def _sample_token(
    logits: Tensor,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    u: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Draw one token per row from ``[B, V]`` last-position logits with the ``[B, 1]`` uniform
    draws ``u``. Returns the ``[B]`` tokens, the ``[B, V]`` log-probs of the distribution they
    were drawn from and the ``[B]`` entropies before truncation."""
    # The temperature-scaled distribution in float32, from one log-softmax: its entropy
    # before truncation, the probabilities drawn from, the log-prob of the drawn token.
    scaled = logits.float() / temperature
    logp_all = F.log_softmax(scaled, dim=-1)
    probs = logp_all.exp()
    entropy = (-(probs * logp_all).sum(dim=-1)).clamp(min=0.0)  # as _entropy_from_logp
    truncated = _truncate(scaled, top_k, top_p)  # `scaled` itself without top-k/top-p
    if truncated is scaled:
        return _draw(probs, u), logp_all, entropy
    logp_all = F.log_softmax(truncated, dim=-1)  # μ, the distribution sampled from
    return _draw(logp_all.exp(), u), logp_all, entropy


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
    _check_sampling_args(
        model, prompts, group_size, max_new_tokens, eos_id, pad_id, temperature, top_k, top_p
    )
    device = _model_device(model)
    prompt_ids, prompt_mask = _left_pad(prompts, pad_id)
    prompt_ids = prompt_ids.repeat_interleave(group_size, dim=0).to(device)  # row r: prompt r//G
    prompt_mask = prompt_mask.repeat_interleave(group_size, dim=0).to(device)
    was_training = model.training
    model.eval()
    try:
        steps = _decode(
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


def _decode(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    *,
    group_size: int,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    sampling: tuple[float, int | None, float | None, torch.Generator | None],
    use_cache: bool,
    shared_cache: bool = False,
) -> tuple[list[Tensor], list[Tensor], list[Tensor], list[Tensor], Tensor]:
    """The decoding loop of :func:`sample_groups` over the ``[B, P]`` repeated prompts: per
    step the ``[B]`` sampled tokens, whether each row was still generating, their log-probs
    and entropies (0 on finished rows), then the ``[B]`` rows that emitted ``eos_id``.
    ``sampling``: ``(temperature, top_k, top_p, generator)``."""
    B, device = prompt_ids.shape[0], prompt_ids.device
    generator = sampling[3]
    tokens: list[Tensor] = []  # one [B] tensor per step
    alive_steps: list[Tensor] = []  # [B] bool: the row was still generating at that step
    logps: list[Tensor] = []
    entropies: list[Tensor] = []
    finished = torch.zeros(B, dtype=torch.bool, device=device)
    ones = torch.ones(B, 1, dtype=prompt_mask.dtype, device=device)
    # Rows that finished keep being fed (pad) tokens so the batch stays rectangular; their
    # outputs are discarded. Marking them as real in the mask is harmless: a real token never
    # sees a later position. The shared-prefix cache instead runs only the rows still
    # generating (``live``) through the model: the same outputs for them, less arithmetic.
    mask = prompt_mask
    cache = None
    live: Tensor | None = None  # indices of the rows run through the model; None: all
    for step in range(max_new_tokens):
        if not use_cache:  # the slow path: recompute the whole sequence so far
            input_ids = torch.cat([prompt_ids, *(t[:, None] for t in tokens)], dim=1)
            logits, _ = _forward(model, input_ids, mask)
        elif step == 0:
            logits, cache = _prefill(
                model, prompt_ids, prompt_mask, group_size, max_new_tokens, shared_cache
            )
        elif shared_cache:  # the cache knows every row's position and its prompt's padding
            cache.run_rows(live)
            newest = tokens[-1] if live is None else tokens[-1][live]
            logits, cache = _logits_and_cache(
                model(newest[:, None], past_key_values=cache, use_cache=True)
            )
        else:  # feed only the newest token; the cache holds everything before it
            logits, cache = _forward(model, tokens[-1][:, None], mask, cache)
        u = _uniforms(B, generator, device)  # every row's draw, live or not
        if live is None:
            token, logp_all, entropy = _sample_token(logits[:, -1, :], *sampling[:3], u)
            logp = logp_all.gather(-1, token[:, None]).squeeze(-1)
        else:  # the live rows' draws, laid back out over every row (0 / pad elsewhere)
            token_live, logp_all, entropy_live = _sample_token(
                logits[:, -1, :], *sampling[:3], u[live]
            )
            token = torch.full((B,), pad_id, dtype=torch.long, device=device)
            token[live] = token_live
            logp = torch.zeros(B, device=device)
            logp[live] = logp_all.gather(-1, token_live[:, None]).squeeze(-1)
            entropy = torch.zeros(B, device=device)
            entropy[live] = entropy_live

        alive = ~finished
        token = torch.where(alive, token, torch.full_like(token, pad_id))
        tokens.append(token)
        alive_steps.append(alive)
        logps.append(torch.where(alive, logp, 0.0))
        entropies.append(torch.where(alive, entropy, 0.0))
        finished = finished | (token == eos_id)
        if bool(finished.all()):
            break
        if shared_cache:
            live = None if not bool(finished.any()) else (~finished).nonzero().squeeze(1)
        else:
            mask = torch.cat([mask, ones], dim=1)
    return tokens, alive_steps, logps, entropies, finished


# ---------------------------------------------------------------------------------------------
# Log-probs (and entropies) of given responses under the policy being trained.
# ---------------------------------------------------------------------------------------------


def _shared_prompts(
    model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, group_size: int | None
) -> bool:
    """Whether ``policy_logprobs`` may run each group's prompt once (see its docstring)."""
    if not (isinstance(model, GPT) and isinstance(group_size, int) and group_size > 1):
        return False
    B, P = prompt_ids.shape
    if B % group_size:
        return False
    ids = prompt_ids.view(B // group_size, group_size, P)
    mask = prompt_mask.view(B // group_size, group_size, P)
    return bool((ids == ids[:, :1]).all()) and bool((mask == mask[:, :1]).all())


def _response_logits_shared_prompts(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    attention_mask: Tensor,
    G: int,
) -> Tensor:
    """``[B, T, V]`` logits predicting each response token, each group's prompt run once
    (see :func:`policy_logprobs`): its keys and values, with gradient, repeated ``G`` times."""
    P, T = prompt_ids.shape[1], response_ids.shape[1]
    shared_mask = prompt_mask[::G].long()
    prompt_out = model(
        prompt_ids[::G],
        attention_mask=shared_mask,
        position_ids=positions_from_mask(shared_mask),
        use_cache=True,
    )
    cache = [
        (k.repeat_interleave(G, 0), v.repeat_interleave(G, 0))
        for k, v in prompt_out.past_key_values  # type: ignore[union-attr]
    ]
    response_logits = model(
        response_ids,
        attention_mask=attention_mask,
        position_ids=positions_from_mask(attention_mask)[:, P:],
        past_key_values=cache,
    )
    first = prompt_out.logits[:, -1:, :].repeat_interleave(G, 0)  # type: ignore[union-attr]
    return torch.cat([first, response_logits[:, : T - 1, :]], dim=1)


def _check_logprob_args(
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
) -> None:
    """``policy_logprobs``'s tensors: matching shapes, left-padded prompts."""
    require(
        prompt_ids.dim() == 2 and prompt_ids.shape == prompt_mask.shape,
        "prompt_mask",
        f"the shape of prompt_ids {list(prompt_ids.shape)}, got {list(prompt_mask.shape)}",
    )
    require(
        response_ids.dim() == 2 and response_ids.shape == response_mask.shape,
        "response_mask",
        f"the shape of response_ids {list(response_ids.shape)}, got {list(response_mask.shape)}",
    )
    require(
        prompt_ids.shape[0] == response_ids.shape[0],
        "response_ids",
        f"{prompt_ids.shape[0]} rows like prompt_ids, got {response_ids.shape[0]}",
    )
    require(
        prompt_ids.shape[1] >= 1 and bool(prompt_mask[:, -1].bool().all()),
        "prompt_mask",
        "left-padded prompts with at least one token (last column all ones)",
    )
    require(
        math.isfinite(temperature) and temperature > 0,
        "temperature",
        f"a finite value > 0, got {temperature!r}",
    )


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
    _check_logprob_args(prompt_ids, prompt_mask, response_ids, response_mask, temperature)

    P, T = prompt_ids.shape[1], response_ids.shape[1]
    real = response_mask.bool()
    # Padding may hold anything (RolloutBatch allows it); give the embedding a valid id.
    response_ids = torch.where(real, response_ids, torch.zeros_like(response_ids))
    attention_mask = torch.cat([prompt_mask.long(), real.long()], dim=1)
    if _shared_prompts(model, prompt_ids, prompt_mask, group_size):
        logits = _response_logits_shared_prompts(
            model, prompt_ids, prompt_mask, response_ids, attention_mask, int(group_size)
        )
        scaled = logits.float() / temperature  # column t predicts response token t
    else:
        input_ids = torch.cat([prompt_ids, response_ids], dim=1)
        logits, _ = _forward(model, input_ids, attention_mask)
        scaled = logits[:, P - 1 : P + T - 1, :].float() / temperature  # predicts token t
    logp_all = F.log_softmax(scaled, dim=-1)
    logp = logp_all.gather(-1, response_ids[:, :, None]).squeeze(-1)
    logp = torch.where(real, logp, torch.zeros_like(logp))
    if not with_entropy:
        return logp, None
    entropy = _entropy_from_logp(logp_all)  # = entropy_from_logits(scaled)
    return logp, torch.where(real, entropy, torch.zeros_like(entropy))
