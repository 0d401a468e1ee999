"""The shipped base models (refimpl/base_models/, ``refimpl.runs.shipped``; which one a warm
start uses is ``refimpl.warmstart.choose_base``'s): the files are the ones the manifest
describes, the manifest's settings are the ones the experiments ask for, a matching warm start
is read from the package without training, and anything else trains."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file

from refimpl.runs import shipped
from refimpl.runs.cache import cache_dir, settings_key
from refimpl.runs.checkpoint import CheckpointError, sha256
from refimpl.settings.warmstart_config import (
    WARMSTART_MIX,
    ModelSize,
    WarmstartConfig,
    warmstart_from_record,
)
from refimpl.warmstart import TRAINED_WITH, find_shipped

ROOT = Path(__file__).resolve().parents[1]
MODELS = shipped.shipped_models()
NAMES = [m.name for m in MODELS]
#: "A few MB at most" (issue 47): the shipped weights together.
MAX_TOTAL_BYTES = 6_000_000


def _by_name(name: str) -> shipped.ShippedModel:
    return next(m for m in MODELS if m.name == name)


def _config(model: shipped.ShippedModel) -> WarmstartConfig:
    """The settings a manifest entry records."""
    return warmstart_from_record(model.entry["config"])


def _find(cfg: WarmstartConfig) -> shipped.ShippedModel | None:
    return find_shipped(cfg.key_inputs())[0]


def test_the_three_base_models_are_shipped():
    """The ledger's toy runs (countdown, default warm start), the demo's base (countdown, 300
    steps) and the long-chain preset's (the credit page, the ceiling)."""
    assert {"countdown-600", "countdown-300", "chain-longchain"} <= set(NAMES)
    assert sum(m.entry["bytes"] for m in MODELS) <= MAX_TOTAL_BYTES


@pytest.mark.parametrize("name", NAMES)
def test_each_shipped_file_has_its_recorded_sha256_and_size(name):
    m = _by_name(name)
    assert m.file.is_file(), m.file
    assert m.file.stat().st_size == m.entry["bytes"]
    assert sha256(m.file) == m.entry["sha256"]


@pytest.mark.parametrize("name", NAMES)
def test_each_manifest_entry_records_what_made_it(name):
    """The settings (every field the cache key hashes), the command, the machine, the report."""
    e = _by_name(name).entry
    assert set(e["config"]) == set(TRAINED_WITH)
    assert e["mix"] == WARMSTART_MIX.get(e["config"]["task"], {})
    assert e["command"].startswith("refimpl warmstart --task " + e["config"]["task"])
    assert e["trained_on"]["cpu"] and e["trained_on"]["cpu"] not in ("x86_64", "unrecorded")
    assert e["trained_on"]["numerics"]["cpu"] == e["trained_on"]["cpu"]
    assert 0 <= e["report"]["greedy_success"] <= 1 and 0 <= e["report"]["sampled_success"] <= 1


@pytest.mark.parametrize("name", NAMES)
def test_the_recorded_settings_hash_to_the_recorded_key(name):
    """The manifest's config is the one that produces its key (so an edited setting, or a
    change to the task's mix or the vocabulary, is caught), and the command's flags say the
    same settings."""
    import tyro

    from refimpl.cli import COMMANDS

    m = _by_name(name)
    cfg = _config(m)
    assert settings_key(cfg.key_inputs()) == m.entry["settings_key"]
    argv = m.entry["command"].split()[2:]
    command = tyro.cli(COMMANDS["warmstart"], args=argv)
    assert settings_key(command.key_inputs()) == m.entry["settings_key"], argv


def _experiment_warmstart(preset: str) -> WarmstartConfig:
    """The warm start ``refimpl bench-learning --preset PRESET`` trains for its task."""
    from refimpl.bench.learning import _warmstart
    from refimpl.bench.learning_settings import LearningConfig
    from refimpl.settings.presets import PRESETS

    return _warmstart(LearningConfig(preset=preset), PRESETS[preset].bench["tasks"])


@pytest.mark.parametrize(
    ("what", "name"),
    [("collapse", "countdown-600"), ("longchain", "chain-longchain"), ("demo", "countdown-300")],
)
def test_the_experiments_ask_for_the_shipped_settings(what, name):
    """The claims ledger's toy benchmark (the collapse preset), the long-chain preset (the
    credit page, the ceiling) and the demo ask for exactly the shipped settings."""
    if what == "demo":
        from refimpl.demo import DemoConfig

        demo = DemoConfig()
        cfg = WarmstartConfig(task=demo.task, steps=demo.base_steps)
    else:
        cfg = _experiment_warmstart(what)
    found = _find(cfg)
    assert found is not None and found.name == name


def test_a_matching_config_loads_the_shipped_file_without_training(tmp_path, monkeypatch):
    """Nothing trained, nothing written (a read-only runs directory works), the shipped
    tensors loaded, and the model records where it came from."""
    import refimpl.warmstart as warmstart

    def no_training(*_args, **_kwargs):
        raise AssertionError("trained although a shipped model matches")

    monkeypatch.setattr(warmstart, "_train", no_training)
    runs = tmp_path / "runs"
    runs.mkdir()
    runs.chmod(0o555)
    try:
        model = warmstart.train_warmstart(
            WarmstartConfig(task="countdown", runs_dir=runs, progress=False)
        )
    finally:
        runs.chmod(0o755)
    entry = _by_name("countdown-600")
    stored = load_file(entry.file)
    state = model.state_dict()
    for key, tensor in stored.items():
        assert (state[key] == tensor).all(), key
    assert model.base_record == {"source": "shipped", "sha256": entry.sha256,
                                 "name": "countdown-600",
                                 "trained_on": entry.entry["trained_on"]["cpu"]}  # fmt: skip
    assert not any(runs.iterdir())


def _tiny(runs: Path, **changes) -> WarmstartConfig:
    return WarmstartConfig(task="chain", task_args=("num_ops=1",), steps=3, batch_size=8,
                           eval_problems=2, runs_dir=runs, progress=False,
                           model=ModelSize(n_layer=1, n_embd=16, n_head=2), **changes)  # fmt: skip


def test_a_config_that_matches_no_shipped_model_trains(tmp_path):
    from refimpl.warmstart import train_warmstart

    cfg = _tiny(tmp_path)
    assert _find(cfg) is None
    model = train_warmstart(cfg)
    assert model.base_record["source"] == "trained"
    assert model.base_record["sha256"] == sha256(cache_dir(cfg) / "model.safetensors")
    again = train_warmstart(cfg)
    assert again.base_record["source"] == "cache"


@pytest.mark.parametrize("changes", [{"shipped": False}, {"force": True}])
def test_no_shipped_and_force_train_even_when_a_shipped_model_matches(tmp_path, monkeypatch,
                                                                      changes):  # fmt: skip
    import refimpl.warmstart as warmstart

    class Trained(Exception):
        pass

    def training(cfg, cache):
        raise Trained(cache)

    monkeypatch.setattr(warmstart, "_train", training)
    cfg = WarmstartConfig(task="countdown", runs_dir=tmp_path, progress=False, **changes)
    assert _find(cfg) is not None
    with pytest.raises(Trained):
        warmstart.train_warmstart(cfg)


def test_refimpl_warmstart_trains_here():
    """``refimpl warmstart`` never reads the shipped model (it shows the training), and has
    no flag to (its ``shipped`` is suppressed); the demo's base is trained here too."""
    from refimpl.cli import COMMANDS

    assert COMMANDS["warmstart"]().shipped is False
    assert WarmstartConfig().shipped is True


def test_another_setting_is_another_key():
    """A warm start of other settings does not match (one field at a time)."""
    base = _config(_by_name("countdown-600"))
    for change in ({"steps": 601}, {"lr": 2e-3}, {"seed": 1}, {"batch_size": 64},
                   {"model": ModelSize(n_embd=64)}, {"task_args": ("max_operand=9",)}):  # fmt: skip
        try:
            other = dataclasses.replace(base, **change)
            other.check()
        except ValueError:
            continue
        assert settings_key(other.key_inputs()) != settings_key(base.key_inputs()), change
        found = _find(other)
        assert found is None or found.name != "countdown-600", change


def _copy_of_the_package_models(tmp_path, monkeypatch) -> Path:
    copy = tmp_path / "base_models"
    shutil.copytree(shipped.BASE_MODELS, copy)
    monkeypatch.setattr(shipped, "BASE_MODELS", copy)
    monkeypatch.setattr(shipped, "MANIFEST", copy / "manifest.json")
    return copy


def test_a_damaged_shipped_file_is_refused_naming_it(tmp_path, monkeypatch):
    from refimpl.warmstart import train_warmstart

    copy = _copy_of_the_package_models(tmp_path, monkeypatch)
    file = copy / "countdown-600" / "model.safetensors"
    data = bytearray(file.read_bytes())
    data[-1] ^= 1
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256") as err:
        train_warmstart(WarmstartConfig(task="countdown", runs_dir=tmp_path, progress=False))
    assert str(file) in str(err.value)
    # the way out named once, spelled as the command that failed spells its flags
    assert str(err.value).count("--no-shipped") == 1 and "--warmstart." not in str(err.value)


def test_an_edited_manifest_setting_no_longer_matches(tmp_path, monkeypatch):
    """Change a recorded setting: the default countdown warm start is no longer found (and
    the settings-key test above fails on such a manifest)."""
    copy = _copy_of_the_package_models(tmp_path, monkeypatch)
    data = json.loads((copy / "manifest.json").read_text())
    data["models"]["countdown-600"]["config"]["steps"] = 599
    (copy / "manifest.json").write_text(json.dumps(data))
    found = _find(WarmstartConfig(task="countdown"))
    assert found is None or found.name != "countdown-600"
    edited = shipped.ShippedModel("countdown-600", data["models"]["countdown-600"])
    assert settings_key(_config(edited).key_inputs()) != edited.entry["settings_key"]


def test_a_run_records_the_shipped_base_it_started_from(tmp_path, monkeypatch, capsys):
    """One tiny RL step on countdown from the shipped default warm start: config.json says
    which base model (and its sha256); the warm start's identity is computed once in the run
    (``choose_base``, in preflight), and the choice is said in one line."""
    from refimpl.settings.train_config import TrainConfig
    from refimpl.train import run_training

    identities = []
    key_inputs = WarmstartConfig.key_inputs

    def counted(self):  # the run's warm start (the manifest's entries have their own)
        identities.append(type(self).__name__)
        return key_inputs(self)

    monkeypatch.setattr(WarmstartConfig, "key_inputs", counted)

    cfg = TrainConfig(task="countdown", steps=1, prompts_per_step=2, group_size=2,
                      minibatches=1, eval_every=1000, eval_problems=2, eval_samples=2,
                      probe_every=0, diag_every=0, runs_dir=tmp_path, progress=False,
                      plot=False, threads=1)  # fmt: skip
    run = run_training(cfg)
    record = json.loads((run / "config.json").read_text())["base_model"]
    entry = _by_name("countdown-600")
    assert record["source"] == "shipped" and record["name"] == "countdown-600"
    assert record["sha256"] == entry.sha256
    assert identities.count("RunWarmstartConfig") == 1, identities
    said = [line for line in capsys.readouterr().out.splitlines() if "warm start" in line]
    assert len(said) == 1 and "the shipped base model countdown-600" in said[0], said


def test_the_base_model_is_chosen_in_one_place(tmp_path):
    """``choose_base``: the shipped model when one has the settings (shipped on, no
    ``--force``); else this machine's whole cache (no ``--force``); else trained, and then the
    cache has to be writable (refused before anything is trained, naming the flag). The
    choice carries the identity it computed once."""
    from refimpl.warmstart import choose_base, train_warmstart

    countdown = WarmstartConfig(task="countdown", runs_dir=tmp_path, progress=False)
    choice = choose_base(countdown)
    assert choice.source == "shipped" and choice.shipped.name == "countdown-600"
    assert choice.identity == countdown.key_inputs()
    for changes in ({"shipped": False}, {"force": True}):
        other = choose_base(dataclasses.replace(countdown, **changes))
        assert other.source == "trained" and other.shipped.name == "countdown-600", changes
    tiny = _tiny(tmp_path)
    assert choose_base(tiny)[2:4] == ("trained", None)
    assert train_warmstart(tiny).base_record["source"] == "trained"
    assert choose_base(tiny).source == "cache"
    assert choose_base(dataclasses.replace(tiny, force=True)).source == "trained"
    assert choose_base(dataclasses.replace(tiny, shipped=False)).source == "cache"
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache's directory would go")
    with pytest.raises(ValueError, match="--warmstart.runs-dir"):
        choose_base(_tiny(blocked), "--warmstart.")


def test_the_docs_list_every_shipped_model():
    """docs/benchmarks.md § 1's section on the shipped base models names each shipped model and
    its sha256 prefix."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    section = text.split("### The shipped base models", 1)[1].split("\n## ", 1)[0]
    for m in MODELS:
        assert m.name in section and m.sha256[:12] in section, m.name
    for entry in shipped.manifest().get("not_shipped", []):
        assert entry["command"] in section


def test_the_package_data_includes_the_shipped_models():
    """pyproject.toml ships refimpl/base_models/ in the wheel (a fresh install has them)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[tool.setuptools.package-data]", 1)[1].split("\n[", 1)[0]
    assert '"base_models/manifest.json"' in section
    assert '"base_models/*/model.safetensors"' in section


def _entry_deleted(copy: Path) -> None:
    data = json.loads((copy / "manifest.json").read_text())
    del data["models"]["countdown-600"]
    (copy / "manifest.json").write_text(json.dumps(data))


def _manifest_deleted(copy: Path) -> None:
    (copy / "manifest.json").unlink()


def _steps_edited(copy: Path) -> None:
    data = json.loads((copy / "manifest.json").read_text())
    data["models"]["countdown-600"]["config"]["steps"] = 601
    (copy / "manifest.json").write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (_entry_deleted, r"countdown-600/model\.safetensors: not listed in manifest\.json"),
        (
            _manifest_deleted,
            r"manifest\.json: missing, so the shipped base models \(.*"
            r"countdown-600.*\) are not used",
        ),  # fmt: skip
        (
            _steps_edited,
            r"the entry countdown-600 has a config whose settings hash to \w+, "
            r"not to the settings_key it records",
        ),  # fmt: skip
    ],
)
def test_a_damaged_manifest_is_said_before_the_base_model_is_trained(tmp_path, monkeypatch,
                                                                     damage, said):  # fmt: skip
    """Issue 61, silent 2: with countdown-600's entry deleted from the manifest, the manifest
    deleted, or the entry's ``config.steps`` edited, the shipped model was skipped without a
    word and the warm start trained from scratch. Now a warning says which shipped model is
    not used and why, before anything is trained; and an edited entry is no model's (its
    weights are not loaded for the 601-step settings it now claims)."""
    import refimpl.warmstart as warmstart

    class Trained(Exception):
        pass

    def training(cfg, cache):
        raise Trained

    monkeypatch.setattr(warmstart, "_train", training)
    damage(_copy_of_the_package_models(tmp_path, monkeypatch))
    for steps in (600, 601):
        cfg = WarmstartConfig(task="countdown", steps=steps, runs_dir=tmp_path, progress=False)
        with pytest.warns(UserWarning, match=said), pytest.raises(Trained):
            warmstart.train_warmstart(cfg)


def test_an_intact_manifest_has_nothing_unused():
    for cfg in (WarmstartConfig(task="countdown"), _tiny(Path("runs"))):
        assert find_shipped(cfg.key_inputs())[1] == []


def test_a_warm_start_is_never_trained_in_silence(tmp_path, capsys):
    """Before training a base model, the run says that no shipped model has its settings and
    about what the training costs (the README's `refimpl train --task chain` trained a
    600-step warm start without a word); a cached model is reused without that line."""
    from refimpl.settings.warmstart_config import ModelSize, WarmstartConfig
    from refimpl.warmstart import base_model

    cfg = WarmstartConfig(task="chain", task_args=("num_ops=1",), steps=2, batch_size=4,
                          runs_dir=tmp_path, eval_problems=2, progress=False,
                          model=ModelSize(n_layer=1, n_embd=16, n_head=2, block_size=32))  # fmt: skip
    base_model(cfg)
    out = capsys.readouterr().out
    notice = [line for line in out.splitlines() if "training one" in line]
    assert notice and "no base model shipped" in notice[0] and "2 steps of 4" in notice[0]
    assert " s on one thread" in notice[0] or " min on one thread" in notice[0]
    assert out.index(notice[0]) < out.index("trained 2 steps")
    base_model(cfg)  # the cache now: no training, no notice
    assert "training one" not in capsys.readouterr().out


def test_an_entry_that_records_no_sha256_never_matches_its_weights():
    """An entry's recorded sha256 is read once, with its file, when the manifest is read; an
    entry without one is damaged: loading it is refused on one line naming the weights, never
    a KeyError and never weights unchecked."""
    entry = {k: v for k, v in shipped.manifest()["models"]["countdown-600"].items()
             if k != "sha256"}  # fmt: skip
    model = shipped.ShippedModel("countdown-600", entry)
    assert model.sha256 == "" and model.file.name == "model.safetensors"
    with pytest.raises(CheckpointError, match="damaged") as err:
        shipped.load(model, _config(model))
    assert str(model.file) in str(err.value)
