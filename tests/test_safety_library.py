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
import math
import re
import typing

import pytest
import torch

from refimpl import algorithms, core
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


def test_advantages_refuse_another_algorithm_s_config_or_none():
    """The issue's silent result 6: ``grpo.advantages(b, gtpo.Config(eps=0.5))`` gave 0.414
    where 0.707 is right (9 algorithms read the foreign fields by name), 4 raised a raw
    AttributeError, and ``advantages(b, None)`` was an AttributeError in 11 and silently
    fine in dr_grpo and rloo. ``advantages`` refuses them as ``loss`` does."""
    b = batch([1.0, 0.0, 0.0, 1.0], 2)
    for name, module in MODULES.items():
        for other, foreign in MODULES.items():
            if other != name:
                cfg = foreign.Config().for_generation_budget(3)
                with pytest.raises(
                    ValueError, match=rf"^cfg: expected a {name}\.Config, got {other}\."
                ):
                    call(module.advantages, b, cfg)
        with pytest.raises(ValueError, match=rf"^cfg: expected a {name}\.Config, got None"):
            call(module.advantages, b, None)
    own = call(MODULES["grpo"].advantages, b, MODULES["grpo"].Config(eps=0.5))
    assert own[0, 0].item() == pytest.approx(0.5 / (0.5**0.5 + 0.5))  # its own eps is read


@pytest.mark.parametrize("field", ["logp_old", "logp_ref"])
def test_log_probs_that_carry_a_gradient_are_refused(field):
    """The issue's silent result 7: ``logp_old`` with ``requires_grad`` was accepted and the
    loss's gradient became 0 (``w = exp(logp − logp_old)`` with ``logp_old = logp``).
    ``entropy_old`` with a gradient was already refused; ``logp_ref`` is treated the same."""
    b = batch([1.0, 0.0, 0.0, 1.0], 2)
    with pytest.raises(ValueError, match=rf"^{field}: expected a detached tensor"):
        b.replace(**{field: getattr(b, field).clone().requires_grad_(True)})


#: Every coefficient field bounded by ``core.COEF_LIMIT`` or ``core.CLIP_HIGH_LIMIT``.
BOUNDED = {
    "kl_coef": core.COEF_LIMIT,
    "entropy_coef": core.COEF_LIMIT,
    "kl_cov_coef": core.COEF_LIMIT,
    "alpha_1": core.COEF_LIMIT,
    "alpha_2": core.COEF_LIMIT,
    "beta_1": core.COEF_LIMIT,
    "beta_2": core.COEF_LIMIT,
    "overlong_penalty_scale": core.COEF_LIMIT,
    "clip_eps_high": core.CLIP_HIGH_LIMIT,
}


def edge_batch(clipped: bool) -> tuple[RolloutBatch, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The largest terms the checks let through: advantages summing to 3/4 of
    ``ADVANTAGE_TOTAL_LIMIT``; where A > 0 log-ratios of ±19: ratios of e^19 for a loss
    that ``clipped`` at 1 + ε_high (the clip holds them), e^-19 for one without a clip
    (KL-Cov's |log w| is then 19; its unclipped −w·A grows with w whatever its
    coefficients); ratios of 1 where A < 0; the k3 KL at its clamp (Δ = 20); entropies of
    10 nats."""
    B, T = 4, 3
    a = core.ADVANTAGE_TOTAL_LIMIT / 16
    sign = torch.tensor([1.0, -1.0, 1.0, -1.0])[:, None].expand(B, T)
    logp = torch.full((B, T), -21.0)
    logp_old = torch.where(sign > 0, torch.tensor(-40.0 if clipped else -2.0), logp)
    b = RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=torch.ones(B, T),
        rewards=torch.tensor([1.0, 0.0, 1.0, 0.0]),
        logp_old=logp_old,
        entropy_old=torch.full((B, T), 10.0),
        group_size=2,
        logp_ref=logp + 20.0,
    )
    return b, logp, (a * sign).clone(), torch.full((B, T), 10.0)


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_every_coefficient_is_bounded_where_the_loss_stays_finite(name):
    """The issue's silent result 8: ``grpo.Config(kl_coef=1e300)`` gave an inf loss,
    ``entropy_coef=1e308`` -inf, ``kl_cov_coef=1e308`` NaN and ``clip_eps_high=1e308`` an
    overflow traceback after the run had started. Every coefficient of the Config at its
    bound gives a finite loss and gradient (and finite advantages) on the largest terms the
    checks let through; just beyond the bound, and the issue's values, are refused."""
    module = MODULES[name]
    fields = {f.name for f in dataclasses.fields(module.Config)} & set(BOUNDED)
    edge = {f: BOUNDED[f] for f in fields}
    cfg = module.Config(**edge).for_generation_budget(3)
    b, logp, adv, entropy = edge_batch(clipped="clip_eps_high" in fields)
    assert bool(torch.isfinite(call(module.advantages, b, cfg)).all())
    logp = logp.clone().requires_grad_(True)
    entropy = entropy.clone().requires_grad_(cfg.differentiates_entropy())
    loss, _ = call(module.loss, b, logp, adv, cfg, entropy=entropy)
    loss.backward()
    assert math.isfinite(loss.item()) and bool(torch.isfinite(logp.grad).all()), loss
    for field in fields:
        for value in (math.nextafter(BOUNDED[field], math.inf), 1e300, 1e308):
            with pytest.raises(ValueError, match=rf"^Config\.{field}: expected a value in"):
                module.Config(**{field: value})
