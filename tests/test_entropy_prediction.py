"""The first-order prediction of the entropy change and its attribution to token classes
(``refimpl.diagnostics.entropy_attribution``, docs/entropy_mechanism.md).

* In float64 on a tiny GPT, ``entropy_change_pred`` equals a central finite difference of
  ``H̄`` along the step the optimizer took.
* The attribution (token classes, the entropy bonus's term, Adam's momentum) sums to the
  prediction, with several minibatches, a clip that acts and momentum from earlier steps.
* On a one-state softmax the prediction is Cui et al.'s ``−η·Cov`` (their Theorems 1 and 2).
* In the trainer: the keys are logged, the attribution only every ``--diag-every`` steps,
  and computing it changes nothing the run trains on.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from refimpl.diagnostics import entropy_attribution as ea
from refimpl.diagnostics.metrics import logp_advantage_covariance
from refimpl.model import GPT, GPTConfig
from refimpl.runs.runlog import read_metrics
from refimpl.settings.plan import resolve
from refimpl.settings.train_config import TrainConfig
from refimpl.train import run_training
from tests.tiny import tiny_train

V, P, T, B = 11, 3, 4, 8


def _tiny_setup(seed: int = 0):
    """A float64 1-layer GPT and a fixed batch: prompts, responses (some rows shorter),
    advantages of both signs and a few zeros."""
    torch.manual_seed(seed)
    model = GPT(GPTConfig(vocab_size=V, block_size=16, n_layer=1, n_head=2, n_embd=16)).double()
    prompt = torch.randint(V, (B, P))
    response = torch.randint(V, (B, T))
    mask = torch.ones(B, T, dtype=torch.float64)
    mask[1, 3:] = 0
    mask[5, 2:] = 0
    adv = torch.randn(B, 1, dtype=torch.float64).expand(B, T).clone()
    adv[2] = 0.0  # a group whose rewards were all equal
    adv = adv * mask

    def logprobs(module, rows):
        """Per-token log-probs and entropies of the responses of ``rows``, all in float64."""
        ids = torch.cat([prompt[rows], response[rows]], dim=1)
        logits = module(ids)[:, P - 1 : P + T - 1].double()
        logp_all = F.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, response[rows][..., None]).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1)
        m = mask[rows]
        return logp * m, entropy * m

    with torch.no_grad():
        logp_old, _ = logprobs(model, slice(None))
    return model, logprobs, mask, adv, logp_old


def _rl_step(
    model,
    opt,
    logprobs,
    mask,
    adv,
    logp_old,
    *,
    splits,
    n_measured,
    attribute,
    max_norm=math.inf,
    entropy_coef=0.0,
    kl_coef=0.0,
):
    """One RL step as the trainer's update stage takes it: a policy-gradient loss (plus an
    entropy bonus and a pull towards the rollout policy, which also reaches A = 0 tokens) per
    minibatch, backward, clip, Adam step, with the predictor's hooks."""
    predictor = ea.EntropyPredictor(
        model,
        opt,
        logprobs,
        lambda m: logprobs(m, slice(0, n_measured)),
        torch.arange(n_measured),
        mask[:n_measured],
        attribute=attribute,
        adv=adv,
        logp_old=logp_old,
        loss_mask=mask,
        max_norm=max_norm,
    )
    for lo, hi in splits:
        rows = torch.zeros(B, dtype=torch.bool)
        rows[lo:hi] = True
        logp, entropy = logprobs(model, rows)
        logp.retain_grad()
        predictor.forward_done(rows, entropy)
        if entropy_coef:
            entropy.retain_grad()
        m = mask[rows]
        ratio = torch.exp(logp - logp_old[rows])
        loss = (
            -(ratio * adv[rows] * m).sum()
            - entropy_coef * (entropy * m).sum()
            + kl_coef * ((logp - logp_old[rows]) ** 2 * m).sum()
        ) / m.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        predictor.before_step(rows, logp, entropy if entropy_coef else entropy.detach(), norm)
        opt.step()
        predictor.after_step()
    return predictor.finish()


def _hbar(model, logprobs, mask, n_measured):
    with torch.no_grad():
        _, entropy = logprobs(model, slice(0, n_measured))
        return float((entropy * mask[:n_measured]).sum() / mask[:n_measured].sum())


def test_prediction_equals_a_central_finite_difference_along_the_step():
    """float64, one Adam step of lr 1e-6 on a tiny GPT: ⟨∇H̄(θ_old), Δθ⟩ equals
    (H̄(θ_old + Δθ) − H̄(θ_old − Δθ)) / 2, whose error is third order in |Δθ|. The measured rows
    (the first 4) are not the minibatch (all 8), so ∇H̄ comes from the predictor's own pass."""
    model, logprobs, mask, adv, logp_old = _tiny_setup()
    opt = torch.optim.Adam(model.parameters(), lr=1e-6)
    old = [p.detach().clone() for p in model.parameters()]
    out = _rl_step(
        model, opt, logprobs, mask, adv, logp_old, splits=[(0, B)], n_measured=4, attribute=True
    )
    new = [p.detach().clone() for p in model.parameters()]
    values = {}
    with torch.no_grad():
        for sign in (+1, -1):
            for p, o, n in zip(model.parameters(), old, new):
                p.copy_(o + sign * (n - o))
            values[sign] = _hbar(model, logprobs, mask, 4)
    central = (values[1] - values[-1]) / 2
    assert abs(central) > 1e-8  # the step moved the entropy
    assert out["entropy_change_pred"] == pytest.approx(central, rel=1e-7, abs=0)
    # With one minibatch the path prediction is the same gradient, the same step.
    assert out["entropy_change_pred_path"] == pytest.approx(out["entropy_change_pred"], rel=1e-12)


def test_attributions_sum_to_the_prediction():
    """float64, three minibatches (the first is the measured rows, so ∇H̄ shares its forward
    pass), Adam with momentum from two earlier steps, a clip that scales every gradient, an
    entropy bonus and a pull towards the rollout policy: the token classes + the entropy term
    + the momentum sum to the prediction."""
    model, logprobs, mask, adv, logp_old = _tiny_setup(seed=1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    kwargs = dict(
        splits=[(0, 3), (3, 6), (6, 8)], n_measured=3, max_norm=0.05, entropy_coef=0.05, kl_coef=1.0
    )
    for _ in range(2):  # momentum from earlier steps
        _rl_step(model, opt, logprobs, mask, adv, logp_old, attribute=False, **kwargs)
    out = _rl_step(model, opt, logprobs, mask, adv, logp_old, attribute=True, **kwargs)
    keys = [k for k in out if k.startswith(ea.PREFIX)]
    assert sorted(keys) == sorted(
        ea.PREFIX + c for c in (*ea.TOKEN_CLASSES, ea.MOMENTUM, ea.ENTROPY_TERM)
    )
    for name in ("pos_high", "neg_low", "zero", ea.MOMENTUM, ea.ENTROPY_TERM):
        assert out[ea.PREFIX + name] != 0.0, name  # every part of the split is exercised
    total = sum(out[k] for k in keys)
    assert total == pytest.approx(out["entropy_change_pred"], rel=1e-9)


def _one_state(z: torch.Tensor):
    """A tabular softmax over one state: ``z`` are its logits, the 'tokens' are its actions."""

    def logprobs(params):
        logp = F.log_softmax(params["z"], dim=-1)
        return logp, None

    return logprobs


def _entropy(z: torch.Tensor) -> torch.Tensor:
    logp = F.log_softmax(z, dim=-1)
    return -(logp.exp() * logp).sum()


def test_one_state_softmax_reduces_to_cuis_covariance():
    """Tabular case (Cui et al., Theorems 1 and 2). One state, π = softmax(z), an advantage
    centred under π. A vanilla policy-gradient step Δz = η π ⊙ A predicts
    ΔH = −η Cov_π(log π, π A); a natural-gradient step Δz = η A predicts −η Cov_π(log π, A),
    which is the project's token-level ``cov_logp_adv`` on a batch that holds each action in
    proportion to π. The per-action split of the vanilla step sums to the same number."""
    pi = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    z = pi.log().clone().requires_grad_(True)
    a_raw = torch.tensor([1.0, -2.0, 3.0, -0.5], dtype=torch.float64)
    adv = a_raw - (pi * a_raw).sum()  # E_π[A] = 0
    eta = 1e-3
    grad = ea.hbar_gradient(_entropy(z), [z], retain_graph=False)
    logp = pi.log()

    def cov_pi(x, y):
        return float((pi * x * y).sum() - (pi * x).sum() * (pi * y).sum())

    # Theorem 1: vanilla PG.
    z_vanilla = z.detach() + eta * pi * adv
    pred = ea.first_order_prediction(grad, [z.detach()], [z_vanilla])
    assert pred == pytest.approx(-eta * cov_pi(logp, pi * adv), rel=1e-12)
    # Theorem 2: natural PG, against the trainer's batch estimator of the covariance.
    z_natural = z.detach() + eta * adv
    pred_natural = ea.first_order_prediction(grad, [z.detach()], [z_natural])
    tokens = torch.tensor([0, 0, 0, 0, 1, 1, 2, 3])  # each action in proportion to π
    batch_cov = logp_advantage_covariance(
        logp[tokens][None], adv[tokens][None], torch.ones(1, len(tokens))
    )
    assert pred_natural == pytest.approx(-eta * batch_cov, rel=1e-12)
    # The split of the vanilla step over actions: the loss −Σ_a sg(π_a) A_a log π_a has the
    # per-action weight ∂L/∂log π_a = −π_a A_a; SGD's preconditioner is η.
    via_logp, _ = ea.token_contributions(
        _one_state(z), {"z": z.detach()}, {"z": eta * grad[0]}, -(pi * adv)
    )
    assert float(via_logp.sum()) == pytest.approx(pred, rel=1e-12)
    # Cui's reading: raising a likely action (a=0: π above the typical exp(−H), A > 0)
    # lowers the entropy; raising a rare one (a=2, A > 0) raises it.
    assert adv[0] > 0 and adv[2] > 0
    assert via_logp[0] < 0 < via_logp[2]


def test_token_classes_partition_the_tokens():
    """Every response token is in exactly one class; confidence splits at the batch median."""
    gen = torch.Generator().manual_seed(0)
    logp_old = -torch.rand(6, 5, generator=gen, dtype=torch.float64) * 3
    adv = torch.randn(6, 5, generator=gen, dtype=torch.float64)
    adv[0] = 0
    mask = (torch.rand(6, 5, generator=gen) > 0.2).double()
    median = ea.confidence_median(logp_old, mask)
    classes = ea.token_classes(adv, logp_old, mask, median)
    stacked = torch.stack([c.long() for c in classes.values()])
    assert torch.equal(stacked.sum(0), mask.long())
    high = classes["pos_high"] | classes["neg_high"]
    assert bool((logp_old.exp()[high] > median).all())


def test_detrending_removes_a_shared_trend():
    """Two series that share a trend but move in opposite directions step to step: raw r is
    positive, r after removing each one's running mean is close to −1."""
    t = np.arange(200) / 200
    wiggle = np.sin(np.arange(200) * 2.1)
    runs = [
        [
            {"step": i, "x": float(t[i] + 0.1 * wiggle[i]), "y": float(t[i] - 0.1 * wiggle[i])}
            for i in range(200)
        ]
    ]
    c = ea.correlations(runs, "x", "y")
    assert c["r"] > 0.5
    assert c["r_detrended"] < -0.9
    assert c["r_diff"] < -0.9
    assert c["steps"] == 200


# ---------------------------------------------------------------------------------------------
# In the trainer.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("entropy-prediction")


def _tiny(runs: Path, **changes) -> TrainConfig:
    settings = dict(steps=4, eval_every=4, eval_problems=20, checkpoint_every=4)
    return tiny_train(runs, **{**settings, **changes})


def test_trainer_logs_the_prediction_every_step_and_the_attribution_every_k(runs):
    """GRPO, 2 minibatches, 5 steps, --diag-every 2: entropy_change_pred on every step, the
    token classes and the momentum on steps 2 and 4 and on the last step (5) only, summing to
    the prediction; the prediction has the measured change's sign and size at a small lr
    (1e-5: the step is nearly linear)."""
    records = read_metrics(run_training(_tiny(runs, name="k2", diag_every=2, lr=1e-5, steps=5)))[1:]
    assert [r["step"] for r in records] == [1, 2, 3, 4, 5]
    for r in records:
        assert math.isfinite(r["entropy_change_pred"])
        attributed = r["step"] in (2, 4, 5)
        assert any(k.startswith(ea.PREFIX) for k in r) == attributed
        assert ("entropy_change_pred_path" in r) == attributed
    assert ea.attribution_gap(records) < 1e-3
    assert len(ea.attribution_keys(records)) >= 2
    for r in records:
        assert r["entropy_change_pred"] == pytest.approx(r["entropy_change"], rel=0.1)


def test_the_diagnostics_change_nothing_the_run_trains_on(runs):
    """The same seeded run with the attribution on every step and off: identical rewards,
    losses, gradient norms and entropies (the predictor only reads the update)."""
    on = read_metrics(run_training(_tiny(runs, name="on", diag_every=1, steps=3)))
    off = read_metrics(run_training(_tiny(runs, name="off", diag_every=0, steps=3)))
    assert not any(k.startswith(ea.PREFIX) for r in off for k in r)
    for a, b in zip(on[1:], off[1:]):
        for key in (
            "reward_mean",
            "loss",
            "grad_norm",
            "entropy_mean",
            "entropy_change",
            "entropy_change_pred",
        ):
            assert a[key] == b[key], key


def test_diag_every_must_not_be_negative(runs):
    with pytest.raises(ValueError, match="--diag-every"):
        resolve(_tiny(runs, diag_every=-1))


def _fake_run(path: Path, algo: str, seed: int, records: list[dict]) -> Path:
    import json

    path.mkdir(parents=True)
    config = {"train_config": {"algo": algo, "task": "countdown", "seed": seed, "algo_args": []}}
    (path / "config.json").write_text(json.dumps(config))
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_compare_figure_last_panel_shows_the_prediction(tmp_path, monkeypatch):
    """refimpl compare's last panel: the measured change against entropy_change_pred, with
    the prediction's r in the legend and the covariance's r beside it."""
    from matplotlib.figure import Figure

    from refimpl import plots

    gen = np.random.default_rng(0)
    pred = gen.normal(-0.01, 0.005, 30)
    records = [{"step": 0, "heldout_greedy": 0.4}] + [
        {
            "step": i + 1,
            "entropy_mean": 0.5,
            "entropy_change_pred": float(p),
            "entropy_change": float(p + gen.normal(0, 1e-4)),
            "cov_logp_adv": float(gen.normal(0.06, 0.01)),
        }
        for i, p in enumerate(pred)
    ]
    run = _fake_run(tmp_path / "grpo-s0", "grpo", 0, records)
    saved = []
    monkeypatch.setattr(Figure, "savefig", lambda self, *a, **k: saved.append(self))
    plots.plot_compare([run], tmp_path / "compare.png")
    last = [ax for ax in saved[0].axes if ax.get_visible()][-1]
    legend = [t.get_text() for t in last.get_legend().get_texts()]
    measured = np.array([r["entropy_change"] for r in records[1:]])
    r_pred = ea.pearson(pred, measured)
    r_cov = ea.pearson(np.array([r["cov_logp_adv"] for r in records[1:]]), measured)
    assert legend == [f"grpo: r = {r_pred:+.2f} (Cov: {r_cov:+.2f})"]
    assert r_pred > 0.99
    assert "⟨∇H̄(θ_old), Δθ⟩" in last.get_xlabel()


def test_steer_omega_script_reports_both_predictors_and_the_band(tmp_path, capsys):
    """scripts/experiments/entropy/steer_omega_prediction.py on two synthetic STEER runs and one
    DAPO run: with ``entropy_change_pred`` equal to the measured change, its r is +1.00; with Σ Ω equal to
    minus the change (Ω > 0 lowers entropy), −Σ Ω's r is +1.00 too; the band row holds the
    standard deviation of the measured change (10⁻³ nats); DAPO, which logs no Ω, gets a band
    row and no prediction row."""
    import importlib.util
    import json

    root = Path(__file__).resolve().parents[1]
    spec = importlib.util.spec_from_file_location(
        "steer_omega_prediction",
        root / "scripts" / "experiments" / "entropy" / "steer_omega_prediction.py",
    )
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rng = np.random.default_rng(0)
    runs = []
    for algo, seed in (("steer", 0), ("steer", 1), ("dapo", 0)):
        run = tmp_path / f"{algo}-s{seed}"
        run.mkdir()
        config = {"train_config": {"algo": algo, "task": "countdown", "algo_args": []}}
        (run / "config.json").write_text(json.dumps(config))
        change = rng.normal(-0.004, 0.003, 40)
        lines = [{"step": 0, "heldout_greedy": 0.5}]
        for step, c in enumerate(change, 1):
            record = {"step": step, "entropy_change": c, "entropy_change_pred": c}
            record["sampled_tokens"] = 1000 * step
            if algo == "steer":
                record.update(omega_sum_p2=-c, omega_sum_p1=-2 * c, omega_weighted_sum=-c)
            lines.append(record)
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
        runs.append(run)
    assert script.main([str(r) for r in runs]) == 0
    out = capsys.readouterr().out
    prediction, band = [line for line in out.splitlines() if line.startswith("| steer | 2 | 80 |")]
    assert prediction.count("+1.00 / +1.00") == 5
    assert len([line for line in out.splitlines() if line.startswith("| dapo | 1 | 40 |")]) == 1
    steer_change = [
        r["entropy_change"] for run in runs[:2] for r in read_metrics(run) if "entropy_change" in r
    ]
    assert f"| {np.std(steer_change) * 1e3:.2f} |" in band
