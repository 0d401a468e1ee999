"""The lab's one page writer (``scripts/experiments/page_writer.py``), tried as a hostile user
would through the reports that use it: every bad input is refused on one line that names it,
with a nonzero exit and the page byte for byte as it was; a page is written whole, never
through a link; ``--check`` names the rows that differ, old → new."""

from __future__ import annotations

import importlib.util
import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CEILING = ROOT / "scripts" / "experiments" / "ceiling"


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ceiling():
    return _load(CEILING / "ceiling_page.py", "ceiling_report_hostile")


@pytest.fixture
def workspace(tmp_path):
    """A copy of the ceiling's results and of docs/credit.md, the page they feed."""
    results = tmp_path / "results"
    shutil.copytree(CEILING / "results", results)
    page = tmp_path / "credit.md"
    shutil.copy(ROOT / "docs" / "credit.md", page)
    return results, page


def _run(ceiling, capsys, results: Path, page: Path, *extra: str):
    code = ceiling.main(["--results", str(results), "--page", str(page), "--no-figure", *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _runs(results: Path) -> dict:
    return json.loads((results / "runs.json").read_text())


def _nan_everywhere(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return float("nan")
    if isinstance(value, dict):
        return {k: _nan_everywhere(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nan_everywhere(v) for v in value]
    return value


def _strings_for_numbers(value):
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, dict):
        return {k: _strings_for_numbers(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_strings_for_numbers(v) for v in value]
    return value


def _truncate(results: Path) -> str:
    path = results / "runs.json"
    path.write_bytes(path.read_bytes()[:5000])
    return "runs.json"


def _rewrite(transform):
    def damage(results: Path) -> str:
        path = results / "runs.json"
        path.write_text(json.dumps(transform(_runs(results))))
        return "runs.json"

    return damage


def _link_to_dev_zero(results: Path) -> str:
    (results / "runs.json").unlink()
    (results / "runs.json").symlink_to("/dev/zero")
    return "runs.json"


def _missing_folder(results: Path) -> str:
    shutil.rmtree(results)
    return "runs.json"


def _empty_folder(results: Path) -> str:
    shutil.rmtree(results)
    results.mkdir()
    return "runs.json"


def _damaged_probe(results: Path) -> str:
    path = results / "probe_lr3e-4.json"
    data = json.loads(path.read_text())
    next(iter(next(iter(data["arms"].values())).values()))["evals"][1]["pass1"] = "high"
    path.write_text(json.dumps(data))
    return "probe_lr3e-4.json"


def _damaged_credit(results: Path) -> str:
    path = results / "credit_warmstart.json"
    path.write_text(path.read_text()[:100])
    return "credit_warmstart.json"


def _one_nan_in_the_grid(data: dict) -> dict:
    next(iter(data["arms"]["vineppo"].values()))["evals"][-1]["pass1"] = float("nan")
    return data


HOSTILE = {
    "missing results folder": _missing_folder,
    "empty results folder": _empty_folder,
    "truncated JSON": _truncate,
    "a JSON list": _rewrite(lambda d: [1, 2]),
    "an empty object": _rewrite(lambda d: {}),
    "arms of the wrong shape": _rewrite(lambda d: {**d, "arms": [1]}),
    "a run without evaluations": _rewrite(
        lambda d: {**d, "arms": {"vineppo": {"0": {**d["arms"]["vineppo"]["0"], "evals": []}}}}
    ),
    "NaN in every float": _rewrite(_nan_everywhere),
    "one NaN on the grid": _rewrite(_one_nan_in_the_grid),
    "strings for numbers": _rewrite(_strings_for_numbers),
    "linked to /dev/zero": _link_to_dev_zero,
    "a damaged probe file": _damaged_probe,
    "a truncated credit file": _damaged_credit,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("check", [False, True], ids=["write", "check"])
def test_a_bad_result_file_is_refused_on_one_line_and_the_page_is_unchanged(
    ceiling, capsys, workspace, case, check
):
    results, page = workspace
    before = page.read_bytes()
    named = HOSTILE[case](results)
    code, out, err = _run(ceiling, capsys, results, page, *(["--check"] if check else []))
    assert code == 2, (out, err)
    assert err.count("\n") == 1 and named in err, err
    assert "Traceback" not in err
    assert page.read_bytes() == before


def test_a_page_that_is_a_folder_or_a_link_is_refused(ceiling, capsys, workspace, tmp_path):
    results, page = workspace
    folder = tmp_path / "folder.md"
    folder.mkdir()
    code, _, err = _run(ceiling, capsys, results, folder)
    assert code == 2 and err.count("\n") == 1 and "not a regular file" in err
    link = tmp_path / "link.md"
    link.symlink_to(page)
    before = page.read_bytes()
    (results / "runs.json").write_text(
        json.dumps(_one_changed_figure(_runs(results)))
    )  # a write would change the page
    code, _, err = _run(ceiling, capsys, results, link)
    assert code == 2 and "symbolic link" in err and err.count("\n") == 1
    assert page.read_bytes() == before and link.is_symlink()


def test_a_page_without_its_markers_is_refused_before_anything_is_written(
    ceiling, capsys, workspace
):
    results, page = workspace
    text = page.read_text().replace("<!-- /ceiling:cost -->", "")
    page.write_text(text)
    code, _, err = _run(ceiling, capsys, results, page)
    assert code == 2 and "ceiling:cost" in err and page.read_text() == text


def _one_changed_figure(data: dict) -> dict:
    run = data["arms"]["vineppo"]["0"]
    run["evals"][-1]["pass1"] += 0.05
    return data


def test_check_names_the_rows_that_differ_old_and_new(ceiling, capsys, workspace):
    results, page = workspace
    before = page.read_bytes()
    assert _run(ceiling, capsys, results, page, "--check")[0] == 0
    (results / "runs.json").write_text(json.dumps(_one_changed_figure(_runs(results))))
    code, out, _ = _run(ceiling, capsys, results, page, "--check")
    assert code == 1 and page.read_bytes() == before
    assert "→" in out and "| VinePPO − GRPO | pass@1 |" in out
    old_rows = [line for line in out.splitlines() if line.startswith("  | VinePPO − GRPO")]
    new_rows = [line for line in out.splitlines() if line.startswith("    → | VinePPO − GRPO")]
    assert old_rows and new_rows and old_rows[0].strip() != new_rows[0][6:].strip()


def test_a_full_disk_leaves_the_page_whole(workspace, tmp_path):
    """Under a file-size limit below the page's size the write fails and the page is as it
    was (the old report wrote the page in place and cut docs/credit.md to 20,480 bytes)."""
    results, page = workspace
    (results / "runs.json").write_text(json.dumps(_one_changed_figure(_runs(results))))
    before = page.read_bytes()
    limit = len(before) // 4

    def limit_file_size():
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    proc = subprocess.run(
        [sys.executable, str(CEILING / "ceiling_page.py"), "--results", str(results), "--page",
         str(page), "--no-figure"],
        capture_output=True, text=True, preexec_fn=limit_file_size, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0, proc.stdout
    assert page.read_bytes() == before
    assert not (tmp_path / "credit.md.tmp").exists()
    assert "Traceback" not in proc.stderr, proc.stderr


def test_a_good_write_replaces_the_page_whole(ceiling, capsys, workspace):
    results, page = workspace
    (results / "runs.json").write_text(json.dumps(_one_changed_figure(_runs(results))))
    code, out, _ = _run(ceiling, capsys, results, page)
    assert code == 0 and "wrote" in out
    assert _run(ceiling, capsys, results, page, "--check")[0] == 0
    text = page.read_text()
    assert text.startswith("# ") and text.count("<!-- ceiling:headroom -->") == 1


# --- the claims report (three pages) and the credit study's report use the same writer ---


@pytest.fixture
def claims(tmp_path, monkeypatch):
    """The claims report reading a copy of its result files and writing copies of its pages."""
    claims_dir = ROOT / "scripts" / "experiments" / "claims"
    report = _load(claims_dir / "claims_page.py", "claims_report_hostile")
    files = sys.modules["claims_results"]
    real = tmp_path / "real"
    shutil.copytree(files.REAL, real)
    toy = tmp_path / "toy.json"
    shutil.copy(files.TOY, toy)
    monkeypatch.setattr(files, "REAL", real)
    monkeypatch.setattr(files, "CROSS", real / "cross_machine")
    monkeypatch.setattr(files, "TOY", toy)
    for name in ("PAGE", "RESULTS_PAGE", "BENCH_PAGE"):
        copy = tmp_path / Path(getattr(report, name)).name
        shutil.copy(getattr(report, name), copy)
        monkeypatch.setattr(report, name, copy)
    return report, real, toy


def _pages(report) -> dict:
    return {
        n: Path(getattr(report, n)).read_bytes() for n in ("PAGE", "RESULTS_PAGE", "BENCH_PAGE")
    }


def test_the_claims_report_is_current_on_its_copied_files(claims, capsys):
    report, _, _ = claims
    assert report.main(["--check", "--no-figure"]) == 0


@pytest.mark.parametrize("damage", ["nan", "string", "truncated", "no evals", "toy missing"])
def test_the_claims_report_refuses_a_damaged_file_and_writes_no_page(claims, capsys, damage):
    """A NaN or a string in one evaluation of one file, a truncated file, a file without
    evaluations, the toy file missing: one line naming the file, exit 2, the three pages as
    they were (the old report rewrote docs/claims.md with rc 0 and "—" in the row)."""
    report, real, toy = claims
    before = _pages(report)
    target = real / "gtpo_seed3.json"
    data = json.loads(target.read_text())
    if damage == "nan":
        data["evals"][-1]["success"] = float("nan")
    elif damage == "string":
        data["evals"][0]["pass@1"] = "0.3"
    elif damage == "no evals":
        data["evals"] = []
    if damage == "truncated":
        target.write_text(target.read_text()[:300])
    elif damage == "toy missing":
        toy.unlink()
        target = toy
    else:
        target.write_text(json.dumps(data))
    code = report.main(["--no-figure"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and target.name in err, err
    assert _pages(report) == before


def test_the_credit_report_refuses_a_damaged_file_and_writes_no_page(credit, tmp_path, capsys):
    report, results, page = credit
    assert report.main(["--check", "--results", str(results)]) == 0
    target = results / "longchain_step40.json"
    target.write_bytes(target.read_bytes()[:4096])
    before = page.read_bytes()
    for argv in (["--no-figure"], ["--check"]):
        code = report.main([*argv, "--results", str(results)])
        err = capsys.readouterr().err
        assert code == 2 and "longchain_step40.json" in err and err.count("\n") == 1, err
        assert page.read_bytes() == before
    code = report.main(["--no-figure", "--results", str(tmp_path / "nowhere")])
    assert code == 2 and "nowhere" in capsys.readouterr().err


# --- every report, each bad input: one line naming it, exit 2, nothing written -------------------


@pytest.mark.parametrize("damage", ["a JSON list", "a declared file missing"])
@pytest.mark.parametrize("check", [False, True], ids=["write", "check"])
def test_the_claims_report_refuses_a_wrong_shape_or_a_missing_declared_file(
    claims, capsys, damage, check
):
    """A result file that is a JSON list, or one of the files claims_study.py declares
    deleted: one line naming it, exit 2, the pages as they were. (Before: a deleted arm's
    file left its seed out of every comparison and rewrote the ledger with rc 0.)"""
    report, real, _ = claims
    before = _pages(report)
    target = real / "gtpo_seed3.json"
    if damage == "a JSON list":
        target.write_text("[1, 2]")
    else:
        target.unlink()
    code = report.main(["--no-figure", *(["--check"] if check else [])])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and target.name in err, err
    assert _pages(report) == before


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_the_claims_report_refuses_a_page_that_is_a_folder_or_a_link(
    claims, capsys, kind, tmp_path
):
    report, real, _ = claims
    page = Path(report.PAGE)
    if kind == "folder":
        page.unlink()
        page.mkdir()
    else:
        target = tmp_path / "elsewhere.md"
        page.rename(target)
        page.symlink_to(target)
    (real / "gtpo_seed3.json").write_text(  # a write would change the page
        (real / "gtpo_seed3.json").read_text().replace('"success": 0.', '"success": 0.0', 1)
    )
    others = {n: Path(getattr(report, n)).read_bytes() for n in ("RESULTS_PAGE", "BENCH_PAGE")}
    code = report.main(["--no-figure"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(page) in err, err
    assert {n: Path(getattr(report, n)).read_bytes() for n in others} == others
    assert page.is_dir() if kind == "folder" else page.is_symlink()


def _credit_damage(results: Path, damage: str) -> str:
    path = results / "longchain_step40.json"
    data = json.loads(path.read_text())
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_text(path.read_text()[:4096])
    elif damage == "a JSON list":
        path.write_text("[1, 2]")
    elif damage == "NaN in every float":
        path.write_text(json.dumps(_nan_everywhere(data)))
    elif damage == "strings for numbers":
        path.write_text(json.dumps(_strings_for_numbers(data)))
    return path.name


@pytest.fixture
def credit(tmp_path, monkeypatch):
    """The credit study's report reading a copy of its result files, writing a copy of its page."""
    credit_dir = ROOT / "scripts" / "experiments" / "credit"
    report = _load(credit_dir / "credit_page.py", "credit_report_hostile_all")
    results = tmp_path / "results"
    shutil.copytree(credit_dir / "results", results)
    page = tmp_path / "credit.md"
    shutil.copy(report.PAGE, page)
    monkeypatch.setattr(report, "PAGE", page)
    return report, results, page


CREDIT_DAMAGE = ["missing", "truncated", "a JSON list", "NaN in every float", "strings for numbers"]


@pytest.mark.parametrize(
    ("damage", "check"),
    [(d, False) for d in CREDIT_DAMAGE] + [("missing", True), ("NaN in every float", True)],
)
def test_the_credit_report_refuses_every_bad_file(credit, capsys, damage, check):
    """Each bad file, with and without --check (the report takes 9 s a run: --check on two):
    one line naming it, exit 2, the page as it was. (Before: NaN and strings were refused on
    a line that named no file.)"""
    report, results, page = credit
    before = page.read_bytes()
    name = _credit_damage(results, damage)
    code = report.main(["--no-figure", *(["--check"] if check else []), "--results", str(results)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and name in err and "Traceback" not in err, err
    assert page.read_bytes() == before


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_the_credit_report_refuses_a_page_that_is_a_folder_or_a_link(
    credit, capsys, kind, tmp_path
):
    report, results, page = credit
    if kind == "folder":
        page.unlink()
        page.mkdir()
    else:
        target = tmp_path / "elsewhere.md"
        page.rename(target)
        target.write_text(
            target.read_text().replace(
                "<!-- credit:oracle -->\n", "<!-- credit:oracle -->\nstale\n"
            )
        )
        page.symlink_to(target)
        before = target.read_bytes()
    code = report.main(["--no-figure", "--results", str(results)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(page) in err, err
    if kind == "link":
        assert page.is_symlink() and target.read_bytes() == before


def _learning_out(tmp_path: Path) -> Path:
    """A bench-learning --out folder: the claims' toy results.json and a report.md."""
    out = tmp_path / "bench"
    out.mkdir()
    shutil.copy(ROOT / "scripts/experiments/claims/results/toy/results.json", out / "results.json")
    (out / "report.md").write_text("Machine: x.\n\n### countdown\n\ntables\n")
    return out


def _one_run(data: dict) -> dict:
    return next(iter(next(iter(data["results"].values()))["runs"]["gtpo"].values()))


LEARNING_DAMAGE = {
    "missing": lambda p: p.unlink(),
    "truncated": lambda p: p.write_text(p.read_text()[:3000]),
    "a JSON list": lambda p: p.write_text("[1, 2]"),
    "results of the wrong shape": lambda p: p.write_text(json.dumps({"results": [1]})),
    "one NaN": lambda p: p.write_text(
        json.dumps((d := json.loads(p.read_text()), _one_run(d).update(final=float("nan")), d)[2])
    ),
    "a string for a number": lambda p: p.write_text(
        json.dumps((d := json.loads(p.read_text()), _one_run(d).update(entropy_end="0.2"), d)[2])
    ),
}


@pytest.mark.parametrize("damage", sorted(LEARNING_DAMAGE))
def test_the_learning_verdicts_refuse_every_bad_file(tmp_path, capsys, damage):
    """scripts/experiments/learning/verdicts.py: one line naming results.json, exit 2,
    report.md as it was. (Before: a NaN wrote "nan" into the verdicts with rc 0, a string or
    the wrong shape ended in a traceback.)"""
    verdicts = _load(ROOT / "scripts/experiments/learning/verdicts.py", "verdicts_hostile")
    out = _learning_out(tmp_path)
    assert verdicts.main([str(out), "--print"]) == 0
    capsys.readouterr()
    before = (out / "report.md").read_bytes()
    LEARNING_DAMAGE[damage](out / "results.json")
    code = verdicts.main([str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "results.json" in err, err
    assert (out / "report.md").read_bytes() == before


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_the_learning_verdicts_refuse_a_report_that_is_a_folder_or_a_link(tmp_path, capsys, kind):
    verdicts = _load(ROOT / "scripts/experiments/learning/verdicts.py", "verdicts_hostile")
    out = _learning_out(tmp_path)
    report = out / "report.md"
    target = tmp_path / "elsewhere.md"
    report.rename(target)
    if kind == "folder":
        report.mkdir()
    else:
        report.symlink_to(target)
    before = target.read_bytes()
    code = verdicts.main([str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "report.md" in err, err
    assert target.read_bytes() == before and (
        report.is_dir() if kind == "folder" else report.is_symlink()
    )


@pytest.fixture
def first_update(tmp_path, monkeypatch):
    """docs/first_update.md's report (``--figure-only``: it reads its result file and measures
    nothing) on a copy of its result file and of its page."""
    report = _load(ROOT / "scripts/experiments/first_update/measure.py", "first_update_hostile")
    result, page = tmp_path / "first_update.json", tmp_path / "first_update.md"
    shutil.copy(report.RESULTS, result)
    shutil.copy(report.PAGE, page)
    monkeypatch.setattr(report, "RESULTS", result)
    monkeypatch.setattr(report, "PAGE", page)
    return report, result, page


FIRST_UPDATE_DAMAGE = {
    "missing": lambda p: p.unlink(),
    "truncated": lambda p: p.write_text(p.read_text()[:2000]),
    "a JSON list": lambda p: p.write_text("[1, 2]"),
    "NaN in every float": lambda p: p.write_text(
        json.dumps(_nan_everywhere(json.loads(p.read_text())))
    ),
    "strings for numbers": lambda p: p.write_text(
        json.dumps(_strings_for_numbers(json.loads(p.read_text())))
    ),
}


@pytest.mark.parametrize("damage", sorted(FIRST_UPDATE_DAMAGE))
@pytest.mark.parametrize("check", [False, True], ids=["write", "check"])
def test_the_first_update_report_refuses_every_bad_file(first_update, capsys, damage, check):
    """One line naming the result file, exit 2, the page as it was. (Before: a NaN or a string
    was refused on a line that named no file.)"""
    report, result, page = first_update
    before = page.read_bytes()
    FIRST_UPDATE_DAMAGE[damage](result)
    code = report.main(["--figure-only", *(["--check"] if check else [])])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and result.name in err and "Traceback" not in err, err
    assert page.read_bytes() == before


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_the_first_update_report_refuses_a_page_that_is_a_folder_or_a_link(
    first_update, capsys, kind, tmp_path
):
    report, _, page = first_update
    target = tmp_path / "elsewhere.md"
    page.rename(target)
    if kind == "folder":
        page.mkdir()
    else:
        page.symlink_to(target)
    before = target.read_bytes()
    code = report.main(["--figure-only"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and str(page) in err, err
    assert target.read_bytes() == before
