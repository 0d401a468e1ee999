"""Hugging Face models: GPT-2 conversion, chunked per-token log-probs/entropies, rollout batches.

Three pieces, each the smallest thing that lets an algorithm file run on a real model:

1. :func:`to_hf_gpt2` / :func:`from_hf_gpt2`. The toy model in ``refimpl.model`` has GPT-2's
   architecture and parameter names; the only storage difference is that it uses ``nn.Linear``
   (weight ``[out, in]``) where transformers uses ``Conv1D`` (weight ``[in, out]``), so four
   matrices per block are transposed. ``tests/scaleup/test_hf.py`` checks identical logits both
   ways, which is what makes the toy experiments a statement about a real architecture.
2. :func:`token_logprobs_and_entropy`. ``log π(o_t | ·)`` of the sampled tokens and the
   full-vocabulary entropy ``H_t = −Σ_v p_v log p_v`` at every response position, for any
   causal LM, in float32 and in chunks (memory bound in the docstring).
3. :func:`rollout_batch`. A validated ``RolloutBatch`` from ``model.generate`` output and
   rewards, so ``algorithms.<name>.advantages`` / ``.loss`` run unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.utils.checkpoint import checkpoint
from transformers import GPT2Config, GPT2LMHeadModel

from refimpl.contract import RolloutBatch, require
from refimpl.model import GPT, GPTConfig, positions_from_mask

# The four per-block matrices that transformers stores as Conv1D ([in, out]).
_CONV1D_SUFFIXES = (
    "attn.c_attn.weight",
    "attn.c_proj.weight",
    "mlp.c_fc.weight",
    "mlp.c_proj.weight",
)

#: Default number of (row, position) pairs whose ``[chunk, V]`` logits exist at once.
DEFAULT_CHUNK_TOKENS = 1024


# ---------------------------------------------------------------------------------------------
# 1. The toy model is a GPT-2.
# ---------------------------------------------------------------------------------------------


def hf_gpt2_config(config: GPTConfig) -> GPT2Config:
    """The ``GPT2Config`` whose model computes exactly what ``GPT(config)`` computes."""
    return GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.block_size,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=4 * config.n_embd,
        activation_function="gelu_new",  # GELU, tanh approximation, as refimpl.model.MLP
        resid_pdrop=config.dropout,
        embd_pdrop=config.dropout,
        attn_pdrop=config.dropout,
        layer_norm_epsilon=config.layer_norm_eps,
        tie_word_embeddings=True,  # the toy model ties lm_head to wte
        scale_attn_weights=True,  # 1/√d_head, as scaled_dot_product_attention
        scale_attn_by_inverse_layer_idx=False,
        reorder_and_upcast_attn=False,
        # GPT2Config defaults these to GPT-2's 50256, outside a small vocabulary; callers pass
        # their tokenizer's ids to generate().
        bos_token_id=None,
        eos_token_id=None,
    )


def _gpt_config_from_hf(config: GPT2Config) -> GPTConfig:
    require(
        config.activation_function in ("gelu_new", "gelu_pytorch_tanh"),
        "config.activation_function",
        "the tanh GELU the toy model uses",
    )
    inner = config.n_inner if config.n_inner is not None else 4 * config.n_embd
    require(inner == 4 * config.n_embd, "config.n_inner", "4·n_embd, as the toy model")
    require(
        bool(getattr(config, "tie_word_embeddings", True)),
        "config.tie_word_embeddings",
        "True (the toy model ties lm_head to wte)",
    )
    require(
        not config.scale_attn_by_inverse_layer_idx,
        "config.scale_attn_by_inverse_layer_idx",
        "False",
    )
    return GPTConfig(
        vocab_size=config.vocab_size,
        block_size=config.n_positions,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_embd=config.n_embd,
        dropout=config.resid_pdrop,
        layer_norm_eps=config.layer_norm_epsilon,
    )


def _convert_state(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Transpose the Conv1D/Linear matrices; the transpose is its own inverse, so this maps
    toy → HF and HF → toy alike."""
    return {
        k: (v.t().contiguous() if k.endswith(_CONV1D_SUFFIXES) else v.clone())
        for k, v in state.items()
    }


def _load_exactly(module: nn.Module, state: dict[str, Tensor]) -> None:
    """Load ``state`` and fail unless every parameter of ``module`` was set from it."""
    missing, unexpected = module.load_state_dict(state, strict=False)
    # lm_head.weight is tied to wte on both sides, so it may legitimately be absent.
    missing = [k for k in missing if k != "lm_head.weight"]
    require(
        not missing and not unexpected,
        "state_dict",
        f"a one-to-one parameter map, got missing={missing} unexpected={unexpected}",
    )


def to_hf_gpt2(model: GPT) -> GPT2LMHeadModel:
    """A ``transformers.GPT2LMHeadModel`` with the same weights (a copy) and the same logits."""
    require(isinstance(model, GPT), "model", f"a refimpl.model.GPT, got {type(model).__name__}")
    hf = GPT2LMHeadModel(hf_gpt2_config(model.config))
    state = {k: v for k, v in model.state_dict().items() if k != "lm_head.weight"}
    _load_exactly(hf, _convert_state(state))
    hf.tie_weights()
    return hf.to(next(model.parameters()).device).train(model.training)


def from_hf_gpt2(hf: GPT2LMHeadModel) -> GPT:
    """A ``refimpl.model.GPT`` with the same weights (a copy) and the same logits."""
    require(
        isinstance(hf, GPT2LMHeadModel),
        "hf",
        f"a transformers GPT2LMHeadModel, got {type(hf).__name__}",
    )
    model = GPT(_gpt_config_from_hf(hf.config))
    # Keep parameters only: transformers versions differ in which buffers they register
    # (e.g. the causal-mask "attn.bias"); the toy model builds its masks on the fly.
    params = {name for name, _ in hf.named_parameters()}
    state = {k: v for k, v in hf.state_dict().items() if k in params and k != "lm_head.weight"}
    _load_exactly(model, _convert_state(state))
    return model.to(next(hf.parameters()).device).train(hf.training)


# ---------------------------------------------------------------------------------------------
# 2. Per-token log-probs and entropies of any causal LM.
# ---------------------------------------------------------------------------------------------


def _logp_and_entropy_of_chunk(
    hidden: Tensor, targets: Tensor, head: nn.Module, temperature: float
) -> tuple[Tensor, Tensor]:
    """``[n, d]`` hidden states → ``[n]`` log-prob of ``targets`` and ``[n]`` entropy, float32."""
    logits = head(hidden).float() / temperature
    logp_all = F.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets[:, None]).squeeze(-1)
    entropy = (-(logp_all.exp() * logp_all).sum(dim=-1)).clamp(min=0.0)
    return logp, entropy


def _needs_full_forward(model: nn.Module) -> bool:
    """Models whose logits are more than ``lm_head(h)`` (soft-capping, a logit scale) must go
    through their own ``forward``; chunking the head would silently skip that step."""
    cfg = getattr(model, "config", None)
    return any(
        getattr(cfg, name, None) not in (None, 1.0)
        for name in ("final_logit_softcapping", "logit_scale", "logits_scaling")
    )


def _chunked_logp_and_entropy(
    hidden: Tensor, targets: Tensor, head: nn.Module, temperature: float, chunk_tokens: int
) -> tuple[Tensor, Tensor]:
    """``[B, T, d]`` hidden states → ``[B, T]`` log-probs of ``targets`` and entropies, the LM
    head applied to ``chunk_tokens`` positions at a time (each chunk checkpointed when
    gradients flow, so its ``[n, V]`` tensors are recomputed in backward, not kept)."""
    B, T = targets.shape
    hidden = hidden.reshape(B * T, -1)
    flat_targets = targets.reshape(B * T)
    logps, entropies = [], []
    for start in range(0, B * T, chunk_tokens):
        h, y = hidden[start : start + chunk_tokens], flat_targets[start : start + chunk_tokens]
        if torch.is_grad_enabled() and h.requires_grad:
            lp, ent = checkpoint(
                _logp_and_entropy_of_chunk, h, y, head, temperature, use_reentrant=False
            )
        else:
            lp, ent = _logp_and_entropy_of_chunk(h, y, head, temperature)
        logps.append(lp)
        entropies.append(ent)
    logp = torch.cat(logps).reshape(B, T) if logps else hidden.new_zeros(B, T).float()
    entropy = torch.cat(entropies).reshape(B, T) if entropies else logp.detach().clone()
    return logp, entropy


def token_logprobs_and_entropy(
    model: nn.Module,
    input_ids: Tensor,
    attention_mask: Tensor,
    response_start: int,
    *,
    temperature: float = 1.0,
    chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS,
    position_ids: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-token log-probs and full-vocabulary entropies of the response positions.

    ``input_ids`` is ``[prompt ‖ response]`` with the prompt left-padded to ``response_start``
    columns; the logits at column ``response_start − 1 + t`` predict response token ``t``.
    The distribution is ``softmax(logits / temperature)`` (the one sampling used), in float32
    whatever dtype the model runs in.

    Memory: the transformer body runs once; the LM head then runs on ``chunk_tokens``
    (row, position) pairs at a time, so at most ``chunk_tokens × V`` float32 logits (plus the
    same for log-probs and ``p·log p``) exist at once instead of ``B × T × V``: with
    SmolLM2's ``V = 49152`` and the default 1024, about 0.6 GB rather than ``B·T/1024`` times
    that. With gradients enabled each chunk is checkpointed (recomputed in the backward pass),
    so the bound holds for training too. ``chunk_tokens=None`` calls ``model(...)`` once and
    holds ``[B, T, V]``; models whose logits are not plain ``lm_head(h)`` (logit soft-capping
    or scaling in their config) always take that path.

    Args:
        model: any causal LM with ``get_output_embeddings()`` and a ``base_model`` body
            (Hugging Face ``*ForCausalLM``), or ``refimpl.model.GPT`` (full forward).
        input_ids, attention_mask: ``[B, L]``; padding inside the response may hold anything.
        response_start: ``P``, the number of prompt columns (≥ 1).
        temperature: sampling temperature (> 0).
        chunk_tokens: positions per LM-head chunk, or ``None`` for one full forward.
        position_ids: ``[B, L]``; default ``cumsum(attention_mask) − 1`` as ``generate`` does.

    Returns:
        ``(logp, entropy)``, float32 ``[B, L − P]``; 0 where ``attention_mask`` is 0.
    """
    _check_logprob_args(input_ids, attention_mask, response_start, temperature, chunk_tokens)
    L = input_ids.shape[1]
    P = response_start
    if position_ids is None:
        position_ids = positions_from_mask(attention_mask)
    real = attention_mask[:, P:].bool()
    targets = torch.where(real, input_ids[:, P:], torch.zeros_like(input_ids[:, P:]))
    # Padding may hold ids out of the vocabulary; attention never reads them, but the
    # embedding lookup does, so give it a valid id.
    input_ids = torch.where(attention_mask.bool(), input_ids, torch.zeros_like(input_ids))
    inputs = {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
    }
    head_and_body = _chunkable_head_and_body(model) if chunk_tokens is not None else None
    if head_and_body is None:
        logits = model(**inputs)
        logits = logits if isinstance(logits, Tensor) else logits.logits
        logits = logits[:, P - 1 : L - 1, :].float() / temperature
        logp_all = F.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, targets[..., None]).squeeze(-1)
        entropy = (-(logp_all.exp() * logp_all).sum(dim=-1)).clamp(min=0.0)
    else:
        head, body = head_and_body
        hidden = body(**inputs).last_hidden_state[:, P - 1 : L - 1, :]
        logp, entropy = _chunked_logp_and_entropy(hidden, targets, head, temperature, chunk_tokens)
    zero = torch.zeros((), dtype=torch.float32, device=logp.device)
    return torch.where(real, logp, zero), torch.where(real, entropy, zero)


def _check_logprob_args(
    input_ids: Tensor,
    attention_mask: Tensor,
    response_start: int,
    temperature: float,
    chunk_tokens: int | None,
) -> None:
    """The argument checks of :func:`token_logprobs_and_entropy` (``ValueError`` naming one)."""
    require(
        input_ids.dim() == 2 and attention_mask.shape == input_ids.shape,
        "attention_mask",
        f"the shape of input_ids {list(input_ids.shape)}, got {list(attention_mask.shape)}",
    )
    L = input_ids.shape[1]
    require(
        isinstance(response_start, int) and 1 <= response_start <= L,
        "response_start",
        f"an int in [1, {L}] (at least one prompt column), got {response_start!r}",
    )
    require(temperature > 0, "temperature", f"a value > 0, got {temperature!r}")
    require(
        chunk_tokens is None or chunk_tokens >= 1,
        "chunk_tokens",
        f"None or a positive int, got {chunk_tokens!r}",
    )


def _chunkable_head_and_body(model: nn.Module) -> tuple[nn.Module, nn.Module] | None:
    """``(lm_head, transformer body)`` of a model whose logits are plain ``lm_head(h)``, so
    the head can run on chunks of positions; ``None`` when it cannot (no separate body, as
    ``refimpl.model.GPT``, or soft-capped / scaled logits): then one full forward."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    body = getattr(model, "base_model", None)
    if head is None or body is None or body is model or _needs_full_forward(model):
        return None
    return head, body


def char_tokenizer(chars: object):
    """A ``transformers.PreTrainedTokenizerFast`` with the same ids as a character tokenizer.

    ``chars`` is duck-typed on ``toy_envs.CharTokenizer`` (``itos``, ``pad_id``, ``bos_id``,
    ``eos_id``), so the same ids reach TRL's ``processing_class`` with no download: one token
    per character, ``<bos>`` prepended to every encoded text (the toy prompts start with it),
    decoding concatenates characters and skips the special tokens.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    missing = [a for a in ("itos", "pad_id", "bos_id", "eos_id") if not hasattr(chars, a)]
    if missing:
        raise TypeError(
            f"chars: expected a character tokenizer (toy_envs.CharTokenizer: itos, pad_id, "
            f"bos_id, eos_id), got {type(chars).__name__} without {', '.join(missing)}"
        )
    itos: list[str] = list(chars.itos)  # type: ignore[attr-defined]
    pad, bos, eos = (
        itos[chars.pad_id],
        itos[chars.bos_id],  # type: ignore[attr-defined]
        itos[chars.eos_id],
    )  # type: ignore[attr-defined]
    vocab = {token: i for i, token in enumerate(itos)}
    core_tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token=pad))
    # Every character is its own pre-token (spaces included: the alphabet has one).
    core_tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core_tokenizer.decoder = decoders.Fuse()  # "1", "2" → "12", not "1 2"
    core_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A", pair=f"{bos} $A $B", special_tokens=[(bos, vocab[bos])]
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core_tokenizer, pad_token=pad, bos_token=bos, eos_token=eos, unk_token=pad
    )
    tokenizer.padding_side = "left"  # prompts are left-padded for generation
    return tokenizer


# ---------------------------------------------------------------------------------------------
# 3. A RolloutBatch from generate() output.
# ---------------------------------------------------------------------------------------------


def response_mask_from_ids(
    response_ids: Tensor, eos_id: int, pad_mask: Tensor | None = None
) -> Tensor:
    """``[B, T]`` float mask: 1 up to and including the first EOS, 0 after it.

    A row without EOS (it hit the token budget) is all ones, except where ``pad_mask`` is 0.
    """
    is_eos = response_ids == eos_id
    # Tokens strictly after the first EOS: a cumulative count of EOS seen *before* t.
    after_eos = (is_eos.long().cumsum(dim=1) - is_eos.long()) > 0
    mask = ~after_eos
    if pad_mask is not None:
        mask = mask & pad_mask.bool()
    return mask.float()


RewardFn = Callable[[list[list[int]]], Sequence[float]]


@torch.no_grad()
def rollout_batch(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    sequences: Tensor,
    rewards: Tensor | Sequence[float] | RewardFn,
    group_size: int,
    eos_id: int,
    *,
    temperature: float = 1.0,
    ref_model: nn.Module | None = None,
    chunk_tokens: int | None = DEFAULT_CHUNK_TOKENS,
) -> RolloutBatch:
    """Package ``model.generate`` output as a validated :class:`RolloutBatch`.

    ``logp_old`` and ``entropy_old`` are recomputed from ``model`` in one forward pass over
    the generated sequences (``generate`` does not keep full-vocabulary entropies); with the
    same weights and ``temperature`` that is exactly the rollout policy.

    Args:
        model: the policy that generated ``sequences`` (weights not yet updated).
        prompt_ids, prompt_mask: ``[B, P]``, left-padded, each prompt repeated ``G`` times in
            consecutive rows (``generate(..., num_return_sequences=G)`` does that).
        sequences: ``[B, P + T]``, what ``generate`` returned (prompt columns included).
        rewards: ``[B]`` rewards, or a function from the list of response token ids (EOS
            included, padding removed) to ``B`` rewards.
        group_size: ``G``.
        eos_id: the end-of-sequence id (the mask keeps it and drops what follows).
        temperature: the sampling temperature.
        ref_model: the frozen reference, for ``logp_ref`` (KL terms).
        chunk_tokens: see :func:`token_logprobs_and_entropy`.
    """
    _check_rollout_ids(model, prompt_ids, sequences)
    P = prompt_ids.shape[1]
    response_ids = sequences[:, P:]
    response_mask = response_mask_from_ids(response_ids, eos_id)
    attention_mask = torch.cat([prompt_mask.long(), response_mask.long()], dim=1)
    logp_old, entropy_old = token_logprobs_and_entropy(
        model, sequences, attention_mask, P, temperature=temperature, chunk_tokens=chunk_tokens
    )
    logp_ref = None
    if ref_model is not None:
        logp_ref, _ = token_logprobs_and_entropy(
            ref_model,
            sequences,
            attention_mask,
            P,
            temperature=temperature,
            chunk_tokens=chunk_tokens,
        )
    if callable(rewards):
        lengths = response_mask.sum(dim=1).long().tolist()
        responses = [row[:n].tolist() for row, n in zip(response_ids, lengths)]
        rewards = rewards(responses)
    rewards = torch.as_tensor(rewards, dtype=torch.float32, device=response_ids.device)
    return RolloutBatch(
        response_ids=response_ids,
        response_mask=response_mask,
        rewards=rewards,
        logp_old=logp_old,
        entropy_old=entropy_old,
        group_size=group_size,
        logp_ref=logp_ref,
    )


def _check_rollout_ids(model: nn.Module, prompt_ids: Tensor, sequences: Tensor) -> None:
    """``rollout_batch``'s ids: 2-D integer tensors, ``sequences`` the prompts followed by
    generated tokens, every id one of the model's vocabulary (``ValueError`` naming one)."""
    for name, ids in (("prompt_ids", prompt_ids), ("sequences", sequences)):
        require(
            isinstance(ids, Tensor) and ids.dim() == 2 and _is_integer(ids),
            name,
            f"a 2-D tensor of integer token ids, got {_described(ids)}",
        )
    B, P = prompt_ids.shape
    require(
        sequences.shape[0] == B and sequences.shape[1] > P,
        "sequences",
        f"a [{B}, > {P}] tensor of prompt + generated tokens, got {list(sequences.shape)}",
    )
    require(
        bool((sequences[:, :P] == prompt_ids).all()),
        "sequences",
        "to start with prompt_ids (generate returns prompt columns first)",
    )
    vocab = _vocab_size(model)
    if vocab is not None:
        require(
            bool(((sequences >= 0) & (sequences < vocab)).all()),
            "sequences",
            f"token ids in [0, {vocab}) (the model's vocabulary), got ids from "
            f"{int(sequences.min())} to {int(sequences.max())}",
        )


def _is_integer(x: Tensor) -> bool:
    return not (x.is_floating_point() or x.is_complex() or x.dtype == torch.bool)


def _described(x: object) -> str:
    if isinstance(x, Tensor):
        return f"a {x.dim()}-D tensor of {x.dtype}"
    return type(x).__name__


def _vocab_size(model: nn.Module) -> int | None:
    """The number of token ids ``model`` embeds (its config's, else its input embedding's),
    or None when it says neither."""
    size = getattr(getattr(model, "config", None), "vocab_size", None)
    if isinstance(size, int):
        return size
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    return getattr(embeddings, "num_embeddings", None)


# ---------------------------------------------------------------------------------------------
# 4. Micro-batches for engines that split a rollout (TRL, verl).
# ---------------------------------------------------------------------------------------------


def refuse_values_needed(cfg: object, argument: str, path: str) -> None:
    """Refuse (``ValueError`` naming ``argument``) a ``Config`` whose ``values_needed()`` asks
    for Monte-Carlo values of π_old (VinePPO): the scale-up paths sample no continuations of
    prefixes, and made-up values would train another algorithm under its name. Every path
    calls this before any work (``docs/scaleup.md``, "Algorithms that ask for values")."""
    request = cfg.values_needed()
    if request is None:
        return
    name = type(cfg).__module__.rsplit(".", 1)[-1]
    require(
        False,
        argument,
        f"an algorithm whose advantages need no Monte-Carlo values: {name}.Config."
        f"values_needed() asks for {request} (continuations of π_old), which the {path} path "
        "does not sample (train it with the toy loop, `refimpl train`; docs/scaleup.md, "
        "'Algorithms that ask for values', says what a port needs)",
    )


def normaliser_count(mask: Tensor, mode: str) -> Tensor:
    """The denominator of ``core.aggregate`` in ``mode``: response tokens for ``token-mean``,
    non-empty completions for the sequence modes. Every mode is (a sum over the batch) / (this
    count), so a micro-batch loss times ``count_local / count_global`` is exactly its share of
    the whole-batch loss; that is how both engines accumulate gradients."""
    if mode == "token-mean":
        return mask.sum()
    return (mask.sum(dim=1) > 0).sum().to(mask.dtype)


def loss_batch(
    response_mask: Tensor,
    logp_old: Tensor,
    *,
    response_ids: Tensor | None = None,
    entropy_old: Tensor | None = None,
    logp_ref: Tensor | None = None,
    extra: dict[str, Tensor] | None = None,
) -> tuple[RolloutBatch, dict[str, Tensor]]:
    """A ``RolloutBatch`` for calling an algorithm's ``loss`` on a micro-batch.

    Engines shuffle and slice a rollout, so a micro-batch holds no whole groups. No ``loss``
    reads the group structure except GPG's ``α`` (which the engine paths fold into the
    advantages beforehand), so the rows form one pseudo-group with zero rewards. A single row
    gets an all-padding partner (``group_size ≥ 2``), which every aggregation mode skips;
    ``extra`` tensors (log-probs, advantages, ...) are padded the same way and returned.
    """
    tensors = {"mask": response_mask.float(), "logp_old": logp_old.float()}
    tensors["ids"] = (
        response_ids
        if response_ids is not None
        else torch.zeros_like(response_mask, dtype=torch.long)
    )
    tensors["entropy_old"] = (
        entropy_old.float() if entropy_old is not None else torch.zeros_like(tensors["mask"])
    )
    if logp_ref is not None:
        tensors["logp_ref"] = logp_ref.float()
    for key, value in (extra or {}).items():
        tensors[f"extra.{key}"] = value
    if response_mask.shape[0] == 1:
        tensors = {k: torch.cat([v, torch.zeros_like(v)]) for k, v in tensors.items()}
    n = tensors["mask"].shape[0]
    batch = RolloutBatch(
        response_ids=tensors["ids"],
        response_mask=tensors["mask"],
        rewards=torch.zeros(n, device=response_mask.device),
        logp_old=tensors["logp_old"],
        entropy_old=tensors["entropy_old"].detach(),
        group_size=n,
        logp_ref=tensors.get("logp_ref"),
    )
    return batch, {k[len("extra.") :]: v for k, v in tensors.items() if k.startswith("extra.")}
