"""``refimpl bench-speed``'s report: its ``results.json`` as the markdown of
``docs/benchmarks.md`` § 4 (one table per measurement, each figure against its target)."""

from __future__ import annotations

from typing import Any

from refimpl.bench import format_machine, markdown_table

TARGETS = {
    "kv_cache_speedup": 3.0,
    "algo_overhead_frac": 0.05,
    "trl_speedup": 3.0,
    "oracle_peak_frac": 0.40,  # rollouts at the oracle's batch size, share of the matmul peak
    "step_peak_frac": 0.60,  # one RL step's model FLOPs, share of the matmul peak
}


def _ok(ok: bool) -> str:
    return "met" if ok else "**missed**"


def format_speed(r: dict[str, Any]) -> str:
    """The speed benchmark's results as the markdown of ``docs/benchmarks.md``."""
    cfg = r["config"]
    lines = [
        f"Machine: {format_machine(r['machine'])}; load average after: "
        f"{', '.join(str(x) for x in r['machine_after']['load_1_5_15'])}. "
        f"{cfg['threads']} torch thread(s), medians over {cfg['repeats']} repeats, "
        f"wall time {r['wall_s']:.0f} s.",
        "",
    ]
    for section in (
        _format_sampling,
        _format_oracle,
        _format_step,
        _format_algorithms,
        _format_reference,
        _format_trl,
        _format_commands,
    ):
        lines += section(r)
    return "\n".join(lines)


def _format_sampling(r: dict[str, Any]) -> list[str]:
    """KV cache vs recomputed prefix, per response length."""
    lines = [
        "**Sampling** (16 prompts × G = 8 = 128 rows, every row generates the full length):",
        "",
    ]
    rows = [
        [
            s["response_length"],
            f"{s['cached_tok_s']:,.0f}",
            f"{s['uncached_tok_s']:,.0f}",
            f"{s['speedup']:.1f}×",
            _ok(s["speedup"] >= TARGETS["kv_cache_speedup"]),
        ]
        for s in r["sampling"]
    ]
    lines += [
        markdown_table(
            ["response length", "KV cache tok/s", "no cache tok/s", "speed-up", "target ≥ 3×"], rows
        ),
        "",
    ]
    return lines


def _format_oracle(r: dict[str, Any]) -> list[str]:
    """Sampling at the oracle's batch size: the shared-prefix path against the reference."""
    o = r["oracle_sampling"]
    target = TARGETS["oracle_peak_frac"]
    lines = [
        f"**Sampling at the oracle's size** ({o['prefixes']} prefixes of {o['prefix_length']} "
        f"tokens × K = {o['rollouts']} = {o['rows']:,} rows, {o['new_tokens']} new tokens each; "
        f"{o['flops_per_token'] / 1e6:.2f} MFLOP of matmuls per token; share of the "
        f"{r['matmul_peak_flops_per_s'] / 1e9:.1f} GFLOP/s matmul peak):",
        "",
    ]
    rows = [
        ["shared-prefix cache (default)", f"{o['shared_tok_s']:,.0f}",
         f"{o['shared_fraction_of_peak']:.1%}", f"{o['speedup']:.2f}×",
         _ok(o["shared_fraction_of_peak"] >= target)],
        ["reference (list cache, prefix per row)", f"{o['reference_tok_s']:,.0f}",
         f"{o['reference_fraction_of_peak']:.1%}", "1×", ""],
    ]  # fmt: skip
    oracle = o["oracle"]
    rows.append(
        [f"oracle rollouts (`token_values`, {oracle['prefixes']:,} prefixes × K, "
         f"{oracle['rows_per_call']:,} rows a call)", f"{oracle['tok_s']:,.0f}",
         f"{oracle['fraction_of_peak']:.1%}", "", _ok(oracle["fraction_of_peak"] >= target)]
    )  # fmt: skip
    lines += [
        markdown_table(
            ["path", "tokens/s", "share of peak", "speed-up", f"target ≥ {target:.0%}"], rows
        ),
        "",
    ]
    return lines


def _format_step(r: dict[str, Any]) -> list[str]:
    """One RL step: its parts, its FLOPs against the machine's matmul peak."""
    s = r["step"]
    lines = [
        f"**One RL step** (chain, GRPO, {s['rows']} rows, mean completion "
        f"{s['length_mean']:.1f} tokens, {s['params']:,} parameters): "
        f"{s['time_step'] * 1e3:.0f} ms = {s['steps_per_s']:.2f} steps/s.",
        "",
    ]
    parts = [
        ("sample", "time_sample"),
        ("score (verifier)", "time_score"),
        ("advantages (+ reference log-probs)", "time_adv"),
        ("loss forward + backward + optimizer", "time_loss"),
        ("other", "time_other"),
    ]
    lines += [
        markdown_table(
            ["part", "ms", "share"],
            [[p, f"{s[k] * 1e3:.1f}", f"{s[k] / s['time_step']:.0%}"] for p, k in parts],
        ),
        "",
    ]
    if "peak_interleaved_flops_per_s" in s:
        peak_text = (f"GFLOP/s achieved vs an fp32 matmul peak (1024², same threads) measured "
                     f"beside each step, {s['peak_interleaved_flops_per_s'] / 1e9:.1f} GFLOP/s "
                     f"(median; alone, best of a few: {s['peak_flops_per_s'] / 1e9:.1f}): ")  # fmt: skip
    else:  # a results file from before the peak was interleaved
        peak_text = (f"GFLOP/s achieved vs a measured fp32 matmul peak of "
                     f"{s['peak_flops_per_s'] / 1e9:.1f} GFLOP/s (1024², same threads): ")  # fmt: skip
    lines += [
        f"Model FLOPs of one step (every forward and backward, matmuls): "
        f"{s['step_flops'] / 1e9:.2f} GFLOP → {s['achieved_flops_per_s'] / 1e9:.2f} "
        f"{peak_text}"
        f"**{s['fraction_of_peak']:.1%} of peak** (target ≥ "
        f"{TARGETS['step_peak_frac']:.0%}: {_ok(s['fraction_of_peak'] >= TARGETS['step_peak_frac'])}).",
        "",
    ]
    return lines


def _format_algorithms(r: dict[str, Any]) -> list[str]:
    """Advantages + loss + backward of every algorithm, two batch shapes."""
    cfg, s = r["config"], r["step"]
    lines = [
        "**Advantages + loss + backward to log-probs, per algorithm** (trainer's shape "
        f"B = {s['rows']}, T = {s['max_new_tokens']}; and B × T = {cfg['big_batch'][0]} × "
        f"{cfg['big_batch'][1]}):",
        "",
    ]
    big = {b["algo"]: b for b in r["big_batch_algorithms"]}
    rows = [
        [
            a["algo"],
            f"{a['adv_loss_s'] * 1e3:.2f}",
            f"{a['vs_grpo']:.2f}×",
            f"{a['extra_frac_of_step']:+.1%}",
            _ok(a["extra_frac_of_step"] <= TARGETS["algo_overhead_frac"]),
            f"{big[a['algo']]['adv_loss_s'] * 1e3:.1f}",
            f"{big[a['algo']]['vs_grpo']:.2f}×",
        ]
        for a in r["algorithms"]
    ]
    lines += [
        markdown_table(
            [
                "algorithm",
                "ms (step shape)",
                "vs GRPO",
                "extra vs GRPO, share of a step",
                "target ≤ 5 %",
                f"ms ({cfg['big_batch'][0]}×{cfg['big_batch'][1]})",
                "vs GRPO",
            ],
            rows,
        ),
        "",
    ]
    return lines


def _format_reference(r: dict[str, Any]) -> list[str]:
    """Vectorised advantages against the reference loops."""
    cfg = r["config"]
    lines = [
        f"**Vectorised vs reference loops** (`advantages` vs `reference_advantages`, "
        f"B = {cfg['big_batch'][0]}, T = {cfg['big_batch'][1]}):",
        "",
    ]
    rows = [
        [
            a["algo"],
            f"{a['vectorised_s'] * 1e3:.2f}",
            f"{a['reference_s'] * 1e3:,.0f}",
            f"{a['speedup']:,.0f}×",
        ]
        for a in r["reference"]
    ]
    lines += [
        markdown_table(["algorithm", "vectorised ms", "reference loops ms", "speed-up"], rows),
        "",
    ]
    return lines


def _format_trl(r: dict[str, Any]) -> list[str]:
    """Our trainer against TRL's ``GRPOTrainer``, when that part ran."""
    if "trl" not in r:
        return []
    lines: list[str] = []
    t = r["trl"]
    lines += [
        f"**Our trainer vs TRL `GRPOTrainer`** (same GPT-2 weights, {t['rows']} "
        f"completions = {t['rows'] // t['group_size']} prompts × G = "
        f"{t['group_size']}, ≤ {t['max_new_tokens']} new tokens, GRPO loss with "
        f"β = 0 on both sides, {t['steps']} interleaved steps each):",
        "",
    ]
    lines += [
        markdown_table(
            ["trainer", "s/step", "steps/s", "ratio", "target ≥ 3×"],
            [
                [
                    "refimpl Trainer",
                    f"{t['ours_step_s']:.3f}",
                    f"{t['ours_steps_per_s']:.2f}",
                    f"{t['speedup']:.1f}× faster",
                    _ok(t["speedup"] >= TARGETS["trl_speedup"]),
                ],
                [
                    "TRL GRPOTrainer",
                    f"{t['trl_step_s']:.3f}",
                    f"{t['trl_steps_per_s']:.2f}",
                    "1×",
                    "",
                ],
            ],
        ),
        "",
    ]
    return lines


def _format_commands(r: dict[str, Any]) -> list[str]:
    """The demo's and the suite's wall time, when measured (``--commands``)."""
    c = r.get("commands")
    if not c:
        return []
    rows = [["`make demo` (from an empty runs directory)", f"{c['demo_s']:.0f}", "≤ 90",
             _ok(c["demo_s"] <= 90)]]  # fmt: skip
    if "tests_s" in c:
        rows.append([f"`make test`'s tests ({c['tests_summary']})", f"{c['tests_s']:.0f}",
                     "≤ 300", _ok(c["tests_s"] <= 300)])  # fmt: skip
    return [
        "**The README's two jobs** (each run once, end to end, in a subprocess):",
        "",
        markdown_table(["job", "s", "target s", "verdict"], rows),
        "",
    ]
