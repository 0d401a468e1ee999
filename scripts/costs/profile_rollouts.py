"""Where the time of a rollout goes: ``torch.profiler`` on the three workloads every experiment
pays for, with each operation's time sorted into stages.

    .venv/bin/python scripts/costs/profile_rollouts.py                 # all three, ≈ 2 min
    .venv/bin/python scripts/costs/profile_rollouts.py --workloads sample,step --threads 1
    .venv/bin/python scripts/costs/profile_rollouts.py --out /tmp/profile.json
    .venv/bin/python scripts/costs/profile_rollouts.py --compare before.json after.json

The workloads (one thread by default, as the benchmarks run):

* ``oracle``: one oracle batch of the long chain (``--preset longchain``'s warm start, 8
  prompts × G = 8 = 64 completions, every prefix continued K = 32 times), as ``refimpl
  credit`` runs it (the batch of ``scripts/experiments/credit/results/cost_longchain.json``). Needs the long-chain warm start: trained once (≈ 15–25 min) and cached under
  ``--runs-dir``.
* ``sample``: one ``sample_groups`` call at the training regime's default (64 prompts × G = 8
  of the default task, from its warm start).
* ``step``: one RL step of the trainer (GRPO, the default regime), after one warm-up step.

Every aten operation's *self* time is put in one stage by the module it ran in (forward
hooks open a profiler range around each ``nn.Linear``, ``nn.GELU``, ``nn.LayerNorm``,
``nn.Embedding`` and attention module; nothing in the model changes) or by what called it:

| stage | what |
|---|---|
| matmuls | the linear layers (``addmm``/``mm``) and the output head |
| attention | scores, softmax and weighted sum over the cached keys (SDPA, or the shared-prefix
  ``bmm``s) |
| GELU, LayerNorm, embeddings | their modules |
| other ops | every other forward operation: the attention mask, writing and repeating the
  KV cache, concatenations, ``where``, the loss |
| sampling and entropy | ``sample_token``: log-softmax, entropy, the inverse-CDF draw |
| backward | everything under autograd's backward pass |
| optimizer | ``Optimizer.step`` |
| Python between ops | the wall time no operation accounts for |

The table in ``docs/benchmarks.md`` § 4 was made with this script before and after the
change that introduced the shared-prefix cache (the "before" column from a checkout of the
parent commit, the same command). Writes the JSON of every stage's seconds and share.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

import refimpl  # noqa: F401  (the numeric path is pinned before torch runs)
from refimpl.sampling import decoding
from refimpl.sampling.groups import sample_groups

STAGES = (
    "matmuls",
    "attention",
    "GELU",
    "LayerNorm",
    "embeddings",
    "other ops: masks, cache writes, copies, the loss",
    "sampling and entropy",
    "backward",
    "optimizer",
    "Python between ops",
)
_LABELS = {  # profiler range name -> stage
    "stage:linear": "matmuls",
    "stage:attention": "attention",
    "stage:gelu": "GELU",
    "stage:layernorm": "LayerNorm",
    "stage:embedding": "embeddings",
    "stage:sample_token": "sampling and entropy",
}


def _label_of(module: nn.Module) -> str | None:
    if isinstance(module, nn.Linear):
        return "stage:linear"
    if isinstance(module, nn.GELU):
        return "stage:gelu"
    if isinstance(module, nn.LayerNorm):
        return "stage:layernorm"
    if isinstance(module, nn.Embedding):
        return "stage:embedding"
    if type(module).__name__ == "CausalSelfAttention":
        return "stage:attention"
    return None


@contextlib.contextmanager
def stage_ranges(model: nn.Module):
    """Profiler ranges around the modules of ``model`` and around ``sample_token``."""
    handles, open_ranges = [], {}
    for module in model.modules():
        label = _label_of(module)
        if label is None:
            continue

        def pre(mod, _args, _label=label):
            rng = record_function(_label)
            rng.__enter__()
            open_ranges.setdefault(id(mod), []).append(rng)

        def post(mod, _args, _out):
            open_ranges[id(mod)].pop().__exit__(None, None, None)

        handles += [module.register_forward_pre_hook(pre), module.register_forward_hook(post)]
    original = decoding.sample_token  # looked up there by the decoding loop

    def sample_token(*args, **kwargs):
        with record_function("stage:sample_token"):
            return original(*args, **kwargs)

    decoding.sample_token = sample_token
    try:
        yield
    finally:
        decoding.sample_token = original
        for handle in handles:
            handle.remove()


def _stage(event) -> str:
    """The stage of one aten event: its innermost labelled range, else by ancestry/name."""
    node = event.cpu_parent
    while node is not None:
        name = node.name
        if name in _LABELS:
            # The projections inside the attention module are matmuls, not attention.
            return _LABELS[name]
        if name.startswith("autograd::engine") or "Backward" in name:
            return "backward"
        if name.startswith("Optimizer.") or name.startswith("Optimizer#"):
            return "optimizer"
        node = node.cpu_parent
    if "backward" in event.name.lower():
        return "backward"
    return "other ops: masks, cache writes, copies, the loss"


def stage_table(prof, wall: float) -> dict[str, float]:
    """Seconds per stage: the self time of every aten operation, by stage; the wall time
    left over is Python between operations."""
    seconds = dict.fromkeys(STAGES, 0.0)
    for event in prof.events():
        if not event.name.startswith("aten::"):
            continue
        seconds[_stage(event)] += event.self_cpu_time_total / 1e6
    seconds["Python between ops"] = max(0.0, wall - sum(seconds.values()))
    return seconds


def _profile(fn, model: nn.Module, repeats: int, warmup: bool = True) -> dict:
    """Profile ``fn`` ``repeats`` times; the run of median wall time, its stage table."""
    if warmup:  # the first call's allocations and lazy initialisation
        fn()
    records = []
    for _ in range(repeats):
        with stage_ranges(model), profile(activities=[ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            out = fn()
            wall = time.perf_counter() - start
        records.append({"wall_s": wall, "seconds": stage_table(prof, wall), "detail": out})
    records.sort(key=lambda r: r["wall_s"])
    median = records[len(records) // 2]
    median["walls_s"] = [r["wall_s"] for r in records]
    return median


def workload_sample(runs_dir: Path) -> tuple:
    from refimpl.loop import LoopConfig
    from refimpl.settings.plan import resolve
    from refimpl.settings.train_config import TrainConfig
    from refimpl.warmstart import base_model
    from toy_envs import TOKENIZER

    plan = resolve(TrainConfig(runs_dir=runs_dir, progress=False))
    model = base_model(plan.warmstart, "--train.warmstart.").eval()
    cfg = LoopConfig()
    problems = plan.task.sample(cfg.prompts_per_step, __import__("numpy").random.default_rng(0))
    prompts = [TOKENIZER.encode(p.prompt, add_bos=True) for p in problems]

    def fn():
        s = sample_groups(
            model, prompts, group_size=cfg.group_size, max_new_tokens=plan.max_new_tokens,
            eos_id=TOKENIZER.eos_id, pad_id=TOKENIZER.pad_id,
            generator=torch.Generator().manual_seed(0),
        )  # fmt: skip
        return {"rows": s.response_ids.shape[0], "tokens": int(s.response_mask.sum())}

    return fn, model


def workload_step(runs_dir: Path) -> tuple:
    from refimpl.settings.train_config import TrainConfig
    from refimpl.train import Trainer

    trainer = Trainer(
        TrainConfig(algo="grpo", runs_dir=runs_dir, name="profile-step", overwrite=True,
                    progress=False, plot=False)
    )  # fmt: skip

    def fn():
        record = trainer.train_step()
        trainer.step += 1
        return {"rows": int(record["sampled_rows"]), "length_mean": record["length_mean"]}

    return fn, trainer.model


def workload_oracle(runs_dir: Path) -> tuple:
    from refimpl.bench.credit import CreditConfig, load_policy
    from refimpl.bench.credit_batch import sample_batch
    from refimpl.sampling.monte_carlo_values import token_values
    from refimpl.settings.train_config import TrainConfig

    cfg = CreditConfig(preset="longchain", prompts=8, train=TrainConfig(runs_dir=runs_dir))
    policy = load_policy(cfg)
    problems, samples, outcome = sample_batch(policy, 8, 8, 0)

    def fn():
        values = token_values(
            policy.model, policy.plan.task, problems, samples, outcome, rollouts=32,
            max_new_tokens=policy.plan.max_new_tokens,
            temperature=policy.plan.cfg.temperature,
        )  # fmt: skip
        return {"prefixes": values.prefixes, "tokens": values.sampled_tokens}

    return fn, policy.model


WORKLOADS = {"oracle": workload_oracle, "sample": workload_sample, "step": workload_step}


def compare_table(before: dict, after: dict) -> str:
    """The markdown table of docs/benchmarks.md § 4: each workload's stages, seconds and share,
    before and after, from two ``--out`` files."""
    lines = []
    for name in after["workloads"]:
        b, a = before["workloads"].get(name), after["workloads"][name]
        if b is None:
            continue
        lines += [
            f"**{name}** ({a['detail']}): {b['wall_s']:.3f} s → {a['wall_s']:.3f} s "
            f"({b['wall_s'] / a['wall_s']:.2f}× faster)",
            "",
            "| stage | before s | share | after s | share |",
            "|---|---|---|---|---|",
        ]
        for stage in STAGES:
            sb, sa = b["seconds"][stage], a["seconds"][stage]
            if sb == 0 and sa == 0:
                continue
            lines.append(f"| {stage} | {sb:.3f} | {sb / b['wall_s']:.0%} | {sa:.3f} | "
                         f"{sa / a['wall_s']:.0%} |")  # fmt: skip
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--workloads",
        default="oracle,sample,step",
        help="comma-separated, from: oracle, sample, step (default: all)",
    )
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default: 1)")
    parser.add_argument(
        "--repeats",
        type=int,
        default=5,
        help="profiled runs of sample and step, the median's table (default: 5;"
        " the oracle runs once)",
    )
    parser.add_argument(
        "--runs-dir",
        type=Path,
        default=Path("runs"),
        help="where the warm starts are cached (default: runs)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="write the stage table as JSON here (default: print only)",
    )
    parser.add_argument(
        "--compare",
        type=Path,
        nargs=2,
        metavar=("BEFORE", "AFTER"),
        help="print the before/after table of two --out files and stop",
    )
    args = parser.parse_args(argv)
    if args.compare is not None:
        for path in args.compare:
            if not path.is_file():
                parser.error(f"--compare: {path} is not a file")
        before, after = (json.loads(p.read_text()) for p in args.compare)
        print(compare_table(before, after))
        return {"before": before, "after": after}
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in names if w not in WORKLOADS]
    if unknown or not names:
        parser.error(f"--workloads: expected names from {', '.join(WORKLOADS)}, got {unknown}")
    if args.threads < 1 or args.repeats < 1:
        parser.error("--threads, --repeats: expected positive integers")
    if args.out is not None and args.out.exists() and not args.out.is_file():
        parser.error(f"--out: {args.out} exists and is not a file")
    torch.set_num_threads(args.threads)
    from refimpl.bench import machine_info

    result = {"machine": machine_info(), "threads": args.threads, "workloads": {}}
    for name in names:
        fn, model = WORKLOADS[name](args.runs_dir)
        repeats = 1 if name == "oracle" else args.repeats  # the oracle runs for long
        record = _profile(fn, model, repeats, warmup=name != "oracle")
        result["workloads"][name] = record
        total = record["wall_s"]
        print(f"\n{name}: {total:.3f} s ({record['detail']})")
        print("| stage | s | share |\n|---|---|---|")
        for stage in STAGES:
            sec = record["seconds"][stage]
            print(f"| {stage} | {sec:.3f} | {sec / total:.0%} |")
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])
