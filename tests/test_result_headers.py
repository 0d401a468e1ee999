"""The one result header (``refimpl.bench.result_header``): every committed result file carries
it, one reader validates it, and a file's unknowns read "unrecorded", never a guess."""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path

import pytest

from refimpl.bench.result_header import UNRECORDED, ResultFileError, check_header, make_header

ROOT = Path(__file__).resolve().parents[1]


def _migration():
    path = ROOT / "scripts" / "dev" / "add_result_headers.py"
    spec = importlib.util.spec_from_file_location("add_result_headers", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


MIGRATION = _migration()
FILES = MIGRATION.result_files()


def test_the_result_files_are_found():
    kinds = {MIGRATION.kind_of(p.relative_to(ROOT)) for p in FILES}
    assert len(FILES) >= 119
    assert {"ceiling", "claims real model", "credit", "first update", "cost"} <= kinds


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_result_file_has_a_valid_header(path):
    data = json.loads(path.read_text(encoding="utf-8"))
    header = check_header(data, path)
    assert header["kind"] == MIGRATION.kind_of(path.relative_to(ROOT))


def test_a_header_made_here_names_this_machine_and_passes_the_reader():
    h = make_header("test", command="pytest", seeds=[0, 1], evaluation_grid="none")
    assert h["machine"]["cores"] != UNRECORDED and h["machine"]["torch"] != UNRECORDED
    assert isinstance(h["machine"]["isa"], list | str)
    assert check_header({"header": h}, "x.json") == h


GOOD = {
    "format": 1, "kind": "k", "commit": "abc1234", "command": "c", "seeds": [0],
    "machine": {"cpu_model": "AMD EPYC", "cores": 2, "isa": ["avx2"], "torch": "2.13.0",
                "torch_cpu_capability": "AVX2"},
    "base_models": [{"name": "chain-longchain", "sha256": "f" * 64}], "evaluation_grid": "none",
}  # fmt: skip


@pytest.mark.parametrize(
    "field, value, named",
    [
        ("machine.cpu_model", "x86_64", "cpu_model"),  # an architecture is not a CPU
        ("machine.cores", 0, "cores"),
        ("machine.isa", ["avx2", "made_up"], "isa"),
        ("seeds", ["0"], "seeds"),
        ("seeds", [True], "seeds"),
        ("base_models", [{"name": "x", "sha256": "short"}], "base_models"),
        ("evaluation_grid", 5, "evaluation_grid"),
        ("commit", "", "commit"),
        ("format", 2, "format"),
    ],
)
def test_the_reader_refuses_a_bad_field_naming_it(field, value, named):
    header = copy.deepcopy(GOOD)
    target = header
    *parents, last = field.split(".")
    for key in parents:
        target = target[key]
    target[last] = value
    with pytest.raises(ResultFileError, match=named):
        check_header({"header": header}, "r.json")


def test_the_reader_refuses_a_missing_header_or_field():
    with pytest.raises(ResultFileError, match="no header"):
        check_header({"machine": {}}, "r.json")
    header = {k: v for k, v in GOOD.items() if k != "base_models"}
    with pytest.raises(ResultFileError, match="base_models"):
        check_header({"header": header}, "r.json")
    assert check_header({"header": {**GOOD, "base_models": UNRECORDED}}, "r.json")


def test_an_old_file_gets_unrecorded_where_it_recorded_nothing_never_a_guess():
    """A machine recorded as the architecture alone, no ISA, no base model: "unrecorded";
    what the file does record (cores, torch, commit, seeds, grid) is kept."""
    old = {"machine": {"cpu": "x86_64", "cores": 2, "torch": "2.13.0+cpu", "commit": "9496f76"},
           "seed": 4, "evals": [{"step": 4}, {"step": 8}]}  # fmt: skip
    h = MIGRATION.header_from_record(old, "claims real model")
    assert h["machine"]["cpu_model"] == UNRECORDED and h["machine"]["isa"] == UNRECORDED
    assert h["base_models"] == UNRECORDED
    assert h["machine"]["cores"] == 2 and h["commit"] == "9496f76" and h["seeds"] == [4]
    assert h["evaluation_grid"] == {"steps": [4, 8]}
    assert check_header({"header": h}, "old.json")
    named = MIGRATION.header_from_record({"machine": {"cpu": "AMD EPYC"}}, "cost")
    assert named["machine"]["cpu_model"] == "AMD EPYC"
