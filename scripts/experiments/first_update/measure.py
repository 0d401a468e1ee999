"""The first update, measured: step 1's largest log-prob fall and KL against the learning rate,
with and without the warm-up, and against the warm-up's length (docs/first_update.md).

Each point is ``refimpl.diagnostics.first_update.first_step``: step 1 of ``refimpl/loop.py``'s
loop (GRPO, 64 prompts × G = 8 in 4 minibatches) from a shipped base model, sampled once, and
before each of its optimizer updates the fall ``log π_old − log π_θ`` of the tokens that update
is about to train on. Seconds a point on one core.

    python scripts/experiments/first_update/measure.py                # results, figure, tables (~5 min)
    python scripts/experiments/first_update/measure.py --figure-only  # figure and tables from the results
    python scripts/experiments/first_update/measure.py --check        # are the page's tables current?

The page is written by the lab's one page writer (``scripts/experiments/page_writer.py``): the
result file read and checked before the page is touched, ``--check`` printing the rows that
differ.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts" / "experiments"))

import page_writer  # noqa: E402  (the lab's one page writer)

from refimpl.bench import machine_info  # noqa: E402
from refimpl.bench.result_header import base_models_of, make_header, read_result  # noqa: E402
from refimpl.diagnostics.first_update import first_step  # noqa: E402
from refimpl.loop import LoopConfig  # noqa: E402
from refimpl.runs.runlog import write_text_atomic  # noqa: E402
from refimpl.settings import presets  # noqa: E402
from refimpl.settings.plan import run_warmstart  # noqa: E402
from refimpl.settings.train_config import TrainConfig  # noqa: E402
from refimpl.settings.warmstart_config import parse_task_args  # noqa: E402
from refimpl.warmstart import base_model  # noqa: E402

RESULTS = ROOT / "scripts/experiments/first_update/results/first_update.json"
FIGURE = ROOT / "docs/figures/first_update.png"
PAGE = ROOT / "docs/first_update.md"
#: The regimes: the long chain of the credit study and the ceiling (its preset), and the demo's
#: countdown from its 300-step base (both bases are shipped).
REGIMES = {"long chain": ("longchain", {}), "countdown": ("default", {"task": "countdown"})}
COUNTDOWN_BASE_STEPS = 300
LRS = (1e-5, 3e-5, 1e-4, 3e-4, 1e-3)
WARMUPS = (0, 1, 2, 4, 6, 8, 10, 16)
SEEDS = (0, 1, 2)
WARMUP = LoopConfig.lr_warmup  # the default the sweep over WARMUPS chose


def regime(preset: str, changes: dict, runs_dir: Path):
    """The base model and the loop's settings of a preset's regime."""
    train = presets.fill_defaults(TrainConfig(runs_dir=runs_dir), presets.get_preset(preset).train)
    train = dataclasses.replace(train, **changes)
    if train.task == "countdown":
        train.warmstart = dataclasses.replace(train.warmstart, steps=COUNTDOWN_BASE_STEPS)
    model = base_model(dataclasses.replace(run_warmstart(train), progress=False))
    knobs = dict(parse_task_args(train.task, tuple(train.task_args)))
    return model, LoopConfig(task=train.task, task_knobs=knobs, lr=train.lr)


def weight_scales(models: dict) -> dict[str, dict[str, float]]:
    """The RMS of each weight matrix of each base model (biases, norms and the position table
    left out): how large the weights are that a sign step moves by lr."""
    out: dict[str, dict[str, float]] = {}
    for name, model in models.items():
        out[name] = {
            n: float(p.detach().pow(2).mean().sqrt())
            for n, p in model.named_parameters()
            if p.dim() == 2 and "wpe" not in n
        }
    return out


def point(model, cfg: LoopConfig, **changes) -> dict:
    r = first_step(model, dataclasses.replace(cfg, **changes))
    return {**changes, **dataclasses.asdict(r)}


def measure(runs_dir: Path) -> dict:
    torch.set_num_threads(1)
    plan = [("long chain", dict(lr=lr, lr_warmup=w, seed=s)) for lr in LRS for w in (0, WARMUP)
            for s in SEEDS]  # fmt: skip
    plan += [("long chain", dict(lr=1e-4, lr_warmup=w, seed=s)) for w in WARMUPS for s in SEEDS
             if w not in (0, WARMUP)]  # fmt: skip
    plan += [("countdown", dict(lr=1e-4, lr_warmup=w, seed=s)) for w in (0, WARMUP) for s in SEEDS]
    loaded = {name: regime(*how, runs_dir) for name, how in REGIMES.items()}
    points = []
    for name, changes in tqdm(plan, desc="first steps", unit="point"):
        points.append({"regime": name, **point(*loaded[name], **changes)})
    bases = [m.base_record for m, _ in loaded.values()]
    return {
        "header": make_header(
            "first update",
            command="python scripts/experiments/first_update/measure.py",
            seeds=list(SEEDS),
            base_models=base_models_of(bases),
            evaluation_grid="none",
        ),  # fmt: skip
        "machine": machine_info(),
        "command": "python scripts/experiments/first_update/measure.py",
        "algo": "grpo",
        "seeds": list(SEEDS),
        "base_models": {name: m.base_record for name, (m, _) in loaded.items()},
        "default_warmup": WARMUP,
        "weight_rms": weight_scales({name: m for name, (m, _) in loaded.items()}),
        "points": points,
    }


def figure(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pts = [p for p in result["points"] if p["regime"] == "long chain"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    for w, color in ((0, "tab:red"), (result["default_warmup"], "tab:blue")):
        label = "no warm-up" if w == 0 else f"warm-up over {w} updates"
        falls = [sorted(p["largest_fall"] for p in pts if p["lr"] == lr and p["lr_warmup"] == w)
                 for lr in LRS]  # fmt: skip
        left.plot(LRS, [f[len(f) // 2] for f in falls], "o-", color=color, label=label)
        left.fill_between(
            LRS, [f[0] for f in falls], [f[-1] for f in falls], color=color, alpha=0.2
        )
    left.set_xscale("log")
    left.axhline(3.0, color="grey", ls=":", lw=1)
    left.set_xlabel("learning rate")
    left.set_ylabel("largest fall of a token's log-prob in step 1 (nats)")
    left.set_title("long chain, GRPO, seeds 0-2 (median, range)")
    left.legend()
    ws = sorted({p["lr_warmup"] for p in pts if p["lr"] == 1e-4})
    falls = [sorted(p["largest_fall"] for p in pts if p["lr"] == 1e-4 and p["lr_warmup"] == w)
             for w in ws]  # fmt: skip
    right.plot(ws, [f[1] for f in falls], "o-", color="black", label="largest fall (nats), median")
    right.plot(ws, [f[-1] for f in falls], "v--", color="black", alpha=0.6,
               label="largest fall (nats), worst seed")  # fmt: skip
    right.axhline(3.0, color="grey", ls=":", lw=1)
    right.set_xlabel("warm-up length (optimizer updates; 4 per step)")
    right.set_title("lr 1e-4: the warm-up's length")
    right.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _cells(points: list[dict]) -> list[str]:
    """Median and worst seed of the step-1 KL and the largest fall, and the tokens past 3 nats."""
    kls = sorted(p["approx_kl_old"] for p in points)
    falls = sorted(p["largest_fall"] for p in points)
    past = [p["tokens_past_3_nats"] for p in points]
    return [f"{kls[len(kls) // 2]:.3g}", f"{kls[-1]:.3g}", f"{falls[len(falls) // 2]:.1f}",
            f"{falls[-1]:.1f}", ", ".join(map(str, past))]  # fmt: skip


def tables(result: dict) -> str:
    """The page's tables: the update-by-update sign step, the warm-up's length at lr 1e-4,
    the learning rate with and without the default warm-up, and the two regimes."""
    pts = result["points"]
    seeds = len(result["seeds"])

    def select(regime: str, lr: float, w: int) -> list[dict]:
        return [p for p in pts if p["regime"] == regime and p["lr"] == lr and p["lr_warmup"] == w]

    head = "| {} | step-1 KL, median | worst seed | largest fall (nats), median | worst seed | tokens past 3 nats, per seed |"
    rule = "|---|---|---|---|---|---|"
    out = ["**What each update of step 1 moves** (long chain, lr 1e-4, no warm-up; range over "
           f"{seeds} seeds): the share of the weights moved by at least 0.9 lr, and the median "
           "|Δw| / lr.", "", "| update | share moved by ≥ 0.9 lr | median move / lr |", "|---|---|---|"]  # fmt: skip
    base = select("long chain", 1e-4, 0)
    for k in range(len(base[0]["share_moved_by_lr"])):
        share = [p["share_moved_by_lr"][k] for p in base]
        move = [p["median_move"][k] for p in base]
        out.append(
            f"| {k + 1} | {min(share):.1%} – {max(share):.1%} | {min(move):.2f} – {max(move):.2f} |"
        )
    out += ["", "**The warm-up's length** (long chain, lr 1e-4):", "",
            head.format("warm-up (updates)"), rule]  # fmt: skip
    for w in sorted(
        {p["lr_warmup"] for p in pts if p["regime"] == "long chain" and p["lr"] == 1e-4}
    ):
        out.append(f"| {w} | " + " | ".join(_cells(select("long chain", 1e-4, w))) + " |")
    out += ["", f"**The learning rate**, without and with the default warm-up ({result['default_warmup']} updates), long chain:", "",
            head.format("lr, warm-up"), rule]  # fmt: skip
    for lr in LRS:
        for w in (0, result["default_warmup"]):
            out.append(f"| {lr:g}, {w} | " + " | ".join(_cells(select("long chain", lr, w))) + " |")
    out += ["", "**The two regimes** at lr 1e-4:", "", head.format("regime, warm-up"), rule]
    for regime_name in REGIMES:
        for w in (0, result["default_warmup"]):
            out.append(
                f"| {regime_name}, {w} | " + " | ".join(_cells(select(regime_name, 1e-4, w))) + " |"
            )
    w = result["weight_rms"]
    ratios = sorted(w["long chain"][n] / w["countdown"][n] for n in w["long chain"])
    out += ["", f"The long-chain base's weight matrices are {ratios[0]:.1f} to {ratios[-1]:.1f} "
            "times the countdown base's in RMS (the same 2-layer, 128-wide architecture; the "
            f"{len(ratios)} matrices of both, the position table left out)."]  # fmt: skip
    return "\n".join(out)


def _build(args) -> dict[Path, dict[str, str]]:
    """The page's tables, from the results (measured first, unless only read)."""
    if not (args.figure_only or args.check or args.print):
        result = measure(args.runs_dir)
        write_text_atomic(RESULTS, json.dumps(result, indent=1) + "\n")
        print(f"wrote {RESULTS.relative_to(ROOT)}")
    args.result = read_result(RESULTS, "the page's tables")
    return {PAGE: {"tables": tables(args.result)}}


def _arguments(parser) -> None:
    parser.add_argument("--runs-dir", type=Path, default=Path("runs"), help="warm-start cache")
    parser.add_argument("--figure-only", action="store_true", help="redraw from the results")


def main(argv: list[str] | None = None) -> int:
    """Exit 0 (written, or current with ``--check``), 1 (stale, with ``--check``) or 2 (the
    result file missing or damaged, named on one line: the page is left as it was)."""
    return page_writer.main(
        argv, prog="scripts/experiments/first_update/measure.py",
        description=__doc__.split("\n\n")[0], prefix="first_update", build=_build,
        add_arguments=_arguments, after_write=lambda args: figure(args.result, FIGURE),
        inputs=lambda _args: [RESULTS],
    )  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
