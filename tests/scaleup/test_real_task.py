"""The chat task, its held-out evaluation and its TRL glue, on a tiny random model (seconds)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from refimpl.evaluate import pass_at_k
from refimpl.problem_streams import HELD_OUT_SEED
from refimpl.scaleup.hf import char_tokenizer, token_logprobs_and_entropy
from refimpl.scaleup.real_task import (
    ChatTask,
    before_after_table,
    evaluate,
    generate_shared_prefix,
    reply_mask_and_entropy,
    success_and_se,
    summarise_steps,
    summarise_trl_logs,
    trl_reward,
)
from toy_envs import CharTokenizer, Problem

#: Characters of the default instruction, digits and the operators, so prompts encode exactly.
ALPHABET = "0123456789+-=. \nCampute"
CHAT_TEMPLATE = (
    "{% for m in messages %}{{ m['role'][0] }}:{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}a:{% endif %}"
)


@pytest.fixture(scope="module")
def tiny():
    tokenizer = char_tokenizer(CharTokenizer(ALPHABET))
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(
        Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            max_position_embeddings=256,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    ).eval()
    return model, tokenizer


def test_messages_show_one_worked_example_then_the_question() -> None:
    task = ChatTask()
    problem = Problem(prompt="12+34=", answer=46, numbers=(12, 34))
    turns = task.messages(problem)
    assert [t["role"] for t in turns] == ["system", "user", "assistant", "user"]
    assert turns[0]["content"] == ""  # an empty system turn replaces the template's default
    assert turns[2]["content"] == "4+3-2 = 5"  # the example's answer is right
    assert turns[3]["content"] == "Compute 12+34."
    assert len(ChatTask(example=None, system=None).messages(problem)) == 1
    with pytest.raises(ValueError, match="instruction"):
        ChatTask(instruction="no placeholder")
    with pytest.raises(ValueError, match="knob"):
        ChatTask(knobs={"digits": 2, "colour": 1})


def test_held_out_is_fixed_distinct_and_never_trained_on() -> None:
    task = ChatTask()
    held_out = task.held_out(100)
    assert held_out == task.held_out(100) and len(set(held_out)) == 100
    assert task.held_out(30) == held_out[:30]
    training = task.training(200, seed=0, n_held_out=100)
    assert len(training) == 200 and not set(training) & set(held_out)
    assert training != task.training(200, seed=1, n_held_out=100)
    with pytest.raises(ValueError, match="seed"):
        task.training(10, seed=HELD_OUT_SEED, n_held_out=100)
    with pytest.raises(ValueError, match="n"):  # 1-digit addition has only 100 problems
        ChatTask(knobs={"digits": 1}).held_out(101)


def test_reward_is_the_freeform_verifier() -> None:
    task, problem = ChatTask(), Problem(prompt="12+34=", answer=46, numbers=(12, 34))
    assert task.reward(problem, "12+34 = 46") == 1.0
    assert task.reward(problem, "12+34 = 47") == 0.0
    assert task.reward(problem, None) == 0.0


def test_success_and_standard_error_by_hand() -> None:
    # Rates 0, 1/2, 1: mean 1/2, sample std 1/2, s.e. (1/2)/√3.
    mean, se = success_and_se([0, 2, 4], 4)
    assert mean == 0.5 and se == pytest.approx(0.5 / math.sqrt(3))
    assert success_and_se([3, 3], 4) == (0.75, 0.0)


def test_shared_prefix_generation_equals_plain_generate(tiny) -> None:
    """Prompts of different lengths (left padding), three samples each, one seed."""
    model, tokenizer = tiny
    enc = tokenizer(["a:1+2=", "a:12+34=", "a:5="], return_tensors="pt", padding=True)
    kwargs = dict(max_new_tokens=6, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(3)
    plain = model.generate(
        **enc,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        num_return_sequences=3,
        pad_token_id=tokenizer.pad_token_id,
        return_dict_in_generate=True,
        output_logits=True,
        **kwargs,
    )
    torch.manual_seed(3)
    shared = generate_shared_prefix(
        model,
        enc.input_ids,
        enc.attention_mask,
        3,
        6,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    assert torch.equal(plain.sequences, shared.sequences)
    for a, b in zip(plain.logits, shared.logits):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_reply_entropy_equals_a_forward_pass(tiny) -> None:
    """The entropies read off generate's logits are those of a separate forward pass."""
    model, tokenizer = tiny
    enc = tokenizer(["a:1+2=", "a:12+34="], return_tensors="pt", padding=True)
    torch.manual_seed(0)
    out = generate_shared_prefix(
        model,
        enc.input_ids,
        enc.attention_mask,
        2,
        8,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
    )
    P = enc.input_ids.shape[1]
    replies = out.sequences[:, P:]
    mask, entropy = reply_mask_and_entropy(replies, out.logits, tokenizer.eos_token_id)
    attention = torch.cat([enc.attention_mask.repeat_interleave(2, dim=0), mask.long()], dim=1)
    with torch.no_grad():
        _, expected = token_logprobs_and_entropy(model, out.sequences, attention, P)
    torch.testing.assert_close(entropy, expected * mask, atol=1e-4, rtol=1e-4)


def test_reply_mask_keeps_the_first_end_of_turn_and_nothing_after() -> None:
    eos, V = 9, 5
    replies = torch.tensor([[5, eos, 7, eos], [5, 6, 7, 8], [eos, 1, 2, 3]])
    uniform = [torch.zeros(3, V) for _ in range(4)]  # entropy log V at every step
    mask, entropy = reply_mask_and_entropy(replies, uniform, eos)
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]], dtype=torch.float32)
    assert torch.equal(mask, expected)
    torch.testing.assert_close(entropy, expected * math.log(V))
    certain = [torch.tensor([[100.0, 0, 0, 0, 0]]).expand(3, V) for _ in range(4)]
    assert reply_mask_and_entropy(replies, certain, eos)[1].abs().max() < 1e-6


class _Always(ChatTask):
    """A task whose verifier always says ``value`` (to check the bookkeeping)."""

    value: float = 1.0

    def reward(self, problem: Problem, reply: object) -> float:
        return self.value


def test_evaluate_bookkeeping(tiny) -> None:
    model, tokenizer = tiny
    problems = ChatTask().held_out(5)
    right = _Always()
    e = evaluate(model, tokenizer, right, problems, n_samples=4, max_new_tokens=4, batch_size=8)
    assert e.correct == [4] * 5 and e.success == 1.0 and e.success_se == 0.0
    assert e.pass_at_k == {1: 1.0, 2: 1.0, 4: 1.0}
    wrong = _Always()
    object.__setattr__(wrong, "value", 0.0)
    e = evaluate(model, tokenizer, wrong, problems, n_samples=4, max_new_tokens=4, batch_size=8)
    assert e.correct == [0] * 5 and e.pass_at_k[4] == 0.0
    # A random model: budgets of 4 are mostly hit; entropies near log V.
    assert 0.0 <= e.clipped_frac <= 1.0 and 1.0 <= e.mean_tokens <= 4.0
    assert 0.0 < e.entropy <= math.log(len(tokenizer)) + 1e-6
    assert e.n_problems == 5 and len(e.examples) == 5 and model.training is False


def test_evaluate_counts_a_reply_correct_at_the_threshold_it_is_given(tiny) -> None:
    """A reward of 0.7 is a success at the default threshold (every Config's 0.5) and a
    failure at 0.8: the count follows ``success_threshold``."""
    model, tokenizer = tiny
    problems = ChatTask().held_out(3)
    partly = _Always()
    object.__setattr__(partly, "value", 0.7)
    kwargs = {"n_samples": 2, "max_new_tokens": 3, "batch_size": 8}
    assert evaluate(model, tokenizer, partly, problems, **kwargs).correct == [2] * 3
    high = evaluate(model, tokenizer, partly, problems, success_threshold=0.8, **kwargs)
    assert high.correct == [0] * 3 and high.success == 0.0


def test_evaluate_pass_at_k_matches_the_counts(tiny) -> None:
    model, tokenizer = tiny
    problems = ChatTask().held_out(6)

    class Half(ChatTask):
        def reward(self, problem: Problem, reply: object) -> float:
            return float(len(reply) % 2 == 0)  # some right, some wrong, by reply length

    e = evaluate(model, tokenizer, Half(), problems, n_samples=4, max_new_tokens=5, batch_size=8)
    for k, value in e.pass_at_k.items():
        assert value == pytest.approx(sum(pass_at_k(4, c, k) for c in e.correct) / 6)
    assert e.pass_at_k[1] == pytest.approx(e.success)
    assert e.pass_at_k[1] <= e.pass_at_k[2] <= e.pass_at_k[4]


def test_trl_reward_reads_conversational_completions() -> None:
    task = ChatTask()
    problems = [Problem("1+2=", 3, (1, 2)), Problem("5+5=", 10, (5, 5))]
    reward = trl_reward(task, problems)
    completions = [
        [{"role": "assistant", "content": "1+2 = 3"}],
        [{"role": "assistant", "content": "1+2 = 4"}],
        [{"role": "assistant", "content": "The answer is 10."}],
        "5+5 = 10",  # plain text completions work too
    ]
    assert reward(completions, problem_index=[0, 0, 1, 1]) == [1.0, 0.0, 1.0, 1.0]


def test_summaries_average_the_logged_steps() -> None:
    steps = [
        {"loss": 0.1, "reward": 0.25, "refimpl/clip_frac_high": 0.0, "step_time": 2.0},
        {"loss": 0.2, "reward": 0.75, "refimpl/clip_frac_high": 0.5, "step_time": 4.0},
        {"train_runtime": 6.0},  # TRL's end-of-run entry is not a step
    ]
    s = summarise_trl_logs(steps)
    assert s == {"optimizer_steps": 2.0, "reward": 0.5, "clip_frac_high": 0.25, "step_time_s": 3.0}
    assert summarise_steps([{"entropy": 1.0}, {"entropy": 2.0, "kl_mask_frac": 0.5}]) == {
        "optimizer_steps": 2.0,
        "entropy": 1.5,
        "kl_mask_frac": 0.5,
    }


def test_before_after_table_has_a_row_per_run() -> None:
    row = {"success": 0.2, "success_se": 0.03, "pass@4": 0.4, "clipped_frac": 0.1, "entropy": 0.5}
    run = {"algorithm": "tepo", "train_s": 120.0, "after": row, "train": {"optimizer_steps": 16.0}}
    table = before_after_table(row, [run])
    lines = table.strip().splitlines()
    assert len(lines) == 4 and lines[2].startswith("| base model | 0.200 ± 0.030 | 0.400")
    assert lines[3].startswith("| tepo after 16 steps") and "2.0 min" in lines[3]
    assert "| pass@4 |" in lines[0]  # the largest k the evaluations report
    eight = {**row, "pass@8": 0.6}
    assert "| pass@8 |" in before_after_table(eight, [{**run, "after": eight}]).splitlines()[0]
