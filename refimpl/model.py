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


class SharedPrefixKVCache:
    """The KV cache of groups of rows that continue one shared prefix, one token at a time.

    Group sampling continues every prompt ``G`` times (the credit oracle every prefix ``K``
    times). The list cache above would hold the prompt's keys and values once *per row*, ``G``
    identical copies, and each decoded token would read all of them: a matrix-vector product per
    row, bound by memory, not arithmetic. Here the prefix is stored **once per group** and each
    row's generated tokens in a preallocated buffer (written in place, never concatenated), and
    attention splits its keys in two::

        scores = [ q·k_prefix / √d   |   q·k_generated / √d ]     one softmax over both parts
        out    = p_prefix · v_prefix  +  p_generated · v_generated

    The ``G`` queries of a group meet their one prefix copy as a matrix product ``[G, d] × [d, P]``:
    the same arithmetic as ``G`` separate rows, with ``G``-fold less memory read. (This is the
    shared-prefix attention of Hydragen, Juravsky et al., arXiv 2402.05099.) Padding on the left
    of a prompt is removed with a ``−inf`` bias on its keys; generated keys are all visible (a
    row that has finished keeps being fed padding, whose outputs are discarded, as with the list
    cache). ``tests/test_model.py`` checks that the logits equal the list cache's.

    Rows ``g·G … g·G + G − 1`` belong to prefix ``g`` (groups in consecutive rows). Built from
    the prefill of the ``N`` prefixes (not repeated); ``GPT.forward`` extends it in place.
    """

    def __init__(
        self, prefix: KVCache, prefix_mask: Tensor, group_size: int, max_new_tokens: int
    ) -> None:
        N, H, P, D = prefix[0][0].shape
        if tuple(prefix_mask.shape) != (N, P):
            raise ValueError(
                f"prefix_mask: expected shape [{N}, {P}], got {list(prefix_mask.shape)}"
            )
        if not (isinstance(group_size, int) and group_size >= 1):
            raise ValueError(f"group_size: expected a positive int, got {group_size!r}")
        if not (isinstance(max_new_tokens, int) and max_new_tokens >= 1):
            raise ValueError(f"max_new_tokens: expected a positive int, got {max_new_tokens!r}")
        self.prefix = prefix  # per layer (k, v), each [N, H, P, d]: one copy per group
        self.group_size = group_size
        self.length = 0  # generated positions cached so far
        # The rows the next call runs (indices, ascending), or None for every row: a sampler
        # stops running the rows that have finished. The others' slots are left as they are.
        self.rows: Tensor | None = None
        real = prefix_mask.bool()[:, None, None, :]  # [N, 1, 1, P]
        k0 = prefix[0][0]
        self.prefix_bias = torch.zeros(real.shape, dtype=k0.dtype, device=k0.device).masked_fill(
            ~real, float("-inf")
        )
        # The position of a row's first generated token: its prompt's real-token count.
        self.first_position = prefix_mask.long().sum(dim=1).repeat_interleave(group_size)
        B = N * group_size
        self.keys = [k.new_empty(B, H, max_new_tokens, D) for k, _ in prefix]
        self.values = [v.new_empty(B, H, max_new_tokens, D) for _, v in prefix]

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Attention of the newest token's ``q`` ``[B, H, 1, d]`` of ``layer`` over its prefix and
        the tokens generated so far (``k``, ``v`` of the newest token are cached first). With
        ``rows`` set, ``q``, ``k``, ``v`` and the result hold only those rows."""
        G = self.group_size
        B, H, _, D = self.keys[layer].shape
        N = B // G
        end = self.length + 1
        if self.rows is not None:  # lay the running rows out over every row (0 elsewhere)
            rows = self.rows
            self.keys[layer][rows, :, self.length] = k[:, :, 0]
            self.values[layer][rows, :, self.length] = v[:, :, 0]
            q = q.new_zeros(B, H, 1, D).index_copy_(0, rows, q)
            return self._attend_all(layer, q, N, end)[rows]
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self._attend_all(layer, q, N, end)

    def _attend_all(self, layer: int, q: Tensor, N: int, end: int) -> Tensor:
        """Every row's attention (``q`` ``[B, H, 1, d]``) over its prefix and ``end`` generated
        positions: the two blocks of keys, one softmax."""
        B, H, _, D = q.shape
        G = self.group_size
        k_gen, v_gen = self.keys[layer][:, :, :end], self.values[layer][:, :, :end]
        k_pre, v_pre = self.prefix[layer]
        P = k_pre.shape[2]
        q = q * (1.0 / math.sqrt(D))
        # The G queries of group g as the rows of one matrix: [N, H, G, d].
        q_group = q.view(N, G, H, D).transpose(1, 2)
        scores_pre = q_group @ k_pre.transpose(-1, -2) + self.prefix_bias  # [N, H, G, P]
        scores_gen = (q @ k_gen.transpose(-1, -2)).view(N, G, H, end).transpose(1, 2)
        weights = torch.cat([scores_pre, scores_gen], dim=-1).softmax(dim=-1)  # [N, H, G, P+t]
        out = weights[..., :P] @ v_pre  # [N, H, G, d]
        w_gen = weights[..., P:].transpose(1, 2).reshape(B, H, 1, end)
        out = out.transpose(1, 2).reshape(B, H, 1, D) + w_gen @ v_gen
        return out


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
        if isinstance(past, tuple) and isinstance(past[0], SharedPrefixKVCache):
            y = past[0].attend(past[1], q, k, v)  # (cache, layer): see SharedPrefixKVCache
            y = y.transpose(1, 2).reshape(B, L, C)
            return self.resid_dropout(self.c_proj(y)), (k, v)
        if past is not None:  # incremental decoding: prepend the keys/values already computed
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
        if isinstance(past_key_values, SharedPrefixKVCache):
            return self._forward_shared_prefix(input_ids, past_key_values, use_cache)
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
        self._check_positions(position_ids)

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
            past = None if past_key_values is None else past_key_values[i]
            x, kv = block(x, allowed, past)
            present.append(kv)
        logits = self.lm_head(self.transformer.ln_f(x))
        return GPTOutput(logits, present) if use_cache else logits

    def _check_positions(self, position_ids: Tensor) -> None:
        if int(position_ids.max()) >= self.config.block_size:
            raise ValueError(
                f"position_ids: expected positions < block_size={self.config.block_size}, "
                f"got {int(position_ids.max())}"
            )

    def _forward_shared_prefix(
        self, input_ids: Tensor, cache: SharedPrefixKVCache, use_cache: bool
    ) -> Tensor | GPTOutput:
        """One decoding step over a ``SharedPrefixKVCache``: the newest token of every row,
        at the position after its prompt and the tokens it generated so far (no mask to build:
        the cache knows which prefix keys are padding)."""
        first_position = cache.first_position
        if cache.rows is not None:
            first_position = first_position[cache.rows]
        rows = first_position.shape[0]
        if tuple(input_ids.shape) != (rows, 1):
            raise ValueError(
                f"input_ids: expected one new token for each of the {rows} rows of the shared-"
                f"prefix cache, shape [{rows}, 1], got {list(input_ids.shape)}"
            )
        if cache.length >= cache.keys[0].shape[2]:
            raise ValueError(
                f"max_new_tokens: the shared-prefix cache is full ({cache.length} tokens)"
            )
        position_ids = (first_position + cache.length)[:, None]  # [B, 1]
        self._check_positions(position_ids)
        x = self.transformer.wte(input_ids) + self.transformer.wpe(position_ids)
        x = self.transformer.drop(x)
        for i, block in enumerate(self.transformer.h):
            x, _ = block(x, None, (cache, i))  # type: ignore[arg-type]
        cache.length += input_ids.shape[1]
        logits = self.lm_head(self.transformer.ln_f(x))
        return GPTOutput(logits, cache) if use_cache else logits  # type: ignore[arg-type]
