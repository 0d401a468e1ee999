"""``refimpl credit``'s result file: what the JSON keeps of the batch, the oracle, the signals
and the metrics (``*_record``), and what is read back from it (``stored_values``,
``stored_first_wrong``, ``prompt_indices``), so that ``rescore`` recomputes every metric from
a file written before the analysis existed."""

from __future__ import annotations

import functools

import numpy as np
import torch
from torch import Tensor

from refimpl.bench.credit_metrics import entropy_hypothesis, oracle_noise, score_signals
from refimpl.sampling.monte_carlo_values import TokenValues


def _per_token(x: torch.Tensor | np.ndarray, lengths: np.ndarray) -> list:
    """Per completion, its response tokens' values, exactly (Python's shortest repr of each
    float64): every metric recomputes from the file. (Files written before issue 46 rounded
    them to 5-8 decimals, which turned STEER's near-saturated credit into ties.)"""
    arr = x.numpy() if isinstance(x, torch.Tensor) else x
    return [[float(v) for v in arr[i, : int(L)]] for i, L in enumerate(lengths)]


def oracle_record(values: TokenValues, lengths: np.ndarray, peak_share: float | None = None):
    """What the JSON keeps of one oracle estimate: per completion its tokens' values, their
    s.e. (``value_se`` is the value after the token's), the true advantages; the cost."""
    rate = values.sampled_tokens / max(values.seconds, 1e-9)
    return {
        "value_before": _per_token(values.value_before, lengths),
        "value_after": _per_token(values.value_after, lengths),
        "value_se_before": _per_token(values.se_before, lengths),
        "value_se": _per_token(values.se_after, lengths),
        "true_advantage": _per_token(values.true_advantage, lengths),
        "half_advantages": [_per_token(h, lengths) for h in values.half_advantages],
        "prefixes": values.prefixes,
        "sampled_tokens": values.sampled_tokens,
        "seconds": round(values.seconds, 2),
        "tokens_per_s": round(rate, 1),
        "peak_share": peak_share,
    }


def metrics_record(
    signals: dict, values: TokenValues, entropy: Tensor, first_wrong: dict, seed,
    prompt_of: list[int] | None = None,
):  # fmt: skip
    """Criteria 1-3 and the oracle's noise, for one oracle estimate (``prompt_of``: the prompt
    of each row, for the by-prompt interval of the entropy shares)."""
    return {
        "signals": score_signals(signals, values, first_wrong),
        "entropy": entropy_hypothesis(
            entropy.double().numpy(), values, values.mask.numpy(), seed, prompt_of
        ),
        "noise": oracle_noise(values),
    }


def signals_record(signals: dict, lengths: np.ndarray) -> dict:
    """Every algorithm's per-token advantages and effective credit, and which rows it trains."""
    return {
        name: {
            "advantages": _per_token(sig["advantages"], lengths),
            "credit": _per_token(sig["credit"], lengths),
            "trained": [bool(x) for x in sig["trained"]],
        }
        for name, sig in signals.items()
    }


def completion_record(
    prompt: str, text: str, tokens: list, entropy, outcome: float, *, success_threshold: float,
    **extra,
):  # fmt: skip
    """One completion: its prompt, text, token ids, rollout entropies and outcome (a success
    when at least ``success_threshold``: the scored policy's Config's)."""
    return {
        "prompt": prompt,
        "text": text,
        "token": tokens,
        "entropy_old": [float(h) for h in entropy[: len(tokens)]],
        "reward": float(outcome),
        "success": bool(outcome >= success_threshold),
        **extra,
    }


def stored_values(result: dict, k: str) -> TokenValues:
    """The oracle's estimate at ``K = k`` as a result file stores it (``oracle_record``)."""
    comps, o = result["completions"], result["oracle"][k]
    B, T = len(comps), max(len(c["token"]) for c in comps)
    grid = functools.partial(_grid, B, T)
    return TokenValues(
        value_before=grid(o["value_before"]), value_after=grid(o["value_after"]),
        se_before=grid(o["value_se_before"]), se_after=grid(o["value_se"]),
        true_advantage=grid(o["true_advantage"]),
        success=torch.tensor([c["success"] for c in comps]),
        mask=grid([[1.0] * len(c["token"]) for c in comps]).bool(),
        half_advantages=torch.stack([grid(h) for h in o["half_advantages"]]),
        rollouts=int(k), prefixes=o["prefixes"], sampled_tokens=o["sampled_tokens"],
        seconds=o["seconds"],
    )  # fmt: skip


def _grid(B: int, T: int, rows) -> torch.Tensor:
    """Per-completion lists laid out as a ``[B, T]`` float64 tensor, 0 on padding."""
    out = torch.zeros(B, T, dtype=torch.float64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
    return out


def stored_first_wrong(result: dict) -> dict[int, int]:
    """The first wrong token of each completion a result file records one for (chain)."""
    comps = result["completions"]
    return {i: c["first_wrong"] for i, c in enumerate(comps) if c.get("first_wrong") is not None}


def rescore(result: dict, k: str) -> dict:
    """Criteria 1-3 and the oracle's noise recomputed from what a result file stores: the
    metrics of ``metrics_record``, for analyses added after a file was written (exactly the
    stored ones for a file that keeps full precision; a file written before issue 46 rounded
    its values, which moves the Spearman ρ of signals with near-ties, e.g. STEER's credit).
    The signals' ``trained`` rows, the completions' entropies and outcomes and the oracle's
    values and half-estimates are all it needs."""
    comps = result["completions"]
    B, T = len(comps), max(len(c["token"]) for c in comps)
    grid = functools.partial(_grid, B, T)
    signals = {
        name: {"advantages": grid(s["advantages"]), "credit": grid(s["credit"]),
               "trained": torch.tensor(s["trained"])}
        for name, s in result["signals"].items()
    }  # fmt: skip
    entropy = grid([c["entropy_old"] for c in comps])
    return metrics_record(signals, stored_values(result, k), entropy, stored_first_wrong(result),
                          result["settings"]["seed"], prompt_indices(result))  # fmt: skip


def prompt_indices(result: dict) -> list[int]:
    """The prompt of each completion of a result file, as an index (first seen, first)."""
    seen: dict[str, int] = {}
    return [seen.setdefault(c["prompt"], len(seen)) for c in result["completions"]]
