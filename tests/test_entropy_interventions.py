"""The trainer and the entropy interventions: the entropy bonus gets an entropy it can
differentiate, every other loss a detached one, and the covariance methods log how many
tokens they touched (one per loss call at the published ratios on toy batches)."""

from __future__ import annotations

import pytest
import torch

from refimpl import train as train_module
from refimpl.train import Trainer
from tests.test_train_mechanisms import runs, scorer, spy_on, tiny  # noqa: F401 (fixture)


@pytest.mark.parametrize("algo", ["entropy_bonus", "dapo", "tepo"])
def test_entropy_reaches_the_loss_with_gradient_only_for_the_bonus(runs, monkeypatch, algo):  # noqa: F811
    """The trainer passes H_θ with its graph to the entropy bonus (so −β_H·H_θ trains the
    model) and detached to every other loss (TEPO's mask must not carry gradient)."""
    monkeypatch.setattr(train_module, "score_samples", scorer([[1.0, 0.0, 1.0, 0.0]]))
    trainer = Trainer(tiny(runs, algo=algo, name=f"entropy-grad-{algo}"))
    spy = spy_on(trainer)
    trainer.train_step()
    assert spy.loss_calls
    for call in spy.loss_calls:
        assert call["entropy"] is not None
        assert call["entropy"].requires_grad is (algo == "entropy_bonus")


def test_covariance_methods_touch_one_token_per_loss_call(runs, monkeypatch):  # noqa: F811
    """At k = 2e-4 and a 16-completion batch (N ≪ 5000), KL-Cov penalises exactly one token
    per loss call (the minimum), and the metric says so."""
    monkeypatch.setattr(train_module, "score_samples", scorer([[1.0, 0.0, 1.0, 0.0]]))
    trainer = Trainer(tiny(runs, algo="kl_cov", name="kl-cov-count", minibatches=2))
    spy = spy_on(trainer)
    trainer.train_step()
    assert len(spy.loss_calls) == 2
    assert all(call["metrics"]["cov_selected"] == 1.0 for call in spy.loss_calls)
    assert all(torch.isfinite(call["logp"]).all() for call in spy.loss_calls)
