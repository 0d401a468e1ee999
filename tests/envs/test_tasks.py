"""Task generators and verifiers: references score 1, wrong answers 0, knobs do what they say."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toy_envs import TASK_NAMES, TOKENIZER, Problem, get_task
from toy_envs.expression import evaluate_expression
from toy_envs.show_tasks import main as demo_main
from toy_envs.tasks import Chain, Countdown, solve_countdown

# Default knobs plus a harder and an easier setting of each task.
SETTINGS: list[tuple[str, dict]] = [
    *[(name, {}) for name in TASK_NAMES],
    ("addition", {"digits": 1}),
    ("addition", {"digits": 4}),
    ("chain", {"num_ops": 6, "min_ops": 1}),
    ("chain", {"num_ops": 3, "max_operand": 20, "allow_negative": True}),
    ("multiplication", {"digits_a": 3, "digits_b": 1}),
    ("countdown", {"num_numbers": 4, "max_number": 25}),
    ("countdown", {"num_numbers": 4, "exact": True}),
]
SETTING_IDS = [f"{name}-{knobs}" for name, knobs in SETTINGS]


def corrupt_final_answer(completion: str, answer: int, delta: int) -> str:
    """Replace the final answer (after the last '#', or the whole text) by answer + delta."""
    head, marker, _ = completion.rpartition("#")
    return f"{head}{marker}{answer + delta}"


@pytest.mark.parametrize(("name", "knobs"), SETTINGS, ids=SETTING_IDS)
def test_reference_solution_earns_one_and_fits_budget(name: str, knobs: dict) -> None:
    """Over many seeds the reference completion scores exactly 1 and fits the token budgets."""
    task = get_task(name, **knobs)
    for seed in range(3):
        problems = task.sample(150, seed)
        references = [task.reference_solution(p) for p in problems]
        assert np.all(task.score(problems, references) == 1.0)
        for problem, reference in zip(problems, references):
            assert len(TOKENIZER.encode(problem.prompt, add_bos=True)) <= task.max_prompt_tokens
            assert len(TOKENIZER.encode(reference, add_eos=True)) <= task.max_new_tokens


@pytest.mark.parametrize("name", [n for n in TASK_NAMES if n != "countdown"])
def test_corrupted_final_answer_earns_zero(name: str) -> None:
    task = get_task(name)
    for problem in task.sample(100, 1):
        reference = task.reference_solution(problem)
        for delta in (-10, -1, 1, 7):
            assert task.reward(problem, corrupt_final_answer(reference, problem.answer, delta)) == 0
        # Dropping the "#" makes a scratchpad task's completion malformed.
        if "#" in reference:
            assert task.reward(problem, reference.replace("#", ",")) == 0.0


def test_countdown_wrong_value_earns_zero() -> None:
    """An expression over the given numbers scores 1 exactly when it hits the target."""
    task = get_task("countdown")
    outcomes = set()
    for problem in task.sample(200, 2):
        for op in "+*":
            expression = op.join(map(str, problem.numbers))
            hit = evaluate_expression(expression).value == problem.target
            outcomes.add(hit)
            assert task.reward(problem, expression) == float(hit)
    assert outcomes == {True, False}  # both branches were exercised


@pytest.mark.parametrize("name", ["chain", "multiplication"])
@given(scratchpad=st.text(max_size=60), seed=st.integers(0, 2**16))
def test_scratchpad_does_not_change_reward(name: str, scratchpad: str, seed: int) -> None:
    """Only the integer after the last '#' is scored: any text before it is ignored."""
    task = get_task(name)
    problem = task.sample(1, seed)[0]
    assert task.reward(problem, f"{scratchpad}#{problem.answer}") == 1.0
    assert task.reward(problem, f"{scratchpad}#{problem.answer + 1}") == 0.0
    # A right answer followed by a later '#' is no longer the final answer.
    assert task.reward(problem, f"#{problem.answer}#{scratchpad.replace('#', '')}x") == 0.0


@pytest.mark.parametrize("name", TASK_NAMES)
def test_format_reward_knob(name: str) -> None:
    """Off by default; when set, a well-formed wrong answer earns it, a malformed one 0."""
    default, shaped = get_task(name), get_task(name, format_reward=0.25)
    for problem in default.sample(30, 3):
        if name == "countdown":
            # Uses only given numbers, so well-formed; the target is never a single number.
            wrong = str(problem.numbers[0])
        else:
            wrong = corrupt_final_answer(default.reference_solution(problem), problem.answer, 1)
        assert default.reward(problem, wrong) == 0.0
        assert shaped.reward(problem, wrong) == 0.25
        assert shaped.reward(problem, "garbage") == 0.0
        assert shaped.reward(problem, shaped.reference_solution(problem)) == 1.0


@pytest.mark.parametrize(("name", "knobs"), SETTINGS, ids=SETTING_IDS)
def test_generator_is_deterministic_per_seed(name: str, knobs: dict) -> None:
    task = get_task(name, **knobs)
    first, again = task.sample(40, 7), task.sample(40, 7)
    assert first == again
    assert [task.reference_solution(p) for p in first] == [
        task.reference_solution(p) for p in again
    ]
    assert task.sample(40, np.random.default_rng(7)) == first  # a seed is a fresh Generator
    assert task.sample(40, 8) != first
    rng = np.random.default_rng(0)
    assert task.sample(40, rng) != task.sample(40, rng)  # a Generator is consumed


@pytest.mark.parametrize(("name", "knobs"), SETTINGS, ids=SETTING_IDS)
def test_answers_are_correct(name: str, knobs: dict) -> None:
    """The generator's answer agrees with an independent evaluation of the prompt."""
    task = get_task(name, **knobs)
    for problem in task.sample(200, 4):
        if name == "countdown":
            assert problem.target == problem.answer
            assert evaluate_expression(problem.solution).value == problem.target
            assert problem.prompt == ",".join(map(str, problem.numbers)) + f"#{problem.target}="
        else:
            # +, - and * with the parser's usual precedence: the same value as the task's.
            assert evaluate_expression(problem.prompt.rstrip("=")).value == problem.answer


def _operator_count(prompt: str) -> int:
    return sum(prompt.count(op) for op in "+-")


def test_chain_num_ops_sets_operator_count() -> None:
    for k in (1, 2, 4, 6):
        problems = get_task("chain", num_ops=k).sample(100, 0)
        assert {_operator_count(p.prompt) for p in problems} == {k}
        assert all(len(p.numbers) == k + 1 for p in problems)
    mixed = get_task("chain", num_ops=4, min_ops=1).sample(400, 0)
    assert {_operator_count(p.prompt) for p in mixed} == {1, 2, 3, 4}


def test_chain_operands_and_signs() -> None:
    """Operands stay in [0, max_operand]; running values are >= 0 unless allow_negative."""
    nonneg = get_task("chain", max_operand=5)
    for problem in nonneg.sample(300, 0):
        assert all(0 <= x <= 5 for x in problem.numbers)
        assert all(v >= 0 for v in Chain.running_values(problem))
    negative = get_task("chain", allow_negative=True)
    values = [v for p in negative.sample(300, 0) for v in Chain.running_values(p)]
    assert min(values) < 0
    assert all(negative.reward(p, negative.reference_solution(p)) == 1 for p in negative.sample(50))


@pytest.mark.parametrize("num_ops", [3, 4])
def test_chain_fits_48_tokens(num_ops: int) -> None:
    """<bos> + prompt + completion budget (with <eos>) fits 48 tokens at k = 3 (the default)
    and at k = 4."""
    task = get_task("chain", num_ops=num_ops)
    assert task.max_prompt_tokens + task.max_new_tokens <= 48
    for problem in task.sample(500, 0):
        text = problem.prompt + task.reference_solution(problem)
        assert len(TOKENIZER.encode(text, add_bos=True, add_eos=True)) <= 48


@pytest.mark.parametrize("name", TASK_NAMES)
def test_default_completions_are_short(name: str) -> None:
    assert get_task(name).max_new_tokens <= 24


def test_digit_knobs() -> None:
    for digits in (1, 3):
        for p in get_task("addition", digits=digits).sample(100, 0):
            assert all(len(str(x)) == digits for x in p.numbers)
    for p in get_task("multiplication", digits_a=3, digits_b=1).sample(100, 0):
        a, b = p.numbers
        assert len(str(a)) == 3 and len(str(b)) == 1
        assert p.prompt == f"{a}*{b}="


def test_multiplication_partial_products() -> None:
    task = get_task("multiplication")
    problem = Problem(prompt="34*12=", answer=408, numbers=(34, 12))
    assert task.reference_solution(problem) == "68,340#408"
    for p in task.sample(100, 0):
        partials = task.reference_solution(p).split("#")[0].split(",")
        assert len(partials) == len(str(p.numbers[1]))
        assert sum(int(x) for x in partials) == p.answer


def test_countdown_knobs() -> None:
    for n in (3, 4):
        task = get_task("countdown", num_numbers=n, max_number=12, max_target=50)
        for p in task.sample(200, 0):
            assert len(p.numbers) == n
            assert all(1 <= x <= 12 for x in p.numbers)
            assert 1 <= p.target <= 50
            assert p.target not in p.numbers
            # The reference uses every number exactly once, so it also satisfies exact=True.
            assert sorted(evaluate_expression(p.solution).literals) == sorted(p.numbers)


def test_countdown_solves_hand_made_problems() -> None:
    """Without a stored solution, the reference is found by search (or the problem rejected)."""
    task = get_task("countdown", exact=True)
    problem = Problem(prompt="2,3,5#10=", answer=10, numbers=(2, 3, 5), target=10)
    assert task.reward(problem, task.reference_solution(problem)) == 1.0
    assert solve_countdown((2, 3, 5), 10) is not None
    impossible = Problem(prompt="1,1,1#50=", answer=50, numbers=(1, 1, 1), target=50)
    with pytest.raises(ValueError, match="no solution"):
        task.reference_solution(impossible)


def test_get_task_validation() -> None:
    with pytest.raises(ValueError, match="chain") as excinfo:
        get_task("subtraction")
    assert all(name in str(excinfo.value) for name in TASK_NAMES)
    with pytest.raises(ValueError, match="num_opz"):
        get_task("chain", num_opz=3)
    for name, knobs in [
        ("chain", {"num_ops": 0}),
        ("chain", {"num_ops": 2, "min_ops": 3}),
        ("addition", {"digits": 0}),
        ("multiplication", {"digits_b": 9}),
        ("countdown", {"num_numbers": 5}),
        ("countdown", {"exact": "yes"}),
        ("addition", {"format_reward": 1.5}),
    ]:
        with pytest.raises(ValueError):
            get_task(name, **knobs)
    with pytest.raises(ValueError, match="n must be"):
        get_task("chain").sample(-1, 0)


def test_score_is_batched_reward() -> None:
    task = get_task("chain")
    problems = task.sample(20, 0)
    completions = [task.reference_solution(p) if i % 2 else "#0x" for i, p in enumerate(problems)]
    scores = task.score(problems, completions)
    assert scores.dtype == np.float32 and scores.shape == (20,)
    assert scores.tolist() == [task.reward(p, c) for p, c in zip(problems, completions)]
    assert scores.tolist() == [float(i % 2) for i in range(20)]
    with pytest.raises(ValueError, match="same length"):
        task.score(problems, completions[:-1])


def test_problem_is_frozen_and_knobs_round_trip() -> None:
    problem = get_task("chain").sample(1, 0)[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        problem.answer = 0  # type: ignore[misc]
    for name in TASK_NAMES:
        task = get_task(name)
        assert get_task(name, **task.knobs()).knobs() == task.knobs()
        assert task.name == name
    assert isinstance(get_task("countdown"), Countdown)


def test_toy_envs_does_not_import_torch_or_refimpl() -> None:
    code = (
        "import sys, toy_envs, toy_envs.show_tasks;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'refimpl')];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_demo_prints_every_task(capsys: pytest.CaptureFixture[str]) -> None:
    demo_main()
    out = capsys.readouterr().out
    for name in TASK_NAMES:
        assert f"== {name}" in out
    # Each line shows the reference earning 1.0 and the wrong completion earning 0.0.
    lines = [line for line in out.splitlines() if "reference" in line]
    assert len(lines) == 3 * len(TASK_NAMES)
    assert all(re.search(r"reward 1\.0 .*reward 0\.0$", line) for line in lines)
