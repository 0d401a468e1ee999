"""Tests of ``refimpl.model``: GPT-2 architecture, padding, positions and the KV cache."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from refimpl.model import GPT, GPTConfig, GPTOutput, SharedPrefixKVCache, positions_from_mask

VOCAB = 20
PAD = 19


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=VOCAB, block_size=64)).eval()


def left_padded(rows: list[list[int]], pad: int = PAD) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    return ids, mask


def test_param_count_matches_gpt2_formula() -> None:
    """The parameter count is GPT-2's, derived from the architecture (tied head counted once)."""
    V, block, L, d = VOCAB, 64, 2, 128
    layer_norm = 2 * d  # γ and β
    attention = (d * 3 * d + 3 * d) + (d * d + d)  # c_attn + c_proj, with biases
    mlp = (d * 4 * d + 4 * d) + (4 * d * d + d)  # c_fc + c_proj, with biases
    block_params = 2 * layer_norm + attention + mlp
    expected = V * d + block * d + L * block_params + layer_norm  # wte + wpe + blocks + ln_f
    model = GPT(GPTConfig(vocab_size=V, block_size=block, n_layer=L, n_head=4, n_embd=d))
    assert model.num_params() == expected
    assert 400_000 < expected < 410_000  # the 408k model of docs/benchmarks.md


def test_head_is_tied_to_token_embedding(model: GPT) -> None:
    assert model.lm_head.weight is model.transformer.wte.weight
    assert model.lm_head.bias is None
    # The head is linear in the embedding: logits of a hidden state h are wte @ h.
    h = torch.randn(3, model.config.n_embd)
    assert torch.allclose(model.lm_head(h), h @ model.transformer.wte.weight.T)


def test_state_dict_names_are_gpt2s(model: GPT) -> None:
    """Parameter names map one-to-one onto transformers.GPT2LMHeadModel."""
    names = set(model.state_dict())
    expected = {"transformer.wte.weight", "transformer.wpe.weight", "lm_head.weight"}
    expected |= {f"transformer.ln_f.{p}" for p in ("weight", "bias")}
    for i in range(model.config.n_layer):
        for module in ("ln_1", "ln_2", "attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj"):
            expected |= {f"transformer.h.{i}.{module}.{p}" for p in ("weight", "bias")}
    assert names == expected
    block = model.transformer.h[0]
    d = model.config.n_embd
    assert block.attn.c_attn.weight.shape == (3 * d, d)  # nn.Linear: [out, in]
    assert block.mlp.c_fc.weight.shape == (4 * d, d)


def test_gpt2_init() -> None:
    """N(0, 0.02²) weights, zero biases, residual projections scaled by 1/√(2·n_layer)."""
    torch.manual_seed(1)
    model = GPT(GPTConfig(vocab_size=VOCAB, n_layer=4))
    block = model.transformer.h[0]
    assert block.attn.c_attn.weight.std().item() == pytest.approx(0.02, rel=0.05)
    scaled = 0.02 / math.sqrt(2 * 4)
    assert block.attn.c_proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
    assert block.mlp.c_proj.weight.std().item() == pytest.approx(scaled, rel=0.05)
    assert torch.count_nonzero(block.attn.c_attn.bias) == 0
    assert torch.all(block.ln_1.weight == 1)


def test_mlp_uses_tanh_gelu(model: GPT) -> None:
    """GPT-2's "gelu_new": 0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))."""
    x = torch.linspace(-4, 4, 101)
    gelu_new = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert torch.allclose(model.transformer.h[0].mlp.gelu(x), gelu_new, atol=1e-6)


def test_positions_from_mask() -> None:
    mask = torch.tensor([[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    assert positions_from_mask(mask).tolist() == [[0, 0, 0, 1, 2], [0, 1, 2, 3, 4]]


def test_causal(model: GPT) -> None:
    """Changing a later token never changes the logits at earlier positions."""
    ids = torch.randint(0, VOCAB, (2, 12), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[:, 7] = (changed[:, 7] + 1) % VOCAB
    a, b = model(ids), model(changed)
    assert torch.allclose(a[:, :7], b[:, :7], atol=1e-6)
    assert not torch.allclose(a[:, 7:], b[:, 7:], atol=1e-3)


def test_padding_content_does_not_change_real_logits(model: GPT) -> None:
    rows = [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11]]
    ids, mask = left_padded(rows)
    other = torch.where(mask.bool(), ids, torch.randint_like(ids, 0, VOCAB))
    assert not torch.equal(ids, other)  # the padding really differs
    real = mask.bool()
    assert torch.allclose(model(ids, mask)[real], model(other, mask)[real], atol=1e-6)


def test_padded_row_equals_the_row_alone(model: GPT) -> None:
    """Left padding changes neither positions nor attention of real tokens."""
    rows = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10]]
    ids, mask = left_padded(rows)
    batched = model(ids, mask)
    for i, r in enumerate(rows):
        alone = model(torch.tensor([r]))[0]
        assert torch.allclose(batched[i, -len(r) :], alone, atol=1e-5)
    # Without the mask the padding would be attended to: the test can tell the difference.
    assert not torch.allclose(model(ids)[1, -3:], model(torch.tensor([rows[1]]))[0], atol=1e-3)


@settings(max_examples=15)
@given(
    lengths=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    new_tokens=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_incremental_decoding_matches_full_forward(
    model: GPT, lengths: list[int], new_tokens: int, seed: int
) -> None:
    """Prefill + one token at a time through the KV cache gives the logits of one full pass,
    for ragged left-padded prompts."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lengths]
    prompt, prompt_mask = left_padded(rows)
    continuation = torch.randint(0, VOCAB, (len(rows), new_tokens), generator=g)
    full_ids = torch.cat([prompt, continuation], dim=1)
    full_mask = torch.cat([prompt_mask, torch.ones_like(continuation)], dim=1)
    full = model(full_ids, full_mask)

    out = model(prompt, prompt_mask, use_cache=True)
    assert isinstance(out, GPTOutput)
    steps, cache = [out.logits], out.past_key_values
    P = prompt.shape[1]
    for t in range(new_tokens):
        out = model(
            continuation[:, t : t + 1],
            full_mask[:, : P + t + 1],
            past_key_values=cache,
            use_cache=True,
        )
        steps.append(out.logits)
        cache = out.past_key_values
    incremental = torch.cat(steps, dim=1)
    assert cache[0][0].shape[2] == P + new_tokens  # the cache grew by one per step
    real = full_mask.bool()
    assert torch.allclose(incremental[real], full[real], atol=1e-5)


#: How far the shared-prefix cache's logits may be from the list cache's: float32 rounding of
#: a different order of summation (the softmax over two blocks of keys), on logits of order 1.
SHARED_PREFIX_ATOL = 1e-5


@settings(deadline=None, max_examples=20)
@given(
    lengths=st.lists(st.integers(1, 10), min_size=1, max_size=4),
    group_size=st.integers(1, 5),
    new_tokens=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_shared_prefix_cache_decodes_like_the_list_cache(
    model: GPT, lengths: list[int], group_size: int, new_tokens: int, seed: int
) -> None:
    """Decoding ``G`` rows per prompt into a ``SharedPrefixKVCache`` (the prompt's keys and
    values stored once per group) gives the logits of the list cache that holds the prompt
    once per row and grows by concatenation, for ragged left-padded prompts and different
    tokens in every row: the same attention over the same keys, split in two blocks."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randint(0, VOCAB, (n,), generator=g).tolist() for n in lengths]
    prompt, prompt_mask = left_padded(rows)
    B = len(rows) * group_size
    continuation = torch.randint(0, VOCAB, (B, new_tokens), generator=g)
    repeated_mask = prompt_mask.repeat_interleave(group_size, 0)
    mask = torch.cat([repeated_mask, torch.ones_like(continuation)], dim=1)
    P = prompt.shape[1]
    first = model(prompt, prompt_mask, use_cache=True)
    listed = [(k.repeat_interleave(group_size, 0), v.repeat_interleave(group_size, 0))
              for k, v in first.past_key_values]  # fmt: skip
    shared = SharedPrefixKVCache(first.past_key_values, prompt_mask, group_size, new_tokens)
    for t in range(new_tokens):
        a = model(continuation[:, t : t + 1], mask[:, : P + t + 1], past_key_values=listed,
                  use_cache=True)  # fmt: skip
        b = model(continuation[:, t : t + 1], past_key_values=shared, use_cache=True)
        listed = a.past_key_values
        assert b.past_key_values is shared and shared.length == t + 1
        assert torch.allclose(a.logits, b.logits, atol=SHARED_PREFIX_ATOL, rtol=0)


def test_shared_prefix_cache_runs_a_subset_of_rows_and_compacts(model: GPT) -> None:
    """After ``run_rows(rows)`` the cache runs only those rows (a sampler's unfinished ones):
    their logits stay the list cache's, and once they are fewer than half the buffered rows
    the generated buffers shrink to them."""
    torch.manual_seed(1)
    G, steps = 4, 6
    prompt, prompt_mask = left_padded([[1, 2, 3, 4], [5, 6], [7, 8, 9]])
    B = prompt.shape[0] * G
    tokens = torch.randint(0, VOCAB, (B, steps))
    mask = torch.cat([prompt_mask.repeat_interleave(G, 0), torch.ones_like(tokens)], dim=1)
    P = prompt.shape[1]
    first = model(prompt, prompt_mask, use_cache=True)
    listed = [(k.repeat_interleave(G, 0), v.repeat_interleave(G, 0))
              for k, v in first.past_key_values]  # fmt: skip
    shared = SharedPrefixKVCache(first.past_key_values, prompt_mask, G, steps)
    running = {0: None, 2: torch.arange(0, B, 2), 4: torch.tensor([2, 6, 10]), 5: torch.tensor([6])}
    rows = None
    for t in range(steps):
        rows = running.get(t, rows)
        shared.run_rows(rows)
        a = model(tokens[:, t : t + 1], mask[:, : P + t + 1], past_key_values=listed,
                  use_cache=True)  # fmt: skip
        listed = a.past_key_values
        fed = tokens[:, t : t + 1] if rows is None else tokens[rows, t : t + 1]
        b = model(fed, past_key_values=shared, use_cache=True)
        expected = a.logits if rows is None else a.logits[rows]
        assert torch.allclose(expected, b.logits, atol=SHARED_PREFIX_ATOL, rtol=0)
        # 6 of 12 rows is not fewer than half: kept; 3 of 12 is: compacted to those 3; then
        # 1 of 3, compacted again (its slot is no longer its row).
        assert shared.keys[0].shape[0] == {5: 1, 4: 3}.get(t, 12)


def test_shared_prefix_cache_refuses_what_it_cannot_hold(model: GPT) -> None:
    prompt, prompt_mask = left_padded([[1, 2, 3], [4]])
    first = model(prompt, prompt_mask, use_cache=True)
    cache = SharedPrefixKVCache(first.past_key_values, prompt_mask, group_size=2, max_new_tokens=1)
    model(torch.zeros(4, 1, dtype=torch.long), past_key_values=cache)
    with pytest.raises(ValueError, match="max_new_tokens"):  # the buffer is full
        model(torch.zeros(4, 1, dtype=torch.long), past_key_values=cache)
    fresh = SharedPrefixKVCache(first.past_key_values, prompt_mask, group_size=2, max_new_tokens=4)
    with pytest.raises(ValueError, match="one new token for each"):  # 3 rows for 2 prompts × 2
        model(torch.zeros(3, 1, dtype=torch.long), past_key_values=fresh)
    with pytest.raises(ValueError, match="one new token for each"):  # two tokens at once
        model(torch.zeros(4, 2, dtype=torch.long), past_key_values=fresh)
    with pytest.raises(ValueError, match="prefix_mask"):
        SharedPrefixKVCache(first.past_key_values, prompt_mask[:, 1:], 2, 4)


def test_forward_validates_inputs(model: GPT) -> None:
    with pytest.raises(ValueError, match="position_ids"):
        model(torch.zeros(1, 65, dtype=torch.long))  # longer than block_size = 64
    with pytest.raises(ValueError, match="attention_mask"):
        model(torch.zeros(2, 5, dtype=torch.long), torch.ones(2, 4))
    with pytest.raises(ValueError, match="n_embd"):
        GPTConfig(vocab_size=VOCAB, n_embd=130, n_head=4)


def test_train_mode_dropout_changes_output_eval_does_not() -> None:
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=VOCAB, dropout=0.5))
    ids = torch.randint(0, VOCAB, (2, 8))
    model.eval()
    assert torch.equal(model(ids), model(ids))
    model.train()
    assert not torch.allclose(model(ids), model(ids))
