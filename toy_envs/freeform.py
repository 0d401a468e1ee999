"""Free-form answers: the integer a chat model's reply ends on, without ``eval``.

The toy tasks fix a format (``#`` then the answer). A pretrained chat model writes prose:
``"23 + 48 = 71"``, ``"The answer is **71**."``, ``"Sure! 23 plus 48 is 71."``. This module
reads the integer such a reply commits to:

1. a **marked** answer, if there is one: the number right after ``\\boxed{``, ``####`` or
   ``answer`` (``"answer is"``, ``"Answer:"``, ``"final answer ="``; up to eight spaces,
   ``*``, ``$``, ``:``, ``=`` or ``is`` in between), the last such mark winning;
2. otherwise the **last number** in the reply.

A number is a run of ASCII digits (``int("٣")`` would accept other scripts; this does not),
not glued to a letter (``x2``, ``0x10``, ``1e3`` are not numbers), optionally with thousands
separators (``1,234``), a sign (``-`` or ``−`` not glued to a
preceding digit or letter, so ``10-3`` is ten and three, not ten and minus three) and a
decimal part. It counts as an integer only if the decimal part is all zeros (``71.0``); a
final ``71.5`` means the reply's answer is not an integer, so it scores as no answer. A
sentence's full stop (``"is 71."``) is not a decimal point: one needs a digit after it.

Like :mod:`toy_envs.expression`, every function here is **total** (any object gives a result,
never an exception) and **bounded**: a reply longer than :data:`MAX_REPLY_CHARS` is rejected
before it is scanned, the patterns have no nested repetition (so the regular-expression
engine cannot backtrack exponentially), and a number of more than :data:`MAX_ANSWER_DIGITS`
digits is not converted (Python's ``int`` raises beyond 4300 digits).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toy_envs.expression import MAX_ANSWER_DIGITS

#: Longest reply scanned (characters). A 512-token completion is about 2000 characters, so
#: this leaves a wide margin; anything longer is refused without reading it.
MAX_REPLY_CHARS = 8192

# A number: an optional sign that does not follow a word character (so "10-3" has no
# negative number), digits with optional ",ddd" groups, an optional ".ddd" part, and no word
# character glued to either end ("x2", "2x", "0x10", "1e3" are not numbers). No
# quantifier nests another that can match the same text, so matching is linear.
_NUMBER = re.compile(
    r"(?<![0-9A-Za-z_.])(?P<sign>[-\u2212]?)(?P<int>[0-9]+(?:,[0-9]{3})*)(?:\.(?P<frac>[0-9]+))?"
    r"(?![0-9A-Za-z_])"
)
# A mark, then at most eight separator characters, then where the number must start.
_MARK = re.compile(
    r"(?:\\boxed\{|####|\banswer\b(?:\s{0,3}is\b)?)[\s*$:=]{0,8}",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Answer:
    """The integer a reply ends on, and where it is written.

    Attributes:
        value: the integer.
        start, end: ``reply[start:end]`` is its text (sign and separators included).
        marked: True if it follows an answer mark (``\\boxed{``, ``####``, ``answer``).
    """

    value: int
    start: int
    end: int
    marked: bool


def _integer(match: re.Match[str]) -> int | None:
    """The integer a number match stands for, or ``None`` (non-zero decimals, too long)."""
    digits = match.group("int").replace(",", "")
    frac = match.group("frac")
    if len(digits) > MAX_ANSWER_DIGITS or (frac is not None and frac.strip("0")):
        return None
    value = int(digits)  # ASCII digits only, at most MAX_ANSWER_DIGITS of them
    return -value if match.group("sign") else value


def find_answer(reply: object) -> Answer | None:
    """The answer ``reply`` commits to (see the module docstring), or ``None``.

    ``None`` when ``reply`` is not a ``str``, is longer than :data:`MAX_REPLY_CHARS`, holds no
    number, or ends on a number that is not an integer (``3.5``, or more than
    :data:`MAX_ANSWER_DIGITS` digits).
    """
    if not isinstance(reply, str) or len(reply) > MAX_REPLY_CHARS:
        return None
    marked = None
    for mark in _MARK.finditer(reply):
        number = _NUMBER.match(reply, mark.end())
        if number is not None:
            marked = number
    number = marked
    if number is None:
        for number in _NUMBER.finditer(reply):  # noqa: B007 (the last one is kept)
            pass
    if number is None:
        return None
    value = _integer(number)
    if value is None:
        return None
    return Answer(value=value, start=number.start(), end=number.end(), marked=marked is not None)


def parse_answer(reply: object) -> int | None:
    """The integer ``reply`` commits to, or ``None`` (:func:`find_answer` without the span)."""
    answer = find_answer(reply)
    return None if answer is None else answer.value


def freeform_reward(reply: object, answer: int) -> float:
    """1.0 if ``reply`` commits to the integer ``answer`` (see :func:`find_answer`), else 0.0.

    Total: any ``reply`` (any object) gives 0.0 or 1.0, never an exception.
    """
    if isinstance(answer, bool) or not isinstance(answer, int):
        raise ValueError(f"answer: expected an int, got {answer!r}")
    return 1.0 if parse_answer(reply) == answer else 0.0
