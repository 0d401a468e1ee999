"""How long chains get a warm start in RL's working band: the calibration of docs/credit.md.

The default warm start (600 steps of the 1-to-k operator mix, the 2-layer d = 128 model)
leaves 8- and 12-operator chains at about 5 % success: too few right answers for a group to
hold one. This trains the candidates, each with the warm start's own recipe
(``refimpl.warmstart``: AdamW at 3e-3, cosine to 10 %, batch 128, seed 0, one thread) and
evaluates each on 200 held-out problems of several operator ranges, greedy and sampled at
T = 1, after 600, 1,200, 1,800 and 2,400 steps (the schedule is a 2,400-step one throughout,
so the earlier points are not what a shorter warm start would reach):

* ``2x128``: the default model, the 1-to-12 mix; its 2,400-step end is the ``longchain``
  preset's warm start, trained the same way (``refimpl warmstart`` reports the same success);
* ``4x128``: twice as deep (802k parameters), the same mix.

    python scripts/experiments/credit/calibrate.py                # both, ~1.5 h on one core
    python scripts/experiments/credit/calibrate.py --models 2x128

Writes ``results/calibration.json`` (per model, per evaluation: steps, training seconds,
the loss, success per operator range).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "calibration.json"
MODELS = {"2x128": (2, 128), "4x128": (4, 128)}
#: The operator ranges evaluated: (min_ops, num_ops). (10, 12) is the longchain preset's task.
RANGES = ((10, 12), (8, 12), (10, 10), (12, 12))
STEPS, EVALS_AT, MIX = 2400, (600, 1200, 1800, 2400), (1, 12)


def calibrate(n_layer: int, n_embd: int, log=print) -> dict:
    """Train one candidate with the warm start's recipe, evaluating at ``EVALS_AT``."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    import refimpl  # noqa: F401  (the pinned numeric path, before torch runs)
    from refimpl.evaluate import success_rate
    from refimpl.problem_streams import held_out_rng, warmstart_rng
    from refimpl.settings.warmstart_config import ModelSize
    from refimpl.warmstart import _training_batch
    from toy_envs import get_task

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = ModelSize(n_layer=n_layer, n_embd=n_embd, n_head=4, block_size=96).build()
    mix = get_task("chain", num_ops=MIX[1], min_ops=MIX[0])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(s / STEPS, 1.0)))
    )
    tasks = {f"{a}-{b}": get_task("chain", num_ops=b, min_ops=a) for a, b in RANGES}
    held = {k: t.sample(200, held_out_rng()) for k, t in tasks.items()}
    rows, train_s = [], 0.0
    for step in range(STEPS):
        t0 = time.perf_counter()
        model.train()
        ids, mask, target_mask = _training_batch(mix, mix.sample(128, warmstart_rng(0, step)))
        logits = model(ids, attention_mask=mask)[:, :-1]
        targets, weights = ids[:, 1:], target_mask[:, 1:].float()
        nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1),
                              reduction="none").view_as(weights)  # fmt: skip
        loss = (nll * weights).sum() / weights.sum()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        schedule.step()
        train_s += time.perf_counter() - t0
        if step + 1 in EVALS_AT:
            model.eval()
            row = {"step": step + 1, "train_s": round(train_s, 1), "loss": round(loss.item(), 4)}
            for k, t in tasks.items():
                row[k] = {
                    "greedy": success_rate(model, t, held[k], greedy=True),
                    "sampled": success_rate(model, t, held[k], greedy=False, seed=1),
                }
            rows.append(row)
            log(f"{n_layer}x{n_embd} {row}")
    return {"n_layer": n_layer, "n_embd": n_embd, "params": model.num_params(),
            "mix": list(MIX), "steps": STEPS, "evaluations": rows}  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated candidates")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    names = [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODELS]
    if not names or unknown:
        parser.error(f"--models: expected names from {', '.join(MODELS)}, got {args.models!r}")
    from refimpl.bench import machine_info
    from refimpl.runs import cpu_kernels
    from refimpl.runs.runlog import write_text_atomic

    result = json.loads(args.out.read_text()) if args.out.exists() else {"models": {}}
    for name in names:
        result["models"][name] = calibrate(*MODELS[name])
        result["machine"] = {**machine_info(), "numerics": cpu_kernels.describe()}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        # After each model (an interrupted run keeps the others), never through a link.
        write_text_atomic(args.out, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
