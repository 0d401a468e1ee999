"""How the claims pages write a number, a comparison and a verdict.

``fmt`` and ``table``; ``describe``, a comparison in the ledger's words (its size, n, df, MDD
and seeds for power); the cells every paired table shares; and the verdict words: "not
compared" where a pair's seeds ran on two machines, "needs N seeds …; not decidable on CPU",
``both`` for sub-tests that must agree, and the short forms of the summaries. The statistics
behind them are in ``refimpl.bench.stats``.
"""

from __future__ import annotations

import math

from refimpl.bench import stats as st
from refimpl.bench.stats import Comparison, Interval


def fmt(x: float | None, se: float | None = None, digits: int = 3, sign: bool = False) -> str:
    if x is None or not math.isfinite(x):
        return "—"
    s = f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"
    return s if se is None or not math.isfinite(se) else f"{s} ± {se:.{digits}f}"


def fmt_df(c: Comparison) -> str:
    return "one seed: normal" if c.one_seed else f"{c.df:.0f}"


def fmt_power(c: Comparison) -> str:
    n = c.seeds_needed
    if c.one_seed or (isinstance(n, float) and math.isnan(n)):
        return "—"
    if n is None:
        return "no n (the mean is 0)"
    return "more than 10⁶" if math.isinf(n) else f"{n}"


def fmt_interval(t: Interval, scale: float = 1.0) -> str:
    if not t.reached:
        return f"> {t.lo / scale:.0f}"
    return f"({t.lo / scale:.0f}, {t.hi / scale:.0f}]"


def seed_list(seeds) -> str:
    """0, 1, 2, 3 → "0–3"; 0, 2 → "0, 2"."""
    s = sorted(seeds)
    if len(s) > 2 and s == list(range(s[0], s[-1] + 1)):
        return f"{s[0]}–{s[-1]}"
    return ", ".join(map(str, s))


def table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def left_out_note(c: Comparison) -> str:
    """ "seeds 0–2 left out: …" where a pair's seeds ran on two machines, else ""."""
    if not c.left_out:
        return ""
    return (f"seed{'s' if len(c.left_out) > 1 else ''} {seed_list(c.left_out)} left out: the "
            "two arms ran on different machines")  # fmt: skip


def fmt_looks(c: Comparison) -> str:
    """ ", 2 looks" for a study extended after a look (its bars at α / looks), else ""."""
    return f", {c.looks} looks" if c.looks > 1 else ""


def describe(c: Comparison, label: str, digits: int = 3) -> str:
    """A comparison in the ledger's words: its size, n, df, looks (where more than one), MDD
    and seeds for power."""
    if c.n == 0:
        return f"{label}: " + (f"not compared ({left_out_note(c)})" if c.left_out else "not run")
    note = f"; {left_out_note(c)}" if c.left_out else ""
    if c.one_seed:
        ((s, _),) = c.per_seed.items()
        return (f"{label} {fmt(c.diff, c.se, digits, sign=True)} (one seed, {s}: s.e. over "
                f"problems, normal quantile, not the spread between seeds{fmt_looks(c)}; MDD "
                f"{c.mdd:.{digits}f}{note})")  # fmt: skip
    per = ", ".join(f"{v:+.{digits}f}" for v in c.per_seed.values())
    return (f"{label} {fmt(c.diff, c.se, digits, sign=True)} over {c.n} seeds (df {c.df:.0f}"
            f"{fmt_looks(c)}, MDD {c.mdd:.{digits}f}, 80 % power at {fmt_power(c)} seeds; per "
            f"seed {per}{note})")  # fmt: skip


def looks_sentence(comparisons: dict[str, Comparison]) -> str:
    """The sentence under a table that says which of its ``comparisons`` (label → comparison)
    are corrected for looks, and by how many; "" where none is."""
    by = {}
    for label, c in comparisons.items():
        if c.n and c.looks > 1:
            by.setdefault(c.looks, []).append(label)
    if not by:
        return ""
    parts = "; ".join(f"{', '.join(labels)}: {n} looks" for n, labels in sorted(by.items()))
    return (
        "Corrected for looks (seeds added after a comparison had been read, counted in "
        f"`claims_study.py`; its t bar and MDD at α / looks, Bonferroni): {parts}.\n"
    )


def comparison_cells(c: Comparison, sign: int = +1, digits: int = 3) -> list[str]:
    """The columns every paired table shares: seeds (and the looks, where more than one), over
    seeds, df, bar, MDD, power, verdict; the bar and MDD at α / looks."""
    seeds = seed_list(c.per_seed) + (" (one seed" if c.one_seed else f" (n {c.n}")
    seeds += f"; {c.looks} looks)" if c.looks > 1 else ")"
    if c.left_out:
        seeds += f"; {left_out_note(c)}"
    return [seeds, fmt(c.diff, c.se, digits, sign=True), fmt_df(c), f"{st.critical(c.df, c.looks):.2f}",
            fmt(c.mdd, digits=digits), fmt_power(c), c.verdict(sign)]  # fmt: skip


COMPARISON_HEAD = ["seeds", "over seeds (± s.e.)", "df", "t bar (s.e.)", "MDD (80 %)",
                   "seeds for 80 % power", "verdict on “first > second”"]  # fmt: skip

#: The smallest difference a real-model row should be able to detect (80 % power), and the
#: most paired seeds a row can have on CPU: a real-model run costs about 6 CPU-minutes, so 20
#: seeds of a pair are 40 runs, about 2 hours of a 2-core machine (the α₂ row's 18 seeds are
#: the largest the ledger ran).
MDD_TARGET = 0.05

CPU_SEEDS = 20


def seeds_to_decide(c: Comparison) -> float | None:
    """Paired seeds for an MDD of ``MDD_TARGET`` at the spread the seeds show (None: one
    seed or none, no spread to go by)."""
    if c.n < 2 or not math.isfinite(c.sd):
        return None
    return st.seeds_for_power(MDD_TARGET, c.sd)


def not_decidable(c: Comparison) -> str:
    """ "needs N seeds for an MDD of 0.05; not decidable on CPU" for a real-model comparison
    that would need more than ``CPU_SEEDS`` seeds, else ""."""
    n = seeds_to_decide(c)
    if n is None or n <= CPU_SEEDS:
        return ""
    shown = "more than 10⁶" if math.isinf(n) else f"{n}"
    return f"needs {shown} seeds for an MDD of {MDD_TARGET:g}; not decidable on CPU"


def describe_real(c: Comparison, label: str) -> str:
    """``describe`` of a real-model comparison, with "needs N seeds …; not decidable on CPU"
    where it is "not shown" and would need more than ``CPU_SEEDS`` seeds."""
    note = not_decidable(c) if c.n and c.verdict() == "not shown" else ""
    return describe(c, label) + (f" ({note})" if note else "")


def real_verdict(c: Comparison, sign: int = +1, seeds_note: bool = False) -> str:
    """The verdict (a ledger cell: the word alone); with ``seeds_note``, a "not shown" that
    the CPU cannot decide says how many seeds it needs (a difference that holds or is
    contradicted is decided, whatever its MDD)."""
    if not c.n:
        return not_compared(c)
    v = c.verdict(sign)
    note = not_decidable(c) if seeds_note and v == "not shown" else ""
    return v + (f" ({note})" if note else "")


def not_compared(c: Comparison) -> str:
    return "not compared (its seeds ran on two machines)" if c.left_out else "not run"


def both(*verdicts: str) -> str:
    """One verdict from several that must agree (else the weaker, "not shown")."""
    vs = [v for v in verdicts if v not in ("not measured", "not testable")]
    if not vs:
        return "not testable" if "not testable" in verdicts else "not measured"
    return vs[0] if all(v == vs[0] for v in vs) else "not shown"


def short(c: Comparison) -> str:
    """``+0.037 ± 0.022, 3 seeds, 2 up and 0 down`` (or "one seed")."""
    if c.n == 0:
        return "not run"
    if c.one_seed:
        return f"{fmt(c.diff, c.se, sign=True)}, one seed, s.e. over problems"
    up = sum(v > 0 for v in c.per_seed.values())
    down = sum(v < 0 for v in c.per_seed.values())
    return f"{fmt(c.diff, c.se, sign=True)}, {c.n} seeds, {up} up and {down} down"


def verdict_short(c: Comparison, sign: int = +1) -> str:
    """``not shown (+0.037 ± 0.022, 3 seeds, 2 up and 0 down)``."""
    return f"{c.verdict(sign)} ({short(c)})" if c.n else "not run"


def vs(cmps: dict[str, Comparison]) -> str:
    """``not shown against DAPO (…); not run against DAPO without overlong shaping``."""
    return "; ".join(
        f"{c.verdict()} against {k} ({short(c)})" if c.n else f"not run against {k}"
        for k, c in cmps.items()
    )
