"""A task a real chat model can learn on CPU: arithmetic asked in a chat, answered in prose.

The toy tasks fix a bare answer format that a pretrained chat model does not write. Here the
same problems (``toy_envs`` generators) are asked through the model's chat template and the
reply is scored by :func:`toy_envs.freeform.freeform_reward`: the integer the reply ends on
(or a marked answer), never ``eval``.

Pieces, each used by ``scripts/experiments/real_model/run_trl.py`` (TRL),
``scripts/experiments/real_model/run_hf_loop.py`` (hand-written loop), notebook 04 and the
tests:

* :class:`ChatTask`: problem → chat messages (one worked example, then the question), reward,
  and a held-out split that never overlaps the training problems;
* :func:`evaluate`: ``n`` samples per held-out problem at temperature 1 (no top-k/top-p),
  success (mean pass@1) with its standard error over problems, unbiased pass@k, the fraction
  of replies cut by the token budget, and the mean token entropy of the sampled replies;
* :func:`trl_dataset`, :func:`trl_reward`: the same task for ``RefimplGRPOTrainer``;
* :func:`summarise_trl_logs`: entropy, clip and mask fractions over a TRL run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from transformers import TrainerCallback

import toy_envs
from refimpl.contract import SUCCESS_THRESHOLD, require
from refimpl.evaluate import mean_pass_at_k
from refimpl.problem_streams import HELD_OUT_SEED
from toy_envs import Problem
from toy_envs.freeform import freeform_reward

#: The chosen task (docs/scaleup.md, section "A real model learns"): two-digit addition. With
#: the worked example below, SmolLM2-135M-Instruct solves 12 % of the held-out ones at
#: T = 1 (100 problems × 8 samples, sampling seed 0; 9.4 % with seed 1; pass@8 0.39-0.49).
DEFAULT_TASK = "addition"
DEFAULT_KNOBS: dict[str, object] = {"digits": 2}
#: One worked example in the conversation: it shows the answer format. Without it the 135M
#: model mostly answers with prose that a short budget cuts off before any number (2-5 %).
DEFAULT_EXAMPLE = ("4+3-2", 5)
DEFAULT_INSTRUCTION = "Compute {question}."
#: An empty system turn: the template's default one would add 19 tokens to every prompt, and
#: every forward pass of training reads the prompt (49 tokens in all with this one).
DEFAULT_SYSTEM = ""


@dataclass(frozen=True)
class ChatTask:
    """A ``toy_envs`` task asked in a chat and scored from free text.

    Attributes:
        task: ``toy_envs`` task name.
        knobs: that task's knobs (e.g. ``{"digits": 2}``).
        instruction: the user turn; ``{question}`` becomes the toy prompt without its ``=``.
        example: ``(question, answer)`` of the worked example shown before the question, or
            ``None`` for none. The assistant's turn in it is ``"<question> = <answer>"``.
        system: the system turn, or ``None`` for the chat template's default (SmolLM2's
            names the model and its maker: 19 tokens in front of every prompt).
    """

    task: str = DEFAULT_TASK
    knobs: dict = field(default_factory=lambda: dict(DEFAULT_KNOBS))
    instruction: str = DEFAULT_INSTRUCTION
    example: tuple[str, int] | None = DEFAULT_EXAMPLE
    system: str | None = DEFAULT_SYSTEM

    def __post_init__(self) -> None:
        require("{question}" in self.instruction, "instruction", "a text with '{question}'")
        toy_envs.get_task(self.task, **self.knobs)  # validates the name and the knobs

    @property
    def toy(self) -> toy_envs.Task:
        return toy_envs.get_task(self.task, **self.knobs)

    def question(self, problem: Problem) -> str:
        return problem.prompt.rstrip("=")

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        """The conversation: the worked example (if any), then the question."""
        turns = [] if self.system is None else [{"role": "system", "content": self.system}]
        if self.example is not None:
            question, answer = self.example
            turns += [
                {"role": "user", "content": self.instruction.format(question=question)},
                {"role": "assistant", "content": f"{question} = {answer}"},
            ]
        turns.append(
            {"role": "user", "content": self.instruction.format(question=self.question(problem))}
        )
        return turns

    def prompt_text(self, tokenizer, problem: Problem) -> str:
        """The text the model continues: its chat template applied to :meth:`messages`."""
        return tokenizer.apply_chat_template(
            self.messages(problem), tokenize=False, add_generation_prompt=True
        )

    def reward(self, problem: Problem, reply: object) -> float:
        """1.0 if the reply commits to the right integer, else 0.0 (any object, no raise)."""
        return freeform_reward(reply, problem.answer)

    def held_out(self, n: int) -> list[Problem]:
        """``n`` distinct held-out problems (the same ones for every run), drawn from the seed
        ``problem_streams.HELD_OUT_SEED`` that training problems never use."""
        return self._distinct(n, HELD_OUT_SEED, exclude=())

    def training(self, n: int, seed: int, n_held_out: int) -> list[Problem]:
        """``n`` training problems from ``seed``, none of them among ``held_out(n_held_out)``."""
        require(seed != HELD_OUT_SEED, "seed", f"a seed other than {HELD_OUT_SEED} (held out)")
        return self._distinct(n, seed, exclude=set(self.held_out(n_held_out)), distinct=False)

    def _distinct(self, n: int, seed: int, exclude: object, distinct: bool = True) -> list[Problem]:
        require(isinstance(n, int) and n >= 1, "n", f"a positive int, got {n!r}")
        rng = np.random.default_rng(seed)
        toy, out, seen = self.toy, [], set()
        for _ in range(1000):
            for p in toy.sample(n, rng):
                if p in exclude or (distinct and p in seen):
                    continue
                seen.add(p)
                out.append(p)
                if len(out) == n:
                    return out
        raise ValueError(f"n: the task {self.task} {self.knobs} has fewer than {n} problems")


# ---------------------------------------------------------------------------------------------
# Held-out evaluation
# ---------------------------------------------------------------------------------------------


@dataclass
class Evaluation:
    """Held-out success of a model on a :class:`ChatTask` (see :func:`evaluate`)."""

    n_problems: int
    n_samples: int
    success: float  # mean over problems of (correct samples / n): pass@1
    success_se: float  # its standard error over problems
    pass_at_k: dict[int, float]
    clipped_frac: float  # replies that hit the token budget (no end of turn)
    mean_tokens: float  # reply length in tokens, end of turn included
    entropy: float  # mean full-vocabulary entropy of the sampled tokens (nats)
    seconds: float
    cpu_seconds: float  # CPU time of this process (= idle wall time when single-threaded)
    correct: list[int]  # correct samples per problem
    examples: list[tuple[str, str, float]]  # (question, reply, reward), the first samples

    def row(self) -> dict[str, float]:
        """The numbers of a result table."""
        out = {
            "success": self.success,
            "success_se": self.success_se,
            **{f"pass@{k}": v for k, v in self.pass_at_k.items()},
            "clipped_frac": self.clipped_frac,
            "mean_tokens": self.mean_tokens,
            "entropy": self.entropy,
            "eval_s": self.seconds,
            "eval_cpu_s": self.cpu_seconds,
        }
        return {k: round(float(v), 4) for k, v in out.items()}


def success_and_se(correct: Sequence[int], n: int) -> tuple[float, float]:
    """Mean of ``correct[p] / n`` over problems and its standard error (sample std / √P)."""
    require(len(correct) >= 1 and n >= 1, "correct", "at least one problem with n ≥ 1 samples")
    rates = np.asarray(correct, dtype=np.float64) / n
    se = float(rates.std(ddof=1) / math.sqrt(len(rates))) if len(rates) > 1 else float("nan")
    return float(rates.mean()), se


@torch.no_grad()
def evaluate(
    model,
    tokenizer,
    task: ChatTask,
    problems: Sequence[Problem],
    *,
    n_samples: int = 4,
    max_new_tokens: int = 12,
    batch_size: int = 64,
    seed: int = 0,
    n_examples: int = 8,
    success_threshold: float = SUCCESS_THRESHOLD,
) -> Evaluation:
    """Sample ``n_samples`` replies per problem at T = 1 (no top-k/top-p) and score them: a
    reply is correct when its reward is ≥ ``success_threshold``.

    ``batch_size`` replies are generated at once (``batch_size // n_samples`` prompts). The
    entropy of each sampled token is computed from the logits ``generate`` already returns, so
    it costs no extra forward pass.
    """
    require(n_samples >= 1, "n_samples", f"at least 1, got {n_samples}")
    require(len(problems) >= 1, "problems", "at least one problem")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    eos = tokenizer.eos_token_id
    prompts_per_batch = max(1, batch_size // n_samples)
    torch.manual_seed(seed)
    t0, cpu0 = time.perf_counter(), time.process_time()
    correct, clipped, lengths, examples = [], 0, [], []
    entropy_sum, entropy_tokens = 0.0, 0
    for start in range(0, len(problems), prompts_per_batch):
        chunk = problems[start : start + prompts_per_batch]
        enc = tokenizer(
            [task.prompt_text(tokenizer, p) for p in chunk], return_tensors="pt", padding=True
        ).to(device)
        out = generate_shared_prefix(
            model,
            enc["input_ids"],
            enc["attention_mask"],
            n_samples,
            max_new_tokens,
            eos,
            tokenizer.pad_token_id,
        )
        P = enc["input_ids"].shape[1]
        replies = out.sequences[:, P:]
        mask, entropy = reply_mask_and_entropy(replies, out.logits, eos)
        entropy_sum += float((entropy * mask).sum())
        entropy_tokens += int(mask.sum())
        clipped += int((~(replies == eos).any(dim=1)).sum())
        lengths += mask.sum(dim=1).tolist()
        texts = tokenizer.batch_decode(replies, skip_special_tokens=True)
        for j, problem in enumerate(chunk):
            rewards = [task.reward(problem, t) for t in texts[j * n_samples : (j + 1) * n_samples]]
            correct.append(int(sum(r >= success_threshold for r in rewards)))
            if len(examples) < n_examples:
                examples.append((task.question(problem), texts[j * n_samples], rewards[0]))
    model.train(was_training)
    success, se = success_and_se(correct, n_samples)
    ks = [k for k in (1, 2, 4, 8, 16, 32) if k <= n_samples]
    return Evaluation(
        n_problems=len(problems),
        n_samples=n_samples,
        success=success,
        success_se=se,
        pass_at_k=mean_pass_at_k(correct, n_samples, ks),
        clipped_frac=clipped / (len(problems) * n_samples),
        mean_tokens=float(np.mean(lengths)),
        entropy=entropy_sum / max(entropy_tokens, 1),
        seconds=time.perf_counter() - t0,
        cpu_seconds=time.process_time() - cpu0,
        correct=correct,
        examples=examples,
    )


def reply_mask_and_entropy(
    replies: torch.Tensor, step_logits: Sequence[torch.Tensor], eos_id: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[B, T]`` mask (reply tokens up to and including the first end of turn) and the
    full-vocabulary entropy at each step, from the raw logits ``generate`` returns
    (``output_logits=True``; one ``[B, V]`` tensor per step, before sampling at T = 1)."""
    is_eos = replies == eos_id
    mask = ((is_eos.long().cumsum(dim=1) - is_eos.long()) == 0).float()
    logp = torch.log_softmax(torch.stack(list(step_logits), dim=1).float(), dim=-1)
    entropy = (-(logp.exp() * logp).sum(dim=-1)).clamp(min=0.0)
    return mask, entropy * mask


def generate_shared_prefix(
    model,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    n_samples: int,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
):
    """``generate(..., num_return_sequences=n_samples)`` at T = 1, with each prompt read once.

    ``num_return_sequences`` copies every prompt ``n`` times *before* the first forward pass,
    so the prompt is processed ``n`` times; on CPU that prefill dominates the cost of short
    replies. Here the prompts (all but their last token) go through the model once, their
    key/value cache is repeated ``n`` times, and ``generate`` continues from it. Same
    distribution, same sampling order (``tests/scaleup/test_real_task.py`` checks the
    sequences equal plain ``generate``'s under one seed). Returns ``generate``'s dict output
    (``sequences`` and the raw ``logits`` of every step).
    """
    from refimpl.model import positions_from_mask

    prefix = model(
        input_ids=input_ids[:, :-1],
        attention_mask=attention_mask[:, :-1],
        position_ids=positions_from_mask(attention_mask[:, :-1]),
        use_cache=True,
    ).past_key_values
    prefix.batch_repeat_interleave(n_samples)
    return model.generate(
        input_ids=input_ids.repeat_interleave(n_samples, dim=0),
        attention_mask=attention_mask.repeat_interleave(n_samples, dim=0),
        past_key_values=prefix,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        return_dict_in_generate=True,
        output_logits=True,
    )


# ---------------------------------------------------------------------------------------------
# TRL
# ---------------------------------------------------------------------------------------------


def trl_dataset(task: ChatTask, problems: Sequence[Problem]):
    """A ``datasets.Dataset`` of conversational prompts (TRL applies the chat template)."""
    from datasets import Dataset

    return Dataset.from_list(
        [{"prompt": task.messages(p), "problem_index": i} for i, p in enumerate(problems)]
    )


def trl_reward(task: ChatTask, problems: Sequence[Problem]):
    """The reward function TRL calls: completions (conversational) → free-form rewards."""
    problems = list(problems)

    def reward(completions: list, problem_index: list[int], **_: object) -> list[float]:
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        return [task.reward(problems[i], t) for i, t in zip(problem_index, texts)]

    reward.__name__ = "freeform_reward"
    return reward


#: A result table's training columns and the TRL log keys they average.
TRL_KEYS = {
    "reward": "reward",
    "reward_std": "reward_std",
    "entropy": "entropy",
    "entropy_old": "refimpl/entropy_old",
    "adv_abs_mean": "refimpl/adv_abs_mean",
    "kept_groups_frac": "refimpl/kept_groups_frac",
    "clip_frac_low": "refimpl/clip_frac_low",
    "clip_frac_high": "refimpl/clip_frac_high",
    "kl_mask_frac": "refimpl/kl_mask_frac",
    "clipped_ratio": "completions/clipped_ratio",
    "step_time_s": "step_time",
}


def summarise_steps(steps: Sequence[dict], keys: dict[str, str] | None = None) -> dict[str, float]:
    """Means over training steps of the quantities a result table shows.

    ``keys`` maps each output name to the key it has in a step's dict (default: the same
    name); names missing from every step are left out.
    """
    keys = keys or {name: name for name in TRL_KEYS}
    out: dict[str, float] = {"optimizer_steps": float(len(steps))}
    for name, key in keys.items():
        values = [float(s[key]) for s in steps if s.get(key) is not None]
        if values:
            out[name] = round(float(np.mean(values)), 4)
    return out


def summarise_trl_logs(log_history: Sequence[dict]) -> dict[str, float]:
    """:func:`summarise_steps` of a TRL ``trainer.state.log_history`` (one entry per step)."""
    return summarise_steps([h for h in log_history if "loss" in h], TRL_KEYS)


def before_after_table(base: dict | None, runs: list[dict]) -> str:
    """Before/after held-out success and the training diagnostics, one row per run.

    ``base`` and each run's ``"after"`` are :meth:`Evaluation.row` dicts; each run has
    ``"algorithm"``, ``"train_s"`` and ``"train"`` (a :func:`summarise_steps` dict).
    """
    # The pass@k column shows the largest k the evaluations have (k ≤ samples per problem).
    evals = [e for e in [base, *(r.get("after") for r in runs)] if e is not None]
    k = max((int(key[5:]) for e in evals for key in e if key.startswith("pass@")), default=4)
    head = (
        f"| run | held-out success ± s.e. | pass@{k} | clipped | entropy (eval) | "
        "train entropy | clip frac (low/high) | TEPO mask | train time |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    )

    def fmt_eval(e: dict | None) -> list[str]:
        if e is None:
            return ["—"] * 4
        pk = e.get(f"pass@{k}")
        return [
            f"{e['success']:.3f} ± {e['success_se']:.3f}",
            "—" if pk is None else f"{pk:.3f}",
            f"{e['clipped_frac']:.2f}",
            f"{e['entropy']:.2f}",
        ]

    rows = []
    if base is not None:
        rows.append(["base model", *fmt_eval(base), "—", "—", "—", "—"])
    for r in runs:
        t = r["train"]
        clip = f"{t.get('clip_frac_low', 0):.3f} / {t.get('clip_frac_high', 0):.3f}"
        mask = f"{t['kl_mask_frac']:.3f}" if "kl_mask_frac" in t else "—"
        rows.append(
            [
                f"{r['algorithm']} after {int(t['optimizer_steps'])} steps",
                *fmt_eval(r.get("after")),
                f"{t.get('entropy', float('nan')):.2f}",
                clip,
                mask,
                f"{r['train_s'] / 60:.1f} min",
            ]
        )
    return head + "".join("| " + " | ".join(row) + " |\n" for row in rows)


def step_line(step: int, max_steps: int, logs: dict, rollout: dict | None = None) -> str:
    """One optimizer step of a TRL run, as ``StepPrinter`` prints it: loss, reward, entropy,
    clip and mask fractions and time; or, when the step trained on nothing, that, plainly (its
    entropy and fractions are then means over no token: 0, not a measurement).

    TRL logs a rollout's reward and kept groups only on the optimizer step that generated it;
    ``rollout`` carries them to the rollout's other steps. Whether *this* step trained on
    anything is read from its own loss metrics: every advantage of its micro-batch 0 (mean and
    spread both 0) is nothing to train on, whatever the rollout's other micro-batches held."""
    rollout = {**(rollout or {}), **{k: v for k, v in logs.items() if k in ROLLOUT_KEYS}}
    reward = rollout.get("reward", float("nan"))
    if rollout.get("refimpl/kept_groups_frac", 1.0) == 0:
        why = "every group's rewards were equal, so dynamic sampling dropped every group"
    elif logs.get("refimpl/adv_abs_mean", 1.0) == 0 or (
        logs.get("refimpl/adv_mean", 1.0) == 0 and logs.get("refimpl/adv_std", 1.0) == 0
    ):
        why = "every group's rewards were equal, so every advantage was 0"
    else:
        keys = ("loss", "entropy", "refimpl/clip_frac_low", "refimpl/clip_frac_high",
                "refimpl/kl_mask_frac", "step_time")  # fmt: skip
        shown = {k.split("/")[-1]: round(float(logs[k]), 4) for k in keys if k in logs}
        if "reward" in rollout:
            shown = {
                "loss": shown.pop("loss", float("nan")),
                "rollout reward": round(float(reward), 4),
                **shown,
            }
        return f"step {step}/{max_steps} {shown}"
    loss = float(logs.get("loss", float("nan")))
    return (f"step {step}/{max_steps}: trained on nothing ({why}; loss {loss:.4g}, rollout "
            f"mean reward {reward:.3f})")  # fmt: skip


#: What TRL logs once per rollout (on the step that generated it), not per optimizer step.
ROLLOUT_KEYS = ("reward", "refimpl/kept_groups_frac", "refimpl/adv_abs_mean")


class StepPrinter(TrainerCallback):
    """Prints one line per optimizer step (``step_line``), every step checked for training on
    nothing, with the rollout's reward carried to its later steps."""

    def __init__(self) -> None:
        self.rollout: dict = {}

    def on_log(self, args, state, control, logs=None, **kwargs):  # noqa: ANN001
        if logs and "loss" in logs:
            if "reward" in logs:  # a new rollout: its figures replace the last one's
                self.rollout = {k: logs[k] for k in ROLLOUT_KEYS if k in logs}
            print(step_line(state.global_step, state.max_steps, logs, self.rollout), flush=True)


#: The ``GRPOConfig`` settings ``train_trl`` never varies: a constant learning rate without
#: warm-up, a log record per optimizer step and no reports, nothing saved, float32, plain
#: sampling at temperature 1 (no top-k / top-p truncation), problems in order, no progress
#: bars (the caller reports).
TRL_FIXED_ARGS: dict[str, object] = {
    "lr_scheduler_type": "constant",
    "warmup_steps": 0,
    "logging_steps": 1,
    "report_to": [],
    "save_strategy": "no",
    "bf16": False,
    "temperature": 1.0,
    "top_k": 0,
    "top_p": 1.0,
    "shuffle_dataset": False,
    "disable_tqdm": True,
}


def _rollout_problems(
    problems: Sequence[Problem],
    prompts_per_step: int,
    rollouts: int,
    completions: int,
    minibatches: int,
) -> list[Problem]:
    """The problems :func:`train_trl` asks, in order, after checking that its minibatches
    divide a rollout and that there are enough problems for every rollout."""
    require(completions % minibatches == 0, "minibatches",
            f"a divisor of prompts_per_step · group_size = {completions}")  # fmt: skip
    require(len(problems) >= prompts_per_step * rollouts, "problems",
            f"at least prompts_per_step · rollouts = {prompts_per_step * rollouts}")  # fmt: skip
    return list(problems)[: prompts_per_step * rollouts]


def train_trl(
    model,
    tokenizer,
    task: ChatTask,
    problems: Sequence[Problem],
    algorithm: str,
    *,
    algorithm_config: object = None,
    prompts_per_step: int = 8,
    group_size: int = 8,
    minibatches: int = 4,
    ppo_epochs: int = 1,
    rollouts: int = 4,
    max_new_tokens: int = 12,
    learning_rate: float = 2e-5,
    seed: int = 0,
    output_dir: str | None = None,
    progress: bool = False,
    callbacks: Sequence[TrainerCallback] = (),
):
    """Train ``model`` in place with ``RefimplGRPOTrainer``; returns the trainer.

    Each rollout samples ``group_size`` replies to each of ``prompts_per_step`` problems
    (taken in order from ``problems``) and is split into ``minibatches`` micro-batches, one
    optimizer step each, the whole rollout ``ppo_epochs`` times: so
    ``rollouts · minibatches · ppo_epochs`` optimizer steps, all but the first of each rollout
    off-policy (ratios ≠ 1, so clipping and TEPO's mask can act). Constant learning rate, no
    warm-up. ``progress`` prints one line per optimizer step; ``callbacks`` are added to the
    trainer (``scripts/experiments/claims/run_real.py`` evaluates with one).
    """
    import tempfile

    from transformers.trainer_callback import PrinterCallback

    from refimpl.scaleup.trl import GRPOConfig, RefimplGRPOTrainer

    completions = prompts_per_step * group_size
    problems = _rollout_problems(problems, prompts_per_step, rollouts, completions, minibatches)
    with tempfile.TemporaryDirectory() as tmp:
        args = GRPOConfig(
            output_dir=output_dir or tmp,
            # TRL's names (docs/scaleup.md maps them): a micro-batch per optimizer step,
            # steps_per_generation = our minibatches, num_generations = G, num_iterations =
            # our ppo_epochs.
            per_device_train_batch_size=completions // minibatches,
            steps_per_generation=minibatches,
            num_generations=group_size,
            num_iterations=ppo_epochs,
            max_completion_length=max_new_tokens,
            max_steps=rollouts * minibatches * ppo_epochs,
            learning_rate=learning_rate,
            seed=seed,
            **TRL_FIXED_ARGS,
            use_cpu=not torch.cuda.is_available(),
        )
        trainer = RefimplGRPOTrainer(
            model=model,
            reward_funcs=trl_reward(task, problems),
            args=args,
            train_dataset=trl_dataset(task, problems),
            processing_class=tokenizer,
            algorithm=algorithm,
            algorithm_config=algorithm_config,
        )
        # disable_tqdm makes the Trainer print every log dict; the caller reports instead.
        trainer.remove_callback(PrinterCallback)
        for callback in ([StepPrinter()] if progress else []) + list(callbacks):
            trainer.add_callback(callback)
        trainer.train()
    return trainer
