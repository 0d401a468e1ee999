"""refimpl.scaleup.trl: every algorithm trains through TRL's GRPOTrainer (offline, a tiny
Qwen2 and the toy character tokenizer), and where TRL's own loss settings claim the same math
as one of ours, the two losses and gradients are equal."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from datasets import Dataset
from transformers import Qwen2Config, Qwen2ForCausalLM
from trl import GRPOTrainer

import toy_envs
from refimpl import algorithms
from refimpl.contract import RolloutBatch
from refimpl.core import broadcast_to_tokens
from refimpl.scaleup.hf import char_tokenizer
from refimpl.scaleup.trl import GRPOConfig, RefimplGRPOTrainer

G = 4
MAX_NEW = 6


@pytest.fixture(scope="module")
def tokenizer():
    return char_tokenizer(toy_envs.TOKENIZER)


@pytest.fixture(scope="module")
def dataset() -> Dataset:
    problems = toy_envs.get_task("addition").sample(4, 0)
    return Dataset.from_list([{"prompt": p.prompt} for p in problems])


def parity_reward(completions: list[str], **_: object) -> list[float]:
    """A reward an untrained model earns about half the time (even-length completions), so
    groups have both outcomes and every algorithm gets a gradient."""
    return [1.0 if len(c) % 2 == 0 else 0.0 for c in completions]


def tiny_qwen2(tokenizer, seed: int = 0) -> Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    return Qwen2ForCausalLM(config)


def grpo_args(tmp_path, **changes) -> GRPOConfig:
    values = dict(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2 * G,
        num_generations=G,
        max_completion_length=MAX_NEW,
        max_steps=2,
        learning_rate=1e-2,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
        seed=0,
        bf16=False,
        temperature=1.0,
    )
    values.update(changes)
    return GRPOConfig(**values)


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_two_training_steps_for_every_algorithm(name, tokenizer, dataset, tmp_path) -> None:
    model = tiny_qwen2(tokenizer)
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    cfg = algorithms.get(name).Config()
    if getattr(cfg, "dynamic_sampling", False):
        # With G = 4 a group can be all-even by chance; keep every group so the step trains.
        cfg = dataclasses.replace(cfg, dynamic_sampling=False)
    if cfg.values_needed() is not None:
        # Monte-Carlo values of π_old (VinePPO): TRL samples none, so the trainer refuses
        # the Config before any work, pointing at what a port needs.
        with pytest.raises(ValueError, match=r"^algorithm_config: expected .*docs/scaleup\.md"):
            RefimplGRPOTrainer(model=model, reward_funcs=parity_reward,
                               args=grpo_args(tmp_path), train_dataset=dataset,
                               processing_class=tokenizer, algorithm=name,
                               algorithm_config=cfg)  # fmt: skip
        assert all(torch.equal(before[k], v) for k, v in model.named_parameters())
        return
    trainer = RefimplGRPOTrainer(
        model=model,
        reward_funcs=parity_reward,
        args=grpo_args(tmp_path),
        train_dataset=dataset,
        processing_class=tokenizer,
        algorithm=name,
        algorithm_config=cfg,
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2
    assert all(math.isfinite(h["loss"]) for h in logs)
    changed = [k for k, v in model.named_parameters() if not torch.equal(before[k], v)]
    assert changed, "no parameter moved in two optimizer steps"
    for h in logs:  # our metrics reach TRL's log
        assert "refimpl/adv_mean" in h and "refimpl/entropy_old" in h
        assert h["refimpl/entropy_old"] > 0 and h["entropy"] > 0
    if name == "tepo":
        assert "refimpl/kl_mask_frac" in logs[0]
    assert (trainer.ref_model is not None) == (cfg.kl_coef > 0)


def test_dynamic_sampling_masks_groups_with_equal_rewards(tokenizer, dataset, tmp_path) -> None:
    """A reward that is always 1 leaves no informative group: DAPO keeps none, trains on
    nothing (loss 0) and logs the kept fraction as 0. (Overlong shaping is off: its length
    penalty would make truncated completions' rewards differ.)"""
    cfg = algorithms.get("dapo").Config(overlong_shaping=False)
    trainer = RefimplGRPOTrainer(
        model=tiny_qwen2(tokenizer),
        algorithm_config=cfg,
        reward_funcs=lambda completions, **_: [1.0] * len(completions),
        args=grpo_args(tmp_path, max_steps=1),
        train_dataset=dataset,
        processing_class=tokenizer,
        algorithm="dapo",
    )
    trainer.train()
    log = next(h for h in trainer.state.log_history if "loss" in h)
    assert log["refimpl/kept_groups_frac"] == 0.0
    assert log["loss"] == 0.0


def test_steer_whole_rollout_range_reaches_every_micro_batch(
    tokenizer, dataset, tmp_path, monkeypatch
):
    """STEER with ``normalise="batch"``, one generation of 2 groups trained in 2 micro-batches
    of one group each: both loss calls get the Config ``for_update`` made from the whole
    generation batch (its |Ω| range set), the same for both, not the run's own Config."""
    from refimpl.algorithms import steer

    cfg = steer.Config(normalise="batch")
    seen = []
    original = steer.loss

    def spy(batch, logp, adv, config, entropy=None):
        seen.append(config)
        return original(batch, logp, adv, config, entropy=entropy)

    monkeypatch.setattr(steer, "loss", spy)

    trainer = RefimplGRPOTrainer(
        model=tiny_qwen2(tokenizer),
        reward_funcs=parity_reward,
        args=grpo_args(
            tmp_path, max_steps=1, per_device_train_batch_size=G, gradient_accumulation_steps=2
        ),
        train_dataset=dataset,
        processing_class=tokenizer,
        algorithm="steer",
        algorithm_config=cfg,
    )
    trainer.train()
    assert len(seen) == 2
    assert seen[0] is seen[1] is trainer._update_config["train"]
    assert seen[0].omega_abs_min is not None and seen[0].omega_abs_max >= seen[0].omega_abs_min
    assert trainer.algorithm_config.omega_abs_min is None


# --- peer parity with TRL's own loss settings ------------------------------------------------


def _trl_trainer(tokenizer, dataset, tmp_path, **changes) -> GRPOTrainer:
    trainer = GRPOTrainer(
        model=tiny_qwen2(tokenizer, seed=3),
        reward_funcs=parity_reward,
        args=grpo_args(tmp_path, **changes),
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1  # as inside a training step
    return trainer


def _inputs(trainer: GRPOTrainer) -> tuple[dict, RolloutBatch]:
    """A hand-made generation batch: 2 prompts × G completions of different lengths."""
    gen = torch.Generator().manual_seed(7)
    B, P, T = 2 * G, 5, MAX_NEW
    prompt_ids = torch.randint(3, 23, (B, P), generator=gen)
    completion_ids = torch.randint(3, 23, (B, T), generator=gen)
    completion_mask = torch.ones(B, T, dtype=torch.long)
    for i, n in enumerate([6, 3, 1, 5, 2, 6, 4, 6]):
        completion_mask[i, n:] = 0
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.0])
    ids = torch.cat([prompt_ids, completion_ids], 1)
    attn = torch.cat([torch.ones(B, P, dtype=torch.long), completion_mask], 1)
    with torch.no_grad():
        logp, entropy, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, attn, T, compute_entropy=True
        )
    mask = completion_mask.float()
    old = torch.where(mask.bool(), logp + 0.3 * torch.randn(B, T, generator=gen), 0.0)
    old = old.clamp(max=0.0)
    ref = torch.where(mask.bool(), logp - 0.2 * torch.rand(B, T, generator=gen), 0.0)
    batch = RolloutBatch(
        response_ids=completion_ids,
        response_mask=mask,
        rewards=rewards,
        logp_old=old,
        entropy_old=entropy,
        group_size=G,
        logp_ref=ref,
    )
    inputs = {
        "prompt_ids": prompt_ids,
        "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    return inputs, batch


PEERS = [
    # (ours, our config changes, TRL settings that claim the same math)
    ("grpo", {"kl_coef": 0.0}, {"loss_type": "grpo", "epsilon": 0.2}, 0.0),
    # TRL >= 1.x multiplies the KL by the token ratio by default (use_bias_correction_kl, the
    # DeepSeek-V3.2 estimator); GRPO's Eq. 3 does not. Same math only with it off.
    ("grpo", {}, {"loss_type": "grpo", "epsilon": 0.2, "use_bias_correction_kl": False}, 0.04),
    ("dapo", {}, {"loss_type": "dapo", "epsilon": 0.2, "epsilon_high": 0.28}, 0.0),
    ("dr_grpo", {"max_len": MAX_NEW}, {"loss_type": "dr_grpo", "epsilon": 0.2}, 0.0),
    (
        "gspo",
        {},
        {
            "loss_type": "grpo",
            "importance_sampling_level": "sequence",
            "epsilon": 3e-4,
            "epsilon_high": 4e-4,
        },
        0.0,
    ),
]


@pytest.mark.parametrize(
    ("name", "ours", "theirs", "beta"), PEERS, ids=[f"{p[0]}-beta{p[3]}" for p in PEERS]
)
def test_loss_equals_trl_loss_type(name, ours, theirs, beta, tokenizer, dataset, tmp_path) -> None:
    trainer = _trl_trainer(tokenizer, dataset, tmp_path, **theirs)
    trainer.beta = beta  # TRL reads it in the loss; the reference log-probs are in inputs
    inputs, batch = _inputs(trainer)
    module = algorithms.get(name)
    cfg = dataclasses.replace(module.Config(), **ours)
    adv_tokens = module.advantages(batch, cfg)
    # TRL takes one advantage per completion: the value on each row's first token.
    adv_seq = adv_tokens[:, 0]
    assert torch.equal(broadcast_to_tokens(adv_seq, batch.response_mask), adv_tokens)
    inputs["advantages"] = adv_seq

    trl_loss = trainer._compute_loss(trainer.model, inputs)
    trl_loss.backward()
    trl_grad = {k: p.grad.clone() for k, p in trainer.model.named_parameters()}
    trainer.model.zero_grad()

    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, MAX_NEW)
    our_loss, _ = module.loss(batch, logp, adv_tokens, cfg)
    our_loss.backward()

    assert abs(float(our_loss.detach())) > 1e-4  # a comparison of two non-trivial numbers
    torch.testing.assert_close(our_loss, trl_loss, rtol=1e-5, atol=1e-6)
    for k, p in trainer.model.named_parameters():
        torch.testing.assert_close(p.grad, trl_grad[k], rtol=1e-4, atol=1e-6, msg=k)


def test_trl_grpo_normalises_advantages_differently_by_design() -> None:
    """TRL's advantage is (r − mean)/(std + 1e-4); ours (and verl's) uses eps = 1e-6. The
    difference is below 1e-3 relative for a unit-scale std, and that is the only difference
    in the GRPO advantage."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    std = rewards.std()
    trl_adv = (rewards - rewards.mean()) / (std + 1e-4)
    module = algorithms.get("grpo")
    batch = RolloutBatch(
        response_ids=torch.zeros(4, 1, dtype=torch.long),
        response_mask=torch.ones(4, 1),
        rewards=rewards,
        logp_old=torch.zeros(4, 1),
        entropy_old=torch.zeros(4, 1),
        group_size=4,
    )
    ours = module.advantages(batch, module.Config())[:, 0]
    assert not torch.equal(ours, trl_adv)
    torch.testing.assert_close(ours, trl_adv, rtol=1e-3, atol=0)


def test_trl_default_kl_is_ratio_weighted_unlike_grpo(tokenizer, dataset, tmp_path) -> None:
    """With TRL's default use_bias_correction_kl=True the KL term is w·kl, not kl: the GRPO
    losses then differ (by design), and subtracting β·token-means shows exactly where."""
    trainer = _trl_trainer(tokenizer, dataset, tmp_path, loss_type="grpo", epsilon=0.2)
    trainer.beta = 0.04
    inputs, batch = _inputs(trainer)
    module = algorithms.get("grpo")
    cfg = module.Config()
    adv = module.advantages(batch, cfg)
    inputs["advantages"] = adv[:, 0]
    with torch.no_grad():
        trl_loss = trainer._compute_loss(trainer.model, inputs)
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
        attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
        logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.model, ids, attn, MAX_NEW)
        our_loss, _ = module.loss(batch, logp, adv, cfg)
        # Rebuild TRL's value from ours: replace β·kl by β·w·kl in the per-sequence means.
        mask = batch.response_mask
        delta = batch.logp_ref - logp
        kl = torch.where(mask.bool(), delta.exp() - delta - 1, 0.0)
        w = torch.where(mask.bool(), (logp - batch.logp_old).exp(), 0.0)
        per_seq = lambda x: ((x * mask).sum(1) / mask.sum(1)).mean()  # noqa: E731
        rebuilt = our_loss + 0.04 * (per_seq(w * kl) - per_seq(kl))
    assert not torch.allclose(our_loss, trl_loss, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rebuilt, trl_loss, rtol=1e-5, atol=1e-6)
