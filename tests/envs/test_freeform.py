"""The free-form verifier reads the integer a chat reply ends on: total, bounded, never eval."""

from __future__ import annotations

import builtins

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.envs.test_verifiers import ADVERSARIAL, TIME_LIMIT_S, timed
from toy_envs.expression import MAX_ANSWER_DIGITS
from toy_envs.freeform import MAX_REPLY_CHARS, find_answer, freeform_reward, parse_answer

#: Prose with no digit, sign or decimal point, ending in a space, so that a number written
#: after it starts a new word.
PROSE = st.text(alphabet="abcdefghij XYZ!?:()\n", max_size=40).map(lambda s: s + " ")
#: What may follow a final number without changing it: punctuation and more digit-free prose.
TAIL = st.sampled_from(["", ".", "!", " ", ".\n", " :)", "</s>"])
INTEGERS = st.integers(-(10**MAX_ANSWER_DIGITS) + 1, 10**MAX_ANSWER_DIGITS - 1)


@given(
    text=st.one_of(
        st.text(max_size=300),
        st.text(alphabet="0123456789-−.,*$#:= boxed{}answerAis", max_size=300),
    )
)
def test_any_text_gets_a_reward_quickly(text: str) -> None:
    value, seconds = timed(lambda: freeform_reward(text, 7))
    assert value in (0.0, 1.0)
    assert seconds < TIME_LIMIT_S
    found = find_answer(text)
    if found is not None:  # the span is inside the text and holds the value's digits
        assert 0 <= found.start < found.end <= len(text)
        assert str(abs(found.value)) in text[found.start : found.end].replace(",", "")


@given(prefix=PROSE, n=INTEGERS, tail=TAIL)
def test_the_last_integer_of_prose_is_the_answer(prefix: str, n: int, tail: str) -> None:
    reply = prefix + str(n) + tail
    assert parse_answer(reply) == n
    assert freeform_reward(reply, n) == 1.0
    assert freeform_reward(reply, n + 1) == 0.0


@given(a=st.integers(0, 999), b=st.integers(0, 999), n=INTEGERS, m=INTEGERS)
def test_a_marked_answer_beats_later_numbers(a: int, b: int, n: int, m: int) -> None:
    assert parse_answer(f"{a} + {b} = {a + b}") == a + b
    for mark in ("The answer is ", "Answer: ", "answer = ", "#### ", "\\boxed{", "answer is **"):
        assert parse_answer(f"{mark}{n}. Check: {a} + {b} = {m}") == n, mark
    # With two marks the last wins.
    assert parse_answer(f"Answer: {m}. No wait, the answer is {n}.") == n


def test_number_syntax() -> None:
    cases = {
        "10-3": 3,  # a minus glued to a digit is an operator, not a sign
        "It is -3": -3,
        "It is −3": -3,  # U+2212 minus sign
        "= 1,234 apples": 1234,
        "1,2": 2,  # not a thousands separator: two numbers
        "71.": 71,  # full stop
        "71.0": 71,
        "71.00!": 71,
        "x2": None,  # part of a word
        "3.5": None,  # the reply ends on a non-integer
        "The answer is 3.5": None,
        "The answer is unknown, 5": 5,  # a mark with no number after it is no mark
        "9" * MAX_ANSWER_DIGITS: int("9" * MAX_ANSWER_DIGITS),
        "9" * (MAX_ANSWER_DIGITS + 1): None,
        "٣": None,  # Arabic-Indic three: int() would take it
        "１２": None,  # full-width digits
        "0x10": None,
        "1e3": None,
        "": None,
    }
    for text, value in cases.items():
        assert parse_answer(text) == value, text


def test_answer_span_is_where_the_integer_is_written() -> None:
    reply = "23 + 48 = 71, so the answer is **71**."
    found = find_answer(reply)
    assert found is not None and found.marked and found.value == 71
    assert reply[found.start : found.end] == "71" and found.start == reply.rindex("71")
    plain = find_answer("23 + 48 = -1,071.")
    assert plain is not None and not plain.marked and plain.value == -1071
    assert "23 + 48 = -1,071."[plain.start : plain.end] == "-1,071"


@pytest.mark.parametrize("text", ADVERSARIAL, ids=range(len(ADVERSARIAL)))
def test_hostile_strings_are_scored_quickly(text: str) -> None:
    value, seconds = timed(lambda: freeform_reward(text, 9))
    assert value in (0.0, 1.0)
    assert seconds < TIME_LIMIT_S


@pytest.mark.parametrize(
    "text",
    [
        "1" * MAX_REPLY_CHARS,  # longest accepted, one huge digit run: too many digits
        "1," * (MAX_REPLY_CHARS // 2),  # separators that never form a group of three
        "-" * MAX_REPLY_CHARS,
        "answer " * (MAX_REPLY_CHARS // 7),  # many marks, no number
        "answer is " + " " * (MAX_REPLY_CHARS - 20) + "5",
        "\\boxed{" * (MAX_REPLY_CHARS // 7),
        "1.1." * (MAX_REPLY_CHARS // 4),
        "1,000" * (MAX_REPLY_CHARS // 5),
        "5" + " " * MAX_REPLY_CHARS,  # over the limit: refused unread
    ],
    ids=range(9),
)
def test_worst_cases_at_the_length_limit_are_fast(text: str) -> None:
    value, seconds = timed(lambda: parse_answer(text))
    assert value is None or isinstance(value, int)
    assert seconds < TIME_LIMIT_S


def test_length_limit_is_exact() -> None:
    longest = " " * (MAX_REPLY_CHARS - 1) + "5"
    assert parse_answer(longest) == 5
    assert parse_answer(" " + longest) is None


def test_non_strings_earn_zero() -> None:
    for junk in (None, 42, b"42", ["42"], 4.2):
        assert find_answer(junk) is None
        assert freeform_reward(junk, 42) == 0.0
    for bad in ("42", 4.2, None, True):
        with pytest.raises(ValueError, match="answer"):
            freeform_reward("42", bad)  # type: ignore[arg-type]


def test_never_evals(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*args: object, **kwargs: object) -> None:
        raise AssertionError("the verifier called eval/exec/compile")

    for fn in ("eval", "exec", "compile"):
        monkeypatch.setattr(builtins, fn, forbidden)
    assert freeform_reward("__import__('os').system('true') 4", 4) == 1.0
    assert freeform_reward("2+2", 4) == 0.0  # an expression is not its value
