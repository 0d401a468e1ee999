"""Issue 49: ``refimpl credit``, the credit oracle's library functions, the two report
generators and ``bench-learning`` keep the promises the trainer keeps (docs/safety.md).

One test per numbered defect of the issue (``test_issue_49_N_...``). Each reproduces the
hostile input the issue describes and asserts the promised outcome: one line naming the
flag, argument or file; nothing written, trained or loaded first; the page left as it was.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from refimpl.bench.credit import CreditConfig
from refimpl.bench.learning_settings import LearningConfig
from refimpl.sampling.groups import Samples
from refimpl.sampling.monte_carlo_values import estimate_values, reference_values, token_values
from tests.safety_helpers import (
    ROOT,
    cli,
    error_lines,
    make_run,
    python_cli,
    resume,
    tiny_flags,
    warmstart_dir,
)
from toy_envs import get_task


class Captured(Exception):
    """Raised by a stand-in to stop a command at the point the test looks at."""


def _tiny_credit(out: Path, *extra: object) -> list[str]:
    """``refimpl credit`` on the safety tests' tiny warm start (cached once per process),
    2 prompts × 2 completions, K = 2 (each unless ``extra`` sets it)."""
    flags = [
        "credit", "--train.task-args", "num_ops=1", "--train.warmstart.steps", "200",
        "--train.warmstart.batch-size", "64", "--train.warmstart.eval-problems", "20",
        "--train.warmstart.model.n-layer", "1", "--train.warmstart.model.n-embd", "32",
        "--train.warmstart.model.n-head", "2", "--train.warmstart.runs-dir", warmstart_dir(),
        "--out", out,
    ]  # fmt: skip
    for flag in ("--prompts", "--group-size", "--rollouts"):
        if flag not in extra:
            flags += [flag, "2"]
    return [*flags, *extra]


@pytest.fixture
def no_warmstart(monkeypatch):
    """Loading or training a warm start (or a run's reference) fails the test."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a warm start was loaded or trained before the check")

    monkeypatch.setattr("refimpl.warmstart.base_model", forbidden)
    monkeypatch.setattr("refimpl.warmstart._train", forbidden)


def _refused(argv: list, named: str, capsys) -> str:
    code, _, err = cli(argv, capsys)
    assert code in (1, 2), err
    assert len(error_lines(err)) == 1, err
    assert err.startswith(f"refimpl: error: {named}"), err
    return err


# -- Data lost ---------------------------------------------------------------------------------


def test_issue_49_1_credit_refuses_a_link_at_its_temporary_file(tmp_path, capsys, no_warmstart):
    """``ln -s victim.txt out.json.tmp; refimpl credit --out out.json`` wrote the JSON into
    the victim and left out.json a link to it. Refused before any work; the victim intact."""
    victim = tmp_path / "victim.txt"
    victim.write_text("mine")
    (tmp_path / "out.json.tmp").symlink_to(victim)
    _refused(_tiny_credit(tmp_path / "out.json"), "--out:", capsys)
    assert victim.read_text() == "mine"
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "out.json").is_symlink()
    # The one writer (refimpl.runs.runlog.write_text_atomic) refuses it too, named.
    from refimpl.runs.runlog import write_bytes_atomic

    with pytest.raises(OSError, match="symbolic link"):
        write_bytes_atomic(tmp_path / "out.json", b"x")
    assert victim.read_text() == "mine"


def _copy_page(tmp_path: Path, page: Path) -> Path:
    copy = tmp_path / page.name
    copy.write_text(page.read_text())
    return copy


def _credit_report():
    sys.path.insert(0, str(ROOT / "scripts" / "experiments" / "credit"))
    try:
        import credit_page as credit_report  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    sys.modules.pop("credit_page", None)
    return credit_report


def _claims_report():
    sys.path.insert(0, str(ROOT / "scripts" / "experiments" / "claims"))
    try:
        import claims_page as claims_report  # noqa: PLC0415
    finally:
        sys.path.pop(0)
    sys.modules.pop("claims_page", None)
    return claims_report


def test_issue_49_2_a_report_given_a_wrong_folder_leaves_the_page_as_it_was(
    tmp_path, monkeypatch, capsys
):
    """``credit/credit_page.py --results /nonexistent --no-figure`` exited 0 and replaced 207
    lines of docs/credit.md by "Not measured yet"; the claims report did the same without
    toy/results.json. Each is an error naming the input, and the page is unchanged."""
    credit = _credit_report()
    page = _copy_page(tmp_path, credit.PAGE)
    before = page.read_text()
    monkeypatch.setattr(credit, "PAGE", page)
    assert credit.main(["--results", str(tmp_path / "nonexistent"), "--no-figure"]) == 2
    assert "nonexistent" in capsys.readouterr().err
    assert page.read_text() == before
    # One required file missing: named, the page unchanged.
    results = tmp_path / "results"
    shutil.copytree(credit.HERE / "results", results)
    (results / "countdown_step50.json").unlink()
    assert credit.main(["--results", str(results), "--no-figure"]) == 2
    assert "countdown_step50.json: missing" in capsys.readouterr().err
    assert page.read_text() == before

    claims = _claims_report()
    pages = {name: _copy_page(tmp_path, getattr(claims, name)) for name in ("PAGE", "RESULTS_PAGE")}
    texts = {name: p.read_text() for name, p in pages.items()}
    for name, p in pages.items():
        monkeypatch.setattr(claims, name, p)
    monkeypatch.setattr(sys.modules["claims_results"], "TOY", tmp_path / "toy" / "results.json")
    assert claims.main(["--no-figure"]) == 2
    assert "toy/results.json: missing" in capsys.readouterr().err
    assert {name: p.read_text() for name, p in pages.items()} == texts


# -- Silent wrong results ----------------------------------------------------------------------


def test_issue_49_3_credit_scores_the_algorithm_config_it_records(tmp_path, capsys, monkeypatch):
    """``--train.algo gtpo --train.algo-args alpha_2=0.0 --algos gtpo`` recorded α₂ = 0 and
    scored default GTPO (α₂ = 0.1). The Config scored is the one given, and recorded; for an
    algorithm --algos does not score, --train.algo-args is refused."""
    import refimpl.bench.credit as credit

    scored = {}
    real = credit.algorithm_signals

    def spy(name, *args, **kwargs):
        cfg = kwargs.get("algo_cfg", args[4] if len(args) > 4 else None)
        scored[name] = cfg
        return real(name, *args, **kwargs)

    monkeypatch.setattr(credit, "algorithm_signals", spy)
    out = tmp_path / "c.json"
    argv = _tiny_credit(out, "--train.algo", "gtpo", "--train.algo-args", "alpha_2=0.0")
    code, _, err = cli([*argv, "--algos", "gtpo,grpo"], capsys)
    assert code == 0, err
    assert scored["gtpo"] is not None and scored["gtpo"].alpha_2 == 0.0
    assert scored["grpo"] is None or scored["grpo"] == type(scored["grpo"])()
    recorded = json.loads(out.read_text())["settings"]
    assert recorded["train_config"]["algo_args"] == ["alpha_2=0.0"]
    assert recorded["algo_configs"]["gtpo"]["alpha_2"] == 0.0
    assert recorded["algo_configs"]["grpo"]["kl_coef"] > 0  # GRPO's own defaults
    argv = _tiny_credit(tmp_path / "d.json", "--train.algo", "gtpo", "--train.algo-args",
                        "alpha_2=0.0", "--algos", "grpo")  # fmt: skip
    _refused(argv, "--train.algo-args:", capsys)
    assert not (tmp_path / "d.json").exists()


def _policy_settings(monkeypatch) -> list:
    """Stops ``credit`` where it loads the warm start; the warm-start settings it asked for."""
    seen: list = []

    def record(ws, *args, **kwargs):
        seen.append(ws)
        raise Captured

    monkeypatch.setattr("refimpl.warmstart.base_model", record)
    return seen


def test_issue_49_4_credit_presets_leave_typed_flags_alone(tmp_path, monkeypatch):
    """``--preset collapse --train.task chain`` ran on countdown; ``--preset longchain
    --train.warmstart.model.block-size 64`` used 96. Typed flags win, as with compare."""
    from refimpl.cli import main

    seen = _policy_settings(monkeypatch)
    out = ["--out", str(tmp_path / "x.json")]
    with pytest.raises(Captured):
        main(["credit", "--preset", "collapse", "--train.task", "chain", *out])
    assert seen[-1].task == "chain"
    argv = ["credit", "--preset", "longchain", "--train.warmstart.model.block-size", "128"]
    with pytest.raises(Captured):
        main([*argv, *out])
    assert seen[-1].model.block_size == 128
    assert seen[-1].steps == 1800  # the rest still the preset's
    with pytest.raises(Captured):
        main(["credit", "--preset", "longchain", *out])
    assert seen[-1].model.block_size == 96  # untyped: the preset's


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """A tiny chain run and a tiny addition run (3 steps each)."""
    runs = tmp_path_factory.mktemp("runs")
    chain = make_run(runs, "chain")
    addition = make_run(runs, "addition", "--task", "addition", "--task-args", "digits=1")
    return chain, addition


def test_issue_49_5_a_checkpoint_of_another_task_is_refused(tmp_path, capsys, two_runs):
    """A run directory whose checkpoint came from an addition run was scored as chain; train
    --resume refuses it, and so does credit --run, naming the checkpoint's state.json."""
    chain, addition = two_runs
    mixed = tmp_path / "mixed"
    shutil.copytree(chain, mixed)
    shutil.rmtree(mixed / "checkpoint")
    shutil.copytree(addition / "checkpoint", mixed / "checkpoint")
    err = _refused(["credit", "--run", mixed, "--out", tmp_path / "x.json"], "", capsys)
    assert "state.json" in err and "--task" in err and "'addition'" in err, err
    assert not (tmp_path / "x.json").exists()


def test_issue_49_6_train_flags_with_run_are_refused(tmp_path):
    """``credit --run DIR --train.temperature 0.5 --train.task countdown`` ignored both
    flags; they are refused, named, before anything is loaded."""
    run = tmp_path / "r"
    run.mkdir()
    (run / "config.json").write_text("{}")
    cfg = CreditConfig(run=run, out=tmp_path / "x.json")
    from refimpl.settings.train_config import TrainConfig

    bad = CreditConfig(run=run, out=tmp_path / "x.json",
                       train=TrainConfig(temperature=0.5, task="countdown"))  # fmt: skip
    with pytest.raises(ValueError, match=r"--train\.task: not used with --run") as err:
        bad.check()
    assert "--train.temperature" in str(err.value)
    with pytest.raises(ValueError, match=r"--train\.temperature: not used with --run"):
        cfg.check(frozenset({"train.temperature"}))  # typed, even at its default value
    with pytest.raises(ValueError, match=r"--preset: not used with --run"):
        cfg.check(frozenset({"preset"}))
    cfg.check(frozenset({"run", "out", "group_size"}))  # --group-size applies to a run


# -- The oracle's library functions ------------------------------------------------------------


def _samples(lengths: list[int], T: int, truncated: list[bool], G: int = 2) -> Samples:
    B = len(lengths)
    mask = (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).float()
    return Samples(
        prompt_ids=torch.ones(B, 2, dtype=torch.long),
        prompt_mask=torch.ones(B, 2, dtype=torch.long),
        response_ids=torch.full((B, T), 5, dtype=torch.long),
        response_mask=mask,
        logp_old=-mask,
        entropy_old=mask,
        truncated=torch.tensor(truncated),
        group_size=G,
    )


def _wins(value: float):
    """A ContinueFn whose every rollout wins (``value`` = 1) or loses (0)."""

    def continue_prefixes(keys, t):
        return np.full((len(keys), 4), bool(value)), 0

    return continue_prefixes


def test_issue_49_7_the_oracle_functions_check_their_arguments():
    """Temperature 0, −1, 1e-40, ``top_p = 0``, ``rollouts = −2``, a continuation function
    of the wrong shape or returning counts, ``prompt_of`` shorter than the rows, and a budget
    larger than the samples were drawn with: each a ValueError naming the argument (they
    gave NaN, non-finite log-probs, values in [−2, 0], values capped at 0.5 or equal to 7,
    zero-filled prompts and another policy's values)."""
    task = get_task("addition", digits=1)
    problem = task.sample(1, np.random.default_rng(0))[0]
    for kwargs, named in (
        ({"temperature": 0.0}, "temperature"),
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": 1e-40}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_k": 0}, "top_k"),
    ):
        with pytest.raises(ValueError, match=f"^{named}: expected"):
            reference_values(None, task, problem, [], max_new_tokens=2, **kwargs)
    samples = _samples([3, 8, 8, 2], 8, [False, True, True, False])
    problems = task.sample(2, np.random.default_rng(0))
    outcome = torch.tensor([1.0, 0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match="^temperature: expected"):
        token_values(None, task, problems, samples, outcome, rollouts=2, max_new_tokens=8,
                     temperature=1e-40)  # fmt: skip
    with pytest.raises(ValueError, match="^max_new_tokens: expected the budget"):
        token_values(None, task, problems, samples, outcome, rollouts=2, max_new_tokens=20)
    with pytest.raises(ValueError, match="^outcome: expected finite"):
        token_values(None, task, problems, samples, outcome * math.nan, rollouts=2,
                     max_new_tokens=8)  # fmt: skip
    rows, success = [[5, 6], [5, 7, 2]], [True, False]
    with pytest.raises(ValueError, match="^rollouts: expected"):
        estimate_values(rows, [0, 0], success, 3, -2, _wins(1))
    with pytest.raises(ValueError, match="^prompt_of: expected"):
        estimate_values(rows, [0], success, 3, 4, _wins(1))
    with pytest.raises(ValueError, match="^width: expected"):
        estimate_values(rows, [0, 0], success, 2, 4, _wins(1))
    for bad in (
        lambda keys, t: (np.full((len(keys), 4), 7), 0),  # counts, not wins
        lambda keys, t: (np.ones((len(keys), 2), dtype=bool), 0),  # half the rollouts
        lambda keys, t: (np.ones((max(len(keys) - 1, 0), 4), dtype=bool), 0),  # a prefix short
    ):
        with pytest.raises(ValueError, match="^continue_prefixes: expected"):
            estimate_values(rows, [0, 0], success, 3, 4, bad)
    # The checks let the right arguments through: every value a probability.
    values = estimate_values(rows, [0, 0], success, 3, 4, _wins(1))
    assert float(values.value_before.min()) >= 0 and float(values.value_after.max()) <= 1


def test_issue_49_8_bench_learning_refuses_a_nonsense_collapse_ratio_or_target():
    """``--collapse-ratio inf`` reported "collapsed 1/1" while entropy rose; ``--target-gain
    nan`` was accepted."""
    for kwargs, named in (
        ({"collapse_ratio": math.inf}, "--collapse-ratio"),
        ({"collapse_ratio": 2.0}, "--collapse-ratio"),
        ({"collapse_ratio": 0.0}, "--collapse-ratio"),
        ({"target_gain": math.nan}, "--target-gain"),
        ({"target_gain": math.inf}, "--target-gain"),
    ):
        with pytest.raises(ValueError, match=f"^{named}: expected"):
            LearningConfig(**kwargs)
    LearningConfig(collapse_ratio=1.0, target_gain=-0.1)  # the bounds' edges are settings


def test_issue_49_9_a_temperature_that_trains_nothing_is_refused(tmp_path, capsys):
    """``train --temperature 1e-30`` sampled greedily, recorded entropy 0 and updated
    nothing. Below ``TEMPERATURE_MIN`` float32 gives the runner-up of a logit gap of one
    nothing; refused, saying why."""
    from refimpl.sampling.distribution import TEMPERATURE_MIN

    assert TEMPERATURE_MIN >= 1e-2
    # The reason the bound states: at τ = TEMPERATURE_MIN a gap of 1 still leaves the
    # runner-up a float32 probability; at 1e-3 (or 1e-30) it is exactly 0.
    gap = torch.tensor([1.0, 0.0])
    assert float(torch.softmax(gap / TEMPERATURE_MIN, 0)[1]) > 0
    assert float(torch.softmax(gap / 1e-3, 0)[1]) == 0
    runs = tmp_path / "runs"
    for t in ("1e-30", "0.001"):
        argv = ["train", *tiny_flags(runs), "--name", "cold", "--temperature", t]
        err = _refused(argv, "--temperature: expected", capsys)
        assert "greedy" in err and "gradient" in err
    assert not (runs / "cold").exists()


# -- Tracebacks --------------------------------------------------------------------------------


def test_issue_49_10_the_oracle_s_memory_is_estimated_before_it_starts(
    tmp_path, capsys, monkeypatch, no_warmstart
):
    """``--rollouts 1000000000 --max-rows 1000000000`` and ``--prompts 4096 --group-size
    1024`` ended in an allocator's traceback asking for 19-72 GB. On a 24 GB machine each is
    refused at once with the estimate and the flag to lower."""
    monkeypatch.setattr(
        "refimpl.settings.memory.memory_budget", lambda device: (24 * 10**9, "of this machine")
    )
    out = tmp_path / "x.json"
    big = ["--rollouts", "1000000000", "--max-rows", "1000000000"]
    err = _refused(_tiny_credit(out, *big, "--prompts", "8", "--group-size", "8"),
                   "--max-rows: 1000000000 needs about", capsys)  # fmt: skip
    assert "TB" in err and "expected at most about" in err
    # The default model (the issue's command): 4M rows of its KV cache.
    argv = ["credit", "--prompts", "4096", "--group-size", "1024", "--out", out]
    err = _refused(argv, "--", capsys)
    assert "needs about" in err and ("--prompts" in err or "--group-size" in err), err
    assert not out.exists()


def _report_inputs(tmp_path: Path, monkeypatch):
    """The claims report pointed at a copy of its result files, its pages at copies."""
    claims = _claims_report()
    result_files = sys.modules["claims_results"]  # where the report's result paths are defined
    real = tmp_path / "real"
    shutil.copytree(result_files.REAL, real)
    toy = tmp_path / "toy.json"
    toy.write_text(result_files.TOY.read_text())
    monkeypatch.setattr(result_files, "REAL", real)
    monkeypatch.setattr(result_files, "CROSS", real / "cross_machine")
    monkeypatch.setattr(result_files, "TOY", toy)
    for name in ("PAGE", "RESULTS_PAGE"):
        monkeypatch.setattr(claims, name, _copy_page(tmp_path, getattr(claims, name)))
    return claims, real, toy


@pytest.mark.parametrize(
    ("target", "content", "named"),
    [
        ("real/dapo_seed1.json", "TRUNCATE", "dapo_seed1.json: not valid JSON"),
        ("real/gtpo_seed0.json", "{}", "gtpo_seed0.json: no key 'evals'"),
        ("real/tepo_seed2.json", "[1, 2]", "tepo_seed2.json: a JSON list"),
        ("real/grpo_seed1.json", '{"evals": []}', "grpo_seed1.json: evals: expected"),
        ("real/base_seed2.json", None, "base_seed2.json: missing"),
        ("toy.json", '{"config": {}, "results": {}}', "toy.json: no key"),
    ],
)
def test_issue_49_11_the_claims_check_names_a_damaged_file(
    tmp_path, monkeypatch, capsys, target, content, named
):
    """``claims/claims_page.py --check`` on a truncated file, ``{}``, ``[1, 2]``, ``{"evals":
    []}``, a deleted seed file or a skeletal toy file was a JSONDecodeError, KeyError or
    IndexError naming no file. One line names the file and what is wrong; exit 2."""
    claims, _real, _toy = _report_inputs(tmp_path, monkeypatch)
    path = tmp_path / target
    if content is None:
        path.unlink()
    elif content == "TRUNCATE":
        path.write_text(path.read_text()[: len(path.read_text()) // 2])
    else:
        path.write_text(content)
    assert claims.main(["--check"]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1, err


@pytest.mark.parametrize(
    ("stem", "content", "named"),
    [
        ("longchain_step40", "TRUNCATE", "longchain_step40.json: not valid JSON"),
        ("countdown_step0", "{}", "countdown_step0.json: no key"),
        ("regime_probes", "[1, 2]", "regime_probes.json: a JSON list"),
        ("longchain_learning", '{"results": {}}', "longchain_learning.json"),
    ],
)
def test_issue_49_11_the_credit_check_names_a_damaged_file(
    tmp_path, monkeypatch, capsys, stem, content, named
):
    """The same for ``credit/credit_page.py --check``."""
    credit = _credit_report()
    results = tmp_path / "results"
    shutil.copytree(credit.HERE / "results", results)
    page = _copy_page(tmp_path, credit.PAGE)
    monkeypatch.setattr(credit, "PAGE", page)
    path = results / f"{stem}.json"
    text = path.read_text()
    path.write_text(text[: len(text) // 2] if content == "TRUNCATE" else content)
    assert credit.main(["--check", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert named in err and err.count("\n") == 1 and "Traceback" not in err, err


def test_issue_49_12_help_into_a_closed_pipe_is_quiet():
    """``refimpl credit --help | head`` printed a BrokenPipeError traceback: the reader has
    gone before the help is written (its end of the pipe closed first), for any command."""
    for command in ("credit", "train"):
        proc = subprocess.Popen(
            python_cli(command, "--help"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        proc.stdout.close()  # the reader is gone before a byte is written
        err = proc.stderr.read().decode()
        proc.wait(timeout=120)
        assert "Traceback" not in err and "BrokenPipeError" not in err, err


# -- Checked too late --------------------------------------------------------------------------


def test_issue_49_13_the_output_path_is_checked_before_any_work(tmp_path, capsys, no_warmstart):
    """``--out existing_file/x.json`` or ``--out /proc/x.json`` failed only after the whole
    oracle had run, with ``[Errno 17] File exists`` naming no flag."""
    (tmp_path / "afile").write_text("")
    err = _refused(_tiny_credit(tmp_path / "afile" / "x.json"), "--out:", capsys)
    assert "afile is not a directory" in err
    (tmp_path / "adir.json").mkdir()
    _refused(_tiny_credit(tmp_path / "adir.json", "--overwrite"), "--out:", capsys)
    if Path("/proc/self").is_dir():  # Linux: a virtual file system takes no new file
        _refused(_tiny_credit(Path("/proc/x.json")), "--out: /proc is not writable", capsys)


def test_issue_49_14_a_missing_or_broken_checkpoint_is_found_before_the_warm_start(
    tmp_path, capsys, two_runs, no_warmstart
):
    """``credit --run`` reported a missing or broken ``checkpoint/`` only after training a
    warm start: now before one is loaded or trained."""
    chain, _ = two_runs
    gone = tmp_path / "gone"
    shutil.copytree(chain, gone)
    shutil.rmtree(gone / "checkpoint")
    _refused(["credit", "--run", gone, "--out", tmp_path / "x.json"], "--run:", capsys)
    broken = tmp_path / "broken"
    shutil.copytree(chain, broken)
    (broken / "checkpoint" / "model.safetensors").write_bytes(b"\0" * 100)
    err = _refused(["credit", "--run", broken, "--out", tmp_path / "x.json"], "", capsys)
    assert "model.safetensors" in err, err
    assert not (tmp_path / "x.json").exists()


def test_issue_49_15_a_run_is_scored_from_wherever_it_is(tmp_path, capsys, monkeypatch):
    """``credit --run ../elsewhere/runs/r1`` from another directory trained a new warm start
    into ./runs: config.json's relative ``runs_dir`` is taken where the run is now."""
    elsewhere, other = tmp_path / "elsewhere", tmp_path / "other"
    elsewhere.mkdir()
    other.mkdir()
    monkeypatch.chdir(elsewhere)
    flags = tiny_flags(Path("runs"), steps=1, warmstart=False)
    code, _, err = cli(["train", *flags, "--name", "r1"], capsys)
    assert code == 0, err
    assert json.loads((elsewhere / "runs/r1/config.json").read_text())["train_config"][
        "runs_dir"] == "runs"  # fmt: skip
    monkeypatch.chdir(other)
    argv = ["credit", "--run", "../elsewhere/runs/r1", "--prompts", "2", "--rollouts", "2",
            "--algos", "grpo", "--out", "c.json"]  # fmt: skip
    code, _, err = cli(argv, capsys)
    assert code == 0, err
    assert sorted(p.name for p in other.iterdir()) == ["c.json"]  # no ./runs, no warm start


def test_issue_49_16_duplicate_tasks_are_refused_at_once(monkeypatch):
    """``bench-learning --tasks chain,chain`` trained, then refused its own worker as
    "another refimpl process": the two runs share a directory. Refused before any training."""
    from refimpl.bench import learning

    def forbidden(*args, **kwargs):
        raise AssertionError("trained before the flags were checked")

    monkeypatch.setattr(learning, "run_all", forbidden)
    for kwargs, named in (
        ({"tasks": "chain,chain"}, "--tasks"),
        ({"seeds": "0,1,0"}, "--seeds"),
        ({"algos": "grpo,grpo"}, "--algos"),
        ({"ablations": "gtpo alpha_2=0.0,gtpo alpha_2=0.0"}, "--ablations"),
    ):
        with pytest.raises(ValueError, match=f"^{named}: .* repeats"):
            learning.run_learning(LearningConfig(**kwargs), frozenset(kwargs))


def test_issue_49_17_bench_learning_workers_are_bounded_by_the_cores():
    """``bench-learning --workers 99`` on 2 CPUs was accepted; compare's bound applies."""
    cores = os.cpu_count() or 1
    with pytest.raises(ValueError, match=f"^--workers: expected at most {cores}"):
        LearningConfig(workers=cores + 1)
    LearningConfig(workers=cores)


def test_issue_49_18_messages_name_the_flag_typed(tmp_path, capsys, two_runs, no_warmstart):
    """``credit`` named ``--temperature``, ``--max-new-tokens`` and ``--warmstart.steps``
    where ``--train.…`` was typed; ``num_ops must be in [1, 32]`` named no flag; a deleted
    ``algo_config.kl_coef`` read "config.json says None" on resume."""
    out = ["--out", tmp_path / "x.json"]
    _refused(["credit", "--train.temperature", "0", *out], "--train.temperature: expected",
             capsys)  # fmt: skip
    _refused(["credit", "--train.max-new-tokens", "0", *out], "--train.max-new-tokens:", capsys)
    _refused(["credit", "--train.warmstart.steps", "0", *out], "--train.warmstart.steps:", capsys)
    err = _refused(["credit", "--train.task-args", "num_ops=99", *out],
                   "--train.task-args: num_ops must be in [1, 32]", capsys)  # fmt: skip
    runs = tmp_path / "runs"
    argv = ["train", *tiny_flags(runs), "--name", "x", "--task-args", "num_ops=99"]
    _refused(argv, "--task-args: num_ops must be in [1, 32]", capsys)
    chain, _ = two_runs
    run = tmp_path / "kl"
    shutil.copytree(chain, run)
    config = json.loads((run / "config.json").read_text())
    del config["algo_config"]["kl_coef"]
    (run / "config.json").write_text(json.dumps(config))
    err = _refused(resume(tmp_path, "kl", "--steps", "4"), "", capsys)
    assert "algo_config.kl_coef is missing" in err and "says None" not in err, err


def test_the_library_refuses_an_empty_rollouts_item():
    """``CreditConfig.rollout_list`` from Python, as the command line does: ``2,,4`` is a typo
    (it was read as K = 2, 4)."""
    from refimpl.bench.credit import CreditConfig

    with pytest.raises(ValueError, match="--rollouts: '2,,4' has an empty item"):
        CreditConfig(rollouts="2,,4").rollout_list()
    assert CreditConfig(rollouts="2,4").rollout_list() == [2, 4]
