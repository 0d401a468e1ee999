"""What Eq. 4 of GTPO does to the sign of the outcome, on random batches (docs/algorithms/gtpo.md).

    .venv/bin/python scripts/experiments/gtpo_eq4/literal_eq4.py  # 8 groups × G = 8, 200 batches

For each normalisation set of ``gtpo.Config.stats`` it prints the mean advantage over the
tokens of correct and of wrong answers and the fraction of those tokens whose advantage has
the wrong sign (A < 0 on a correct answer, A > 0 on a wrong one). Rewards are 0/1 at random
(mixed groups), lengths uniform in 1..16, entropies uniform in (0, 2) nats.
"""

from __future__ import annotations

import argparse

import torch

from refimpl import core
from refimpl.algorithms import gtpo
from refimpl.contract import RolloutBatch


def random_batch(groups: int, G: int, T: int, generator: torch.Generator) -> RolloutBatch:
    B = groups * G
    lengths = torch.randint(1, T + 1, (B,), generator=generator)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(B)
    for g in range(groups):  # at least one right and one wrong answer per group
        k = int(torch.randint(1, G, (1,), generator=generator))
        rows = torch.randperm(G, generator=generator)[:k] + g * G
        rewards[rows] = 1.0
    return RolloutBatch(
        response_ids=torch.zeros(B, T, dtype=torch.long),
        response_mask=mask,
        rewards=rewards,
        logp_old=-torch.ones(B, T) * mask,
        entropy_old=2 * torch.rand(B, T, generator=generator) * mask,
        group_size=G,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--max-len", type=int, default=16)
    parser.add_argument("--batches", type=int, default=200)
    args = parser.parse_args()
    print(f"{'stats':>9}  mean A (correct)  mean A (wrong)  correct with A<0  wrong with A>0")
    for stats in gtpo.STATS:
        generator = torch.Generator().manual_seed(0)
        sums = torch.zeros(4, dtype=torch.float64)
        counts = torch.zeros(2, dtype=torch.float64)
        for _ in range(args.batches):
            batch = random_batch(args.groups, args.group_size, args.max_len, generator)
            cfg = gtpo.Config(stats=stats)
            A = gtpo.advantages(batch, cfg).double()
            active = batch.response_mask.bool()
            success = core.successful(batch, cfg.success_threshold)[:, None]  # GTPO's O⁺
            right, wrong = success & active, ~success & active
            sums += torch.stack(
                [A[right].sum(), A[wrong].sum(), (A[right] < 0).sum(), (A[wrong] > 0).sum()]
            )
            counts += torch.stack([right.sum(), wrong.sum()]).double()
        mean_r, mean_w = sums[0] / counts[0], sums[1] / counts[1]
        flip_r, flip_w = sums[2] / counts[0], sums[3] / counts[1]
        print(f"{stats:>9}  {mean_r:+16.3f}  {mean_w:+14.3f}  {flip_r:16.1%}  {flip_w:14.1%}")


if __name__ == "__main__":
    main()
