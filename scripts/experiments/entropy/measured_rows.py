"""Which rows should the entropy change of a step be measured on? Precision against cost.

    .venv/bin/python scripts/experiments/entropy/measured_rows.py             # 100 steps, ≈ 4 min
    .venv/bin/python scripts/experiments/entropy/measured_rows.py --steps 30  # quicker, noisier

The trainer measures (and predicts) ``entropy_change`` on a subset of each step's batch, the
*measured rows*, because the prediction's backward pass runs on them every step. This trains GRPO
on countdown in the default regime (64 prompts × G = 8, 4 minibatches, one torch thread) and,
at every step, also measures the entropy change on all 512 rows and on each candidate subset
("P × C": the first C completions of each of the first P groups). It prints, per subset, the
correlation over steps of its change with the whole batch's change, and the CPU time of one
forward pass and of one forward + backward pass of its mean entropy (medians over the steps).
The trainer's choice is 32 × 1 (``refimpl.diagnostics.observers.ENTROPY_CHANGE_GROUPS``,
``ENTROPY_CHANGE_COMPLETIONS``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import tyro

from refimpl import core
from refimpl.bench import format_machine, machine_info
from refimpl.diagnostics.entropy_attribution import hbar_gradient
from refimpl.diagnostics.observers import EntropyChange
from refimpl.settings.train_config import TrainConfig
from refimpl.train import Trainer

#: (groups P, completions C) of each candidate subset.
SUBSETS = ((16, 8), (8, 8), (16, 4), (16, 2), (16, 1), (32, 1), (32, 2), (64, 1))


@dataclass
class MeasuredRowsConfig:
    """Precision and cost of the measured rows of ``entropy_change``."""

    steps: int = 100
    """RL steps (one measurement of every subset each)"""
    seed: int = 0
    """the run's seed"""
    runs_dir: Path = Path("runs")
    """where the warm-start cache lives (a run directory is written under it)"""


def main(cfg: MeasuredRowsConfig) -> None:
    info = machine_info()
    torch.set_num_threads(1)
    trainer = Trainer(
        TrainConfig(
            task="countdown",
            seed=cfg.seed,
            runs_dir=cfg.runs_dir,
            name="entropy-measured-rows",
            overwrite=True,
            progress=False,
            plot=False,
            threads=1,
            probe_every=0,
            diag_every=0,
        )
    )
    G, T = trainer.cfg.group_size, trainer.cfg.temperature
    changes: dict[str, list[float]] = {f"{p} × {c}": [] for p, c in SUBSETS}
    changes["64 × 8 (all)"] = []
    cost = {name: {"forward": [], "forward + backward": []} for name in changes}
    params = [p for p in trainer.model.parameters() if p.requires_grad]

    def rows_of(p: int, c: int) -> torch.Tensor:
        return (torch.arange(p)[:, None] * G + torch.arange(c)[None, :]).reshape(-1)

    def every_subset(samples, batch):
        for (p, c), name in zip((*SUBSETS, (64, 8)), changes):
            rows = rows_of(min(p, batch.num_groups), c)
            c0 = time.process_time()
            with torch.no_grad():
                _, after = samples.policy_logprobs(trainer.model, rows, temperature=T, group_size=c)
            cost[name]["forward"].append(time.process_time() - c0)
            mask = batch.response_mask[rows]
            changes[name].append(float(core.masked_mean(after - batch.entropy_old[rows], mask)))
            if name.endswith("(all)"):
                continue  # the whole batch's backward pass: not a candidate, and slow
            c0 = time.process_time()
            _, entropy = samples.policy_logprobs(trainer.model, rows, temperature=T, group_size=c)
            hbar_gradient(core.masked_mean(entropy, mask), params, retain_graph=False)
            cost[name]["forward + backward"].append(time.process_time() - c0)

    class EverySubset(EntropyChange):
        """The trainer's entropy change, and the same on every candidate subset."""

        def measure(self, state, samples, batch, adv):
            every_subset(samples, batch)
            return super().measure(state, samples, batch, adv)

    trainer.observers = [
        o if type(o) is not EntropyChange else EverySubset(**o.settings) for o in trainer.observers
    ]
    start = time.perf_counter()
    for _ in range(cfg.steps):
        trainer.train_step()
        trainer.step += 1
    full = np.array(changes["64 × 8 (all)"])
    print(
        f"Machine: {format_machine(info)}. {cfg.steps} GRPO steps on countdown (default "
        f"regime, seed {cfg.seed}, one torch thread) in {time.perf_counter() - start:.0f} s."
    )
    print()
    print(
        "| measured rows (groups × completions) | rows | r with the change on all 512 rows | "
        "forward, ms | forward + backward, ms |"
    )
    print("|---|---|---|---|---|")
    for name, values in changes.items():
        p, c = (int(x) for x in name.split(" (")[0].split(" × "))
        r = float(np.corrcoef(np.array(values), full)[0, 1])
        fwd = statistics.median(cost[name]["forward"]) * 1e3
        both = cost[name]["forward + backward"]
        both = f"{statistics.median(both) * 1e3:.1f}" if both else "-"
        print(f"| {name} | {p * c} | {r:.3f} | {fwd:.1f} | {both} |")


if __name__ == "__main__":
    main(tyro.cli(MeasuredRowsConfig))
