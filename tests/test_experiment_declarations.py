"""The lab's experiments as declarations (issue 58): one driver
(``scripts/experiments/run_experiment.py``) runs each study's ``<study>_study.py``; the
declarations match the committed result files' headers; the driver refuses bad input before it
writes anything, resumes, and leaves every result file with the standard header."""

from __future__ import annotations

import importlib.util
import json
import re
import runpy
import sys
from pathlib import Path

import pytest

from refimpl.bench.result_header import UNRECORDED, check_header

ROOT = Path(__file__).resolve().parents[1]
LAB = ROOT / "scripts" / "experiments"
_spec = importlib.util.spec_from_file_location("run_experiment", LAB / "run_experiment.py")
driver = importlib.util.module_from_spec(_spec)
sys.modules["run_experiment"] = driver  # its dataclass looks itself up there
_spec.loader.exec_module(driver)
STUDIES = sorted(LAB.glob("*/*_study.py"))


def test_no_two_files_of_the_project_share_a_name():
    """No two Python modules or scripts outside the tests share a file name (``__init__.py``
    and ``conftest.py`` aside), nor a stem across ``.py`` and ``.sh``: a name says which file."""
    seen: dict[str, Path] = {}
    for path in sorted([*ROOT.glob("refimpl/**/*.py"), *ROOT.glob("toy_envs/**/*.py"),
                        *ROOT.glob("scripts/**/*.py"), *ROOT.glob("scripts/**/*.sh"),
                        *ROOT.glob("docs/**/*.py"), *ROOT.glob("examples/**/*.py")]):  # fmt: skip
        if path.name in ("__init__.py", "conftest.py") or "__pycache__" in path.parts:
            continue
        assert path.stem not in seen, f"{path} and {seen[path.stem]} share the name {path.stem}"
        seen[path.stem] = path


def _units(study: Path) -> list:
    decl = driver.load(study)
    return driver.units(decl, runs="runs", out=Path(decl["results"]))


def _eval_steps(unit) -> set[int] | None:
    """The evaluation steps a unit's flags ask for (every ``--eval-every`` up to its steps)."""
    flags = " ".join(" ".join(c) for c in unit.commands)
    every = re.search(r"--(?:train\.)?eval-every (\d+)", flags)
    steps = re.search(r"--(?:budget-steps|train\.steps) (\d+)", flags)
    if not (every and steps):
        return None
    return set(range(0, int(steps.group(1)) + 1, int(every.group(1))))


@pytest.mark.parametrize("study", STUDIES, ids=lambda p: p.stem)
def test_a_declaration_is_what_its_committed_files_record(study):
    """Every committed result file of a study is some experiment's result; where its header
    records the command, the dry run prints that command; its seeds are the experiment's, and
    its evaluation grid holds every step the experiment's flags evaluate at."""
    units = {u.result.resolve(): u for u in _units(study)}
    results = ROOT / driver.load(study)["results"]
    files = sorted(results.rglob("*.json"))
    assert files, results
    for path in files:
        assert path.resolve() in units, f"{path}: no experiment of {study.name} writes it"
        unit, header = units[path.resolve()], check_header(json.loads(path.read_text()), path)
        if header["command"] != UNRECORDED:
            assert header["command"] in [" ".join(c) for c in unit.commands], path
        if header["seeds"] != UNRECORDED:
            assert header["seeds"] == unit.seeds, path
        steps, grid = _eval_steps(unit), header["evaluation_grid"]
        if steps and isinstance(grid, dict) and "steps" in grid:
            assert steps <= set(grid["steps"]), (path, sorted(steps - set(grid["steps"])))


def _flags(command: list[str]) -> dict[str, str]:
    """A command's ``--name value`` pairs, each name as a record spells it (``--train.lr`` → lr)."""
    return {w[2:].removeprefix("train.").replace("-", "_"): v
            for w, v in zip(command, command[1:]) if w.startswith("--") and not v.startswith("--")}  # fmt: skip


def _same(recorded: object, declared: str) -> bool:
    try:
        return float(recorded) == float(declared)
    except (TypeError, ValueError):
        return str(recorded) == declared


#: Flags whose value is a path on the machine that ran (a record holds its own).
_PATHS = {"out", "runs_dir", "run", "name"}


def test_the_credit_files_record_the_flags_their_declaration_passes():
    """The credit study's files record no command, but they record their settings: every flag
    the declared command passes (``refimpl credit``, ``real_model.py``, the benchmark, each
    regime probe's ``refimpl compare``) has the recorded value; a batch after training names
    the declared run and step; a probe evaluates at its declared steps."""
    checked = 0
    for unit in _units(LAB / "credit" / "credit_study.py"):
        data = json.loads(unit.result.read_text())
        for command in unit.commands:
            flags, record = _flags(command), None
            if command[:2] == ["refimpl", "credit"] or command[1].endswith("real_model.py"):
                record = data["settings"]
                assert Path(record["out"]).name == unit.result.name
                if "run" in flags:  # the batch of the run the compare before it trained
                    assert Path(record["run"]).parts[-2:] == Path(flags["run"]).parts[-2:]
            elif command[:2] == ["refimpl", "bench-learning"]:
                record = data["config"]
            elif "probe-" in flags.get("name", ""):
                probe = data[flags["name"].removeprefix("probe-")]
                record = probe["settings"]
                every = int(flags.get("eval_every", 20))  # the preset's
                assert probe["step"] == list(range(0, int(flags["steps"]) + 1, every)), unit.result
            elif command[:2] == ["refimpl", "compare"]:
                assert data["policy"]["step"] == int(flags["steps"]), unit.result
                checked += 1
            for key in (flags.keys() - _PATHS) & (record or {}).keys():
                assert _same(record[key], flags[key]), (unit.result.name, key, record[key])
                checked += 1
    assert checked >= 30, checked


def _write(tmp_path: Path, experiments: list[dict], **top) -> Path:
    decl = {"results": str(tmp_path / "results"), "kind": "tiny", "experiment": experiments,
            **top}  # fmt: skip
    path = tmp_path / "tiny_study.py"
    path.write_text(f"DECLARATION = {decl!r}\n")
    return path


#: A command that writes a result file without a header and counts its runs; it fails for
#: the seed named by the file ``fail`` beside it.
WRITER = ("python -c \"import json, sys, pathlib; d = pathlib.Path(sys.argv[1]); "
          "log = d / 'ran.txt'; log.write_text(log.read_text() + sys.argv[3] + ' ' "
          "if log.exists() else sys.argv[3] + ' '); "
          "sys.exit(1) if (d / 'fail').exists() and (d / 'fail').read_text() == sys.argv[3] "
          "else sys.argv[2] and pathlib.Path(sys.argv[2]).write_text(json.dumps(dict(seed=int(sys.argv[3]))))\" "
          "{runs} {result} {seed}")  # fmt: skip


def _tiny(tmp_path: Path) -> Path:
    (tmp_path / "runs").mkdir()
    return _write(tmp_path, [{"name": "tiny", "result": "seed{seed}.json", "run": WRITER,
                              "seeds": [0, 1, 2], "grid": "--eval-every 1"}])  # fmt: skip


def _run(decl: Path, tmp_path: Path, *args: str) -> int:
    return driver.main([str(decl), "--runs", str(tmp_path / "runs"), "--no-page", *args])


def test_the_driver_runs_resumes_and_writes_the_header(tmp_path, capsys):
    decl = _tiny(tmp_path)
    (tmp_path / "runs" / "fail").write_text("1")  # seed 1 fails: the study stops there
    assert _run(decl, tmp_path) == 1
    results = tmp_path / "results"
    assert sorted(p.name for p in results.iterdir()) == ["seed0.json"]
    (tmp_path / "runs" / "fail").unlink()
    assert _run(decl, tmp_path) == 0  # seed 0 is done: only 1 and 2 run
    assert (tmp_path / "runs" / "ran.txt").read_text().split() == ["0", "1", "1", "2"]
    for seed in (0, 1, 2):
        data = json.loads((results / f"seed{seed}.json").read_text())
        header = check_header(data, results)
        assert data["seed"] == seed and header["seeds"] == [seed] and header["kind"] == "tiny"
        assert f"seed{seed}.json" in header["command"]
    capsys.readouterr()
    assert _run(decl, tmp_path, "--dry-run") == 0
    assert capsys.readouterr().out.count("(done)") == 3


@pytest.mark.parametrize(
    "change, named",
    [
        (lambda d: d["experiment"][0].update(seeds=[0, "1"]), "seeds"),
        (lambda d: d["experiment"][0].update(sedes=[0]), "sedes"),
        (lambda d: d.update(result="x"), "unknown key 'result'"),
        (lambda d: d["experiment"][0].update(run="python {nowhere}"), "nowhere"),
        (lambda d: d["experiment"].append(dict(d["experiment"][0])), "share a name"),
    ],
)
def test_a_bad_declaration_is_refused_before_anything_is_written(tmp_path, capsys, change, named):
    decl = {"results": str(tmp_path / "results"), "experiment": [
        {"name": "tiny", "result": "r{seed}.json", "run": WRITER, "seeds": [0]}]}  # fmt: skip
    change(decl)
    path = tmp_path / "bad_study.py"
    path.write_text(f"DECLARATION = {decl!r}\n")
    (tmp_path / "runs").mkdir()
    assert _run(path, tmp_path) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs" / "ran.txt").exists()


@pytest.mark.parametrize(
    "args, named",
    [(["--only", "nope"], "--only"), (["--seeds", "0,x"], "--seeds"),
     (["--seeds", "-1"], "--seeds"), (["--workers", "0"], "--workers")],
)  # fmt: skip
def test_bad_arguments_are_refused_before_anything_is_written(tmp_path, capsys, args, named):
    decl = _tiny(tmp_path)
    assert _run(decl, tmp_path, *args) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "results").exists() and not (tmp_path / "runs" / "ran.txt").exists()


@pytest.mark.parametrize("content", ["{", "[1, 2]", "{}", '{"header": {"format": 1}}'])
def test_a_damaged_result_file_is_named_and_never_overwritten(tmp_path, capsys, content):
    decl = _tiny(tmp_path)
    (tmp_path / "results").mkdir()
    damaged = tmp_path / "results" / "seed1.json"
    damaged.write_text(content)
    assert _run(decl, tmp_path) == 2
    assert "seed1.json" in capsys.readouterr().err
    assert damaged.read_text() == content and not (tmp_path / "runs" / "ran.txt").exists()


def test_an_out_that_is_a_file_is_refused(tmp_path, capsys):
    decl = _tiny(tmp_path)
    (tmp_path / "file").write_text("")
    assert _run(decl, tmp_path, "--out", str(tmp_path / "file")) == 2
    assert "--out" in capsys.readouterr().err


def test_only_and_seeds_pick_the_units(tmp_path, capsys):
    decl = _tiny(tmp_path)
    assert _run(decl, tmp_path, "--seeds", "2", "--only", "tiny") == 0
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["seed2.json"]


def test_the_driver_runs_a_toy_experiment(tmp_path):
    """A tiny benchmark of the toy through the driver (about 10 s): a result file with the header."""
    runs = tmp_path / "runs"
    decl = _write(tmp_path, [{
        "name": "toy", "result": "toy.json", "bench": "{runs}/bench",
        "run": "refimpl bench-learning --quick --runs-dir {runs} --out {bench} --seeds {seeds} "
               "--workers 1 --algos grpo --ablations ''",
        "seeds": [0], "copy": "{bench}/results.json"}])  # fmt: skip
    assert driver.main([str(decl), "--runs", str(runs), "--no-page"]) == 0
    data = json.loads((tmp_path / "results" / "toy.json").read_text())
    assert check_header(data, "toy.json")["seeds"] == [0]


def test_the_regime_probes_gather_as_the_committed_file_records(tmp_path):
    """``regime_probes.py`` (the shell's inline Python, whose import had gone stale) writes each
    probe as the committed file holds it: runs rebuilt from that file gather back to it."""
    committed = json.loads((LAB / "credit" / "results" / "regime_probes.json").read_text())
    names = [n for n in committed if n != "header"]
    for name in names:
        p, run = committed[name], tmp_path / f"probe-{name}" / "grpo-s0"
        run.mkdir(parents=True)
        config = {"train_config": {**p["settings"], "seed": 0}, "numerics": {"cpu": "a CPU"}}
        (run / "config.json").write_text(json.dumps(config))
        evals = {s: {"heldout_greedy": g, "heldout_pass@1": q, "sampled_tokens": t}
                 for s, g, q, t in zip(p["step"], p["heldout_greedy"], p["heldout_pass@1"],
                                       p["sampled_tokens"])}  # fmt: skip
        lines = [{"step": s, "loss": 0.0, **evals.get(s, {})} for s in range(p["step"][-1] + 1)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    gather = runpy.run_path(str(LAB / "credit" / "regime_probes.py"))
    out = tmp_path / "probes.json"
    gather["main"](["--runs", str(tmp_path), "--out", str(out), *names])
    gathered = json.loads(out.read_text())
    assert list(gathered) == names
    for name in names:
        assert gathered[name].pop("machine")["numerics"] == {"cpu": "a CPU"}
        assert gathered[name] == {k: v for k, v in committed[name].items() if k != "machine"}
