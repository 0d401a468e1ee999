"""``refimpl bench-speed``'s comparison with a peer: our trainer against TRL's
``GRPOTrainer`` on the same weights (the GPT-2 twin from ``refimpl.scaleup.hf.to_hf_gpt2``),
the same batch, group size, completion budget, temperature and threads, TRL's loss set to
ours (ε = 0.2, β = 0: the seq-mean-token-mean clipped surrogate; our baseline with
``kl_coef=0``), one step of each in turn."""

from __future__ import annotations

import statistics
import time
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from refimpl import algorithms
from refimpl.bench.speed_step import train_config
from refimpl.bench.speed_timing import median_ratio

if TYPE_CHECKING:
    from refimpl.bench.speed_settings import SpeedConfig


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
        # TRL names its losses after the algorithms whose aggregation they compute (grpo,
        # dr_grpo, dapo, bnpo): the one of the algorithm we train, our baseline.
        loss_type=ours.cfg.algo,
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

    from refimpl.problem_streams import HELD_OUT_SEED

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

    ours = Trainer(train_config(cfg, algo=algorithms.BASELINE, algo_args=("kl_coef=0",)))
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
        "speedup": median_ratio(timer.times[1:], our_times[1:]),
        "ours_steps_per_s": 1 / ours_med,
        "trl_steps_per_s": 1 / trl_med,
        "steps": len(timer.times) - 1,
        "rows": N * G,
        "group_size": G,
        "max_new_tokens": max_new_tokens,
    }
