"""The arguments of ``refimpl.sampling.groups``'s ``sample_groups`` and ``policy_logprobs``,
checked before anything runs: a ``ValueError`` that names the argument and says what was
expected (``refimpl.contract.require``).
"""

from __future__ import annotations

import math

from torch import Tensor, nn

from refimpl.contract import require


def check_sampling_args(
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


def check_logprob_args(
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
