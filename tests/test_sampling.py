"""Tests of ``refimpl.sampling``: group layout, masks, the rollout records and determinism."""

from __future__ import annotations

import math

import pytest
import torch
from torch import Tensor, nn

from refimpl.contract import RolloutBatch
from refimpl.model import GPT, GPTConfig
from refimpl.sampling.distribution import entropy_from_logits
from refimpl.sampling.groups import Samples, policy_logprobs, sample_groups

VOCAB = 20
EOS = 0
PAD = 19
PROMPTS = [[3, 4, 5, 6, 7], [8, 9], [10, 11, 12], [5]]  # ragged: exercises left padding
G = 4


@pytest.fixture(scope="module")
def model() -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=VOCAB, block_size=64))


class EosBiased(nn.Module):
    """A GPT whose EOS logit is raised by ``bias``: rows finish early and at ragged lengths.

    Also shows that sampling works with any module that has GPT's call signature."""

    def __init__(self, gpt: GPT, bias: float) -> None:
        super().__init__()
        self.gpt = gpt
        self.config = gpt.config
        self.bias = bias

    def forward(self, input_ids: Tensor, **kwargs: object) -> object:
        out = self.gpt(input_ids, **kwargs)
        shift = torch.zeros(VOCAB)
        shift[EOS] = self.bias
        if isinstance(out, Tensor):
            return out + shift
        return out._replace(logits=out.logits + shift)


def sample(model: nn.Module, seed: int = 0, **overrides: object) -> Samples:
    kwargs: dict = dict(group_size=G, max_new_tokens=20, eos_id=EOS, pad_id=PAD)
    kwargs.update(overrides)
    return sample_groups(model, PROMPTS, generator=torch.Generator().manual_seed(seed), **kwargs)


@pytest.fixture(scope="module")
def samples(model: GPT) -> Samples:
    return sample(model)


def test_shapes_and_dtypes(samples: Samples) -> None:
    B = len(PROMPTS) * G
    T = samples.response_ids.shape[1]
    assert samples.prompt_ids.shape == samples.prompt_mask.shape == (B, max(map(len, PROMPTS)))
    for name in ("response_mask", "logp_old", "entropy_old"):
        tensor = getattr(samples, name)
        assert tensor.shape == (B, T) and tensor.dtype == torch.float32, name
    assert samples.response_ids.dtype == torch.long
    assert samples.truncated.shape == (B,) and samples.truncated.dtype == torch.bool


def test_rows_are_grouped(samples: Samples) -> None:
    """Row r answers prompt r // G, left-padded."""
    for r in range(len(PROMPTS) * G):
        prompt = PROMPTS[r // G]
        real = samples.prompt_mask[r].bool()
        assert samples.prompt_ids[r][real].tolist() == prompt
        assert real[-len(prompt) :].all() and not real[: -len(prompt)].any()


def test_mask_is_one_through_eos_then_zero(samples: Samples) -> None:
    ids, mask = samples.response_ids, samples.response_mask
    T = ids.shape[1]
    saw_eos = saw_truncated = False
    for r in range(ids.shape[0]):
        eos_at = (ids[r] == EOS).nonzero().flatten().tolist()
        if eos_at and mask[r, eos_at[0]] == 1:  # finished: mask covers tokens up to the EOS
            n = eos_at[0] + 1
            saw_eos = True
            assert not samples.truncated[r]
            assert (ids[r, n:] == PAD).all()
        else:  # truncated: no EOS among its tokens, and it used the whole budget
            n = T
            saw_truncated = True
            assert samples.truncated[r] and T == 20
        assert mask[r, :n].eq(1).all() and mask[r, n:].eq(0).all()
        assert (samples.logp_old[r, n:] == 0).all() and (samples.entropy_old[r, n:] == 0).all()
    assert saw_eos and saw_truncated  # this seed exercises both kinds of row
    assert mask[:, -1].any()  # T is the longest response, not more


def test_stops_when_every_row_finished(model: GPT) -> None:
    s = sample(EosBiased(model, bias=4.0), max_new_tokens=30)
    lengths = s.lengths
    assert s.response_ids.shape[1] == int(lengths.max()) < 30  # stopped early
    assert len(set(lengths.tolist())) > 1  # ragged
    assert not s.truncated.any()
    assert [row[-1] for row in s.responses()] == [EOS] * len(lengths)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_records_match_a_fresh_forward_pass(model: GPT, temperature: float) -> None:
    """logp_old and entropy_old are exactly what policy_logprobs computes on the samples, so
    the first optimisation step is on-policy (ratio 1)."""
    s = sample(model, temperature=temperature)
    logp, entropy = policy_logprobs(
        model,
        s.prompt_ids,
        s.prompt_mask,
        s.response_ids,
        s.response_mask,
        temperature=temperature,
    )
    assert entropy is not None
    assert logp.requires_grad  # the loss pass differentiates through it
    assert torch.allclose(logp, s.logp_old, atol=1e-5)
    assert torch.allclose(entropy, s.entropy_old, atol=1e-5)
    # And the records really depend on the temperature.
    other, _ = policy_logprobs(
        model,
        s.prompt_ids,
        s.prompt_mask,
        s.response_ids,
        s.response_mask,
        temperature=temperature + 0.5,
        with_entropy=False,
    )
    assert not torch.allclose(other, s.logp_old, atol=1e-3)


def test_policy_logprobs_ignores_padding_content(model: GPT, samples: Samples) -> None:
    pad = samples.response_mask == 0
    assert pad.any()
    garbage = torch.where(pad, torch.full_like(samples.response_ids, -7), samples.response_ids)
    a, _ = policy_logprobs(
        model, samples.prompt_ids, samples.prompt_mask, samples.response_ids, samples.response_mask
    )
    b, _ = policy_logprobs(
        model, samples.prompt_ids, samples.prompt_mask, garbage, samples.response_mask
    )
    assert torch.allclose(a, b, atol=1e-6)


def test_policy_logprobs_gradient_flows(model: GPT, samples: Samples) -> None:
    model.zero_grad()
    logp, entropy = policy_logprobs(
        model, samples.prompt_ids, samples.prompt_mask, samples.response_ids, samples.response_mask
    )
    (logp.sum() + entropy.sum()).backward()
    grad = model.transformer.wte.weight.grad
    assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    model.zero_grad()


def test_cached_and_uncached_sampling_agree(model: GPT) -> None:
    cached = sample(model, seed=3, use_cache=True)
    uncached = sample(model, seed=3, use_cache=False)
    assert torch.equal(cached.response_ids, uncached.response_ids)
    assert torch.equal(cached.response_mask, uncached.response_mask)
    assert torch.allclose(cached.logp_old, uncached.logp_old, atol=1e-5)
    assert torch.allclose(cached.entropy_old, uncached.entropy_old, atol=1e-5)


class EosBiasedGPT(GPT):
    """Our ``GPT`` (so sampling takes the shared-prefix path) with the EOS logit raised by
    ``bias``: rows finish at ragged lengths and the sampler stops running them."""

    bias = 2.5

    def forward(self, input_ids: Tensor, *args: object, **kwargs: object) -> object:
        out = super().forward(input_ids, *args, **kwargs)
        logits = out if isinstance(out, Tensor) else out.logits
        logits[..., EOS] += self.bias
        return out


@pytest.fixture(scope="module")
def eos_model() -> EosBiasedGPT:
    torch.manual_seed(0)
    return EosBiasedGPT(GPTConfig(vocab_size=VOCAB, block_size=64)).eval()


#: How far the shared-prefix path's records may be from a fresh forward pass over the same
#: tokens: float32 rounding of a different summation order (tests/test_model.py bounds the
#: logits by 1e-5 as well).
FAST_PATH_ATOL = 1e-5


@pytest.mark.parametrize("prompts, group_size", [(PROMPTS, G), ([[3, 4, 5, 6, 7], [8]] * 16, 32)])
def test_shared_prefix_path_records_the_reference_log_probs(
    eos_model: EosBiasedGPT, prompts: list[list[int]], group_size: int
) -> None:
    """At the test size and at an oracle-sized batch (32 prompts × K = 32 = 1,024 rows, rows
    finishing at ragged lengths, so finished rows are dropped), the fast path's ``logp_old``
    and ``entropy_old`` are the plain forward pass's over the same tokens, within
    ``FAST_PATH_ATOL``; its tokens are the list cache's draws from the same stream (checked
    at the small size, where a rounding-level tie is improbable)."""
    kwargs = dict(group_size=group_size, max_new_tokens=20, eos_id=EOS, pad_id=PAD)
    fast = sample_groups(eos_model, prompts, generator=torch.Generator().manual_seed(1), **kwargs)
    lengths = fast.lengths
    assert lengths.min() < lengths.max()  # ragged: the row-dropping path ran
    with torch.no_grad():
        logp, entropy = fast.policy_logprobs(eos_model)
    assert torch.allclose(fast.logp_old, logp, atol=FAST_PATH_ATOL, rtol=0)
    assert torch.allclose(fast.entropy_old, entropy, atol=FAST_PATH_ATOL, rtol=0)
    if len(prompts) * group_size <= 64:
        reference = sample_groups(eos_model, prompts, generator=torch.Generator().manual_seed(1),
                                  shared_prefix_cache=False, **kwargs)  # fmt: skip
        assert torch.equal(fast.response_ids, reference.response_ids)
        assert torch.allclose(fast.logp_old, reference.logp_old, atol=FAST_PATH_ATOL, rtol=0)


def test_finished_rows_stop_running_through_the_model(eos_model: EosBiasedGPT) -> None:
    """Once a row has emitted EOS the shared-prefix path runs only the rows still generating:
    each call's batch is the count of rows that had not finished before it."""
    seen: list[int] = []
    handle = eos_model.transformer.wte.register_forward_hook(
        lambda _m, args, _out: seen.append(args[0].shape[0])
    )
    try:
        s = sample(eos_model, seed=2)
    finally:
        handle.remove()
    running = [int((s.response_mask[:, t] > 0).sum()) for t in range(s.response_ids.shape[1])]
    assert seen[0] == len(PROMPTS)  # the prefill: each prompt once
    assert seen[1:] == running[1:]  # then one row per unfinished completion
    assert running[-1] < running[0]


def test_shared_prefill_matches_per_row_prefill(model: GPT) -> None:
    """GPT prompts are prefilled once per group and the cache repeated G times; any other
    module (here a no-op wrapper) is prefilled row by row. Same tokens either way."""
    shared = sample(model, seed=5)
    per_row = sample(EosBiased(model, bias=0.0), seed=5)
    assert torch.equal(shared.response_ids, per_row.response_ids)
    assert torch.allclose(shared.logp_old, per_row.logp_old, atol=1e-5)


def test_deterministic_per_seed(model: GPT) -> None:
    a, b, c = sample(model, seed=7), sample(model, seed=7), sample(model, seed=8)
    assert torch.equal(a.response_ids, b.response_ids)
    assert torch.equal(a.logp_old, b.logp_old)
    assert not torch.equal(a.response_ids[:, :5], c.response_ids[:, :5])


def test_completions_within_a_group_differ(samples: Samples) -> None:
    """G copies of a prompt are sampled independently, not G copies of one completion."""
    first_tokens = samples.response_ids[:, :3].reshape(len(PROMPTS), G, 3)
    assert any(len({tuple(x.tolist()) for x in group}) > 1 for group in first_tokens)


def test_entropy_bounds(samples: Samples) -> None:
    real = samples.response_mask.bool()
    h = samples.entropy_old[real]
    assert (h >= 0).all() and (h <= math.log(VOCAB) + 1e-5).all()
    assert h.mean() > 1.0  # a random-init model is close to uniform (log 20 ≈ 3.0)
    assert (samples.logp_old[real] <= 0).all()


def test_entropy_from_logits() -> None:
    uniform = torch.zeros(3, VOCAB)
    assert torch.allclose(entropy_from_logits(uniform), torch.full((3,), math.log(VOCAB)))
    # Stable for huge logits: a near one-hot distribution has entropy ≈ 0, not NaN.
    peaked = torch.tensor([[1e4, 0.0, -1e4]], dtype=torch.float16)
    h = entropy_from_logits(peaked)
    assert h.dtype == torch.float32 and torch.isfinite(h).all() and h.item() == pytest.approx(0)
    p = torch.tensor([0.5, 0.25, 0.25])
    expected = -(p * p.log()).sum()
    assert entropy_from_logits(p.log()).item() == pytest.approx(expected.item(), abs=1e-6)


def test_greedy_truncation_picks_the_argmax(model: GPT) -> None:
    """top_k=1 (and a tiny top_p) sample the most likely token; logp_old records the
    distribution the token was drawn from, where the draw was certain: log 1 = 0."""
    for truncation in (dict(top_k=1), dict(top_p=1e-6)):
        s = sample(model, seed=1, max_new_tokens=6, **truncation)
        ids = torch.cat([s.prompt_ids, s.response_ids], dim=1)
        mask = torch.cat([s.prompt_mask, s.response_mask.long()], dim=1)
        logits = model(ids, mask)[:, s.prompt_ids.shape[1] - 1 : -1]
        real = s.response_mask.bool()
        assert torch.equal(logits.argmax(-1)[real], s.response_ids[real])
        assert (s.logp_old[real] == 0).all()


def test_top_k_restricts_support(model: GPT) -> None:
    s = sample(model, seed=2, top_k=3)
    ids = torch.cat([s.prompt_ids, s.response_ids], dim=1)
    mask = torch.cat([s.prompt_mask, s.response_mask.long()], dim=1)
    logits = model(ids, mask)[:, s.prompt_ids.shape[1] - 1 : -1]
    top3 = logits.topk(3, dim=-1).indices
    real = s.response_mask.bool()
    in_top3 = (top3 == s.response_ids[..., None]).any(-1)
    assert in_top3[real].all()


def test_restores_training_mode(model: GPT) -> None:
    model.train()
    sample(model, max_new_tokens=2)
    assert model.training
    model.eval()
    sample(model, max_new_tokens=2)
    assert not model.training


def test_to_rollout_batch(samples: Samples) -> None:
    B = samples.response_ids.shape[0]
    rewards = torch.arange(B, dtype=torch.float32) % 2
    batch = samples.to_rollout_batch(rewards, G)
    assert isinstance(batch, RolloutBatch)
    assert batch.group_size == G and batch.num_groups == len(PROMPTS)
    assert torch.equal(batch.response_ids, samples.response_ids)
    assert torch.equal(batch.logp_old, samples.logp_old)
    assert torch.equal(batch.entropy_old, samples.entropy_old)
    with pytest.raises(ValueError, match="rewards"):
        samples.to_rollout_batch(torch.zeros(B + 1), G)
    with pytest.raises(ValueError, match="group_size"):
        samples.to_rollout_batch(rewards, G + 1)


@pytest.mark.parametrize(
    ("overrides", "argument"),
    [
        (dict(group_size=0), "group_size"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(max_new_tokens=64), "max_new_tokens"),  # prompt + response > block_size
        (dict(temperature=0.0), "temperature"),
        (dict(top_k=0), "top_k"),
        (dict(top_p=1.5), "top_p"),
        (dict(eos_id=VOCAB), "eos_id"),
    ],
)
def test_sample_groups_validates(model: GPT, overrides: dict, argument: str) -> None:
    with pytest.raises(ValueError, match=argument):
        sample(model, **overrides)


def test_empty_prompt_rejected(model: GPT) -> None:
    with pytest.raises(ValueError, match="prompts"):
        sample_groups(model, [[1], []], group_size=2, max_new_tokens=3, eos_id=EOS, pad_id=PAD)
