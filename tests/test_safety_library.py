"""The library refuses what it cannot compute (issue: nothing lost, nothing silently wrong).

Every algorithm Config field is type- and range-checked (bools are bools); a ``loss`` refuses
another algorithm's Config, naming both; advantages that would overflow float32 are refused
rather than returned as ±inf; ``RolloutBatch`` refuses an empty batch with one message.

The functions are called unwrapped (``inspect.unwrap``): the test session's jaxtyping and
beartype wrappers would otherwise refuse some of these inputs first, which no user has.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import typing

import pytest
import torch

from refimpl import algorithms
from refimpl.core import RolloutBatch

MODULES = {name: algorithms.get(name) for name in algorithms.NAMES}


def batch(rewards: list[float], group_size: int, T: int = 3) -> RolloutBatch:
    B = len(rewards)
    return RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=torch.ones(B, T),
        rewards=torch.tensor(rewards),
        logp_old=-torch.ones(B, T),
        entropy_old=torch.ones(B, T),
        group_size=group_size,
        logp_ref=-torch.ones(B, T),
    )


def call(fn, *args, **kwargs):
    return inspect.unwrap(fn)(*args, **kwargs)


def wrong_values(kind: type) -> list:
    """Values of the wrong type (or not finite) for a field annotated ``kind``."""
    return {
        bool: ["no", 1, 0, None],
        int: [True, 1.5, "3"],
        float: [True, float("nan"), float("inf"), "0.1"],
        str: [1, None, True],
    }[kind]


def typed_fields(module) -> list[tuple[str, type]]:
    hints = typing.get_type_hints(module.Config)
    out = []
    for f in dataclasses.fields(module.Config):
        hint = hints[f.name]
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        kind = args[0] if args else hint
        if kind in (bool, int, float, str):
            out.append((f.name, kind))
    return out


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_every_config_field_refuses_a_wrongly_typed_value(name):
    """The issue's silent results 8: ``gpg.Config(normalize_std="no")`` meant true,
    ``gtpo.Config(alpha_2=True)`` was accepted. Every field of every Config, every kind of
    wrong value: a ValueError naming the field."""
    module = MODULES[name]
    for field, kind in typed_fields(module):
        for value in wrong_values(kind):
            if value is None and type(None) in typing.get_args(
                typing.get_type_hints(module.Config)[field]
            ):
                continue  # X | None takes None
            with pytest.raises(ValueError, match=rf"^Config\.{field}: expected"):
                module.Config(**{field: value})


def test_the_issue_s_config_values_are_refused():
    with pytest.raises(ValueError, match="Config.normalize_std: expected a bool"):
        MODULES["gpg"].Config(normalize_std="no")
    with pytest.raises(ValueError, match="Config.alpha_2: expected a float, got True"):
        MODULES["gtpo"].Config(alpha_2=True)
    with pytest.raises(ValueError, match="Config.seed: expected an integer ≥ 0"):
        MODULES["clip_cov"].Config(seed=-1)
    MODULES["clip_cov"].Config(seed=None)  # None: torch's own generator, still allowed


def test_a_loss_refuses_another_algorithm_s_config_by_name():
    """The issue: another algorithm's Config passed to a ``loss`` silently used its clip
    range (GSPO's 3e-4 in grpo, dapo, gpg, gtpo, rloo) or raised AttributeError."""
    b = batch([1.0, 0.0, 0.0, 1.0], 2)
    logp = b.logp_old.clone()
    adv = torch.zeros(4, 3)
    for name, module in MODULES.items():
        for other, foreign in MODULES.items():
            if other == name:
                continue
            cfg = foreign.Config().for_generation_budget(3)
            with pytest.raises(
                ValueError, match=rf"^cfg: expected a {name}\.Config, got {other}\."
            ):
                call(module.loss, b, logp, adv, cfg, entropy=torch.ones(4, 3))


@pytest.mark.parametrize("name", ["dr_grpo", "gpg", "rloo"])
@pytest.mark.parametrize(
    "rewards",
    [[3e38, -3e38], [3e38, -3e38, -3e38, -3e38], [-3.4e38, 3.4e38, 0.0, 0.0]],
    ids=["pair", "one-high", "extremes"],
)
def test_rewards_near_float32_s_largest_never_give_inf(name, rewards):
    """The issue: finite rewards of ±3e38 gave ±inf advantages and loss in dr_grpo, gpg
    and rloo. Either the advantages or the loss refuses them (naming the rewards or the
    advantages); nothing returns a non-finite value."""
    module = MODULES[name]
    cfg = module.Config().for_generation_budget(3)
    b = batch(rewards, len(rewards))
    refusal = r"^(rewards|adv): expected .* rescale the rewards$"
    try:
        adv = call(module.advantages, b, cfg)
    except ValueError as err:
        assert re.match(refusal, str(err)), err
        return
    assert bool(torch.isfinite(adv).all()), adv  # never ±inf
    with pytest.raises(ValueError, match=refusal):  # the float32 loss would overflow
        call(module.loss, b, b.logp_old.clone(), adv, cfg)


@pytest.mark.parametrize("shape", [(0, 3), (4, 0)], ids=["B=0", "T=0"])
def test_an_empty_rollout_batch_is_refused_with_one_message(shape):
    """The issue: RolloutBatch took B = 0 or T = 0, and GTPO and GRPO-S failed deep inside a
    reshape. Both give the same message, at construction."""
    B, T = shape
    with pytest.raises(ValueError, match=r"^response_mask: expected a non-empty batch"):
        RolloutBatch(
            response_ids=torch.zeros(B, T, dtype=torch.long),
            response_mask=torch.ones(B, T),
            rewards=torch.zeros(B),
            logp_old=torch.zeros(B, T),
            entropy_old=torch.zeros(B, T),
            group_size=2,
        )
