"""docs/claims.md, the claims ledger: its statistics, its pairing and its freshness.

The runs behind it are heavy (``scripts/claims_real.sh``, the collapse benchmark) and are not
tests; these tests check, in seconds, that what the page says is what the committed result
files give, that the statistics are the ones the page defines, and that the arms of a seed
really were paired.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


report = _script("claims_report")
claims_real = _script("claims_real")


def _eval(correct: list[int], n: int, step: int = 24, success: float | None = None) -> dict:
    rate = sum(correct) / (n * len(correct))
    return {"step": step, "correct": correct, "n_samples": n, "success": success or rate}


# -- the statistics the page defines -----------------------------------------------------------
def test_paired_difference_is_the_mean_of_per_problem_differences_by_hand():
    # Rates a = (1, 0, 0.5), b = (0.5, 0, 0.5): differences (0.5, 0, 0), mean 1/6,
    # sd = sqrt(((1/3)² + 2·(1/6)²) / 2) = sqrt(1/12), s.e. = sd / √3 = 1/6.
    d, se = report.paired(_eval([4, 0, 2], 4), _eval([2, 0, 2], 4))
    assert d == pytest.approx(1 / 6)
    assert se == pytest.approx(1 / 6)


def test_paired_refuses_evaluations_of_different_sizes():
    with pytest.raises(ValueError, match="different numbers of problems"):
        report.paired(_eval([1, 2], 4), _eval([1, 2, 3], 4))


@pytest.mark.parametrize(
    ("diff", "se", "sign", "expected"),
    [
        (0.10, 0.04, +1, "holds"),  # 2.5 s.e. on the claimed side
        (-0.10, 0.04, +1, "contradicted"),
        (0.07, 0.04, +1, "not shown"),  # 1.75 s.e.
        (0.08, 0.04, +1, "not shown"),  # exactly 2 s.e. is not more than 2
        (-0.10, 0.04, -1, "holds"),  # a claimed decrease
        (0.10, math.nan, +1, "not measured"),
    ],
)
def test_verdict_rule(diff, se, sign, expected):
    assert report.verdict(diff, se, sign) == expected


def test_steps_to_threshold_first_evaluation_and_interpolation_by_hand():
    base = {"success": 0.10}
    run = {"evals": [_eval([0], 1, 8, 0.15), _eval([0], 1, 16, 0.25), _eval([0], 1, 24, 0.3)]}
    # 0.20 is first reached at step 16; linearly between (8, 0.15) and (16, 0.25): step 12.
    first, interp = report.steps_to(run, base, 0.20)
    assert (first, interp) == (16.0, pytest.approx(12.0))
    assert report.steps_to(run, base, 0.5) == (math.inf, math.inf)
    # Reached at the first evaluation: between (0, 0.10) and (8, 0.15), halfway: step 4.
    assert report.steps_to(run, base, 0.125) == (8.0, pytest.approx(4.0))


@pytest.mark.parametrize(
    ("steps", "floor", "expected"),
    [
        ({"tepo": [4, 4, 4], "dapo": [8, 8, 12], "grpo": [12, 12, 12]}, 4,
         "against GRPO: holds; against DAPO: holds"),  # ratios 0.33 and 0.5
        ({"tepo": [6], "dapo": [8]}, None, "against DAPO: not shown (faster, by less than 50 %)"),
        ({"tepo": [8], "dapo": [8], "grpo": [16]}, None,
         "against GRPO: holds; against DAPO: contradicted"),  # ratio 1.0 against DAPO
        # DAPO is there by the first evaluation: a TEPO twice as fast could not show.
        ({"tepo": [4, 4, 12], "dapo": [4, 4, 4]}, 4,
         "against DAPO: not shown (it is there by the first evaluation)"),
        ({"tepo": [4], "grpo": [math.inf]}, 4, "against GRPO: holds"),  # GRPO never got there
        ({"tepo": [math.inf], "grpo": [8]}, 4, "against GRPO: contradicted"),  # TEPO never did
    ],
)  # fmt: skip
def test_the_speed_verdict(steps, floor, expected):
    assert report._speed(steps, floor=floor)[0] == expected


def test_worst_drop_is_the_largest_fall_between_consecutive_evaluations():
    assert report.worst_drop([0.1, 0.5, 0.3, 0.4, 0.35]) == pytest.approx(0.2)
    assert report.worst_drop([0.1, 0.2, 0.3]) == 0.0


# -- the committed results and the page ----------------------------------------------------------
REAL = report.load_real()


def test_the_page_shows_what_the_committed_files_give():
    """``claims_report.py --check``: every generated table equals the page's."""
    assert report.main(["--check"]) == 0, "run python scripts/claims_report.py"


def test_the_check_fails_on_an_edited_table(tmp_path, monkeypatch):
    page = report.PAGE.read_text()
    start = page.index("<!-- claims:ledger -->")
    # One verdict in the ledger changed by hand: the check must see it.
    edited = page[:start] + page[start:].replace("| not testable here |", "| holds |", 1)
    assert edited != page
    monkeypatch.setattr(report, "PAGE", tmp_path / "claims.md")
    report.PAGE.write_text(edited)
    assert report.main(["--check"]) == 1


@pytest.mark.parametrize("arm", report.MAIN_ARMS)
def test_every_main_arm_has_three_paired_seeds(arm):
    for seed in report.SEEDS:
        assert (arm, seed) in REAL, f"docs/claims/real/{arm}_seed{seed}.json is missing"
        assert ("base", seed) in REAL


@pytest.mark.parametrize("seed", report.SEEDS)
def test_the_arms_of_a_seed_share_problems_sampling_and_held_out_set(seed):
    arms = [a for (a, s) in REAL if s == seed and a != "base"]
    assert len(arms) >= len(report.MAIN_ARMS)
    first = REAL[(arms[0], seed)]
    for arm in arms:
        r = REAL[(arm, seed)]
        assert r["training_problems"] == first["training_problems"], arm
        assert r["held_out"] == REAL[("base", seed)]["held_out"], arm
        for key in ("rollouts", "prompts_per_step", "group_size", "minibatches",
                    "max_new_tokens", "learning_rate", "eval_at", "eval_problems",
                    "eval_samples", "threads"):  # fmt: skip
            assert r["args"][key] == first["args"][key], (arm, key)
        # The first rollout is sampled from the same model with the same seed: the same replies,
        # so the same mean reward, whatever the algorithm.
        assert r["steps"][0]["reward"] == first["steps"][0]["reward"], arm
    # Other seeds draw other training problems.
    others = [REAL[(arms[0], s)] for s in report.SEEDS if s != seed and (arms[0], s) in REAL]
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


def test_dapo_gains_at_least_four_standard_errors_over_the_base_model():
    """The issue's bar for a run long enough to compare algorithms on."""
    for seed in report.SEEDS:
        d, se = report.paired(
            report.final(REAL[("dapo", seed)]), report.final(REAL[("base", seed)])
        )
        assert d / se >= 4, f"seed {seed}: DAPO's gain {d:+.3f} is {d / se:.1f} s.e."


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
