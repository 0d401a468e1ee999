"""refimpl.scaleup.hf: the toy model is a GPT-2, and the losses match through it.

The parity test is the heart of "matching scale-up paths": the same rollout and the same
weights give the same loss and the same gradients whether log-probs come from the toy model
or from its transformers twin, for every algorithm.
"""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2LMHeadModel

from refimpl import algorithms
from refimpl.contract import RolloutBatch
from refimpl.model import GPT, GPTConfig
from refimpl.sampling.groups import policy_logprobs
from refimpl.scaleup import hf
from tests.spec.strategies import with_requested_values

V, P, T, G = 19, 4, 6, 3


@pytest.fixture
def toy() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=16)).eval()


def _prompts(B: int = 2 * G) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts: rows of a group share a prompt, groups differ in length."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(3, V, (B, P), generator=gen)
    mask = torch.ones(B, P, dtype=torch.long)
    for g in range(B // G):
        ids[g * G : (g + 1) * G] = ids[g * G]
        mask[g * G : (g + 1) * G, : g % 2] = 0  # odd groups have one padding column
    return ids, mask


def test_to_hf_gives_identical_logits(toy: GPT) -> None:
    """Toy → GPT2LMHeadModel: same logits on real tokens, with left padding."""
    twin = hf.to_hf_gpt2(toy).eval()
    assert isinstance(twin, GPT2LMHeadModel)
    ids, mask = _prompts()
    pos = hf.positions_from_mask(mask)
    ours = toy(ids, attention_mask=mask, position_ids=pos)
    theirs = twin(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    real = mask.bool()
    torch.testing.assert_close(theirs[real], ours[real], rtol=0, atol=1e-5)
    # Weight tying survived the conversion: one matrix, not two copies.
    assert twin.lm_head.weight.data_ptr() == twin.transformer.wte.weight.data_ptr()


def test_from_hf_gives_identical_logits() -> None:
    """GPT2LMHeadModel (randomly initialised by transformers) → toy: same logits."""
    torch.manual_seed(2)
    twin = GPT2LMHeadModel(
        hf.hf_gpt2_config(GPTConfig(vocab_size=V, block_size=16, n_layer=2, n_head=2, n_embd=16))
    ).eval()
    toy = hf.from_hf_gpt2(twin).eval()
    ids, mask = _prompts()
    pos = hf.positions_from_mask(mask)
    theirs = twin(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    ours = toy(ids, attention_mask=mask, position_ids=pos)
    torch.testing.assert_close(ours[mask.bool()], theirs[mask.bool()], rtol=0, atol=1e-5)
    # And back again: the round trip is the identity on every parameter.
    again = hf.to_hf_gpt2(toy)
    for (name, a), (_, b) in zip(twin.named_parameters(), again.named_parameters()):
        assert torch.equal(a, b), name


def test_from_hf_rejects_an_incompatible_config() -> None:
    config = hf.hf_gpt2_config(GPTConfig(vocab_size=V, block_size=8, n_layer=1, n_head=1, n_embd=8))
    config.activation_function = "relu"
    with pytest.raises(ValueError, match="activation_function"):
        hf.from_hf_gpt2(GPT2LMHeadModel(config))


def _sequences(B: int = 2 * G) -> tuple[torch.Tensor, torch.Tensor]:
    ids, mask = _prompts(B)
    gen = torch.Generator().manual_seed(3)
    response = torch.randint(3, V, (B, T), generator=gen)
    response_mask = torch.ones(B, T, dtype=torch.long)
    response_mask[0, 4:] = 0
    response_mask[G, 1:] = 0
    return torch.cat([ids, response], 1), torch.cat([mask, response_mask], 1)


@pytest.mark.parametrize("chunk_tokens", [1, 5, 1000])
def test_chunked_logprobs_equal_one_full_forward(toy: GPT, chunk_tokens: int) -> None:
    """Chunking the LM head changes memory, not values, nor gradients."""
    twin = hf.to_hf_gpt2(toy).eval()
    seq, mask = _sequences()
    full_lp, full_h = hf.token_logprobs_and_entropy(twin, seq, mask, P, chunk_tokens=None)
    (full_lp.sum() + full_h.sum()).backward()
    full_grad = twin.transformer.wte.weight.grad.clone()
    twin.zero_grad()
    lp, h = hf.token_logprobs_and_entropy(twin, seq, mask, P, chunk_tokens=chunk_tokens)
    (lp.sum() + h.sum()).backward()
    torch.testing.assert_close(lp, full_lp)
    torch.testing.assert_close(h, full_h)
    torch.testing.assert_close(twin.transformer.wte.weight.grad, full_grad)
    assert lp.dtype == h.dtype == torch.float32
    real = mask[:, P:].bool()
    assert bool((lp[~real] == 0).all()) and bool((h[~real] == 0).all())


def test_entropy_is_the_full_vocabulary_entropy(toy: GPT) -> None:
    """H_t = −Σ_v p_v log p_v of softmax(logits/temperature), derived here from the logits."""
    twin = hf.to_hf_gpt2(toy).eval()
    seq, mask = _sequences()
    temperature = 0.7
    _, h = hf.token_logprobs_and_entropy(
        twin, seq, mask, P, temperature=temperature, chunk_tokens=4
    )
    logits = (
        twin(input_ids=seq, attention_mask=mask, position_ids=hf.positions_from_mask(mask)).logits[
            :, P - 1 : -1
        ]
        / temperature
    )
    p = torch.softmax(logits.double(), dim=-1)
    expected = -(p * p.log()).sum(-1)
    real = mask[:, P:].bool()
    torch.testing.assert_close(h[real].double(), expected[real], rtol=1e-5, atol=1e-5)
    assert bool((h[real] <= torch.log(torch.tensor(float(V))) + 1e-5).all())


def test_half_precision_model_gives_float32_outputs(toy: GPT) -> None:
    twin = hf.to_hf_gpt2(toy).to(torch.bfloat16).eval()
    seq, mask = _sequences()
    lp, h = hf.token_logprobs_and_entropy(twin, seq, mask, P, chunk_tokens=3)
    assert lp.dtype == h.dtype == torch.float32


def test_toy_model_goes_through_the_same_function(toy: GPT) -> None:
    """refimpl.model.GPT (no body/head split) takes the full-forward path, same numbers as
    refimpl.sampling.policy_logprobs."""
    seq, mask = _sequences()
    lp, h = hf.token_logprobs_and_entropy(toy, seq, mask, P)
    ref_lp, ref_h = policy_logprobs(toy, seq[:, :P], mask[:, :P], seq[:, P:], mask[:, P:].float())
    torch.testing.assert_close(lp, ref_lp)
    torch.testing.assert_close(h, ref_h)


def test_bad_inputs_name_the_argument(toy: GPT) -> None:
    seq, mask = _sequences()
    with pytest.raises(ValueError, match="response_start"):
        hf.token_logprobs_and_entropy(toy, seq, mask, 0)
    with pytest.raises(ValueError, match="attention_mask"):
        hf.token_logprobs_and_entropy(toy, seq, mask[:, 1:], P)
    with pytest.raises(ValueError, match="chunk_tokens"):
        hf.token_logprobs_and_entropy(toy, seq, mask, P, chunk_tokens=0)


def test_response_mask_keeps_the_first_eos_and_drops_the_rest() -> None:
    eos = 2
    ids = torch.tensor([[5, 2, 7, 2], [5, 6, 7, 8], [2, 0, 0, 0]])
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    assert torch.equal(hf.response_mask_from_ids(ids, eos), expected)


def test_rollout_batch_from_generate(toy: GPT) -> None:
    """generate() output → a valid RolloutBatch whose logp_old/entropy_old are the rollout
    policy's, and whose rewards come from the reward function."""
    twin = hf.to_hf_gpt2(toy).eval()
    eos = 2
    ids, mask = _prompts()
    torch.manual_seed(4)
    seq = twin.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        max_new_tokens=T,
        eos_token_id=eos,
        pad_token_id=0,
    )
    batch = hf.rollout_batch(
        twin,
        ids,
        mask,
        seq,
        lambda responses: [len(r) % 2 for r in responses],
        group_size=G,
        eos_id=eos,
        ref_model=twin,
    )
    assert isinstance(batch, RolloutBatch)
    lengths = batch.lengths.long().tolist()
    assert batch.rewards.tolist() == [float(n % 2) for n in lengths]
    attn = torch.cat([mask, batch.response_mask.long()], 1)
    lp, h = hf.token_logprobs_and_entropy(twin, seq, attn, P, chunk_tokens=None)
    torch.testing.assert_close(batch.logp_old, lp)
    torch.testing.assert_close(batch.entropy_old, h)
    torch.testing.assert_close(batch.logp_ref, lp)
    with pytest.raises(ValueError, match="sequences"):
        hf.rollout_batch(twin, ids, mask, seq[:, 1:], [0.0] * len(ids), G, eos)


def _rollout(toy: GPT) -> RolloutBatch:
    """A rollout with non-trivial rewards (both outcomes in each group) and a reference."""
    seq, mask = _sequences()
    with torch.no_grad():
        lp, h = hf.token_logprobs_and_entropy(toy, seq, mask, P)
    gen = torch.Generator().manual_seed(5)
    response_mask = mask[:, P:].float()
    # Perturbed so ratios differ from 1 and clipping can happen.
    logp_old = torch.where(
        response_mask.bool(), lp + 0.3 * torch.randn(lp.shape, generator=gen), torch.zeros_like(lp)
    ).clamp(max=0.0)
    return RolloutBatch(
        response_ids=seq[:, P:],
        response_mask=response_mask,
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0]),
        logp_old=logp_old,
        entropy_old=h,
        group_size=G,
        logp_ref=(lp - 0.1).clamp(max=0.0),
    )


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_loss_and_gradients_match_between_toy_and_gpt2_twin(toy: GPT, name: str) -> None:
    """Same rollout, same weights: same loss and same gradients, every algorithm."""
    module = algorithms.get(name)
    cfg = module.Config()
    batch = with_requested_values(_rollout(toy), cfg)  # VinePPO's V̂, as the loops attach them
    adv = module.advantages(batch, cfg)
    seq = torch.cat([_prompts()[0], batch.response_ids], 1)
    mask = torch.cat([_prompts()[1], batch.response_mask.long()], 1)
    twin = hf.to_hf_gpt2(toy).eval()

    lp_toy, h_toy = hf.token_logprobs_and_entropy(toy, seq, mask, P)
    loss_toy, _ = module.loss(batch, lp_toy, adv, cfg, entropy=h_toy.detach())
    loss_toy.backward()
    lp_hf, h_hf = hf.token_logprobs_and_entropy(twin, seq, mask, P, chunk_tokens=7)
    loss_hf, _ = module.loss(batch, lp_hf, adv, cfg, entropy=h_hf.detach())
    loss_hf.backward()

    assert torch.isfinite(loss_toy)
    torch.testing.assert_close(loss_hf, loss_toy, rtol=1e-5, atol=1e-6)
    # Gradients name by name; the twin stores the four Conv1D matrices transposed.
    toy_grads = {n: p.grad for n, p in toy.named_parameters()}
    nonzero = 0
    for n, p in twin.named_parameters():
        expected = toy_grads[n]
        got = p.grad.t() if n.endswith(hf._CONV1D_SUFFIXES) else p.grad
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6, msg=n)
        nonzero += int(bool(expected.abs().sum() > 0))
    assert nonzero > 0  # the comparison is not between two zero gradients


def test_loss_batch_pads_a_single_row_with_an_empty_partner() -> None:
    """One-row micro-batches get an all-padding partner, which no aggregation counts."""
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    logp = torch.tensor([[-0.5, -1.0, 0.0]], requires_grad=True)
    batch, extra = hf.loss_batch(mask, logp.detach(), extra={"logp": logp, "adv": torch.ones(1, 3)})
    assert batch.batch_size == 2 and batch.group_size == 2
    module = algorithms.get("dapo")
    loss, _ = module.loss(batch, extra["logp"], extra["adv"] * batch.response_mask, module.Config())
    # On-policy, token-mean of −A·w with A = 1 over the two real tokens: exactly −1.
    torch.testing.assert_close(loss, torch.tensor(-1.0))
