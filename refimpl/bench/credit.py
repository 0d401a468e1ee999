"""``refimpl credit``: every algorithm's token credit, scored against the true advantages.

One batch of ``N`` prompts × ``G`` completions is sampled from a policy (a warm start, or a run's
last checkpoint). The credit oracle (``refimpl.sampling.monte_carlo_values``) estimates the true
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

This module holds the command: its settings and the run that writes the JSON. The policy,
the batch and the signals are in ``credit_batch``, the criteria in ``credit_metrics``, the
file's records in ``credit_records``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from refimpl import algorithms
from refimpl.bench.credit_batch import Policy, algorithm_signals, sample_batch
from refimpl.bench.credit_metrics import first_wrong_token
from refimpl.bench.credit_records import (
    completion_record,
    metrics_record,
    oracle_record,
    signals_record,
)
from refimpl.bench.result_header import base_models_of, command_line, make_header
from refimpl.runs.progress import progress as progress_bar
from refimpl.sampling.monte_carlo_values import token_values, training_values
from refimpl.settings.presets import PresetName
from refimpl.settings.train_config import TrainConfig
from toy_envs import TOKENIZER


@dataclass
class CreditConfig:
    """Score every algorithm's token credit against the oracle's true advantages on one batch."""

    run: Path | None = None
    """a run directory: score the policy of its last checkpoint, sampled with the run's own
    settings (task, temperature, budget, model); None: the warm start of --train's settings"""
    preset: PresetName = "default"
    """a named regime: default, onpolicy, collapse, longchain (its training settings: task, knobs, warm
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
        from refimpl.settings.limits import comma_items

        try:
            ks = [int(s) for s in comma_items(self.rollouts, "--rollouts")]  # no empty item
        except ValueError as err:
            if "empty item" in str(err):
                raise
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
# The command.
# ---------------------------------------------------------------------------------------------


def _first_wrong_tokens(task, problems, responses, outcome, G: int, threshold: float):
    """The first token off the reference scratchpad of every failed completion (chain; failed:
    its outcome below ``threshold``, the scored policy's Config's success threshold)."""
    out: dict[int, int] = {}
    for i, tokens in enumerate(responses):
        t = first_wrong_token(task, problems[i // G], tokens)
        if t is not None and float(outcome[i]) < threshold:
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


def _reference_logprobs(policy, samples, temperature: float) -> torch.Tensor:
    """``log π_ref`` of the batch's tokens, for the KL terms."""
    if policy.model is policy.reference:
        # The warm start is its own reference: the KL terms push nothing. (Recomputing the
        # log-probs would differ from logp_old in float32's last bits, and the KL gradient of
        # that rounding, ~1e-9, would pose as within-completion credit.)
        return samples.logp_old.clone()
    with torch.no_grad():
        return samples.policy_logprobs(
            policy.reference, temperature=temperature, with_entropy=False
        )[0]


def _oracle_runs(cfg: CreditConfig, policy, problems, samples, outcome, signals, first_wrong,
                 threshold: float, log) -> tuple[dict, dict, dict]:  # fmt: skip
    """``(oracle, metrics, cost)``: per K of ``--rollouts`` the oracle's record and the
    metrics against it, and the FLOPs of a decoded token and the matmul peak its throughput
    is set against."""
    from refimpl.bench.speed_timing import decode_flops_per_token, matmul_peak

    plan, train = policy.plan, policy.plan.cfg
    lengths = samples.response_mask.sum(1).long().numpy()
    # FLOPs of one decoded token, matmuls only (as refimpl bench-speed counts them).
    size = plan.warmstart.model
    flops_per_token = decode_flops_per_token(size.n_layer, size.n_embd, TOKENIZER.vocab_size)
    peak = matmul_peak(3)
    oracle, metrics = {}, {}
    for k in cfg.rollout_list():
        values = token_values(
            policy.model, plan.task, problems, samples, outcome, rollouts=k,
            max_new_tokens=plan.max_new_tokens, temperature=train.temperature,
            top_k=train.top_k, top_p=train.top_p, success_threshold=threshold, seed=cfg.seed,
            max_rows=cfg.max_rows, progress=functools.partial(progress_bar, unit="prefix"),
        )  # fmt: skip
        share = values.sampled_tokens / max(values.seconds, 1e-9) * flops_per_token / peak
        oracle[str(k)] = oracle_record(values, lengths, share)
        log(f"oracle K={k}: {values.prefixes} prefixes, {values.sampled_tokens} tokens in "
            f"{values.seconds:.1f} s ({oracle[str(k)]['tokens_per_s']:,.0f} tokens/s, "
            f"{share:.1%} of the matmul peak)")  # fmt: skip
        prompt_of = [i // samples.group_size for i in range(len(lengths))]
        metrics[str(k)] = metrics_record(
            signals, values, samples.entropy_old, first_wrong, cfg.seed, prompt_of
        )
    return oracle, metrics, {"matmul_peak_flops_per_s": peak, "flops_per_token": flops_per_token}


# The policy scored: its settings, checked, and its weights.

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
    from refimpl.settings import presets
    from refimpl.train import load_config_file

    if cfg.run is not None:
        run = Path(cfg.run)
        train = load_config_file(run / "config.json", "--run", algo_config=True)
        # config.json keeps --runs-dir as typed (relative to where the run was trained): the
        # run is where it was found now, and so is the warm-start cache beside it.
        return dataclasses.replace(train, progress=False, runs_dir=run.parent, name=run.name)
    explicit = None
    if typed is not None:
        explicit = frozenset(n.removeprefix("train.") for n in typed if n.startswith("train."))
    return presets.fill_defaults(cfg.train, presets.get_preset(cfg.preset).train, explicit)


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
    model = plan.warmstart.model
    per_row = T * decode_bytes(model.n_layer, model.n_embd)
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


def run_credit(cfg: CreditConfig, log=print, typed: frozenset[str] | None = None) -> dict[str, Any]:
    """The benchmark on one batch: the oracle at each K, every algorithm's signals, the
    metrics; returns what ``main`` writes. ``typed``: the fields the command line set
    (``presets.explicit_fields``), which ``--preset`` leaves alone."""
    from refimpl.bench import machine_info
    from refimpl.runs import cpu_kernels
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
    logp_ref = _reference_logprobs(policy, samples, train.temperature)
    signals = {
        name: algorithm_signals(
            name, samples, outcome, plan.max_new_tokens, logp_ref, algo_cfgs[name],
            _requested_values(policy, problems, samples, outcome,
                              algo_cfgs[name] or algorithms.get(name).Config(), cfg.seed),
        )
        for name in cfg.algo_list()
    }  # fmt: skip
    # A completion succeeds as the scored policy's own algorithm counts it (its Config's).
    threshold = plan.algo_cfg.success_threshold
    responses = samples.responses()
    first_wrong = _first_wrong_tokens(plan.task, problems, responses, outcome, G, threshold)
    oracle, metrics, cost = _oracle_runs(
        cfg, policy, problems, samples, outcome, signals, first_wrong, threshold, log
    )
    base = getattr(policy.reference, "base_record", None)  # the warm start the policy began from
    return {
        "header": make_header(
            "credit", command=command_line(), seeds=[cfg.seed],
            base_models=base_models_of([base]) if base else "unrecorded", evaluation_grid="none",
        ),  # fmt: skip
        "settings": {**_settings(cfg, plan, G), "algo_configs": {
            name: json.loads(json.dumps(dataclasses.asdict(c or algorithms.get(name).Config()),
                                        default=str))
            for name, c in algo_cfgs.items()}},
        "policy": {"source": policy.source, "step": policy.step},
        "machine": {**machine_info(), "numerics": cpu_kernels.describe(), **cost},
        "completions": [
            completion_record(problems[i // G].prompt, TOKENIZER.decode(tokens), tokens,
                              samples.entropy_old[i], float(outcome[i]),
                              success_threshold=threshold, first_wrong=first_wrong.get(i),
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
