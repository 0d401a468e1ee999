"""``make demo`` (refimpl/demo.py): its flags, and the final evaluation's gain and standard
error, which the README quotes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from refimpl import demo


def test_paired_gain_by_hand():
    before = np.array([0, 0, 1, 1, 0])
    after = [np.array([1, 0, 1, 0, 1])]
    row = demo.paired_gain(before, after)
    # differences 1, 0, 0, -1, 1: mean 0.2, squared deviations summing to 2.8
    assert row["start"] == pytest.approx(0.4) and row["end"] == pytest.approx(0.6)
    assert row["gain"] == pytest.approx(0.2)
    assert row["se"] == pytest.approx(math.sqrt(2.8 / 4) / math.sqrt(5))


def test_paired_gain_counts_only_the_problems_that_changed():
    rng = np.random.default_rng(0)
    before = (rng.random(2000) < 0.4).astype(float)
    unchanged = demo.paired_gain(before, [before])
    assert unchanged["gain"] == 0 and unchanged["se"] == 0
    after = before.copy()
    after[:200] = 1.0  # some wrong answers become right, nothing else moves
    row = demo.paired_gain(before, [after])
    independent = math.sqrt(
        (row["start"] * (1 - row["start"]) + row["end"] * (1 - row["end"])) / 2000
    )
    assert 0 < row["se"] < independent


def test_paired_gain_averages_seeds_per_problem():
    before = np.zeros(4)
    row = demo.paired_gain(before, [np.array([1, 1, 0, 0]), np.array([1, 0, 0, 0])])
    assert row["end"] == pytest.approx(0.375) and row["gain"] == pytest.approx(0.375)


def test_each_seeds_gain_and_their_spread_are_reported():
    before = np.array([0.0, 0.0, 1.0, 0.0])
    seeds = [np.array([1, 1, 1, 0]), np.array([0, 0, 1, 0]), np.array([1, 0, 1, 1])]
    row = demo.paired_gain(before, seeds)
    # seed gains by hand: 3/4 − 1/4, 1/4 − 1/4, 3/4 − 1/4
    assert row["seed_gains"] == pytest.approx([0.5, 0.0, 0.5])
    assert row["gain"] == pytest.approx(np.mean(row["seed_gains"]))
    table = demo.format_gains([{"algo": "grpo", "seeds": 3, **row}], 4)
    (line,) = [x for x in table.splitlines() if x.startswith("grpo")]
    sd = np.std([0.5, 0.0, 0.5], ddof=1)  # 0.289
    assert line.split()[-4:] == [f"{sd:.3f}", "+0.000", "…", "+0.500"]
    # One seed: no spread columns (nothing to spread over).
    single = demo.format_gains(
        [{"algo": "grpo", "seeds": 1, **demo.paired_gain(before, seeds[:1])}], 4
    )
    assert "over seeds" not in single


@pytest.mark.parametrize("flag", ["--final-problems", "--base-steps", "--steps"])
def test_bad_flag_is_one_line_naming_it(flag, capsys, tmp_path):
    assert demo.main([flag, "0", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and flag in err
    assert not any(tmp_path.iterdir())  # nothing written


@pytest.mark.slow
def test_tiny_demo_prints_the_final_table(tmp_path, capsys):
    code = demo.main(
        ["--algos", "grpo", "--steps", "2", "--eval-every", "1", "--base-steps", "20",
         "--final-problems", "50", "--runs-dir", str(tmp_path)]
    )  # fmt: skip
    assert code == 0
    out = capsys.readouterr().out
    assert "held-out greedy success on 50 problems" in out
    (row,) = [line for line in out.splitlines() if line.startswith("grpo ") and "±" in line]
    start, end, gain = (float(x) for x in row.split()[2:5])
    assert gain == pytest.approx(end - start, abs=1e-3)


def test_the_demo_starts_from_the_shipped_base_model_and_training_it_is_one_flag(tmp_path, capsys):
    """The default demo loads the shipped countdown-300 (nothing trained); --train-base trains
    it here, saying so first; the table's legend explains every column, "steps to" included."""
    from refimpl.plots import format_table

    legend = format_table([], 0.5).splitlines()[-1]
    assert "steps to 0.50: the first evaluation" in legend and "'-'" in legend
    argv = ["--algos", "grpo", "--steps", "1", "--eval-every", "1", "--final-problems", "20",
            "--runs-dir", str(tmp_path), "--workers", "1"]  # fmt: skip
    assert demo.main(argv) == 0
    out = capsys.readouterr().out
    assert "shipped base model countdown-300" in out and "training one" not in out
    assert _base_model_lines(out) == 1, out
    # Every column is explained: by the comparison's legend (the line after the table) or
    # by the demo's own line after it ("seeds:", "gain:").
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("algorithm "))
    head, legend = lines[at], " ".join(lines[at + 3 : at + 5])
    explained_by = {"greedy start": "greedy:", "end": "end =", "gain": "gain:",
                    "pass@1": "pass@k:", "pass@16": "pass@k:", "entropy": "entropy:",
                    "clip": "clip:", "mask": "mask:", "seeds": "seeds:",
                    "steps to 0.40": "steps to 0.40:"}  # fmt: skip
    rest = head.removeprefix("algorithm")
    for column, words in explained_by.items():
        assert column in rest and words in legend, column
        rest = rest.replace(column, "", 1)
    assert rest.split() == [], f"a column the check does not know: {rest.split()}"
    assert "end = mean of the last 3" in legend
    assert not (tmp_path / "warmstart").exists() or not any((tmp_path / "warmstart").iterdir())
    cfg = demo.DemoConfig(train_base=True)
    assert cfg.train_base and demo.DemoConfig().train_base is False


def _base_model_lines(out: str) -> int:
    """How many lines of ``out`` name the base model: the demo's own line, and every line a
    run or the warm start prints about it ("warm start: ...")."""
    return sum(line.startswith(("base model:", "warm start:")) for line in out.splitlines())


@pytest.mark.slow
def test_the_base_model_line_prints_once_with_workers(tmp_path, capfd):
    """Two runs in two worker processes, the compare's own load and the final evaluation's:
    the base model is named once, by the demo (issue 59: six times before)."""
    argv = ["--algos", "grpo,dapo", "--steps", "1", "--eval-every", "1", "--final-problems",
            "20", "--runs-dir", str(tmp_path), "--workers", "2"]  # fmt: skip
    assert demo.main(argv) == 0
    out = capfd.readouterr().out  # the workers write to the same file descriptor
    assert _base_model_lines(out) == 1, out
    (line,) = [x for x in out.splitlines() if x.startswith("base model:")]
    assert "countdown-300" in line and "every run starts from it" in line
    assert "dapo" in out and "grpo" in out  # both runs reached the tables
