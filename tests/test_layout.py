"""The code stays readable in one sitting: no function of the project's own Python outside the
tests (``refimpl/``, ``toy_envs/``, ``scripts/``, ``docs/``, ``examples/``) is longer than
``MAX_FUNCTION_LINES`` (its ``def`` line to its last line, docstring and comments included),
so that a reader can hold each one at once, and no such file is longer than
``MAX_FILE_LINES``."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 80
#: The most lines a source file outside ``tests/`` may have (issue 48): a reader takes a file
#: in as a whole, and a longer one holds more than one idea.
MAX_FILE_LINES = 600
#: Where the project's own Python lives outside the tests.
SOURCE_DIRS = ("refimpl", "toy_envs", "scripts", "docs", "examples")


def long_functions(limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """``path:line name (n lines)`` of every function (methods and nested ones included)
    longer than ``limit`` lines."""
    out = []
    for package in SOURCE_DIRS:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > limit:
                        rel = path.relative_to(ROOT)
                        out.append(f"{rel}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_no_function_is_longer_than_the_limit():
    assert long_functions() == []


def long_files(limit: int = MAX_FILE_LINES) -> list[str]:
    """``path (n lines)`` of every ``.py`` file outside ``tests/`` longer than ``limit``."""
    out = []
    for folder in SOURCE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            n = len(path.read_text(encoding="utf-8").splitlines())
            if n > limit:
                out.append(f"{path.relative_to(ROOT)} ({n} lines)")
    return out


def test_no_source_file_is_longer_than_the_limit():
    assert long_files() == []


def test_the_file_check_sees_a_long_file(tmp_path, monkeypatch):
    (tmp_path / "scripts" / "x").mkdir(parents=True)
    (tmp_path / "scripts" / "x" / "m.py").write_text("a = 1\n" * (MAX_FILE_LINES + 1))
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert long_files() == [f"scripts/x/m.py ({MAX_FILE_LINES + 1} lines)"]


def test_the_check_sees_a_long_function(tmp_path, monkeypatch):
    """The walk finds methods and nested functions too (a check that cannot fail is none)."""
    body = "\n".join(f"        x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "refimpl").mkdir()
    (tmp_path / "toy_envs").mkdir()
    (tmp_path / "refimpl" / "m.py").write_text(f"class C:\n    def f(self):\n{body}\n")
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    assert long_functions() == [f"refimpl/m.py:2 f ({MAX_FUNCTION_LINES + 1} lines)"]


#: What ``refimpl/loop.py`` may import of ours: the algorithms and what they run on.
LOOP_IMPORTS = {"refimpl.algorithms", "refimpl.core", "refimpl.batch_stages", "refimpl.model"}
LOOP_IMPORTS |= {"refimpl.sampling", "refimpl.problem_streams", "toy_envs"}
LOOP_MAX_LINES = 200


def own_imports(path: Path) -> set[str]:
    """The modules of ours (``refimpl``, ``toy_envs``) that ``path`` imports."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{a.name}" for a in node.names]
            out |= {n for n in names if n.split(".")[0] in ("refimpl", "toy_envs")}
            if node.module.split(".")[0] == "toy_envs":
                out.add("toy_envs")
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] in ("refimpl", "toy_envs")}
    return out


def test_loop_is_one_sitting_and_imports_nothing_of_run_management():
    path = ROOT / "refimpl" / "loop.py"
    assert len(path.read_text(encoding="utf-8").splitlines()) <= LOOP_MAX_LINES
    modules = {m for m in own_imports(path) if m.startswith("refimpl.")}
    allowed = {m for m in modules if any(m.startswith(a) for a in LOOP_IMPORTS)}
    assert modules - allowed == set()
    assert own_imports(path) & {"toy_envs.TOKENIZER", "toy_envs.get_task"}


def test_the_trainer_names_no_algorithm():
    """What an algorithm needs of the Trainer its Config declares: no algorithm's name (as a
    word, in any case) appears in the Trainer's file, comments included."""
    import re

    from refimpl import algorithms

    text = (ROOT / "refimpl" / "train.py").read_text(encoding="utf-8").lower()
    found = [n for n in algorithms.NAMES if re.search(rf"\b{n.replace('_', '[-_ ]?')}\b", text)]
    assert found == []


#: The top level of ``refimpl/`` shows the architecture: the algorithms' support (the contract,
#: core's mathematics and what a loss logs), the loop, the Trainer and the entry points; the
#: settings, run management and diagnostics are packages of their own. (15 until the loss
#: metrics left core.py for ``loss_metrics.py``, issue 60: core holds the mathematics alone;
#: 16 until ``notebook_outputs.py`` took what the notebooks save out of notebook_figures.py,
#: issue 59, which had reached the file limit.)
MAX_TOP_LEVEL_MODULES = 17
TRAIN_MAX_LINES = 400


def test_the_top_level_is_small_and_the_trainer_fits_in_a_sitting():
    modules = sorted(p.name for p in (ROOT / "refimpl").glob("*.py"))
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, modules
    assert len((ROOT / "refimpl" / "train.py").read_text().splitlines()) <= TRAIN_MAX_LINES
    for package in ("settings", "runs", "diagnostics"):
        assert (ROOT / "refimpl" / package / "__init__.py").is_file()


#: The layers of the code, from the bottom up (``docs/design.md`` draws them): a module imports
#: only from its own unit (a module, or a package) or from a layer below its own, never from
#: its own layer's other units or from above. A unit is a whole module or a whole package:
#: no module is carved out of its folder (``test_a_unit_is_a_whole_folder``).
#: ``refimpl/__init__.py`` is outside the order: it pins the numeric path
#: (``refimpl.runs.cpu_kernels``) before anything loads torch.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("toy_envs", "refimpl.types"),
    ("refimpl.contract",),
    ("refimpl.core", "refimpl.model", "refimpl.problem_streams"),
    ("refimpl.loss_metrics",),  # what a loss logs: it reads core, every algorithm file reads it
    ("refimpl.algorithms", "refimpl.batch_stages"),
    ("refimpl.sampling",),  # the Monte-Carlo values too (monte_carlo_values), below the loop
    ("refimpl.loop", "refimpl.evaluate"),
    ("refimpl.settings", "refimpl.scaleup"),
    ("refimpl.runs",),  # it reads the resolved plan as values, never the settings' code
    ("refimpl.diagnostics",),
    ("refimpl.warmstart", "refimpl.plots", "refimpl.notebook_outputs"),
    ("refimpl.train", "refimpl.notebook_figures"),
    ("refimpl.compare",),
    ("refimpl.bench",),
    ("refimpl.cli", "refimpl.demo"),
)


def test_a_unit_is_a_whole_folder():
    """Folders are layers: every unit of ``LAYERS`` is a top-level module or package of
    ``refimpl`` (or ``toy_envs``), never a module carved out of a package, so that no module
    sits in another layer than its folder."""
    carved = [u for units in LAYERS for u in units if u.count(".") > 1]
    assert carved == []


def _unit(module: str) -> tuple[str, int] | None:
    """The unit of the layer order a module belongs to, and its layer (None: the root)."""
    found = [
        (unit, i)
        for i, units in enumerate(LAYERS)
        for unit in units
        if module == unit or module.startswith(unit + ".")
    ]
    return max(found, key=lambda f: len(f[0])) if found else None


def upward_imports(root: Path = ROOT) -> list[str]:
    """``importer -> imported`` for every import of ours (at module level or inside a
    function) that does not point down the layer order."""
    out = []
    for package in ("refimpl", "toy_envs"):
        for path in sorted((root / package).rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            here = _unit(name)
            if here is None:  # refimpl/__init__.py
                continue
            for imported in sorted(own_imports(path)):
                there = _unit(imported)
                if there is None or there[0] == here[0]:
                    continue
                if there[1] >= here[1]:
                    out.append(f"{name} -> {imported}")
    return out


def test_every_module_is_in_the_layer_order():
    for package in ("refimpl", "toy_envs"):
        for path in (ROOT / package).rglob("*.py"):
            rel = path.relative_to(ROOT).with_suffix("")
            name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
            assert name == "refimpl" or _unit(name) is not None, name


def test_no_import_points_up():
    """Drawn from the imports: an arrow that points up or sideways is listed as
    ``importer -> imported``."""
    arrows = upward_imports()
    assert arrows == [], "\n".join(arrows)


#: What run management may not import or call: the settings are resolved, once, before it
#: runs (``refimpl.train.run_training``), and it is handed the plan and its records.
RUNS_NEVER_IMPORT = ("refimpl.settings",)


def runs_reaching_settings(root: Path = ROOT) -> list[str]:
    """``path -> imported`` for every import (module level or in a function) of
    ``refimpl.settings`` by a module of ``refimpl/runs/``."""
    out = []
    for path in sorted((root / "refimpl" / "runs").rglob("*.py")):
        for imported in sorted(own_imports(path)):
            if any(imported == s or imported.startswith(s + ".") for s in RUNS_NEVER_IMPORT):
                out.append(f"{path.relative_to(root)} -> {imported}")
    return out


def test_run_management_never_calls_back_into_the_settings(tmp_path):
    # no carve-out: the shipped models' lookup, which computes each entry's identity from its
    # settings, is the base model's room's (``refimpl.warmstart.find_shipped``)
    assert runs_reaching_settings() == []
    (tmp_path / "refimpl" / "runs").mkdir(parents=True)
    text = "def f():\n    from refimpl.settings.plan import resolve\n"
    (tmp_path / "refimpl" / "runs" / "rundir.py").write_text(text)
    assert runs_reaching_settings(tmp_path) == [
        "refimpl/runs/rundir.py -> refimpl.settings.plan.resolve"
    ]


def test_the_layer_check_sees_an_upward_import(tmp_path):
    """An import from above, and one from the same layer's other unit, are both found."""
    for name, text in {
        "refimpl/core.py": "from refimpl.settings.train_config import TrainConfig\n",
        "refimpl/evaluate.py": "def f():\n    from refimpl.loop import LoopConfig\n",
        "refimpl/loop.py": "from refimpl import core\n",
        "toy_envs/tasks.py": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert upward_imports(tmp_path) == [
        "refimpl.core -> refimpl.settings.train_config.TrainConfig",
        "refimpl.evaluate -> refimpl.loop.LoopConfig",
    ]


def re_exports(root: Path = ROOT) -> list[str]:
    """``path:line`` of every module-level import in ``refimpl/`` whose unused names are kept
    with ``noqa: F401``: a re-export, so that callers import a name from a module where it
    does not live."""
    out = []
    for path in sorted((root / "refimpl").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for node in ast.parse("\n".join(lines)).body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                text = "\n".join(lines[node.lineno - 1 : node.end_lineno])
                if "noqa: F401" in text:
                    out.append(f"{path.relative_to(root)}:{node.lineno}")
    return out


def test_no_module_re_exports_another_modules_names(tmp_path):
    assert re_exports() == []
    (tmp_path / "refimpl").mkdir()
    hub = "from refimpl.settings.train_config import (  # noqa: F401\n    TrainConfig,\n)\n"
    (tmp_path / "refimpl" / "hub.py").write_text(hub)
    assert re_exports(tmp_path) == ["refimpl/hub.py:1"]


#: The files that drive every algorithm through the contract: none of them names one.
ALGORITHM_FREE = ("refimpl/contract.py", "refimpl/core.py", "refimpl/train.py", "refimpl/loop.py")
ALGORITHM_FREE += ("refimpl/batch_stages.py",)
ALGORITHM_FREE_PACKAGES = ("refimpl/scaleup",)


def algorithm_words() -> tuple[frozenset[str], frozenset[str]]:
    """The registry's names, and every ``Config``'s fields outside the contract
    (``contract.CONFIG_FIELDS``) that are not also a setting of the loops themselves
    (``LoopConfig``, ``TrainConfig``: the run's ``seed`` is the loop's, whatever Clip-Cov's
    Config calls its own)."""
    import dataclasses

    from refimpl import algorithms, contract
    from refimpl.loop import LoopConfig
    from refimpl.settings.train_config import TrainConfig

    loops = {f.name for cls in (LoopConfig, TrainConfig) for f in dataclasses.fields(cls)}
    fields = {
        f.name
        for name in algorithms.NAMES
        for f in dataclasses.fields(algorithms.get(name).Config)
        if f.name not in contract.CONFIG_FIELDS and f.name not in loops
    }
    return frozenset(algorithms.NAMES), frozenset(fields)


#: A string that equals an algorithm field by coincidence, with the reason (a metric's key).
COINCIDENCES = {"entropy_mean": "the step metric (the mean token entropy), not GTPO's field"}


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string constants that are docstrings (of a module, class or function,
    or an attribute's docstring: any string that is a statement of its own)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def _parameters(tree: ast.AST) -> dict[int, set[str]]:
    """For every string constant inside a function: the function's parameter names (a string
    that names its own parameter, ``require(max_len > 0, "max_len", ...)``, names no Config's
    field)."""
    out: dict[int, set[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            params = {
                a.arg for a in [*node.args.args, *node.args.kwonlyargs, *node.args.posonlyargs]
            }
            for inner in ast.walk(node):
                if isinstance(inner, ast.Constant):
                    out.setdefault(id(inner), set()).update(params)
    return out


def algorithm_mentions(path: Path, names: frozenset[str], fields: frozenset[str]) -> list[str]:
    """``path:line what`` of every place the code of ``path`` (not its docstrings or comments)
    names an algorithm or one of its own fields: an import or a name of an algorithm module,
    an attribute of an algorithm field (``cfg.alpha_2``), a string that is an algorithm's name
    or field, or holds an algorithm's name as a word of a dotted path
    (``"refimpl.algorithms.gtpo"``)."""
    import re

    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs, params = _docstrings(tree), _parameters(tree)
    rel = path.relative_to(ROOT)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        what = None
        if isinstance(node, ast.Name) and node.id in names:
            what = f"name {node.id}"
        elif isinstance(node, ast.alias) and node.name.split(".")[-1] in names:
            what = f"import {node.name}"
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[-1] in names:
            what = f"import from {node.module}"
        elif isinstance(node, ast.Attribute) and (node.attr in fields or node.attr in names):
            what = f"attribute .{node.attr}"
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        ):
            text = node.value.strip()
            words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", node.value))
            own = params.get(id(node), set())
            if text in (fields | names) - own - set(COINCIDENCES):
                what = f"string {node.value!r}"
            elif words & names:
                what = f"string {node.value!r} (names {sorted(words & names)})"
        if what is not None:
            out.append((node.lineno, f"{rel}:{node.lineno} {what}"))
    return [m for _, m in sorted(out)]


def algorithm_free_files() -> list[Path]:
    files = [ROOT / p for p in ALGORITHM_FREE]
    for package in ALGORITHM_FREE_PACKAGES:
        files += sorted((ROOT / package).rglob("*.py"))
    return files


def test_no_loop_names_an_algorithm_or_its_fields():
    """What an algorithm needs of a loop its Config declares or answers (``reads_*``,
    ``needs_*``, ``for_*``, the ranges in its annotations), so core, the loops, the
    mechanisms and the scale-up adapters name no algorithm and none of an algorithm's own
    fields, as a name or a string (docstrings and comments may use them as examples; the
    contract's fields are everyone's). An entry point that defaults to an algorithm defaults
    to ``algorithms.BASELINE``."""
    names, fields = algorithm_words()
    found = [m for path in algorithm_free_files() for m in algorithm_mentions(path, names, fields)]
    assert found == []


#: The most lines a benchmark module may have (issue 48: no file over 600 lines).
BENCH_MAX_LINES = 600


def test_the_benchmarks_name_no_algorithm():
    """``refimpl/bench/`` measures and judges no paper's claim (the verdicts are
    ``scripts/experiments/learning/verdicts.py``'s): its code names no algorithm, as a name or
    a string (a measurement against the baseline takes ``algorithms.BASELINE``). Fields are
    not checked here: a benchmark reads metrics whose keys may share a field's name."""
    names, _fields = algorithm_words()
    files = sorted((ROOT / "refimpl" / "bench").rglob("*.py"))
    assert len(files) > 1
    found = [m for path in files for m in algorithm_mentions(path, names, frozenset())]
    assert found == []
    longest = max(files, key=lambda p: len(p.read_text(encoding="utf-8").splitlines()))
    assert len(longest.read_text(encoding="utf-8").splitlines()) <= BENCH_MAX_LINES, longest


def test_the_name_check_sees_each_kind_of_mention(tmp_path, monkeypatch):
    names, fields = algorithm_words()
    (tmp_path / "m.py").write_text(
        '"""Docstring: gtpo, alpha_2."""\n'
        "from refimpl.algorithms import gtpo\n"
        "x = cfg.alpha_2\n"
        'y = getattr(cfg, "stats")\n'
        'z = "refimpl.algorithms.tepo"\n'
        "w = name in ('gtpo',)\n"
        "def f(max_len):\n"
        '    require(max_len > 0, "max_len", "positive")  # its own parameter: fine\n'
        'v = "entropy_mean"  # a metric\n'
        "u = cfg.seed  # the loop's own setting\n"
    )
    monkeypatch.setattr(f"{__name__}.ROOT", tmp_path)
    found = [m.split(" ", 1)[1] for m in algorithm_mentions(tmp_path / "m.py", names, fields)]
    assert found == [
        "import gtpo",
        "attribute .alpha_2",
        "string 'stats'",
        "string 'refimpl.algorithms.tepo' (names ['tepo'])",
        "string 'gtpo'",
    ], found


def test_the_design_page_draws_the_tree_and_the_layers():
    """``docs/design.md``'s map names every top-level module and package of ``refimpl/``, and
    its table of layers is ``LAYERS``."""
    import re

    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    section = text.split("## Layers", 1)[1].split("## Where each file lives", 1)[0]
    drawn = section.split("```", 2)[1]
    named = set(re.findall(r"refimpl/(\w+)", drawn)) | set(re.findall(r"\b(\w+)\.py\b", drawn))
    tree = {p.stem for p in (ROOT / "refimpl").glob("*.py")} - {"__init__"}
    tree |= {p.parent.name for p in (ROOT / "refimpl").glob("*/__init__.py")}
    assert tree - named == set()
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", section, re.M)
    table = tuple(tuple(re.findall(r"`([\w.]+)`", units)) for _, units in rows)
    assert table == LAYERS


# -- the textbook and the lab (docs/design.md) ---------------------------------------------------
LAB = ROOT / "scripts" / "experiments"


def lab_imports(root: Path = ROOT) -> list[str]:
    """``path: line`` of every import of the lab (``scripts``) in the package, or a path of
    the lab put on ``sys.path`` there."""
    out = []
    for package in ("refimpl", "toy_envs"):
        for path in sorted((root / package).rglob("*.py")):
            text = path.read_text(encoding="utf-8")
            for node in ast.walk(ast.parse(text)):
                names = []
                if isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                if any(n.split(".")[0] == "scripts" for n in names):
                    out.append(f"{path.relative_to(root)}:{node.lineno}")
            for n, line in enumerate(text.splitlines(), 1):
                code = line.split("#", 1)[0]
                if "sys.path" in code and "scripts" in code:
                    out.append(f"{path.relative_to(root)}:{n}")
    return out


def test_the_package_never_imports_the_lab():
    assert lab_imports() == []


def test_the_lab_check_sees_an_import(tmp_path):
    (tmp_path / "refimpl").mkdir()
    (tmp_path / "refimpl" / "m.py").write_text(
        "def f():\n    from scripts.experiments.claims import stats\n"
        "import sys\nsys.path.insert(0, 'scripts/experiments')\n"
    )
    assert lab_imports(tmp_path) == ["refimpl/m.py:2", "refimpl/m.py:4"]


def test_every_experiment_has_its_readme_and_is_on_the_design_page():
    text = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    lab = text.split("## Where each file lives", 1)[1].split("## The contract", 1)[0]
    folders = sorted(p.name for p in LAB.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders, LAB
    for name in folders:
        assert (LAB / name / "README.md").is_file(), f"{name}: no README.md"
        assert name in lab, f"docs/design.md does not name scripts/experiments/{name}"


def test_the_license_is_an_spdx_expression():
    """pyproject.toml's ``project.license`` in the current form (an SPDX string; the table form
    is deprecated and setuptools drops it after 2027-02-18), with its file named."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"] and (ROOT / "LICENSE").is_file()
