"""What counts as a success is the algorithm Config's ``success_threshold``, read everywhere.

Every Config has ``success_threshold`` (``r ≥`` it is a success); the loop's ``success_rate``,
the held-out evaluation, the real model's evaluation and the notebooks' row labels read it
(from the Config, or as an argument whose default is the one every Config shares,
``refimpl.contract.SUCCESS_THRESHOLD``, the one place the number is written). The behavioural
tests move the threshold to either end of the toy tasks' reward range [0, 1] and see the
success rates follow it, which a hard-coded 0.5 would not; the source tests fail on a
comparison against a literal 0.5 that decides a success, on a text that writes the threshold
as a number, and on a ``Config`` built when a module is imported."""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from refimpl import algorithms, contract, evaluate, loop
from refimpl.diagnostics.observers import HeldOutEvaluation, default_observers
from refimpl.model import GPT, GPTConfig
from refimpl.settings.train_config import TrainConfig
from toy_envs import TOKENIZER, get_task

ROOT = Path(__file__).resolve().parents[1]

#: Rewards of the toy tasks lie in [0, 1]: at ``EVERYONE`` every completion succeeds, at
#: ``NO_ONE`` none does, whatever the policy writes.
EVERYONE, NO_ONE = 0.0, 1.5


def tiny_model(seed: int = 0) -> GPT:
    """An untrained 1-layer GPT: its completions are mostly wrong (reward 0) at 0.5."""
    torch.manual_seed(seed)
    config = GPTConfig(vocab_size=TOKENIZER.vocab_size, n_layer=1, n_embd=16, n_head=2)
    return GPT(config).eval()


def test_every_config_shares_the_default_read_from_one_place():
    assert contract.SUCCESS_THRESHOLD == 0.5
    (field,) = [f for f in fields(contract.AlgorithmConfig) if f.name == "success_threshold"]
    assert field.default is contract.SUCCESS_THRESHOLD
    for name in algorithms.NAMES:
        assert algorithms.get(name).Config().success_threshold == contract.SUCCESS_THRESHOLD
    assert not hasattr(algorithms, "SUCCESS_THRESHOLD")  # its old home, built from a Config


@pytest.mark.parametrize("threshold, expected", [(EVERYONE, 1.0), (NO_ONE, 0.0)])
def test_the_loops_success_rate_reads_the_configs_threshold(threshold, expected):
    cfg = loop.LoopConfig(
        algo="grpo", algo_cfg=algorithms.get("grpo").Config(success_threshold=threshold),
        task_knobs={"num_ops": 1}, steps=1, prompts_per_step=2, group_size=2, minibatches=1,
        max_new_tokens=4,
    )  # fmt: skip
    history = loop.train(tiny_model(), cfg, log=lambda line: None)
    assert [h["success_rate"] for h in history] == [expected]


def test_evaluation_reads_the_threshold_it_is_given():
    task = get_task("chain", num_ops=1)
    problems = task.sample(6, np.random.default_rng(0))
    model = tiny_model()
    for threshold, expected in ((EVERYONE, 1.0), (NO_ONE, 0.0)):
        kwargs = {"max_new_tokens": 4, "success_threshold": threshold}
        assert evaluate.solved(model, task, problems, greedy=True, **kwargs).tolist() == [
            expected
        ] * len(problems)
        counts = evaluate.correct_counts(model, task, problems, 3, **kwargs)
        assert counts == [int(3 * expected)] * len(problems)
        out = evaluate.heldout_metrics(
            model, task, problems, 2, generator=torch.Generator().manual_seed(0), **kwargs
        )
        assert out["heldout_greedy"] == expected and out["heldout_pass@2"] == expected


@pytest.mark.parametrize("threshold, expected", [(EVERYONE, 1.0), (NO_ONE, 0.0)])
def test_the_trainers_held_out_evaluation_passes_its_configs_threshold(threshold, expected):
    task = get_task("chain", num_ops=1)
    algo_cfg = algorithms.get("dapo").Config(success_threshold=threshold)
    cfg = TrainConfig(eval_problems=4, eval_samples=2, seed=0, probe_every=0)
    # the Trainer's defaults, made as the Trainer makes them: with its Config's threshold
    observers = default_observers(cfg, task, 4, algo_cfg.success_threshold, Path("unused"))
    (evaluation,) = [o for o in observers if isinstance(o, HeldOutEvaluation)]
    state = SimpleNamespace(model=tiny_model(), device=torch.device("cpu"), step=0)
    out = evaluation.evaluate(state)
    assert out["heldout_greedy"] == expected and out["heldout_pass@1"] == expected


def test_the_trainer_makes_its_observers_with_its_configs_threshold():
    """The Trainer's call of ``default_observers`` passes its Config's ``success_threshold``."""
    tree = ast.parse((Path(__file__).parents[1] / "refimpl" / "train.py").read_text())
    calls = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "default_observers"
    ]
    assert len(calls) == 1
    passed = [ast.unparse(a) for a in calls[0].args]
    where = list(inspect.signature(default_observers).parameters).index("success_threshold")
    assert passed[where] == "self.algo_cfg.success_threshold"


# ---------------------------------------------------------------------------------------------
# No success decided against a literal 0.5 in the code.
# ---------------------------------------------------------------------------------------------

#: A name of the compared value that says it is a reward: ``r``, ``rewards``, ``outcome``,
#: ``score_samples(...)``, ``task.reward(...)``, ``success``...
REWARD_NAME = re.compile(r"^(r|.*rewards?.*|.*outcomes?.*|.*score.*|.*success.*|wins?)$", re.I)

#: Literal thresholds waiting for a change elsewhere, as (file, source text); none is left
#: (``refimpl/bench/`` reads the Config's). An entry is dropped once its line is gone.
PENDING: set[tuple[str, str]] = set()


def _names(node: ast.AST) -> set[str]:
    out = set()
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            out.add(n.id)
        elif isinstance(n, ast.Attribute):
            out.add(n.attr)
    return out


def _is_half(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and type(node.value) is float and node.value == 0.5


def literal_success_comparisons(source: str) -> list[str]:
    """The comparisons of ``source`` that decide a success against a literal: a ``<``, ``<=``,
    ``>`` or ``>=`` between the number 0.5 and a value whose names say it is a reward
    (``REWARD_NAME``), and every parameter called ``*success_threshold*`` whose default is a
    number (a second copy of the Configs' default). Each as its source text."""
    tree = ast.parse(source)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, a, b in zip(node.ops, operands, operands[1:]):
                if not isinstance(op, ast.Lt | ast.LtE | ast.Gt | ast.GtE):
                    continue
                other = b if _is_half(a) else a if _is_half(b) else None
                if other is not None and any(REWARD_NAME.match(n) for n in _names(other)):
                    out.append(ast.get_source_segment(source, node))
        elif isinstance(node, ast.arguments):
            params = [*node.posonlyargs, *node.args]
            pairs = list(zip(params[len(params) - len(node.defaults) :], node.defaults))
            pairs += [(a, d) for a, d in zip(node.kwonlyargs, node.kw_defaults) if d is not None]
            for arg, default in pairs:
                if "success_threshold" in arg.arg and isinstance(default, ast.Constant):
                    out.append(f"{arg.arg}={default.value!r}")
    return out


def code_files() -> list[Path]:
    """Every Python file of the repository outside ``tests/`` (whose fixtures state values)."""
    skip = {"tests", "runs", "site", "build", "node_modules"}
    return [
        p
        for p in sorted(ROOT.rglob("*.py"))
        if not any(part.startswith(".") or part in skip for part in p.relative_to(ROOT).parts)
    ]


def test_no_success_is_decided_against_a_literal_half():
    found = {
        (str(path.relative_to(ROOT)), text)
        for path in code_files()
        for text in literal_success_comparisons(path.read_text(encoding="utf-8"))
    }
    assert found - PENDING == set()


def test_the_source_check_sees_a_literal_threshold():
    """The check can fail: each way of writing the threshold as a number is found, and what is
    not a success (a luminance, a coin flip, a ratio) is left alone."""
    caught = """
ok = float((outcome >= 0.5).float().mean())
labels = ['✓' if r >= 0.5 else '✗' for r in rewards]
wins = task.reward(problem, text) >= 0.5
failed = 0.5 > batch.rewards
def f(x, *, success_threshold: float = 0.5): ...
"""
    assert len(literal_success_comparisons(caught)) == 5
    left = """
dark = 0.299 * rgba[0] + 0.587 * rgba[1] < 0.5
heads = rng.random() < 0.5
holds = ratio <= 0.5
ok = outcome >= cfg.success_threshold
def f(x, *, success_threshold: float = SUCCESS_THRESHOLD): ...
"""
    assert literal_success_comparisons(left) == []


# ---------------------------------------------------------------------------------------------
# The number is written once: no text states it, no Config is built to read it.
# ---------------------------------------------------------------------------------------------

#: A text that writes the threshold as a number: ``r ≥ 0.5``, ``1[r_i >= 0.5]``...
WRITTEN_THRESHOLD = re.compile(r"\br\w*\s*(≥|>=)\s*0?\.5\b")


def written_thresholds(source: str) -> list[str]:
    """The string literals of ``source`` (docstrings aside: prose may name the default) that
    write the threshold as a number, e.g. a generated page's ``1[r ≥ 0.5]``; an f-string's
    text parts count, its ``{...}`` fields do not."""
    tree = ast.parse(source)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and WRITTEN_THRESHOLD.search(node.value)
    ]


def test_no_text_writes_the_threshold_as_a_number():
    found = {
        (str(path.relative_to(ROOT)), text)
        for path in code_files()
        for text in written_thresholds(path.read_text(encoding="utf-8"))
    }
    assert found == set()


def test_the_text_check_sees_a_written_threshold():
    caught = """
line = "V(s_end) = 1[r ≥ 0.5]"
other = f"{x}: keep r_i >= 0.5"
"""
    assert len(written_thresholds(caught)) == 2
    left = '''
"""A docstring may say r ≥ 0.5 is the default."""
line = f"V(s_end) = 1[r ≥ {cfg.success_threshold:g}]"
share = "a later V̂ ≥ 0.5"
'''
    assert written_thresholds(left) == []


def configs_built_at_import(source: str) -> list[str]:
    """The calls of a ``Config`` (``Config()``, ``get(name).Config()``, ``TrainConfig(...)``)
    that run when the module is imported: outside every function body."""
    found = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue  # runs when called, not when imported
            if isinstance(child, ast.Call):
                func = child.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name.endswith("Config"):
                    found.append(ast.get_source_segment(source, child))
            visit(child)

    visit(ast.parse(source))
    return found


def test_no_module_of_the_package_builds_a_config_when_imported():
    """The default is a constant of the contract, not read off a Config made at import time
    (``SUCCESS_THRESHOLD = get(BASELINE).Config().success_threshold`` was)."""
    found = {
        (str(path.relative_to(ROOT)), text)
        for path in sorted((ROOT / "refimpl").rglob("*.py"))
        for text in configs_built_at_import(path.read_text(encoding="utf-8"))
    }
    assert found == set()


def test_the_import_check_sees_a_config_built_at_import():
    caught = """
SUCCESS_THRESHOLD = get(BASELINE).Config().success_threshold
DEFAULT = TrainConfig(steps=1)
class C:
    default = Config()
"""
    assert len(configs_built_at_import(caught)) == 3
    left = """
def f(name):
    return get(name).Config().success_threshold
g = lambda: Config()
@dataclass
class C:
    algo_cfg: object = field(default_factory=lambda: GRPOConfig())
"""
    assert configs_built_at_import(left) == []
