"""Verifiers are total and bounded: any string gets a float quickly, and nothing is eval'd."""

from __future__ import annotations

import builtins
import time
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from toy_envs import TASK_NAMES, Problem, get_task
from toy_envs.expression import (
    MAX_EXPRESSION_CHARS,
    MAX_EXPRESSION_DEPTH,
    evaluate_expression,
    final_answer,
    parse_int,
)
from toy_envs.tokenizer import ALPHABET

#: Per-call time bound. Honest calls take microseconds; the bound catches anything that scales
#: with the input (a megabyte scanned character by character in Python takes ~100 ms).
TIME_LIMIT_S = 0.05

TASKS = {name: get_task(name, format_reward=0.5) for name in TASK_NAMES}
PROBLEMS = {name: task.sample(1, 0)[0] for name, task in TASKS.items()}

ADVERSARIAL = [
    "",
    " ",
    "#",
    "#-",
    "-",
    "__import__('os')",
    "__import__('os').system('true')",
    "9**9**9",
    "#9**9**9",
    "(" * 10_000,
    "(" * 10_000 + "1" + ")" * 10_000,
    "1" * 1000,
    "#" + "9" * 1000,
    "#" + "9" * 5000,  # beyond Python's int() digit limit: must not raise
    "x" * 2**20,
    "1+" * 2**19,
    "#" * 2**20,
    "\x00\ud800\U0001f600",
    "#٣",  # an Arabic-Indic digit: int() would accept it
    "#１２",  # full-width digits
    "#1e3",
    "#nan",
    "#0x10",
    "1/0",
    "0/0",
]


def timed(fn: Callable[[], float], repeats: int = 3) -> tuple[float, float]:
    """The value of ``fn()`` and its best time over ``repeats`` calls.

    The best of a few calls measures the work the verifier does, not a busy CI core that
    happened to deschedule the process once; work that scales with the input is slow every time.
    """
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        value = fn()
        best = min(best, time.perf_counter() - start)
    return value, best


@pytest.mark.parametrize("name", TASK_NAMES)
@given(text=st.one_of(st.text(max_size=200), st.text(alphabet=ALPHABET, max_size=80)))
def test_reward_is_total_and_fast(name: str, text: str) -> None:
    """Any text: a float among {0, format_reward, 1}, no exception, well under the time bound."""
    task, problem = TASKS[name], PROBLEMS[name]
    value, seconds = timed(lambda: task.reward(problem, text))
    assert isinstance(value, float)
    assert value in (0.0, 0.5, 1.0)
    assert seconds < TIME_LIMIT_S


@pytest.mark.parametrize("name", TASK_NAMES)
@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_adversarial_inputs_earn_zero_quickly(name: str, text: str) -> None:
    value, seconds = timed(lambda: TASKS[name].reward(PROBLEMS[name], text))
    assert value == 0.0
    assert seconds < TIME_LIMIT_S


@pytest.mark.parametrize("name", TASK_NAMES)
def test_non_string_completion_earns_zero(name: str) -> None:
    for junk in (None, 42, b"#5", ["#5"]):
        assert TASKS[name].reward(PROBLEMS[name], junk) == 0.0  # type: ignore[arg-type]


def test_verifiers_never_eval(monkeypatch: pytest.MonkeyPatch) -> None:
    """Scoring still works with eval/exec/compile removed: the verifiers do not use them."""

    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("a verifier called eval/exec/compile")

    for fn in ("eval", "exec", "compile"):
        monkeypatch.setattr(builtins, fn, forbidden)
    for task in TASKS.values():
        problems = task.sample(20, 1)
        assert task.score(problems, [task.reference_solution(p) for p in problems]).all()
        assert task.reward(problems[0], "__import__('os')") == 0.0


def test_parse_int_is_strict() -> None:
    assert parse_int("42") == 42 and parse_int(" -7 ") == -7 and parse_int("007") == 7
    for bad in ("", "-", "+4", "4.0", "4 2", "٣", "１", "1" * 19, "0x1", "4\n", None):
        assert parse_int(bad) is None, bad
    assert final_answer("1,2#3") == 3 and final_answer("#1#2") == 2
    assert final_answer("3") is None and final_answer("3#") is None


# ----------------------------------------------------------------------- the expression parser
@st.composite
def expressions(draw: st.DrawFn, depth: int = 0) -> tuple[str, int]:
    """A random fully parenthesised expression and its value, computed without the parser."""
    if depth >= 3 or draw(st.booleans()):
        value = draw(st.integers(0, 999))
        return str(value), value
    left_text, left = draw(expressions(depth + 1))
    right_text, right = draw(expressions(depth + 1))
    op = draw(st.sampled_from("+-*"))
    value = {"+": left + right, "-": left - right, "*": left * right}[op]
    return f"({left_text}{op}{right_text})", value


@given(expressions())
def test_parser_matches_direct_evaluation(case: tuple[str, int]) -> None:
    text, value = case
    evaluation = evaluate_expression(text)
    assert evaluation is not None and evaluation.value == value


@given(st.integers(1, 999), st.integers(1, 999))
def test_division_must_be_exact(a: int, b: int) -> None:
    evaluation = evaluate_expression(f"{a * b}/{b}")
    assert evaluation is not None and evaluation.value == a
    inexact = evaluate_expression(f"{a * b + 1}/{b}")
    assert (inexact is None) == ((a * b + 1) % b != 0)
    assert evaluate_expression(f"{a}/0") is None
    assert evaluate_expression(f"{a}/({b}-{b})") is None


def test_parser_precedence_and_grammar() -> None:
    cases = {"2+3*4": 14, "(2+3)*4": 20, "8-3-2": 3, "8/4/2": 1, " 2 * ( 3 ) ": 6, "12/4*3": 9}
    for text, value in cases.items():
        assert evaluate_expression(text).value == value, text
    for bad in ("-3+4", "3+", "(3", "3)", "3 4", "()", "3**2", "3//2", "1e3", "3.0", "+3"):
        assert evaluate_expression(bad) is None, bad
    assert evaluate_expression("1+2*3").literals == (1, 2, 3)


def test_parser_limits_are_exact() -> None:
    """Nesting up to MAX_EXPRESSION_DEPTH and length up to MAX_EXPRESSION_CHARS are accepted."""
    deepest = "(" * MAX_EXPRESSION_DEPTH + "1" + ")" * MAX_EXPRESSION_DEPTH
    assert evaluate_expression(deepest).value == 1
    assert evaluate_expression("(" + deepest + ")") is None
    longest = "1+1" + " " * (MAX_EXPRESSION_CHARS - 3)
    assert evaluate_expression(longest).value == 2
    assert evaluate_expression(longest + " ") is None
    assert evaluate_expression("123456+1").value == 123457
    assert evaluate_expression("1234567+1") is None  # literal of 7 digits


# ----------------------------------------------------------------------- countdown rules
def countdown_problem(numbers: tuple[int, ...], target: int) -> Problem:
    prompt = ",".join(map(str, numbers)) + f"#{target}="
    return Problem(prompt=prompt, answer=target, numbers=numbers, target=target)


def test_countdown_division_must_be_exact() -> None:
    task = get_task("countdown")
    problem = countdown_problem((7, 2, 5), 3)
    assert task.reward(problem, "7/2") == 0.0  # 3.5, or 3 if it truncated: never accepted
    assert task.reward(problem, "5-2") == 1.0
    assert task.reward(countdown_problem((6, 4, 3), 2), "6/3") == 1.0


def test_countdown_number_reuse_is_rejected() -> None:
    task = get_task("countdown")
    problem = countdown_problem((3, 5, 7), 15)
    assert task.reward(problem, "3*5") == 1.0
    assert task.reward(problem, "5+5+5") == 0.0  # 5 used three times
    assert task.reward(problem, "15") == 0.0  # 15 is not given
    assert task.reward(problem, "3*5*(7/7)") == 0.0  # 7 used twice
    # A number given twice may be used twice.
    assert task.reward(countdown_problem((5, 5, 7), 10), "5+5") == 1.0


def test_countdown_exact_requires_every_number() -> None:
    problem = countdown_problem((2, 3, 5), 10)
    at_most_once, exactly_once = get_task("countdown"), get_task("countdown", exact=True)
    assert at_most_once.reward(problem, "2*5") == 1.0
    assert exactly_once.reward(problem, "2*5") == 0.0
    assert exactly_once.reward(problem, "2+3+5") == 1.0
    assert exactly_once.reward(problem, " 5 + 3 + 2 ") == 1.0  # spaces and any order


def test_countdown_accepts_other_correct_expressions() -> None:
    """Many answers are right: every permutation/regrouping of the reference that keeps the value."""
    task = get_task("countdown")
    problem = countdown_problem((3, 5, 7), 22)
    for answer in ("3*5+7", "7+3*5", "7+5*3", "(5*3)+7", "((3*5))+(7)"):
        assert task.reward(problem, answer) == 1.0, answer
    assert task.reward(problem, "-3*5+7") == 0.0  # no unary minus
