"""docs/claims.md, the claims ledger: its statistics, its pairing and its freshness.

The runs behind it are heavy (``scripts/experiments/claims/claims_study.py``, the collapse
benchmark) and are not tests; these tests check, in seconds, that what the page says is what the committed result
files give, that the statistics are the ones the page defines, and that the arms of a seed
really were paired. The tests named ``test_slip_*`` each pin one slip of the ledger's first
version (issue 39): each failed on that version.
"""

from __future__ import annotations

import importlib.util
import json
import math
import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from refimpl.bench import stats  # the statistics every page uses

ROOT = Path(__file__).resolve().parents[1]
CLAIMS_DIR = "scripts/experiments/claims"  # the experiment: its scripts, results/ and README
CLAIMS = ROOT / CLAIMS_DIR


def _script(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, CLAIMS / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


report = _script("claims_page", "claims_page.py")
claims_real = _script("claims_real", "run_real.py")
# The modules beside claims_page.py, as the report loaded them: each name from where it is defined.
arms = sys.modules["arms"]
claims_results = sys.modules["claims_results"]
wording = sys.modules["wording"]
real_runs = sys.modules["real_runs"]
real_tables = sys.modules["real_tables"]
toy_testbed = sys.modules["toy_testbed"]
learning_curves = sys.modules["learning_curves"]
ledger = sys.modules["claims_ledger"]


def _eval(correct: list[int], n: int, step: int = 24, success: float | None = None) -> dict:
    rate = sum(correct) / (n * len(correct))
    return {"step": step, "correct": correct, "n_samples": n, "success": success or rate}


def _cells(table: str, row_start: str) -> dict[str, str]:
    """One row of a markdown table as {header: cell}."""
    lines = [line for line in table.splitlines() if line.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == row_start:
            return dict(zip(head, cells))
    raise AssertionError(f"no row {row_start!r} in\n{table}")


def _block(page: str, name: str) -> str:
    m = re.search(rf"<!-- claims:{name} -->\n(.*?)<!-- /claims:{name} -->", page, re.S)
    assert m, f"no block {name!r}"
    return m.group(1)


# -- the statistics the page defines -----------------------------------------------------------
def test_paired_difference_is_the_mean_of_per_problem_differences_by_hand():
    # Rates a = (1, 0, 0.5), b = (0.5, 0, 0.5): differences (0.5, 0, 0), mean 1/6,
    # sd = sqrt(((1/3)² + 2·(1/6)²) / 2) = sqrt(1/12), s.e. = sd / √3 = 1/6.
    d, se = stats.paired(_eval([4, 0, 2], 4), _eval([2, 0, 2], 4))
    assert d == pytest.approx(1 / 6)
    assert se == pytest.approx(1 / 6)


def test_paired_refuses_evaluations_of_different_sizes():
    with pytest.raises(ValueError, match="different numbers of problems"):
        stats.paired(_eval([1, 2], 4), _eval([1, 2, 3], 4))


# Student's t quantiles from a printed table (not from scipy): t₀.₉₇₅ and t₀.₈₀.
T975 = {2: 4.3027, 4: 2.7764, 7: 2.3646, 8: 2.3060, 9: 2.2622}
T80 = {2: 1.0607, 4: 0.9410, 7: 0.8960, 8: 0.8889, 9: 0.8834}


@pytest.mark.parametrize(
    ("diff", "se", "df", "sign", "expected"),
    [
        (0.10, 0.04, 2, +1, "not shown"),  # 2.5 s.e.: beyond 2, not beyond t₂ = 4.303
        (0.10, 0.0230, 2, +1, "holds"),  # 4.35 s.e. (the toy entropy row's size) > 4.303
        (-0.10, 0.0289, 2, +1, "not shown"),  # 3.46 s.e. (the toy TEPO − DAPO size) < 4.303
        (-0.10, 0.0230, 2, +1, "contradicted"),
        (0.10, 0.0230, 2, -1, "contradicted"),  # a claimed decrease
        (0.10, 0.04, math.inf, +1, "holds"),  # one seed: normal, 2.5 > 1.96
        (0.07, 0.04, math.inf, +1, "not shown"),  # 1.75 < 1.96
        (0.10, 0.045, 7, +1, "not shown"),  # 2.22 < t₇ = 2.365
        (0.10, 0.041, 7, +1, "holds"),  # 2.44 > 2.365
        (0.10, math.nan, 2, +1, "not measured"),
    ],
)
def test_verdict_rule_is_student_t_at_the_degrees_of_freedom(diff, se, df, sign, expected):
    assert stats.verdict(diff, se, df, sign) == expected


@pytest.mark.parametrize("df", [2, 4, 7, 8, 9])
def test_critical_value_and_mdd_are_the_printed_t_quantiles(df):
    assert stats.critical(df) == pytest.approx(T975[df], abs=1e-3)
    assert stats.mdd(0.01, df) == pytest.approx((T975[df] + T80[df]) * 0.01, abs=1e-5)
    assert stats.critical(math.inf) == pytest.approx(1.960, abs=1e-3)
    assert stats.mdd(1.0, math.inf) == pytest.approx(1.960 + 0.842, abs=1e-3)


def test_seeds_for_power_by_hand():
    # sd 1, mean 1: at n = 9, (2.306 + 0.889) / 3 = 1.065 > 1; at n = 10,
    # (2.262 + 0.883) / √10 = 0.9946 ≤ 1: ten seeds.
    assert stats.seeds_for_power(1.0, 1.0) == 10
    assert stats.seeds_for_power(-1.0, 1.0) == 10  # the size, not the sign
    assert stats.seeds_for_power(0.0, 1.0) is None  # no n has power against a zero mean
    # The GTPO − DAPO: per-seed −0.253, +0.148, +0.048 (sd 0.21, mean −0.019): about
    # (2.80 · 0.208 / 0.019)² ≈ 940 by the normal quantiles; hundreds, not eight.
    v = np.array([-0.253, 0.148, 0.048])
    n = stats.seeds_for_power(v.mean(), v.std(ddof=1))
    assert 800 < n < 1100
    assert stats.seeds_for_power(1.0, 1e-9) == 2


def test_a_comparison_over_seeds_has_n_minus_one_degrees_of_freedom_one_seed_is_normal():
    c = stats.over_seeds({0: 0.1, 1: 0.2, 2: 0.3})
    assert (c.n, c.df) == (3, 2)
    assert c.diff == pytest.approx(0.2)
    assert c.se == pytest.approx(0.1 / math.sqrt(3))  # sd 0.1
    one = stats.over_seeds({4: 0.1}, {4: 0.03})
    assert one.one_seed and one.se == 0.03 and math.isinf(one.df)
    assert one.verdict() == "holds"  # 3.3 > 1.96
    assert math.isnan(one.seeds_needed)


# -- censored times to a threshold ---------------------------------------------------------------
GRID = [0, 4, 8, 12]


def test_a_time_read_on_the_evaluation_grid_is_an_interval():
    assert stats.crossing(GRID, 1) == stats.Interval(0, 4)  # there by the first evaluation
    assert stats.crossing(GRID, 2) == stats.Interval(4, 8)
    assert stats.crossing(GRID, None) == stats.Interval(12, math.inf)  # never: after 12
    with pytest.raises(ValueError):
        stats.crossing(GRID, 0)


@pytest.mark.parametrize(
    ("tepo", "base", "expected"),
    [
        (1, 2, (0.0, 1.0)),  # TEPO by 4, the baseline first at 8: only below 1 (the issue)
        (1, 3, (0.0, 0.5)),  # first at 12: T ≤ 4 and B > 8, so below 0.5
        (1, None, (0.0, 4 / 12)),  # the baseline never: below TEPO's 4 / the last step 12
        (None, 2, (12 / 8, math.inf)),  # TEPO never: a lower bound only
        (2, 1, (1.0, math.inf)),  # the baseline by the first evaluation: no upper bound
        (None, None, (0.0, math.inf)),
    ],
)
def test_the_ratio_of_censored_times_is_bounded_not_a_number(tepo, base, expected):
    lo, hi = stats.ratio_bounds(stats.crossing(GRID, tepo), stats.crossing(GRID, base))
    assert (lo, hi) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("bounds", "expected"),
    [
        ([(0, 0.5), (0, 0.4), (0, 1.0)], "holds"),  # median of the upper bounds 0.5
        ([(1.0, 2), (1.5, math.inf), (0.5, 2)], "contradicted"),  # medians 1.0 … 2
        ([(0, 1.0), (0, 1.0), (0, 1 / 3)], "not shown (median ratio < 1.00)"),
        ([(0.45, math.inf)] * 3, "not shown (median ratio > 0.45)"),
        ([(0.6, 0.9)] * 3, "not shown (median ratio between 0.60 and 0.90)"),
        ([(0, math.inf)] * 3, "not shown (the data do not bound the median ratio)"),
    ],
)
def test_the_speed_verdict_judges_the_bounds_of_the_median_ratio(bounds, expected):
    assert stats.speed_verdict(*stats.median_bounds(bounds)) == expected


def test_steps_to_threshold_first_evaluation_and_interpolation_by_hand():
    base = {"success": 0.10}
    run = {"evals": [_eval([0], 1, 8, 0.15), _eval([0], 1, 16, 0.25), _eval([0], 1, 24, 0.3)]}
    # 0.20 is first reached at step 16; linearly between (8, 0.15) and (16, 0.25): step 12.
    first, interp = learning_curves.steps_to(run, base, 0.20)
    assert (first, interp) == (16.0, pytest.approx(12.0))
    assert learning_curves.steps_to(run, base, 0.5) == (math.inf, math.inf)
    # Reached at the first evaluation: between (0, 0.10) and (8, 0.15), halfway: step 4.
    assert learning_curves.steps_to(run, base, 0.125) == (8.0, pytest.approx(4.0))
    assert learning_curves.real_crossing(run, base, 0.20) == stats.Interval(8, 16)
    assert learning_curves.real_crossing(run, base, 0.5) == stats.Interval(24, math.inf)


def test_worst_drop_is_the_largest_fall_between_consecutive_evaluations():
    assert learning_curves.worst_drop([0.1, 0.5, 0.3, 0.4, 0.35]) == pytest.approx(0.2)
    assert learning_curves.worst_drop([0.1, 0.2, 0.3]) == 0.0


# -- pairing only on the seeds both arms have ------------------------------------------------
def _run(correct: list[int], step: int = 12) -> dict:
    """A one-evaluation result file of 4 samples per problem, as claims_real.py writes it."""
    e = _eval(correct, 4, step)
    e |= {"success_se": 0.0, "entropy": 0.5, "mean_tokens": 10.0}
    e |= {f"pass@{k}": e["success"] for k in (1, 2, 4)}
    return {"evals": [e], "steps": [], "args": {"eval_samples": 4}}


def test_arms_with_different_seeds_pair_on_the_seeds_both_have():
    real = {("dapo", s): _run([4, 0, 0, 0]) for s in range(5)}
    real |= {("gtpo", s): _run([4, 4, 0, 0] if s < 2 else [4, 2, 0, 0]) for s in (0, 1, 2)}
    c = real_runs.real_compare(real, "gtpo", "dapo")
    assert sorted(c.per_seed) == [0, 1, 2] and (c.n, c.df) == (3, 2)
    # per seed: +0.25, +0.25, +0.125 (rate differences 1 and 0.5 on one problem of four)
    assert c.diff == pytest.approx((0.25 + 0.25 + 0.125) / 3)
    table = real_tables.real_paired_table(real)
    row = _cells(table, "GTPO (α₂ = 0.1) − DAPO")
    # seeds 0-2 of both arms ran in one pass (claims_study.py): one look, the bar at 0.975
    assert row["seeds"] == "0–2 (n 3)" and row["df"] == "2" and c.looks == 1
    assert float(row["t bar (s.e.)"]) == pytest.approx(T975[2], abs=0.005)
    # with the second pass's seeds 3-4 of GTPO, the pair was read before they came: 2 looks,
    # its bar t at 1 − 0.025 / 2
    real |= {("gtpo", s): _run([4, 4, 0, 0]) for s in (3, 4)}
    row = _cells(real_tables.real_paired_table(real), "GTPO (α₂ = 0.1) − DAPO")
    assert (
        row["seeds"] == "0–4 (n 5; 2 looks)"
        and real_runs.real_compare(real, "gtpo", "dapo").looks == 2
    )
    assert float(row["t bar (s.e.)"]) == pytest.approx(3.495, abs=0.005)  # t at 0.9875, df 4
    assert real_runs.real_compare(real, "gtpo", "nope").n == 0


def test_a_pair_is_compared_only_on_one_machine():
    """Issue 47 item 1: a seed whose two arms' files record different CPUs is left out of the
    difference and named; a pair with no seed on one machine is not compared at all (on the
    files of 3590d04, DAPO without overlong shaping seeds 0-2 (AMD EPYC) paired with first-pass
    arms (bare "x86_64"))."""
    amd, first = {"cpu": "AMD EPYC", "path": "avx2"}, {"cpu": "x86_64", "path": "avx2"}
    real = {
        ("dapo", s): _run([4, 0, 0, 0]) | {"machine": first if s < 2 else amd} for s in range(4)
    }
    real |= {("dapo_noshape", s): _run([4, 4, 0, 0]) | {"machine": amd} for s in range(4)}
    real |= {("grpo_s", s): _run([0, 0, 0, 0]) | {"machine": first} for s in range(2)}
    c = real_runs.real_compare(real, "dapo_noshape", "dapo")
    assert sorted(c.per_seed) == [2, 3] and c.left_out == (0, 1)
    row = _cells(real_tables.real_paired_table(real), "DAPO without overlong shaping − DAPO")
    assert row["seeds"].startswith("2, 3 (n 2)") and "0, 1 left out" in row["seeds"]
    none = real_runs.real_compare(real, "grpo_s", "dapo_noshape")
    assert none.n == 0 and none.left_out == (0, 1)
    row = _cells(real_tables.real_paired_table(real), "GRPO-S − DAPO without overlong shaping")
    assert row["verdict on “first > second”"] == "not compared"
    assert "different machines" in wording.describe(none, "real")
    # the same record on both sides pairs: the first pass's files with each other
    assert real_runs.real_compare(real, "grpo_s", "dapo").per_seed.keys() == {0, 1}


def test_a_one_seed_row_says_so_and_uses_the_normal_quantile():
    real = {("dapo", 0): _run([0] * 10 + [4] * 10), ("gtpo_batch", 0): _run([0] * 20)}
    row = _cells(real_tables.real_paired_table(real), "GTPO, stats = batch (Eq. 4 literal) − DAPO")
    assert "one seed" in row["seeds"]
    assert "normal" in row["df"]
    # rates 0 − (0 ×10, 1 ×10): mean −0.5, sd 0.513, s.e. 0.115: 4.4 s.e. > 1.96
    assert row["verdict on “first > second”"] == "contradicted"
    assert row["MDD (80 %)"] == f"{(1.960 + 0.842) * 0.5130 / math.sqrt(20):.3f}"


# -- the committed results and the page ----------------------------------------------------------
REAL = claims_results.load_real()
TOY = claims_results.load_toy()


def test_the_page_shows_what_the_committed_files_give():
    """``claims_report.py --check``: every generated table equals the page's."""
    assert report.main(["--check"]) == 0, "run python scripts/experiments/claims/claims_page.py"


def test_the_check_fails_on_an_edited_table(tmp_path, monkeypatch):
    page = report.PAGE.read_text()
    start = page.index("<!-- claims:ledger -->")
    # One verdict in the ledger changed by hand: the check must see it.
    edited = page[:start] + page[start:].replace("| not testable here |", "| holds |", 1)
    assert edited != page
    monkeypatch.setattr(report, "PAGE", tmp_path / "claims.md")
    report.PAGE.write_text(edited)
    assert report.main(["--check"]) == 1


def test_the_check_fails_on_an_edited_results_brief(tmp_path, monkeypatch):
    page = report.RESULTS_PAGE.read_text()
    start = page.index("<!-- claims:results-brief -->")
    edited = page[:start] + page[start:].replace("not shown", "holds", 1)
    assert edited != page
    monkeypatch.setattr(report, "RESULTS_PAGE", tmp_path / "results.md")
    report.RESULTS_PAGE.write_text(edited)
    assert report.main(["--check"]) == 1


@pytest.mark.parametrize("arm", arms.MAIN_ARMS)
def test_every_main_arm_has_the_first_three_paired_seeds(arm):
    for seed in arms.FIRST_SEEDS:
        assert (arm, seed) in REAL, f"{claims_results.REAL}/{arm}_seed{seed}.json is missing"
        assert ("base", seed) in REAL


@pytest.mark.parametrize("seed", sorted({s for _, s in REAL}))
def test_the_arms_of_a_seed_share_problems_sampling_and_held_out_set(seed):
    arms = [a for (a, s) in REAL if s == seed and a != "base"]
    assert arms and ("base", seed) in REAL
    first = REAL[(arms[0], seed)]
    for arm in arms:
        r = REAL[(arm, seed)]
        assert r["training_problems"] == first["training_problems"], arm
        assert r["held_out"] == REAL[("base", seed)]["held_out"], arm
        for key in ("rollouts", "prompts_per_step", "group_size", "minibatches",
                    "max_new_tokens", "learning_rate", "eval_problems", "eval_samples",
                    "threads"):  # fmt: skip
            assert r["args"][key] == first["args"][key], (arm, key)
        # Every arm ends at the same step: the final evaluations pair.
        assert r["evals"][-1]["step"] == first["evals"][-1]["step"], arm
        # The first rollout is sampled from the same model with the same seed: the same replies,
        # so the same mean reward, whatever the algorithm.
        assert r["steps"][0]["reward"] == first["steps"][0]["reward"], arm
    # Other seeds draw other training problems.
    others = [r for (a, s), r in REAL.items() if s != seed and a != "base"]
    assert all(o["training_problems"] != first["training_problems"] for o in others)


def test_the_arms_run_their_paper_defaults_except_the_named_change():
    from refimpl import algorithms

    for (arm, _seed), r in REAL.items():
        if arm == "base":
            continue
        name, changes = claims_real.ARMS[arm]
        default = algorithms.get(name).Config()
        for field, value in r["config"].items():
            expected = changes.get(field, getattr(default, field))
            assert value == expected, (arm, field)


def test_a_later_seed_falls_short_of_the_bar_and_is_kept():
    """Seed 4's DAPO run did not learn: it stays in the ledger, not dropped (the design's bar
    over every seed: tests/test_claims_evidence.py)."""
    d, se = stats.paired(real_runs.final(REAL[("dapo", 4)]), real_runs.final(REAL[("base", 4)]))
    assert d / se < 4 and 4 in real_runs.seeds_of(REAL, "dapo")


def test_the_paper_default_dapo_has_overlong_shaping_and_the_other_arm_not():
    from refimpl.algorithms import dapo

    assert dapo.Config().overlong_shaping is True
    assert claims_real.ARMS["dapo_noshape"] == ("dapo", {"overlong_shaping": False})
    page = report.PAGE.read_text()
    assert "`overlong_shaping=True`" in page and "DAPO without overlong shaping" in page


# -- two machines ----------------------------------------------------------------------------
CROSS = {p.name: json.loads(p.read_text()) for p in sorted(claims_results.CROSS.glob("*.json"))}


def test_there_is_a_cross_machine_check_of_first_pass_runs():
    """The page pairs arms run on two machines on the strength of these files."""
    assert CROSS, f"no rerun of a first-pass file under {claims_results.CROSS}"
    for name in CROSS:
        arm, seed = re.fullmatch(r"(.+)_seed(\d+)_\w+\.json", name).groups()
        assert (arm, int(seed)) in REAL, name


@pytest.mark.parametrize("name", sorted(CROSS))
def test_the_cross_machine_reruns_agree_problem_by_problem_with_the_first_pass(name):
    """The two-machine evidence: a rerun on the second machine of a first-pass run gives the
    same correct count on every held-out problem in every evaluation (so arms run on the two
    machines pair), although its logged losses differ in the last digits."""
    arm, seed = re.fullmatch(r"(.+)_seed(\d+)_\w+\.json", name).groups()
    xeon, other = REAL[(arm, int(seed))], CROSS[name]
    assert (arm, int(seed)) in arms.FIRST_PASS_FILES
    assert other["held_out"] == xeon["held_out"]
    assert other.get("training_problems") == xeon.get("training_problems")
    steps = [e["step"] for e in other["evals"]]
    assert steps == [e["step"] for e in xeon["evals"]]
    for mine, theirs in zip(other["evals"], xeon["evals"]):
        assert len(mine["correct"]) == 100
        assert mine["correct"] == theirs["correct"], (name, mine["step"])


# -- the second pass's files, before they exist: synthetic ones of the same schema ----------
NEW_MACHINE = {"path": "avx2", "cpu": "AMD EPYC", "machine": "x86_64", "torch": "2.13.0+cpu",
               "threads": 1}  # fmt: skip


def _second_pass(tmp_path: Path) -> tuple[Path, Path]:
    """The results as the second pass will leave them, made from the committed files: DAPO
    without overlong shaping on seeds 0-2 (evaluated after 4, 8, 12), seeds 3-7 of base, both
    DAPOs, GTPO and GTPO α₂ = 0 evaluated after step 12 only, on the new machine record; and a
    toy file of the new schema (final at the budget's end, 8 seeds, the DAPO ablation, GSPO)."""
    real = tmp_path / "real"
    real.mkdir()
    for path in sorted(claims_results.REAL.glob("*_seed*.json")):
        arm, seed = path.stem.rsplit("_seed", 1)
        later = int(seed) > 7 or (arm == "grpo_s" and int(seed) > 2)  # the third pass's seeds
        if not later:  # later passes' seeds are not this scenario's
            (real / path.name).write_text(path.read_text())
    rng = np.random.default_rng(0)

    def write(arm: str, seed: int, src: dict, evals: list[dict]) -> None:
        out = {**src, "arm": arm, "seed": seed, "machine": NEW_MACHINE, "commit": "abc1234",
               "evals": evals}  # fmt: skip
        out["args"] = {**src["args"], "eval_at": [e["step"] for e in evals] or [12]}
        if arm == "dapo_noshape":
            out["config"] = {**src["config"], "overlong_shaping": False}
        (real / f"{arm}_seed{seed}.json").write_text(json.dumps(out))

    def noisy(e: dict) -> dict:
        c = np.clip(np.array(e["correct"]) + rng.integers(-1, 2, len(e["correct"])), 0, 4)
        return {**e, "correct": c.tolist(), "success": float(c.mean() / 4)}

    for seed in (0, 1, 2):
        src = REAL[("dapo", seed)]
        write("dapo_noshape", seed, src, [noisy(e) for e in src["evals"]])
    for seed in range(3, 8):
        for arm in ("base", "dapo", "dapo_noshape", "gtpo", "gtpo_alpha0"):
            src = REAL[("dapo" if arm == "dapo_noshape" else arm, seed % 3)]
            write(arm, seed, src, [noisy(src["evals"][-1])])
    toy = json.loads(claims_results.TOY.read_text())
    runs = toy["results"]["countdown"]["runs"]
    runs["gspo"] = json.loads(json.dumps(runs["grpo"]))
    runs["dapo overlong_shaping=False"] = json.loads(json.dumps(runs["dapo"]))
    for per_seed in runs.values():
        for s in range(3, 8):
            per_seed[str(s)] = dict(per_seed[str(s % 3)])
        for r in per_seed.values():
            r.pop("end_evals", None)
            r["final"] = r["curve_success"][-1]
    ablations = [
        a for a in toy["config"]["ablations"].split(",") if a != "dapo overlong_shaping=False"
    ]
    toy["config"] |= {"algos": "grpo,dapo,gspo,gtpo,grpo_s,tepo", "seeds": "0,1,2,3,4,5,6,7",
                      "eval_every": 25,  # the committed file may hold the DAPO ablation already
                      "ablations": ",".join([*ablations, "dapo overlong_shaping=False"])}  # fmt: skip
    toy_path = tmp_path / "results.json"
    toy_path.write_text(json.dumps(toy))
    return real, toy_path


def test_the_report_reads_the_second_pass_files(tmp_path, monkeypatch):
    real_dir, toy_path = _second_pass(tmp_path)
    monkeypatch.setattr(claims_results, "REAL", real_dir)
    monkeypatch.setattr(claims_results, "TOY", toy_path)
    claims = report.blocks()["claims"]
    paired = claims["real-paired"]
    # DAPO without overlong shaping's seeds 0-2 ran on the new machine, GTPO's on the first
    # pass's: those pairs mix machines and are left out (issue 47 item 1)
    row = _cells(paired, "GTPO (α₂ = 0.1) − DAPO without overlong shaping")
    assert (row["seeds"], row["df"]) == (
        "3–7 (n 5); seeds 0–2 left out: the two arms ran on different machines",
        "4",
    )
    assert float(row["t bar (s.e.)"]) == pytest.approx(T975[4], abs=0.005)  # 2 decimals
    row = _cells(paired, "GTPO (α₂ = 0.1) − DAPO")  # read at seeds 0-2, then extended
    assert row["seeds"] == "0–7 (n 8; 2 looks)"
    assert float(row["t bar (s.e.)"]) == pytest.approx(2.841, abs=0.005)  # t at 0.9875, df 7
    assert _cells(paired, "GRPO-S − DAPO")["seeds"] == "0–2 (n 3)"  # GRPO-S has seeds 0-2
    row = _cells(paired, "GRPO-S − DAPO without overlong shaping")
    assert (row["df"], row["verdict on “first > second”"]) == ("—", "not compared")
    # Seeds 3-7 have no curve: no times, not in the convergence table, not in the speed rule.
    assert "| DAPO | 5 |" not in claims["real-convergence"]
    assert "seeds 3–7 were evaluated after the last step only" in claims["real-convergence"]
    assert "AMD EPYC, avx2 path" in claims["machines"]
    toy_rows = _cells(claims["toy-paired"], "GTPO (α₂ = 0.1) − DAPO without overlong shaping")
    assert toy_rows["seeds"] == "0–7 (n 8)"
    assert _cells(claims["toy-runs"], "GSPO")["pass@16 end"] != "—"  # the new schema has it
    assert "--seeds 0,1,2,3,4,5,6,7" in claims["toy-command"]
    assert '--ablations "gtpo alpha_2=0.0,gtpo stats=batch,tepo kl_mask=False,dapo ' \
           'overlong_shaping=False"' in claims["toy-command"]  # fmt: skip
    assert "--algos" not in claims["toy-command"]  # the preset's own six
    ledger = claims["ledger"]
    assert "not run" not in _cells(ledger, "GTPO beats DAPO")["real-model verdict"]
    assert (
        "over 8 seeds (df 7"
        in _cells(ledger, "GTPO beats DAPO")["numbers (± s.e.; df, MDD, seeds for 80 % power)"]
    )


# -- the slips of the ledger's first version (issue 39), one test each --------------------------
def test_slip_1_kept_groups_average_only_the_steps_that_log_them():
    """``refimpl/kept_groups_frac`` is logged on each rollout's first step only."""
    # The committed files: the mean over seeds of each run's mean over its logging steps.
    table = real_tables.real_arm_table(REAL)
    for arm in ("dapo", "gtpo", "gtpo_batch"):
        per_run = [
            np.mean([h[k] for h in r["steps"] for k in h if k == "refimpl/kept_groups_frac"])
            for (a, _), r in REAL.items()
            if a == arm
        ]
        assert _cells(table, arms.NAMES[arm])["kept groups"] == f"{np.mean(per_run):.2f}"
    assert _cells(table, "DAPO")["kept groups"] != "0.90"  # 9 of 12 steps counted as 1.0
    # By hand: 0.25 and 0.75 logged on 2 of 12 steps: 0.50.
    steps = [{"loss": 0.0} for _ in range(12)]
    steps[0]["refimpl/kept_groups_frac"] = 0.25
    steps[4]["refimpl/kept_groups_frac"] = 0.75
    run = {**_run([4, 0]), "steps": steps, "train": {}, "train_s": 60.0}
    real = {("base", 0): _run([0, 0], 0), ("dapo", 0): run}
    assert _cells(real_tables.real_arm_table(real), "DAPO")["kept groups"] == "0.50"


def test_slip_2_toy_final_is_the_evaluation_at_the_budget_end_for_every_arm():
    """One point of every run (the old file's "final" averaged 2 evaluations of the
    dynamic-sampling arms and 3 of the others)."""
    runs = TOY["results"]["countdown"]["runs"]
    for label, per_seed in runs.items():
        seeds = sorted(per_seed, key=int)
        # every run evaluates where it stops, at the end of the token budget
        for s in seeds:
            assert per_seed[s]["curve_tokens"][-1] == per_seed[s]["sampled_tokens"]
        expected = ", ".join(f"{per_seed[s]['curve_success'][-1]:.3f}" for s in seeds)
        row = _cells(toy_testbed.toy_table(TOY), arms.NAMES.get(label, label))
        assert row["final held-out greedy, per seed"] == expected
    t, d = runs["tepo"], runs["dapo"]
    diffs = [t[s]["curve_success"][-1] - d[s]["curve_success"][-1] for s in sorted(t, key=int)]
    row = _cells(toy_testbed.toy_paired_table(TOY), "TEPO − DAPO")
    assert row["per seed"] == ", ".join(f"{v:+.3f}" for v in diffs)


def test_slip_3_the_pages_sizes_are_computed_from_the_files_and_the_formula():
    page = report.PAGE.read_text()
    # DAPO seed 0 after step 8 against the base model, paired problem by problem.
    dapo = next(e for e in REAL[("dapo", 0)]["evals"] if e["step"] == 8)
    base = REAL[("base", 0)]["evals"][0]
    diff = np.array(dapo["correct"]) / 4 - np.array(base["correct"]) / 4
    z = diff.mean() / (diff.std(ddof=1) / math.sqrt(diff.size))
    assert f"{z:.1f} s.e." in page and "about 8 s.e." not in page
    # GTPO's α₂ = 0 spread against DAPO's: √(G(GL − 1) / ((G − 1)GL)) − 1, G = 8.
    g, length = 8, REAL[("dapo", 0)]["args"]["max_new_tokens"]
    at_l = math.sqrt(g * (g * length - 1) / ((g - 1) * g * length)) - 1
    long = math.sqrt(g / (g - 1)) - 1
    assert f"{100 * at_l:.1f} % larger at L = {length}" in page
    assert f"{100 * long:.1f} % for long replies" in page
    assert "6.5 %" not in page


def test_slip_4_every_quote_names_the_version_it_is_from():
    rows = ledger.ledger_rows(REAL, TOY)
    cot = next(r for r in rows if "long chains of thought" in r[0])
    assert "“exhibits superior stability in long Chain-of-Thought (CoT) reasoning tasks” " \
           "(v6 abstract" in cot[1]  # fmt: skip
    for claim, quote, *_ in rows:
        if "TEPO" in claim:
            continue
        for m in re.finditer(r"“[^”]*”\s*(\([^)]*\))?", quote):
            # GTPO's v5/v6; the ceiling rows quote VinePPO v2 and the forking-tokens v1
            assert m.group(1) and re.search(r"\bv\d\b|as above", m.group(1)), (claim, m[0])


def test_slip_5_the_words_go_no_further_than_the_verdicts():
    """ "Not shown" is not "does not": a seed × algorithm interaction is no evidence that the
    algorithm does not matter."""
    claims = report.PAGE.read_text()
    results = (ROOT / "docs" / "results.md").read_text()
    for text in (claims, results):
        for phrase in ("do not beat DAPO", "neither GTPO nor GRPO-S beats", "the seed decides",
                       "decides, not the algorithm"):  # fmt: skip
            assert phrase not in text, phrase
    # The summaries state the ledger's verdicts: each verdict on GTPO against DAPO is there.
    rows = ledger.ledger_rows(REAL, TOY)
    gtpo = next(r for r in rows if r[0].startswith("GTPO beats DAPO"))
    short = _block(claims, "in-short")
    for cell in (gtpo[2], gtpo[3]):
        for part in cell.split("; "):  # "against DAPO: not shown"
            arm, said = re.fullmatch(r"against (.+): (.+)", part).groups()
            assert f"{said} against {arm}" in short, part


def _benchmarks_section_2() -> str:
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    return text[text.index("## 2. Entropy collapse") : text.index("## 3. ")]


def test_slip_6_no_sd_printed_as_a_standard_error_and_one_speed_verdict():
    section = _benchmarks_section_2()
    head = next(line for line in section.splitlines() if "(mean ± sd)" in line)
    col = [c.strip() for c in head.strip("|").split("|")].index("final greedy (mean ± sd)")
    sds = [
        [c.strip() for c in line.strip("|").split("|")][col]
        for line in section[section.index(head) :].splitlines()[2:]
        if line.startswith("|") and " ± " in line
    ]
    assert len(sds) >= 6
    results = (ROOT / "docs" / "results.md").read_text()
    for mean_sd in sds:  # "0.206 ± 0.024" is a mean and an sd: never written as mean ± s.e.
        assert mean_sd not in results, mean_sd
    # benchmarks.md § 2 answers "converge faster?" with the ledger's own toy verdict.
    speed = next(r for r in ledger.ledger_rows(REAL, TOY) if r[0].startswith("TEPO converges"))
    assert speed[2] in " ".join(section.split())
    assert "converge faster than GRPO/DAPO? No" not in section


def test_slip_7_the_toy_command_reproduces_the_files_settings():
    import tyro

    from refimpl.bench.learning_settings import LearningConfig
    from refimpl.settings.presets import explicit_fields

    rows = [r for r in ledger.ledger_rows(REAL, TOY) if r[5] != "—" and not _elsewhere(r)]
    assert len(rows) >= 9  # "—": not testable; the credit rows have their own experiment
    for row in rows:
        m = re.search(r"`refimpl bench-learning ([^`]*)`", row[5])
        assert m, row[0]
        argv = shlex.split(m.group(1))
        cfg = tyro.cli(LearningConfig, args=argv).with_preset(explicit_fields(argv, LearningConfig))
        recorded = TOY["config"]
        for field in ("preset", "tasks", "algos", "seeds", "ablations", "ablation_tasks",
                      "budget_steps", "eval_every", "eval_problems", "target_gain",
                      "collapse_ratio", "lr", "prompts_per_step", "group_size", "quick"):  # fmt: skip
            assert getattr(cfg, field) == recorded[field], (row[0], field)
        assert str(cfg.out) == recorded["out"]


def _credit_row(row: list[str]) -> bool:
    """A row judged on the credit experiment (docs/credit.md), not on the claims runs."""
    return "scripts/experiments/credit/credit_study.py" in row[5]


def _elsewhere(row: list[str]) -> bool:
    """A row judged on another experiment's runs: the credit experiment or the ceiling."""
    return _credit_row(row) or "scripts/experiments/ceiling/ceiling_study.py" in row[5]


def test_the_credit_rows_name_their_experiment_and_how_to_rerun_it():
    """The three rows of issue 38 (the entropy hypothesis, GTPO's credit, GRPO-S on the long
    chain) give the credit experiment's command, with the empty-directory rerun."""
    rows = [r for r in ledger.ledger_rows(REAL, TOY) if _credit_row(r)]
    claims = sorted(r[0].split(" (")[0] for r in rows)
    assert claims[:2] == [
        "GRPO-S falls less than DAPO and GRPO on 23–37-token chains of a "
        "2-layer model, at GRPO's learning rate",
        "GTPO's token rewards assign credit better than a uniform advantage",
    ]
    assert claims[2:] == ["High entropy marks the pivotal tokens"]  # fmt: skip
    for row in rows:
        assert "--out " in row[5], row[0]
    assert (ROOT / "scripts" / "experiments" / "credit" / "credit_study.py").is_file()


def _queue() -> set[tuple[str, int, tuple[int, ...]]]:
    """(arm, seed, eval steps) of every real-model run the claims declaration
    (scripts/experiments/claims/claims_study.py) runs, from the commands of its dry run."""
    spec = importlib.util.spec_from_file_location(
        "run_experiment", ROOT / "scripts" / "experiments" / "run_experiment.py"
    )
    driver = importlib.util.module_from_spec(spec)
    sys.modules["run_experiment"] = driver
    spec.loader.exec_module(driver)
    decl = driver.load(CLAIMS / "claims_study.py")
    runs = set()
    for unit in driver.units(decl, runs="runs", out=Path("/nonexistent")):
        for command in unit.commands:
            if command[:2] == ["python", f"{CLAIMS_DIR}/run_real.py"]:
                args = claims_real.parse_args(command[2:])
                runs.add((args.arm, args.seed, tuple(args.eval_at)))
    return runs


def test_slip_7_every_real_file_is_a_run_the_script_queues_and_the_command_says_how():
    queue = _queue()
    for (arm, seed), r in REAL.items():
        steps = tuple(r["args"]["eval_at"]) if arm != "base" else None
        assert any(q[:2] == (arm, seed) and (steps is None or q[2] == steps) for q in queue), (
            arm,
            seed,
        )
    for row in ledger.ledger_rows(REAL, TOY):
        if row[5] != "—" and not _elsewhere(row):  # "—": not testable here, nothing run
            assert f"{CLAIMS_DIR}/claims_study.py --out /tmp/" in row[5], row[0]
            for arm in re.findall(r"reads ([\w, ]+) ×", row[5])[0].split(", "):
                assert any(q[0] == arm for q in queue), (row[0], arm)


def test_slip_8_each_file_names_its_machine():
    """New files record the CPU's model name and the numeric path; a file that does not name
    its CPU model (the first pass's record only "x86_64") is shown as "unrecorded", never
    attributed from outside the file (issue 47, item 3)."""
    from refimpl.runs.cpu_kernels import names_cpu_model

    machines = _block(report.PAGE.read_text(), "machines")
    assert TOY["machine"]["cpu"] in machines
    for key, r in REAL.items():
        m = r["machine"]
        if key in arms.FIRST_PASS_FILES:
            assert not names_cpu_model(m["cpu"]), key  # the old files: only an architecture
            continue
        assert names_cpu_model(m.get("cpu")), f"{key}: no CPU model name in the file"
        assert m.get("path"), f"{key}: no numeric path in the file"
    new = {"machine": {"cpu": "AMD EPYC", "path": "avx2", "torch": "2.13.0+cpu", "threads": 1}}
    assert claims_results.machine_of(new, ("dapo", 3)).startswith("AMD EPYC, avx2 path")
    old = {"machine": {"cpu": "x86_64"}, "commit": "d2ea469"}
    assert claims_results.machine_of(old, ("dapo", 0)).startswith("unrecorded")
    for key, r in REAL.items():
        assert claims_results.machine_of(r, key) in machines


def test_a_file_without_a_cpu_model_is_unrecorded_on_the_page():
    """Every real-model, cross-machine and toy file either names its CPU model, or the page's
    machines block lists it on an "unrecorded" line; no machine is named that no file records
    (the first pass's Xeon was a guess from the commits' dates)."""
    from refimpl.runs.cpu_kernels import names_cpu_model

    machines = _block(report.PAGE.read_text(), "machines")
    lines = machines.splitlines()
    unrecorded = [line for line in lines if "unrecorded" in line]
    for (arm, seed), r in REAL.items():
        if not names_cpu_model(r["machine"].get("cpu")):
            assert any(line.startswith("- **unrecorded") and arms.NAMES.get(arm, arm) in line
                       for line in unrecorded), (arm, seed)  # fmt: skip
    for name, r in CROSS.items():
        line = next(x for x in lines if f"cross_machine/{name}" in x)
        assert ("unrecorded" in line) != names_cpu_model(r["machine"].get("cpu")), line
    recorded = {str(r["machine"].get("cpu")) for r in [*REAL.values(), *CROSS.values(), TOY]}
    for cpu in ("Xeon", "EPYC"):
        named = [x for x in lines if cpu in x]
        assert all(any(cpu in c and c in x for c in recorded) for x in named), named


# -- the runner refuses bad input before loading anything -------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--arm", "dapo", "--eval-at", "4,8"], "the last one 12"),
        (["--arm", "dapo", "--eval-at", "0,12"], "steps in 1…12"),
        (["--arm", "dapo", "--eval-at", "4,x"], "comma-separated"),
        (["--arm", "dapo", "--minibatches", "5"], "must divide"),
        (["--arm", "dapo", "--eval-samples", "0"], "at least 1"),
        (["--arm", "nope"], "invalid choice"),
    ],
)
def test_claims_real_refuses_bad_arguments(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit):
        claims_real.parse_args([*argv, "--out-dir", str(tmp_path)])
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_claims_real_never_overwrites_a_result_unless_asked(tmp_path, capsys):
    (tmp_path / "dapo_seed0.json").write_text("{}")
    with pytest.raises(SystemExit):
        claims_real.parse_args(["--arm", "dapo", "--out-dir", str(tmp_path)])
    assert "--overwrite" in capsys.readouterr().err
    args = claims_real.parse_args(["--arm", "dapo", "--out-dir", str(tmp_path), "--overwrite"])
    assert args.out == tmp_path / "dapo_seed0.json"


def test_the_toy_stability_row_compares_tepo_and_dapo_on_one_grid():
    """TEPO evaluated at 6 points and DAPO at 3 over the same token budget: a dip of TEPO's
    between DAPO's points is not a fall DAPO could show, so on the common grid (DAPO's 3
    points) two arms with the same success at those points do not differ. The row used to
    compare TEPO's 6 evaluations with DAPO's 3 (and read 'contradicted' on the committed
    files; on their common grid it is 'not shown')."""
    outcome_rows = sys.modules["outcome_rows"]
    tokens6, tokens3 = [0, 100, 200, 300, 400, 500, 600], [0, 300, 600]
    tepo = {"curve_tokens": tokens6, "curve_success": [0.3, 0.2, 0.35, 0.4, 0.3, 0.45, 0.5]}
    dapo = {"curve_tokens": tokens3, "curve_success": [0.3, 0.4, 0.5]}
    runs = {"tepo": {str(s): tepo for s in range(3)}, "dapo": {str(s): dapo for s in range(3)}}
    toy = {"results": {"countdown": {"runs": runs}}, "config": claims_results.load_toy()["config"]}
    row = outcome_rows.row_tepo_stability({}, toy)
    assert "+0.000 ± 0.000 over 3 seeds" in row[4] and row[2] == "not shown", row[4]
    committed = outcome_rows.row_tepo_stability({}, claims_results.load_toy())
    assert committed[2] == "not shown" and "common grid" in committed[4]


def test_no_difference_without_spread_is_not_shown_in_either_direction():
    """0 ± 0 is not a difference: 'not shown' whichever sign is claimed (it read
    'contradicted' for a claimed negative sign, since −0.0 carried the sign)."""
    for sign in (+1, -1):
        assert stats.verdict(0.0, 0.0, 4, sign) == "not shown"
    assert stats.verdict(0.01, 0.0, 4, -1) == "contradicted"
    assert stats.verdict(-0.01, 0.0, 4, -1) == "holds"


def test_the_declared_passes_are_the_machines_the_files_record_and_give_the_looks():
    """claims_study.py's real passes are those that ran: every first-pass file records the
    first machine (a bare "x86_64"), every later pass's file the AMD EPYC (so DAPO without
    overlong shaping's seeds 0-2, run on the EPYC, are the second pass's); each pass's files
    exist. The looks the pages use follow: GTPO − GTPO α₂ = 0 grew after each of the three
    passes, GTPO − DAPO after two, TEPO − DAPO after one."""
    passes = real_runs.passes()
    assert len(passes) == 3
    for k, run in enumerate(passes):
        for arm, seeds in run.items():
            for s in seeds:
                cpu = REAL[(arm, s)]["machine"]["cpu"]
                assert (cpu == "x86_64") == (k == 0), (k + 1, arm, s, cpu)
    assert real_runs.looks("gtpo", "gtpo_alpha0") == 3
    assert real_runs.looks("gtpo", "dapo") == real_runs.looks("grpo_s", "dapo") == 2
    assert real_runs.looks("tepo", "dapo") == real_runs.looks("gtpo", "dapo_noshape") == 1
    assert real_runs.looks("gtpo", "gtpo_alpha0", seeds=[0, 1, 2]) == 1  # the first pass alone
    assert real_runs.real_compare(REAL, "gtpo", "gtpo_alpha0").looks == 3
