"""refimpl/scaleup/hf_by_hand.py is loop.py's twin on a Hugging Face model: every switch of the
Config acts (dynamic sampling, overlong shaping and filter, the reference of a KL term), and
the update takes ppo_epochs × minibatches optimizer steps on whole groups. Checked on the
transformers twin of a tiny random toy GPT, with a stand-in reward that mixes each group."""

from __future__ import annotations

import types

import pytest
import torch

import toy_envs
from refimpl import algorithms
from refimpl.model import GPT, GPTConfig
from refimpl.scaleup import hf, hf_by_hand

G, N, L_MAX = 4, 3, 6


class Task:
    """The toy chain prompts; a reply earns 1 when its length is even (so groups mix), except
    that every reply to the first problem of each rollout earns 1 (an uninformative group)."""

    def __init__(self) -> None:
        self.problems = toy_envs.get_task("chain", num_ops=1).sample(N * 2, 0)

    def prompt_text(self, tok, problem) -> str:
        return problem.prompt

    def reward(self, problem, text: str) -> float:
        if any(problem is p for p in self.problems[::N]):
            return 1.0
        return float(len(text) % 2 == 0)


class Spy:
    """The algorithm module, recording what its ``loss`` is given."""

    def __init__(self, algo) -> None:
        self.algo, self.calls = algo, []

    def __getattr__(self, name):
        return getattr(self.algo, name)

    def loss(self, batch, logp, adv, cfg, entropy=None):
        self.calls.append(batch)
        return self.algo.loss(batch, logp, adv, cfg, entropy=entropy)


@pytest.fixture
def twin():
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=toy_envs.TOKENIZER.vocab_size, block_size=64, n_layer=1,
                    n_head=2, n_embd=16)  # fmt: skip
    return hf.to_hf_gpt2(GPT(cfg)).eval()


def run(twin, monkeypatch, algo: str, **cfg_changes):
    spy = Spy(algorithms.get(algo))
    monkeypatch.setattr(hf_by_hand, "algorithms", types.SimpleNamespace(get=lambda name: spy))
    tok = hf.char_tokenizer(toy_envs.TOKENIZER)
    task = Task()
    before = [p.detach().clone() for p in twin.parameters()]
    cfg = spy.algo.Config(**cfg_changes)
    torch.manual_seed(1)
    log = hf_by_hand.train_hf_loop(twin, tok, task, task.problems, algo, prompts_per_step=N,
                                group_size=G, rollouts=2, minibatches=2, max_new_tokens=L_MAX,
                                lr=1e-2, cfg=cfg, ppo_epochs=2)  # fmt: skip
    moved = any(not torch.equal(a, b) for a, b in zip(before, twin.parameters()))
    return log, spy.calls, moved


def test_dapo_mechanisms_act_on_the_hf_loop(twin, monkeypatch):
    log, calls, moved = run(twin, monkeypatch, "dapo", overlong_filter=True)
    assert moved and len(log) == len(calls) > 0
    assert {"rollout", "reward", "loss", "grad_norm", "entropy"} <= set(log[0])
    for batch in calls:
        outcome = batch.outcome_rewards.view(-1, G)
        # dynamic sampling: only groups with right and wrong replies reach the loss
        assert ((outcome.sum(1) > 0) & (outcome.sum(1) < G)).all()
        # shaping: a reply of L_max tokens (DAPO Eq. 13's band, L_cache = 1 here) lost reward;
        # success is still the outcome's
        eos = toy_envs.TOKENIZER.eos_id
        lengths = hf.response_mask_from_ids(batch.response_ids, eos).sum(1)
        full = lengths == L_MAX
        assert torch.equal(batch.rewards[~full], batch.outcome_rewards[~full])
        assert (batch.rewards[full] < batch.outcome_rewards[full]).all()
        # overlong filter: truncated replies (no EOS) are out of the loss
        no_eos = ~(batch.response_ids == eos).any(1)
        assert (batch.response_mask[no_eos].sum(1) == 0).all()
    assert any(bool((batch.response_mask.sum(1) == 0).any()) for batch in calls), "no truncation"


def test_the_update_is_epochs_times_minibatches_of_whole_groups(twin, monkeypatch):
    log, calls, moved = run(twin, monkeypatch, "grpo", kl_coef=0.04)
    assert moved
    # no dynamic sampling: every group trains (the uninformative one too, with A = 0),
    # 2 epochs × 2 minibatches per rollout
    assert len(calls) == 2 * 2 * 2 and [len(b.rewards) for b in calls[:2]] == [1 * G, 2 * G]
    assert all(b.logp_ref is not None for b in calls)  # the KL term's frozen reference
    assert [entry["rollout"] for entry in log] == [0] * 4 + [1] * 4


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_a_config_that_asks_for_values_is_refused_before_any_work(twin, monkeypatch, name):
    """The HF loop samples no continuations of prefixes: a Config whose ``values_needed()``
    asks for Monte-Carlo values (VinePPO) is refused, pointing at docs/scaleup.md, before the
    model generates anything; every other Config gets past that check."""
    cfg = algorithms.get(name).Config()

    def generate(*args, **kwargs):
        raise RuntimeError("generated")  # the first piece of work the loop does

    monkeypatch.setattr(twin, "generate", generate)
    tok = hf.char_tokenizer(toy_envs.TOKENIZER)
    task = Task()
    args = (twin, tok, task, task.problems, name)
    kwargs = dict(prompts_per_step=N, group_size=G, rollouts=1, max_new_tokens=L_MAX, cfg=cfg)
    if cfg.values_needed() is not None:
        with pytest.raises(ValueError, match=r"^cfg: expected .*docs/scaleup\.md"):
            hf_by_hand.train_hf_loop(*args, **kwargs)
    else:
        with pytest.raises(RuntimeError, match="generated"):
            hf_by_hand.train_hf_loop(*args, **kwargs)
