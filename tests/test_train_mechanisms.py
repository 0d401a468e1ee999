"""The trainer's batch-level mechanisms, observed from inside one step.

Each test builds a ``Trainer`` on the tiny warm start (1 layer, d = 32; trained once per
module, about 2 s) and calls ``train_step`` with a spy in place of the algorithm module: the
spy records the batch ``advantages`` sees and every ``loss`` call (minibatch, entropy), then
delegates to the real algorithm. Rewards come from a stand-in scorer where a test needs a
given pattern of successes. What is checked, each against a value computed here:

* dynamic sampling keeps exactly the groups with 0 < #successful < G, counted on the outcome
  with the Config's ``success_threshold`` (no hidden 0.5);
* the reward stage's order: outcome → dynamic sampling → shaping (DAPO Eq. 13 at half the
  reward range) → advantages, success still read from the outcome;
* overlong filtering masks truncated rows out of the loss only, after the advantages;
* minibatches split the kept groups evenly;
* TEPO's loss gets the current policy's entropy, detached, in float32, and its mask is empty
  at θ = θ_old, also under ``--dtype bfloat16``;
* with top-k/top-p the recorded ``logp_old`` is the behaviour policy's.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from refimpl import algorithms
from refimpl import train as train_module
from refimpl.sampling.groups import policy_logprobs, sample_groups
from refimpl.settings.train_config import TrainConfig
from refimpl.train import Trainer
from tests.tiny import tiny_warmstart


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mechanisms")


def tiny(runs: Path, **changes) -> TrainConfig:
    """4 groups × 4 completions of one-operation chains from a 1-layer d=32 warm start."""
    ws = tiny_warmstart(runs)
    base = TrainConfig(
        task_args=("num_ops=1",),
        steps=1,
        prompts_per_step=4,
        group_size=4,
        minibatches=1,  # one update per rollout unless a test asks for more
        eval_problems=20,
        probe_every=0,
        runs_dir=runs,
        progress=False,
        plot=False,
        warmstart=ws,
        lr=1e-3,
    )
    return dataclasses.replace(base, **changes)


class Spy:
    """Stands in for an algorithm module: records what the trainer passes, then delegates."""

    def __init__(self, algo, on_loss=None):
        self._algo = algo
        self._on_loss = on_loss
        self.adv_batches: list = []
        self.loss_calls: list[dict] = []

    def __getattr__(self, name):
        return getattr(self._algo, name)

    def advantages(self, batch, cfg):
        self.adv_batches.append(batch)
        return self._algo.advantages(batch, cfg)

    def loss(self, batch, logp, adv, cfg, entropy=None):
        call = {"batch": batch, "logp": logp, "adv": adv, "entropy": entropy, "cfg": cfg}
        if self._on_loss is not None:
            self._on_loss(call)
        total, metrics = self._algo.loss(batch, logp, adv, cfg, entropy=entropy)
        call["metrics"] = metrics
        self.loss_calls.append(call)
        return total, metrics


def spy_on(trainer: Trainer, on_loss=None) -> Spy:
    trainer.algo = Spy(trainer.algo, on_loss)
    return trainer.algo


def scorer(pattern: list[list[float]]):
    """A stand-in for ``score_samples``: group g gets ``pattern[g % len(pattern)]``."""

    def score(task, problems, samples, group_size):
        rows = [pattern[g % len(pattern)] for g in range(len(problems))]
        return np.asarray([r for row in rows for r in row], dtype=np.float32)

    return score


def dapo_penalty(length: float, L_max: int, frac: float = 0.2) -> float:
    """DAPO Eq. 13 written out: 0 up to L_max − L_cache, linear to −1 at L_max, −1 beyond."""
    cache = max(1, round(frac * L_max))
    if length <= L_max - cache:
        return 0.0
    if length <= L_max:
        return ((L_max - cache) - length) / cache
    return -1.0


def test_dynamic_sampling_and_shaping_order(runs, monkeypatch):
    """DAPO (dynamic sampling and shaping on): the batch the advantages see holds only groups
    with 0 < #(outcome ≥ 0.5) < G; its ``outcome_rewards`` are the scorer's rewards and its
    ``rewards`` are outcome + ½·R_len(|o|) with L_max the generation budget; the group the
    scorer made all-correct is dropped although shaping could make its rewards differ.
    The budget is the task's shortest (6 tokens, L_cache = 1), so completions of 6 tokens
    get the full penalty: ½ (a full-size penalty would give 1)."""
    pattern = [[1.0, 0.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0]]
    monkeypatch.setattr(train_module, "score_samples", scorer(pattern))
    cfg = tiny(runs, algo="dapo", name="ds-order", prompts_per_step=3, max_new_tokens=6)
    trainer = Trainer(cfg)
    spy = spy_on(trainer)
    metrics = trainer.train_step()
    batch = spy.adv_batches[0]
    G = batch.group_size
    assert batch.num_groups == 3  # two kept per round, resampled until 3 are kept
    outcome = batch.outcome_rewards.view(-1, G)
    n_success = (outcome >= 0.5).sum(1)
    assert bool(((n_success > 0) & (n_success < G)).all())
    lengths = batch.response_mask.sum(1).tolist()
    assert any(
        dapo_penalty(n, trainer.max_new_tokens) < 0 for n in lengths
    )  # the penalty is exercised
    expected = [
        float(r) + 0.5 * dapo_penalty(n, trainer.max_new_tokens)
        for r, n in zip(batch.outcome_rewards, lengths)
    ]
    assert batch.rewards.tolist() == pytest.approx(expected, abs=1e-6)
    assert metrics["kept_group_frac"] == pytest.approx(3 / metrics["groups_seen"])


def test_success_threshold_is_the_configs(runs, monkeypatch):
    """The trainer's dynamic sampling uses the Config's ``success_threshold``: rewards 0.75
    are successes at the default 0.5 and failures at 0.8, which changes the kept groups."""
    pattern = [[0.75, 0.0, 0.0, 0.0], [1.0, 0.75, 0.0, 0.0]]
    monkeypatch.setattr(train_module, "score_samples", scorer(pattern))
    kept = {}
    for threshold in (0.5, 0.8):
        cfg = tiny(
            runs,
            algo="grpo",
            name=f"thr-{threshold}",
            prompts_per_step=2,
            resample_rounds=0,
            algo_args=("dynamic_sampling=True", f"success_threshold={threshold}"),
        )
        trainer = Trainer(cfg)
        assert trainer.algo_cfg.success_threshold == threshold
        spy = spy_on(trainer)
        trainer.train_step()
        kept[threshold] = spy.adv_batches[0].outcome_rewards.view(-1, 4).tolist()
    assert kept[0.5] == pattern
    assert kept[0.8] == [pattern[1]]


def test_gtpo_splits_on_the_outcome_when_shaping(runs, monkeypatch):
    """GTPO with overlong shaping switched on: O⁺ is decided on the outcome. The successful
    completions' r⁺ carry α₁·(shaped r_i); the failed ones' r⁻ do not depend on the shaping
    (Eq. 5 has no r_j), checked against the same batch without shaping."""
    monkeypatch.setattr(train_module, "score_samples", scorer([[1.0, 1.0, 0.0, 0.0]]))
    trainer = Trainer(
        tiny(runs, algo="gtpo", name="gtpo-shaping", algo_args=("overlong_shaping=True",))
    )
    spy = spy_on(trainer)
    trainer.train_step()
    batch = spy.adv_batches[0]
    gtpo = algorithms.get("gtpo")
    r_plus, r_minus = gtpo.token_rewards(batch, trainer.algo_cfg)
    unshaped = batch.replace(rewards=batch.outcome_rewards, outcome_rewards=None)
    r_plus0, r_minus0 = gtpo.token_rewards(unshaped, trainer.algo_cfg)
    succ = batch.outcome_rewards >= 0.5
    m = batch.response_mask.bool()
    assert bool((r_plus[~succ] == 0).all()) and bool((r_minus[succ] == 0).all())
    torch.testing.assert_close(r_minus, r_minus0)
    shift = trainer.algo_cfg.alpha_1 * (batch.rewards - batch.outcome_rewards).double()[:, None]
    torch.testing.assert_close(
        (r_plus - r_plus0)[m & succ[:, None]], shift.expand_as(r_plus)[m & succ[:, None]]
    )


def test_overlong_filter_masks_the_loss_after_the_advantages(runs, monkeypatch):
    """``overlong_filter``: truncated rows keep their tokens in the batch the advantages see
    (they count in their group's statistics) and have no token in the batch the loss sees;
    every other row's mask is unchanged."""
    original = Trainer._sample

    def sample_with_truncations(self, problems, generator):
        samples = original(self, problems, generator)
        samples.truncated = samples.truncated.clone()
        samples.truncated[::3] = True  # pretend every third row hit the budget
        return samples

    monkeypatch.setattr(Trainer, "_sample", sample_with_truncations)
    monkeypatch.setattr(train_module, "score_samples", scorer([[1.0, 0.0, 1.0, 0.0]]))
    trainer = Trainer(tiny(runs, algo="dapo", name="filter", algo_args=("overlong_filter=True",)))
    spy = spy_on(trainer)
    trainer.train_step()
    full = spy.adv_batches[0].response_mask
    loss_mask = spy.loss_calls[0]["batch"].response_mask
    truncated = torch.zeros(full.shape[0], dtype=torch.bool)
    truncated[::3] = True
    assert bool((full[truncated].sum(1) > 0).all())
    assert bool((loss_mask[truncated] == 0).all())
    assert torch.equal(loss_mask[~truncated], full[~truncated])


def test_minibatches_split_kept_groups_evenly(runs, monkeypatch):
    """8 prompts, one group uninformative, no resampling: 7 groups in 2 minibatches give
    optimizer steps on 3 and 4 groups (not 3, 3 and 1)."""
    pattern = [[1.0, 0.0, 0.0, 0.0]] * 7 + [[0.0, 0.0, 0.0, 0.0]]
    monkeypatch.setattr(train_module, "score_samples", scorer(pattern))
    cfg = tiny(runs, algo="dapo", name="even", prompts_per_step=8, minibatches=2, resample_rounds=0)
    trainer = Trainer(cfg)
    spy = spy_on(trainer)
    trainer.train_step()
    assert spy.adv_batches[0].num_groups == 7
    assert sorted(call["batch"].num_groups for call in spy.loss_calls) == [3, 4]


@pytest.mark.parametrize("normalise", ["micro-batch", "batch"])
def test_whole_rollout_constants_reach_every_minibatch(runs, monkeypatch, normalise):
    """STEER with 2 minibatches: with ``normalise="batch"`` both loss calls get the Config
    ``for_update`` makes from the whole rollout (the |Ω| range at θ_old over every trained
    token, recomputed here from the batch the advantages saw); with the default
    ``"micro-batch"`` they get the run's Config itself, and each maps its own range."""
    monkeypatch.setattr(train_module, "score_samples", scorer([[1.0, 0.0, 0.0, 1.0]]))
    cfg = tiny(
        runs,
        algo="steer",
        name=f"steer-{normalise}",
        minibatches=2,
        algo_args=(f"normalise={normalise}",),
    )
    trainer = Trainer(cfg)
    spy = spy_on(trainer)
    trainer.train_step()
    (batch,) = spy.adv_batches
    assert len(spy.loss_calls) == 2
    configs = [call["cfg"] for call in spy.loss_calls]
    if normalise == "micro-batch":
        assert all(c is trainer.algo_cfg for c in configs)
        return
    adv = algorithms.get("steer").advantages(batch, trainer.algo_cfg)
    omega = algorithms.get("steer").omega(batch, batch.logp_old, adv, 2).abs()
    values = omega[batch.response_mask.bool()]
    for c in configs:
        assert c.omega_abs_min == pytest.approx(float(values.min()), rel=1e-6, abs=1e-12)
        assert c.omega_abs_max == pytest.approx(float(values.max()), rel=1e-6)
    assert trainer.algo_cfg.omega_abs_min is None  # the run's own Config is unchanged


@pytest.mark.filterwarnings("ignore:TEPO's KL mask")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_tepo_gets_the_current_float32_entropy(runs, monkeypatch, dtype):
    """TEPO's loss receives the entropy of the policy being trained at that moment, detached,
    float32, equal to a float32 forward pass of the current model (so its comparison with
    H_old is sound under bf16 too: both are float32). At θ = θ_old (one update per rollout)
    it equals the batch's H_old to 1e-5 and the KL mask is empty."""
    monkeypatch.setattr(train_module, "score_samples", scorer([[1.0, 0.0, 1.0, 0.0]]))
    trainer = Trainer(tiny(runs, algo="tepo", name=f"tepo-{dtype}", dtype=dtype))
    G = trainer.cfg.group_size

    def check(call):
        batch, entropy = call["batch"], call["entropy"]
        assert entropy is not None and not entropy.requires_grad
        assert entropy.dtype == torch.float32
        with torch.no_grad():
            _, fresh = policy_logprobs(
                trainer.model,
                trainer._last_samples.prompt_ids,  # one minibatch: every row of the rollout
                trainer._last_samples.prompt_mask,
                batch.response_ids,
                batch.response_mask,
                group_size=G,
            )
        m = batch.response_mask.bool()
        torch.testing.assert_close(entropy[m], fresh[m], rtol=0, atol=1e-5)
        torch.testing.assert_close(entropy[m], batch.entropy_old[m], rtol=0, atol=1e-5)

    original = Trainer._sample

    def remember_samples(self, problems, generator):
        samples = original(self, problems, generator)
        self._last_samples = samples  # the prompts (RolloutBatch carries only the responses)
        return samples

    monkeypatch.setattr(Trainer, "_sample", remember_samples)
    spy = spy_on(trainer, on_loss=check)
    metrics = trainer.train_step()
    assert len(spy.loss_calls) == 1
    assert metrics["kl_mask_frac"] == 0.0


def test_top_k_top_p_record_the_behaviour_policy(runs):
    """With top-k or top-p, ``logp_old`` is the log-prob under the truncated, renormalised
    distribution the token was drawn from (so ``w = π_θ/μ`` is the importance ratio), and
    ``entropy_old`` is the untruncated distribution's: both recomputed here from the logits."""
    trainer = Trainer(tiny(runs, algo="grpo", name="topk"))
    model = trainer.model
    prompts = [[1, 2, 3], [4, 5]]
    for truncation in (dict(top_k=3), dict(top_p=0.7)):
        s = sample_groups(
            model,
            prompts,
            group_size=4,
            max_new_tokens=5,
            eos_id=0,
            pad_id=0,
            generator=torch.Generator().manual_seed(0),
            **truncation,
        )
        ids = torch.cat([s.prompt_ids, s.response_ids], dim=1)
        mask = torch.cat([s.prompt_mask, s.response_mask.long()], dim=1)
        with torch.no_grad():
            logits = model(ids, mask)[:, s.prompt_ids.shape[1] - 1 : -1].float()
        full = torch.log_softmax(logits, dim=-1)
        if "top_k" in truncation:
            kth = logits.topk(3, dim=-1).values[..., -1:]
            kept = logits >= kth
        else:
            order = logits.argsort(dim=-1, descending=True)
            p_sorted = full.exp().gather(-1, order)
            keep_sorted = (p_sorted.cumsum(-1) - p_sorted) < 0.7
            kept = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
        mass = torch.where(kept, full.exp(), 0.0).sum(-1)
        token_logp = full.gather(-1, s.response_ids[..., None]).squeeze(-1)
        expected = token_logp - mass.log()
        real = s.response_mask.bool()
        torch.testing.assert_close(s.logp_old[real], expected[real], rtol=0, atol=1e-5)
        entropy = -(full.exp() * full).sum(-1)
        torch.testing.assert_close(s.entropy_old[real], entropy[real], rtol=0, atol=1e-5)
        assert bool((s.logp_old[real] >= token_logp[real] - 1e-6).all())
        assert math.isfinite(float(s.logp_old[real].sum()))
