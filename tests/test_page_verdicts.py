"""Every verdict a docs page prints, re-derived from the figures printed beside it.

The pages' verdicts come from ``refimpl.bench.stats`` (Student's t, 95 % two-sided, at each
comparison's degrees of freedom; Bonferroni over looks for a study extended after a look).
These tests do not import it: they read the committed pages, take each comparison's printed
difference, s.e. and df, and judge it again with the short rule below, written out here from
the rule's definition. The printed figures are rounded, so a comparison whose |t| lies within
rounding of the bar is counted as undecidable at the printed precision and skipped; each test
asserts how many it did decide, so that it cannot pass by reading nothing.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from scipy.stats import norm
from scipy.stats import t as student_t

ROOT = Path(__file__).resolve().parents[1]
NUM = r"[+-]?\d+\.\d+"


# --- the rule, written out independently -------------------------------------------------------


def bar(df: float, looks: int = 1) -> float:
    """t at 1 − 0.025 / looks (the normal quantile for an infinite df)."""
    q = 1 - 0.025 / looks
    return float(norm.ppf(q) if math.isinf(df) else student_t.ppf(q, df))


def z_range(diff: str, se: str, sign: int = 1) -> tuple[float, float]:
    """The range of sign · diff / se over the values that print as ``diff`` and ``se``."""
    h = 0.5 * 10 ** -len(diff.split(".")[1])
    d, s = float(diff), float(se)
    s_lo, s_hi = s - h, s + h
    if s_lo <= 0:
        return -math.inf, math.inf
    corners = [sign * x / y for x in (d - h, d + h) for y in (s_lo, s_hi)]
    return min(corners), max(corners)


def judged(diff: str, se: str, df: float, sign: int = 1, looks: int = 1) -> str | None:
    """holds / contradicted / not shown, or None when the printed figures cannot decide."""
    lo, hi = z_range(diff, se, sign)
    b = bar(df, looks)
    if lo > b:
        return "holds"
    if hi < -b:
        return "contradicted"
    if -b < lo and hi < b:
        return "not shown"
    return None


def mdd_range(se: str, df: float, looks: int = 1) -> tuple[float, float]:
    """(t at 1 − 0.025 / looks + t at 0.80) · s.e., over the s.e. that prints as ``se``."""
    h = 0.5 * 10 ** -len(se.split(".")[1])
    k = bar(df, looks) + float(norm.ppf(0.8) if math.isinf(df) else student_t.ppf(0.8, df))
    return k * (float(se) - h), k * (float(se) + h)


def block(page: str, prefix: str, name: str) -> str:
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    start, end = f"<!-- {prefix}:{name} -->", f"<!-- /{prefix}:{name} -->"
    assert start in text and end in text, f"docs/{page}: no block {name}"
    return text[text.index(start) + len(start) : text.index(end)]


def rows(table: str) -> list[dict[str, str]]:
    """Each row of the first markdown table in ``table`` as {header: cell}."""
    lines = [line.strip() for line in table.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split(" | ")]
    # cells are split on " | ": a cell may hold a bar of its own (ρ(H, |A*|))
    return [
        dict(zip(head, (c.strip() for c in line.strip("|").split(" | ")))) for line in lines[2:]
    ]


# --- the ceiling's tables (docs/credit.md) -----------------------------------------------------

#: How often each ceiling block's study was read before it stopped: countdown ran seeds 0-4,
#: was read (H at 1.1 MDD), then got seeds 5-19 (scripts/experiments/ceiling/ceiling_runs.sh,
#: step 4). Every other study ran the seeds it declared before its first run.
LOOKS = {"countdown": 2}
#: The comparison tables of the ceiling section: block → the column of the mean ± s.e.
CEILING_TABLES = {
    "headroom": "mean ± paired s.e.",
    "countdown": "mean ± paired s.e.",
    "probes": "H ± paired s.e.",
    "warmup": "mean ± paired s.e.",
}


def _comparison_rows(name: str):
    """(row, diff, se, df, looks) of every comparison row of the ceiling block ``name``."""
    text = block("credit.md", "ceiling", name)
    tables = ["\n".join(t) for t in _tables(text)]
    col = CEILING_TABLES[name]
    for table in tables:
        for row in rows(table):
            m = re.fullmatch(rf"({NUM}) ± (\d+\.\d+)", row.get(col, ""))
            df = re.fullmatch(r"\d+ \((\d+)\)", row.get("seeds (df)", ""))
            if m and df:
                yield row, m.group(1), m.group(2), float(df.group(1)), LOOKS.get(name, 1)


def _tables(text: str) -> list[list[str]]:
    out, cur = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            out.append(cur)
            cur = []
    return out + ([cur] if cur else [])


@pytest.mark.parametrize("name", sorted(CEILING_TABLES))
def test_every_ceiling_comparison_row_follows_from_its_difference_se_and_df(name):
    """t = diff / s.e.; p two-sided at df (× the looks); MDD = (t₁₋₀.₀₂₅/L + t₀.₈₀) · s.e.;
    "≥ 3 MDD" is yes exactly when diff ≥ 3 MDD."""
    checked = 0
    for row, diff, se, df, looks in _comparison_rows(name):
        z_lo, z_hi = z_range(diff, se)
        if "t" in row:
            t = float(row["t"])
            assert z_lo - 0.005 <= t <= z_hi + 0.005, (name, row)
            p_hi = min(1.0, looks * 2 * student_t.sf(max(abs(t) - 0.005, 0), df))
            p_lo = min(1.0, looks * 2 * student_t.sf(abs(t) + 0.005, df))
            p = float(row["p (two-sided)"])
            assert p_lo - 0.0005 <= p <= p_hi + 0.0005, (name, row, p_lo, p_hi)
            decided = judged(diff, se, df, looks=looks)
            if decided is not None:
                assert (p < 0.05) == (decided != "not shown"), (name, row, decided)
        lo, hi = mdd_range(se, df, looks)
        mdd = float(row["MDD"])
        assert lo - 0.0005 <= mdd <= hi + 0.0005, (name, row, lo, hi)
        ratio = next(v for k, v in row.items() if k.endswith("/ MDD"))
        resolved = next(v for k, v in row.items() if k.endswith("≥ 3 MDD"))
        if abs(float(ratio) - 3) > 0.01:
            assert resolved == ("yes" if float(ratio) >= 3 else "no"), (name, row)
        checked += 1
    assert checked >= {"headroom": 4, "countdown": 2, "probes": 2, "warmup": 8}[name]


#: "… +0.008 ± 0.004 … (t = 2.29 at 4 df, not shown by the t rule" and the matched arm's
#: "-0.005 ± 0.002 over 2 paired seeds (t = -2.09 at 1 df, MDD 0.032): not shown by the t rule"
SENTENCE = re.compile(
    rf"({NUM}) ± (\d+\.\d+)[^()|\n]*\(t = ({NUM}) at (\d+) df,(?: MDD (\d+\.\d+)\):)? "
    r"(holds|contradicted|not shown) by the t rule"
)
KL_SENTENCE = re.compile(
    rf"worth ({NUM}) ± (\d+\.\d+) of pass@1 gain \([^,]+, (holds|contradicted|not shown) by "
    r"the t rule, MDD (\d+\.\d+)\)"
)


def test_every_ceiling_sentence_verdict_follows_from_its_figures():
    """The headline sentences: each "(t = T at D df, VERDICT by the t rule)" judged again
    from its printed difference and s.e. (claimed side: the first arm gains more)."""
    text = block("credit.md", "ceiling", "reading") + block("credit.md", "ceiling", "matched")
    found = SENTENCE.findall(text)
    assert len(found) >= 3, found
    decided = 0
    for diff, se, t, df, mdd, verdict in found:
        z_lo, z_hi = z_range(diff, se)
        assert z_lo - 0.005 <= float(t) <= z_hi + 0.005, (diff, se, t)
        if mdd:
            lo, hi = mdd_range(se, float(df))
            assert lo - 0.0005 <= float(mdd) <= hi + 0.0005
        expected = judged(diff, se, float(df))
        if expected is None:  # the printed t, finer than diff / s.e., decides it then
            expected = judged_t(t, float(df))
        assert verdict == expected, (diff, se, t, df, verdict)
        decided += 1
    # The KL term's sentence gives no df: it is the 5 paired seeds of the headroom table.
    ((diff, se, verdict, mdd),) = KL_SENTENCE.findall(text)
    assert verdict == judged(diff, se, 4.0)
    lo, hi = mdd_range(se, 4.0)
    assert lo - 0.0005 <= float(mdd) <= hi + 0.0005
    assert decided >= 3


def judged_t(t: str, df: float) -> str | None:
    lo, hi = float(t) - 0.005, float(t) + 0.005
    b = bar(df)
    return (
        "holds"
        if lo > b
        else "contradicted"
        if hi < -b
        else "not shown"
        if -b < lo and hi < b
        else None
    )


# --- the claims ledger (docs/claims.md) --------------------------------------------------------

#: "toy − DAPO +0.010 ± 0.008 over 5 seeds (df 4, MDD 0.029" and the like; a comparison of a
#: study extended after a look says how often it was read: "(df 10, 2 looks, MDD 0.045"
LEDGER_COMPARISON = re.compile(
    rf"(?:^|; )(?P<label>[^;]*?) (?P<d>{NUM}) ± (?P<s>\d+\.\d+)(?: in pass@1 gain)? over "
    r"(?P<n>\d+) seeds \(df (?P<df>\d+)(?:, (?P<looks>\d+) looks)?, MDD (?P<mdd>\d+\.\d+)"
)

#: How often each extended comparison of the ledger was read, from the history of its result
#: files (scripts/experiments/claims/claims_study.py, "Looks"): a pass read before the next
#: was planned is a look. The real model ran seeds 0-2 (2026-12-03), read; 3-5 (and DAPO
#: without overlong shaping 0-2; 2026-12-04/05), read; 6-17 of GTPO and GTPO α₂ = 0, and
#: GRPO-S 3-5 (2026-12-06). The long chain: the credit study's seeds 0-4, read; then 5-10.
#: (row's claim starts with, comparison label starts with) → looks; every other: 1.
LEDGER_LOOKS = {
    ("GTPO beats DAPO", "real − DAPO"): 2,
    ("GRPO-S beats DAPO", "real − DAPO"): 2,
    ("GTPO keeps entropy", "real held-out entropy − DAPO"): 2,
    ("GRPO-S keeps entropy", "real held-out entropy − DAPO"): 2,
    ("The entropy weighting is the driver", "real"): 3,
    ("GRPO-S falls less than DAPO", ""): 2,
}
#: The labels above that are the DAPO arm with overlong shaping only (the no-shape arm's
#: pairs: GTPO's ran within the second pass, 1 look; GRPO-S's were read on seeds 0-2 across
#: machines after the second pass, then got seeds 3-5: 2 looks).
NOSHAPE_LOOKS = {"GTPO beats DAPO": 1, "GTPO keeps entropy": 1, "GRPO-S beats DAPO": 2,
                 "GRPO-S keeps entropy": 2}  # fmt: skip


def expected_looks(claim: str, label: str) -> int:
    if label.startswith("real") and label.endswith("without overlong shaping"):
        return next((n for k, n in NOSHAPE_LOOKS.items() if claim.startswith(k)), 1)
    return next((n for (k, lab), n in LEDGER_LOOKS.items()
                 if claim.startswith(k) and label.startswith(lab)), 1)  # fmt: skip


def looks_of(c: re.Match) -> int:
    return int(c["looks"] or 1)


#: The side each claim is made on, stated from the claim's own words (+1: the first arm's
#: figure is claimed larger); a claim not named here is claimed on the + side.
CLAIMED_SIDE = {"GRPO-S falls less than DAPO": -1, "TEPO trains more stably than DAPO": -1}


def _ledger():
    for row in rows(block("claims.md", "claims", "ledger")):
        claim = row["claim"]
        sign = next((s for k, s in CLAIMED_SIDE.items() if claim.startswith(k)), +1)
        comparisons = list(
            LEDGER_COMPARISON.finditer(row["numbers (± s.e.; df, MDD, seeds for 80 % power)"])
        )
        yield claim, sign, row, comparisons


def _verdict_parts(cell: str) -> list[tuple[str | None, str]]:
    """ "against DAPO: not shown; against X: holds" → [("DAPO", ...), ("X", ...)]; a single
    verdict → [(None, verdict)]."""
    parts = []
    for part in cell.split("; "):
        m = re.fullmatch(r"against (.+?): (holds|contradicted|not shown)", part)
        if m:
            parts.append((m.group(1), m.group(2)))
    if parts:
        return parts
    m = re.fullmatch(r"(holds|contradicted|not shown)", cell)
    return [(None, m.group(1))] if m else []


def test_every_ledger_comparison_has_the_mdd_of_its_se_df_and_looks():
    checked = 0
    for claim, _, _, comparisons in _ledger():
        for c in comparisons:
            lo, hi = mdd_range(c["s"], float(c["df"]), looks_of(c))
            assert lo - 0.0005 <= float(c["mdd"]) <= hi + 0.0005, (claim, c.group(0))
            checked += 1
    assert checked >= 25


def test_every_ledger_comparison_states_the_looks_its_history_had():
    """A comparison whose seeds were added after it had been read says so ("N looks"), with
    the count of its history (``LEDGER_LOOKS``); one read once says nothing. The sentence
    under the ledger names each corrected row and its looks."""
    corrected: dict[int, set[str]] = {}
    for claim, _, _, comparisons in _ledger():
        for c in comparisons:
            assert looks_of(c) == expected_looks(claim, c["label"]), (claim, c.group(0))
            if looks_of(c) > 1:
                corrected.setdefault(looks_of(c), set()).add(claim.split(" (")[0].split(", ")[0])
    assert set(corrected) == {2, 3}, corrected
    ledger = block("claims.md", "claims", "ledger")
    note = next(line for line in ledger.splitlines() if line.startswith("Corrected for looks"))
    for n, claims in corrected.items():
        (part,) = [p for p in note.rstrip(".").split("; ") if p.endswith(f": {n} looks")]
        named = part.split(": the comparisons marked “N looks” in the rows ")[-1]
        assert set(named.removesuffix(f": {n} looks").split(", ")) == claims, (n, part)


def test_the_long_chain_verdict_follows_from_its_worst_falls_at_their_looks():
    """The long-chain row's verdict is that of both worst falls (GRPO-S − DAPO, GRPO-S −
    GRPO), each judged at its stated looks on the claimed side (GRPO-S falls less: −)."""
    ((claim, sign, row, comparisons),) = [r for r in _ledger()
                                          if r[0].startswith("GRPO-S falls less")]  # fmt: skip
    falls = [c for c in comparisons if c["label"].startswith("worst fall")]
    assert len(falls) == 2 and all(looks_of(c) == 2 for c in falls), falls
    verdicts = {judged(c["d"], c["s"], float(c["df"]), sign, looks_of(c)) for c in falls}
    assert None not in verdicts and len(verdicts) == 1, verdicts
    assert row["toy verdict"] == verdicts.pop(), claim


def test_every_ledger_verdict_follows_from_its_comparison():
    """Each verdict of the ledger that rests on one comparison (a testbed's "against X" part,
    or a testbed's only comparison) is the t rule applied to that comparison's printed
    difference, s.e. and df, on the claim's side, at the looks it states."""
    decided = 0
    for claim, sign, row, comparisons in _ledger():
        for testbed, column in (("toy", "toy verdict"), ("real", "real-model verdict")):
            own = [c for c in comparisons if c["label"].startswith(testbed)
                   or (testbed == "toy" and c["label"].startswith("long chain"))]  # fmt: skip
            for against, verdict in _verdict_parts(row[column]):
                if against is None:
                    match = own if len(own) == 1 else []
                else:
                    match = [c for c in own if c["label"] == f"{testbed} − {against}"]
                if len(match) != 1:
                    continue
                (c,) = match
                expected = judged(c["d"], c["s"], float(c["df"]), sign, looks_of(c))
                if expected is None:
                    continue
                assert verdict == expected, (claim, testbed, against, c.group(0), verdict)
                decided += 1
    assert decided >= 20, decided


#: A comparison with the prompt as the unit and its own verdict in brackets: "+0.113 ± 0.017
#: over 16 prompts (128 completions; df 15, MDD 0.050) [holds]"
PROMPT_COMPARISON = re.compile(
    rf"(?P<d>{NUM}) ± (?P<s>\d+\.\d+) over (?P<n>\d+) prompts \(\d+ (?:completions|tokens); "
    r"df (?P<df>\d+), MDD (?P<mdd>\d+\.\d+)\)[^\[;]*\[(?P<v>holds|contradicted|not shown)\]"
)


def test_every_credit_comparison_of_the_ledger_follows_from_its_figures():
    """The token-credit rows test each batch with the prompt as the unit (df = prompts − 1)
    and print each sub-test's verdict in brackets: each is the t rule on its printed figures
    (claimed side: the entropy marks, the credit agrees, the blame lands: all +), and its MDD
    is that of its s.e. and df."""
    decided = 0
    for claim, _, row, _ in _ledger():
        for c in PROMPT_COMPARISON.finditer(row["numbers (± s.e.; df, MDD, seeds for 80 % power)"]):
            assert int(c["df"]) == int(c["n"]) - 1, (claim, c.group(0))
            lo, hi = mdd_range(c["s"], float(c["df"]))
            assert lo - 0.0005 <= float(c["mdd"]) <= hi + 0.0005, (claim, c.group(0))
            expected = judged(c["d"], c["s"], float(c["df"]))
            if expected is not None:
                assert c["v"] == expected, (claim, c.group(0))
                decided += 1
    assert decided >= 10, decided
