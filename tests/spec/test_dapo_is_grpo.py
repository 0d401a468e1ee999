"""DAPO's advantage and loss are GRPO's: only its ``Config`` differs (issue 60, item 5).

``dapo.py`` keeps GRPO's code line for line, so that ``diff grpo.py dapo.py`` shows only what
DAPO changes. The copy must not be what keeps the two in step: these tests fail when either
file's ``advantages``, ``reference_advantages`` or ``loss`` changes and the other's does not,
by comparing their code (comments, docstrings and the algorithm's name aside) and their
values on random batches under the same settings."""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import asdict

import pytest
import torch

from refimpl import contract
from refimpl.algorithms import dapo, grpo

FUNCTIONS = ("advantages", "reference_advantages", "loss")


def code_of(fn) -> str:
    """The function's code without its docstring and comments, as ``ast.unparse`` writes it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    node = tree.body[0]
    if isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant):
        node.body = node.body[1:]
    return ast.unparse(node)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_code_is_grpos(name):
    assert code_of(getattr(dapo, name)) == code_of(getattr(grpo, name))


def test_the_code_check_sees_a_change():
    def loss(batch, cfg):
        """Docstring."""
        return cfg.a  # a comment

    def loss_changed(batch, cfg):
        return -cfg.a

    def loss_same(batch, cfg):
        return cfg.a

    assert code_of(loss).replace("loss", "f") == code_of(loss_same).replace("loss_same", "f")
    assert code_of(loss).replace("loss", "f") != code_of(loss_changed).replace("loss_changed", "f")


def random_batch(seed: int) -> contract.RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    N, G, T = 3, 4, 7
    B = N * G
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    logp_old = -torch.rand(B, T, generator=g) * 3
    return contract.RolloutBatch(
        response_ids=torch.randint(3, 18, (B, T), generator=g),
        response_mask=mask,
        rewards=torch.randint(0, 2, (B,), generator=g).float(),
        logp_old=logp_old,
        entropy_old=torch.rand(B, T, generator=g) * 2,
        group_size=G,
        logp_ref=logp_old - torch.rand(B, T, generator=g),
    )


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("config", ["dapo", "grpo"])
def test_the_values_are_grpos_under_the_same_settings(seed, config):
    """With every field equal, DAPO and GRPO give the same advantages, the same loss, the
    same gradient and the same metrics (at DAPO's defaults and at GRPO's)."""
    fields = asdict(dapo.Config() if config == "dapo" else grpo.Config())
    d_cfg, g_cfg = dapo.Config(**fields), grpo.Config(**fields)
    batch = random_batch(seed)
    A = dapo.advantages(batch, d_cfg)
    assert torch.equal(A, grpo.advantages(batch, g_cfg))
    assert torch.equal(
        dapo.reference_advantages(batch, d_cfg), grpo.reference_advantages(batch, g_cfg)
    )
    moved = 0.3 * torch.randn(batch.logp_old.shape, generator=torch.Generator().manual_seed(seed))
    out = {}
    for name, algo, cfg in (("dapo", dapo, d_cfg), ("grpo", grpo, g_cfg)):
        logp = (batch.logp_old + moved).clamp(max=0.0).requires_grad_(True)
        value, metrics = algo.loss(batch, logp, A, cfg)
        value.backward()
        out[name] = (value.detach(), logp.grad, metrics)
    assert torch.equal(out["dapo"][0], out["grpo"][0])
    assert torch.equal(out["dapo"][1], out["grpo"][1])
    assert out["dapo"][2] == out["grpo"][2]
