"""``refimpl credit``: every algorithm's token credit, scored against the true advantages.

One batch of ``N`` prompts × ``G`` completions is sampled from a policy (a warm start, or a run's
last checkpoint). The credit oracle (``refimpl.diagnostics.credit_oracle``) estimates the true
advantage ``A*[i, t]`` of every token by rollouts from its prefix. Then, for every algorithm,
on that very batch, two per-token signals:

* its **advantages** ``A[i, t]`` (``advantages(batch, cfg)`` of its file, after the loop's
  mechanisms: dynamic sampling's dropped groups get 0, DAPO's overlong shaping is in the
  rewards);
* its **effective credit** ``c[i, t] = −∂L/∂logp[i, t]`` at ``logp = logp_old``, by autograd
  through its ``loss``: what the first gradient step pushes each token's log-probability by,
  with everything that acts inside the loss (the aggregation's length normaliser, forking
  tokens' entropy mask, STEER's weights, a KL term to the reference, GPG's α).

The whole batch is one minibatch here (the loop splits it into ``minibatches``: each split
rescales its own tokens by its own normaliser, which changes no comparison within a
completion). Each signal is compared with ``A*``:

1. **within-completion agreement**: the Pearson and Spearman correlation of the signal and
   ``A*`` over the tokens of one completion, averaged over completions (s.e. over them). A
   signal that is constant within a completion carries no within-completion credit: it is
   counted as such, never given a correlation; the pooled correlation over all tokens is
   reported beside it (it also rewards a signal for ranking whole completions);
2. **blame on failures**: in a failed completion, the share of its negative signal mass on
   the pivot (the token whose ``A*`` is most negative) and on the prefix before it; on
   ``chain``, also on the first token that leaves the reference scratchpad (the one correct
   working a completion can write) and on the prefix before that;
3. **the entropy hypothesis** (GTPO's founding one): the correlation of the rollout entropy
   ``H_old`` with ``|A*|``, and the share of ``Σ|A*|`` (and of the noise-free ``ΣA*²``) on the
   20 % highest-entropy tokens, against 20 % for random tokens.

``A*`` is a difference of two Monte-Carlo estimates: its noise is reported (the split-half
reliability of the oracle, the correlation of ``A*`` from two halves of the rollouts), so a
correlation can be read against the largest one the oracle's noise allows.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from refimpl import algorithms, mechanisms
from refimpl.core import require
from refimpl.diagnostics.credit_oracle import TokenValues, token_values, training_values
from refimpl.runs.progress import progress as progress_bar
from refimpl.sampling.groups import Samples, sample_groups, seeded_generator
from refimpl.settings.presets import PresetName
from refimpl.settings.train import TrainConfig
from toy_envs import TOKENIZER

#: The batch's prompts come from ``default_rng([HELD_OUT_SEED, CREDIT_STREAM, seed])``: a key
#: whose first word is the evaluation streams' (``refimpl.streams.HELD_OUT_SEED``), which no
#: training or warm-start stream uses, and whose second word is not the held-out set's 0.
CREDIT_STREAM = 1
#: The forking-tokens share: the top 20 % of tokens by entropy (Wang et al., arXiv 2506.01939).
TOP_FRACTION = 0.2
#: A signal whose spread within a completion is below this fraction of its largest |value|
#: there is constant: it carries no within-completion credit. (Float32 rounding, e.g. of a KL
#: gradient between two evaluations of the same policy, moves a constant signal by ~1e-7.)
CONSTANT_TOL = 1e-5


@dataclass
class CreditConfig:
    """Score every algorithm's token credit against the oracle's true advantages on one batch."""

    run: Path | None = None
    """a run directory: score the policy of its last checkpoint, sampled with the run's own
    settings (task, temperature, budget, model); None: the warm start of --train's settings"""
    preset: PresetName = "default"
    """a named regime from refimpl.settings.presets (its training settings: task, knobs, warm
    start) for the fields of --train you leave at their defaults; ignored with --run"""
    train: TrainConfig = field(default_factory=TrainConfig)
    """the policy's task, sampling and warm start settings when no --run is given
    (--train.task, --train.task-args, --train.temperature, --train.warmstart.*)"""
    prompts: int = 8
    """N prompts in the batch"""
    group_size: int | None = None
    """G completions per prompt (None: the run's / --train's)"""
    rollouts: str = "32"
    """comma-separated K, rollouts per prefix (even); one oracle estimate per K, same batch"""
    algos: str = ",".join(algorithms.NAMES)
    """comma-separated algorithms scored (every one by default)"""
    seed: int = 0
    """seed of the batch's prompts and completions and of the oracle's rollouts"""
    out: Path = Path("runs/credit/credit.json")
    """the JSON written: settings, per-token values and signals, metrics"""
    threads: int | None = None
    """torch CPU threads (None: torch's default, one per core)"""
    max_rows: int = 4096
    """rollout rows per sampling call (memory: about 0.2 MB a row for the 2-layer model)"""
    overwrite: bool = False
    """replace an existing --out"""

    def rollout_list(self) -> list[int]:
        try:
            ks = [int(s) for s in self.rollouts.split(",") if s.strip()]
        except ValueError:
            raise ValueError(
                f"--rollouts: expected comma-separated integers, got {self.rollouts!r}"
            ) from None
        if not ks or any(k < 2 or k % 2 for k in ks):
            raise ValueError(f"--rollouts: expected even integers ≥ 2, got {self.rollouts!r}")
        if len(set(ks)) != len(ks):
            raise ValueError(f"--rollouts: {self.rollouts!r} repeats a value")
        return ks

    def algo_list(self) -> list[str]:
        names = [a.strip() for a in self.algos.split(",") if a.strip()]
        if not names:
            raise ValueError("--algos: expected a comma-separated list of algorithm names")
        for a in names:
            algorithms.get(a)  # ValueError listing the valid names
        if len(set(names)) != len(names):
            raise ValueError(f"--algos: {self.algos!r} repeats an algorithm")
        return names

    def check(self, typed: frozenset[str] | None = None) -> None:
        """Every flag, before anything is loaded, sampled or written. ``typed``: the fields
        the command line set (``presets.explicit_fields``; None: those that differ from
        their defaults), so that a ``--train.*`` flag or ``--preset`` given with ``--run``,
        which scores the run's own settings, is refused rather than ignored."""
        from refimpl.runs.runlog import check_output_file

        self.rollout_list()
        self.algo_list()
        if not (isinstance(self.prompts, int) and 1 <= self.prompts <= 4096):
            raise ValueError(f"--prompts: expected an integer in [1, 4096], got {self.prompts}")
        if self.group_size is not None and not 2 <= self.group_size <= 1024:
            raise ValueError(
                f"--group-size: expected an integer in [2, 1024], got {self.group_size}"
            )
        if self.seed < 0:
            raise ValueError(f"--seed: expected an integer ≥ 0, got {self.seed}")
        if self.max_rows < max(self.rollout_list()):
            raise ValueError(
                f"--max-rows: expected at least the largest --rollouts ({max(self.rollout_list())})"
            )
        if self.threads is not None and not 1 <= self.threads <= (os.cpu_count() or 1):
            raise ValueError(
                f"--threads: expected an integer in [1, {os.cpu_count() or 1}], got {self.threads}"
            )
        check_output_file(self.out, "--out", self.overwrite)
        if self.run is not None:
            if not (Path(self.run) / "config.json").is_file():
                raise ValueError(f"--run: {self.run} is not a run directory (no config.json)")
            unused = sorted(self._train_flags(typed))
            if unused:
                raise ValueError(
                    f"{unused[0]}: not used with --run, which scores the run's checkpoint with "
                    "the run's own settings (its config.json: task, sampling, model); drop "
                    f"{', '.join(unused)}, or leave out --run to score a warm start"
                )

    def _train_flags(self, typed: frozenset[str] | None) -> set[str]:
        """The flags of ``--train`` and ``--preset`` given (``typed``), or, without
        ``typed``, those whose value differs from the default."""
        if typed is not None:
            names = {n for n in typed if n == "preset" or n.startswith("train.")}
        else:
            base = CreditConfig()
            names = {"preset"} if self.preset != base.preset else set()
            names |= {
                f"train.{k}"
                for k, v in _flat(dataclasses.asdict(self.train)).items()
                if v != _flat(dataclasses.asdict(base.train)).get(k)
            }
        return {"--" + n.replace("_", "-") for n in names}


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out |= _flat(v, prefix + k + ".")
        else:
            out[prefix + k] = v
    return out


# ---------------------------------------------------------------------------------------------
# The policy and the batch.
# ---------------------------------------------------------------------------------------------


@dataclass
class Policy:
    """What is scored: the model, its reference (the warm start: π_ref of the KL terms), the
    settings it samples with, and where it came from."""

    model: Any
    reference: Any
    plan: Any
    source: str
    step: int


#: The flags of ``TrainConfig`` (first components): a message of its checks names
#: ``--temperature``; ``refimpl credit`` takes it as ``--train.temperature``.
_TRAIN_FLAGS = frozenset(f.name.replace("_", "-") for f in dataclasses.fields(TrainConfig))


def as_train_flags(message: str) -> str:
    """``message`` (a ``TrainConfig`` check's) with each of its flags spelled as ``refimpl
    credit`` takes it: ``--temperature`` → ``--train.temperature``."""
    import re

    def spell(m: re.Match) -> str:
        name = m.group(1)
        return f"--train.{name}" if name.split(".")[0] in _TRAIN_FLAGS else m.group(0)

    return re.sub(r"(?<![\w.])--([a-z][\w-]*(?:\.[\w-]+)*)", spell, message)


def train_settings(cfg: CreditConfig, typed: frozenset[str] | None = None) -> TrainConfig:
    """The settings of the policy scored: the run's config.json (``--run``; where the run is
    now, whatever directory it was trained from), or ``--train`` with ``--preset``'s values
    on the fields not typed (``typed``, as ``compare`` keeps them; None: the fields still at
    their defaults)."""
    from refimpl.runs.rundir import load_config_file
    from refimpl.settings import presets

    if cfg.run is not None:
        run = Path(cfg.run)
        train = load_config_file(run / "config.json", "--run", algo_config=True)
        # config.json keeps --runs-dir as typed (relative to where the run was trained): the
        # run is where it was found now, and so is the warm-start cache beside it.
        return dataclasses.replace(train, progress=False, runs_dir=run.parent, name=run.name)
    explicit = None
    if typed is not None:
        explicit = frozenset(n.removeprefix("train.") for n in typed if n.startswith("train."))
    return presets.fill_defaults(cfg.train, presets.get(cfg.preset).train, explicit)


def plan_policy(cfg: CreditConfig, typed: frozenset[str] | None = None):
    """``(plan, checkpoint, state)``: the settings resolved and checked (flags named as
    ``credit`` takes them), and with ``--run`` its checkpoint verified, before any warm start
    is trained or loaded."""
    from refimpl.runs.resume import verify_run_checkpoint
    from refimpl.settings.plan import resolve

    train = train_settings(cfg, typed)
    try:
        plan = resolve(train)
    except ValueError as err:
        message = str(err) if cfg.run is not None else as_train_flags(str(err))
        raise ValueError(message) from None
    if cfg.run is None:
        return plan, None, None
    checkpoint, state = verify_run_checkpoint(Path(cfg.run), train, "--run")
    return plan, checkpoint, state


def load_policy(cfg: CreditConfig, typed: frozenset[str] | None = None, planned=None) -> Policy:
    """The policy of ``--run`` (its last checkpoint) or the warm start of ``--train``."""
    from refimpl.runs.checkpoint import load_model_weights
    from refimpl.warmstart import base_model

    plan, checkpoint, state = planned or plan_policy(cfg, typed)
    reference = base_model(plan.warmstart, "--train.warmstart.").eval()
    if cfg.run is None:
        return Policy(reference, reference, plan, "warm start", 0)
    model = plan.warmstart.model.build()
    load_model_weights(checkpoint, model, state=state)
    return Policy(model.eval(), reference, plan, str(cfg.run), int(state.get("step", -1)))


def oracle_memory(cfg: CreditConfig, plan, G: int) -> list[tuple[str, int, list]]:
    """The largest allocations of the benchmark (``refimpl.settings.memory``'s form): the
    batch's ``N·G`` rows and the oracle's rollout rows per sampling call (``--max-rows``, or
    ``K·N·G`` when fewer), each a row of ``L_prompt + L_max`` positions as ``train``
    estimates a sampled row."""
    from refimpl.settings.memory import decode_bytes

    d = CreditConfig()
    T = plan.task.max_prompt_tokens + plan.max_new_tokens
    per_row = T * decode_bytes(plan.warmstart.model)
    K, N = max(cfg.rollout_list()), cfg.prompts
    rows = min(cfg.max_rows, K * N * G)
    N_f = ("--prompts", N, d.prompts)
    G_f = ("--group-size", G, TrainConfig().group_size)
    oracle_f = [("--max-rows", cfg.max_rows, d.max_rows)] if rows == cfg.max_rows else [
        ("--rollouts", K, 32), N_f, G_f]  # fmt: skip
    return [
        ("the batch's completions", N * G * per_row, [N_f, G_f]),
        ("the oracle's rollouts (one sampling call)", rows * per_row, oracle_f),
    ]


def sample_batch(policy: Policy, n_prompts: int, group_size: int, seed: int):
    """``(problems, samples, outcome)``: ``n_prompts`` problems of the policy's task, ``G``
    completions each at the run's sampling settings, and their outcome rewards."""
    from refimpl.streams import HELD_OUT_SEED

    train, task = policy.plan.cfg, policy.plan.task
    problems = task.sample(n_prompts, np.random.default_rng([HELD_OUT_SEED, CREDIT_STREAM, seed]))
    samples = sample_groups(
        policy.model,
        [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems],
        group_size=group_size,
        max_new_tokens=policy.plan.max_new_tokens,
        eos_id=TOKENIZER.eos_id,
        pad_id=TOKENIZER.pad_id,
        temperature=train.temperature,
        top_k=train.top_k,
        top_p=train.top_p,
        generator=seeded_generator(HELD_OUT_SEED, CREDIT_STREAM, seed),
    )
    texts = [TOKENIZER.decode(row.tolist()) for row in samples.response_ids]
    answered = [p for p in problems for _ in range(group_size)]
    outcome = torch.tensor(task.score(answered, texts), dtype=torch.float32)
    return problems, samples, outcome


# ---------------------------------------------------------------------------------------------
# Each algorithm's two signals on the batch.
# ---------------------------------------------------------------------------------------------


def algorithm_signals(
    name: str,
    samples: Samples,
    outcome: torch.Tensor,
    max_new_tokens: int,
    logp_ref: torch.Tensor | None = None,
    algo_cfg: Any = None,
    token_values: torch.Tensor | None = None,
) -> dict[str, Any]:
    """``advantages`` ``[B, T]``, effective ``credit`` ``[B, T]`` (``−∂L/∂logp`` at
    ``logp = logp_old``) and ``trained`` ``[B]`` (the rows of the groups the algorithm trains
    on) of algorithm ``name`` on the batch, as the toy loop would compute them for its first
    update: dynamic sampling on the outcome, reward shaping, advantages, overlong filter, then
    the loss of the whole batch at ``θ = θ_old``. ``token_values``: ``[B, T]`` ``V̂`` of π_old,
    for a Config whose ``values_needed()`` asks for them (VinePPO; ``training_values``)."""
    algo = algorithms.get(name)
    cfg = (algo_cfg or algo.Config()).for_generation_budget(max_new_tokens)
    require(
        cfg.values_needed() is None or token_values is not None,
        "token_values",
        f"the Monte-Carlo values {name} reads (credit_oracle.training_values), got None",
    )
    G = samples.group_size
    B, T = samples.response_ids.shape
    advantages = torch.zeros(B, T, dtype=torch.float64)
    credit = torch.zeros(B, T, dtype=torch.float64)
    keep = mechanisms.keep_groups(outcome, G, cfg)  # DAPO Eq. 11 when the Config asks
    rows = keep.repeat_interleave(G)
    if not bool(keep.any()):
        return {"advantages": advantages, "credit": credit, "trained": rows}
    kept = samples.select_groups(keep)
    kept_outcome = outcome[rows]
    rewards = mechanisms.shape_rewards(kept_outcome, kept.response_mask.sum(1), max_new_tokens, cfg)
    ref = logp_ref[rows] if (logp_ref is not None and cfg.needs_reference()) else None
    batch = kept.to_rollout_batch(rewards, G, logp_ref=ref).replace(outcome_rewards=kept_outcome)
    if cfg.values_needed() is not None:
        batch = batch.replace(token_values=token_values[rows].double())
    A = algo.advantages(batch, cfg)
    loss_mask = mechanisms.overlong_filter(batch.response_mask, kept.truncated, cfg)
    batch = batch.replace(response_mask=loss_mask)
    logp = batch.logp_old.clone().requires_grad_(True)
    # θ = θ_old: the current policy's entropy is the rollout's (TEPO's mask reads both).
    loss, _ = algo.loss(batch, logp, A, cfg.for_update(batch, A), entropy=batch.entropy_old)
    (grad,) = torch.autograd.grad(loss, logp)
    advantages[rows] = A.detach().double()
    credit[rows] = -grad.double()
    return {"advantages": advantages, "credit": credit, "trained": rows}


# ---------------------------------------------------------------------------------------------
# Metrics: numpy over the response tokens.
# ---------------------------------------------------------------------------------------------


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share their mean rank), for Spearman's correlation."""
    order = np.argsort(x, kind="mergesort")
    ranks = np.empty(len(x))
    ranks[order] = np.arange(len(x), dtype=float)
    sorted_x = x[order]
    start = 0
    for end in range(1, len(x) + 1):
        if end == len(x) or sorted_x[end] != sorted_x[start]:
            ranks[order[start:end]] = (start + end - 1) / 2.0
            start = end
    return ranks


def pearson(x: np.ndarray, y: np.ndarray) -> float:
    """Pearson's r; NaN when either side is constant."""
    x, y = x - x.mean(), y - y.mean()
    denom = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / denom) if denom > 0 else math.nan


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's ρ: Pearson's r of the average ranks."""
    return pearson(_ranks(x), _ranks(y))


def mean_se(values: list[float]) -> dict[str, float]:
    """Mean, its s.e. (sd over √n, ddof 1) and n of the finite ``values``."""
    v = np.array([x for x in values if math.isfinite(x)], dtype=float)
    if v.size == 0:
        return {"mean": math.nan, "se": math.nan, "n": 0}
    se = float(v.std(ddof=1) / math.sqrt(v.size)) if v.size > 1 else math.nan
    return {"mean": float(v.mean()), "se": se, "n": int(v.size)}


def within_values(
    signal: np.ndarray, truth: np.ndarray, lengths: np.ndarray, rows
) -> tuple[dict[int, tuple[float, float]], int, int]:
    """Per completion ``i`` of ``rows`` where both vary over its tokens, the (Pearson,
    Spearman) correlation of ``signal`` with ``truth``; and how many completions had a constant
    signal, and how many a constant truth (neither is correlated)."""
    out, constant, flat_truth = {}, 0, 0
    for i in rows:
        L = int(lengths[i])
        x, y = signal[i, :L], truth[i, :L]
        if L < 2 or np.ptp(x) <= CONSTANT_TOL * float(np.abs(x).max()):
            constant += 1
            continue
        if np.ptp(y) == 0:
            flat_truth += 1
            continue
        out[int(i)] = (pearson(x, y), spearman(x, y))
    return out, constant, flat_truth


def within_completion(signal: np.ndarray, truth: np.ndarray, lengths: np.ndarray, rows) -> dict:
    """Criterion 1: the per-completion Pearson and Spearman correlations of ``signal`` with
    ``truth`` over each completion's tokens, averaged over the ``rows`` where both vary; the
    completions where the signal is constant are counted, never correlated."""
    values, constant, flat_truth = within_values(signal, truth, lengths, rows)
    return {
        "pearson": mean_se([p for p, _ in values.values()]),
        "spearman": mean_se([s for _, s in values.values()]),
        "completions": len(rows),
        "constant": constant,
        "truth_constant": flat_truth,
        "no_within_credit": constant == len(rows),
    }


def pooled(signal: np.ndarray, truth: np.ndarray, mask: np.ndarray, rows) -> dict:
    """The correlations over every response token of ``rows`` together."""
    m = mask[rows]
    x, y = signal[rows][m], truth[rows][m]
    return {"pearson": pearson(x, y), "spearman": spearman(x, y), "tokens": int(m.sum())}


def blame_values(
    signal: np.ndarray, pivots: dict[int, int], lengths: np.ndarray
) -> dict[int, dict[str, float]]:
    """Per failed completion ``i`` with pivot token ``pivots[i]`` and some negative signal, the
    share of its negative signal mass ``Σ_t max(−s, 0)`` on the pivot and on the tokens before
    it, what a constant signal would put there (1/|o|, t/|o|), and the pivot's excess over 1/|o|."""
    out = {}
    for i, t in pivots.items():
        L = int(lengths[i])
        neg = np.maximum(-signal[i, :L], 0.0)
        total = float(neg.sum())
        if total <= 0:
            continue
        pivot = float(neg[t]) / total
        out[int(i)] = {"pivot": pivot, "prefix": float(neg[:t].sum()) / total,
                       "uniform_pivot": 1.0 / L, "uniform_prefix": t / L,
                       "pivot_excess": pivot - 1.0 / L}  # fmt: skip
    return out


def blame_shares(signal: np.ndarray, pivots: dict[int, int], lengths: np.ndarray) -> dict:
    """Criterion 2: per failed completion ``i`` with pivot token ``pivots[i]``, the share of its
    negative signal mass ``Σ_t max(−s, 0)`` on the pivot and on the tokens before it."""
    rows = blame_values(signal, pivots, lengths).values()
    # pivot_excess is paired per completion: the pivot's share beyond a constant signal's 1/|o|.
    keys = ("pivot", "prefix", "uniform_pivot", "uniform_prefix", "pivot_excess")
    return {k: mean_se([r[k] for r in rows]) for k in keys}


def first_wrong_token(task, problem, tokens: list[int]) -> int | None:
    """The first position where ``tokens`` leave the reference solution (its working and
    answer, then ``<eos>``); None when the task has no unique working (only ``chain`` has one)."""
    if getattr(task, "name", None) != "chain":
        return None
    reference = TOKENIZER.encode(task.reference_solution(problem), add_eos=True)
    for t, token in enumerate(tokens):
        if t >= len(reference) or token != reference[t]:
            return t
    return len(tokens) - 1 if len(tokens) < len(reference) else None


def top_share(entropy: np.ndarray, mass: np.ndarray) -> float:
    """The share of ``Σ mass`` carried by the ``TOP_FRACTION`` of tokens with the highest
    ``entropy`` (ties broken by position); NaN when ``Σ mass ≤ 0``."""
    n_top = max(1, int(round(TOP_FRACTION * entropy.size)))
    top = np.argsort(-entropy, kind="mergesort")[:n_top]
    total = float(mass.sum())
    return float(mass[top].sum() / total) if total > 0 else math.nan


#: Prompts drawn with replacement per bootstrap replicate of the share by prompt.
BOOTSTRAP_DRAWS = 1000


def share_by_prompt(entropy_rows: list, mass_rows: list, prompt_of: list[int], seed: int) -> dict:
    """The top-20 % entropy share of ``Σ mass`` (:func:`top_share`) with its spread over the
    batch's prompts: ``BOOTSTRAP_DRAWS`` replicates, each resampling the prompts with
    replacement (a prompt brings all its completions' tokens; the top 20 % is chosen again in
    each replicate), their sd (the share's s.e. by prompt) and 5th and 95th percentiles (a
    90 % interval). The completions of a prompt share its value, so tokens are not independent
    draws; prompts are. ``entropy_rows``, ``mass_rows``: per completion, its tokens'."""
    rows_of: dict[int, list[int]] = {}
    for i, g in enumerate(prompt_of):
        rows_of.setdefault(int(g), []).append(i)
    groups = list(rows_of.values())
    h = [np.concatenate([np.asarray(entropy_rows[i], dtype=float) for i in g]) for g in groups]
    m = [np.concatenate([np.asarray(mass_rows[i], dtype=float) for i in g]) for g in groups]
    rng = np.random.default_rng([seed, len(groups)])
    reps = []
    for _ in range(BOOTSTRAP_DRAWS):
        pick = rng.integers(len(groups), size=len(groups))
        reps.append(top_share(np.concatenate([h[j] for j in pick]),
                              np.concatenate([m[j] for j in pick])))  # fmt: skip
    reps_arr = np.array([r for r in reps if math.isfinite(r)])
    finite = reps_arr.size > 1
    return {
        "share": top_share(np.concatenate(h), np.concatenate(m)),
        "sd": float(reps_arr.std(ddof=1)) if finite else math.nan,
        "lo": float(np.percentile(reps_arr, 5)) if finite else math.nan,
        "hi": float(np.percentile(reps_arr, 95)) if finite else math.nan,
        "prompts": len(groups),
        "draws": BOOTSTRAP_DRAWS,
    }


def entropy_extras(
    entropy_rows: list, advantage_rows: list, half_rows: tuple[list, list], prompt_of: list[int],
    seed: int,
) -> dict:  # fmt: skip
    """What criterion 3 reads beyond ``entropy_hypothesis``'s first version, from per-completion
    token arrays (so a result file's own arrays give it): the pooled correlation of ``H_old``
    with ``A*²`` and with the half-product ``A*₁·A*₂`` (the two independent halves of the
    ``K`` rollouts: ``E[A*₁·A*₂] = A_true²``, so the oracle's noise, whose size varies with
    ``V`` and so with the entropy, cannot inflate it), and the ``ΣA*²`` share by prompt."""
    h = np.concatenate([np.asarray(r, dtype=float) for r in entropy_rows])
    a = np.concatenate([np.asarray(r, dtype=float) for r in advantage_rows])
    prod_rows = [np.asarray(x, dtype=float) * np.asarray(y, dtype=float)
                 for x, y in zip(*half_rows)]  # fmt: skip
    prod = np.concatenate(prod_rows)
    return {
        "pooled_pearson_sq": pearson(h, a * a),
        "pooled_pearson_half_product": pearson(h, prod),
        "share_sq_by_prompt": share_by_prompt(entropy_rows, prod_rows, prompt_of, seed),
    }


def entropy_hypothesis(
    entropy: np.ndarray, values: TokenValues, mask: np.ndarray, seed: int,
    prompt_of: list[int] | None = None,
) -> dict:  # fmt: skip
    """Criterion 3: does the rollout entropy mark the pivotal tokens? The correlations of
    ``H_old`` with ``|A*|`` (pooled, and within completions), and the share of ``Σ|A*|`` and of
    the noise-free ``ΣA*²`` (the product of the two half-estimates, whose expectation is the
    squared true advantage) carried by the top 20 % of tokens by entropy, each against its own
    null (the same share of random 20 % subsets) and against the top 20 % by ``|A*|`` itself.
    ``prompt_of``: the prompt of each row, for :func:`entropy_extras` (the ``ΣA*²`` share's
    interval by prompt, the noise-free correlation); None leaves them out."""
    h = entropy[mask]
    a = np.abs(values.true_advantage.numpy()[mask])
    halves = values.half_advantages.numpy()
    sq = (halves[0] * halves[1])[mask]
    n_top = max(1, int(round(TOP_FRACTION * h.size)))
    rng = np.random.default_rng(seed)
    total = a.sum() if a.sum() > 0 else math.nan
    subsets = [rng.choice(h.size, n_top, replace=False) for _ in range(1000)]
    random_share = np.array([a[idx].sum() / total for idx in subsets])
    top_share_abs = top_share(h, a)
    sq_total = sq.sum() if sq.sum() > 0 else math.nan
    random_sq = np.array([sq[idx].sum() / sq_total for idx in subsets])
    top_sq = top_share(h, sq)
    lengths = mask.sum(1)
    within = within_completion(
        np.where(mask, entropy, 0.0), np.abs(values.true_advantage.numpy()), lengths,
        [i for i in range(mask.shape[0]) if lengths[i] > 1],
    )  # fmt: skip
    return {
        "pooled_pearson": pearson(h, a),
        "pooled_spearman": spearman(h, a),
        "within": {k: within[k] for k in ("pearson", "spearman", "completions", "constant")},
        "top20_share_abs": top_share_abs,
        "top20_share_sq": top_sq,
        # Each share has its own null: ΣA*² is far more concentrated than Σ|A*| (a few
        # tokens carry most of it), so its random-20 % share spreads far wider.
        "random20_share_sq": {
            "mean": float(random_sq.mean()),
            "sd": float(random_sq.std(ddof=1)),
            "p_at_least": float((random_sq >= top_sq).mean()),
        },
        # The null: the share of random 20 % subsets (its mean is 0.2 in expectation), their
        # spread, and how often one reaches the entropy subset's share.
        "random20_share_abs": {
            "mean": float(random_share.mean()),
            "sd": float(random_share.std(ddof=1)),
            "p_at_least": float((random_share >= top_share_abs).mean()),
            "draws": int(random_share.size),
        },
        "oracle_top20_share_abs": float(np.sort(a)[::-1][:n_top].sum() / a.sum())
        if a.sum() > 0
        else math.nan,
        "tokens": int(h.size),
    } | (_extras_of(entropy, values, mask, prompt_of, seed) if prompt_of is not None else {})


def _extras_of(entropy, values: TokenValues, mask, prompt_of, seed) -> dict:
    """:func:`entropy_extras` of a batch's ``[B, T]`` tensors."""
    rows = range(mask.shape[0])
    cut = lambda x: [x[i][mask[i]] for i in rows]  # noqa: E731
    halves = values.half_advantages.numpy()
    return entropy_extras(cut(entropy), cut(values.true_advantage.numpy()),
                          (cut(halves[0]), cut(halves[1])), prompt_of, seed)  # fmt: skip


def oracle_noise(values: TokenValues) -> dict:
    """The oracle's own reliability: the correlation of ``A*`` estimated from the first and
    from the second half of the rollouts over the tokens that are not the last one (whose
    ``V`` after is the outcome, known exactly), Spearman–Brown stepped up to all ``K``; its
    square root bounds the correlation any signal can reach with the estimated ``A*``."""
    mask = values.mask.numpy().copy()
    lengths = mask.sum(1)
    for i, L in enumerate(lengths):
        if L:
            mask[i, L - 1] = False
    h = values.half_advantages.numpy()
    r_half = pearson(h[0][mask], h[1][mask]) if mask.sum() > 2 else math.nan
    r_full = 2 * r_half / (1 + r_half) if math.isfinite(r_half) and r_half > -1 else math.nan
    a = values.true_advantage.numpy()[values.mask.numpy()]
    se2 = (values.se_before**2 + values.se_after**2).numpy()[values.mask.numpy()]
    return {
        "split_half_r": r_half,
        "reliability": r_full,
        "ceiling": math.sqrt(r_full) if math.isfinite(r_full) and r_full > 0 else math.nan,
        "var_true_advantage": float(a.var()),
        "mean_noise_var": float(se2.mean()),
    }


# ---------------------------------------------------------------------------------------------
# The command.
# ---------------------------------------------------------------------------------------------


def pivot_tokens(truth: np.ndarray, lengths: np.ndarray, failed: list[int]) -> dict[int, int]:
    """Per failed completion, the token whose ``A*`` is most negative (the first of ties)."""
    return {i: int(np.argmin(truth[i, : int(lengths[i])])) for i in failed if lengths[i] > 0}


def first_wrong_values(values: TokenValues, first_wrong: dict[int, int]) -> dict | None:
    """What the oracle says happens at the first token off the reference scratchpad of each
    failed completion (``first_wrong``, chain only): ``V̂`` before and after that token and
    their change (its ``A*``), how many completions have a later prefix whose ``V̂`` is at
    least 1/2 (success still likely after the first wrong token: the estimate, not the
    outcome, which is 0), and how many have their pivot (the most negative ``A*``) after it."""
    before = values.value_before.numpy()
    after = values.value_after.numpy()
    truth = values.true_advantage.numpy()
    lengths = values.mask.numpy().sum(1)
    rows = [(i, t) for i, t in sorted(first_wrong.items())
            if not bool(values.success[i]) and t < int(lengths[i])]  # fmt: skip
    if not rows:
        return None
    later = [bool((after[i, t : int(lengths[i]) - 1] >= 0.5).any()) for i, t in rows]
    return {
        "before": mean_se([float(before[i, t]) for i, t in rows]),
        "after": mean_se([float(after[i, t]) for i, t in rows]),
        "change": mean_se([float(truth[i, t]) for i, t in rows]),
        "recovers": int(sum(later)),
        "pivot_later": int(sum(int(np.argmin(truth[i, : int(lengths[i])])) > t for i, t in rows)),
        "pivot_at": int(sum(int(np.argmin(truth[i, : int(lengths[i])])) == t for i, t in rows)),
        "completions": len(rows),
    }


def score_signals(signals: dict, values: TokenValues, first_wrong: dict[int, int]) -> dict:
    """Criteria 1 and 2 for every algorithm's two signals against one oracle estimate."""
    truth = values.true_advantage.numpy()
    mask = values.mask.numpy()
    lengths = mask.sum(1)
    success = values.success.numpy()
    out: dict[str, Any] = {}
    for name, sig in signals.items():
        trained = [i for i in range(len(lengths)) if bool(sig["trained"][i]) and lengths[i] > 0]
        failed = [i for i in trained if not success[i]]
        pivots = pivot_tokens(truth, lengths, failed)
        wrong = {i: t for i, t in first_wrong.items() if i in set(failed)}
        out[name] = {"trained_completions": len(trained), "failed_completions": len(failed)}
        won = [i for i in trained if success[i]]
        for kind in ("advantages", "credit"):
            s = sig[kind].numpy()
            out[name][kind] = {
                "within": within_completion(s, truth, lengths, trained),
                # The same, split by outcome: credit on successes and blame on failures can
                # agree with A* in one and disagree in the other (GTPO weights them apart).
                "within_success": within_completion(s, truth, lengths, won),
                "within_failure": within_completion(s, truth, lengths, failed),
                "pooled": pooled(s, truth, mask, trained) if trained else None,
                "blame_pivot": blame_shares(s, pivots, lengths),
                "blame_first_wrong": blame_shares(s, wrong, lengths) if wrong else None,
            }
    # The oracle against itself: the blame A* puts on its own pivot (the best a signal can do).
    failed_all = [i for i in range(len(lengths)) if not success[i] and lengths[i] > 0]
    out["_oracle"] = {
        "blame_pivot": blame_shares(truth, pivot_tokens(truth, lengths, failed_all), lengths),
        "blame_first_wrong": blame_shares(
            truth, {i: t for i, t in first_wrong.items() if i in set(failed_all)}, lengths
        )
        if first_wrong
        else None,
        "first_wrong_value": first_wrong_values(values, first_wrong) if first_wrong else None,
    }
    return out


def _per_token(x: torch.Tensor | np.ndarray, lengths: np.ndarray) -> list:
    """Per completion, its response tokens' values, exactly (Python's shortest repr of each
    float64): every metric recomputes from the file. (Files written before issue 46 rounded
    them to 5-8 decimals, which turned STEER's near-saturated credit into ties.)"""
    arr = x.numpy() if isinstance(x, torch.Tensor) else x
    return [[float(v) for v in arr[i, : int(L)]] for i, L in enumerate(lengths)]


def oracle_record(values: TokenValues, lengths: np.ndarray, peak_share: float | None = None):
    """What the JSON keeps of one oracle estimate: per completion its tokens' values, their
    s.e. (``value_se`` is the value after the token's), the true advantages; the cost."""
    rate = values.sampled_tokens / max(values.seconds, 1e-9)
    return {
        "value_before": _per_token(values.value_before, lengths),
        "value_after": _per_token(values.value_after, lengths),
        "value_se_before": _per_token(values.se_before, lengths),
        "value_se": _per_token(values.se_after, lengths),
        "true_advantage": _per_token(values.true_advantage, lengths),
        "half_advantages": [_per_token(h, lengths) for h in values.half_advantages],
        "prefixes": values.prefixes,
        "sampled_tokens": values.sampled_tokens,
        "seconds": round(values.seconds, 2),
        "tokens_per_s": round(rate, 1),
        "peak_share": peak_share,
    }


def metrics_record(
    signals: dict, values: TokenValues, entropy: Tensor, first_wrong: dict, seed,
    prompt_of: list[int] | None = None,
):  # fmt: skip
    """Criteria 1-3 and the oracle's noise, for one oracle estimate (``prompt_of``: the prompt
    of each row, for the by-prompt interval of the entropy shares)."""
    return {
        "signals": score_signals(signals, values, first_wrong),
        "entropy": entropy_hypothesis(
            entropy.double().numpy(), values, values.mask.numpy(), seed, prompt_of
        ),
        "noise": oracle_noise(values),
    }


def signals_record(signals: dict, lengths: np.ndarray) -> dict:
    """Every algorithm's per-token advantages and effective credit, and which rows it trains."""
    return {
        name: {
            "advantages": _per_token(sig["advantages"], lengths),
            "credit": _per_token(sig["credit"], lengths),
            "trained": [bool(x) for x in sig["trained"]],
        }
        for name, sig in signals.items()
    }


def completion_record(prompt: str, text: str, tokens: list, entropy, outcome: float, **extra):
    """One completion: its prompt, text, token ids, rollout entropies and outcome."""
    return {
        "prompt": prompt,
        "text": text,
        "token": tokens,
        "entropy_old": [float(h) for h in entropy[: len(tokens)]],
        "reward": float(outcome),
        "success": bool(outcome >= 0.5),
        **extra,
    }


def stored_values(result: dict, k: str) -> TokenValues:
    """The oracle's estimate at ``K = k`` as a result file stores it (``oracle_record``)."""
    comps, o = result["completions"], result["oracle"][k]
    B, T = len(comps), max(len(c["token"]) for c in comps)
    grid = functools.partial(_grid, B, T)
    return TokenValues(
        value_before=grid(o["value_before"]), value_after=grid(o["value_after"]),
        se_before=grid(o["value_se_before"]), se_after=grid(o["value_se"]),
        true_advantage=grid(o["true_advantage"]),
        success=torch.tensor([c["success"] for c in comps]),
        mask=grid([[1.0] * len(c["token"]) for c in comps]).bool(),
        half_advantages=torch.stack([grid(h) for h in o["half_advantages"]]),
        rollouts=int(k), prefixes=o["prefixes"], sampled_tokens=o["sampled_tokens"],
        seconds=o["seconds"],
    )  # fmt: skip


def _grid(B: int, T: int, rows) -> torch.Tensor:
    """Per-completion lists laid out as a ``[B, T]`` float64 tensor, 0 on padding."""
    out = torch.zeros(B, T, dtype=torch.float64)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float64)
    return out


def stored_first_wrong(result: dict) -> dict[int, int]:
    """The first wrong token of each completion a result file records one for (chain)."""
    comps = result["completions"]
    return {i: c["first_wrong"] for i, c in enumerate(comps) if c.get("first_wrong") is not None}


def rescore(result: dict, k: str) -> dict:
    """Criteria 1-3 and the oracle's noise recomputed from what a result file stores: the
    metrics of ``metrics_record``, for analyses added after a file was written (exactly the
    stored ones for a file that keeps full precision; a file written before issue 46 rounded
    its values, which moves the Spearman ρ of signals with near-ties, e.g. STEER's credit).
    The signals' ``trained`` rows, the completions' entropies and outcomes and the oracle's
    values and half-estimates are all it needs."""
    comps = result["completions"]
    B, T = len(comps), max(len(c["token"]) for c in comps)
    grid = functools.partial(_grid, B, T)
    signals = {
        name: {"advantages": grid(s["advantages"]), "credit": grid(s["credit"]),
               "trained": torch.tensor(s["trained"])}
        for name, s in result["signals"].items()
    }  # fmt: skip
    entropy = grid([c["entropy_old"] for c in comps])
    return metrics_record(signals, stored_values(result, k), entropy, stored_first_wrong(result),
                          result["settings"]["seed"], prompt_indices(result))  # fmt: skip


def prompt_indices(result: dict) -> list[int]:
    """The prompt of each completion of a result file, as an index (first seen, first)."""
    seen: dict[str, int] = {}
    return [seen.setdefault(c["prompt"], len(seen)) for c in result["completions"]]


def _first_wrong_tokens(task, problems, responses, outcome, G: int) -> dict[int, int]:
    """The first token off the reference scratchpad of every failed completion (chain)."""
    out = {}
    for i, tokens in enumerate(responses):
        t = first_wrong_token(task, problems[i // G], tokens)
        if t is not None and float(outcome[i]) < 0.5:
            out[i] = t
    return out


def _settings(cfg: CreditConfig, plan, G: int) -> dict:
    flags = {k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()}
    flags.pop("train")
    return {
        **flags,
        "task": plan.cfg.task,
        "task_args": list(plan.cfg.task_args),
        "temperature": plan.cfg.temperature,
        "max_new_tokens": plan.max_new_tokens,
        "group_size": G,
        "train_config": json.loads(json.dumps(dataclasses.asdict(plan.cfg), default=str)),
    }


def algorithm_configs(cfg: CreditConfig, plan) -> dict[str, Any]:
    """Each scored algorithm's ``Config``: the policy's own algorithm (``--train.algo``, or
    the run's) gets the settings's (``--train.algo-args``, or the run's ``algo_config``),
    every other one its defaults (None). ``--train.algo-args`` for an algorithm ``--algos``
    does not score would be recorded and not used: refused."""
    names = cfg.algo_list()
    own = plan.cfg.algo
    if plan.cfg.algo_args and own not in names and cfg.run is None:
        raise ValueError(
            f"--train.algo-args: sets the Config of {own} ({' '.join(plan.cfg.algo_args)}), which --algos "
            f"({cfg.algos}) does not score: add {own} to --algos, or name the algorithm the "
            "settings are for with --train.algo"
        )
    return {name: plan.algo_cfg if name == own else None for name in names}


def _requested_values(policy, problems, samples, outcome, algo_cfg, seed: int):
    """``V̂`` of the policy at the prefixes ``algo_cfg.values_needed()`` asks for (VinePPO's
    K at its step starts), as its training loop would get them; None when it asks none."""
    request = algo_cfg.values_needed()
    if request is None:
        return None
    train = policy.plan.cfg
    return training_values(
        policy.model, policy.plan.task, problems, samples, outcome, request,
        max_new_tokens=policy.plan.max_new_tokens, temperature=train.temperature,
        top_k=train.top_k, top_p=train.top_p, success_threshold=algo_cfg.success_threshold,
        seed=seed, step=0,
    ).value_before  # fmt: skip


def run_credit(cfg: CreditConfig, log=print, typed: frozenset[str] | None = None) -> dict[str, Any]:
    """The benchmark on one batch: the oracle at each K, every algorithm's signals, the
    metrics; returns what ``main`` writes. ``typed``: the fields the command line set
    (``presets.explicit_fields``), which ``--preset`` leaves alone."""
    from refimpl.bench import machine_info
    from refimpl.bench.speed import decode_flops_per_token, matmul_peak
    from refimpl.runs import numerics
    from refimpl.settings.memory import refuse_over_budget

    cfg.check(typed)
    planned = plan_policy(cfg, typed)
    plan = planned[0]
    G = cfg.group_size or plan.cfg.group_size
    refuse_over_budget(oracle_memory(cfg, plan, G), plan.cfg.device)
    algo_cfgs = algorithm_configs(cfg, plan)
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    policy, train = load_policy(cfg, typed, planned), plan.cfg
    problems, samples, outcome = sample_batch(policy, cfg.prompts, G, cfg.seed)
    lengths = samples.response_mask.sum(1).long().numpy()
    if policy.model is policy.reference:
        # The warm start is its own reference: the KL terms push nothing. (Recomputing the
        # log-probs would differ from logp_old in float32's last bits, and the KL gradient of
        # that rounding, ~1e-9, would pose as within-completion credit.)
        logp_ref = samples.logp_old.clone()
    else:
        with torch.no_grad():
            logp_ref = samples.policy_logprobs(
                policy.reference, temperature=train.temperature, with_entropy=False
            )[0]
    signals = {
        name: algorithm_signals(
            name, samples, outcome, plan.max_new_tokens, logp_ref, algo_cfgs[name],
            _requested_values(policy, problems, samples, outcome,
                              algo_cfgs[name] or algorithms.get(name).Config(), cfg.seed),
        )
        for name in cfg.algo_list()
    }  # fmt: skip
    responses = samples.responses()
    first_wrong = _first_wrong_tokens(plan.task, problems, responses, outcome, G)
    # FLOPs of one decoded token, matmuls only (as refimpl bench-speed counts them).
    size = plan.warmstart.model
    flops_per_token = decode_flops_per_token(size.n_layer, size.n_embd, TOKENIZER.vocab_size)
    peak = matmul_peak(3)
    oracle, metrics = {}, {}
    for k in cfg.rollout_list():
        values = token_values(
            policy.model, plan.task, problems, samples, outcome, rollouts=k,
            max_new_tokens=plan.max_new_tokens, temperature=train.temperature,
            top_k=train.top_k, top_p=train.top_p, seed=cfg.seed, max_rows=cfg.max_rows,
            progress=functools.partial(progress_bar, unit="prefix"),
        )  # fmt: skip
        share = values.sampled_tokens / max(values.seconds, 1e-9) * flops_per_token / peak
        oracle[str(k)] = oracle_record(values, lengths, share)
        log(f"oracle K={k}: {values.prefixes} prefixes, {values.sampled_tokens} tokens in "
            f"{values.seconds:.1f} s ({oracle[str(k)]['tokens_per_s']:,.0f} tokens/s, "
            f"{share:.1%} of the matmul peak)")  # fmt: skip
        prompt_of = [i // G for i in range(len(lengths))]
        metrics[str(k)] = metrics_record(
            signals, values, samples.entropy_old, first_wrong, cfg.seed, prompt_of
        )
    return {
        "settings": {**_settings(cfg, plan, G), "algo_configs": {
            name: json.loads(json.dumps(dataclasses.asdict(c or algorithms.get(name).Config()),
                                        default=str))
            for name, c in algo_cfgs.items()}},
        "policy": {"source": policy.source, "step": policy.step},
        "machine": {**machine_info(), "numerics": numerics.describe(),
                    "matmul_peak_flops_per_s": peak, "flops_per_token": flops_per_token},
        "completions": [
            completion_record(problems[i // G].prompt, TOKENIZER.decode(tokens), tokens,
                              samples.entropy_old[i], float(outcome[i]),
                              first_wrong=first_wrong.get(i),
                              truncated=bool(samples.truncated[i]))
            for i, tokens in enumerate(responses)
        ],
        "oracle": oracle,
        "signals": signals_record(signals, lengths),
        "metrics": metrics,
    }  # fmt: skip


def main(cfg: CreditConfig, typed: frozenset[str] | None = None) -> Path:
    """``refimpl credit``: run the benchmark on one batch and write ``--out`` (atomically,
    never through a link: ``refimpl.runs.runlog.write_text_atomic``). ``typed``: the fields
    the command line set, which ``--preset`` leaves alone."""
    from refimpl.runs.runlog import check_output_file, write_text_atomic

    start = time.perf_counter()
    result = run_credit(cfg, typed=typed)
    result["wall_s"] = round(time.perf_counter() - start, 1)
    check_output_file(cfg.out, "--out", cfg.overwrite)  # again: the oracle ran for a while
    cfg.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(cfg.out, json.dumps(result, allow_nan=True) + "\n")
    print(f"credit: wrote {cfg.out} ({result['wall_s']:.0f} s)")
    return cfg.out
