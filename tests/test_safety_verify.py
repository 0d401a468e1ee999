"""Verify before you change anything (issue: nothing lost, nothing silently wrong).

``--resume`` reads the whole checkpoint against the run's ``config.json`` (the step, the
algorithm and settings against ``state.json``, the sha256 of every file, finite weights)
before it truncates or appends to any file; a damaged run directory gets one message that
says how to recover it, and ``refimpl runs`` lists it as damaged. Each test damages a copy of
a finished tiny run the way the issue's probes did.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from refimpl.runs.checkpoint import CheckpointError, load_model_weights
from tests.safety_helpers import (
    cli,
    copy_run,
    error_lines,
    make_run,
    resume,
    snapshot,
    steps_logged,
    tiny_flags,
)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def base(runs) -> Path:
    """A finished 3-step GTPO run with a checkpoint of step 3."""
    return make_run(runs, "base", "--algo", "gtpo")


def edit_json(file: Path, change) -> None:
    data = json.loads(file.read_text())
    change(data)
    file.write_text(json.dumps(data, indent=2))


def refused(runs: Path, run: Path, capsys, *extra: object) -> str:
    """``--resume`` of ``run`` is one error line, exit 1, and changes no file; the line."""
    before = snapshot(run)
    code, _, err = cli(resume(runs, run.name, "--steps", 4, *extra), capsys)
    assert code == 1, err
    assert len(error_lines(err)) == 1 and "Traceback" not in err, err
    assert snapshot(run) == before  # nothing truncated, nothing appended
    return error_lines(err)[0]


def test_a_step_outside_the_run_is_refused_before_any_log_is_truncated(runs, base, capsys):
    """The issue's data loss 4: ``"step": -1`` in state.json made ``--resume`` truncate
    metrics.jsonl and probes.jsonl to empty, then fail naming no file."""
    run = copy_run(base, "negative-step")
    edit_json(run / "checkpoint" / "state.json", lambda s: s.update(step=-1))
    line = refused(runs, run, capsys)
    assert str(run / "checkpoint" / "state.json") in line and "step -1" in line, line
    # A checkpoint ahead of the logs (metrics.jsonl replaced by an older one) is refused too.
    run = copy_run(base, "ahead-of-logs")
    lines = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(lines[:2]) + "\n")
    line = refused(runs, run, capsys)
    assert str(run / "metrics.jsonl") in line and "ends at step 1" in line, line


def cut_last_line(metrics: Path, how: str) -> None:
    """What a power cut leaves of the last line (step 3's): torn (the issue's last 20 bytes
    cut), zero-filled (blocks the disk never wrote: the size is right, the bytes are NUL) or
    gone whole (a clean log one step behind the checkpoint)."""
    data = metrics.read_bytes()
    start = data.rstrip(b"\n").rfind(b"\n") + 1  # where the last line begins
    if how == "torn":
        metrics.write_bytes(data[:-20])
    elif how == "zero-filled":
        metrics.write_bytes(data[:start] + b"\0" * (len(data) - start))
    else:
        metrics.write_bytes(data[:start])


@pytest.mark.parametrize("how", ["torn", "zero-filled", "gone"])
def test_a_power_cut_s_log_one_step_behind_the_checkpoint_resumes(runs, base, capsys, how):
    """The issue's regression: the checkpoint of step 3 was on the disk, the log's line of
    step 3 was not (torn, zero-filled, or gone), and ``--resume`` was refused with a message
    offering only ``--overwrite``. It resumes, drops what is left of the line, warns that
    step 3's metrics line was lost, and continues from step 3."""
    run = copy_run(base, f"power-cut-{how}")
    cut_last_line(run / "metrics.jsonl", how)
    with pytest.warns(UserWarning) as caught:
        code, _, err = cli(resume(runs, run.name, "--steps", 4), capsys)
    assert code == 0, err
    lost = [
        str(w.message)
        for w in caught
        if "were lost" in str(w.message) or "was lost" in str(w.message)
    ]
    assert len(lost) == 1 and "the metrics line of step 3 was lost" in lost[0], lost
    assert steps_logged(run) == [0, 1, 2, 4]  # every line whole; step 3's is gone for good
    assert b"\0" not in (run / "metrics.jsonl").read_bytes()


def test_the_log_reaches_the_disk_before_the_checkpoint_that_follows_it(
    tmp_path, capsys, monkeypatch
):
    """The other half: the trainer fsyncs metrics.jsonl (once per checkpoint) before it
    writes the checkpoint of a step, so a power cut cannot leave that state again."""
    import refimpl.runs.rundir as train_module  # save_run: the trainer's checkpoint

    events: list[tuple[str, int]] = []
    real_fsync, real_save = train_module.fsync_file, train_module.save_checkpoint

    def fsync(path):
        if Path(path).name == "metrics.jsonl":
            events.append(("fsync", steps_logged(Path(path).parent)[-1]))
        real_fsync(path)

    def save(path, model, optimizer, state):
        events.append(("save", state["step"]))
        real_save(path, model, optimizer, state)

    monkeypatch.setattr(train_module, "fsync_file", fsync)
    monkeypatch.setattr(train_module, "save_checkpoint", save)
    code, _, err = cli(["train", *tiny_flags(tmp_path), "--name", "synced"], capsys)
    assert code == 0, err
    assert events == [(kind, s) for s in (1, 2, 3) for kind in ("fsync", "save")], events


def test_an_out_of_order_metrics_line_is_refused_not_deleted(runs, base, capsys):
    """The issue's data loss 2: ``"step": 1`` edited to ``"step": 7`` in line 2, and
    ``--resume`` silently deleted it (exit 0, the log kept steps 0, 2, 3)."""
    run = copy_run(base, "out-of-order")
    metrics = run / "metrics.jsonl"
    lines = metrics.read_text().splitlines()
    lines[1] = lines[1].replace('"step": 1,', '"step": 7,', 1)
    assert json.loads(lines[1])["step"] == 7
    metrics.write_text("\n".join(lines) + "\n")
    line = refused(runs, run, capsys)
    assert str(metrics) in line and "out of order" in line and "step 7" in line, line


@pytest.mark.parametrize("steps", [1, -5])
def test_an_edited_length_in_config_json_is_named_not_the_checkpoint(runs, base, capsys, steps):
    """The issue's message 15: config.json's ``steps`` edited to 1 or -5 was blamed on
    checkpoint/state.json, with ``--overwrite`` as the way out."""
    run = copy_run(base, f"length{steps}")
    edit_json(run / "config.json", lambda c: c["train_config"].update(steps=steps))
    for extra in ([], ["--steps", 4]):
        before = snapshot(run)
        code, _, err = cli(resume(runs, run.name, *extra), capsys)
        assert code == 1 and len(error_lines(err)) == 1, err
        line = error_lines(err)[0]
        assert str(run / "config.json") in line and f"train_config.steps is {steps}" in line, line
        assert "state.json" not in line and "--overwrite" not in line, line
        assert snapshot(run) == before


def test_a_checkpoint_of_another_algorithm_is_refused(runs, base, capsys):
    """The issue's silent result 7: config.json edited to another algorithm, with its
    algo_config removed, and ``--resume`` continued a GTPO checkpoint as DAPO."""
    run = copy_run(base, "edited-algo")

    def to_dapo(config: dict) -> None:
        config["train_config"]["algo"] = "dapo"
        del config["algo_config"]

    edit_json(run / "config.json", to_dapo)
    line = refused(runs, run, capsys)
    assert str(run / "checkpoint" / "state.json") in line, line
    assert "--algo 'gtpo'" in line and "'dapo'" in line, line


def test_flipped_bits_in_the_weights_are_refused(runs, base, capsys):
    """The issue's silent result 5: checkpoints had no checksum, so flipped bits loaded.
    One low mantissa bit of the last weight is flipped: a valid, finite file."""
    run = copy_run(base, "flipped")
    file = run / "checkpoint" / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[-4] ^= 1  # the least significant byte of the last float32 (little-endian)
    file.write_bytes(bytes(data))
    assert all(torch.isfinite(t).all() for t in load_file(str(file)).values())
    line = refused(runs, run, capsys)
    assert str(file) in line and "sha256" in line, line


@pytest.mark.parametrize("checksums", ["removed", "{}", "model only"])
def test_a_checkpoint_without_checksums_is_refused(runs, base, capsys, checksums):
    """The issue's silent result 4: without ``checksums`` in state.json (or with ``{}``) the
    sha256 check was skipped, and a flipped byte in model.safetensors trained silently.
    The byte is flipped here too; a state.json that records only the weights' checksum
    leaves optimizer.pt unverified, which is refused the same way."""
    run = copy_run(base, f"no-checksums-{checksums.split()[0].strip('{}') or 'empty'}")
    state_file = run / "checkpoint" / "state.json"
    if checksums == "model only":
        edit_json(state_file, lambda s: s["checksums"].pop("optimizer.pt"))
        unverified = "optimizer.pt"
    else:
        replaced = {} if checksums == "removed" else {"checksums": {}}
        edit_json(state_file, lambda s: [s.pop("checksums"), s.update(replaced)])
        file = run / "checkpoint" / "model.safetensors"
        data = bytearray(file.read_bytes())
        data[-4] ^= 1
        file.write_bytes(bytes(data))
        unverified = "model.safetensors"
    line = refused(runs, run, capsys)
    assert f"{state_file}: records no sha256 of {unverified}" in line, line
    if unverified == "optimizer.pt":
        assert "--fresh-optimizer" in line, line


def test_non_finite_weights_are_refused_on_load_naming_the_file(runs, base, capsys, tmp_path):
    """The issue's silent result 5: a checkpoint whose weights are all NaN loaded and
    trained silently. Here its checksum matches (the file is as it was saved, by a version
    that saved diverged weights): the weights themselves are refused."""
    run = copy_run(base, "nan-weights")
    file = run / "checkpoint" / "model.safetensors"
    with safe_open(str(file), framework="pt") as f:
        metadata = f.metadata()  # the tied head, as saved
    weights = {k: torch.full_like(v, float("nan")) for k, v in load_file(str(file)).items()}
    save_file(weights, str(file), metadata=metadata)
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    edit_json(
        run / "checkpoint" / "state.json",
        lambda s: s.setdefault("checksums", {}).update({"model.safetensors": digest}),
    )
    line = refused(runs, run, capsys)
    assert str(file) in line and "non-finite" in line, line
    # The library's loader refuses them too, naming the file.
    model = torch.nn.Linear(1, 1)
    with pytest.raises(CheckpointError, match=f"^{file}: holds non-finite weights"):
        load_model_weights(run / "checkpoint", model)


def test_a_damaged_config_json_says_how_to_recover_and_runs_lists_it(runs, base, capsys):
    """The issue: an invalid-JSON config.json could be neither resumed, overwritten nor
    re-created (three messages, no way out), and ``refimpl runs`` hid it. Now each message
    names the way out, ``--overwrite`` starts the run again, and ``runs`` lists it."""
    run = copy_run(base, "bad-config")
    (run / "config.json").write_text('{"train_config": {"algo": "gtpo", ')
    flags = [*tiny_flags(runs), "--algo", "gtpo", "--name", run.name]
    code, _, err = cli(resume(runs, run.name), capsys)
    assert code == 2 and len(error_lines(err)) == 1, err
    assert "damaged run" in err and "--overwrite" in err, err
    code, _, err = cli(["train", *flags], capsys)
    assert code == 2 and "damaged run" in err and "--overwrite" in err, err
    code, out, _ = cli(["runs", runs], capsys)
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("bad-config"))
    assert "damaged: config.json: not valid JSON" in row, out
    code, _, err = cli(["train", *flags, "--overwrite", "--steps", "1"], capsys)
    assert code == 0, err
    assert steps_logged(run) == [0, 1]


def test_a_zero_filled_log_is_damage_not_a_torn_line(runs, base, capsys, recwarn):
    """The issue: a zero-filled metrics.jsonl (a crash or a full disk) was reported as
    "dropped a torn last line" while the whole history was dropped."""
    run = copy_run(base, "zeros")
    metrics = run / "metrics.jsonl"
    metrics.write_bytes(b"\0" * metrics.stat().st_size)
    line = refused(runs, run, capsys)
    assert str(metrics) in line and "NUL bytes" in line and "--overwrite" in line, line
    assert not [w for w in recwarn if "torn" in str(w.message)]


def test_a_foreign_directory_is_not_offered_resume_or_overwrite(runs, capsys):
    """A directory that is no run: the message does not suggest ``--resume`` or
    ``--overwrite`` (both refuse it), only another name."""
    foreign = runs / "thesis"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("three years of work")
    code, _, err = cli(["train", *tiny_flags(runs), "--name", "thesis"], capsys)
    assert code == 2 and len(error_lines(err)) == 1, err
    assert "is not a run" in err and "--resume" not in err and "--overwrite" not in err, err
    assert (foreign / "thesis.tex").read_text() == "three years of work"


# ---------------------------------------------------------------------------------------------
# Issue 41: a resume keeps nothing it cannot verify; the warm-start cache is verified.
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def hot(runs) -> Path:
    """A finished 3-step run with settings away from their defaults (the issue's)."""
    return make_run(runs, "hot", "--temperature", "0.9", "--seed", "3")


@pytest.mark.parametrize("key", ["temperature", "seed", "group_size", "warmstart", "task_args"])
def test_a_key_removed_from_config_json_is_not_its_default_on_resume(runs, hot, capsys, key):
    """The issue's silent result 3: with ``temperature`` (or 16 other keys) deleted from
    config.json, ``--resume`` exited 0 and trained at the default (1.0, seed 0). The
    checkpoint records what the run was made with: a key it has and config.json lacks is
    refused, naming config.json and the key."""
    run = copy_run(hot, f"removed-{key}")
    edit_json(run / "config.json", lambda c: c["train_config"].pop(key))
    line = refused(runs, run, capsys)
    assert f"{run / 'config.json'}: train_config.{key}" in line and "is missing" in line, line


def test_a_logged_step_beyond_the_run_is_refused_not_dropped(runs, base, capsys):
    """The issue's unbounded count 10: a metrics line with step 2^70 in a 3-step run was
    dropped by ``--resume`` without the "line lost" warning (and ``refimpl runs`` printed
    ``1180591620717411303424/3``)."""
    run = copy_run(base, "far-step")
    with open(run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 2**70}) + "\n")
    line = refused(runs, run, capsys)
    assert str(run / "metrics.jsonl") in line and "outside the run's 0…3" in line, line
    code, out, _ = cli(["runs", runs], capsys)
    row = next(r for r in out.splitlines() if r.startswith("far-step "))
    assert "damaged: metrics.jsonl: record 5 has step" in row and "/3" not in row, row


def test_an_optimizer_state_of_another_model_size_is_refused_before_anything_changes(
    runs, base, capsys
):
    """The issue's silent result 16: an ``optimizer.pt`` of another model size, its sha256
    fixed in state.json, passed verification; config.json was rewritten and Adam then raised
    a size mismatch. Its moments are checked against the model's parameters first."""
    run = copy_run(base, "other-size-adam")
    file = run / "checkpoint" / "optimizer.pt"
    state = torch.load(file, weights_only=True)
    for moments in state["state"].values():
        for name, value in moments.items():
            if value.dim():
                moments[name] = torch.zeros(value.shape[0] + 1, *value.shape[1:])
    torch.save(state, file)
    digest = hashlib.sha256(file.read_bytes()).hexdigest()
    edit_json(
        run / "checkpoint" / "state.json", lambda s: s["checksums"].update({"optimizer.pt": digest})
    )
    line = refused(runs, run, capsys)
    assert str(file) in line and "does not fit the model" in line, line
    assert "--fresh-optimizer" in line, line


@pytest.fixture
def own_cache(tmp_path, base) -> Path:
    """A copy of the shared tiny warm-start cache (``base`` trained it), to damage: its runs
    directory. (The shared directory may hold other tests' warm starts too: only this one is
    copied.)"""
    import dataclasses
    import shutil

    from refimpl.runs.cache import cache_dir
    from tests.safety_helpers import warmstart_dir
    from tests.tiny import tiny_warmstart

    ws = dataclasses.replace(tiny_warmstart(warmstart_dir()), task_args=("num_ops=1",))
    shared = cache_dir(ws)
    shutil.copytree(shared, tmp_path / "ws" / "warmstart" / shared.name)
    return tmp_path / "ws"


def cache_of(ws_runs: Path) -> Path:
    (cache,) = [p for p in (ws_runs / "warmstart").iterdir() if p.is_dir()]
    return cache


def train_from(ws_runs: Path, runs: Path, name: str, capsys, *extra) -> tuple[int, str]:
    flags = [*tiny_flags(runs, warmstart=False), "--warmstart.runs-dir", ws_runs]
    code, _, err = cli(["train", *flags, "--name", name, "--steps", 1, *extra], capsys)
    return code, err


@pytest.mark.parametrize("damage", ["flipped bit", "another task", "21 steps", "no checksum"])
def test_the_warm_start_cache_is_verified_as_a_checkpoint_is(tmp_path, own_cache, capsys, damage):
    """The issue's silent result 4: a flipped bit in the cached ``model.safetensors`` was
    used ("reusing") although its state.json records the sha256; so was another task's
    model, or a 21-step one, copied in. Each is one line naming the file, exit 1, nothing
    created; the line says what to do (``--warmstart.force`` retrains it), and that works."""
    cache = cache_of(own_cache)
    if damage == "flipped bit":
        file = cache / "model.safetensors"
        data = bytearray(file.read_bytes())
        data[-4] ^= 1
        file.write_bytes(bytes(data))
        named = [str(file), "sha256"]
    elif damage == "no checksum":
        edit_json(cache / "state.json", lambda s: s.pop("checksums"))
        named = [str(cache / "state.json"), "records no sha256"]
    else:
        other = tmp_path / "other"
        argv = ["warmstart", "--runs-dir", other, "--no-progress", "--eval-problems", "4"]
        argv += ["--model.n-layer", "1", "--model.n-embd", "32", "--model.n-head", "2"]
        argv += ["--batch-size", "64"]
        if damage == "another task":
            argv += ["--task", "addition", "--steps", "20"]
        else:
            argv += ["--task", "chain", "--task-args", "num_ops=1", "--steps", "21"]
        assert cli(argv, capsys)[0] == 0
        for name in ("model.safetensors", "state.json"):
            (cache / name).write_bytes((cache_of(other) / name).read_bytes())
        named = [str(cache / "state.json"), "trained with other settings"]
    code, err = train_from(own_cache, tmp_path / "runs", "verified", capsys)
    assert code == 1 and len(error_lines(err)) == 1 and "Traceback" not in err, err
    assert all(n in err for n in named), err
    assert "--warmstart.force" in err and "reusing" not in err, err
    assert not (tmp_path / "runs" / "verified").exists()
    code, err = train_from(own_cache, tmp_path / "runs", "verified", capsys, "--warmstart.force")
    assert code == 0, err
    code, err = train_from(own_cache, tmp_path / "runs", "again", capsys)
    assert code == 0, err


@pytest.mark.parametrize(
    "recorded, named",
    [
        ({"steps": 21}, "steps 21, this cache is for 600"),
        # a schedule as long as the steps is not in the key: it reads None on that side
        ({"schedule_steps": 2400}, "schedule_steps 2400, this cache is for None"),
        # the knobs in canonical form: those that differ from chain's defaults (3 and 3), sorted
        (
            {"task_args": ["num_ops=4", "min_ops=4"]},
            "task_args ['min_ops=4', 'num_ops=4'], this cache is for []",
        ),
    ],
)
def test_a_cache_of_other_settings_is_refused_naming_the_setting(tmp_path, recorded, named):
    """``verify_cache`` compares the warm start's identity (``key_inputs``) with the one the
    cache's state.json records, and names the first setting that differs."""
    import dataclasses

    from refimpl.settings.warmstart_config import WarmstartConfig
    from refimpl.warmstart import verify_cache

    ours = WarmstartConfig(task="chain", runs_dir=tmp_path)
    config = {k: v for k, v in dataclasses.asdict(ours).items() if k != "runs_dir"}
    config["task_args"] = list(config["task_args"])
    cache = tmp_path / "cache"
    cache.mkdir()
    state = {"checksums": {"model.safetensors": "0" * 64}, "config": {**config, **recorded}}
    (cache / "state.json").write_text(json.dumps(state))
    with pytest.raises(CheckpointError, match="trained with other settings") as err:
        verify_cache(ours, cache)
    assert named in str(err.value)
    (cache / "state.json").write_text(json.dumps({**state, "config": config}))
    assert verify_cache(ours, cache) == {**state, "config": config}  # the same settings pass
