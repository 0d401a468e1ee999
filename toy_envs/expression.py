"""Safe parsing of model output: integer answers and small arithmetic expressions.

Verifiers score text that a policy produced, which during RL is adversarial in the literal
sense: the optimiser searches for any string that earns reward. So nothing here calls ``eval``,
``ast.literal_eval`` or ``int()`` on unbounded text. Every function is

* **total**: any ``str`` (and, defensively, any non-``str``) gives a result, never an exception;
* **bounded**: work is linear in ``min(len(text), limit)`` with small limits, so a megabyte of
  text, ten thousand ``(`` or a thousand-digit number are rejected in microseconds.

Python's ``int()`` also accepts non-ASCII digits (``int("٣") == 3``) and, since 3.11, raises on
strings of more than 4300 digits; both are why digits are checked explicitly before converting.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

ASCII_DIGITS = frozenset("0123456789")

#: Longest integer answer accepted (digits, sign excluded). Task answers have at most a handful.
MAX_ANSWER_DIGITS = 18

#: Countdown expressions longer than this (in characters, spaces included) are rejected.
MAX_EXPRESSION_CHARS = 64
#: Deepest parenthesis nesting accepted in an expression.
MAX_EXPRESSION_DEPTH = 16
#: Longest number literal accepted inside an expression.
MAX_LITERAL_DIGITS = 6


def parse_int(text: object) -> int | None:
    """Parse a strict ASCII integer such as ``"42"`` or ``"-7"``; ``None`` if it is not one.

    Surrounding spaces are allowed; anything else (``"+4"``, ``"4.0"``, ``"4 2"``, ``"٣"``,
    more than :data:`MAX_ANSWER_DIGITS` digits) is not an integer answer.
    """
    if not isinstance(text, str):
        return None
    # Check the length before stripping so that a megabyte of spaces is not even scanned.
    if len(text) > 4 * MAX_ANSWER_DIGITS:
        return None
    body = text.strip(" ")
    digits = body[1:] if body.startswith("-") else body
    if not 1 <= len(digits) <= MAX_ANSWER_DIGITS or not all(c in ASCII_DIGITS for c in digits):
        return None
    return int(body)


def final_answer(completion: object, marker: str = "#") -> int | None:
    """The integer after the LAST ``marker`` in ``completion``; ``None`` if absent or malformed.

    Everything before the last marker is a scratchpad and is ignored, so a policy may write any
    working it likes. ``rfind`` scans the text once, so even a megabyte is fast.
    """
    if not isinstance(completion, str):
        return None
    cut = completion.rfind(marker)
    if cut < 0:
        return None
    return parse_int(completion[cut + len(marker) :])


@dataclass(frozen=True)
class Evaluation:
    """Result of :func:`evaluate_expression` on a well-formed expression."""

    value: int
    #: The number literals in the order they appear (for the "each number once" check).
    literals: tuple[int, ...]


class _Reject(Exception):
    """Internal: the expression is malformed or breaks a limit. Never escapes this module."""


class _Parser:
    """Recursive-descent parser and evaluator over integers.

    Grammar (usual precedence, left associative, no unary minus)::

        expression := term (("+" | "-") term)*
        term       := factor (("*" | "/") factor)*
        factor     := number | "(" expression ")"

    Division must be exact: ``7/2`` and ``x/0`` reject the whole expression, because the
    tasks are over integers and truncating would reward a wrong derivation.
    """

    def __init__(self, tokens: list[str]) -> None:
        self.tokens = tokens
        self.position = 0
        self.depth = 0
        self.literals: list[int] = []

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise _Reject("unexpected end")
        self.position += 1
        return token

    def expression(self) -> int:
        value = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            right = self.term()
            value = value + right if op == "+" else value - right
        return value

    def term(self) -> int:
        value = self.factor()
        while self.peek() in ("*", "/"):
            op = self.take()
            right = self.factor()
            if op == "*":
                value = value * right
            else:
                if right == 0 or value % right != 0:
                    raise _Reject("inexact division")
                value = value // right
        return value

    def factor(self) -> int:
        token = self.take()
        if token == "(":
            # The depth limit bounds recursion; with MAX_EXPRESSION_CHARS it is belt and braces.
            self.depth += 1
            if self.depth > MAX_EXPRESSION_DEPTH:
                raise _Reject("too deep")
            value = self.expression()
            if self.take() != ")":
                raise _Reject("missing )")
            self.depth -= 1
            return value
        if token[0] in ASCII_DIGITS:
            number = int(token)  # the tokenizer bounded its length
            self.literals.append(number)
            return number
        raise _Reject(f"unexpected {token!r}")


def _tokens(text: str) -> Iterator[str]:
    """Split an expression into numbers, operators and parentheses; spaces are skipped."""
    position = 0
    while position < len(text):
        char = text[position]
        if char == " ":
            position += 1
        elif char in ASCII_DIGITS:
            end = position
            while end < len(text) and text[end] in ASCII_DIGITS:
                end += 1
            if end - position > MAX_LITERAL_DIGITS:
                raise _Reject("literal too long")
            yield text[position:end]
            position = end
        elif char in "+-*/()":
            yield char
            position += 1
        else:
            raise _Reject(f"character {char!r}")


def evaluate_expression(text: object) -> Evaluation | None:
    """Evaluate an integer expression with ``+ - * /`` and parentheses, or return ``None``.

    ``None`` means malformed or out of limits: not a ``str``, longer than
    :data:`MAX_EXPRESSION_CHARS`, nested deeper than :data:`MAX_EXPRESSION_DEPTH`, a literal
    longer than :data:`MAX_LITERAL_DIGITS`, a character outside ``0-9 + - * / ( )`` and space,
    unary minus, an inexact division or a division by zero.

    The limits also bound the value: at most 32 literals of 6 digits each, so no product grows
    beyond a few hundred digits.
    """
    if not isinstance(text, str) or len(text) > MAX_EXPRESSION_CHARS:
        return None
    try:
        parser = _Parser(list(_tokens(text)))
        value = parser.expression()
        if parser.peek() is not None:
            return None  # trailing tokens, e.g. "3)" or "3 4"
        return Evaluation(value=value, literals=tuple(parser.literals))
    except _Reject:
        return None
    except RecursionError:  # unreachable given the limits; kept so the function stays total
        return None
