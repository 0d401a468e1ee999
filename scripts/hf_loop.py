"""The HF path by hand: generate → rollout_batch → advantages → loss → optimizer step, no TRL.

The loop a reader copies into their own code: SmolLM2-135M-Instruct, two-digit additions in a
chat, free-form rewards, any ``refimpl.algorithms`` name. Held-out success before and after,
as ``scripts/real_model.py`` reports it (the same defaults, the same table).

    python scripts/hf_loop.py --algorithm gtpo --out hf_loop.json
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

from refimpl import algorithms, core  # noqa: E402
from refimpl.scaleup.hf import rollout_batch, token_logprobs_and_entropy  # noqa: E402
from refimpl.scaleup.models import load_smollm2  # noqa: E402
from refimpl.scaleup.real_task import ChatTask  # noqa: E402


def train(model, tok, task, problems, algorithm="gtpo", prompts=8, G=8, rollouts=4,
          steps_per_rollout=4, max_new_tokens=12, lr=2e-5):  # fmt: skip
    algo = algorithms.get(algorithm)
    cfg = algo.Config()
    ref = copy.deepcopy(model).eval().requires_grad_(False) if core.needs_reference(cfg) else None
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    eos, log = tok.eos_token_id, []
    for r in range(rollouts):
        chunk = problems[r * prompts : (r + 1) * prompts]
        enc = tok([task.prompt_text(tok, p) for p in chunk], return_tensors="pt", padding=True)
        prompt_ids = enc.input_ids.repeat_interleave(G, dim=0)  # each prompt G times, in a row
        prompt_mask = enc.attention_mask.repeat_interleave(G, dim=0)
        model.eval()
        with torch.no_grad():
            seqs = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask,
                                  do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                  max_new_tokens=max_new_tokens, eos_token_id=eos,
                                  pad_token_id=tok.pad_token_id)  # fmt: skip
        P = prompt_ids.shape[1]
        texts = tok.batch_decode(seqs[:, P:], skip_special_tokens=True)
        rewards = [task.reward(chunk[i // G], t) for i, t in enumerate(texts)]
        mean_reward = sum(rewards) / len(rewards)
        # logp_old and the full-vocabulary entropy_old of every reply token, in one pass.
        batch = rollout_batch(model, prompt_ids, prompt_mask, seqs, rewards, G, eos, ref_model=ref)
        keep = core.keep_groups(batch.rewards, G, cfg)  # DAPO's filter when the Config asks
        if not keep.any():
            continue
        batch, rows = batch.select_groups(keep), keep.repeat_interleave(G)
        seqs, prompt_mask = seqs[rows], prompt_mask[rows]
        adv = algo.advantages(batch, cfg)  # [B, T] token advantages, from the whole rollout
        model.train()
        # Several optimizer steps per rollout, each on some whole groups: after the first,
        # π_θ ≠ π_old, so the ratios move off 1 and the clip (and TEPO's mask) can act.
        for groups in torch.randperm(batch.num_groups).chunk(steps_per_rollout):
            sel = torch.zeros(batch.num_groups, dtype=torch.bool)
            sel[groups] = True
            mb, r_ = batch.select_groups(sel), sel.repeat_interleave(G)
            attn = torch.cat([prompt_mask[r_], mb.response_mask.long()], dim=1)
            logp, entropy = token_logprobs_and_entropy(model, seqs[r_], attn, P)
            if not core.differentiates_entropy(cfg):  # gradient only for an entropy bonus
                entropy = entropy.detach()
            loss, metrics = algo.loss(mb, logp, adv[r_], cfg, entropy=entropy)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            log.append({"rollout": r, "reward": mean_reward,
                        "entropy": float(core.masked_mean(entropy.detach(), mb.response_mask)),
                        **metrics})  # fmt: skip
    return log


def main(argv: list[str] | None = None) -> dict:
    import argparse
    from pathlib import Path

    from refimpl.scaleup.real_task import evaluate, markdown_table, summarise_steps

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algorithm", default="gtpo")
    p.add_argument("--rollouts", type=int, default=4)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--num-generations", type=int, default=8)
    p.add_argument("--steps-per-rollout", type=int, default=4)
    p.add_argument("--max-new-tokens", type=int, default=12)
    p.add_argument("--learning-rate", type=float, default=2e-5)
    p.add_argument("--eval-problems", type=int, default=100)
    p.add_argument("--eval-samples", type=int, default=4)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    task, (model, tok) = ChatTask(), load_smollm2()
    held_out = task.held_out(args.eval_problems)
    problems = task.training(args.prompts * args.rollouts, args.seed, args.eval_problems)

    def run_eval() -> dict:
        e = evaluate(model, tok, task, held_out, n_samples=args.eval_samples,
                     max_new_tokens=args.max_new_tokens, seed=args.seed)  # fmt: skip
        return {**e.row(), "examples": e.examples}

    base = run_eval()
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    log = train(model, tok, task, problems, args.algorithm, args.prompts, args.num_generations,
                args.rollouts, args.steps_per_rollout, args.max_new_tokens, args.learning_rate)  # fmt: skip
    run = {"algorithm": f"{args.algorithm} (HF loop)", "train_s": time.perf_counter() - t0,
           "train": summarise_steps(log), "steps": log, "after": run_eval()}  # fmt: skip
    result = {"args": {k: str(v) for k, v in vars(args).items()}, "base": base, "runs": [run]}
    print(table := markdown_table(base, [run]))
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=1))
        args.out.with_suffix(".md").write_text(table)
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
