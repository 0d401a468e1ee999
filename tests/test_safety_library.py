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

from refimpl import algorithms, contract
from refimpl.contract import RolloutBatch
from refimpl.runs.cache import cache_dir
from tests.spec.strategies import with_requested_values

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


#: Every coefficient field bounded by ``contract.COEF_LIMIT`` or ``contract.CLIP_HIGH_LIMIT``.
BOUNDED = {
    "kl_coef": contract.COEF_LIMIT,
    "entropy_coef": contract.COEF_LIMIT,
    "kl_cov_coef": contract.COEF_LIMIT,
    "alpha_1": contract.COEF_LIMIT,
    "alpha_2": contract.COEF_LIMIT,
    "beta_1": contract.COEF_LIMIT,
    "beta_2": contract.COEF_LIMIT,
    "overlong_penalty_scale": contract.COEF_LIMIT,
    "clip_eps_high": contract.CLIP_HIGH_LIMIT,
}


def edge_batch(clipped: bool) -> tuple[RolloutBatch, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The largest terms the checks let through: advantages summing to 3/4 of
    ``ADVANTAGE_TOTAL_LIMIT``; where A > 0 log-ratios of ±19: ratios of e^19 for a loss
    that ``clipped`` at 1 + ε_high (the clip holds them), e^-19 for one without a clip
    (KL-Cov's |log w| is then 19; its unclipped −w·A grows with w whatever its
    coefficients); ratios of 1 where A < 0; the k3 KL at its clamp (Δ = 20); entropies of
    10 nats."""
    B, T = 4, 3
    a = contract.ADVANTAGE_TOTAL_LIMIT / 16
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
    b = with_requested_values(b, cfg)  # VinePPO's V̂ of π_old, as the loops attach them
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


# ---------------------------------------------------------------------------------------------
# Issue 41: the problem streams, inputs that made the math wrong, and exceptions that were not
# a ValueError or TypeError naming the argument.
# ---------------------------------------------------------------------------------------------


class Drawn(Exception):
    """Raised by a recording task once the problems of interest are drawn."""


def _problems_of(rng, n: int = 64, task: str = "chain") -> list:
    from toy_envs import get_task

    return get_task(task).sample(n, rng)


def test_seed_10000_never_trains_on_the_held_out_problems(tmp_path, monkeypatch):
    """The issue's silent result 6: numpy's ``default_rng([10000, 0, 0])`` is
    ``default_rng([10000, 0])``, the held-out set, so ``--seed 10000`` trained at step 0 on
    the 64 held-out problems (``--warmstart.seed 10000`` too, at its step 0). The trainer's,
    the reader's loop's and the warm start's step-0 problems of seed 10000 share none with the
    held-out set; seeds 0…7 draw exactly the streams they always drew."""
    import numpy as np

    from refimpl import loop
    from refimpl.settings.warmstart_config import ModelSize
    from refimpl.train import Trainer
    from tests.safety_helpers import warmstart_dir
    from tests.tiny import tiny_train, tiny_warmstart
    from toy_envs import get_task

    def trainer_prompts(seed: int) -> list:
        cfg = tiny_train(tmp_path, seed=seed, prompts_per_step=64, eval_problems=64)
        cfg = dataclasses.replace(cfg, warmstart=tiny_warmstart(warmstart_dir()))
        trainer = Trainer(cfg, observers=[])
        drawn: list = []
        real = trainer.task.sample

        def sample(n, rng):
            drawn.extend(real(n, rng))
            raise Drawn  # the prompts are all this test needs

        monkeypatch.setattr(trainer.task, "sample", sample)
        with pytest.raises(Drawn):
            trainer.rollout()
        return drawn

    # The problems are compared as lists: one-operation chains are few (about 200), so two
    # streams share some by chance; the held-out stream itself gives the very same list.
    task = get_task("chain", num_ops=1)
    held_out = task.sample(64, np.random.default_rng([10_000, 0]))
    assert trainer_prompts(10_000) != held_out
    assert trainer_prompts(3) == task.sample(64, np.random.default_rng([3, 0, 0]))

    # The reader's loop (refimpl/loop.py), on a random model: the problems it samples.
    model = ModelSize(n_layer=1, n_embd=32, n_head=2).build()
    drawn: list = []

    class Recording:
        def __init__(self) -> None:
            self.inner = get_task("chain")

        def sample(self, n, rng):
            drawn[:] = self.inner.sample(n, rng)
            raise Drawn

    for seed, expect_held_out in ((10_000, False), (5, None)):
        cfg = loop.LoopConfig(seed=seed, prompts_per_step=64)
        with pytest.raises(Drawn):
            loop.sample_round(model, Recording(), cfg, 0, 0, 8)
        if expect_held_out is False:
            assert drawn != _problems_of(np.random.default_rng([10_000, 0]))
        else:
            assert drawn == _problems_of(np.random.default_rng([seed, 0, 0]))

    # The warm start: its step-0 problems of seed 10000.
    import refimpl.warmstart as warmstart

    captured: list = []

    class Mix:
        def __init__(self, inner) -> None:
            self.inner = inner

        def sample(self, n, rng):
            captured[:] = self.inner.sample(n, rng)
            raise Drawn

        def __getattr__(self, name):
            return getattr(self.inner, name)

    real_get_task = warmstart.get_task
    monkeypatch.setattr(warmstart, "get_task", lambda *a, **k: Mix(real_get_task(*a, **k)))
    ws = dataclasses.replace(tiny_warmstart(tmp_path / "ws"), seed=10_000, batch_size=64)
    with pytest.raises(Drawn):
        warmstart._train(ws, cache_dir(ws))
    mix = real_get_task("chain", min_ops=1)
    assert captured != mix.sample(64, np.random.default_rng([10_000, 0]))
    assert len(captured) == 64


def test_the_streams_of_seeds_below_10000_are_what_they_always_were():
    """Every documented number depends on them: seeds 0…7 (and 9999) give numpy's
    ``default_rng([s, step, round])`` and ``default_rng([s, step])``, as before; seeds from
    10000 on never begin with the held-out word 10000; a seed whose stream word would not fit
    one 32-bit word is refused."""
    import numpy as np

    from refimpl import problem_streams

    for s in [*range(8), 9_999]:
        for step in range(3):
            for round_ in range(2):
                assert _problems_of(
                    problem_streams.training_rng(s, step, round_), 8
                ) == _problems_of(np.random.default_rng([s, step, round_]), 8)
            assert _problems_of(problem_streams.warmstart_rng(s, step), 8) == _problems_of(
                np.random.default_rng([s, step]), 8
            )
    assert _problems_of(problem_streams.held_out_rng()) == _problems_of(
        np.random.default_rng([10_000, 0])
    )
    held_out = _problems_of(problem_streams.held_out_rng())
    for s in (10_000, 10_001, problem_streams.SEED_MAX):
        assert problem_streams.stream_seed(s) != problem_streams.HELD_OUT_SEED
        assert _problems_of(problem_streams.training_rng(s, 0, 0)) != held_out
        assert _problems_of(problem_streams.warmstart_rng(s, 0)) != held_out
    for bad in (-1, problem_streams.SEED_MAX + 1, 10_000 + 2**32, True, 1.0):
        with pytest.raises(ValueError, match="^seed: expected"):
            problem_streams.training_rng(bad, 0, 0)


@pytest.mark.parametrize("field", ["rewards", "outcome_rewards"])
def test_rewards_that_carry_a_gradient_are_refused(field):
    """The issue's silent result 9: rewards with ``requires_grad=True`` were accepted and the
    advantages carried a gradient into them (``logp_old`` with one was already refused)."""
    b = batch([1.0, 0.0, 0.0, 1.0], 2)
    with pytest.raises(ValueError, match=rf"^{field}: expected .*detached"):
        b.replace(**{field: torch.tensor([1.0, 0.0, 0.0, 1.0], requires_grad=True)})


def test_positive_log_probs_and_negative_entropies_are_refused():
    """The issue's silent result 9: ``logp > 0`` passed to a loss, negative current
    entropies and ``logp_ref = +5`` in the batch were accepted (a probability above 1, an
    entropy below 0: the loss then means nothing)."""
    b = batch([1.0, 0.0, 0.0, 1.0], 2)
    with pytest.raises(ValueError, match=r"^logp_ref: expected log-probs ≤ 0"):
        b.replace(logp_ref=torch.full((4, 3), 5.0))
    for module in MODULES.values():
        cfg = module.Config().for_generation_budget(3)
        adv = call(module.advantages, with_requested_values(b, cfg), cfg)
        with pytest.raises(ValueError, match=r"^logp: expected log-probs ≤ 0"):
            call(module.loss, b, torch.full((4, 3), 0.5), adv, cfg, entropy=torch.ones(4, 3))
        if cfg.reads_current_entropy() or cfg.differentiates_entropy():
            with pytest.raises(ValueError, match=r"^entropy: expected .*entropies ≥ 0"):
                call(module.loss, b, b.logp_old.clone(), adv, cfg, entropy=-torch.ones(4, 3))


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"lambda_max": 3e38}, "lambda_max"),
        ({"lambda_max": 1e300}, "lambda_max"),
        ({"lambda_min": 20.0, "lambda_max": 30.0}, "lambda_min"),
        ({"omega_floor": 1e300, "mapping": "exponential"}, "omega_floor"),
        ({"omega_floor": 1e-40, "mapping": "exponential"}, "omega_floor"),
        ({"clip_ratio_c": 1e300}, "clip_ratio_c"),
        (
            {"normalise": "batch", "omega_abs_min": 0.0, "omega_abs_max": 1e300},
            "omega_abs_max",
        ),
    ],
)
def test_steer_s_coefficients_are_bounded(changes, field):
    """The issue's silent result 9 and traceback 12: STEER's ``lambda_max=3e38`` gave a NaN
    loss, ``lambda_max=1e300`` (and ``omega_floor=1e300`` with the exponential map) a
    RuntimeError from torch; an ``omega_floor`` below float32's range made the exponential
    map's slope inf (a NaN weight on a batch with no signal). Each is refused, naming the
    field."""
    steer = MODULES["steer"]
    with pytest.raises(ValueError, match=rf"^Config\.{field}: expected a value in"):
        steer.Config(**changes)


def test_steer_at_its_bounds_gives_a_finite_loss():
    """STEER's token weights (λ ≤ ``steer.LAMBDA_LIMIT``) and dual clip (c ≤
    ``contract.CLIP_HIGH_LIMIT + 1``) at their bounds, with ratios of e^19 on every token (the
    dual clip holds the negative-advantage ones at c) and advantages summing to 3/4 of
    ``ADVANTAGE_TOTAL_LIMIT``: a finite loss and gradient, for both maps; the exponential
    map at its smallest ``omega_floor`` on a batch with no signal is finite too."""
    steer = MODULES["steer"]
    b, logp, adv, _ = edge_batch(clipped=True)
    b = b.replace(logp_old=torch.full((4, 3), -40.0))
    for mapping in ("linear", "exponential"):
        cfg = steer.Config(
            mapping=mapping,
            lambda_min=1.0 if mapping == "exponential" else steer.LAMBDA_LIMIT,
            lambda_max=steer.LAMBDA_LIMIT,
            clip_eps_high=contract.CLIP_HIGH_LIMIT,
            clip_ratio_c=contract.CLIP_HIGH_LIMIT + 1,
        )
        x = logp.clone().requires_grad_(True)
        loss, _ = call(steer.loss, b, x, adv, cfg)
        loss.backward()
        assert math.isfinite(loss.item()) and bool(torch.isfinite(x.grad).all()), loss
    flat = batch([1.0, 1.0, 0.0, 0.0], 2)
    cfg = steer.Config(mapping="exponential", omega_floor=steer.OMEGA_FLOOR_MIN)
    adv = call(steer.advantages, flat, cfg)
    loss, _ = call(steer.loss, flat, flat.logp_old.clone().requires_grad_(True), adv, cfg)
    assert math.isfinite(loss.item()), loss


def numeric_fields(module) -> list[tuple[str, type]]:
    return [(f, kind) for f, kind in typed_fields(module) if kind in (int, float)]


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_an_int_too_large_for_a_field_is_a_value_error(name):
    """The issue's traceback 17: the Python int 2^70 was accepted for float fields (``eps``,
    ``success_threshold``, …) and for ``max_len``, then torch raised OverflowError in the
    loss (63 cases); 2^1100 raised OverflowError in the Config itself. An int where a float
    is annotated is a float from then on; one that no float holds, or an int field beyond
    int64, is a ValueError naming the field; what is accepted computes."""
    module = MODULES[name]
    for field, kind in numeric_fields(module):
        for value in (2**70, 2**1100, -(2**70)):
            try:
                cfg = module.Config(**{field: value}).for_generation_budget(3)
            except ValueError as err:  # this field, or a rule between it and another
                assert re.match(r"^Config\.\w+: expected", str(err)), err
                continue
            if kind is float:
                assert isinstance(getattr(cfg, field), float), (field, getattr(cfg, field))
            b = with_requested_values(batch([1.0, 0.0, 0.0, 1.0], 2), cfg)
            try:
                adv = call(module.advantages, b, cfg)
                logp = b.logp_old.clone().requires_grad_(True)
                loss, _ = call(module.loss, b, logp, adv, cfg, entropy=torch.ones(4, 3))
            except ValueError as err:  # e.g. advantages too large: refused, naming them
                assert re.match(r"^(rewards|adv): expected", str(err)), (field, err)


def test_a_batch_that_is_not_a_rollout_batch_is_refused_by_name():
    """The issue's traceback 17: ``advantages(None, cfg)`` was an AttributeError."""
    for module in MODULES.values():
        cfg = module.Config().for_generation_budget(3)
        for bad in (None, {"rewards": [1.0]}):
            with pytest.raises((ValueError, TypeError), match=r"^batch: expected a RolloutBatch"):
                call(module.advantages, bad, cfg)
            with pytest.raises((ValueError, TypeError), match=r"^batch: expected a RolloutBatch"):
                call(module.loss, bad, -torch.ones(4, 3), torch.zeros(4, 3), cfg)


def test_complex_rewards_and_meta_tensors_are_refused_by_name():
    """The issue's traceback 17: complex rewards, and tensors on the meta device (no values:
    ``.item()`` raised a RuntimeError), reached torch."""
    b = batch([1.0, 0.0, 0.0, 1.0], 2)
    with pytest.raises(ValueError, match=r"^rewards: expected a real"):
        b.replace(rewards=torch.tensor([1.0, 0.0, 0.0, 1.0], dtype=torch.complex64))
    meta = {
        f.name: getattr(b, f.name).to("meta")
        for f in dataclasses.fields(b)
        if isinstance(getattr(b, f.name), torch.Tensor)
    }
    with pytest.raises(ValueError, match=r"^response_mask: expected .*meta"):
        b.replace(**meta)
    with pytest.raises(ValueError, match=r"^rewards: expected .*device"):
        b.replace(rewards=b.rewards.to("meta"))
    module = MODULES["grpo"]
    cfg = module.Config()
    adv = call(module.advantages, b, cfg)
    with pytest.raises(ValueError, match=r"^logp: expected .*device"):
        call(module.loss, b, b.logp_old.to("meta"), adv, cfg)


def test_a_task_s_reward_and_sample_refuse_what_they_cannot_take():
    """The issue's traceback 17 and unbounded size 20: ``task.reward(None, "2")`` was an
    AttributeError, and ``get_task('countdown').sample(10**20)`` allocated until the kernel
    killed it. Both are refused naming the argument, before any work (a completion that is
    no string still earns 0: it is model output)."""
    from toy_envs import TASK_NAMES, get_task

    for name in TASK_NAMES:
        task = get_task(name)
        problem = task.sample(1, 0)[0]
        with pytest.raises((ValueError, TypeError), match=r"^problem: expected a Problem"):
            task.reward(None, "2")
        assert task.reward(problem, None) == 0.0  # model output: any value gets a reward
        assert task.reward(problem, task.reference_solution(problem)) == 1.0
        with pytest.raises(ValueError, match=r"^n must be in \[0, \d+\]"):
            task.sample(10**20, 0)


def test_the_hf_path_refuses_what_are_no_token_ids_and_no_tokenizer(monkeypatch):
    """The issue's traceback 17: ``hf.rollout_batch`` with float or out-of-vocabulary ids
    reached the embedding (a RuntimeError, an IndexError), ``hf.char_tokenizer(None)`` was an
    AttributeError. Each is refused, naming the argument."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    pytest.importorskip("transformers")
    from refimpl.scaleup import hf
    from refimpl.settings.warmstart_config import ModelSize

    torch.manual_seed(0)
    twin = hf.to_hf_gpt2(ModelSize(n_layer=1, n_embd=32, n_head=2).build()).eval()
    vocab = twin.config.vocab_size
    ids = torch.tensor([[1, 5, 6], [1, 5, 6]])
    seq = torch.cat([ids, torch.tensor([[7, 2], [8, 2]])], 1)
    mask = torch.ones_like(ids)
    assert hf.rollout_batch(twin, ids, mask, seq, [1.0, 0.0], 2, 2).batch_size == 2
    with pytest.raises(ValueError, match=r"^prompt_ids: expected a 2-D tensor of integer"):
        hf.rollout_batch(twin, ids.float(), mask, seq.float(), [1.0, 0.0], 2, 2)
    far = seq.clone()
    far[0, -1] = vocab + 5
    with pytest.raises(ValueError, match=rf"^sequences: expected token ids in \[0, {vocab}\)"):
        hf.rollout_batch(twin, ids, mask, far, [1.0, 0.0], 2, 2)
    with pytest.raises((ValueError, TypeError), match=r"^chars: expected a character tokenizer"):
        hf.char_tokenizer(None)
