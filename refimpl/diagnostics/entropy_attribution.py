"""Why entropy moves, predicted and attributed: the first-order entropy change of an update.

The trainer measures ``entropy_change``: the mean full-vocabulary entropy ``H̄`` over the
response tokens of the step's measured rows (one completion from each of its first 32 groups),
after the step's optimizer updates minus before, on the very same states. This module predicts that
number from the update itself and splits the prediction over the tokens that caused it
(docs/entropy_mechanism.md derives both; the notation is the same).

Prediction (``entropy_change_pred``)
------------------------------------
To first order in the parameter change ``Δθ = θ_new − θ_old`` the step made,

    ΔH̄ ≈ ⟨∇_θ H̄(θ_old), Δθ⟩.

``∇_θ H̄(θ_old)`` costs one forward and backward pass of ``H̄`` on the measured rows before
the first optimizer step (none extra when a minibatch *is* the measured rows: its forward pass is
shared); ``Δθ`` is read off the parameters, so the prediction holds for any optimizer, clip or
schedule. What it leaves out is the curvature of ``H̄`` along the
step (second and higher order): with several minibatches per rollout the later ones move
``θ`` from where the gradient was taken.

Attribution (``entropy_attr/<class>``)
--------------------------------------
An Adam step ``k`` (bias corrections ``b1_k = 1 − β1^k``, ``b2_k = 1 − β2^k``) moves the
parameters by

    Δθ_k = −(lr / b1_k) · D_k ⊙ m_k,     D_k = 1 / (sqrt(v_k / b2_k) + ε),
    m_k  = β1 m_{k−1} + (1 − β1) c_k ĝ_k,

with ``ĝ_k`` the minibatch's loss gradient and ``c_k = min(1, max_norm / (‖ĝ_k‖ + 1e-6))`` the
gradient clip's scale (``torch.nn.utils.clip_grad_norm_``). Unrolling ``m`` over the ``K``
optimizer steps of one RL step, with ``m_0`` the momentum the step started with,

    ⟨∇H̄, Δθ⟩ = Σ_k ⟨∇H̄, Δθ_k⟩ = −Σ_k β1^k ⟨w_k, m_0⟩ − Σ_j ⟨U_j, ĝ_j⟩,
    w_k = (lr / b1_k) D_k ⊙ ∇H̄,     U_j = (1 − β1) c_j Σ_{k ≥ j} β1^{k−j} w_k.

The first sum is the **momentum** class: the gradients of earlier RL steps still in Adam's
``m``. The second is this step's own gradients, and it splits over tokens exactly, because the
loss reaches the parameters only through the per-token log-probs (and, for an entropy bonus,
the per-token entropies): ``ĝ_j = Σ_t (∂L/∂logp_t) ∇logp_t + Σ_t (∂L/∂H_t) ∇H_t``. So token
``t`` of minibatch ``j`` contributes

    −(∂L/∂logp_t) · ⟨∇_θ logp_t(θ_j), U_j⟩  − (∂L/∂H_t) · ⟨∇_θ H_t(θ_j), U_j⟩,

the second term being the ``entropy_term`` class. The directional derivatives
``⟨∇_θ logp_t, U_j⟩`` of every token come from one forward-mode pass (``torch.func.jvp``)
per minibatch at that minibatch's own ``θ_j``. The token classes are the advantage sign
(``pos``/``neg``; ``zero`` for ``A = 0``, e.g. the KL term on an all-equal group) × the
token's confidence (``high``: π_old of the sampled token above the batch median, ``low``: at
or below it).

What is exact and what is not: the split is an identity for Adam (no weight decay, no
AMSGrad) with a global-norm clip, given ``D_k`` read from the optimizer after each step. The
classes therefore sum to ``entropy_change_pred`` up to float rounding (the parameters are
float32). The forward-mode pass runs attention through PyTorch's math kernel (the fused CPU
kernel has no forward-mode derivative) and in float32 without autocast; with bf16 autocast the
training forward differs from it by bf16 rounding. Dropout must be 0 (the model's default)
for the training forward and the forward-mode pass to be the same function. The
approximation is only the first-order one above, shared with the prediction.

``entropy_change_pred_path`` (attribution steps only) re-takes the gradient at each
minibatch's own parameters, ``Σ_k ⟨∇H̄(θ_k), Δθ_k⟩``: when it tracks the measured change
better than ``entropy_change_pred`` does, the gap is the step's non-linearity across
minibatches, not a missing term.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from refimpl.contract import require
from refimpl.core import masked_mean

#: The token classes of the attribution, in the order they are logged (``entropy_attr/<c>``).
TOKEN_CLASSES: tuple[str, ...] = ("pos_high", "pos_low", "neg_high", "neg_low", "zero")
#: Classes that are not tokens: earlier steps' gradients in Adam's momentum, and the gradient
#: through the current entropy (an entropy bonus; logged only when the loss has one).
MOMENTUM, ENTROPY_TERM = "momentum", "entropy_term"
PREFIX = "entropy_attr/"

#: ``forward(params) -> (logp, entropy or None)``: the per-token log-probs (and entropies) of
#: some rows under the parameters ``params`` (a name → tensor dict), a pure function of them.
Forward = Callable[[dict[str, Tensor]], tuple[Tensor, Tensor | None]]


# ---------------------------------------------------------------------------------------------
# The two pieces of math, on plain tensors (the tests check them on hand-built cases).
# ---------------------------------------------------------------------------------------------


def first_order_prediction(
    grad: Sequence[Tensor], theta_old: Sequence[Tensor], theta_new: Sequence[Tensor]
) -> float:
    """``⟨grad, θ_new − θ_old⟩`` over every parameter tensor, in float64 (the difference of two
    float32 tensors is exact in float64)."""
    require(
        len(grad) == len(theta_old) == len(theta_new),
        "grad, theta_old, theta_new",
        f"one tensor per parameter each, got {len(grad)}, {len(theta_old)}, {len(theta_new)}",
    )
    total = 0.0
    for g, old, new in zip(grad, theta_old, theta_new):
        total += float(torch.dot(g.reshape(-1).double(), (new.double() - old.double()).reshape(-1)))
    return total


def hbar_gradient(hbar: Tensor, params: Sequence[Tensor], *, retain_graph: bool) -> list[Tensor]:
    """``∇_θ H̄`` of a scalar ``hbar`` (zeros for parameters it does not depend on)."""
    grads = torch.autograd.grad(hbar, list(params), retain_graph=retain_graph, allow_unused=True)
    return [torch.zeros_like(p) if g is None else g.detach() for p, g in zip(params, grads)]


def token_contributions(
    forward: Forward,
    params: dict[str, Tensor],
    direction: dict[str, Tensor],
    weight_logp: Tensor,
    weight_entropy: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Each token's share of ``−⟨direction, ĝ⟩`` for a loss gradient
    ``ĝ = Σ_t weight_logp_t ∇logp_t + Σ_t weight_entropy_t ∇H_t``.

    Returns ``(via_logp, via_entropy)``, both shaped like ``weight_logp``:
    ``−weight_logp_t · ⟨∇_θ logp_t, direction⟩`` and ``−weight_entropy_t · ⟨∇_θ H_t,
    direction⟩`` (zeros without ``weight_entropy``). One forward-mode pass gives the
    directional derivatives of every token at once. For a step ``Δθ = −M ⊙ ĝ`` (``M`` a
    diagonal preconditioner) and ``direction = M ⊙ ∇H̄``, the contributions sum to
    ``⟨∇H̄, Δθ⟩``.
    """
    from torch.nn.attention import SDPBackend, sdpa_kernel

    names = list(params)
    primals = {n: params[n].detach() for n in names}
    tangents = {n: direction[n].to(params[n].dtype) for n in names}
    # The fused CPU attention kernel has no forward-mode derivative; the math kernel has.
    with torch.no_grad(), sdpa_kernel([SDPBackend.MATH]):
        _, (d_logp, d_entropy) = torch.func.jvp(
            lambda p: _pair(forward(p), weight_logp), (primals,), (tangents,)
        )
    via_logp = -(weight_logp.double() * d_logp.double())
    if weight_entropy is None:
        return via_logp, torch.zeros_like(via_logp)
    return via_logp, -(weight_entropy.double() * d_entropy.double())


def _pair(out: tuple[Tensor, Tensor | None], like: Tensor) -> tuple[Tensor, Tensor]:
    logp, entropy = out
    return logp, (torch.zeros_like(like) if entropy is None else entropy)


def token_classes(
    adv: Tensor, logp_old: Tensor, mask: Tensor, median_p: float
) -> dict[str, Tensor]:
    """The attribution's token classes as boolean masks (they partition ``mask``): advantage
    sign × confidence (``π_old`` of the sampled token above ``median_p``, or not), and
    ``zero`` for tokens with ``A = 0`` whatever their confidence."""
    real = mask.bool()
    high = logp_old > math.log(median_p) if median_p > 0 else torch.ones_like(real)
    pos, neg = adv > 0, adv < 0
    return {
        "pos_high": real & pos & high,
        "pos_low": real & pos & ~high,
        "neg_high": real & neg & high,
        "neg_low": real & neg & ~high,
        "zero": real & ~pos & ~neg,
    }


def confidence_median(logp_old: Tensor, mask: Tensor) -> float:
    """The batch median of ``π_old`` of the sampled token over the response tokens."""
    p = logp_old.detach()[mask.bool()].double().exp()
    return float(p.median()) if p.numel() else 0.0


# ---------------------------------------------------------------------------------------------
# One RL step's bookkeeping, driven by the trainer's update stage.
# ---------------------------------------------------------------------------------------------


@dataclass
class _Minibatch:
    rows: Tensor
    """bool ``[B]``: the rows of the step's batch this optimizer step trained on"""
    theta: dict[str, Tensor]
    """the parameters before this optimizer step"""
    weight_logp: Tensor
    weight_entropy: Tensor | None
    clip: float
    """the clip's scale ``c_k``"""
    w: list[Tensor] | None = None
    """``(lr / b1_k) D_k ⊙ ∇H̄`` per parameter (float64), filled after the step"""
    grad_here: list[Tensor] | None = None
    """``∇H̄(θ_k)`` for the path prediction"""


class EntropyPredictor:
    """Predicts (and, when ``attribute``, attributes) one RL step's entropy change on the
    measured rows ``measured_rows`` (indices into the step's batch, ascending).

    The update stage calls, per optimizer step: ``forward_done`` after the loss's forward pass,
    ``before_step`` after the backward pass and the clip, ``after_step`` after the optimizer
    step; then ``finish`` returns the metrics. ``logprobs(module, rows)`` must return the
    ``(logp, entropy)`` of the batch's rows ``rows`` (a boolean row mask) under ``module``,
    with gradient (the trainer's ``policy_logprobs`` call); ``measured_logprobs(module)`` the
    same for the measured rows; ``measured_mask`` is the mask of the measured tokens (the one
    ``entropy_change`` averages over)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        logprobs: Callable[[nn.Module, Tensor], tuple[Tensor, Tensor]],
        measured_logprobs: Callable[[nn.Module], tuple[Tensor, Tensor]],
        measured_rows: Tensor,
        measured_mask: Tensor,
        *,
        attribute: bool = False,
        adv: Tensor | None = None,
        logp_old: Tensor | None = None,
        loss_mask: Tensor | None = None,
        max_norm: float = math.inf,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.logprobs = logprobs
        self.measured_logprobs = measured_logprobs
        self.measured_rows = measured_rows
        self.measured_mask = measured_mask
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.theta_old = [p.detach().clone() for p in self.params]
        self.grad: list[Tensor] | None = None
        self.attribute = attribute
        self.max_norm = max_norm
        self.steps: list[_Minibatch] = []
        if attribute:
            require(
                adv is not None and logp_old is not None and loss_mask is not None,
                "adv, logp_old, loss_mask",
                "the step's advantages, rollout log-probs and loss mask (to classify tokens)",
            )
            self.hyper = _adam_hyperparameters(optimizer)
            self.adv, self.logp_old, self.loss_mask = adv, logp_old, loss_mask
            self.median_p = confidence_median(logp_old, loss_mask)
            self.m0 = [
                optimizer.state[p]["exp_avg"].detach().double().clone()
                if "exp_avg" in optimizer.state.get(p, {})
                else torch.zeros_like(p, dtype=torch.float64)
                for p in self.params
            ]

    # -- the hooks the update stage calls ----------------------------------------------------
    def forward_done(self, rows: Tensor, entropy: Tensor) -> None:
        """After the forward pass of an optimizer step on ``rows`` (bool ``[B]``), whose
        per-token entropies (with graph) are ``entropy``: the gradient of ``H̄`` at these
        parameters, from this very forward pass when ``rows`` are the measured rows, else from
        a pass of its own. Taken at the first step (θ_old) always, at the later ones only
        when attributing (the path prediction)."""
        first = self.grad is None
        if not (first or self.attribute):
            return
        shared = entropy.requires_grad and torch.equal(
            rows.nonzero().squeeze(1), self.measured_rows.to(rows.device)
        )
        if shared:
            hbar = masked_mean(entropy.float(), self.measured_mask)
            grad = hbar_gradient(hbar, self.params, retain_graph=True)
        else:
            grad = self._gradient_here()
        if first:
            self.grad = grad
        else:
            self._pending_grad = grad

    def before_step(
        self, rows: Tensor, logp: Tensor, entropy: Tensor | None, grad_norm: Tensor
    ) -> None:
        """After the backward pass and the clip, before ``optimizer.step()``: what the
        attribution needs of this optimizer step (``logp.grad`` is ``∂L/∂logp``)."""
        if not self.attribute:
            return
        weight_entropy = None
        if entropy is not None and entropy.requires_grad and entropy.grad is not None:
            weight_entropy = entropy.grad.detach().clone()
        norm = float(grad_norm)
        clip = min(1.0, self.max_norm / (norm + 1e-6)) if math.isfinite(self.max_norm) else 1.0
        step = _Minibatch(
            rows=rows.clone(),
            theta={n: p.detach().clone() for n, p in zip(self.names, self.params)},
            weight_logp=logp.grad.detach().clone(),
            weight_entropy=weight_entropy,
            clip=clip,
        )
        step.grad_here = self.grad if not self.steps else self._pending_grad
        self.steps.append(step)

    def after_step(self) -> None:
        """After ``optimizer.step()``: Adam's ``(lr / b1_k) D_k`` from its state, times ∇H̄."""
        if not self.attribute:
            return
        _, (beta1, beta2), eps = self.hyper
        lr = float(self.optimizer.param_groups[0]["lr"])  # this step's: a warm-up changes it
        w = []
        for p, g in zip(self.params, self.grad):
            state = self.optimizer.state[p]
            k = float(state["step"])
            denom = (state["exp_avg_sq"].double().sqrt() / math.sqrt(1 - beta2**k)) + eps
            w.append(lr / (1 - beta1**k) * g.double() / denom)
        self.steps[-1].w = w

    # -- the result -------------------------------------------------------------------------
    def finish(self) -> dict[str, float]:
        """``entropy_change_pred`` and, when attributing, ``entropy_change_pred_path`` and the
        ``entropy_attr/<class>`` contributions (they sum to ``entropy_change_pred``)."""
        theta_new = [p.detach() for p in self.params]
        if self.grad is None:  # no optimizer step was taken
            return {}
        out = {"entropy_change_pred": first_order_prediction(self.grad, self.theta_old, theta_new)}
        if self.attribute and self.steps:
            out.update(self._attribution(theta_new))
        return out

    # -- internals --------------------------------------------------------------------------
    def _gradient_here(self) -> list[Tensor]:
        with torch.enable_grad():
            _, entropy = self.measured_logprobs(self.model)
            hbar = masked_mean(entropy.float(), self.measured_mask)
            return hbar_gradient(hbar, self.params, retain_graph=False)

    def _attribution(self, theta_new: list[Tensor]) -> dict[str, float]:
        _lr, (beta1, _beta2), _eps = self.hyper
        K = len(self.steps)
        sums = dict.fromkeys((*TOKEN_CLASSES, MOMENTUM), 0.0)
        # Earlier steps' gradients, carried in m_0: −Σ_k β1^k ⟨w_k, m_0⟩.
        for k, step in enumerate(self.steps, start=1):
            sums[MOMENTUM] -= beta1**k * sum(float((w * m).sum()) for w, m in zip(step.w, self.m0))
        entropy_term = 0.0
        has_entropy_term = False
        for j, step in enumerate(self.steps):
            # U_j = (1 − β1) c_j Σ_{k ≥ j} β1^{k−j} w_k
            direction = {}
            for i, name in enumerate(self.names):
                acc = sum(beta1 ** (k - j) * self.steps[k].w[i] for k in range(j, K))
                direction[name] = (1 - beta1) * step.clip * acc
            rows = step.rows

            def forward(params, rows=rows):
                return _functional(self.model, params, lambda m: self.logprobs(m, rows))

            via_logp, via_entropy = token_contributions(
                forward, step.theta, direction, step.weight_logp, step.weight_entropy
            )
            classes = token_classes(
                self.adv[rows], self.logp_old[rows], self.loss_mask[rows], self.median_p
            )
            for name, where in classes.items():
                sums[name] += float(via_logp[where].sum())
            if step.weight_entropy is not None:
                has_entropy_term = True
                entropy_term += float(via_entropy[self.loss_mask[rows].bool()].sum())
        out = {PREFIX + name: value for name, value in sums.items()}
        if has_entropy_term:
            out[PREFIX + ENTROPY_TERM] = entropy_term
        # The path prediction: the gradient re-taken at each optimizer step's own θ_k.
        ends = [s.theta for s in self.steps[1:]] + [dict(zip(self.names, theta_new))]
        out["entropy_change_pred_path"] = sum(
            first_order_prediction(
                s.grad_here, [s.theta[n] for n in self.names], [end[n] for n in self.names]
            )
            for s, end in zip(self.steps, ends)
        )
        return out


class _Reparametrized(nn.Module):
    """``fn(model)`` as a module, so ``torch.func.functional_call`` can swap the model's
    parameters for one call of a function that calls the model more than once."""

    def __init__(self, model: nn.Module, fn: Callable[[nn.Module], Any]) -> None:
        super().__init__()
        self.model = model
        self.fn = fn

    def forward(self) -> Any:
        return self.fn(self.model)


def _functional(model: nn.Module, params: dict[str, Tensor], fn: Callable[[nn.Module], Any]):
    wrapper = _Reparametrized(model, fn)
    return torch.func.functional_call(wrapper, {f"model.{n}": v for n, v in params.items()}, ())


def _adam_hyperparameters(
    optimizer: torch.optim.Optimizer,
) -> tuple[float, tuple[float, float], float]:
    """``(lr, betas, eps)`` of a plain ``torch.optim.Adam`` (one parameter group, no weight
    decay, no AMSGrad): the optimizer whose step the attribution splits exactly."""
    require(
        type(optimizer) is torch.optim.Adam and len(optimizer.param_groups) == 1,
        "optimizer",
        f"a torch.optim.Adam with one parameter group, got {type(optimizer).__name__}",
    )
    group = optimizer.param_groups[0]
    require(
        not group.get("weight_decay")
        and not group.get("amsgrad")
        and not group.get("maximize")
        and not isinstance(group["lr"], Tensor),
        "optimizer",
        "Adam without weight decay, AMSGrad or maximize, with a float lr",
    )
    return float(group["lr"]), tuple(group["betas"]), float(group["eps"])


# ---------------------------------------------------------------------------------------------
# Reading the logged metrics back: correlations over steps, raw and detrended.
# ---------------------------------------------------------------------------------------------


def logged_pairs(
    records: Sequence[dict[str, Any]], x_key: str, y_key: str
) -> tuple[np.ndarray, np.ndarray]:
    """The steps that logged both ``x_key`` and ``y_key``, as two arrays (in step order)."""
    pts = [
        (r[x_key], r[y_key])
        for r in records
        if isinstance(r.get(x_key), (int, float)) and isinstance(r.get(y_key), (int, float))
    ]
    if not pts:
        return np.array([]), np.array([])
    x, y = (np.asarray(v, dtype=float) for v in zip(*pts))
    return x, y


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; NaN when either side has no spread (a single point included). The one
    definition: the credit benchmark's criteria (``bench.credit_metrics``) use it too."""
    if x.size < 2:
        return math.nan
    x, y = x - x.mean(), y - y.mean()
    denom = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / denom) if denom > 0 else math.nan


def slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of ``y`` against ``x`` (with an intercept)."""
    if x.size < 2 or x.std() == 0:
        return float("nan")
    return float(np.polyfit(x, y, 1)[0])


def detrend(values: np.ndarray, window: int = 11) -> np.ndarray:
    """``values`` minus their centred running mean over ``window`` steps (shorter at the
    ends): what is left once the slow trend of a run is removed."""
    n = values.size
    if n == 0:
        return values
    half = window // 2
    c = np.cumsum(np.insert(values, 0, 0.0))
    lo = np.clip(np.arange(n) - half, 0, n)
    hi = np.clip(np.arange(n) + half + 1, 0, n)
    return values - (c[hi] - c[lo]) / (hi - lo)


def correlations(
    runs: Sequence[Sequence[dict[str, Any]]], x_key: str, y_key: str = "entropy_change"
) -> dict[str, float]:
    """``x_key`` against ``y_key`` over steps, every run's steps pooled: Pearson's r raw, r of
    the residuals after each run's own trend (``detrend``), r of first differences, the
    least-squares slope of ``y`` on ``x``, and the number of steps. Detrending is per run, so
    a trend two runs share does not enter either."""
    xs, ys, dxs, dys, fxs, fys = [], [], [], [], [], []
    for records in runs:
        x, y = logged_pairs(records, x_key, y_key)
        if x.size == 0:
            continue
        xs.append(x)
        ys.append(y)
        dxs.append(detrend(x))
        dys.append(detrend(y))
        fxs.append(np.diff(x))
        fys.append(np.diff(y))
    if not xs:
        return {
            "r": math.nan,
            "r_detrended": math.nan,
            "r_diff": math.nan,
            "slope": math.nan,
            "steps": 0,
        }
    x, y = np.concatenate(xs), np.concatenate(ys)

    def r(a: list[np.ndarray], b: list[np.ndarray]) -> float:
        # Two points always lie on a line: a correlation needs three.
        a, b = np.concatenate(a), np.concatenate(b)
        return pearson(a, b) if a.size >= 3 else math.nan

    return {
        "r": r(xs, ys),
        "r_detrended": r(dxs, dys),
        "r_diff": r(fxs, fys),
        "slope": slope(x, y),
        "steps": int(x.size),
    }


def attribution_keys(records: Sequence[dict[str, Any]]) -> list[str]:
    """The ``entropy_attr/<class>`` keys a run logged, in the logging order."""
    seen = {k for r in records for k in r if k.startswith(PREFIX)}
    order = [PREFIX + c for c in (*TOKEN_CLASSES, ENTROPY_TERM, MOMENTUM)]
    return [k for k in order if k in seen] + sorted(seen - set(order))


def attribution_gap(records: Sequence[dict[str, Any]]) -> float:
    """The largest ``|Σ_classes − entropy_change_pred| / |entropy_change_pred|`` over the
    steps that logged an attribution (NaN when none did)."""
    keys = attribution_keys(records)
    gaps = [
        abs(sum(r[k] for k in keys if k in r) - r["entropy_change_pred"])
        / max(abs(r["entropy_change_pred"]), 1e-30)
        for r in records
        if keys and keys[0] in r and "entropy_change_pred" in r
    ]
    return max(gaps) if gaps else math.nan


def prediction_table(runs: dict[str, Sequence[Sequence[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per label (its runs' steps pooled, each run detrended on its own): how well the first-
    order prediction, the path prediction and the two covariances track the measured entropy
    change over steps, and how well the covariance tracks the prediction (the tabular
    estimator against the network's first-order change).

    ``r_*``: Pearson's r raw; ``*_detr``: after each run's running-mean trend (``detrend``);
    ``*_diff``: of first differences; ``slope``: measured on predicted. The path prediction
    exists on the attribution steps only; ``r_pred_attr`` is the plain prediction on those
    same steps, for comparison."""
    rows = []
    for label, records in runs.items():
        pred = correlations(records, "entropy_change_pred")
        attributed = [[r for r in rs if "entropy_change_pred_path" in r] for rs in records]
        path = correlations(attributed, "entropy_change_pred_path")
        pred_attr = correlations(attributed, "entropy_change_pred")
        cov = correlations(records, "cov_logp_adv")
        cov_update = correlations(records, "cov_logp_update")
        cov_pred = correlations(records, "cov_logp_adv", "entropy_change_pred")
        rows.append(
            {
                "algo": label,
                "steps": pred["steps"],
                "r_pred": pred["r"],
                "slope_pred": pred["slope"],
                "r_pred_detr": pred["r_detrended"],
                "attr_steps": path["steps"],
                "r_path": path["r"],
                "slope_path": path["slope"],
                "r_pred_attr": pred_attr["r"],
                "r_cov": cov["r"],
                "r_cov_detr": cov["r_detrended"],
                "r_cov_diff": cov["r_diff"],
                "r_covu": cov_update["r"],
                "r_covu_detr": cov_update["r_detrended"],
                "r_cov_pred": cov_pred["r"],
                "r_cov_pred_detr": cov_pred["r_detrended"],
            }
        )
    return rows


def attribution_table(runs: dict[str, Sequence[Sequence[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per label: the mean over its attributed steps (every run pooled) of each
    ``entropy_attr/<class>``, of their sum, of ``entropy_change_pred`` and of the measured
    ``entropy_change`` (nats per step), and the largest relative gap between the sum and the
    prediction (``attribution_gap``)."""
    attributed = {
        label: [r for rs in records for r in rs if PREFIX + MOMENTUM in r]
        for label, records in runs.items()
    }
    # One set of columns for every label (NaN where a label has no attributed step).
    keys = attribution_keys([r for steps in attributed.values() for r in steps])
    rows = []
    for label, steps in attributed.items():
        row: dict[str, Any] = {"algo": label, "attr_steps": len(steps)}
        for key in keys:
            values = [r.get(key, 0.0) for r in steps]
            row[key[len(PREFIX) :]] = float(np.mean(values)) if values else math.nan
        for key in ("entropy_change_pred", "entropy_change"):
            row[key] = float(np.mean([r[key] for r in steps])) if steps else math.nan
        row["sum"] = float(sum(row[k[len(PREFIX) :]] for k in keys)) if steps else math.nan
        row["max_gap"] = attribution_gap(steps)
        rows.append(row)
    return rows
