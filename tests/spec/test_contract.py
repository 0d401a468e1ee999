"""The algorithm contract: what every ``Config`` in the registry has, read directly by the
training loops (the toy trainer, TRL, verl)."""

from __future__ import annotations

import dataclasses

import pytest

from refimpl import algorithms, contract, core


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_every_config_has_the_contract_fields(name):
    """Every Config is a frozen dataclass subclassing ``contract.AlgorithmConfig`` with each field
    of ``contract.CONFIG_FIELDS`` as its own dataclass field (a default, so ``Config()`` works)."""
    config = algorithms.get(name).Config
    assert issubclass(config, contract.AlgorithmConfig)
    assert config.__dataclass_params__.frozen
    fields = {f.name: f for f in dataclasses.fields(config)}
    missing = [f for f in contract.CONFIG_FIELDS if f not in fields]
    assert not missing, f"{name}.Config lacks {missing}"
    cfg = config()
    assert isinstance(cfg.kl_coef, float) and cfg.kl_coef >= 0
    assert cfg.loss_agg_mode in core.AGG_MODES
    for flag in ("dynamic_sampling", "overlong_shaping", "overlong_filter"):
        assert isinstance(getattr(cfg, flag), bool)


def test_contract_fields_are_the_shared_mechanisms():
    """The list names what the trainers read; a field dropped from it would go unchecked."""
    assert set(contract.CONFIG_FIELDS) == {
        "kl_coef",
        "loss_agg_mode",
        "success_threshold",
        "dynamic_sampling",
        "overlong_shaping",
        "overlong_cache_frac",
        "overlong_penalty_scale",
        "overlong_filter",
    }


def test_dapos_switches_are_declared_once_off():
    """The six batch switches have their defaults in the contract, the three mechanisms off
    (so an algorithm that names none of them is GRPO's batch: every group, no shaping, no
    mask); ``kl_coef`` and ``loss_agg_mode`` have none (each Config states its own)."""
    defaults = {f.name: f.default for f in dataclasses.fields(contract.AlgorithmConfig)}
    assert defaults.pop("kl_coef") is defaults.pop("loss_agg_mode") is dataclasses.MISSING
    assert defaults == {
        "success_threshold": 0.5,
        "dynamic_sampling": False,
        "overlong_shaping": False,
        "overlong_cache_frac": 0.2,
        "overlong_penalty_scale": 0.5,
        "overlong_filter": False,
    }


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_a_config_names_only_the_switches_its_paper_changes(name):
    """A Config that declares one of the contract's switches gives it another default than
    the contract's (DAPO: ``dynamic_sampling = True``): no file restates a default, so
    ``diff grpo.py dapo.py`` shows DAPO's switches as DAPO's lines."""
    config = algorithms.get(name).Config
    contract_defaults = {
        f.name: f.default
        for f in dataclasses.fields(contract.AlgorithmConfig)
        if f.default is not dataclasses.MISSING
    }
    declared = set(vars(config).get("__annotations__", {})) & set(contract_defaults)
    for field in declared:
        assert getattr(config(), field) != contract_defaults[field], (
            f"{name}.Config restates {field} = {contract_defaults[field]!r}, the contract's "
            "default: leave it to contract.AlgorithmConfig"
        )
    if name == "dapo":
        assert declared == {"dynamic_sampling", "overlong_shaping"}


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_reference_and_entropy_needs(name):
    """A reference model is needed exactly when a KL term to it is on: never with
    ``kl_coef = 0``; TEPO anchored at π_old needs none; only TEPO reads the current entropy."""
    config = algorithms.get(name).Config
    assert not config(kl_coef=0.0).needs_reference()
    assert config(kl_coef=0.1).needs_reference() == (name != "tepo" or config().kl_anchor == "ref")
    assert config(kl_coef=0.1).reads_current_entropy() == (name == "tepo")
    if name == "tepo":
        assert not config(kl_coef=0.1, kl_anchor="old").needs_reference()
        assert not config(kl_coef=0.1, entropy_source="sequence").reads_current_entropy()
        assert not config(kl_coef=0.1, kl_mask=False).reads_current_entropy()


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_generation_budget_fills_only_dr_grpos_max_len(name):
    """``for_generation_budget(L)`` changes nothing but Dr. GRPO's unset ``max_len``."""
    cfg = algorithms.get(name).Config()
    filled = cfg.for_generation_budget(37)
    if name == "dr_grpo":
        assert filled.max_len == 37
        assert dataclasses.replace(filled, max_len=None) == cfg
        assert cfg.__class__(max_len=5).for_generation_budget(37).max_len == 5
    else:
        assert filled == cfg


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_for_update_changes_only_steers_batch_range(name):
    """``for_update(batch, adv)`` returns the Config itself for every algorithm and setting,
    except STEER with ``normalise="batch"``, where it fills the rollout's |Ω| range and
    nothing else (the trainers pass its result to every loss call of the rollout)."""
    from tests.spec import worked

    batch, _ = worked.batch()
    module = algorithms.get(name)
    cfg = module.Config()
    adv = module.advantages(batch, cfg)
    assert cfg.for_update(batch, adv) is cfg
    if name == "steer":
        whole = dataclasses.replace(cfg, normalise="batch")
        filled = whole.for_update(batch, adv)
        assert filled.omega_abs_min is not None and filled.omega_abs_max is not None
        assert dataclasses.replace(filled, omega_abs_min=None, omega_abs_max=None) == whole
