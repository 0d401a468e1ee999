"""``refimpl bench-speed``'s training figures: one RL step of the real trainer broken down
and its FLOPs; every algorithm's advantages + loss + backward against the baseline's; the
vectorised advantages against the reference loops."""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from refimpl import algorithms
from refimpl.bench.speed_timing import (
    interleaved,
    median_ratio,
    median_time,
    peak_probe,
    share_of_peak,
)
from refimpl.contract import RolloutBatch

if TYPE_CHECKING:
    from refimpl.bench.speed_settings import SpeedConfig


# ---------------------------------------------------------------------------------------------
# One RL step, broken down, and its FLOPs.
# ---------------------------------------------------------------------------------------------


def train_config(cfg: SpeedConfig, **changes):
    from refimpl.settings.train_config import TrainConfig
    from refimpl.settings.warmstart_config import ModelSize, WarmstartConfig

    ws = WarmstartConfig(runs_dir=cfg.runs_dir, progress=False, threads=cfg.threads)
    if cfg.quick:
        ws = dataclasses.replace(
            ws,
            steps=100,
            batch_size=32,
            eval_problems=20,
            model=ModelSize(n_layer=1, n_embd=32, n_head=2),
        )
    base = TrainConfig(
        # The speed benchmark's fixed batch (the one its TRL comparison matches): 16 prompts ×
        # G = 8, one optimizer step per rollout, whatever the training defaults are.
        prompts_per_step=16,
        group_size=8,
        minibatches=1,
        ppo_epochs=1,
        lr=5e-5,
        threads=cfg.threads,
        progress=False,
        plot=False,
        runs_dir=cfg.out / "runs",
        overwrite=True,
        warmstart=ws,
        eval_problems=20 if cfg.quick else 200,
    )
    return dataclasses.replace(base, **changes)


def bench_step(cfg: SpeedConfig, peak: float) -> dict[str, Any]:
    from torch.utils.flop_counter import FlopCounterMode

    from refimpl.train import Trainer

    trainer = Trainer(train_config(cfg, algo=algorithms.BASELINE))
    trainer.train_step()  # warm-up
    trainer.step += 1
    probe, probe_flops = peak_probe()
    records, peak_times = [], []
    for _ in range(cfg.rl_steps):  # each step, then the matmul peak beside it (interleaved)
        records.append(trainer.train_step())
        trainer.step += 1
        t0 = time.perf_counter()
        probe()
        peak_times.append(time.perf_counter() - t0)
    counter = FlopCounterMode(display=False)
    with counter:
        trainer.train_step()
    flops = counter.get_total_flops()
    med = {
        k: statistics.median(r[k] for r in records)
        for k in ("time_sample", "time_score", "time_adv", "time_loss", "time_step")
    }
    med["time_other"] = max(
        0.0,
        med["time_step"]
        - med["time_sample"]
        - med["time_score"]
        - med["time_adv"]
        - med["time_loss"],
    )
    tokens = statistics.median(r["sampled_rows"] * r["length_mean"] for r in records)
    return {
        **med,
        "params": trainer.model.num_params(),
        "rows": trainer.cfg.prompts_per_step * trainer.cfg.group_size,
        "length_mean": statistics.median(r["length_mean"] for r in records),
        "sampled_tokens_per_step": tokens,
        "steps_per_s": 1.0 / med["time_step"],
        "step_flops": flops,
        "achieved_flops_per_s": flops / med["time_step"],
        "peak_flops_per_s": peak,
        "peak_interleaved_flops_per_s": probe_flops / statistics.median(peak_times),
        "fraction_of_peak": share_of_peak(
            flops, [r["time_step"] for r in records], peak_times, probe_flops
        ),  # fmt: skip
        "max_new_tokens": trainer.max_new_tokens,
    }


# ---------------------------------------------------------------------------------------------
# Advantages + loss of every algorithm; vectorised vs reference loops.
# ---------------------------------------------------------------------------------------------


def synthetic_batch(B: int, T: int, group_size: int = 8, seed: int = 0) -> RolloutBatch:
    """A rollout batch with random lengths, binary rewards, log-probs and entropies (and
    values ``V̂`` in [0, 1] at every prefix, for a Config that reads them: VinePPO)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    logp_old = -torch.rand(B, T, generator=gen) * 3 * mask
    values = torch.rand(B, T, generator=torch.Generator().manual_seed(seed + 1)).double() * mask
    return RolloutBatch(
        response_ids=torch.randint(0, 18, (B, T), generator=gen),
        response_mask=mask,
        rewards=(torch.rand(B, generator=gen) < 0.4).float(),
        logp_old=logp_old,
        entropy_old=torch.rand(B, T, generator=gen) * 2 * mask,
        group_size=group_size,
        logp_ref=(logp_old - 0.1 * torch.rand(B, T, generator=gen)) * mask,
        token_values=values,
    )


def _algo_config(name: str, T: int):
    module = algorithms.get(name)
    return module, module.Config().for_generation_budget(T)


def _adv_loss_fn(name: str, batch: RolloutBatch, calls: int = 1) -> Callable[[], None]:
    module, algo_cfg = _algo_config(name, batch.response_ids.shape[1])
    noise = 0.05 * torch.randn(batch.logp_old.shape, generator=torch.Generator().manual_seed(1))
    base = (batch.logp_old + noise * batch.response_mask).clamp(max=0.0)
    entropy = batch.entropy_old

    def fn() -> None:
        for _ in range(calls):  # sub-millisecond calls: time several per sample
            logp = base.clone().requires_grad_(True)
            adv = module.advantages(batch, algo_cfg)
            loss, _ = module.loss(batch, logp, adv, algo_cfg, entropy=entropy)
            loss.backward()

    return fn


def bench_algorithms(cfg: SpeedConfig, B: int, T: int, step_time: float) -> list[dict[str, Any]]:
    batch = synthetic_batch(B, T)
    calls = max(1, 20_000 // (B * T))  # about 20k token positions per timed sample
    fns = {name: _adv_loss_fn(name, batch, calls) for name in algorithms.NAMES}
    times = interleaved(fns, 3 * cfg.repeats)
    times = {k: [t / calls for t in v] for k, v in times.items()}
    # Against the baseline (GRPO; the keys of results.json say so: vs_grpo).
    base = times[algorithms.BASELINE]
    rows = []
    for name in algorithms.NAMES:
        t = statistics.median(times[name])
        extra = t - statistics.median(base)
        rows.append(
            {
                "algo": name,
                "adv_loss_s": t,
                "vs_grpo": median_ratio(times[name], base),
                "extra_vs_grpo_s": extra,
                "extra_frac_of_step": extra / step_time,
                "total_frac_of_step": t / step_time,
            }
        )
    return rows


def bench_reference(cfg: SpeedConfig, B: int, T: int) -> list[dict[str, Any]]:
    batch = synthetic_batch(B, T)
    rows = []
    for name in algorithms.NAMES:
        module, algo_cfg = _algo_config(name, T)
        vec = median_time(lambda m=module, c=algo_cfg: m.advantages(batch, c), cfg.repeats)
        t0 = time.perf_counter()
        module.reference_advantages(batch, algo_cfg)  # loops: one timing (seconds each)
        ref = time.perf_counter() - t0
        rows.append({"algo": name, "vectorised_s": vec, "reference_s": ref, "speedup": ref / vec})
    return rows
