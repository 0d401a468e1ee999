"""Shape-typed math: the jaxtyping annotations of ``refimpl.core``, the contract and the
algorithm files.

In the test session ``tests/conftest.py`` wraps the public functions of those modules whose
annotations fix a tensor's rank in ``jaxtyped(typechecker=beartype)``, so every call checks its
tensors against the signature (``Float[Tensor, "B T"]`` per token, ``Float[Tensor, " B"]`` per
completion, one binding of ``B`` and ``T`` per call). Outside the tests nothing is wrapped:
training pays nothing (the subprocess test below).

Invariants:

* the checks are applied: every public function with a fixed-rank shape annotation is
  jaxtyping's wrapper, and only those (``require`` and the shape-generic ``masked``, ... stay
  plain: see tests/conftest.py for why);
* every annotation resolves (jaxtyping silently reads an unresolvable string as ``Any``, which
  would switch that check off without a word);
* every algorithm file has the same signatures for ``advantages``, ``reference_advantages``
  and ``loss`` (they are parallel on purpose);
* a ``[B]`` tensor where ``[B, T]`` is expected fails with a message naming the argument, and
  so do a non-float ``logp`` and two arguments that disagree on ``B`` or ``T``;
* the project's own ``ValueError("<argument>: expected ...")`` checks, which are all a
  training run has, still fire when the shape checks are off;
* without the hook, importing ``refimpl`` and training one step never imports beartype and
  leaves every function the plain function.
"""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import jaxtyping
import pytest
import torch

from refimpl import algorithms, contract, core, loss_metrics
from refimpl.algorithms import NAMES
from refimpl.contract import RolloutBatch

ROOT = Path(__file__).resolve().parents[2]

#: The public functions whose signatures the algorithm files share.
SHARED = ("advantages", "reference_advantages", "loss")


def _public_functions(module):
    """The functions ``module`` defines (not imports) whose names do not start with ``_``."""
    return {
        name: fn
        for name, fn in vars(module).items()
        if inspect.isfunction(fn)
        and not name.startswith("_")
        and inspect.unwrap(fn).__module__ == module.__name__
    }


MODULES = [contract, core, loss_metrics] + [algorithms.get(name) for name in NAMES]


def _batch(B: int = 4, T: int = 3, G: int = 2) -> RolloutBatch:
    mask = torch.ones(B, T)
    mask[1, 2:] = 0.0  # one ragged row
    return RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 0.0] * (B // 2)),
        logp_old=-torch.linspace(0.1, 2.0, B * T).reshape(B, T),
        entropy_old=torch.linspace(0.5, 1.5, B * T).reshape(B, T),
        group_size=G,
        logp_ref=-torch.ones(B, T),
        token_values=torch.full((B, T), 0.5, dtype=torch.float64),  # VinePPO's V̂
    )


@pytest.fixture
def checks_off():
    """Switch the shape checks off for one test (jaxtyping reads the flag at every call)."""
    jaxtyping.config.update("jaxtyping_disable", True)
    try:
        yield
    finally:
        jaxtyping.config.update("jaxtyping_disable", False)


def _shape_kind(hint: object) -> set[str]:
    """``{"fixed"}`` / ``{"variadic"}`` / both / neither: the jaxtyping ranks in a hint."""
    if inspect.isclass(hint) and issubclass(hint, jaxtyping.AbstractArray):
        return {"variadic" if "*" in hint.dim_str or "..." in hint.dim_str else "fixed"}
    return set().union(*(_shape_kind(arg) for arg in typing.get_args(hint)))


def test_checks_are_applied():
    """conftest wrapped exactly the public functions of the contract, core and every algorithm
    file with a fixed-rank shape annotation (so the tests below test the checks, not their
    absence), among them the three every algorithm file has, and beartype is the checker. The
    shape-generic primitives are annotated too, and stay plain."""
    n_checked = n_generic = 0
    for module in MODULES:
        for name, fn in _public_functions(module).items():
            hints = typing.get_type_hints(inspect.unwrap(fn), include_extras=True)
            kinds = set().union(*(_shape_kind(h) for h in hints.values()))
            assert hasattr(fn, "__wrapped__") == ("fixed" in kinds), f"{module.__name__}.{name}"
            if "fixed" in kinds:
                assert fn.__code__.co_filename != inspect.unwrap(fn).__code__.co_filename
                n_checked += 1
            n_generic += kinds == {"variadic"}
    for name in NAMES:
        for fn_name in SHARED:
            assert hasattr(getattr(algorithms.get(name), fn_name), "__wrapped__")
    for fn in (core.aggregate, core.token_ratio, core.broadcast_to_tokens, core.group_normalize):
        assert hasattr(fn, "__wrapped__")
    assert hasattr(RolloutBatch.select_groups, "__wrapped__")
    for fn in (contract.require, core.masked, core.masked_sum, core.masked_mean, core.group_view):
        assert not hasattr(fn, "__wrapped__")
    assert n_checked >= 20 + len(NAMES) * len(SHARED)
    assert n_generic == 8
    assert "beartype" in sys.modules


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_annotations_resolve(module):
    """Every annotation of every public function resolves in its module (``from __future__
    import annotations`` makes them strings; jaxtyping would read a broken one as ``Any``)."""
    for name, fn in _public_functions(module).items():
        hints = typing.get_type_hints(inspect.unwrap(fn), include_extras=True)
        assert "return" in hints, f"{module.__name__}.{name} has no return annotation"


def test_algorithm_signatures_are_parallel():
    """``advantages``, ``reference_advantages`` and ``loss`` read the same in every algorithm
    file, and state the shapes: ``logp``, ``adv`` and the advantages are ``[B, T]`` float,
    the loss a float scalar."""
    for fn_name in SHARED:
        texts = {str(inspect.signature(getattr(algorithms.get(n), fn_name))) for n in NAMES}
        assert len(texts) == 1, f"{fn_name} signatures differ: {texts}"
    hints = typing.get_type_hints(inspect.unwrap(algorithms.get("grpo").loss))
    for arg in ("logp", "adv"):
        assert str(hints[arg]) == str(jaxtyping.Float[torch.Tensor, "B T"])
    assert str(typing.get_args(hints["return"])[0]) == str(jaxtyping.Float[torch.Tensor, ""])
    adv_hints = typing.get_type_hints(inspect.unwrap(algorithms.get("grpo").advantages))
    assert str(adv_hints["return"]) == str(jaxtyping.Float[torch.Tensor, "B T"])


@pytest.mark.parametrize("name", NAMES)
def test_sequence_tensor_for_token_tensor_names_the_argument(name):
    """A ``[B]`` ``logp`` where ``[B, T]`` is expected fails before the loss runs, with a
    message that names ``logp`` and its expected type; so does an integer ``logp``."""
    mod = algorithms.get(name)
    cfg = mod.Config()
    batch = _batch()
    adv = mod.advantages(batch, cfg)
    logp = batch.logp_old.clone()
    with pytest.raises(jaxtyping.TypeCheckError) as info:
        mod.loss(batch, logp[:, 0], adv, cfg, entropy=batch.entropy_old)
    assert "parameter 'logp'" in str(info.value)
    assert "Float[Tensor, 'B T']" in str(info.value)
    with pytest.raises(jaxtyping.TypeCheckError, match="parameter 'logp'"):
        mod.loss(batch, logp.long(), adv, cfg, entropy=batch.entropy_old)
    # The shape error is also a ValueError, as the public functions promise.
    assert isinstance(info.value, ValueError)


def test_core_names_the_argument():
    """In core, a ``[B]`` tensor where ``[B, T]`` is expected names that argument too."""
    b = _batch()
    with pytest.raises(jaxtyping.TypeCheckError, match="parameter 'logp'"):
        core.token_ratio(b.logp_old[:, 0], b.logp_old, b.response_mask)
    with pytest.raises(jaxtyping.TypeCheckError, match="parameter 'mask'"):
        core.aggregate(b.logp_old, b.response_mask[:, 0], "token-mean")
    with pytest.raises(jaxtyping.TypeCheckError, match="parameter 'per_sequence'"):
        core.broadcast_to_tokens(b.logp_old, b.response_mask)


def test_mismatched_dimensions_fail():
    """Two arguments that disagree on ``B`` (or ``T``) fail, though each alone is a valid
    ``[B, T]`` tensor: the first binds ``B``, the second contradicts it; so does a ``[1, T]``
    mask that torch would broadcast."""
    b = _batch(B=4, T=3)
    other = _batch(B=6, T=3)
    with pytest.raises(jaxtyping.TypeCheckError, match="B=4"):
        core.token_ratio(b.logp_old, other.logp_old, b.response_mask)
    cfg = algorithms.get("gtpo").Config()
    adv = algorithms.get("gtpo").advantages(other, cfg)
    with pytest.raises(jaxtyping.TypeCheckError, match="parameter 'adv'"):
        algorithms.get("gtpo").loss(b, b.logp_old.clone(), adv, cfg)
    with pytest.raises(jaxtyping.TypeCheckError, match="T=3"):
        core.token_covariance(b.logp_old, b.logp_old[:, :2], b.response_mask)
    # [1, T] would broadcast in torch.where; the "B T" annotations refuse it.
    with pytest.raises(jaxtyping.TypeCheckError, match="parameter 'mask'"):
        core.token_ratio(b.logp_old, b.logp_old, b.response_mask[:1])


@pytest.mark.parametrize("name", NAMES)
def test_own_validation_without_checks(name, checks_off):
    """With the shape checks off (as in training), the same bad tensors still raise the
    project's own ``ValueError("<argument>: expected ...")``: the annotations add a check in
    the tests, they replace none."""
    mod = algorithms.get(name)
    cfg = mod.Config()
    batch = _batch()
    adv = mod.advantages(batch, cfg)
    logp = batch.logp_old.clone()
    for bad_logp, bad_adv, argument in (
        (logp[:, 0], adv, "logp"),
        (logp.long(), adv, "logp"),
        (logp, adv[:2], "adv"),
    ):
        with pytest.raises(ValueError) as info:
            mod.loss(batch, bad_logp, bad_adv, cfg, entropy=batch.entropy_old)
        assert not isinstance(info.value, jaxtyping.TypeCheckError)
        assert str(info.value).startswith(f"{argument}: expected")


ZERO_OVERHEAD = textwrap.dedent(
    """
    import inspect, json, sys
    import torch
    from refimpl import algorithms, contract, core, loss_metrics
    from refimpl.contract import RolloutBatch

    B, T, G = 8, 5, 4
    mask = torch.ones(B, T)
    mask[0, 3:] = 0
    batch = RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long), response_mask=mask,
        rewards=torch.tensor([1.0, 0.0] * 4), logp_old=-torch.rand(B, T) - 0.1,
        entropy_old=torch.rand(B, T), group_size=G,
    )
    mod = algorithms.get("gtpo")
    cfg = mod.Config()
    logp = batch.logp_old.clone().requires_grad_(True)
    total, _ = mod.loss(batch, logp, mod.advantages(batch, cfg), cfg)
    total.backward()
    modules = [contract, core, loss_metrics] + [algorithms.get(n) for n in algorithms.NAMES]
    functions = [
        (m, f) for m in modules for n, f in vars(m).items()
        if inspect.isfunction(f) and not n.startswith("_") and f.__module__ == m.__name__
    ]
    print(json.dumps({
        "beartype": "beartype" in sys.modules,
        "hooks": [type(h).__name__ for h in sys.meta_path if "axtyping" in type(h).__name__],
        "wrapped": [f.__qualname__ for _, f in functions if hasattr(f, "__wrapped__")],
        "foreign_code": [
            f.__qualname__ for m, f in functions if f.__code__.co_filename != m.__file__
        ],
        "n_functions": len(functions),
        "grad_finite": bool(torch.isfinite(logp.grad).all()),
    }))
    """
)


def test_zero_overhead_outside_tests():
    """Outside the test session (a fresh interpreter, no hook), importing ``refimpl`` and
    running GTPO's advantages, loss and backward leaves beartype unimported, installs no
    jaxtyping hook, and every public function of core and the algorithm files is the plain
    function compiled from its own file: no wrapper, so no per-call cost."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAXTYPING")}
    env["PYTHONPATH"] = str(ROOT)
    out = subprocess.run(
        [sys.executable, "-c", ZERO_OVERHEAD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["beartype"] is False
    assert result["hooks"] == []
    assert result["wrapped"] == []
    assert result["foreign_code"] == []
    assert result["n_functions"] >= len(NAMES) * len(SHARED)
    assert result["grad_finite"]
