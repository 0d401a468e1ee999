"""The ``refimpl`` command line (tyro: every dataclass field is a flag, with its docstring).

Every command checks all its flags before it writes or trains anything: a bad flag is one
line naming it, exit code 2, and nothing created. Damaged files, unwritable directories and a
non-finite loss are one line and exit code 1; Ctrl-C stops a run after a checkpoint (130).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import math
import os
import re
import signal
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

# Importing torch takes seconds: Ctrl-C then is one line and exit code 130, as later on, when
# this module is the program (`python -m refimpl.cli`, or the `refimpl` script that imports
# it); imported by another program (a notebook, the tests), the interrupt is that program's.
try:
    import tyro

    from refimpl import algorithms, contract
    from refimpl.bench.credit import CreditConfig
    from refimpl.bench.learning_settings import LearningConfig
    from refimpl.bench.speed_settings import SpeedConfig
    from refimpl.compare import CompareConfig, compare
    from refimpl.runs.checkpoint import CheckpointError
    from refimpl.runs.divergence import NonFiniteLossError
    from refimpl.runs.lock import is_locked
    from refimpl.runs.paths import check_name
    from refimpl.runs.resume import steps_outside
    from refimpl.runs.rundir import SavedRun, read_saved_run
    from refimpl.runs.runlog import (
        find_runs,
        is_run_dir,
        read_metrics,
        read_run_config,
        run_dir_damage,
    )
    from refimpl.settings.limits import check_comma_lists, check_empty_paths
    from refimpl.settings.presets import explicit_fields
    from refimpl.settings.record import config_from_record
    from refimpl.settings.train_config import TrainConfig
    from refimpl.settings.warmstart_config import WarmstartCommand, WarmstartConfig
    from refimpl.train import load_config_file, run_training
    from refimpl.warmstart import train_warmstart
except KeyboardInterrupt:
    if __name__ != "__main__" and Path(sys.argv[0]).stem != "refimpl":
        raise
    sys.stderr.write("refimpl: interrupted while starting (nothing was written)\n")
    raise SystemExit(128 + signal.SIGINT) from None

DESCRIPTION = (
    "refimpl: group-relative policy optimisation with token-level credit assignment, on toy "
    "arithmetic, on a CPU. The commands are listed below, one per line; `refimpl COMMAND "
    "--help` lists a command's flags, `refimpl --version` prints the versions."
)


@dataclass
class ListTasks:
    """List the tasks, their knobs and one example each."""


@dataclass
class ListAlgos:
    """List the algorithms and the Config fields settable with --algo-args FIELD=VALUE."""


@dataclass
class ListRuns:
    """List the runs under a runs directory: algorithm, task, seed, steps, last held-out success."""

    path: tyro.conf.Positional[Path | None] = None
    """directory searched for runs, at any depth (compare's runs are one level down; None:
    --runs-dir)"""
    runs_dir: Path = Path("runs")
    """the same directory given as refimpl train takes it; a PATH given as well must agree"""

    def directory(self) -> Path:
        if self.path is not None and self.runs_dir != Path("runs") and self.path != self.runs_dir:
            raise ValueError(
                f"--runs-dir: {self.runs_dir} differs from PATH {self.path}; give one of them"
            )
        return Path(self.path if self.path is not None else self.runs_dir)


@dataclass
class PlotConfig:
    """Redraw the figures of finished (or interrupted) runs."""

    run_dirs: Annotated[
        tyro.conf.Positional[tuple[Path, ...]], tyro.conf.arg(help_behavior_hint="(required)")
    ] = ()
    """run directories (each with config.json and metrics.jsonl); at least one"""
    out: Path | None = None
    """comparison figure path when several runs are given (None: compare.png next to them)"""


COMMANDS: dict[str, type] = {
    "tasks": ListTasks,
    "algos": ListAlgos,
    "warmstart": WarmstartCommand,
    "train": TrainConfig,
    "compare": CompareConfig,
    "runs": ListRuns,
    "plot": PlotConfig,
    "bench-learning": LearningConfig,
    "bench-speed": SpeedConfig,
    "credit": CreditConfig,
}


def _list_tasks() -> None:
    from toy_envs import TASK_NAMES, get_task

    for name in TASK_NAMES:
        task = get_task(name)
        p = task.sample(1, 0)[0]
        knobs = ", ".join(f"{k}={v}" for k, v in task.knobs().items())
        print(f"{name:<15} {p.prompt}{task.reference_solution(p)}    knobs: {knobs}")


def _list_algos() -> None:
    """Each algorithm with its own Config fields; the fields every Config shares
    (``contract.CONFIG_FIELDS``) once, at the top, with GRPO's defaults, and under an algorithm
    only where it sets them otherwise."""
    baseline = algorithms.get(algorithms.BASELINE).Config()
    shared = contract.CONFIG_FIELDS
    print(
        f"Every Config has these fields ({algorithms.BASELINE}'s defaults; an algorithm lists "
        "one again where its default differs):"
    )
    print("         " + ", ".join(f"{f}={getattr(baseline, f)!r}" for f in shared))
    for name in algorithms.NAMES:
        module = algorithms.get(name)
        summary = (module.__doc__ or "").strip().splitlines()[0]
        print(f"{name:<8} {summary}")
        cfg = module.Config()
        fields = ", ".join(
            f"{f.name}={getattr(cfg, f.name)!r}"
            for f in dataclasses.fields(module.Config)
            if f.name not in shared or getattr(cfg, f.name) != getattr(baseline, f.name)
        )
        print(f"         {fields or '(the shared fields only, with the defaults above)'}")


def run_rows(runs_dir: Path) -> list[dict[str, str]]:
    """One row per run under ``runs_dir`` for ``refimpl runs``; a damaged run directory,
    whose config.json or metrics.jsonl cannot be read (a directory in its place, garbage),
    is listed as ``damaged``, naming the file."""
    rows = []
    for d in find_runs(runs_dir, damaged=True):
        damage = run_dir_damage(d)
        if damage is None:
            tc = read_run_config(d)["train_config"]
            try:
                records = read_metrics(d, missing_ok=True)
                steps_outside(records, tc.get("steps"), d / "metrics.jsonl")
                row = _run_row(d, runs_dir, tc, records)
            except ValueError as err:  # garbage, out of order, a directory: the log is damaged
                damage = str(err).replace(str(d / "metrics.jsonl"), "metrics.jsonl", 1)
                damage = damage.replace(str(d / "config.json"), "config.json", 1)
        if damage is not None:
            rows.append(
                {
                    "run": str(d.relative_to(runs_dir)),
                    "algo": "damaged:",
                    "task": damage,
                    "seed": "?",
                    "steps": "?",
                    "end": "?",
                    "held-out greedy": "?",
                }
            )
            continue
        rows.append(row)
    return rows


def _run_row(d: Path, runs_dir: Path, tc: dict, records: list[dict]) -> dict[str, str]:
    """``run_rows``' row of a readable run; ``ValueError`` naming the file and the value
    that a run does not write (a held-out success that is no number, arguments that are no
    list of strings)."""
    last = max((r["step"] for r in records), default=0)
    step = f"{last}/{tc.get('steps', '?')}"
    budget = tc.get("max_sampled_tokens")
    if isinstance(budget, int) and not isinstance(budget, bool) and budget > 0:
        # A token budget ends the run, not --steps: say how far it got in tokens.
        counts = [r.get("sampled_tokens") for r in records]
        sampled = int(max((c for c in counts if isinstance(c, int | float)
                           and not isinstance(c, bool) and math.isfinite(c)), default=0))  # fmt: skip
        step = f"{last} ({sampled:,}/{budget:,} tokens)"
    end = run_end(d, tc, records)
    evals = [(n, r) for n, r in enumerate(records, 1) if "heldout_greedy" in r]
    heldout = "-"
    if evals:
        n, record = evals[-1]
        value = record["heldout_greedy"]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(
                f"{d / 'metrics.jsonl'}: record {n} has heldout_greedy {json.dumps(value)}, "
                "not a number (edited or damaged?)"
            )
        heldout = f"{value:.3f} @ {record['step']}"
    args = {}
    for key in ("algo_args", "task_args"):
        value = tc.get(key) or []
        if not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            raise ValueError(
                f"{d / 'config.json'}: train_config.{key} is {json.dumps(value)}, expected a "
                "list of strings (edited?)"
            )
        args[key] = "".join(" " + v for v in value)
    return {
        "run": str(d.relative_to(runs_dir)),
        "algo": tc["algo"] + args["algo_args"],
        "task": tc["task"] + args["task_args"],
        "seed": str(tc.get("seed", "?")),
        "steps": step,
        "end": end,
        "held-out greedy": heldout,
    }


#: What ``refimpl runs`` says of how a run ended (its "end" column).
RUN_ENDS = {
    "done": "reached its --steps",
    "done: tokens": "reached its --max-sampled-tokens",
    "running": "a process holds its lock now",
    "stopped": "ended before its budget (Ctrl-C, a kill, a non-finite loss): "
    "`refimpl train --resume --name NAME` continues it",
}


def run_end(run_dir: Path, tc: dict, records: list[dict]) -> str:
    """How the run in ``run_dir`` ended, from its log, by the rule the trainer stops on
    (``runs.status.RunBudget``): its last step reached ``steps``, or the completion tokens it
    sampled reached ``max_sampled_tokens``; else it is running (its lock is held) or stopped
    early. A key of ``RUN_ENDS``."""
    last = max(records, key=lambda r: r["step"], default={"step": 0})
    steps, budget = tc.get("steps"), tc.get("max_sampled_tokens")
    if isinstance(steps, int) and last["step"] >= steps:
        return "done"
    tokens = last.get("sampled_tokens")
    if isinstance(budget, int) and isinstance(tokens, (int, float)) and tokens >= budget:
        return "done: tokens"
    return "running" if is_locked(run_dir) else "stopped"


def train_summary(run_dir: Path, cfg: TrainConfig) -> str:
    """What ``refimpl train`` prints when its run has ended: held-out greedy success at the
    log's first evaluation (step 0, before any RL) and at its last (the end), where the
    figures are, and the run directory (last, on a line of its own)."""
    evals = [r for r in read_metrics(run_dir, missing_ok=True) if "heldout_greedy" in r]
    if evals:
        first, last = evals[0], evals[-1]
        a, b = first["heldout_greedy"], last["heldout_greedy"]
        success = (
            f"held-out greedy success on {cfg.eval_problems} problems: {a:.3f} at step "
            f"{first['step']} → {b:.3f} at step {last['step']} ({b - a:+.3f})"
        )
    else:
        success = "held-out greedy success: not evaluated (no evaluation in metrics.jsonl)"
    figure = Path(run_dir) / "curves.png"
    figures = (
        f"figures: {figure}"
        if cfg.plot and figure.is_file()
        else f"figures: none (--no-plot); `refimpl plot {run_dir}` draws them"
    )
    return f"{success}\n{figures}\nrun directory: {run_dir}"


def _list_runs(cfg: ListRuns) -> None:
    directory = cfg.directory()
    if not directory.is_dir():
        raise ValueError(f"runs_dir: {directory} is not a directory")
    rows = run_rows(directory)
    if not rows:
        print(f"no runs under {directory}")
        return
    cols = list(rows[0])
    whole = [r for r in rows if r["algo"] != "damaged:"]  # a damage note spans the columns
    width = {c: max(len(c), *(len(r[c]) for r in whole or rows)) for c in cols}
    print("  ".join(c.ljust(width[c]) for c in cols).rstrip())
    for r in rows:
        if r["algo"] == "damaged:":
            print(f"{r['run'].ljust(width['run'])}  damaged: {r['task']}")
        else:
            print("  ".join(r[c].ljust(width[c]) for c in cols).rstrip())
    for end in sorted({r["end"] for r in whole} - {"done"}):
        print(f"{end}: {RUN_ENDS[end]}")
    damaged = len(rows) - len(whole)
    if damaged:
        print(
            f"{damaged} damaged run director{'y' if damaged == 1 else 'ies'}: restore the file "
            "named, or `refimpl train --overwrite --name NAME` starts one again"
        )


def _plot(cfg: PlotConfig) -> None:
    from refimpl.plots import check_metric_values, plot_compare, plot_run, refuse_link, run_info

    if not cfg.run_dirs:
        raise ValueError("run_dirs: expected at least one run directory, e.g. refimpl plot runs/x")
    for d in cfg.run_dirs:  # every one checked before any figure is written
        if not is_run_dir(d):
            read_run_config(d)  # raises, naming the file and what is wrong with it
        if not (Path(d) / "metrics.jsonl").exists():
            raise ValueError(f"run_dirs: {d} has no metrics.jsonl")
        run_info(d)  # its settings as a figure reads them
        check_metric_values(d)  # every value a number
        refuse_link(Path(d) / "curves.png")
    if len(cfg.run_dirs) > 1:
        refuse_link(cfg.out or Path(cfg.run_dirs[0]).parent / "compare.png")
    for d in cfg.run_dirs:
        print(plot_run(d))
    if len(cfg.run_dirs) > 1:
        out = cfg.out or Path(cfg.run_dirs[0]).parent / "compare.png"
        print(plot_compare(cfg.run_dirs, out))


# ---------------------------------------------------------------------------------------------
# Parsing: tyro's errors on one line; --resume and --config take defaults from a config.json.
# ---------------------------------------------------------------------------------------------


def help_text(doc: str) -> str:
    """A docstring as ``--help`` prints it: the lines of a paragraph joined into one (tyro
    keeps a break before every indented continuation line, so a help text broke
    mid-sentence), a list item (``- ``, ``* ``, ``1. ``) on a line of its own, and reST's
    ``code`` shown as `code`."""
    paragraphs = []
    for paragraph in re.split(r"\n[ \t]*\n", doc.strip("\n")):
        lines = [line.strip() for line in paragraph.splitlines() if line.strip()]
        text = lines[0] if lines else ""
        for line in lines[1:]:
            text += ("\n" if re.match(r"([-*•]|\d+\.) ", line) else " ") + line
        paragraphs.append(text)
    return re.sub(r"``(.+?)``", r"`\1`", "\n\n".join(paragraphs))


@contextlib.contextmanager
def _plain_help():
    """Every help text tyro formats passes through ``help_text`` (tyro joins a docstring's
    lines with ``_strings.remove_single_line_breaks``, the one place all of them pass)."""
    from tyro import _strings

    original = _strings.remove_single_line_breaks
    _strings.remove_single_line_breaks = help_text
    try:
        yield
    finally:
        _strings.remove_single_line_breaks = original


def _parse(parser, args: list[str], **kwargs):
    """``tyro.cli`` with its error box (bad type, unknown flag, bad choice) turned into one
    line ``refimpl: error: ...`` and exit code 2; help and completion pass through, with
    the help texts of ``help_text``."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), _plain_help():
            return parser(args=args, **kwargs)
    except SystemExit as exit_:
        text = err.getvalue()
        if exit_.code not in (0, None) and text:
            sys.stderr.write(_one_line_error(text) + "\n")
        elif text:
            sys.stderr.write(text)
        raise


def _one_line_error(text: str) -> str:
    """The message inside tyro's error box, on one line."""
    body: list[str] = []
    for raw in text.splitlines():
        if raw.strip().startswith("╭"):  # the box's title: the error's kind
            continue
        line = raw.strip().strip("│╭╮╰╯─").strip()
        if set(raw.strip()) <= set("│─ ") and "─" in raw:  # the box's inner rule
            break
        if not line or line.startswith(("For full helptext", "Arguments similar")):
            break
        body.append(line)
    message = re.sub(r"\s+", " ", " ".join(body)).strip()
    return f"refimpl: error: {message or text.strip()}"


def _train_defaults(first: TrainConfig, args: list[str]) -> tuple[TrainConfig, SavedRun | None]:
    """With ``--resume`` or ``--config``, parse the flags again over the saved settings, so
    that a flag not typed keeps the run's value (the run directory is the source of truth).
    With ``--resume``, also the run's config.json as read here, once (``preflight`` takes
    it rather than reading it again)."""
    if first.resume and first.config is not None:
        raise ValueError(
            "--config: cannot be combined with --resume (a resumed run keeps the settings of its "
            "own config.json)"
        )
    saved = None
    if first.resume:
        run_dir = first.run_dir
        check_name(first.name, Path(first.runs_dir))
        saved = read_saved_run(run_dir)  # a damaged run: the message says how to recover it
        base = config_from_record(saved.config, f"--resume: {run_dir / 'config.json'}")
        # The run is where it was found now, whatever its config.json says.
        base = dataclasses.replace(base, runs_dir=first.runs_dir, name=first.name or run_dir.name)
    elif first.config is not None:
        base = load_config_file(first.config)
    else:
        return first, None
    cfg = _parse(tyro.cli, args, f=TrainConfig, default=base, prog="refimpl train")
    return cfg, saved


@contextlib.contextmanager
def _plain_warnings():
    """Warnings as ``refimpl: warning: ...`` lines, not file:line: Category: ... source."""
    previous = warnings.formatwarning
    warnings.formatwarning = lambda message, *a, **k: f"refimpl: warning: {message}\n"
    try:
        yield
    finally:
        warnings.formatwarning = previous


def version_line() -> str:
    from refimpl.runs.runlog import versions

    v = versions()
    extra = f", git {v['git_commit']}" if "git_commit" in v else ""
    return f"refimpl {v['refimpl']} (torch {v['torch']}, numpy {v['numpy']}, python {v['python']}{extra})"


def main(argv: list[str] | None = None) -> int:
    """``refimpl ARGV``: the exit code (0, 1 or 2 for an error, 128 + the signal when
    interrupted: Ctrl-C while the flags are parsed too, before anything is written)."""
    try:
        code = _main(argv)
        # What is left of the output reaches its reader now, or meets a closed pipe here
        # (`refimpl algos | head -1`), not at the interpreter's exit, where no handler is.
        sys.stdout.flush()
        return code
    except KeyboardInterrupt:  # outside a command (which reports its own interruption)
        print("refimpl: interrupted while starting (nothing was written)", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return _closed_stdout()


def _closed_stdout() -> int:
    """The reader of stdout went away (``refimpl credit --help | head``): what is left of
    the output is dropped, quietly, as other Unix tools do (Python's exit would otherwise
    try to flush stdout again and print a traceback); exit code 128 + SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is no file descriptor (captured): nothing to flush
        pass
    return 128 + int(getattr(signal, "SIGPIPE", 13))


def _main(argv: list[str] | None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] in (["--version"], ["-V"]):
        print(version_line())
        return 0
    try:
        cmd = _parse(
            tyro.extras.subcommand_cli_from_dict,
            args,
            subcommands=COMMANDS,
            description=DESCRIPTION,
            prog="refimpl",
        )
    except SystemExit as exit_:
        return int(exit_.code or 0)
    with _plain_warnings():
        try:
            check_empty_paths(type(cmd), args)
            check_comma_lists(type(cmd), args)
            if isinstance(cmd, ListTasks):
                _list_tasks()
            elif isinstance(cmd, ListAlgos):
                _list_algos()
            elif isinstance(cmd, ListRuns):
                _list_runs(cmd)
            elif isinstance(cmd, WarmstartConfig):
                train_warmstart(cmd)
            elif isinstance(cmd, TrainConfig):
                try:
                    cmd, saved = _train_defaults(cmd, args[args.index("train") + 1 :])
                except SystemExit as exit_:
                    return int(exit_.code or 0)
                print(train_summary(run_training(cmd, saved), cmd))
            elif isinstance(cmd, CompareConfig):
                typed = explicit_fields(args[args.index("compare") + 1 :], CompareConfig)
                dirs, figure, table = compare(cmd, typed)  # the preset leaves typed flags alone
                print(table)
                print(f"figure: {figure}")
            elif isinstance(cmd, PlotConfig):
                _plot(cmd)
            elif isinstance(cmd, LearningConfig):
                from refimpl.bench.learning import main as bench_learning

                typed = explicit_fields(args[args.index("bench-learning") + 1 :], LearningConfig)
                bench_learning(cmd, typed)  # the preset leaves typed flags alone
            elif isinstance(cmd, SpeedConfig):
                from refimpl.bench.speed import main as bench_speed

                bench_speed(cmd)
            elif isinstance(cmd, CreditConfig):
                from refimpl.bench.credit import main as credit

                typed = explicit_fields(args[args.index("credit") + 1 :], CreditConfig)
                credit(cmd, typed)  # the preset leaves typed flags alone, as compare's
        except (CheckpointError, NonFiniteLossError) as err:
            print(f"refimpl: error: {err}", file=sys.stderr)
            return 1
        except (ValueError, FileExistsError) as err:
            print(f"refimpl: error: {err}", file=sys.stderr)
            return 2
        except BrokenPipeError:  # the reader of stdout went away: no error, see main
            raise
        except OSError as err:  # a read-only directory, a full disk, ...
            where = f": {err.filename}" if err.filename else ""
            print(f"refimpl: error: {err.strerror or err}{where}", file=sys.stderr)
            return 1
        except KeyboardInterrupt as err:
            if isinstance(cmd, CompareConfig):
                print(
                    "refimpl: interrupted: the runs in progress stop after a checkpoint; the same command "
                    "with --train.resume continues them",
                    file=sys.stderr,
                )
            elif not getattr(err, "signum", None):  # a run prints its own resume command
                print("refimpl: interrupted", file=sys.stderr)
            return 128 + int(getattr(err, "signum", None) or signal.SIGINT)
    return 0


if __name__ == "__main__":
    sys.exit(main())
