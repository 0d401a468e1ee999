"""``refimpl bench-speed``: how close to the machine, how far ahead of the peers.

Every figure is a median over ``--repeats`` timings; every comparison is a ratio of two
timings taken in the same run, interleaved (A, B, A, B, ...), so that load from other
processes on a shared machine hits both sides alike. Five measurements:

1. **Sampling** tokens/s with and without the KV cache at response lengths 32 and 128
   (a 2-layer d = 128 model with ``block_size`` ≥ prompt + 128; ``<eos>`` is masked out of
   the logits so every row generates exactly the requested length).
2. **One RL step** of the real trainer (chain task, 16 prompts × G = 8, GRPO) split into
   sample / score / advantages / loss + backward + optimizer, and the FLOPs of the step
   (``torch.utils.flop_counter``: matmuls of every forward and backward; attention scores
   are not counted, ≈ L/(6d) ≈ 4 % more) over its time, against a measured fp32 matmul peak
   at the same thread count.
3. **Algorithm overhead**: advantages + loss + its backward (to ``logp``) of every algorithm
   relative to GRPO, at the trainer's batch shape and as a fraction of the measured step.
4. **Vectorised vs reference loops**: ``advantages`` against ``reference_advantages`` (the
   paper's equations as plain Python loops) at ``B = 512, T = 128``.
5. **Our trainer vs TRL's GRPOTrainer** on the same weights (the GPT-2 twin from
   ``refimpl.scaleup.hf.to_hf_gpt2``), same batch (16 prompts × 8), group size, completion
   budget, temperature, threads; TRL's loss set to ours (``loss_type="grpo"``, ε = 0.2,
   β = 0: GRPO's seq-mean-token-mean clipped surrogate; our GRPO with ``kl_coef=0``).
"""

from __future__ import annotations

import dataclasses
import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from refimpl import algorithms
from refimpl.bench import format_machine, machine_info, markdown_table
from refimpl.core import RolloutBatch
from refimpl.runs.runlog import check_output_file, write_text_atomic
from refimpl.settings.limits import check_threads

TARGETS = {
    "kv_cache_speedup": 3.0,
    "algo_overhead_frac": 0.05,
    "trl_speedup": 3.0,
    "oracle_peak_frac": 0.40,  # rollouts at the oracle's batch size, share of the matmul peak
    "step_peak_frac": 0.60,  # one RL step's model FLOPs, share of the matmul peak
}
#: The sizes ``SpeedConfig`` fills in when they are not given: (full, ``--quick``).
SIZES: dict[str, tuple[Any, Any]] = {
    "repeats": (5, 2),
    "rl_steps": (10, 2),
    "trl_steps": (8, 2),
    "lengths": ((32, 128), (8, 16)),
    "big_batch": ((512, 128), (64, 32)),
    # prefixes × K rollouts, prefix tokens, new tokens: the oracle-sized sampling batch
    "oracle_batch": ((32, 32, 56, 32), (4, 8, 12, 8)),
}


@dataclass
class SpeedConfig:
    """Speed benchmark (figures are medians over repeats; ratios are measured in one run)."""

    repeats: int | None = None
    """timings per figure, the median is reported (None: 5, or 2 with --quick)"""
    threads: int = 1
    """torch CPU threads for every measurement (ours and TRL's alike)"""
    rl_steps: int | None = None
    """RL steps timed for the step breakdown, after one warm-up step (None: 10, or 2 with
    --quick)"""
    trl_steps: int | None = None
    """steps timed for each trainer in the TRL comparison, after one warm-up step (None: 8,
    or 2 with --quick)"""
    trl: bool = True
    """run the TRL comparison (needs the scaleup extra: trl, transformers, datasets)"""
    lengths: tuple[int, ...] | None = None
    """response lengths of the sampling benchmark (None: 32 128, or 8 16 with --quick)"""
    big_batch: tuple[int, int] | None = None
    """B, T of the vectorised-vs-reference comparison (None: 512 128, or 64 32 with --quick)"""
    oracle_batch: tuple[int, int, int, int] | None = None
    """prefixes, K, prefix length, new tokens of the oracle-sized sampling (None: 32 32 56 32,
    i.e. 1,024 rows, or 4 8 12 8 with --quick)"""
    commands: bool = False
    """also time the README's two jobs end to end, once each: the demo (``python -m
    refimpl.demo`` into an empty runs directory) and the test suite (``pytest -n auto`` in the
    repository); about 8 minutes on 2 cores"""
    quick: bool = False
    """tiny sizes (1-layer d = 32 model, few repeats) for what is not typed: checks the report
    is produced"""
    out: Path = Path("runs/bench/speed")
    """where report.md and results.json go"""
    runs_dir: Path = Path("runs")
    """where the warm-start cache lives"""

    def __post_init__(self) -> None:
        # What is not given takes the full size, or the quick one: a size that was typed is
        # kept, --quick or not.
        for name, (full, quick) in SIZES.items():
            if getattr(self, name) is None:
                setattr(self, name, quick if self.quick else full)
        for name in ("repeats", "threads", "rl_steps", "trl_steps"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')}: expected a positive integer")
        check_threads(self.threads, "--threads")


def _median_time(fn: Callable[[], Any], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _interleaved(fns: dict[str, Callable[[], Any]], repeats: int) -> dict[str, list[float]]:
    """Time each function ``repeats`` times, round-robin, after one warm-up call each."""
    for fn in fns.values():
        fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k].append(time.perf_counter() - t0)
    return times


def _median_ratio(num: list[float], den: list[float]) -> float:
    return statistics.median(a / b for a, b in zip(num, den))


# ---------------------------------------------------------------------------------------------
# 0. The machine's matmul peak.
# ---------------------------------------------------------------------------------------------


def matmul_peak(repeats: int, n: int = 1024) -> float:
    """FLOP/s of an ``n × n`` fp32 matmul at the current thread count (best of the repeats:
    a peak, not a typical figure)."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    out = torch.empty(n, n)
    torch.mm(a, b, out=out)
    best = float("inf")
    for _ in range(max(3, repeats)):
        t0 = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b, out=out)
        best = min(best, (time.perf_counter() - t0) / 4)
    return 2 * n**3 / best


# ---------------------------------------------------------------------------------------------
# 1. Sampling with and without the KV cache.
# ---------------------------------------------------------------------------------------------


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
        times = _interleaved(
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
                "speedup": _median_ratio(times["uncached"], times["cached"]),
            }
        )
    return rows


def decode_flops_per_token(n_layer: int, n_embd: int, vocab_size: int) -> int:
    """Matmul FLOPs of one decoded token of the GPT: ``2 · (12 · n_layer · d² + V · d)`` (the
    q/k/v, output and MLP projections of every layer and the tied head; attention over the
    cache is not counted, as in ``bench_step``)."""
    return 2 * (12 * n_layer * n_embd**2 + vocab_size * n_embd)


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
    times = _interleaved({"shared": lambda: run(True), "reference": lambda: run(False)},
                         cfg.repeats)  # fmt: skip
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
        "shared_fraction_of_peak": tokens / shared_s * per_token / peak,
        "reference_fraction_of_peak": tokens / reference_s * per_token / peak,
        "speedup": _median_ratio(times["reference"], times["shared"]),
    }
    result["oracle"] = _oracle_rollouts(cfg, model_size, per_token, peak)
    return result


def _oracle_rollouts(
    cfg: SpeedConfig, model_size: dict[str, int], per_token: int, peak: float
) -> dict[str, Any]:
    """One oracle batch: ``prefixes`` completions of ``new/2`` tokens, every proper prefix
    continued K times, all prefixes of one length in one call of ``prefixes · K`` rows, as
    ``refimpl credit`` runs them."""
    from refimpl.diagnostics.credit_oracle import token_values
    from refimpl.model import GPTConfig
    from refimpl.sampling.groups import sample_groups
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
    seconds = _median_time(oracle, max(1, cfg.repeats // 2), warmup=0)
    return {
        "completions": n_prefix,
        "prefixes": values.prefixes,
        "rows_per_call": n_prefix * k,
        "tokens": values.sampled_tokens,
        "seconds": seconds,
        "tok_s": values.sampled_tokens / seconds,
        "fraction_of_peak": values.sampled_tokens / seconds * per_token / peak,
    }


# ---------------------------------------------------------------------------------------------
# 2. One RL step, broken down, and its FLOPs.
# ---------------------------------------------------------------------------------------------


def _train_config(cfg: SpeedConfig, **changes):
    from refimpl.settings.train import TrainConfig
    from refimpl.settings.warmstart import ModelConfig, WarmstartConfig

    ws = WarmstartConfig(runs_dir=cfg.runs_dir, progress=False, threads=cfg.threads)
    if cfg.quick:
        ws = dataclasses.replace(
            ws,
            steps=100,
            batch_size=32,
            eval_problems=20,
            model=ModelConfig(n_layer=1, n_embd=32, n_head=2),
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

    trainer = Trainer(_train_config(cfg, algo="grpo"))
    trainer.train_step()  # warm-up
    trainer.step += 1
    records = []
    for _ in range(cfg.rl_steps):
        records.append(trainer.train_step())
        trainer.step += 1
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
        "fraction_of_peak": flops / med["time_step"] / peak,
        "max_new_tokens": trainer.max_new_tokens,
    }


# ---------------------------------------------------------------------------------------------
# 3–4. Advantages + loss of every algorithm; vectorised vs reference loops.
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
    times = _interleaved(fns, 3 * cfg.repeats)
    times = {k: [t / calls for t in v] for k, v in times.items()}
    rows = []
    for name in algorithms.NAMES:
        t = statistics.median(times[name])
        extra = t - statistics.median(times["grpo"])
        rows.append(
            {
                "algo": name,
                "adv_loss_s": t,
                "vs_grpo": _median_ratio(times[name], times["grpo"]),
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
        vec = _median_time(lambda m=module, c=algo_cfg: m.advantages(batch, c), cfg.repeats)
        t0 = time.perf_counter()
        module.reference_advantages(batch, algo_cfg)  # loops: one timing (seconds each)
        ref = time.perf_counter() - t0
        rows.append({"algo": name, "vectorised_s": vec, "reference_s": ref, "speedup": ref / vec})
    return rows


# ---------------------------------------------------------------------------------------------
# 5. Our trainer vs TRL's GRPOTrainer.
# ---------------------------------------------------------------------------------------------


def _trl_config(output_dir: str, ours: Any, max_steps: int) -> Any:
    """TRL's ``GRPOConfig`` with our trainer's settings: the same batch, budget, optimiser
    and sampling, GRPO's loss with β = 0, on the CPU, no logging or saving."""
    from trl import GRPOConfig

    N, G = ours.cfg.prompts_per_step, ours.cfg.group_size
    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=N * G,
        num_generations=G,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_iterations=1,
        max_completion_length=ours.max_new_tokens,
        max_steps=max_steps,
        learning_rate=ours.cfg.lr,
        max_grad_norm=ours.cfg.grad_clip,
        temperature=ours.cfg.temperature,
        top_k=0,
        loss_type="grpo",
        epsilon=0.2,
        beta=0.0,
        scale_rewards="group",
        logging_steps=10_000,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        bf16=False,
        disable_tqdm=True,
        dataloader_num_workers=0,
        shuffle_dataset=False,
        adam_beta1=0.9,
        adam_beta2=0.999,
        weight_decay=0.0,
        lr_scheduler_type="constant",
        warmup_steps=0,
    )


def _trl_problems(ours, steps: int):
    """TRL's dataset of ``N · steps`` problems (fresh ones, not the held-out set) and its
    reward function, which scores a completion with the task, as our trainer does."""
    from datasets import Dataset

    from refimpl.streams import HELD_OUT_SEED

    task, N = ours.task, ours.cfg.prompts_per_step
    problems = task.sample(N * steps, np.random.default_rng([HELD_OUT_SEED + 1, 0]))
    dataset = Dataset.from_list([{"prompt": p.prompt, "index": i} for i, p in enumerate(problems)])

    def reward(completions: list[str], index: list[int], **_: object) -> list[float]:
        return [float(r) for r in task.score([problems[i] for i in index], completions)]

    return dataset, reward


def _hf_twin(ours):
    """Our model as a Hugging Face GPT-2 with the same weights, in train mode, and the
    character tokenizer TRL drives it with (its special tokens set for ``generate``)."""
    from refimpl.scaleup.hf import char_tokenizer, to_hf_gpt2
    from toy_envs import TOKENIZER

    tokenizer = char_tokenizer(TOKENIZER)
    twin = to_hf_gpt2(ours.model).train()
    twin.generation_config.eos_token_id = tokenizer.eos_token_id
    twin.generation_config.pad_token_id = tokenizer.pad_token_id
    twin.generation_config.bos_token_id = tokenizer.bos_token_id
    return twin, tokenizer


def bench_trl(cfg: SpeedConfig) -> dict[str, Any]:
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    import tempfile

    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from refimpl.train import Trainer

    ours = Trainer(_train_config(cfg, algo="grpo", algo_args=("kl_coef=0",)))
    max_new_tokens = ours.max_new_tokens
    N, G = ours.cfg.prompts_per_step, ours.cfg.group_size
    steps = cfg.trl_steps + 1
    dataset, reward = _trl_problems(ours, steps)
    twin, tokenizer = _hf_twin(ours)

    class Timer(TrainerCallback):
        def __init__(self) -> None:
            self.times: list[float] = []

        def on_step_begin(self, *_args, **_kwargs):  # noqa: ANN002, ANN003
            self._t0 = time.perf_counter()

        def on_step_end(self, *_args, **_kwargs):  # noqa: ANN002, ANN003
            self.times.append(time.perf_counter() - self._t0)

    timer = Timer()
    with tempfile.TemporaryDirectory() as tmp:
        args = _trl_config(tmp, ours, max_steps=steps)
        peer = GRPOTrainer(
            model=twin,
            reward_funcs=reward,
            args=args,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[timer],
        )
        torch.set_num_threads(cfg.threads)
        # Interleave: one of our steps, one of TRL's, ... so load hits both alike. TRL's
        # train() owns its loop, so ours run from its step callback.
        our_times: list[float] = []

        class Interleave(TrainerCallback):
            def on_step_begin(self, *_args, **_kwargs):  # noqa: ANN002, ANN003
                t0 = time.perf_counter()
                ours.train_step()
                ours.step += 1
                our_times.append(time.perf_counter() - t0)
                timer._t0 = time.perf_counter()

        peer.add_callback(Interleave())
        peer.train()
    ours_med = statistics.median(our_times[1:])
    trl_med = statistics.median(timer.times[1:])
    return {
        "ours_step_s": ours_med,
        "trl_step_s": trl_med,
        "speedup": _median_ratio(timer.times[1:], our_times[1:]),
        "ours_steps_per_s": 1 / ours_med,
        "trl_steps_per_s": 1 / trl_med,
        "steps": len(timer.times) - 1,
        "rows": N * G,
        "group_size": G,
        "max_new_tokens": max_new_tokens,
    }


# ---------------------------------------------------------------------------------------------
# 6. The README's two jobs, end to end.
# ---------------------------------------------------------------------------------------------


def bench_commands() -> dict[str, Any]:
    """Wall time of the demo from an empty runs directory and of the test suite, each run
    once in a subprocess (they are minutes long: one timing each, not a median)."""
    import re
    import subprocess
    import sys
    import tempfile

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "refimpl.demo", "--runs-dir", tmp],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        out["demo_s"] = time.perf_counter() - start
    repo = Path(__file__).resolve().parents[2]
    if (repo / "tests").is_dir():
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-n", "auto", "-q", "-p", "no:cacheprovider"],
            cwd=repo, capture_output=True, text=True,
        )  # fmt: skip
        out["tests_s"] = time.perf_counter() - start
        summary = [line for line in done.stdout.splitlines() if re.search(r"\d+ passed", line)]
        out["tests_summary"] = summary[-1].strip("= ") if summary else f"exit {done.returncode}"
    return out


# ---------------------------------------------------------------------------------------------
# The report.
# ---------------------------------------------------------------------------------------------


def run_speed(cfg: SpeedConfig) -> tuple[dict[str, Any], Path]:
    """Run every measurement; write ``results.json`` and ``report.md`` under ``cfg.out``."""
    for name in ("results.json", "report.md"):  # before an hour of measurement
        check_output_file(cfg.out / name, "--out")
    torch.set_num_threads(cfg.threads)
    cfg.out.mkdir(parents=True, exist_ok=True)
    info = machine_info()
    model_size = (
        dict(n_layer=1, n_embd=32, n_head=2) if cfg.quick else dict(n_layer=2, n_embd=128, n_head=4)
    )
    started = time.perf_counter()
    results: dict[str, Any] = {
        "machine": info,
        "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()
        },
    }
    results["matmul_peak_flops_per_s"] = peak = matmul_peak(cfg.repeats)
    results["sampling"] = bench_sampling(cfg, model_size)
    results["oracle_sampling"] = bench_oracle(cfg, model_size, peak)
    results["step"] = step = bench_step(cfg, peak)
    results["algorithms"] = bench_algorithms(
        cfg, step["rows"], step["max_new_tokens"], step["time_step"]
    )
    results["reference"] = bench_reference(cfg, *cfg.big_batch)
    results["big_batch_algorithms"] = bench_algorithms(
        cfg, *cfg.big_batch, step_time=step["time_step"]
    )
    if cfg.trl:
        results["trl"] = bench_trl(cfg)
    if cfg.commands:
        results["commands"] = bench_commands()
    results["machine_after"] = machine_info()
    results["wall_s"] = time.perf_counter() - started
    write_text_atomic(cfg.out / "results.json", json.dumps(results, indent=2))
    report = cfg.out / "report.md"
    write_text_atomic(report, format_speed(results))
    return results, report


def _ok(ok: bool) -> str:
    return "met" if ok else "**missed**"


def format_speed(r: dict[str, Any]) -> str:
    """The speed benchmark's results as the markdown of ``docs/benchmarks.md``."""
    cfg = r["config"]
    lines = [
        f"Machine: {format_machine(r['machine'])}; load average after: "
        f"{', '.join(str(x) for x in r['machine_after']['load_1_5_15'])}. "
        f"{cfg['threads']} torch thread(s), medians over {cfg['repeats']} repeats, "
        f"wall time {r['wall_s']:.0f} s.",
        "",
    ]
    for section in (
        _format_sampling,
        _format_oracle,
        _format_step,
        _format_algorithms,
        _format_reference,
        _format_trl,
        _format_commands,
    ):
        lines += section(r)
    return "\n".join(lines)


def _format_sampling(r: dict[str, Any]) -> list[str]:
    """KV cache vs recomputed prefix, per response length."""
    lines = [
        "**Sampling** (16 prompts × G = 8 = 128 rows, every row generates the full length):",
        "",
    ]
    rows = [
        [
            s["response_length"],
            f"{s['cached_tok_s']:,.0f}",
            f"{s['uncached_tok_s']:,.0f}",
            f"{s['speedup']:.1f}×",
            _ok(s["speedup"] >= TARGETS["kv_cache_speedup"]),
        ]
        for s in r["sampling"]
    ]
    lines += [
        markdown_table(
            ["response length", "KV cache tok/s", "no cache tok/s", "speed-up", "target ≥ 3×"], rows
        ),
        "",
    ]
    return lines


def _format_oracle(r: dict[str, Any]) -> list[str]:
    """Sampling at the oracle's batch size: the shared-prefix path against the reference."""
    o = r["oracle_sampling"]
    target = TARGETS["oracle_peak_frac"]
    lines = [
        f"**Sampling at the oracle's size** ({o['prefixes']} prefixes of {o['prefix_length']} "
        f"tokens × K = {o['rollouts']} = {o['rows']:,} rows, {o['new_tokens']} new tokens each; "
        f"{o['flops_per_token'] / 1e6:.2f} MFLOP of matmuls per token; share of the "
        f"{r['matmul_peak_flops_per_s'] / 1e9:.1f} GFLOP/s matmul peak):",
        "",
    ]
    rows = [
        ["shared-prefix cache (default)", f"{o['shared_tok_s']:,.0f}",
         f"{o['shared_fraction_of_peak']:.1%}", f"{o['speedup']:.2f}×",
         _ok(o["shared_fraction_of_peak"] >= target)],
        ["reference (list cache, prefix per row)", f"{o['reference_tok_s']:,.0f}",
         f"{o['reference_fraction_of_peak']:.1%}", "1×", ""],
    ]  # fmt: skip
    oracle = o["oracle"]
    rows.append(
        [f"oracle rollouts (`token_values`, {oracle['prefixes']:,} prefixes × K, "
         f"{oracle['rows_per_call']:,} rows a call)", f"{oracle['tok_s']:,.0f}",
         f"{oracle['fraction_of_peak']:.1%}", "", _ok(oracle["fraction_of_peak"] >= target)]
    )  # fmt: skip
    lines += [
        markdown_table(
            ["path", "tokens/s", "share of peak", "speed-up", f"target ≥ {target:.0%}"], rows
        ),
        "",
    ]
    return lines


def _format_step(r: dict[str, Any]) -> list[str]:
    """One RL step: its parts, its FLOPs against the machine's matmul peak."""
    s = r["step"]
    lines = [
        f"**One RL step** (chain, GRPO, {s['rows']} rows, mean completion "
        f"{s['length_mean']:.1f} tokens, {s['params']:,} parameters): "
        f"{s['time_step'] * 1e3:.0f} ms = {s['steps_per_s']:.2f} steps/s.",
        "",
    ]
    parts = [
        ("sample", "time_sample"),
        ("score (verifier)", "time_score"),
        ("advantages (+ reference log-probs)", "time_adv"),
        ("loss forward + backward + optimizer", "time_loss"),
        ("other", "time_other"),
    ]
    lines += [
        markdown_table(
            ["part", "ms", "share"],
            [[p, f"{s[k] * 1e3:.1f}", f"{s[k] / s['time_step']:.0%}"] for p, k in parts],
        ),
        "",
    ]
    lines += [
        f"Model FLOPs of one step (every forward and backward, matmuls): "
        f"{s['step_flops'] / 1e9:.2f} GFLOP → {s['achieved_flops_per_s'] / 1e9:.2f} "
        f"GFLOP/s achieved vs a measured fp32 matmul peak of "
        f"{s['peak_flops_per_s'] / 1e9:.1f} GFLOP/s (1024², same threads): "
        f"**{s['fraction_of_peak']:.1%} of peak** (target ≥ "
        f"{TARGETS['step_peak_frac']:.0%}: {_ok(s['fraction_of_peak'] >= TARGETS['step_peak_frac'])}).",
        "",
    ]
    return lines


def _format_algorithms(r: dict[str, Any]) -> list[str]:
    """Advantages + loss + backward of every algorithm, two batch shapes."""
    cfg, s = r["config"], r["step"]
    lines = [
        "**Advantages + loss + backward to log-probs, per algorithm** (trainer's shape "
        f"B = {s['rows']}, T = {s['max_new_tokens']}; and B × T = {cfg['big_batch'][0]} × "
        f"{cfg['big_batch'][1]}):",
        "",
    ]
    big = {b["algo"]: b for b in r["big_batch_algorithms"]}
    rows = [
        [
            a["algo"],
            f"{a['adv_loss_s'] * 1e3:.2f}",
            f"{a['vs_grpo']:.2f}×",
            f"{a['extra_frac_of_step']:+.1%}",
            _ok(a["extra_frac_of_step"] <= TARGETS["algo_overhead_frac"]),
            f"{big[a['algo']]['adv_loss_s'] * 1e3:.1f}",
            f"{big[a['algo']]['vs_grpo']:.2f}×",
        ]
        for a in r["algorithms"]
    ]
    lines += [
        markdown_table(
            [
                "algorithm",
                "ms (step shape)",
                "vs GRPO",
                "extra vs GRPO, share of a step",
                "target ≤ 5 %",
                f"ms ({cfg['big_batch'][0]}×{cfg['big_batch'][1]})",
                "vs GRPO",
            ],
            rows,
        ),
        "",
    ]
    return lines


def _format_reference(r: dict[str, Any]) -> list[str]:
    """Vectorised advantages against the reference loops."""
    cfg = r["config"]
    lines = [
        f"**Vectorised vs reference loops** (`advantages` vs `reference_advantages`, "
        f"B = {cfg['big_batch'][0]}, T = {cfg['big_batch'][1]}):",
        "",
    ]
    rows = [
        [
            a["algo"],
            f"{a['vectorised_s'] * 1e3:.2f}",
            f"{a['reference_s'] * 1e3:,.0f}",
            f"{a['speedup']:,.0f}×",
        ]
        for a in r["reference"]
    ]
    lines += [
        markdown_table(["algorithm", "vectorised ms", "reference loops ms", "speed-up"], rows),
        "",
    ]
    return lines


def _format_trl(r: dict[str, Any]) -> list[str]:
    """Our trainer against TRL's ``GRPOTrainer``, when that part ran."""
    if "trl" not in r:
        return []
    lines: list[str] = []
    t = r["trl"]
    lines += [
        f"**Our trainer vs TRL `GRPOTrainer`** (same GPT-2 weights, {t['rows']} "
        f"completions = {t['rows'] // t['group_size']} prompts × G = "
        f"{t['group_size']}, ≤ {t['max_new_tokens']} new tokens, GRPO loss with "
        f"β = 0 on both sides, {t['steps']} interleaved steps each):",
        "",
    ]
    lines += [
        markdown_table(
            ["trainer", "s/step", "steps/s", "ratio", "target ≥ 3×"],
            [
                [
                    "refimpl Trainer",
                    f"{t['ours_step_s']:.3f}",
                    f"{t['ours_steps_per_s']:.2f}",
                    f"{t['speedup']:.1f}× faster",
                    _ok(t["speedup"] >= TARGETS["trl_speedup"]),
                ],
                [
                    "TRL GRPOTrainer",
                    f"{t['trl_step_s']:.3f}",
                    f"{t['trl_steps_per_s']:.2f}",
                    "1×",
                    "",
                ],
            ],
        ),
        "",
    ]
    return lines


def _format_commands(r: dict[str, Any]) -> list[str]:
    """The demo's and the suite's wall time, when measured (``--commands``)."""
    c = r.get("commands")
    if not c:
        return []
    rows = [["`make demo` (from an empty runs directory)", f"{c['demo_s']:.0f}", "≤ 90",
             _ok(c["demo_s"] <= 90)]]  # fmt: skip
    if "tests_s" in c:
        rows.append([f"`make test`'s tests ({c['tests_summary']})", f"{c['tests_s']:.0f}",
                     "≤ 300", _ok(c["tests_s"] <= 300)])  # fmt: skip
    return [
        "**The README's two jobs** (each run once, end to end, in a subprocess):",
        "",
        markdown_table(["job", "s", "target s", "verdict"], rows),
        "",
    ]


def main(cfg: SpeedConfig) -> Path:
    _results, report = run_speed(cfg)
    print(report.read_text())
    print(f"report: {report}")
    return report
