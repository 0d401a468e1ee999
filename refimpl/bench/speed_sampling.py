"""``refimpl bench-speed``'s sampling figures: the KV cache against recomputing the prefix,
and sampling at the credit oracle's batch size (the shared-prefix path against the reference
path, then one oracle call), as tokens per second and shares of the matmul peak."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from refimpl.bench.speed_timing import (
    decode_flops_per_token,
    interleaved,
    median_ratio,
    peak_probe,
    share_of_peak,
)

if TYPE_CHECKING:
    from refimpl.bench.speed_settings import SpeedConfig


def _no_eos_model(model_cfg, eos_id: int):
    """A ``GPT`` whose ``<eos>`` logit is −inf, so every row generates the full length."""
    from refimpl.model import GPT

    class NoEosGPT(GPT):
        def forward(self, *args, **kwargs):  # noqa: ANN002, ANN003
            out = super().forward(*args, **kwargs)
            logits = out if isinstance(out, torch.Tensor) else out.logits
            logits[..., eos_id] = float("-inf")
            return out

    return NoEosGPT(model_cfg).eval()


def bench_sampling(cfg: SpeedConfig, model_size: dict[str, int]) -> list[dict[str, Any]]:
    from refimpl.evaluate import encode_prompts
    from refimpl.model import GPTConfig
    from refimpl.sampling.groups import sample_groups
    from toy_envs import TOKENIZER, get_task

    problems = get_task("chain").sample(16, np.random.default_rng([0, 0]))
    prompts = encode_prompts(problems)
    longest = max(len(p) for p in prompts)
    rows = []
    for length in cfg.lengths:
        torch.manual_seed(0)
        model = _no_eos_model(
            GPTConfig(vocab_size=TOKENIZER.vocab_size, block_size=longest + length, **model_size),
            TOKENIZER.eos_id,
        )

        def run(use_cache: bool, _m=model, _n=length):
            gen = torch.Generator().manual_seed(0)
            return sample_groups(
                _m,
                prompts,
                group_size=8,
                max_new_tokens=_n,
                eos_id=TOKENIZER.eos_id,
                pad_id=TOKENIZER.pad_id,
                generator=gen,
                use_cache=use_cache,
            )

        tokens = int(run(True).response_mask.sum())
        assert tokens == 16 * 8 * length, "every row should generate the full length"
        times = interleaved(
            {"cached": lambda: run(True), "uncached": lambda: run(False)}, cfg.repeats
        )
        rows.append(
            {
                "response_length": length,
                "rows": 128,
                "tokens": tokens,
                "cached_s": statistics.median(times["cached"]),
                "uncached_s": statistics.median(times["uncached"]),
                "cached_tok_s": tokens / statistics.median(times["cached"]),
                "uncached_tok_s": tokens / statistics.median(times["uncached"]),
                "speedup": median_ratio(times["uncached"], times["cached"]),
            }
        )
    return rows


def bench_oracle(cfg: SpeedConfig, model_size: dict[str, int], peak: float) -> dict[str, Any]:
    """Sampling at the credit oracle's batch size: ``prefixes × K`` rows (≥ 1,024 at full
    size) continuing prefixes of one length, the shared-prefix path against the reference
    path (the list cache, the prefix repeated per row), interleaved; then one ``token_values``
    call over completions of that length (every prefix continued K times, as ``refimpl
    credit`` runs it). Every row generates to the budget (``<eos>`` masked out), so the tokens
    are known and every one counts."""
    from refimpl.model import GPTConfig
    from refimpl.sampling.groups import sample_groups
    from toy_envs import TOKENIZER

    n_prefix, k, prefix_len, new = cfg.oracle_batch
    torch.manual_seed(0)
    model = _no_eos_model(
        GPTConfig(vocab_size=TOKENIZER.vocab_size, block_size=prefix_len + new, **model_size),
        TOKENIZER.eos_id,
    )
    gen = torch.Generator().manual_seed(0)
    prefixes = torch.randint(3, TOKENIZER.vocab_size, (n_prefix, prefix_len), generator=gen)
    prefixes[:, 0] = TOKENIZER.bos_id
    prompts = prefixes.tolist()

    def run(shared: bool):
        return sample_groups(
            model, prompts, group_size=k, max_new_tokens=new, eos_id=TOKENIZER.eos_id,
            pad_id=TOKENIZER.pad_id, generator=torch.Generator().manual_seed(1),
            shared_prefix_cache=shared,
        )  # fmt: skip

    tokens = n_prefix * k * new
    probe, probe_flops = peak_probe()
    times = interleaved({"shared": lambda: run(True), "reference": lambda: run(False),
                         "peak": probe}, cfg.repeats)  # fmt: skip
    per_token = decode_flops_per_token(
        model_size["n_layer"], model_size["n_embd"], TOKENIZER.vocab_size
    )
    shared_s = statistics.median(times["shared"])
    reference_s = statistics.median(times["reference"])
    result: dict[str, Any] = {
        "prefixes": n_prefix,
        "rollouts": k,
        "rows": n_prefix * k,
        "prefix_length": prefix_len,
        "new_tokens": new,
        "tokens": tokens,
        "flops_per_token": per_token,
        "shared_s": shared_s,
        "reference_s": reference_s,
        "shared_tok_s": tokens / shared_s,
        "reference_tok_s": tokens / reference_s,
        # Shares of the matmul peak measured beside each repeat (interleaved), not of ``peak``.
        "shared_fraction_of_peak": share_of_peak(
            tokens * per_token, times["shared"], times["peak"], probe_flops
        ),
        "reference_fraction_of_peak": share_of_peak(
            tokens * per_token, times["reference"], times["peak"], probe_flops
        ),
        "peak_interleaved_flops_per_s": probe_flops / statistics.median(times["peak"]),
        "speedup": median_ratio(times["reference"], times["shared"]),
    }
    result["oracle"] = _oracle_rollouts(cfg, model_size, per_token, peak)
    return result


def _oracle_rollouts(
    cfg: SpeedConfig, model_size: dict[str, int], per_token: int, peak: float
) -> dict[str, Any]:
    """One oracle batch: ``prefixes`` completions of ``new/2`` tokens, every proper prefix
    continued K times, all prefixes of one length in one call of ``prefixes · K`` rows, as
    ``refimpl credit`` runs them."""
    from refimpl.model import GPTConfig
    from refimpl.sampling.groups import sample_groups
    from refimpl.sampling.monte_carlo_values import token_values
    from toy_envs import TOKENIZER, get_task

    n_prefix, k, _prefix_len, new = cfg.oracle_batch
    task = get_task("chain")
    problems = task.sample(n_prefix, np.random.default_rng([0, 1]))
    budget = max(2, new // 2)  # completions of new/2 tokens: continuations of 1 … new/2
    prompts = [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems]
    longest = max(len(p) for p in prompts)
    model = _no_eos_model(
        GPTConfig(vocab_size=TOKENIZER.vocab_size, block_size=longest + budget, **model_size),
        TOKENIZER.eos_id,
    )
    samples = sample_groups(
        model, prompts, group_size=1, max_new_tokens=budget, eos_id=TOKENIZER.eos_id,
        pad_id=TOKENIZER.pad_id, generator=torch.Generator().manual_seed(2),
    )  # fmt: skip
    outcome = torch.zeros(n_prefix)

    def oracle():
        return token_values(
            model, task, problems, samples, outcome, rollouts=k, max_new_tokens=budget,
            max_rows=n_prefix * k,
        )  # fmt: skip

    values = oracle()
    probe, probe_flops = peak_probe()
    times = interleaved({"oracle": oracle, "peak": probe}, max(1, cfg.repeats // 2))
    seconds = statistics.median(times["oracle"])
    return {
        "completions": n_prefix,
        "prefixes": values.prefixes,
        "rows_per_call": n_prefix * k,
        "tokens": values.sampled_tokens,
        "seconds": seconds,
        "tok_s": values.sampled_tokens / seconds,
        "fraction_of_peak": share_of_peak(
            values.sampled_tokens * per_token, times["oracle"], times["peak"], probe_flops
        ),  # interleaved
        "peak_interleaved_flops_per_s": probe_flops / statistics.median(times["peak"]),
    }
