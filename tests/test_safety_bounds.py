"""Bounded inputs, names and presets (issue: nothing lost, nothing silently wrong).

Every size flag has an upper bound derived from the machine's memory, ``--threads`` one from
its CPU count, ``--lr`` one from float32; a config file's wrongly typed value, a name that is
not one path component, a ``--runs-dir`` that is a file and a duplicated ``--algo-args`` key
are each one line naming the flag or key, exit 2, before anything is created. Presets never
override a typed flag, and the warm-start cache follows ``--runs-dir``.

Any side effect before the flags are checked fails the test (the warm start, the run
directory and torch's thread pool are patched to raise), so none of these values is ever
tried for real.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest

from refimpl.runs.cache import cache_dir, cache_key
from refimpl.settings.plan import resolve
from refimpl.train import load_config_file
from tests.safety_helpers import cli, error_lines, tiny_flags


@pytest.fixture
def no_side_effects(monkeypatch):
    """Training a warm start, creating a run directory or setting torch's threads fails."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a side effect happened before the flags were checked")

    monkeypatch.setattr("refimpl.warmstart._train", forbidden)
    monkeypatch.setattr("refimpl.train.base_model", forbidden)
    monkeypatch.setattr("refimpl.compare.train_warmstart", forbidden)
    monkeypatch.setattr("refimpl.runs.rundir.write_new_run", forbidden)
    monkeypatch.setattr("torch.set_num_threads", forbidden)


def refused(argv: list, named: str, capsys, runs: Path) -> str:
    """``refimpl ARGV`` is one line naming ``named``, exit 2, and creates nothing in
    ``runs``; the line."""
    code, _, err = cli(argv, capsys)
    assert code == 2, err
    assert len(error_lines(err)) == 1 and err.count("\n") == 1, err
    assert err.startswith(f"refimpl: error: {named}"), err
    assert not runs.exists() or not any(runs.iterdir()), sorted(runs.iterdir())
    return err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--group-size", "100000000"], "--group-size: 100000000 needs about"),
        (["--prompts-per-step", "1000000000"], "--prompts-per-step: 1000000000 needs about"),
        (["--eval-samples", "1000000000000"], "--eval-samples: 1000000000000 needs about"),
        (["--eval-problems", "1000000000000"], "--eval-problems: 1000000000000 needs about"),
        (["--probe-prompts", "1000000000000"], "--probe-prompts: 1000000000000 needs about"),
        (
            ["--warmstart.model.n-embd", "1000000", "--warmstart.model.n-head", "1"],
            "--warmstart.model.n-embd: 1000000 needs about",
        ),
        (["--warmstart.batch-size", "1000000000"], "--warmstart.batch-size: 1000000000 needs"),
        (["--threads", "100000"], "--threads: expected at most"),
        (["--warmstart.threads", "100000"], "--warmstart.threads: expected at most"),
        (["--lr", "1e38"], "--lr: expected a learning rate ≤"),
        (["--algo-args", "alpha_2=0.1", "alpha_2=0.2"], "--algo-args: alpha_2 is given twice"),
        (["--task-args", "num_ops=1", "num_ops=2"], "--task-args: num_ops is given twice"),
    ],
)
def test_a_value_too_large_for_the_machine_is_refused_naming_the_estimate(
    tmp_path, capsys, no_side_effects, flags, named
):
    """The issue's crashes: ``--group-size 100000000`` was killed by the kernel at 24 GB,
    ``--eval-samples 1e12`` raised MemoryError, ``--threads 100000`` segfaulted, ``--lr
    1e38`` was an Adam overflow traceback; duplicate ``--algo-args`` keys: the last won."""
    runs = tmp_path / "runs"
    argv = ["train", *tiny_flags(runs, warmstart=False), "--algo", "gtpo", *flags]
    err = refused([*argv, "--name", "big"], named, capsys, runs)
    if "needs about" in named:
        assert "(an estimate)" in err and "of memory" in err and "at most about" in err, err


def test_a_wrongly_typed_value_in_a_config_file_is_one_line_naming_the_key(
    tmp_path, capsys, no_side_effects
):
    """The issue: ``"lr": "fast"`` in a config file was a TypeError traceback."""
    runs = tmp_path / "runs"
    for key, value, expected in (
        ("lr", "fast", "expected a number"),
        ("steps", 2.5, "expected an integer"),
        ("plot", "no", "expected true or false"),
        ("algo_args", "alpha_2=0.1", "expected a list of strings"),
    ):
        config = tmp_path / f"{key}.json"
        config.write_text(json.dumps({"train_config": {"algo": "gtpo", key: value}}))
        err = refused(["train", "--config", config, "--runs-dir", runs], "--config:", capsys, runs)
        assert f"{config}: {key} is {json.dumps(value)}, {expected}" in err, err


def test_the_algo_config_section_of_a_config_file_is_read_and_checked(
    tmp_path, capsys, no_side_effects
):
    """The issue's silent result 3: ``algo_config.clip_eps_low=0.05``, a wrongly typed
    ``"0.2"`` and a foreign ``alpha_2`` in a ``--config`` file all ran with the default 0.2.
    Each key is checked as ``--algo-args`` are, and a value that differs from what
    ``train_config`` gives is used (and recorded in ``algo_args``)."""
    runs = tmp_path / "runs"
    for algo_config, expected in (
        ({"clip_eps_low": "0.2"}, 'algo_config.clip_eps_low is "0.2", expected a number'),
        ({"alpha_2": 0.1}, "unknown setting algo_config.'alpha_2' for grpo (valid: "),
        ({"clip_eps_low": 5}, "algo_config: Config.clip_eps_low: expected a value in [0, 1)"),
        ([0.05], "algo_config is [0.05], expected an object"),
    ):
        config = tmp_path / "algo.json"
        record = {"train_config": {"algo": "grpo", "task": "chain"}, "algo_config": algo_config}
        config.write_text(json.dumps(record))
        err = refused(["train", "--config", config, "--runs-dir", runs], "--config:", capsys, runs)
        assert f"--config: {config}: {expected}" in err, err
    record["algo_config"] = {"clip_eps_low": 0.05, "clip_eps_high": 0.2}  # 0.2: as given
    config.write_text(json.dumps(record))
    cfg = load_config_file(config)
    assert cfg.algo_args == ("clip_eps_low=0.05",)
    assert resolve(cfg).algo_cfg.clip_eps_low == 0.05
    # A resumed run's algorithm settings are its checkpoint's: --resume does not read them.
    assert load_config_file(config, "--resume", algo_config=False).algo_args == ()


def test_a_deeply_nested_json_file_is_one_line(tmp_path, capsys, no_side_effects):
    """The issue's traceback 10: a deeply nested config file was a RecursionError from the
    JSON decoder; so was a run's config.json on ``--resume``."""
    runs = tmp_path / "runs"
    deep = "[" * 100_000 + "]" * 100_000
    config = tmp_path / "deep.json"
    config.write_text('{"train_config": ' + deep + "}")
    err = refused(["train", "--config", config, "--runs-dir", runs], "--config:", capsys, runs)
    assert f"{config}: not valid JSON" in err, err
    run = tmp_path / "resumed" / "deep"
    run.mkdir(parents=True)
    (run / "config.json").write_text(deep)
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    code, _, err = cli(["train", "--resume", "--runs-dir", run.parent, "--name", "deep"], capsys)
    assert code == 2 and len(error_lines(err)) == 1 and "Traceback" not in err, err
    assert "damaged run (config.json: not valid JSON" in err, err


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--name", "a/b"], "--name: expected a directory name"),
        (["--name", "x" * 300], "--name: expected a name of at most"),
    ],
)
def test_a_name_is_one_path_component(tmp_path, capsys, no_side_effects, flags, named):
    """The issue: ``--name a/b`` was accepted, a 300-character name was an error naming no
    flag."""
    runs = tmp_path / "runs"
    refused(["train", *tiny_flags(runs, warmstart=False), *flags], named, capsys, runs)


def test_a_runs_dir_that_is_a_file_is_named(tmp_path, capsys, no_side_effects):
    file = tmp_path / "file"
    file.write_text("not a directory")
    argv = ["train", *tiny_flags(file / "runs", warmstart=False), "--name", "x"]
    err = refused(argv, "--runs-dir:", capsys, tmp_path / "nothing")
    assert f"{file} is a file, not a directory" in err
    assert file.read_text() == "not a directory"


class Captured(Exception):
    """Raised where the patched code would train a warm start: what was asked is recorded."""


@pytest.fixture
def planned(monkeypatch, no_side_effects):
    """``refimpl ARGV`` → ``(runs, warm starts)``: the TrainConfig of each run that would be
    trained (compare's, after its flags were checked) and the warm start it would train or
    load; nothing is trained."""
    runs: list = []
    warm: list = []

    def record_warmstart(cfg, *args, **kwargs):
        warm.append(cfg)
        raise Captured

    def record_run(cfg):
        runs.append(cfg)

    monkeypatch.setattr("refimpl.compare.preflight", record_run)
    monkeypatch.setattr("refimpl.compare.train_warmstart", record_warmstart)
    monkeypatch.setattr("refimpl.train.base_model", record_warmstart)

    def run(argv: list, capsys) -> tuple[list, list]:
        runs.clear()
        warm.clear()
        with pytest.raises(Captured):
            cli(argv, capsys)
        return list(runs), list(warm)

    return run


def test_a_preset_never_overrides_a_typed_flag(tmp_path, capsys, planned):
    """The issue's silent result 6: ``compare --preset collapse --train.task chain --seeds
    0`` ran countdown with seeds 0,1,2 (a typed flag equal to its default was overridden)."""
    argv = ["compare", "--preset", "collapse", "--runs-dir", tmp_path]
    runs, _ = planned([*argv, "--train.task", "chain", "--seeds", "0"], capsys)
    assert {r.task for r in runs} == {"chain"} and {r.seed for r in runs} == {0}
    # What was not typed comes from the preset: its algorithms and its 200 steps.
    assert [r.algo for r in runs] == ["grpo", "dapo", "gspo", "gtpo", "grpo_s", "tepo"]
    assert {r.steps for r in runs} == {200}
    runs, _ = planned(argv, capsys)
    assert {r.task for r in runs} == {"countdown"} and {r.seed for r in runs} == {0, 1, 2}
    # --train.lr 1e-4 is the default, typed: it survives the onpolicy preset's 5e-5.
    argv = ["compare", "--preset", "onpolicy", "--algos", "grpo", "--runs-dir", tmp_path]
    runs, _ = planned([*argv, "--train.lr", "1e-4"], capsys)
    assert [(r.lr, r.prompts_per_step) for r in runs] == [(1e-4, 16)]
    runs, _ = planned([*argv, "--train.no-plot"], capsys)
    assert [(r.lr, r.plot) for r in runs] == [(5e-5, False)]


def test_the_warm_start_cache_follows_runs_dir(tmp_path, capsys, planned, monkeypatch):
    """The issue: ``--runs-dir X`` without ``--warmstart.runs-dir`` wrote the warm-start
    cache into ./runs of the current directory (here: an empty working directory)."""
    cwd, elsewhere = tmp_path / "cwd", tmp_path / "elsewhere"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    flags = tiny_flags(elsewhere, warmstart=False)
    _, (ws,) = planned(["train", *flags, "--name", "run"], capsys)
    assert cache_dir(ws).parent == elsewhere / "warmstart"
    train = [f.replace("--", "--train.", 1) if f.startswith("--") else f for f in flags]
    i = train.index("--train.runs-dir")
    del train[i : i + 2]  # compare's runs go to --runs-dir, its progress bars are its own
    train.remove("--train.no-progress")
    _, (ws,) = planned(["compare", "--algos", "grpo", "--runs-dir", elsewhere, *train], capsys)
    assert cache_dir(ws).parent == elsewhere / "warmstart"
    # --warmstart.runs-dir, when given, says where the cache is.
    _, (ws,) = planned(["train", *flags, "--name", "run", "--warmstart.runs-dir", cwd], capsys)
    assert cache_dir(ws).parent == cwd / "warmstart"
    assert not (cwd / "runs").exists() and not any(cwd.iterdir())


def test_bench_learning_preset_never_overrides_a_typed_flag():
    """The same rule for ``bench-learning``: ``--preset collapse --budget-steps 150 --ablations
    gtpo alpha_2=0.0`` keeps the typed 150 (the default, which the preset's 200 would replace)
    and the typed ablation, and takes the rest (eval every 50, the six algorithms) from the
    preset."""
    from refimpl.bench.learning_settings import LearningConfig
    from refimpl.settings.presets import explicit_fields

    argv = ["--preset", "collapse", "--budget-steps", "150", "--ablations", "gtpo alpha_2=0.0"]
    cfg = LearningConfig(preset="collapse", budget_steps=150, ablations="gtpo alpha_2=0.0")
    filled = cfg.with_preset(explicit_fields(argv, LearningConfig))
    assert (filled.budget_steps, filled.ablations) == (150, "gtpo alpha_2=0.0")
    assert filled.eval_every == 50 and filled.algos == "grpo,dapo,gspo,gtpo,grpo_s,tepo"
    # Untyped, the preset's values win.
    assert LearningConfig(preset="collapse").with_preset(frozenset()).budget_steps == 200


def test_a_preset_fills_nested_settings_and_a_typed_one_still_wins(tmp_path, capsys, planned):
    """``longchain`` sets fields of the warm start (its steps, its model's block size) as a
    nested dict: what is not typed comes from it, and ``--train.warmstart.steps`` typed beside
    it wins (a preset that replaced the whole warm start would override it)."""
    argv = ["compare", "--preset", "longchain", "--algos", "grpo", "--seeds", "0"]
    runs, _ = planned([*argv, "--runs-dir", tmp_path], capsys)
    (run,) = runs
    assert (run.task, tuple(run.task_args)) == ("chain", ("num_ops=12", "min_ops=10"))
    assert (run.warmstart.steps, run.warmstart.schedule_steps) == (1800, 2400)
    assert run.warmstart.model.block_size == 96
    assert run.warmstart.model.n_layer == 2 and run.warmstart.lr == 3e-3  # not the preset's
    runs, _ = planned([*argv, "--runs-dir", tmp_path, "--train.warmstart.steps", "600"], capsys)
    assert [(r.warmstart.steps, r.warmstart.model.block_size) for r in runs] == [(600, 96)]
    assert [r.warmstart.schedule_steps for r in runs] == [2400]  # the rest still the preset's


def test_bench_learning_runs_take_the_presets_task_knobs_and_warm_start():
    """``bench-learning --preset longchain``: every run trains on chain with 10 to 12 operators
    from the preset's warm start (2,400 steps, 96 positions), and the token budget is measured
    on those problems; the collapse preset's warm start is the default one (its cache key is
    what it was before presets could set a warm start)."""
    from refimpl.bench.learning import _warmstart, plan
    from refimpl.bench.learning_settings import LearningConfig
    from refimpl.settings.warmstart_config import WarmstartConfig

    cfg = LearningConfig(preset="longchain").with_preset(frozenset())
    runs, budgets = plan(cfg)
    assert {tuple(r.train.task_args) for r in runs} == {("num_ops=12", "min_ops=10")}
    assert {(r.train.warmstart.steps, r.train.warmstart.model.block_size) for r in runs} == {
        (1800, 96)
    }
    # 100 steps × 64 prompts × 8 completions × the mean reference length (> 25 tokens).
    assert budgets["chain"] > 100 * 64 * 8 * 25
    collapse = LearningConfig(preset="collapse").with_preset(frozenset())
    default = WarmstartConfig(task="countdown", runs_dir=collapse.runs_dir)
    assert cache_key(_warmstart(collapse, "countdown").key_inputs()) == cache_key(
        default.key_inputs()
    )


# ---------------------------------------------------------------------------------------------
# Issue 41: every input bounded before anything is read or started.
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--top-p", "1e-46"], "--top-p: expected"),
        (["--temperature", "1e-40"], "--temperature: expected"),
        (["--ppo-epochs", "100000000"], "--ppo-epochs: expected"),
        (["--seed", str(2**32 - 1)], "--seed: expected"),
        (["--warmstart.seed", str(2**32 - 1)], "--warmstart.seed: expected"),
        (["--name", "a\nb"], "--name: expected"),
        (["--name", "a\x1b[31mb"], "--name: expected"),
        (["--runs-dir", "runs\x1b[2J"], "--runs-dir: expected"),
        (["--algo", "steer", "--algo-args", "lambda_max=1e300"], "--algo-args: Config.lambda_max"),
        (
            ["--algo", "steer", "--algo-args", "omega_floor=1e300", "mapping=exponential"],
            "--algo-args: Config.omega_floor",
        ),
    ],
)
def test_issue_41_s_unbounded_flags_are_refused_before_anything(
    tmp_path, capsys, no_side_effects, flags, named
):
    """The issue's silent results 5 and 11, traceback 12 and unbounded size 20: ``--top-p
    1e-46`` and ``--temperature 1e-40`` underflow in float32 (every token dropped, the run
    failed after its directory existed), ``--ppo-epochs 100000000`` makes a step that never
    ends, a seed whose stream word does not fit 32 bits could collide with the held-out
    stream, a name with a newline or an escape splits the "run directory:" line and reaches
    the terminal, STEER's ``lambda_max=1e300`` was a 35-line RuntimeError after the run
    directory existed. Each is one line naming the flag, exit 2, nothing created."""
    runs = tmp_path / "runs"
    argv = ["train", *tiny_flags(runs, warmstart=False), "--name", "x", *flags]
    if "--runs-dir" in flags:
        argv = ["train", "--name", "x", "--runs-dir", str(tmp_path / flags[1])]
    refused(argv, named, capsys, runs)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_steer_s_unbounded_coefficient_in_a_config_file_is_one_line(
    tmp_path, capsys, no_side_effects
):
    """The issue's traceback 12, the ``--config`` way: ``algo_config.lambda_max`` of 1e300."""
    runs = tmp_path / "runs"
    config = tmp_path / "steer.json"
    record = {"train_config": {"algo": "steer", "task": "chain"}}
    config.write_text(json.dumps({**record, "algo_config": {"lambda_max": 1e300}}))
    err = refused(["train", "--config", config, "--runs-dir", runs], "--config:", capsys, runs)
    assert "Config.lambda_max: expected a value in" in err, err


def test_the_smallest_temperature_and_top_p_still_train(tmp_path, capsys):
    """At the bounds (``refimpl.sampling.distribution.TEMPERATURE_MIN``, ``TOP_P_MIN``)
    float32 still computes: a tiny run trains its steps with finite metrics."""
    from refimpl.runs.runlog import read_metrics
    from refimpl.sampling.distribution import TEMPERATURE_MIN, TOP_P_MIN

    argv = ["train", *tiny_flags(tmp_path, steps=2), "--name", "edge"]
    argv += ["--temperature", repr(TEMPERATURE_MIN), "--top-p", repr(TOP_P_MIN)]
    code, _, err = cli(argv, capsys)
    assert code == 0, err
    for record in read_metrics(tmp_path / "edge")[1:]:
        assert all(math.isfinite(v) for v in record.values() if isinstance(v, float)), record


def test_a_run_named_warmstart_is_refused_wherever_the_cache_is(tmp_path, capsys, no_side_effects):
    """The issue's silent result 8: ``--name warmstart`` with ``--warmstart.runs-dir``
    elsewhere was accepted; a later run in that runs dir put its cache inside the run, which
    ``refimpl runs`` then hid and ``--overwrite`` refused. The name is the cache's, in every
    runs dir (the comparison's ``--name`` too)."""
    runs = tmp_path / "runs"
    flags = [*tiny_flags(runs, warmstart=False), "--warmstart.runs-dir", tmp_path / "cache"]
    refused(["train", *flags, "--name", "warmstart"], "--name:", capsys, runs)
    refused(["compare", "--name", "warmstart", "--runs-dir", runs], "--name:", capsys, runs)


def test_compare_and_bench_speed_bound_their_counts(tmp_path, capsys, no_side_effects):
    """The issue's unbounded counts 10: ``compare --workers 1000`` started one process per
    run, ``bench-speed --threads 10000`` was accepted."""
    runs = tmp_path / "runs"
    refused(["compare", "--workers", "1000", "--runs-dir", runs], "--workers:", capsys, runs)
    code, _, err = cli(["bench-speed", "--threads", "10000", "--out", runs / "b"], capsys)
    assert code == 2 and len(error_lines(err)) == 1 and "--threads: expected at most" in err, err
    assert not runs.exists()


def test_bench_speed_quick_keeps_the_sizes_that_were_typed():
    """The issue's unbounded count 10: ``bench-speed --quick`` silently replaced the
    ``--lengths`` and ``--big-batch`` that were typed (even ones equal to the defaults); what
    is not typed takes the quick sizes."""
    import tyro

    from refimpl.bench.speed_settings import SpeedConfig

    def parse(*argv: str) -> SpeedConfig:
        return tyro.cli(SpeedConfig, args=list(argv))

    cfg = parse("--quick", "--lengths", "4", "--big-batch", "16", "8", "--repeats", "3")
    assert (cfg.lengths, cfg.big_batch, cfg.repeats) == ((4,), (16, 8), 3)
    cfg = parse("--quick", "--lengths", "32", "128")  # the full default, typed
    assert cfg.lengths == (32, 128) and cfg.big_batch == (64, 32)
    assert parse().lengths == (32, 128) and parse("--quick").lengths == (8, 16)


def test_a_steps_monte_carlo_values_are_estimated_before_the_run(tmp_path, capsys, monkeypatch,
                                                                  no_side_effects):  # fmt: skip
    """Issue 61, late 5: VinePPO's ``rollouts=4096`` is in bounds, and one step of it on the
    default batch sampled for more than ten minutes with nothing said. Before anything is
    written, the oracle's tokens of a step are estimated: above ``ORACLE_TOKENS_WARN`` a
    warning names ``--algo-args``, the tokens and the time; above ``ORACLE_TOKENS_LIMIT``
    (lowered here) the run is refused with the largest K that fits. The default K = 9 says
    nothing."""
    from refimpl.settings import memory

    runs = tmp_path / "runs"
    flags = ["train", "--algo", "vineppo", "--runs-dir", runs, "--no-progress"]
    with pytest.warns(UserWarning) as said, pytest.raises(AssertionError, match="side effect"):
        cli([*flags, "--algo-args", "rollouts=4096"], capsys)
    (warning,) = [str(w.message) for w in said if "Monte-Carlo" in str(w.message)]
    assert warning.startswith("--algo-args: with K = 4096 rollouts, the Monte-Carlo values "
                              "of a step sample about "), warning  # fmt: skip
    tokens = int(warning.split("sample about ")[1].split(" tokens")[0].replace(",", ""))
    assert 10**7 < tokens < 10**8 and "minutes a step" in warning, warning
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(AssertionError, match="side effect"):
            cli(flags, capsys)  # K = 9: some 75,000 tokens a step, nothing to say
    assert not [w for w in said if "Monte-Carlo" in str(w.message)]
    monkeypatch.setattr(memory, "ORACLE_TOKENS_LIMIT", 10**7)
    err = refused([*flags, "--algo-args", "rollouts=4096"], "--algo-args: with K = 4096", capsys,
                  runs)  # fmt: skip
    assert "more than the 1e+07 a step may take; expected at most about 1" in err, err
