"""``refimpl bench-learning``: does token-level credit assignment help, at toy scale?

Every algorithm × seeds × tasks, plus ablations (GTPO ``alpha_2`` ∈ {0, 0.1, 0.3} and
``stats=subgroup``; TEPO without its KL mask), each run starting from the task's one warm
start and stopped when it has **sampled the same number of completion tokens**: dynamic
sampling (DAPO, GTPO, GRPO-S) draws more tokens per step, so a step budget would favour it.

The budget of a task is ``budget_steps × N × G × ℓ``, with ``ℓ`` the mean length (``<eos>``
included) of the reference solutions of its held-out problems: about ``budget_steps`` steps of
an algorithm that samples one batch per step.

Per run, from its ``metrics.jsonl`` (held-out greedy success on 200 fixed problems every
``eval_every`` steps, standard error ≈ ±0.03):

* **tokens / steps to target**: the first evaluation at which the trailing mean of three
  consecutive evaluations reaches ``target = base + target_gain`` (``base``: the warm start's
  held-out success, the same for every run of a task); "not reached" when it never does;
* **final success**: the evaluation at the end of the token budget, where every run stops
  and evaluates. One definition for every algorithm: dynamic sampling spends the budget in
  fewer steps (and evaluations), so "the last three evaluations" would average different
  parts of different runs;
* **AUC**: held-out success integrated over sampled tokens, divided by the budget (the mean
  success over training; the base rate for a run that never moves);
* **entropy start / end**: mean token entropy of the sampled completions at the first step
  (the warm start's policy, before any update) / over the last 10 % of steps; **collapsed**
  when ``end < collapse_ratio × start``. (The first step's batch holds thousands of tokens, so
  its mean is precise; a mean over the first few steps would already include the fast early
  fall of the first updates.)

Per algorithm: medians and interquartile ranges over seeds (a "not reached" seed counts as
+∞, so a median is "not reached" when half the seeds or more never got there).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import time
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from refimpl import algorithms
from refimpl.bench import format_machine, machine_info, markdown_table
from refimpl.diagnostics.entropy_attribution import (
    ENTROPY_TERM,
    MOMENTUM,
    TOKEN_CLASSES,
    attribution_table,
    prediction_table,
)
from refimpl.runs.runlog import check_output_file, read_metrics, write_text_atomic
from refimpl.settings.presets import PresetName

ABLATION_COLORS = ("#9467bd", "#e377c2", "#000000", "#ff9896", "#8c564b", "#c49c94")


def parse_variant(label: str) -> tuple[str, tuple[str, ...], dict[str, Any]]:
    """``"tepo kl_mask=False minibatches=1"`` → ``("tepo", ("kl_mask=False",),
    {"minibatches": 1})``: the algorithm, its Config overrides (``--algo-args``) and the
    ``TrainConfig`` overrides (any FIELD=VALUE whose field belongs to TrainConfig)."""
    from refimpl.settings.overrides import parse_overrides
    from refimpl.settings.train import TrainConfig

    algo, *pairs = label.split()
    algorithms.get(algo)  # ValueError listing the names
    train_fields = typing.get_type_hints(TrainConfig)
    algo_args = tuple(p for p in pairs if p.split("=", 1)[0] not in train_fields)
    train_pairs = tuple(p for p in pairs if p.split("=", 1)[0] in train_fields)
    train_args = parse_overrides(train_pairs, train_fields, f"--ablations ({label!r})")
    return algo, algo_args, train_args


@dataclass
class LearningConfig:
    """Learning benchmark: every algorithm × seeds × tasks at the same sampled-token budget."""

    preset: PresetName = "default"
    """a named regime from refimpl.settings.presets (default, onpolicy, collapse): it sets the training
    settings and the benchmark's tasks, algorithms, seeds, ablations and budget that you leave
    at their defaults"""
    tasks: str = "countdown"
    """comma-separated tasks (default knobs): countdown, the demo's task, by default"""
    algos: str = ",".join(algorithms.NAMES)
    """comma-separated algorithms"""
    seeds: str = "0,1,2"
    """comma-separated RL seeds"""
    ablations: str = ""
    """comma-separated variants "ALGO FIELD=VALUE ...", each field an algorithm Config field or
    a TrainConfig field ("" for none; left out, the preset's: refimpl.settings.presets)"""
    ablation_tasks: str = "countdown"
    """tasks the ablations run on"""
    budget_steps: int = 150
    """sampled-token budget, in steps of one batch of reference-length completions"""
    lr: float | None = None
    """Adam learning rate (None: the preset's, i.e. TrainConfig's)"""
    prompts_per_step: int | None = None
    """N (None: the preset's)"""
    group_size: int | None = None
    """G (None: the preset's)"""
    eval_every: int = 25
    """steps between held-out evaluations"""
    eval_problems: int = 200
    """held-out problems per evaluation"""
    target_gain: float = 0.05
    """target held-out success = the warm start's + this"""
    collapse_ratio: float = 0.5
    """entropy collapsed when end entropy < this × start entropy"""
    workers: int = 0
    """parallel runs, one torch thread each (0: one per core, at most 4)"""
    quick: bool = False
    """a few-minute size: tiny model, 1 seed, a few steps (checks the report is produced)"""
    out: Path | None = None
    """runs go to <out>/<task>/<label>-s<seed>; report.md, results.json, figures/ next to them
    (None: runs/bench/learning-<preset>)"""
    runs_dir: Path = Path("runs")
    """where the warm-start cache lives"""
    overwrite: bool = False
    """retrain runs that already finished (default: reuse them, so a rerun only reports)"""
    report_only: bool = False
    """train nothing: report the runs under --out that have finished (an interrupted
    benchmark reports its finished runs; seeds then differ between variants)"""

    def __post_init__(self) -> None:
        if self.quick:
            self.seeds = "0"
            self.budget_steps = min(self.budget_steps, 3)
            self.prompts_per_step = 4
            self.group_size = 4
            self.eval_every = 1
            self.eval_problems = 20
        for name in ("budget_steps", "eval_every", "eval_problems"):
            if getattr(self, name) <= 0:
                raise ValueError(f"--{name.replace('_', '-')}: expected a positive integer")
        if self.workers < 0:
            raise ValueError(
                f"--workers: expected an integer ≥ 0 (0: one per core), got {self.workers}"
            )
        cores = os.cpu_count() or 1
        if self.workers > cores:  # as compare --workers
            raise ValueError(
                f"--workers: expected at most {cores} (the CPU cores of this machine: each "
                f"worker is a process training one run on one thread), got {self.workers}"
            )
        if not (math.isfinite(self.target_gain) and -1 < self.target_gain <= 1):
            raise ValueError(
                "--target-gain: expected a finite gain in (-1, 1] of held-out success (a "
                f"success rate is in [0, 1]), got {self.target_gain}"
            )
        if not (math.isfinite(self.collapse_ratio) and 0 < self.collapse_ratio <= 1):
            raise ValueError(
                "--collapse-ratio: expected a ratio in (0, 1] (collapsed: the end entropy "
                "below this × the start entropy; above 1 an entropy that rose would count), "
                f"got {self.collapse_ratio}"
            )
        if self.prompts_per_step is not None and self.prompts_per_step <= 0:
            raise ValueError("--prompts-per-step: expected a positive integer")
        if self.group_size is not None and self.group_size < 2:
            raise ValueError("--group-size: expected ≥ 2")

    def with_preset(self, explicit: frozenset[str] | None = None) -> LearningConfig:
        """This config with its preset's benchmark settings on the fields the command line did
        not set (``explicit``: ``presets.explicit_fields`` of the argv; None: the fields still
        at their default)."""
        from refimpl.settings import presets

        return presets.fill_defaults(self, presets.get(self.preset).bench, explicit)

    def train_defaults(self):
        """The TrainConfig every run starts from: the preset's regime plus --lr/-N/-G."""
        from refimpl.settings import presets
        from refimpl.settings.train import TrainConfig

        train = presets.fill_defaults(TrainConfig(), presets.get(self.preset).train)
        changes = {
            k: getattr(self, k)
            for k in ("lr", "prompts_per_step", "group_size")
            if getattr(self, k) is not None
        }
        n = changes.get("prompts_per_step", train.prompts_per_step)
        if n % train.minibatches:
            changes["minibatches"] = 1  # e.g. the quick size's 4 prompts: one minibatch
        if self.quick:
            changes["diag_every"] = 1  # a few steps: attribute every one
        return dataclasses.replace(train, **changes)

    def out_dir(self) -> Path:
        return self.out or Path("runs/bench") / f"learning-{self.preset}"

    def ablation_list(self) -> list[str]:
        return self._list(self.ablations, "ablations") if self.ablations.strip() else []

    def _list(self, text: str, flag: str) -> list[str]:
        items = [s.strip() for s in text.split(",") if s.strip()]
        if not items:
            raise ValueError(f"--{flag}: expected a comma-separated list")
        repeated = sorted({i for i in items if items.count(i) > 1})
        if repeated:  # two runs would share one run directory
            raise ValueError(f"--{flag}: {text!r} repeats {', '.join(repeated)}")
        return items

    def task_list(self) -> list[str]:
        from toy_envs import TASK_NAMES

        tasks = self._list(self.tasks, "tasks")
        for t in tasks:
            if t not in TASK_NAMES:
                raise ValueError(f"--tasks: expected names from {', '.join(TASK_NAMES)}, got {t!r}")
        return tasks

    def algo_list(self) -> list[str]:
        names = self._list(self.algos, "algos")
        for a in names:
            algorithms.get(a)
        return names

    def seed_list(self) -> list[int]:
        try:
            seeds = [int(s) for s in self.seeds.split(",") if s.strip()]
        except ValueError:
            raise ValueError(
                f"--seeds: expected comma-separated integers, got {self.seeds!r}"
            ) from None
        return [int(s) for s in self._list(",".join(map(str, seeds)), "seeds")]


@dataclass
class Run:
    task: str
    label: str
    algo: str
    algo_args: tuple[str, ...]
    seed: int
    train: Any = field(repr=False)


# ---------------------------------------------------------------------------------------------
# Planning and running.
# ---------------------------------------------------------------------------------------------


def _task_args(cfg: LearningConfig, task: str) -> tuple[str, ...]:
    """The task knobs of ``task``'s runs: the preset's ``--task-args`` when the preset is about
    that task (``longchain``: chain with 10 to 12 operators), else the task's defaults."""
    train = cfg.train_defaults()
    return tuple(train.task_args) if task == train.task else ()


def _warmstart(cfg: LearningConfig, task: str):
    from refimpl.settings.warmstart import ModelConfig, WarmstartConfig

    # The preset's warm start (its steps, its model) on the runs' task and knobs.
    preset_ws = dataclasses.asdict(cfg.train_defaults().warmstart)
    preset_ws.pop("runs_dir")
    preset_ws["model"] = ModelConfig(**preset_ws["model"])
    ws = WarmstartConfig(
        **{**preset_ws, "task": task, "task_args": _task_args(cfg, task)},
        runs_dir=cfg.runs_dir,
    )
    ws = dataclasses.replace(ws, progress=False)
    if cfg.quick:
        ws = dataclasses.replace(
            ws,
            steps=60,
            batch_size=32,
            eval_problems=20,
            model=ModelConfig(n_layer=1, n_embd=32, n_head=2),
        )
    return ws


def token_budget(cfg: LearningConfig, task_name: str) -> tuple[int, float]:
    """``(budget, ℓ)``: tokens per run, and the mean reference completion length ℓ."""
    from refimpl.settings.warmstart import parse_task_args
    from refimpl.streams import held_out_rng
    from toy_envs import TOKENIZER, get_task

    task = get_task(task_name, **dict(parse_task_args(task_name, _task_args(cfg, task_name))))
    train = cfg.train_defaults()
    problems = task.sample(cfg.eval_problems, held_out_rng())
    mean_len = float(
        np.mean([len(TOKENIZER.encode(task.reference_solution(p), add_eos=True)) for p in problems])
    )
    size = train.prompts_per_step * train.group_size
    return int(round(cfg.budget_steps * size * mean_len)), mean_len


def plan(cfg: LearningConfig) -> tuple[list[Run], dict[str, int]]:
    """Every run of the benchmark (not yet trained), and each task's token budget."""
    from refimpl.settings.plan import resolve

    tasks, algos, seeds = cfg.task_list(), cfg.algo_list(), cfg.seed_list()
    ablation_tasks = (
        set(cfg._list(cfg.ablation_tasks, "ablation-tasks")) if cfg.ablations else set()
    )
    ablations = [(label, *parse_variant(label)) for label in cfg.ablation_list()]
    base = cfg.train_defaults()
    budgets, runs = {}, []
    for task in tasks:
        budgets[task] = token_budget(cfg, task)[0]
        variants = [(a, a, (), {}) for a in algos]
        if task in ablation_tasks:
            variants += [v for v in ablations if v[1] in algos]
        for seed in seeds:
            for label, algo, algo_args, train_args in variants:
                name = label.replace(" ", "-").replace("=", "") + f"-s{seed}"
                train = dataclasses.replace(
                    base,
                    algo=algo,
                    task=task,
                    task_args=_task_args(cfg, task),
                    algo_args=algo_args,
                    seed=seed,
                    steps=20 * cfg.budget_steps,
                    max_sampled_tokens=budgets[task],
                    eval_every=cfg.eval_every,
                    eval_problems=cfg.eval_problems,
                    probe_every=cfg.eval_every,  # token-entropy snapshots for notebook 03
                    checkpoint_every=10_000,
                    runs_dir=cfg.out_dir() / task,
                    name=name,
                    overwrite=True,
                    threads=1,
                    progress=False,
                    plot=False,
                    warmstart=_warmstart(cfg, task),
                )
                train = dataclasses.replace(train, **train_args)
                resolve(train)  # fail fast on a bad flag, before any training
                runs.append(Run(task, label, algo, algo_args, seed, train))
    return runs, budgets


def finished(run: Run) -> bool:
    """The run reached its token budget (its last logged step did)."""
    records = read_metrics(run.train.run_dir, missing_ok=True)
    return (
        bool(records)
        and records[-1].get("sampled_tokens", 0) >= run.train.max_sampled_tokens
        and "heldout_greedy" in records[-1]
    )


def run_all(cfg: LearningConfig, runs: list[Run]) -> float:
    """Train the runs that have not finished (in parallel); return the wall time."""
    from refimpl.compare import run_in_workers
    from refimpl.runs.progress import progress
    from refimpl.warmstart import train_warmstart

    for task in cfg.task_list():
        train_warmstart(_warmstart(cfg, task))
    # Seed-major order: an interrupted benchmark leaves whole seeds of every task and variant.
    todo = sorted((r for r in runs if cfg.overwrite or not finished(r)), key=lambda r: r.seed)
    workers = cfg.workers or min(4, os.cpu_count() or 1)
    start = time.perf_counter()
    with progress(len(todo), "bench learning", unit="run") as bar:
        run_in_workers([r.train for r in todo], workers, lambda n: bar.update(n - bar.n))
    return time.perf_counter() - start


# ---------------------------------------------------------------------------------------------
# Metrics of one run, aggregates over seeds.
# ---------------------------------------------------------------------------------------------


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return read_metrics(run_dir)


def run_metrics(
    records: list[dict[str, Any]], budget: int, target: float, collapse_ratio: float
) -> dict[str, Any]:
    """The benchmark's figures of one run (see the module docstring)."""
    evals = [r for r in records if "heldout_greedy" in r]
    tokens = np.array([r.get("sampled_tokens", 0) for r in evals], dtype=float)
    success = np.array([r["heldout_greedy"] for r in evals], dtype=float)
    steps = np.array([r["step"] for r in evals], dtype=float)
    window = np.array([success[max(0, i - 2) : i + 1].mean() for i in range(success.size)])
    hit = np.flatnonzero(window >= target)
    # Area under success vs tokens, up to the budget, over the budget.
    x = np.clip(tokens, 0, budget)
    auc = float(np.trapezoid(success, x) / budget) if x[-1] > 0 else float(success[0])
    trained = [r for r in records if "entropy_mean" in r]
    ent = np.array([r["entropy_mean"] for r in trained], dtype=float)
    tail = max(5, len(ent) // 10)
    start_ent = float(ent[0]) if ent.size else math.nan  # the warm start's policy
    end_ent = float(ent[-tail:].mean()) if ent.size else math.nan

    def at_evals(key: str) -> np.ndarray:
        return np.array([r.get(key, math.nan) for r in evals], dtype=float)

    pass1, pass16 = at_evals("heldout_pass@1"), at_evals("heldout_pass@16")
    clip = [r.get("clip_frac_low", 0.0) + r.get("clip_frac_high", 0.0) for r in trained]
    mask = [r["kl_mask_frac"] for r in trained if "kl_mask_frac" in r]
    pairs = [
        (r["cov_logp_adv"], r["entropy_change"])
        for r in trained
        if "cov_logp_adv" in r and "entropy_change" in r
    ]
    cov = np.array(pairs, dtype=float).reshape(-1, 2)
    cov_r = (
        float(np.corrcoef(cov[:, 0], cov[:, 1])[0, 1])
        if len(cov) > 2 and cov[:, 0].std() > 0 and cov[:, 1].std() > 0
        else math.nan
    )
    # The end value: the evaluation at the end of the token budget (every run evaluates when
    # it stops), the same point of every run whatever its steps cost in tokens.
    return {
        "base": float(success[0]),
        "final": float(success[-1]),
        "gain": float(success[-1] - success[0]),
        "pass1_start": float(pass1[0]),
        "pass1_end": float(pass1[-1]),
        "pass16_start": float(pass16[0]),
        "pass16_end": float(pass16[-1]),
        "clip_frac": float(np.mean(clip)) if clip else math.nan,
        "mask_frac": float(np.mean(mask)) if mask else math.nan,
        "cov_mean": float(cov[:, 0].mean()) if len(cov) else math.nan,
        "cov_entropy_r": cov_r,
        "auc": auc,
        "tokens_to_target": float(tokens[hit[0]]) if hit.size else math.inf,
        "steps_to_target": float(steps[hit[0]]) if hit.size else math.inf,
        "steps": int(records[-1]["step"]),
        "sampled_tokens": int(records[-1].get("sampled_tokens", 0)),
        "entropy_start": start_ent,
        "entropy_end": end_ent,
        "entropy_ratio": end_ent / start_ent if start_ent > 0 else math.nan,
        "collapsed": bool(end_ent < collapse_ratio * start_ent),
        "kept_group_frac": float(np.mean([r.get("kept_group_frac", 1.0) for r in trained]))
        if trained
        else math.nan,
        "time_s": float(sum(r.get("time_step", 0.0) + r.get("time_eval", 0.0) for r in records)),
        "curve_tokens": tokens.tolist(),
        "curve_success": success.tolist(),
    }


def _quantiles(values: list[float]) -> tuple[float, float, float]:
    """Median and IQR, with +∞ ("not reached") ordered last."""
    if not values:
        return math.nan, math.nan, math.nan
    never = 1e30  # +∞ stand-in: interpolating between two +∞ would give NaN
    q = np.quantile(np.minimum(np.array(values, dtype=float), never), [0.25, 0.5, 0.75])
    q = [math.inf if v >= never / 2 else float(v) for v in q]
    return q[1], q[0], q[2]


def summarize_seeds(per_run: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {"seeds": len(per_run)}
    for key in ("tokens_to_target", "steps_to_target"):
        vals = [r[key] for r in per_run]
        med, lo, hi = _quantiles(vals)
        out[key] = {
            "median": med,
            "q25": lo,
            "q75": hi,
            "reached": sum(math.isfinite(v) for v in vals),
        }
    for key in (
        "final",
        "gain",
        "pass1_start",
        "pass1_end",
        "pass16_start",
        "pass16_end",
        "clip_frac",
        "mask_frac",
        "cov_mean",
        "cov_entropy_r",
        "auc",
        "entropy_start",
        "entropy_end",
        "entropy_ratio",
        "steps",
        "sampled_tokens",
        "kept_group_frac",
        "time_s",
    ):
        vals = np.array([r.get(key, math.nan) for r in per_run], dtype=float)
        out[key] = {
            "mean": float(vals.mean()),
            "std": float(vals.std(ddof=1)) if vals.size > 1 else 0.0,
            "median": float(np.median(vals)),
            "min": float(vals.min()),
        }
    out["collapsed"] = sum(r["collapsed"] for r in per_run)
    return out


def collect(cfg: LearningConfig, runs: list[Run], budgets: dict[str, int]) -> dict[str, Any]:
    """Per task: the base success, the target, per-run and per-label figures."""
    results: dict[str, Any] = {}
    for task in cfg.task_list():
        task_runs = [r for r in runs if r.task == task]
        if not task_runs:
            continue
        per_run = {}
        base = None
        for r in task_runs:
            records = _records(r.train.run_dir)
            base = records[0]["heldout_greedy"] if base is None else base
        target = round(base + cfg.target_gain, 4)
        for r in task_runs:
            m = run_metrics(_records(r.train.run_dir), budgets[task], target, cfg.collapse_ratio)
            per_run.setdefault(r.label, {})[r.seed] = m
        labels = list(dict.fromkeys(r.label for r in task_runs))
        by_label = {
            lab: [_records(r.train.run_dir) for r in task_runs if r.label == lab] for lab in labels
        }
        results[task] = {
            "budget_tokens": budgets[task],
            "base": base,
            "target": target,
            "runs": per_run,
            "summary": {lab: summarize_seeds(list(per_run[lab].values())) for lab in labels},
            "entropy": {  # why entropy moves: predicted and attributed (seeds pooled)
                "prediction": prediction_table(by_label),
                "attribution": attribution_table(by_label),
            },
        }
    return results


def _entropy_tables(res: dict[str, Any]) -> list[str]:
    """The report's tables of ``refimpl.diagnostics.entropy_attribution``: how the first-order prediction
    and the covariances track the measured entropy change, and the attribution by class."""
    pred, attr = res["entropy"]["prediction"], res["entropy"]["attribution"]

    def f(v: float, fmt: str = "+.2f") -> str:
        return "-" if not math.isfinite(v) else format(v, fmt)

    lines = [
        "Why entropy moves (docs/entropy_mechanism.md), seeds pooled: Pearson's r over steps "
        "with the measured `entropy_change`, raw / after each run's 11-step running mean "
        "(detr.) / of first differences (diff.); slope of measured on predicted; the path "
        "prediction on the attribution steps, next to the plain one on the same steps.",
        "",
        markdown_table(
            [
                "algorithm",
                "steps",
                "r(pred)",
                "slope",
                "r(pred) detr.",
                "attributed steps",
                "r(path) vs r(pred) there",
                "r(Cov) raw / detr. / diff.",
                "r(Cov update) raw / detr.",
                "r(Cov, pred) raw / detr.",
            ],
            [
                [
                    r["algo"],
                    r["steps"],
                    f(r["r_pred"]),
                    f(r["slope_pred"]),
                    f(r["r_pred_detr"]),
                    r["attr_steps"],
                    f"{f(r['r_path'])} vs {f(r['r_pred_attr'])}",
                    f"{f(r['r_cov'])} / {f(r['r_cov_detr'])} / {f(r['r_cov_diff'])}",
                    f"{f(r['r_covu'])} / {f(r['r_covu_detr'])}",
                    f"{f(r['r_cov_pred'])} / {f(r['r_cov_pred_detr'])}",
                ]
                for r in pred
            ],
        ),
        "",
    ]
    classes = [c for c in (*TOKEN_CLASSES, ENTROPY_TERM, MOMENTUM) if any(c in r for r in attr)]
    lines += [
        "Attribution of the predicted entropy change, mean per attributed step, 10⁻³ nats "
        "(A: the algorithm's advantage; high/low: π_old of the sampled token above / at or "
        "below the batch median; momentum: earlier steps' gradients in Adam's m).",
        "",
        markdown_table(
            ["algorithm", "attributed steps", *classes, "sum", "predicted", "measured", "max gap"],
            [
                [
                    r["algo"],
                    r["attr_steps"],
                    *(f(1e3 * r.get(c, math.nan), "+.3f") for c in classes),
                    f(1e3 * r["sum"], "+.3f"),
                    f(1e3 * r["entropy_change_pred"], "+.3f"),
                    f(1e3 * r["entropy_change"], "+.3f"),
                    f(r["max_gap"], ".1e"),
                ]
                for r in attr
            ],
        ),
        "",
    ]
    return lines


# ---------------------------------------------------------------------------------------------
# Figures and the report.
# ---------------------------------------------------------------------------------------------


def _curve_on_grid(run_dir: Path, key: str, grid: np.ndarray, window: int) -> np.ndarray:
    from refimpl.plots import smooth

    recs = [r for r in _records(run_dir) if key in r]
    if not recs:
        return np.full(grid.shape, np.nan)
    x = np.array([r.get("sampled_tokens", 0) for r in recs], dtype=float)
    y = smooth(np.array([r[key] for r in recs], dtype=float), window)
    if key == "heldout_greedy" and window > 1:
        y = np.array([y[max(0, i - window + 1) : i + 1].mean() for i in range(y.size)])
    return np.interp(grid, x, y, left=np.nan, right=np.nan)


def plot_task(
    cfg: LearningConfig,
    runs: list[Run],
    task: str,
    budget: int,
    labels: list[str],
    out: Path,
    title: str,
) -> Path:
    # A bare Figure, not pyplot: drawing a report file must not switch the backend of a
    # notebook that called this (its inline figures would stop showing).
    from matplotlib.figure import Figure

    from refimpl.plots import ALGO_COLORS, save_figure

    grid = np.linspace(0, budget, 101)
    panels = (
        ("heldout_greedy", "held-out success (greedy, 3-eval mean)", 3),
        ("heldout_pass@16", "held-out pass@16", 1),
        ("entropy_mean", "mean token entropy (nats)", 10),
        ("success_rate_all", "training success (all sampled groups)", 10),
    )
    fig = Figure(figsize=(4.4 * len(panels), 3.6))
    axes = fig.subplots(1, len(panels))
    styles = ["-", "--", ":", "-."]
    for i, label in enumerate(labels):
        dirs = [r.train.run_dir for r in runs if r.task == task and r.label == label]
        if not dirs:
            continue
        algo = label.split()[0]
        variant = " " in label  # an ablation: its own colour, dashed
        color = ABLATION_COLORS[i % len(ABLATION_COLORS)] if variant else ALGO_COLORS.get(algo)
        ls = styles[1 + i % 3] if variant else "-"
        for ax, (key, _t, window) in zip(axes, panels):
            curves = np.array([_curve_on_grid(d, key, grid, window) for d in dirs])
            if np.isnan(curves).all():
                continue
            with warnings.catch_warnings():  # grid points past a run's end are NaN
                warnings.simplefilter("ignore", RuntimeWarning)
                mean = np.nanmean(curves, axis=0)
                lo, hi = np.nanmin(curves, 0), np.nanmax(curves, 0)
            ax.plot(grid / 1e3, mean, color=color, ls=ls, lw=1.6, label=f"{label} (n={len(dirs)})")
            if len(dirs) > 1:
                ax.fill_between(grid / 1e3, lo, hi, color=ax.lines[-1].get_color(), alpha=0.10)
    for ax, (_k, t, _w) in zip(axes, panels):
        ax.set_title(t, fontsize=10)
        ax.set_xlabel("sampled tokens (thousands)")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return save_figure(fig, out, dpi=100)


def _fmt_q(q: dict[str, float], scale: float = 1.0, unit: str = "") -> str:
    def f(v: float) -> str:
        return "n.r." if not math.isfinite(v) else f"{v / scale:.0f}{unit}"

    return f"{f(q['median'])} [{f(q['q25'])}–{f(q['q75'])}] ({q['reached']} reached)"


#: Columns of the report's two tables per task: the outcome, then the mechanisms behind it.
RESULT_COLUMNS = [
    "algorithm",
    "seeds",
    "final greedy (mean ± sd)",
    "gain (worst seed)",
    "pass@1 start → end",
    "pass@16 start → end",
    "entropy start → end",
    "collapsed",
    "tokens to target, median [IQR]",
    "AUC",
]
MECHANISM_COLUMNS = [
    "algorithm",
    "clip fraction",
    "TEPO mask fraction",
    "mean Cov(logp, A)",
    "r(Cov, entropy change) over steps",
    "steps run",
    "kept groups",
    "seconds per run",
]


#: The report's last paragraph: the benchmark measures, and says where the claims are read.
READINGS = (
    "The papers' claims are not judged here: `python scripts/experiments/learning/verdicts.py "
    '<this directory>` reads results.json and adds them below, under "Verdicts".'
)


def _report_header(cfg: LearningConfig, info: dict[str, Any], wall_s: float) -> list[str]:
    """The report's first lines: the machine and wall time, then the settings of every run."""
    train = cfg.train_defaults()
    how = (
        "summed logged step and evaluation times over the parallel runs"
        if cfg.report_only
        else "measured"
    )
    return [
        f"Machine: {format_machine(info)}. Wall time of the training: {wall_s / 60:.1f} "
        f"min ({how}; {cfg.workers or min(4, os.cpu_count() or 1)} parallel runs, one "
        f"torch thread each).",
        "",
        f"Settings: preset {cfg.preset!r}: lr {train.lr}, {train.prompts_per_step} prompts × "
        f"G = {train.group_size}, {train.minibatches} minibatch(es) × {train.ppo_epochs} "
        f"epoch(s) per rollout, task knobs {list(train.task_args) or 'default'}, "
        f"seeds {cfg.seeds}, budget {cfg.budget_steps} reference-length batches of sampled "
        f"tokens per run, held-out greedy success on {cfg.eval_problems} problems every "
        f"{cfg.eval_every} steps, target = base + {cfg.target_gain}, entropy collapse = end"
        f" < {cfg.collapse_ratio} × start.",
        "",
    ]


def _result_row(label: str, s: dict[str, Any]) -> list[object]:
    """One algorithm's row of the outcome table (``s``: its summary over seeds)."""

    def arrow(key: str) -> str:
        return f"{s[key + '_start']['mean']:.3f} → {s[key + '_end']['mean']:.3f}"

    return [
        label,
        s["seeds"],
        f"{s['final']['mean']:.3f} ± {s['final']['std']:.3f}",
        f"{s['gain']['mean']:+.3f} ({s['gain']['min']:+.3f})",
        arrow("pass1"),
        arrow("pass16"),
        arrow("entropy"),
        f"{s['collapsed']}/{s['seeds']}",
        _fmt_q(s["tokens_to_target"], 1e3, "k"),
        f"{s['auc']['mean']:.3f}",
    ]


def _mechanism_row(label: str, s: dict[str, Any]) -> list[object]:
    """One algorithm's row of the mechanism table (``s``: its summary over seeds)."""
    return [
        label,
        f"{s['clip_frac']['mean']:.4f}",
        "-" if math.isnan(s["mask_frac"]["mean"]) else f"{s['mask_frac']['mean']:.4f}",
        f"{s['cov_mean']['mean']:+.4f}",
        f"{s['cov_entropy_r']['mean']:+.2f}",
        f"{s['steps']['median']:.0f}",
        f"{s['kept_group_frac']['mean']:.2f}",
        f"{s['time_s']['mean']:.0f}",
    ]


def _task_section(task: str, res: dict[str, Any], figures: list[Path]) -> list[str]:
    """One task's section: its budget and target, the two tables, then its figures."""
    summary = res["summary"].items()
    lines = [
        f"### {task}",
        "",
        f"Budget {res['budget_tokens']:,} sampled tokens per run; warm start "
        f"(held-out greedy) {res['base']:.3f}; target {res['target']:.3f}.",
        "",
        markdown_table(RESULT_COLUMNS, [_result_row(label, s) for label, s in summary]),
        "",
        markdown_table(MECHANISM_COLUMNS, [_mechanism_row(label, s) for label, s in summary]),
        "",
    ]
    if "entropy" in res:
        lines += _entropy_tables(res)
    for fig in figures:
        lines += [f"![{fig.stem}](figures/{fig.name})", ""]
    return lines


def format_report(
    cfg: LearningConfig,
    results: dict[str, Any],
    info: dict[str, Any],
    wall_s: float,
    figures: dict[str, list[Path]],
) -> str:
    """The markdown report: header, one section per task (the measurements), then where the
    papers' claims are read off them (the benchmark judges none)."""
    lines = _report_header(cfg, info, wall_s)
    for task, res in results.items():
        lines += _task_section(task, res, figures.get(task, []))
    lines += [READINGS, ""]
    return "\n".join(lines)


def run_learning(
    cfg: LearningConfig, explicit: frozenset[str] | None = None
) -> tuple[dict[str, Any], Path]:
    """Train (or reuse) every run, then write ``report.md``, ``results.json`` and figures.
    ``explicit``: the fields the command line set, which the preset leaves alone."""
    cfg = cfg.with_preset(explicit)
    runs, budgets = plan(cfg)
    for path in output_files(cfg):  # before any run: a link or a file in the way
        check_output_file(path, "--out")
    info = machine_info()
    if cfg.report_only:
        runs = [r for r in runs if finished(r)]
        if not runs:
            raise ValueError(f"--report-only: no finished run under {cfg.out_dir()}")
        wall = sum(
            run_metrics(_records(r.train.run_dir), budgets[r.task], 0.0, 0.5)["time_s"]
            for r in runs
        ) / (cfg.workers or min(4, os.cpu_count() or 1))
    else:
        wall = run_all(cfg, runs)
    results = collect(cfg, runs, budgets)
    figures: dict[str, list[Path]] = {}
    main_labels = cfg.algo_list()
    for task in results:
        figures[task] = [
            plot_task(
                cfg,
                runs,
                task,
                budgets[task],
                main_labels,
                cfg.out_dir() / "figures" / f"bench_learning_{task}.png",
                f"{task}: every algorithm, same sampled-token budget",
            )
        ]
        abl = [lab for lab in results[task]["summary"] if " " in lab]
        if abl:
            # Each ablated algorithm's own run beside its variants.
            ablated = dict.fromkeys(lab.split()[0] for lab in abl)
            labels = [a for a in ablated if a in main_labels] + abl
            figures[task].append(
                plot_task(
                    cfg,
                    runs,
                    task,
                    budgets[task],
                    labels,
                    cfg.out_dir() / "figures" / f"bench_ablation_{task}.png",
                    f"{task}: ablations",
                )
            )
    info_after = machine_info()
    info["load_1_5_15_after"] = info_after["load_1_5_15"]
    payload = {
        "machine": info,
        "wall_s": wall,
        "config": {
            k: (str(v) if isinstance(v, Path) else v) for k, v in dataclasses.asdict(cfg).items()
        },
        "results": results,
    }
    cfg.out_dir().mkdir(parents=True, exist_ok=True)
    write_text_atomic(cfg.out_dir() / "results.json", json.dumps(payload, indent=2, default=str))
    report = cfg.out_dir() / "report.md"
    write_text_atomic(report, format_report(cfg, results, info, wall, figures))
    return payload, report


def output_files(cfg: LearningConfig) -> list[Path]:
    """The files the benchmark writes beside its runs (``--out``): the report, the results,
    the figures of each task (checked before any run is trained)."""
    figures = cfg.out_dir() / "figures"
    return [cfg.out_dir() / "results.json", cfg.out_dir() / "report.md"] + [
        figures / f"bench_{kind}_{task}.png"
        for task in cfg.task_list()
        for kind in ("learning", "ablation")
    ]


def main(cfg: LearningConfig, explicit: frozenset[str] | None = None) -> Path:
    _payload, report = run_learning(cfg, explicit)
    print(report.read_text())
    print(f"report: {report}")
    return report
