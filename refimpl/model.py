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
covers past *and* new positions ``[B, S + L]``. That is the plain cache, the one to read first.

Sampling uses a second one, ``SharedPrefixKVCache`` (at the end of this file): ``G`` completions of
one prompt share its keys and values, so it stores them once per group and decodes the group's
``G`` rows against them together. Same logits, several times faster at thousands of rows.
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
            past_key_values: the cache returned by a previous call, or ``None``; or a
                ``SharedPrefixKVCache`` (one new token per row, which knows every row's
                position and its prompt's padding: ``attention_mask`` and ``position_ids``
                are not used).
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
        position_ids = cache.positions()  # [R, 1]
        rows = position_ids.shape[0]
        if tuple(input_ids.shape) != (rows, 1):
            raise ValueError(
                f"input_ids: expected one new token for each of the {rows} rows of the shared-"
                f"prefix cache, shape [{rows}, 1], got {list(input_ids.shape)}"
            )
        self._check_positions(position_ids)
        x = self.transformer.wte(input_ids) + self.transformer.wpe(position_ids)
        x = self.transformer.drop(x)
        for i, block in enumerate(self.transformer.h):
            x, _ = block(x, None, (cache, i))  # type: ignore[arg-type]
        cache.length += input_ids.shape[1]
        logits = self.lm_head(self.transformer.ln_f(x))
        return GPTOutput(logits, cache) if use_cache else logits  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
# The KV cache of group sampling.
# ---------------------------------------------------------------------------------------------


class SharedPrefixKVCache:
    """The KV cache of group sampling: ``N`` prefixes, each continued by ``G`` rows, one token
    at a time, each prefix's keys and values stored once for its ``G`` rows.

    Group sampling continues every prompt ``G`` times (the credit oracle every prefix ``K`` times).
    The plain list cache above holds the prompt's keys and values once *per row*:
    ``G`` identical copies, and every decoded token of every row reads its own copy, a
    matrix-vector product per row, bound by memory rather than arithmetic. This cache stores the
    prefix **once per group**, and each row's generated keys and values in a preallocated buffer
    (written in place, never concatenated). Attention splits the keys in two blocks::

        scores = [ q·k_prefix / √d   |   q·k_generated / √d ]     one softmax over both blocks
        out    = p_prefix · v_prefix  +  p_generated · v_generated

    The ``G`` queries of a group meet their one prefix copy as a matrix product ``[G, d] × [d, P]``:
    the same arithmetic as ``G`` separate rows, with ``G``-fold less memory read. This is the
    shared-prefix attention of Hydragen (Juravsky et al., arXiv 2402.05099). Padding on the left
    of a prompt is removed by a ``−inf`` bias on its keys; a row's generated keys are all visible
    to it (a causal mask within one new token is empty).

    Finished rows
    -------------
    A sampler stops running a row once it has emitted ``<eos>`` (``rows``: the rows that the next
    call runs). Its generated keys then stay in the buffer, read by nobody; when fewer than half
    of the buffered rows are still running, the buffers are compacted to those rows, so the
    generated block costs what the running rows need (the prefix block, a matrix product, is
    computed for every slot of a group; it is cheap next to the per-row block).

    ``tests/test_model.py`` checks the logits against the list cache's; ``tests/test_sampling.py``
    checks a sampler's records against a fresh forward pass at oracle-sized batches.

    Rows ``g·G … g·G + G − 1`` continue prefix ``g`` (groups in consecutive rows). Built from
    the prefill of the ``N`` prefixes (not repeated); ``GPT.forward`` extends it in place, one
    new token for each of the ``rows`` (all ``N·G`` rows until a sampler sets ``rows``).
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
        self.batch_size = B = N * group_size
        self.max_new_tokens = max_new_tokens
        self.length = 0  # generated positions cached so far
        real = prefix_mask.bool()[:, None, None, :]  # [N, 1, 1, P]
        k0 = prefix[0][0]
        self.prefix_bias = torch.zeros(real.shape, dtype=k0.dtype, device=k0.device).masked_fill(
            ~real, float("-inf")
        )
        # The position of a row's first generated token: its prompt's real-token count.
        self.first_position = prefix_mask.long().sum(dim=1).repeat_interleave(group_size)
        # Generated keys and values of the buffered rows: [rows buffered, H, max_new, d].
        self.keys = [k.new_empty(B, H, max_new_tokens, D) for k, _ in prefix]
        self.values = [v.new_empty(B, H, max_new_tokens, D) for _, v in prefix]
        self.rows: Tensor | None = None  # the rows the next call runs (ascending); None: all
        self.buffered: Tensor | None = None  # the row each buffer slot holds; None: slot = row
        self._slot = torch.arange(B, device=k0.device)  # row -> its buffer slot

    def run_rows(self, rows: Tensor | None) -> None:
        """The rows the next calls run (ascending indices), or ``None`` for every row; compacts
        the generated buffers to them when they are fewer than half the buffered rows. Rows
        only ever stop: each call's rows are a subset of the last call's (a row that stopped
        has no keys for the positions it missed)."""
        self.rows = rows
        buffered = self.batch_size if self.buffered is None else len(self.buffered)
        if rows is None or 2 * len(rows) >= buffered:
            return
        slots = self._slot[rows]
        self.keys = [k[slots] for k in self.keys]
        self.values = [v[slots] for v in self.values]
        self.buffered = rows
        self._slot = torch.full_like(self._slot, -1)
        self._slot[rows] = torch.arange(len(rows), device=rows.device)

    def positions(self) -> Tensor:
        """``[R, 1]`` position of the next token of each row that the next call runs."""
        first = self.first_position if self.rows is None else self.first_position[self.rows]
        return (first + self.length)[:, None]

    def attend(self, layer: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Attention of the newest token's ``q`` ``[R, H, 1, d]`` (one per running row) of
        ``layer`` over its prefix and the tokens generated so far; ``k``, ``v`` of the newest
        token are cached first."""
        if self.length >= self.max_new_tokens:
            raise ValueError(f"max_new_tokens: the cache is full ({self.length} tokens)")
        end = self.length + 1
        q = q * (1.0 / math.sqrt(q.shape[-1]))
        if self.rows is None:  # every row runs and sits in its own slot
            self.keys[layer][:, :, self.length] = k[:, :, 0]
            self.values[layer][:, :, self.length] = v[:, :, 0]
            scores_pre = self._prefix_scores(layer, q)
            scores_gen = (q @ self.keys[layer][:, :, :end].transpose(-1, -2))[:, :, 0]
            weights = torch.cat([scores_pre, scores_gen], dim=-1).softmax(dim=-1)
            P = scores_pre.shape[-1]
            out = self._prefix_out(layer, weights[..., :P])
            return out + weights[..., None, P:] @ self.values[layer][:, :, :end]
        slots = self._slot[self.rows]
        self.keys[layer][slots, :, self.length] = k[:, :, 0]
        self.values[layer][slots, :, self.length] = v[:, :, 0]
        # The prefix block over every row's slot of its group (a matrix product per group;
        # rows that do not run get q = 0), then the running rows' own generated block.
        scores_pre = self._prefix_scores(layer, self._every_row(q))[self.rows]  # [R, H, P]
        k_gen, v_gen = self.keys[layer][slots, :, :end], self.values[layer][slots, :, :end]
        scores_gen = (q @ k_gen.transpose(-1, -2))[:, :, 0]  # [R, H, t]
        weights = torch.cat([scores_pre, scores_gen], dim=-1).softmax(dim=-1)
        P = scores_pre.shape[-1]
        out = self._prefix_out(layer, self._every_row(weights[..., :P]))[self.rows]
        return out + weights[..., None, P:] @ v_gen

    def _every_row(self, x: Tensor) -> Tensor:
        """The running rows' ``x`` laid out over every row, 0 on the others."""
        return x.new_zeros(self.batch_size, *x.shape[1:]).index_copy_(0, self.rows, x)

    def _prefix_scores(self, layer: int, q: Tensor) -> Tensor:
        """``[B, H, P]`` scores of every row's ``q`` ``[B, H, 1, d]`` against its prefix: the
        ``G`` queries of group ``g`` as the rows of one matrix ``[G, d]``."""
        k_pre = self.prefix[layer][0]
        N, H, P, D = k_pre.shape
        q_group = q.view(N, self.group_size, H, D).transpose(1, 2)  # [N, H, G, d]
        scores = q_group @ k_pre.transpose(-1, -2) + self.prefix_bias  # [N, H, G, P]
        return scores.transpose(1, 2).reshape(self.batch_size, H, P)

    def _prefix_out(self, layer: int, weights: Tensor) -> Tensor:
        """``[B, H, 1, d]``: every row's prefix weights ``[B, H, P]`` times its prefix's
        values, group by group."""
        v_pre = self.prefix[layer][1]
        N, H, P, D = v_pre.shape
        w_group = weights.view(N, self.group_size, H, P).transpose(1, 2)  # [N, H, G, P]
        out = w_group @ v_pre  # [N, H, G, d]
        return out.transpose(1, 2).reshape(self.batch_size, H, 1, D)
