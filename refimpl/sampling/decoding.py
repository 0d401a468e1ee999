"""The machinery of speed behind ``refimpl.sampling.groups``: how the model is run, not what
is drawn or recorded (``refimpl.sampling.distribution``).

* ``decode``: the decoding loop of ``sample_groups``, one token per row per step. With our
  ``GPT`` it prefills each group's prompt once and repeats its keys and values ``G`` times, or
  keeps one copy per group in a ``model.SharedPrefixKVCache`` (other models prefill every
  row); it feeds only the newest token once the cache holds the rest, and with the
  shared-prefix cache runs only the rows still generating through the model (the finished
  rows' outputs would be discarded). ``use_cache = False`` recomputes the whole prefix at
  every step: slow, the reference path.
* ``response_logits_shared_prompts``: ``policy_logprobs``'s forward pass with each group's
  prompt run once, with gradient (``groups_share_prompts`` says when it applies).

Every path gives the same distribution as the plain one up to float rounding
(``tests/test_sampling.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from refimpl.model import GPT, SharedPrefixKVCache, positions_from_mask
from refimpl.sampling.distribution import sample_token, uniforms

# ---------------------------------------------------------------------------------------------
# Decoding: one token per row per step.
# ---------------------------------------------------------------------------------------------


def decode(
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
            logits, _ = masked_forward(model, input_ids, mask)
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
            logits, cache = masked_forward(model, tokens[-1][:, None], mask, cache)
        u = uniforms(B, generator, device)  # every row's draw, live or not
        if live is None:
            token, logp_all, entropy = sample_token(logits[:, -1, :], *sampling[:3], u)
            logp = logp_all.gather(-1, token[:, None]).squeeze(-1)
        else:  # the live rows' draws, laid back out over every row (0 / pad elsewhere)
            token_live, logp_all, entropy_live = sample_token(
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


def masked_forward(
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


def _logits_and_cache(output: object) -> tuple[Tensor, object]:
    """Accept both ``refimpl.model.GPT`` outputs (a tensor, or ``GPTOutput``) and Hugging Face
    outputs (an object with ``.logits`` and ``.past_key_values``)."""
    if isinstance(output, Tensor):
        return output, None
    return output.logits, getattr(output, "past_key_values", None)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# The policy's forward pass with each group's prompt run once.
# ---------------------------------------------------------------------------------------------


def groups_share_prompts(
    model: nn.Module, prompt_ids: Tensor, prompt_mask: Tensor, group_size: int | None
) -> bool:
    """Whether ``policy_logprobs`` may run each group's prompt once (its docstring says when)."""
    if not (isinstance(model, GPT) and isinstance(group_size, int) and group_size > 1):
        return False
    B, P = prompt_ids.shape
    if B % group_size:
        return False
    ids = prompt_ids.view(B // group_size, group_size, P)
    mask = prompt_mask.view(B // group_size, group_size, P)
    return bool((ids == ids[:, :1]).all()) and bool((mask == mask[:, :1]).all())


def response_logits_shared_prompts(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    response_ids: Tensor,
    attention_mask: Tensor,
    G: int,
) -> Tensor:
    """``[B, T, V]`` logits predicting each response token, each group's prompt run once
    (see ``refimpl.sampling.groups.policy_logprobs``): its keys and values, with gradient, repeated ``G`` times."""
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
