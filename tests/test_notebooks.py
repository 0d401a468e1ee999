"""Execute every notebook ``notebooks/0*.ipynb`` at its fast size and check it draws.

Each notebook reads ``REFIMPL_NOTEBOOK_SIZE`` in its first cell (``refimpl.notebook_figures.notebook_size``);
``fast`` shrinks the warm start and the RL runs to seconds (the committed outputs come from the
default ``small`` size, ``scripts/dev/time_notebooks.py --inplace``). The
notebooks share one runs directory here, so the tiny warm start is trained once.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("0*.ipynb"))
TIMEOUT_S = 600  # per cell; the whole fast notebook takes seconds


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("notebook-runs")


def _kernel_env(runs_dir: Path) -> dict[str, str]:
    env = {
        "REFIMPL_NOTEBOOK_SIZE": "fast",
        "MPLBACKEND": "Agg",
        "REFIMPL_NOTEBOOK_RUNS_DIR": str(runs_dir),
        "TQDM_DISABLE": "1",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
    }
    # The kernel runs this interpreter (the venv's), whatever kernelspec is installed.
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    # ... and imports this checkout's refimpl: it starts in notebooks/, where a relative
    # PYTHONPATH (the usual PYTHONPATH=.) would point elsewhere.
    repo = str(NOTEBOOK_DIR.parent)
    env["PYTHONPATH"] = os.pathsep.join([repo, *filter(None, [os.environ.get("PYTHONPATH")])])
    return env


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_executes_and_draws(path: Path, runs_dir: Path, monkeypatch) -> None:
    for key, value in _kernel_env(runs_dir).items():
        monkeypatch.setenv(key, value)
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb,
        timeout=TIMEOUT_S,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},
    )
    # Start the kernel with this interpreter: the installed kernelspec may point elsewhere.
    client.kernel_manager_class = _kernel_manager_class()
    client.execute()  # raises CellExecutionError on the first failing cell

    errors = [
        o
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]
    assert not errors, f"{path.name}: error outputs {errors}"
    images = sum(
        1
        for c in nb.cells
        if c.cell_type == "code"
        for o in c.get("outputs", [])
        if "image/png" in o.get("data", {})
    )
    assert images >= 1, f"{path.name}: no figure in the outputs"


def test_notebooks_exist() -> None:
    names = {p.name for p in NOTEBOOKS}
    for expected in (
        "01_quickstart.ipynb",
        "02_advantages_side_by_side.ipynb",
        "03_entropy_dynamics.ipynb",
        "04_token_credit_on_a_real_model.ipynb",
        "05_entropy_interventions.ipynb",
        "06_token_credit.ipynb",
    ):
        assert expected in names


def _kernel_manager_class():
    from jupyter_client.manager import KernelManager

    class ThisInterpreterKernelManager(KernelManager):
        """A python3 kernel run by ``sys.executable`` (the venv that runs the tests)."""

        def format_kernel_cmd(self, extra_arguments=None):
            cmd = super().format_kernel_cmd(extra_arguments)
            if cmd and Path(cmd[0]).name.startswith("python"):
                cmd[0] = sys.executable
            return cmd

    return ThisInterpreterKernelManager


# ---------------------------------------------------------------------------------------------
# Checks of the notebooks' sources and helpers (fast: nothing is executed but one config cell).
# ---------------------------------------------------------------------------------------------

import dataclasses  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402

import numpy as np  # noqa: E402

REPO = NOTEBOOK_DIR.parent


def _cells(path: Path, kind: str | None = None) -> list[str]:
    nb = nbformat.read(path, as_version=4)
    return [c.source for c in nb.cells if kind is None or c.cell_type == kind]


def test_one_size_switch_with_a_small_default(monkeypatch) -> None:
    from refimpl import notebook_figures

    assert notebook_figures.notebook_size({}) == "small"
    assert notebook_figures.notebook_size({notebook_figures.SIZE_VARIABLE: ""}) == "small"
    for size in ("fast", "small", "full"):
        assert notebook_figures.notebook_size({notebook_figures.SIZE_VARIABLE: size}) == size
    with pytest.raises(ValueError, match="fast, small, full"):
        notebook_figures.notebook_size({notebook_figures.SIZE_VARIABLE: "huge"})


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_reads_the_switch_and_shows_progress(path: Path) -> None:
    """Every notebook takes its size from the one switch, and none hides its progress: the
    tests and the timing script disable tqdm from outside (TQDM_DISABLE), a person sees bars."""
    code = _cells(path, "code")
    assert "notebook_figures.notebook_size()" in code[0], (
        f"{path.name}: first cell does not read the size"
    )
    source = "\n".join(code)
    assert "TQDM_DISABLE" not in source.replace("TQDM_DISABLE=1", ""), path.name
    assert "capture_output" not in source, f"{path.name}: a cell hides its progress"


#: A number a text cell quotes as a result: two or more decimals (0.41, 0.150) or a percentage.
RESULT_NUMBER = re.compile(r"(?<![\w.])\d+\.\d{2,}|\d+(?:\.\d+)? ?%")
ARXIV_ID = re.compile(r"arXiv:? ?\d{4}\.\d{4,5}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_prose_quotes_no_typed_results(path: Path) -> None:
    """A text cell may quote a number only when a code cell holds it literally (an input, such
    as notebook 02's hand-set entropies); results are written by the code (Markdown built from
    the values), so a rerun never leaves a stale number in the prose."""
    code = "\n".join(_cells(path, "code"))
    typed = {
        n.replace(" ", "")
        for md in _cells(path, "markdown")
        for n in RESULT_NUMBER.findall(ARXIV_ID.sub("", md))
        if n.replace(" ", "").rstrip("%") not in code
    }
    assert not typed, f"{path.name}: numbers typed into the text: {sorted(typed)}"


PATH_IN_TEXT = re.compile(
    r"(?<![\w/.])((?:scripts|refimpl|docs|toy_envs|tests)/[\w./-]+\.(?:py|md|json|sh))"
)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_cites_only_files_that_exist(path: Path) -> None:
    cited = {m for s in _cells(path) for m in PATH_IN_TEXT.findall(s)}
    missing = sorted(p for p in cited if not (REPO / p).exists())
    assert not missing, f"{path.name} cites files that do not exist: {missing}"


def _write_run(run_dir: Path, steps: int, budget: int | None, records: list[dict]) -> Path:
    run_dir.mkdir(parents=True)
    tc = {"algo": "grpo", "task": "countdown", "steps": steps, "max_sampled_tokens": budget}
    (run_dir / "config.json").write_text(json.dumps({"train_config": tc}))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    return run_dir


def test_run_status_tells_a_finished_run_from_a_partial_one(tmp_path: Path) -> None:
    from refimpl.runs import status

    def log(last_step: int, tokens_per_step: int, final_eval: bool = True) -> list[dict]:
        out = [{"step": 0, "heldout_greedy": 0.4}]
        out += [{"step": s, "sampled_tokens": s * tokens_per_step} for s in range(1, last_step + 1)]
        if final_eval:
            out[-1]["heldout_greedy"] = 0.5
        return out

    # stopped at its token budget (83 steps of 50 tokens ≥ 4000) with its final evaluation
    budget_done = _write_run(tmp_path / "budget", 200, 4000, log(83, 50))
    # interrupted at step 29 (1450 of 4000 tokens)
    interrupted = _write_run(tmp_path / "interrupted", 200, 4000, log(29, 50, final_eval=False))
    # all steps, no token budget
    steps_done = _write_run(tmp_path / "steps", 10, None, log(10, 50))
    # reached its budget but the final evaluation is missing
    no_eval = _write_run(tmp_path / "noeval", 10, None, log(10, 50, final_eval=False))
    # a directory that is not a run
    (tmp_path / "empty").mkdir()

    assert status.run_status(budget_done)["complete"]
    assert status.run_status(steps_done)["complete"]
    s = status.run_status(interrupted)
    assert not s["complete"] and s["label"].startswith("partial") and "step 29 of 200" in s["label"]
    assert "1,450 of 4,000" in s["label"]
    assert not status.run_status(no_eval)["complete"]
    assert not status.run_status(tmp_path / "empty")["complete"]

    done, refused = status.complete_runs(
        [budget_done, interrupted, steps_done, no_eval, tmp_path / "empty"]
    )
    assert done == [budget_done, steps_done]
    assert [r["run_dir"] for r in refused] == [interrupted, no_eval, tmp_path / "empty"]


def test_notebook_05_draws_only_finished_runs() -> None:
    source = "\n".join(_cells(NOTEBOOK_DIR / "05_entropy_interventions.ipynb", "code"))
    assert "complete_runs(" in source
    assert 'metrics.jsonl").exists()' not in source  # presence is not completion


def test_notebook_02_panels_follow_the_registry() -> None:
    """One advantage and one credit panel per registered algorithm, on ONE colour scale."""
    from refimpl import algorithms, notebook_figures

    rng = np.random.default_rng(0)
    tokens = [list("ab#1"), list("c#2")]
    adv = {n: rng.normal(size=(2, 4)) for n in algorithms.NAMES}
    credit = {n: 3 * rng.normal(size=(2, 4)) for n in algorithms.NAMES}
    fig, vmax = notebook_figures.plot_advantages_and_credit(adv, credit, tokens, [1.0, 0.0])
    panels = [ax for ax in fig.axes if ax.get_title(loc="left")]
    assert len(panels) == 2 * len(algorithms.NAMES)
    limits = {ax.images[0].get_clim() for ax in panels}
    assert limits == {(-vmax, vmax)}
    largest = max(np.abs(v[i, : len(t)]).max() for d in (adv, credit) for v in d.values()
                  for i, t in enumerate(tokens))  # fmt: skip
    assert vmax >= largest - 1e-12

    source = "\n".join(_cells(NOTEBOOK_DIR / "02_advantages_side_by_side.ipynb"))
    assert "algorithm_signals(" in source  # the credit of refimpl.bench.credit_batch, not a copy
    assert "autograd.grad" not in source
    words = re.compile(r"\b(?:nine|ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen)\b", re.I)
    assert not words.findall(source), "a typed count of algorithms"


def test_notebook_01_small_size_starts_from_the_demo_base_model(tmp_path, monkeypatch) -> None:
    """Notebook 01's default size starts where the README demo starts (the same warm-start
    cache), and its text explains any difference (the full size's longer warm start)."""
    from refimpl.demo import DemoConfig
    from refimpl.runs.cache import cache_dir
    from refimpl.settings.plan import run_warmstart
    from refimpl.settings.train_config import TrainConfig

    cells = _cells(NOTEBOOK_DIR / "01_quickstart.ipynb", "code")
    config_cell = next(c for c in cells if "DemoConfig()" in c)
    monkeypatch.chdir(tmp_path)
    namespace = {"SIZE": "small", "os": __import__("os")}
    exec(config_cell, namespace)  # builds the configs; trains nothing

    demo = DemoConfig()
    train = dataclasses.replace(
        TrainConfig(), task=demo.task, runs_dir=namespace["RUNS"], threads=1
    )
    train = dataclasses.replace(
        train,
        warmstart=dataclasses.replace(
            train.warmstart, runs_dir=namespace["RUNS"], steps=demo.base_steps
        ),
    )
    assert cache_dir(namespace["warm"]) == cache_dir(run_warmstart(train))
    assert any("README demo's base model" in c for c in cells)


def _timing_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "time_notebooks", REPO / "scripts" / "dev" / "time_notebooks.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("time_notebooks", module)  # its dataclass looks itself up there
    spec.loader.exec_module(sys.modules["time_notebooks"])
    return sys.modules["time_notebooks"]


def test_timing_script_selects_notebooks_and_sums_their_times() -> None:
    script = _timing_script()
    assert script.select("") == NOTEBOOKS
    assert [p.name for p in script.select("02, 06_token_credit.ipynb")] == [
        "02_advantages_side_by_side.ipynb",
        "06_token_credit.ipynb",
    ]
    with pytest.raises(ValueError, match="matches 0"):
        script.select("07")
    with pytest.raises(ValueError, match="matches 6"):
        script.select("0")
    rows = [
        {"notebook": "a.ipynb", "seconds": 90.0, "cpu_seconds": 60.0, "error": None,
         "load_before": [1.0], "load_after": [2.0]},
        {"notebook": "b.ipynb", "seconds": 30.0, "cpu_seconds": 24.0, "error": "boom",
         "load_before": [2.0], "load_after": [1.0]},
    ]  # fmt: skip
    machine = {"date": "d", "cpu": "c", "cores": 2, "commit": "x"}
    table = script.markdown_table(
        {"size": "small", "machine": machine, "fresh_runs_dir": True, "notebooks": rows}
    )
    assert "| **all** | **2.0 min** | 1.4 min | |" in table
    assert "failed: boom" in table


def test_timing_script_writes_the_result_header(tmp_path, monkeypatch):
    """The timings file opens with the header every result file has (refimpl.bench's
    ``result_header``: its kind, machine and commit), written by the script itself: a fresh
    timing once wrote a file without one, which tests/test_result_headers.py then refused."""
    from refimpl.bench.result_header import read_result

    script = _timing_script()
    monkeypatch.setattr(script, "execute", lambda path, timeout: (None, 1.0, 0.5, None))
    out = tmp_path / "timings.json"
    assert script.main(script.TimeConfig(notebooks="02", out=out)) == 0
    result = read_result(out)  # raises on a missing or malformed header
    assert result["header"]["kind"] == "notebook timings" and result["complete"]
    assert [r["notebook"] for r in result["notebooks"]] == [script.select("02")[0].name]


@pytest.mark.parametrize("case", ["directory", "under a file", "link", "link at .tmp", "proc"])
def test_timing_script_checks_out_before_any_notebook_runs(tmp_path, monkeypatch, capsys, case):
    """Issue 61, late 6: ``--out`` was first written after the first notebook had run (minutes
    to an hour), so a path that cannot be written failed then. It is checked first, as
    ``refimpl``'s outputs are: one line naming ``--out``, exit code 2, no notebook run."""
    script = _timing_script()
    if case == "proc" and not Path("/proc/self").is_dir():
        pytest.skip("no /proc")

    def no_notebook(*_args, **_kwargs):
        raise AssertionError("a notebook ran before --out was checked")

    monkeypatch.setattr(script, "execute", no_notebook)
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    (tmp_path / "victim.txt").write_text("keep")
    out = {"directory": tmp_path / "adir", "under a file": tmp_path / "afile" / "t.json",
           "link": tmp_path / "t.json", "link at .tmp": tmp_path / "u.json",
           "proc": Path("/proc/t.json")}[case]  # fmt: skip
    if case == "link":
        out.symlink_to(tmp_path / "victim.txt")
    if case == "link at .tmp":
        (tmp_path / "u.json.tmp").symlink_to(tmp_path / "victim.txt")
    code = script.main(script.TimeConfig(notebooks="01", out=out))
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("--out: ") and err.count("\n") == 1, err
    assert (tmp_path / "victim.txt").read_text() == "keep"


def test_timing_script_merges_a_retimed_notebook_and_names_each_rows_measurement(
    tmp_path: Path,
) -> None:
    """`--merge`: the rows not retimed keep the measurement they came from, and the table says
    which measurement each row is (a retimed row never passes for a timing of the whole set)."""
    script = _timing_script()
    old_machine = {"date": "2026-01-01", "cpu": "c", "cores": 2, "commit": "old"}

    def row(name: str, s: float) -> dict:
        return {"notebook": name, "seconds": s, "cpu_seconds": s / 2, "error": None,
                "load_before": [1.0], "load_after": [1.0]}  # fmt: skip

    out = tmp_path / "timings.json"
    out.write_text(json.dumps({
        "size": "small", "machine": old_machine, "fresh_runs_dir": True, "runs_dir": "/tmp/r",
        "notebooks": [row(p.name, 60.0) for p in NOTEBOOKS],
    }))  # fmt: skip
    kept = script.earlier_rows(out, "small", script.select("04"))
    assert [r["notebook"] for r in kept] == [
        p.name for p in NOTEBOOKS if not p.name.startswith("04")
    ]
    assert all(r["measurement"]["machine"] == old_machine for r in kept)
    with pytest.raises(ValueError, match="size 'small', not 'full'"):
        script.earlier_rows(out, "full", script.select("04"))
    with pytest.raises(ValueError, match="readable result file"):
        script.earlier_rows(tmp_path / "missing.json", "small", [])

    new = {"machine": {**old_machine, "date": "2026-02-02", "commit": "new"},
           "fresh_runs_dir": True, "runs_dir": "/tmp/s", "note": "beside a benchmark"}  # fmt: skip
    rows = sorted(kept + [{**row(NOTEBOOKS[3].name, 120.0), "measurement": new}],
                  key=lambda r: r["notebook"])  # fmt: skip
    table = script.markdown_table({"size": "small", "machine": new["machine"],
                                   "fresh_runs_dir": True, "notebooks": rows})  # fmt: skip
    assert "Measurement A: Size `small`, 2026-01-01, c, 2 cores, commit old" in table
    assert "Measurement B: Size `small`, 2026-02-02, c, 2 cores, commit new" in table
    assert "beside a benchmark" in table
    assert f"| `{NOTEBOOKS[3].name}` | B | 2.0 min (120 s) |" in table
    assert f"| `{NOTEBOOKS[0].name}` | A | 1.0 min (60 s) |" in table
    assert "| **all** | | **7.0 min** | 3.5 min | |" in table


def test_readme_shows_the_timing_files_table() -> None:
    """notebooks/README.md's table of times is the one `time_notebooks.py` prints from
    notebooks/timings.json: a new timing without the README (or the reverse) fails here."""
    script = _timing_script()
    result = json.loads((NOTEBOOK_DIR / "timings.json").read_text())
    assert result["complete"], "notebooks/timings.json: an interrupted timing"
    assert {r["notebook"] for r in result["notebooks"]} == {p.name for p in NOTEBOOKS}
    assert script.markdown_table(result) in (NOTEBOOK_DIR / "README.md").read_text()


# ---------------------------------------------------------------------------------------------
# The committed outputs (executed at the default size) show what the notebooks say.
# ---------------------------------------------------------------------------------------------

#: A progress bar's count, "12/30 [", as tqdm writes it.
BAR_COUNT = re.compile(r"(\d+)/(\d+) \[")
WIDGET = "application/vnd.jupyter.widget-view+json"


def _outputs(path: Path) -> list[tuple[int, dict]]:
    nb = nbformat.read(path, as_version=4)
    return [
        (i, o)
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        for o in c.get("outputs", [])
    ]


def _output_texts(path: Path) -> list[tuple[int, str]]:
    """``(cell index, text)`` of every saved output: streams, plain text and Markdown; a
    stream's carriage returns redraw a line, so only what follows the last one shows."""
    texts = []
    for i, o in _outputs(path):
        data = o.get("data", {})
        for text in (o.get("text", ""), data.get("text/plain", ""), data.get("text/markdown", "")):
            text = "".join(text) if isinstance(text, list) else text
            texts.append((i, "\n".join(line.split("\r")[-1] for line in text.split("\n"))))
    return texts


def stuck_bars(path: Path) -> list[str]:
    """The progress bars a saved notebook shows short of their total, and its widgets (a
    saved widget shows, where widgets do not run, the text of its first state)."""
    found = [f"cell {i}: a widget ({o['data'].get('text/plain')!r})"
             for i, o in _outputs(path) if WIDGET in o.get("data", {})]  # fmt: skip
    for i, text in _output_texts(path):
        for m in BAR_COUNT.finditer(text):
            if int(m[1]) < int(m[2]):
                found.append(f"cell {i}: {text[max(0, m.start() - 40) : m.end()]!r}")
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_saved_outputs_hold_no_stuck_progress_bar(path: Path) -> None:
    """The committed outputs hold no bar stuck at its first state ("0/30"): the bars save
    their final state (``notebook_outputs.bars_save_their_final_state``)."""
    assert stuck_bars(path) == []


def test_the_stuck_bar_check_sees_a_stuck_bar(tmp_path: Path) -> None:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("run()")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text="a: 30/30 [00:01<00:00]\n"),
        nbformat.v4.new_output("display_data", data={"text/plain": "b:   0%| | 0/30 [00:00<?]"}),
    ]
    nb.cells = [cell]
    path = tmp_path / "x.ipynb"
    nbformat.write(nb, path)
    assert len(stuck_bars(path)) == 1 and "0/30" in stuck_bars(path)[0]


def test_a_bar_in_a_kernel_saves_its_final_state() -> None:
    """``bars_save_their_final_state`` in a kernel: the bar is shown under a display id, and
    closing it replaces that output by its final count; outside a kernel nothing changes."""
    import tqdm.auto

    from refimpl import notebook_outputs

    before = tqdm.auto.tqdm
    if "ipykernel" not in sys.modules:
        notebook_outputs.bars_save_their_final_state()
        assert tqdm.auto.tqdm is before
    import tqdm.notebook

    updates = []

    class Handle:
        def update(self, data, raw=False):
            updates.append(data)

    import IPython.display

    real = IPython.display.display
    IPython.display.display = lambda *a, **k: Handle()
    try:
        bar_class = notebook_outputs._final_state_bar(tqdm.notebook.tqdm)
        bar = bar_class(total=3, desc="steps")
        bar.update(3)
        bar.close()
    finally:
        IPython.display.display = real
    assert len(updates) == 1 and "3/3 [" in updates[0]["text/plain"], updates


def test_notebook_01_says_how_it_got_its_base_model() -> None:
    """01 loads the shipped base model (the demo does too): its text must not say that the
    demo and the notebook train it once between them, and it says which it was."""
    path = NOTEBOOK_DIR / "01_quickstart.ipynb"
    text = "\n".join(t for _, t in _output_texts(path)) + "\n".join(_cells(path))
    assert "once between them" not in text
    said = "\n".join(t for _, t in _output_texts(path))
    assert "loads the shipped model countdown-300" in said


def test_notebook_03_title_and_law_sentence_match_what_ran() -> None:
    """03's title names no algorithm its default size does not run, and its law-fit sentence
    never reads "4 to 4 points"."""
    from refimpl import algorithms

    path = NOTEBOOK_DIR / "03_entropy_dynamics.ipynb"
    title = _cells(path, "markdown")[0].splitlines()[0]
    config = next(c for c in _cells(path, "code") if "LearningConfig(" in c)
    small = config.split('SIZE == "small"', 1)[1].split("else:", 1)[0]
    ran = re.search(r'algos="([\w,]+)"', small)[1].split(",")
    for name in algorithms.NAMES:
        title_of = (algorithms.get(name).__doc__ or "").strip().split(":")[0]
        if re.search(rf"(?<![\w-]){re.escape(title_of)}(?![\w-])", title):
            assert name in ran, f"the title names {title_of}, which the default size does not run"
    said = "\n".join(t for _, t in _output_texts(path))
    assert not re.search(r"\b(\d+) to \1 points", said), "a range whose two ends are equal"
    assert "The law R = −a·exp(H) + b" in said


def test_notebook_05_reads_03s_runs_and_says_whether_its_runs_learned() -> None:
    """05 draws 03's runs when it has no benchmark runs (a partial one under a label saying
    so), and its saved text says, computed from the runs, whether they learned."""
    path = NOTEBOOK_DIR / "05_entropy_interventions.ipynb"
    source = "\n".join(_cells(path, "code"))
    assert "notebook03-small" in source and "partial" in source
    said = "\n".join(t for _, t in _output_texts(path))
    assert "did not learn" in said or "rose beyond twice its standard error" in said
    # executed after 03 in one runs directory (scripts/dev/time_notebooks.py), it drew 03's
    assert "notebook 03's runs" in said


def test_the_learning_verdict_says_plainly_that_runs_did_not_learn() -> None:
    from refimpl.notebook_outputs import learning_verdict

    flat = [{"algo": a, "greedy_start": 0.0, "greedy_end": 0.0, "entropy_start": 2.494,
             "entropy_end": 2.494} for a in ("dapo", "tepo")]  # fmt: skip
    text = learning_verdict(flat, 20)
    assert "did not learn" in text and "did not move" in text
    # 0.265 → 0.477 on 200 problems: a gain of 0.21 against a standard error of about 0.047
    rose = [{"algo": "grpo", "greedy_start": 0.265, "greedy_end": 0.477, "entropy_start": 0.655,
             "entropy_end": 0.476}]  # fmt: skip
    text = learning_verdict(rose, 200)
    assert "did not learn" not in text and "in 1 of 1 runs" in text
    # 0.265 → 0.30 on 200 problems: within twice the standard error (about 0.09)
    small = [{**rose[0], "greedy_end": 0.30}]
    assert "did not learn" in learning_verdict(small, 200)


def test_notebook_06_shows_the_share_table_of_the_committed_results() -> None:
    """06's saved tables are the ones its cell computes from the committed result files now
    (a share table of older results would be stale)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "ceiling_page_for_06", REPO / "scripts" / "experiments" / "ceiling" / "ceiling_page.py"
    )
    ceiling = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ceiling)
    arms = ceiling.load_runs(ceiling.RESULTS)
    said = [t for _, t in _output_texts(NOTEBOOK_DIR / "06_token_credit.ipynb")]
    assert ceiling.share_table(arms).strip() in [t.strip() for t in said]
    assert ceiling.headroom_table(arms).strip() in [t.strip() for t in said]
