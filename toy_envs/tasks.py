"""Sparse-reward arithmetic tasks: a problem generator and a verifier for each.

Each task is a small class with the same interface, so the trainer, the gymnasium environment
and the tests treat them alike:

* constructor keyword arguments are the task's *knobs* (difficulty, format reward);
* ``name``, ``max_prompt_tokens`` (prompt with ``<bos>``) and ``max_new_tokens`` (completion
  budget, ``<eos>`` included, with a margin over the longest reference solution);
* ``sample(n, seed_or_rng)`` draws ``n`` :class:`Problem` s, deterministically per seed;
* ``reference_solution(problem)`` is the completion text a perfect policy writes (no ``<eos>``);
  the supervised warm start imitates it;
* ``reward(problem, completion)`` is the outcome reward: 1.0 for an exactly right final answer,
  else 0.0 (or ``format_reward`` for a well-formed wrong answer, when that knob is set). It is
  pure and total: any string gives a float in bounded time, never an exception;
* ``score(problems, completions)`` is the batched reward as a float32 array (what the trainer
  calls).

The four tasks (``TASK_NAMES``): ``addition``, ``chain`` (the default), ``multiplication`` and
``countdown``. ``docs/envs.md`` shows each format with examples.
"""

from __future__ import annotations

import inspect
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from toy_envs.expression import evaluate_expression, final_answer, parse_int

#: What ``sample`` accepts as its source of randomness.
SeedOrRng = int | np.integer | np.random.Generator | None

#: A completion must end in ``<eos>``, which costs one token of the budget.
_EOS_TOKENS = 1
#: Tokens of ``<bos>`` in front of each prompt.
_BOS_TOKENS = 1


@dataclass(frozen=True)
class Problem:
    """One task instance.

    Attributes:
        prompt: the text the model is conditioned on (without ``<bos>``), ending in ``=``.
        answer: the correct final integer. For countdown, the target (any expression reaching
            it is correct, so there is no single answer text).
        numbers: the operands (countdown: the numbers that may be used; others: the operands
            in prompt order, for inspection and tests).
        target: countdown's target; ``None`` for the other tasks.
        solution: a correct completion the generator already knows (countdown stores the
            expression it built the target from), or ``None``. Not part of equality/hashing:
            two problems asking the same question are equal.
    """

    prompt: str
    answer: int
    numbers: tuple[int, ...] = ()
    target: int | None = None
    solution: str | None = field(default=None, compare=False)


def _as_rng(seed_or_rng: SeedOrRng) -> np.random.Generator:
    """A Generator from a seed (deterministic) or the Generator itself (consumed in place)."""
    if isinstance(seed_or_rng, np.random.Generator):
        return seed_or_rng
    if seed_or_rng is None or isinstance(seed_or_rng, (int, np.integer)):
        return np.random.default_rng(seed_or_rng)
    raise ValueError(
        f"seed_or_rng must be an int, None or np.random.Generator, got {type(seed_or_rng)}"
    )


def _check_int(name: str, value: object, low: int, high: int | None = None) -> int:
    """Validate an integer knob, naming it in the error."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


#: Rough bytes of one Problem (its prompt and answer, the numbers): ``sample`` refuses more
#: problems than this machine's memory holds at that size.
PROBLEM_BYTES = 1024


def max_problems() -> int:
    """The most problems one ``sample`` call draws: this machine's physical memory over
    ``PROBLEM_BYTES`` (2^40 where the platform does not say)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 2**40
    return max(1, memory // PROBLEM_BYTES)


def _check_reward_args(problem: object, completion: object) -> None:
    """A verifier's problem must be a :class:`Problem` (``TypeError`` naming it otherwise).
    The completion is model output: any value gets a reward (a non-string earns 0)."""
    if not isinstance(problem, Problem):
        raise TypeError(f"problem: expected a Problem, got {type(problem).__name__}")


def _check_format_reward(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"format_reward must be a float in [0, 1), got {value!r}")
    return float(value)


def _draw_with_digits(rng: np.random.Generator, digits: int) -> int:
    """A uniform integer with exactly ``digits`` digits (``0``-``9`` when ``digits == 1``)."""
    low = 0 if digits == 1 else 10 ** (digits - 1)
    return int(rng.integers(low, 10**digits))


class Task:
    """Base class: the shared batch scoring and argument checks. Subclasses fill in the rest."""

    name: ClassVar[str] = ""
    max_prompt_tokens: int
    max_new_tokens: int
    format_reward: float

    def __repr__(self) -> str:
        knobs = ", ".join(f"{k}={v!r}" for k, v in self.knobs().items())
        return f"{type(self).__name__}({knobs})"

    def knobs(self) -> dict[str, object]:
        """The constructor arguments this instance was built with (for logs and configs)."""
        params = inspect.signature(type(self).__init__).parameters
        return {k: getattr(self, k) for k in params if k != "self"}

    def sample(self, n: int, seed_or_rng: SeedOrRng = None) -> list[Problem]:
        """Draw ``n`` problems; the same integer seed always gives the same list. At most
        ``max_problems()`` (what this machine's memory holds), checked before any is drawn."""
        n = _check_int("n", n, 0, max_problems())
        rng = _as_rng(seed_or_rng)
        return [self._sample_one(rng) for _ in range(n)]

    def _sample_one(self, rng: np.random.Generator) -> Problem:
        raise NotImplementedError

    def reference_solution(self, problem: Problem) -> str:
        raise NotImplementedError

    def reward(self, problem: Problem, completion: str) -> float:
        raise NotImplementedError

    def score(self, problems: Sequence[Problem], completions: Sequence[str]) -> np.ndarray:
        """Rewards of a batch, float32 ``[len(problems)]``; row ``i`` scores completion ``i``."""
        if len(problems) != len(completions):
            raise ValueError(
                f"problems and completions must have the same length, got {len(problems)} "
                f"and {len(completions)}"
            )
        return np.array(
            [self.reward(p, c) for p, c in zip(problems, completions)], dtype=np.float32
        )

    def _integer_reward(self, problem: Problem, value: int | None) -> float:
        """Sparse reward for tasks whose answer is one integer: 1 if right, else format/0."""
        if value is None:
            return 0.0  # malformed: no format reward either
        return 1.0 if value == problem.answer else self.format_reward


# --------------------------------------------------------------------------------- addition
class Addition(Task):
    """``a+b`` with ``digits``-digit operands, answered directly (no scratchpad).

    Example: prompt ``"12+34="``, completion ``"46"``.
    The whole completion (surrounding spaces allowed) must be the integer ``a+b``.
    Well-formed but wrong = an integer that is not the sum.

    Knobs:
        digits: digits of each operand (default 2; ``1`` means ``0``-``9``).
        format_reward: reward for a well-formed wrong answer (default 0.0).
    """

    name = "addition"

    def __init__(self, digits: int = 2, format_reward: float = 0.0) -> None:
        self.digits = _check_int("digits", digits, 1, 9)
        self.format_reward = _check_format_reward(format_reward)
        # "a+b=": two operands, "+" and "=".
        self.max_prompt_tokens = _BOS_TOKENS + 2 * self.digits + 2
        # The sum has at most digits+1 digits; 2 tokens of margin.
        self.max_new_tokens = (self.digits + 1) + _EOS_TOKENS + 2

    def _sample_one(self, rng: np.random.Generator) -> Problem:
        a, b = _draw_with_digits(rng, self.digits), _draw_with_digits(rng, self.digits)
        return Problem(prompt=f"{a}+{b}=", answer=a + b, numbers=(a, b))

    def reference_solution(self, problem: Problem) -> str:
        return str(problem.answer)

    def reward(self, problem: Problem, completion: str) -> float:
        _check_reward_args(problem, completion)
        return self._integer_reward(problem, parse_int(completion))


# --------------------------------------------------------------------------------- chain
class Chain(Task):
    """A left-to-right chain of ``+``/``-`` over small operands, with a running-total scratchpad.

    Example: prompt ``"3+5-2+7="``, completion ``"8,6,13#13"``: the running value after each
    operator, comma separated, then ``#`` and the final value. Evaluation is strictly left to
    right (which, for ``+`` and ``-`` only, is also the usual precedence).

    Only the integer after the LAST ``#`` is scored; the scratchpad is ignored, so a policy is
    free to write any working (or none: ``"#13"`` earns 1). No ``#`` = malformed = 0.

    Knobs:
        num_ops: the largest number of operators ``k`` (default 3: a 400k-parameter warm start
            solves about 40 % of these, the middle of the 10–50 % band RL learns best from).
        min_ops: the smallest (default ``num_ops``); each problem draws ``k`` uniformly in
            ``[min_ops, num_ops]``. The warm start uses ``min_ops=1`` to learn from a mix.
        max_operand: operands are uniform in ``[0, max_operand]`` (default 9: single digits).
        allow_negative: if False (default) the generator only subtracts what keeps the running
            value ``>= 0`` (it draws the operand first and ``-`` only when it fits), so every
            number in the scratchpad is non-negative. If True, ``+``/``-`` are equally likely
            and running values may be negative (written ``-4``).
        format_reward: reward for a well-formed wrong answer (``#`` then an integer).

    Length: at ``num_ops=4`` the prompt is at most 10 characters (``"3+5-2+7+1="``) and the
    completion at most 14 (``"12,21,30,39#39"``: four values below 46), so
    ``<bos>`` + prompt + completion + ``<eos>`` is at most 26 tokens, and the budget
    ``max_prompt_tokens + max_new_tokens`` is 11 + 19 = 30, within the tiny GPT's 64 positions
    (``ModelConfig.block_size``). The default ``num_ops=3`` needs 9 + 16 = 25.
    """

    name = "chain"

    def __init__(
        self,
        num_ops: int = 3,
        min_ops: int | None = None,
        max_operand: int = 9,
        allow_negative: bool = False,
        format_reward: float = 0.0,
    ) -> None:
        self.num_ops = _check_int("num_ops", num_ops, 1, 32)
        self.min_ops = self.num_ops if min_ops is None else _check_int("min_ops", min_ops, 1)
        if self.min_ops > self.num_ops:
            raise ValueError(f"min_ops must be <= num_ops ({num_ops}), got {min_ops}")
        self.max_operand = _check_int("max_operand", max_operand, 1, 10**6)
        if not isinstance(allow_negative, bool):
            raise ValueError(f"allow_negative must be a bool, got {allow_negative!r}")
        self.allow_negative = allow_negative
        self.format_reward = _check_format_reward(format_reward)

        operand_chars = len(str(self.max_operand))
        self.max_prompt_tokens = _BOS_TOKENS + (self.num_ops + 1) * operand_chars + self.num_ops + 1
        # |running value| <= (num_ops + 1) * max_operand; a minus sign when negatives allowed.
        value_chars = len(str((self.num_ops + 1) * self.max_operand)) + int(allow_negative)
        longest_completion = (
            self.num_ops * value_chars  # running values
            + (self.num_ops - 1)  # commas between them
            + 1  # "#"
            + value_chars  # final value
        )
        self.max_new_tokens = longest_completion + _EOS_TOKENS + 4  # 4 tokens of margin

    def _sample_one(self, rng: np.random.Generator) -> Problem:
        num_ops = int(rng.integers(self.min_ops, self.num_ops + 1))
        operands = [int(x) for x in rng.integers(0, self.max_operand + 1, size=num_ops + 1)]
        value = operands[0]
        prompt = [str(value)]
        for operand in operands[1:]:
            if self.allow_negative or operand <= value:
                op = "+" if rng.random() < 0.5 else "-"
            else:
                op = "+"
            value = value + operand if op == "+" else value - operand
            prompt.append(f"{op}{operand}")
        return Problem(prompt="".join(prompt) + "=", answer=value, numbers=tuple(operands))

    @staticmethod
    def running_values(problem: Problem) -> list[int]:
        """The value after each operator, parsed back from the prompt."""
        body = problem.prompt.rstrip("=")
        values: list[int] = []
        value, number, op = 0, "", "+"
        for char in body + "+":  # the sentinel "+" flushes the last operand
            if char.isdigit():
                number += char
                continue
            value = value + int(number) if op == "+" else value - int(number)
            values.append(value)
            number, op = "", char
        return values[1:]  # values[0] is just the first operand

    def reference_solution(self, problem: Problem) -> str:
        values = self.running_values(problem)
        return ",".join(map(str, values)) + f"#{values[-1]}"

    def reward(self, problem: Problem, completion: str) -> float:
        _check_reward_args(problem, completion)
        return self._integer_reward(problem, final_answer(completion))


# --------------------------------------------------------------------------------- multiplication
class Multiplication(Task):
    """``a*b`` with a partial-products scratchpad, long-multiplication style.

    Example: prompt ``"34*12="``, completion ``"68,340#408"``: ``a`` times each digit of ``b``
    from the least significant, shifted by its place (``34*2``, ``34*10``), then ``#`` and the
    product. With ``digits_b=1`` the scratchpad is the product itself: ``"34*7="`` ->
    ``"238#238"``. Only the integer after the LAST ``#`` is scored; no ``#`` = 0.

    Knobs:
        digits_a: digits of ``a`` (default 2).
        digits_b: digits of ``b`` (default 2; 1 is easier).
        format_reward: reward for a well-formed wrong answer (``#`` then an integer).
    """

    name = "multiplication"

    def __init__(self, digits_a: int = 2, digits_b: int = 2, format_reward: float = 0.0) -> None:
        self.digits_a = _check_int("digits_a", digits_a, 1, 6)
        self.digits_b = _check_int("digits_b", digits_b, 1, 4)
        self.format_reward = _check_format_reward(format_reward)
        self.max_prompt_tokens = _BOS_TOKENS + self.digits_a + self.digits_b + 2
        # Partial product i has at most digits_a + 1 + i characters; the product at most
        # digits_a + digits_b.
        partials = sum(self.digits_a + 1 + i for i in range(self.digits_b))
        longest_completion = partials + (self.digits_b - 1) + 1 + self.digits_a + self.digits_b
        self.max_new_tokens = longest_completion + _EOS_TOKENS + 3  # 3 tokens of margin

    def _sample_one(self, rng: np.random.Generator) -> Problem:
        a, b = _draw_with_digits(rng, self.digits_a), _draw_with_digits(rng, self.digits_b)
        return Problem(prompt=f"{a}*{b}=", answer=a * b, numbers=(a, b))

    def reference_solution(self, problem: Problem) -> str:
        a, b = problem.numbers
        digits_of_b = str(b)[::-1]  # least significant first
        partials = [a * int(d) * 10**place for place, d in enumerate(digits_of_b)]
        return ",".join(map(str, partials)) + f"#{problem.answer}"

    def reward(self, problem: Problem, completion: str) -> float:
        _check_reward_args(problem, completion)
        return self._integer_reward(problem, final_answer(completion))


# --------------------------------------------------------------------------------- countdown
@dataclass(frozen=True)
class _Node:
    """An expression tree used only by the countdown generator."""

    value: int
    text: str
    op: str | None = None  # None for a number leaf


_PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2}


def _combine(op: str, left: _Node, right: _Node) -> _Node | None:
    """``left op right`` if it keeps every value a positive integer, else ``None``."""
    if op == "+":
        value = left.value + right.value
    elif op == "-":
        value = left.value - right.value
    elif op == "*":
        value = left.value * right.value
    else:
        if right.value == 0 or left.value % right.value != 0:
            return None
        value = left.value // right.value
    if value <= 0:  # classic countdown: intermediate results stay positive
        return None
    # Minimal parentheses: a lower-precedence child needs them; so does a same-precedence
    # right child of "-" or "/" (a-(b-c) != a-b-c) and a "/" right child of "*" (kept explicit
    # so the printed order of operations is the one that was checked to divide exactly).
    left_text = left.text
    if left.op is not None and _PRECEDENCE[left.op] < _PRECEDENCE[op]:
        left_text = f"({left_text})"
    right_text = right.text
    if right.op is not None and (
        _PRECEDENCE[right.op] < _PRECEDENCE[op]
        or (_PRECEDENCE[right.op] == _PRECEDENCE[op] and (op in "-/" or right.op == "/"))
    ):
        right_text = f"({right_text})"
    return _Node(value=value, text=f"{left_text}{op}{right_text}", op=op)


class Countdown(Task):
    """Reach a target with ``+ - * /`` over given numbers, each used at most once.

    Example: prompt ``"3,5,7#22="`` (the numbers, ``#``, the target, ``=``); completion
    ``"3*5+7"`` earns 1, and so does any other expression that evaluates to 22 under the rules:

    * integers, ``+ - * /`` and parentheses, usual precedence, spaces allowed, no unary minus;
    * division must be exact (``7/2`` or ``/0`` anywhere -> 0);
    * the number literals form a sub-multiset of the given numbers (each used at most once; a
      number given twice may be used twice); with ``exact=True`` they must be all of them;
    * at most 64 characters, nesting depth 16, literals of at most 6 digits.

    Well-formed but wrong = parses and uses allowed numbers, but misses the target.

    The generator guarantees a solution: it draws the numbers, builds a random expression tree
    over all of them in a random order (random shape, random operators) and takes its value as
    the target, keeping every intermediate value a positive integer, the target in
    ``[1, max_target]`` and different from every given number (so no single number is an
    answer). ``reference_solution`` returns that expression, which uses every number once and
    so is correct for both values of ``exact``; with ``exact=False`` shorter answers over a
    subset of the numbers often exist too.

    Knobs:
        num_numbers: how many numbers are given, 3 (default) or 4.
        max_number: numbers are uniform in ``[1, max_number]`` (default 9).
        exact: if True every number must be used exactly once (default False: at most once).
        max_target: the largest target generated (default 100).
        format_reward: reward for a well-formed wrong answer.
    """

    name = "countdown"

    def __init__(
        self,
        num_numbers: int = 3,
        max_number: int = 9,
        exact: bool = False,
        max_target: int = 100,
        format_reward: float = 0.0,
    ) -> None:
        self.num_numbers = _check_int("num_numbers", num_numbers, 3, 4)
        self.max_number = _check_int("max_number", max_number, 2, 999)
        if not isinstance(exact, bool):
            raise ValueError(f"exact must be a bool, got {exact!r}")
        self.exact = exact
        self.max_target = _check_int("max_target", max_target, 10, 10**6)
        self.format_reward = _check_format_reward(format_reward)

        number_chars = len(str(self.max_number))
        target_chars = len(str(self.max_target))
        self.max_prompt_tokens = (
            _BOS_TOKENS + self.num_numbers * number_chars + (self.num_numbers - 1) + 1
        ) + (target_chars + 1)
        # A tree over n leaves has n-1 operators and at most n-2 parenthesised subtrees.
        longest_reference = (
            self.num_numbers * number_chars + (self.num_numbers - 1) + 2 * (self.num_numbers - 2)
        )
        # 6 tokens of margin: other correct expressions may be longer than the reference.
        self.max_new_tokens = longest_reference + _EOS_TOKENS + 6

    def _random_tree(self, rng: np.random.Generator, leaves: list[_Node]) -> _Node | None:
        if len(leaves) == 1:
            return leaves[0]
        split = int(rng.integers(1, len(leaves)))
        left = self._random_tree(rng, leaves[:split])
        right = self._random_tree(rng, leaves[split:])
        if left is None or right is None:
            return None
        return _combine("+-*/"[int(rng.integers(4))], left, right)

    def _sample_one(self, rng: np.random.Generator) -> Problem:
        # Rejection sampling; "+" over positive numbers always succeeds, so for any valid
        # knobs a draw is accepted with substantial probability and this loop ends quickly.
        for _ in range(10_000):
            numbers = tuple(int(x) for x in rng.integers(1, self.max_number + 1, self.num_numbers))
            # All numbers, in a random order, so the reference also satisfies exact=True.
            order = rng.permutation(self.num_numbers)
            tree = self._random_tree(rng, [_Node(numbers[i], str(numbers[i])) for i in order])
            if tree is None or tree.value > self.max_target or tree.value in numbers:
                continue
            target = tree.value
            return Problem(
                prompt=",".join(map(str, numbers)) + f"#{target}=",
                answer=target,
                numbers=numbers,
                target=target,
                solution=tree.text,
            )
        raise RuntimeError(f"could not generate a countdown problem with knobs {self.knobs()}")

    def reference_solution(self, problem: Problem) -> str:
        if problem.solution is not None:
            return problem.solution
        solution = solve_countdown(problem.numbers, problem.answer, exact=self.exact)
        if solution is None:
            raise ValueError(f"problem has no solution under these rules: {problem}")
        return solution

    def reward(self, problem: Problem, completion: str) -> float:
        _check_reward_args(problem, completion)
        evaluation = evaluate_expression(completion)
        if evaluation is None or not evaluation.literals:
            return 0.0
        used, available = Counter(evaluation.literals), Counter(problem.numbers)
        if used - available:  # a number not given, or used more often than given
            return 0.0
        if self.exact and used != available:
            return 0.0
        return 1.0 if evaluation.value == problem.answer else self.format_reward


def solve_countdown(numbers: Sequence[int], target: int, *, exact: bool = False) -> str | None:
    """An expression reaching ``target`` under countdown's rules, or ``None`` (brute force).

    Used for problems that did not come from this instance's generator (e.g. built by hand).
    Exhaustive over subsets, orders, operators and tree shapes: fine for 3-4 numbers.
    """
    leaves = [_Node(int(n), str(int(n))) for n in numbers]

    def search(nodes: list[_Node]) -> str | None:
        for node in nodes:
            if node.value == target and (not exact or len(nodes) == 1) and node.op is not None:
                return node.text
        if len(nodes) == 1:
            return None
        for i in range(len(nodes)):
            for j in range(len(nodes)):
                if i == j:
                    continue
                rest = [nodes[k] for k in range(len(nodes)) if k not in (i, j)]
                for op in "+-*/":
                    combined = _combine(op, nodes[i], nodes[j])
                    if combined is not None:
                        found = search([*rest, combined])
                        if found is not None:
                            return found
        return None

    # A bare number is never an answer the generator would pose, but it is valid if equal.
    for node in leaves:
        if node.value == target and (not exact or len(leaves) == 1):
            return node.text
    return search(leaves)


# --------------------------------------------------------------------------------- registry
TASKS: dict[str, type[Task]] = {
    task.name: task for task in (Addition, Chain, Multiplication, Countdown)
}
TASK_NAMES: tuple[str, ...] = tuple(TASKS)
#: The task the quickstart, the notebooks and the trainer use unless told otherwise.
DEFAULT_TASK = "chain"


def get_task(name: str = DEFAULT_TASK, **knobs: object) -> Task:
    """Build the task called ``name`` with its knobs, e.g. ``get_task("chain", num_ops=2)``.

    Raises:
        ValueError: for an unknown name (listing the valid ones), an unknown knob (listing the
            task's knobs) or a knob value out of range.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; valid names: {', '.join(TASK_NAMES)}")
    task_class = TASKS[name]
    valid = [k for k in inspect.signature(task_class.__init__).parameters if k != "self"]
    unknown = sorted(set(knobs) - set(valid))
    if unknown:
        raise ValueError(f"unknown knob(s) {unknown} for task {name!r}; valid: {valid}")
    return task_class(**knobs)
