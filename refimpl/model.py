"""A tiny GPT with the GPT-2 architecture, small enough to read in one sitting.

The policy every notebook trains. It follows nanoGPT closely, with two additions that RL
needs and nanoGPT leaves out: **left-padded batches** (prompts of different lengths sampled
together) and a **KV cache** (sampling ``G`` completions per prompt one token at a time).

The module layout and parameter names are GPT-2's, so a state dict maps one-to-one onto
``transformers.GPT2LMHeadModel``::

    transformer.wte                 token embedding           [V, d]
    transformer.wpe                 position embedding        [block_size, d]
    transformer.h.{i}.ln_1          pre-attention LayerNorm
    transformer.h.{i}.attn.c_attn   fused q, k, v projection  d -> 3d   (in that order)
    transformer.h.{i}.attn.c_proj   attention output          d -> d
    transformer.h.{i}.ln_2          pre-MLP LayerNorm
    transformer.h.{i}.mlp.c_fc      MLP up                    d -> 4d, then GELU (tanh)
    transformer.h.{i}.mlp.c_proj    MLP down                  4d -> d
    transformer.ln_f                final LayerNorm
    lm_head                         tied to transformer.wte (no bias)

The one difference is storage: we use ``nn.Linear`` (weight ``[out, in]``) where Hugging Face
uses its ``Conv1D`` (weight ``[in, out]``); a converter transposes those four matrices.

Padding and positions
---------------------
A batch is left-padded: ``attention_mask[b, j] = 0`` on padding. Two things keep padding
from leaking into real tokens:

* positions come from the mask, ``cumsum(mask) − 1`` clamped at 0, as Hugging Face's
  ``generate`` does, so every prompt's first real token sits at position 0 however much
  padding precedes it;
* padded keys are removed from attention with an explicit boolean mask.

Hence the logits of real tokens do not depend on what the padding holds, nor on how much of
it there is (``tests/test_model.py`` checks both).

KV cache
--------
``past_key_values`` is a list with one ``(k, v)`` pair per layer, each ``[B, n_head, S, d_head]``
for the ``S`` positions seen so far. A call with ``use_cache=True`` returns the cache extended
by the new positions; the next call feeds only the new token(s) and an ``attention_mask`` that
covers past *and* new positions ``[B, S + L]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: Per-layer ``(key, value)`` tensors, each ``[B, n_head, S, d_head]``.
KVCache = list[tuple[Tensor, Tensor]]


class StaticKVCache:
    """A KV cache preallocated for ``max_len`` positions, written in place.

    The list cache above grows by ``torch.cat``, which copies every cached key and value at
    every decoded token: for thousands of rows of ~100 positions (the credit oracle's
    rollouts) that copying, not the matmuls, is where decoding spends its time. Here each new
    key and value is written into its slot and attention reads a view of the filled part:
    the same keys, values and mask, so the same logits (``tests/test_model.py``). Built from
    a filled list cache (a prefill); ``forward`` extends it in place and returns it."""

    def __init__(self, cache: KVCache, max_len: int) -> None:
        B, H, S, D = cache[0][0].shape
        if max_len < S:
            raise ValueError(f"max_len: expected at least the {S} cached positions, got {max_len}")
        self.length = S
        self.keys = [k.new_empty(B, H, max_len, D) for k, _ in cache]
        self.values = [v.new_empty(B, H, max_len, D) for _, v in cache]
        for buf_k, buf_v, (k, v) in zip(self.keys, self.values, cache):
            buf_k[:, :, :S] = k
            buf_v[:, :, :S] = v

    def append(self, layer: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Write the new ``k``, ``v`` ``[B, H, L, d]`` of ``layer`` after the cached positions;
        return every position's keys and values so far (views)."""
        end = self.length + k.shape[2]
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]


@dataclass
class GPTConfig:
    """Hyper-parameters of the model (defaults: the 2-layer, d = 128 policy of the notebooks)."""

    vocab_size: int
    block_size: int = 64  # longest sequence (prompt + response), = GPT-2's n_positions
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 128
    dropout: float = 0.0  # embedding, attention and residual dropout alike
    layer_norm_eps: float = 1e-5  # GPT-2's layer_norm_epsilon

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"GPTConfig.{name}: expected a positive int, got {value!r}")
        if self.n_embd % self.n_head != 0:
            raise ValueError(
                f"GPTConfig.n_embd: expected a multiple of n_head={self.n_head}, got {self.n_embd}"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"GPTConfig.dropout: expected a value in [0, 1), got {self.dropout}")


class GPTOutput(NamedTuple):
    """What ``GPT.forward(..., use_cache=True)`` returns."""

    logits: Tensor  # [B, L, V]
    past_key_values: KVCache  # the cache extended by the L new positions


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention; the caller supplies the mask (causal ∧ not padding)."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.dropout = config.dropout
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(
        self, x: Tensor, allowed: Tensor, past: tuple[Tensor, Tensor] | None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """``x`` [B, L, d]; ``allowed`` bool [B, 1, L, S_past + L], True where a query may look."""
        B, L, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        # [B, L, C] -> [B, n_head, L, d_head], the head split GPT-2 uses.
        q, k, v = (t.view(B, L, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if isinstance(past, tuple) and isinstance(past[0], StaticKVCache):
            k, v = past[0].append(past[1], k, v)  # (cache, layer): written in place
        elif past is not None:  # incremental decoding: prepend the keys/values already computed
            k = torch.cat((past[0], k), dim=2)
            v = torch.cat((past[1], v), dim=2)
        y = F.scaled_dot_product_attention(  # softmax(q kᵀ / √d_head + mask) v
            q, k, v, attn_mask=allowed, dropout_p=self.dropout if self.training else 0.0
        )
        y = y.transpose(1, 2).reshape(B, L, C)  # re-assemble the heads
        return self.resid_dropout(self.c_proj(y)), (k, v)


class MLP(nn.Module):
    """Position-wise feed-forward network, ``d -> 4d -> d``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd)
        self.gelu = nn.GELU(approximate="tanh")  # GPT-2's "gelu_new"
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Pre-LayerNorm transformer block: ``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))``."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps)
        self.mlp = MLP(config)

    def forward(
        self, x: Tensor, allowed: Tensor, past: tuple[Tensor, Tensor] | None
    ) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        attended, present = self.attn(self.ln_1(x), allowed, past)
        x = x + attended
        x = x + self.mlp(self.ln_2(x))
        return x, present


def positions_from_mask(attention_mask: Tensor) -> Tensor:
    """Position of each token counting real tokens only: ``cumsum(mask) − 1``, clamped at 0.

    ``[0, 0, 1, 1, 1] -> [0, 0, 0, 1, 2]``: a left-padded prompt starts at position 0, as if
    it were alone. Padding gets position 0 (its value never reaches a real token).
    """
    return (attention_mask.long().cumsum(dim=-1) - 1).clamp(min=0)


class GPT(nn.Module):
    """GPT-2 language model with a tied output head. See the module docstring."""

    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList(Block(config) for _ in range(config.n_layer)),
                ln_f=nn.LayerNorm(config.n_embd, eps=config.layer_norm_eps),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # Weight tying (GPT-2, Press & Wolf 2017): the output projection *is* the token
        # embedding, so one [V, d] matrix both reads and writes tokens.
        self.lm_head.weight = self.transformer.wte.weight
        self.apply(self._init_weights)
        # GPT-2 scales the init of the projections that write into the residual stream by
        # 1/√(2·n_layer): each block adds two such terms, and this keeps the variance of the
        # residual stream from growing with depth.
        for name, param in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(param, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """GPT-2 init: weights N(0, 0.02²), biases 0; LayerNorm keeps (γ=1, β=0)."""
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def num_params(self) -> int:
        """Number of parameters, the tied embedding/head matrix counted once."""
        return sum(p.numel() for p in self.parameters())  # parameters() skips the tied duplicate

    def forward(
        self,
        input_ids: Tensor,
        attention_mask: Tensor | None = None,
        position_ids: Tensor | None = None,
        past_key_values: KVCache | None = None,
        use_cache: bool = False,
    ) -> Tensor | GPTOutput:
        """Next-token logits for every position.

        Args:
            input_ids: ``[B, L]`` token ids (the new tokens only when a cache is passed).
            attention_mask: ``[B, S_past + L]``, 1 on real tokens and 0 on padding, covering
                the cached positions too; ``None`` means no padding.
            position_ids: ``[B, L]``; by default derived from ``attention_mask`` (see
                ``positions_from_mask``). Hugging Face's ``GPT2Model.forward`` does *not*
                derive them from the mask, so pass them explicitly when comparing the two.
            past_key_values: the cache returned by a previous call, or ``None``.
            use_cache: return the extended cache alongside the logits.

        Returns:
            ``logits`` ``[B, L, V]`` (in the autocast dtype under autocast), or
            ``GPTOutput(logits, past_key_values)`` when ``use_cache`` is true.
        """
        if input_ids.dim() != 2:
            raise ValueError(
                f"input_ids: expected a [B, L] tensor, got shape {list(input_ids.shape)}"
            )
        B, L = input_ids.shape
        static = isinstance(past_key_values, StaticKVCache)
        if static:
            past_len = past_key_values.length
        else:
            past_len = 0 if past_key_values is None else past_key_values[0][0].shape[2]
        S = past_len + L  # keys visible to the new queries
        device = input_ids.device
        if attention_mask is None:
            attention_mask = torch.ones(B, S, dtype=torch.long, device=device)
        if tuple(attention_mask.shape) != (B, S):
            raise ValueError(
                f"attention_mask: expected shape [{B}, {S}] (cached + new positions), "
                f"got {list(attention_mask.shape)}"
            )
        if position_ids is None:
            position_ids = positions_from_mask(attention_mask)[:, past_len:]
        if int(position_ids.max()) >= self.config.block_size:
            raise ValueError(
                f"position_ids: expected positions < block_size={self.config.block_size}, "
                f"got {int(position_ids.max())}"
            )

        # Who may attend to whom: key j is visible to the query at absolute position i when
        # j ≤ i (causal) and key j is a real token. A query always sees itself as well: a
        # padding query would otherwise have no visible key, and a softmax over nothing is
        # NaN; the exception changes nothing for real tokens, which never attend to padding.
        query_pos = torch.arange(past_len, S, device=device)[:, None]  # [L, 1]
        key_pos = torch.arange(S, device=device)[None, :]  # [1, S]
        key_is_real = attention_mask.bool()[:, None, None, :]  # [B, 1, 1, S]
        allowed = (key_pos <= query_pos) & (key_is_real | (key_pos == query_pos))  # [B,1,L,S]

        x = self.transformer.wte(input_ids) + self.transformer.wpe(position_ids)
        x = self.transformer.drop(x)
        present: KVCache = []
        for i, block in enumerate(self.transformer.h):
            if static:
                past = (past_key_values, i)
            else:
                past = None if past_key_values is None else past_key_values[i]
            x, kv = block(x, allowed, past)
            present.append(kv)
        logits = self.lm_head(self.transformer.ln_f(x))
        if static:
            past_key_values.length += L
            return GPTOutput(logits, past_key_values) if use_cache else logits  # type: ignore[arg-type]
        return GPTOutput(logits, present) if use_cache else logits
