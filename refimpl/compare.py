"""Run several algorithms (× seeds) on the same task and draw them in one figure.

The runs are independent, so they go to a small pool of worker processes, one torch thread
each: on a 2-core machine two single-threaded runs make more steps per second together than
one run on both cores (``docs/benchmarks.md`` has the measured step rates). The warm start is trained (or
loaded) once, before the workers start, so they all share the cached base model.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import multiprocessing as mp
import os
import signal
import threading
import time
import warnings
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import tyro

from refimpl import algorithms
from refimpl.plots import format_table, plot_compare, summary_table
from refimpl.problem_streams import SEED_MAX
from refimpl.runs.paths import check_name, check_runs_dir
from refimpl.runs.progress import progress
from refimpl.runs.runlog import is_run_dir, open_no_follow, read_metrics
from refimpl.runs.stop import Interrupted, StopRequest
from refimpl.settings import presets
from refimpl.settings.limits import comma_items, parse_seeds
from refimpl.settings.plan import run_warmstart
from refimpl.settings.train_config import AlgoName, TrainConfig
from refimpl.train import preflight, run_training
from refimpl.warmstart import train_warmstart


@dataclass
class CompareTrainConfig(TrainConfig):
    """The settings every run of a comparison shares. Compare sets each run's algorithm,
    seed, name, runs directory and progress bar itself, so those are not flags here."""

    algo: tyro.conf.Suppress[AlgoName] = algorithms.BASELINE
    seed: tyro.conf.Suppress[int] = 0
    runs_dir: tyro.conf.Suppress[Path] = Path("runs")
    name: tyro.conf.Suppress[str | None] = None
    progress: tyro.conf.Suppress[bool] = True
    config: tyro.conf.Suppress[Path | None] = None


@dataclass
class CompareConfig:
    """Train each algorithm with each seed on one task; one comparison figure and table."""

    algos: str = "grpo,dapo,gtpo,tepo"
    """comma-separated algorithm names (`refimpl algos` lists them)"""
    seeds: str = "0"
    """comma-separated RL seeds"""
    name: str = "compare"
    """comparison name: runs go to <runs_dir>/<name>/<algo>-s<seed>"""
    runs_dir: Path | None = None
    """parent directory of the comparison (None: --train's, runs/)"""
    workers: int = 0
    """parallel runs (0: one per CPU core, at most 4)"""
    target: float = 0.5
    """held-out greedy success whose first-reach step the table reports"""
    preset: presets.PresetName = "default"
    """a named regime from preset (default, onpolicy, collapse, longchain: docs/benchmarks.md); it sets the fields
    you leave at their defaults, so explicit flags win"""
    train: CompareTrainConfig = field(default_factory=CompareTrainConfig)
    """settings shared by every run (--train.steps, --train.lr, ...); --train.resume continues
    the runs that exist and starts the others"""

    @property
    def root(self) -> Path:
        return Path(self.runs_dir if self.runs_dir is not None else self.train.runs_dir) / self.name

    def algo_list(self) -> list[str]:
        names = comma_items(self.algos, "--algos")
        if not names:
            raise ValueError(f"--algos: expected a comma-separated list of {algorithms.NAMES}")
        for a in names:
            algorithms.get(a)  # ValueError listing the valid names
        _refuse_duplicates([algorithms.get(a).NAME for a in names], names, "--algos")
        return names

    def seed_list(self) -> list[int]:
        seeds = parse_seeds(self.seeds)
        if not seeds or min(seeds) < 0 or max(seeds) > SEED_MAX:
            raise ValueError(
                f"--seeds: expected comma-separated integers in [0, {SEED_MAX}], got {self.seeds!r}"
            )
        _refuse_duplicates(seeds, seeds, "--seeds")
        return seeds

    def check(self) -> None:
        """The comparison's own flags (each run's are checked by ``preflight``)."""
        if self.workers < 0:
            raise ValueError(
                f"--workers: expected an integer ≥ 0 (0: one per core), got {self.workers}"
            )
        cores = os.cpu_count() or 1
        if self.workers > cores:
            raise ValueError(
                f"--workers: expected at most {cores} (the CPU cores of this machine: each "
                f"worker is a process training one run on one thread), got {self.workers}"
            )
        check_name(self.name, self.root.parent)
        check_runs_dir(self.root.parent)
        if not 0 <= self.target <= 1:
            raise ValueError(f"--target: expected a success rate in [0, 1], got {self.target}")
        if is_run_dir(self.root):
            raise ValueError(f"--name: {self.root} is a single run, not a comparison")


def _refuse_duplicates(keys: list, given: list, flag: str) -> None:
    """``ValueError`` naming ``flag`` when two items of ``given`` are the same (same
    ``keys``): their runs would share one directory, and the second would fail only after
    the first had trained."""
    for i, key in enumerate(keys):
        if key in keys[:i]:
            first = given[keys.index(key)]
            raise ValueError(
                f"{flag}: {first} is given twice ({first!r} and {given[i]!r}); keep one"
            )


# Signals. The workers run in a process group of their own, so a terminal's Ctrl-C (sent to
# its foreground group) reaches the parent alone, and the parent forwards every SIGINT and
# SIGTERM it gets to each worker, once: ``kill -INT`` or ``kill -TERM`` of the parent's pid
# stops the runs exactly as Ctrl-C does (after a whole step and its checkpoint; a second one
# at once). A worker whose parent has died (``kill -9``) notices within ``PARENT_POLL_S``
# seconds and stops the same way, so no orphan keeps training and holding a run's lock.

#: How often a worker looks whether its parent is still alive, in seconds.
PARENT_POLL_S = 1.0

#: In a worker process: the parent's event "stop, do not start another run" (Ctrl-C).
_STOP = None
#: In a worker process: whether a run is in progress, and the signal that asked to stop.
_IN_RUN = False
_SIGNALLED: int | None = None


def _init_worker(stop) -> None:
    global _STOP
    _STOP = stop
    if hasattr(os, "setpgrp"):
        os.setpgrp()  # out of the terminal's group: its Ctrl-C reaches the parent, once
    for sig in StopRequest.SIGNALS:
        if signal.getsignal(sig) is not signal.SIG_IGN:  # started immune to it: stay so
            signal.signal(sig, _worker_signal)
    parent = os.getppid()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()


def _worker_signal(signum, frame) -> None:
    """A stop between runs: no run starts after it; one starting up (before its own
    ``StopRequest`` takes the signals) stops there, as Ctrl-C would stop it."""
    global _SIGNALLED
    _SIGNALLED = signum
    if _IN_RUN:
        raise KeyboardInterrupt


def _watch_parent(parent: int) -> None:
    """When the parent dies, stop as a signal from it would (the run in progress ends after
    its step, with a checkpoint), then end the process once no run is in progress."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)
    os.kill(os.getpid(), signal.SIGTERM)
    while _IN_RUN:
        time.sleep(PARENT_POLL_S)
    os._exit(128 + signal.SIGTERM)


def _worker(cfg: TrainConfig, quiet: bool = False) -> str | None:
    import torch

    global _IN_RUN
    _IN_RUN = True  # before the checks: a signal from here on stops the run
    try:
        if _SIGNALLED is not None or (_STOP is not None and _STOP.is_set()):
            return None  # stopped before this run began: --train.resume starts it later
        torch.set_num_threads(1)
        return str(_train_one(cfg, quiet))
    finally:
        _IN_RUN = False


class _ForwardSignals:
    """In the parent, while its workers run: SIGINT and SIGTERM set ``stop`` (no run starts
    after them), are sent on to every worker, and raise ``Interrupted`` here. A signal the
    parent was started immune to (SIG_IGN) stays ignored; outside the main thread, nothing
    changes."""

    def __init__(self, stop) -> None:
        self.stop, self.pool, self._previous = stop, None, {}

    def __enter__(self) -> _ForwardSignals:
        if threading.current_thread() is threading.main_thread():
            for sig in StopRequest.SIGNALS:
                if signal.getsignal(sig) is not signal.SIG_IGN:
                    self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, frame) -> None:
        self.stop.set()
        # The executor's own table of its processes: the one record of the workers' pids.
        for pid in list(getattr(self.pool, "_processes", None) or {}):
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass
        raise Interrupted(f"compare stopped by signal {signum}", signum)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _train_one(cfg: TrainConfig, quiet: bool) -> Path:
    """One run; with ``quiet``, what it prints to stdout (the line naming its base model) is
    dropped: the caller announced the base model every run starts from, once. Its progress,
    warnings and errors are on stderr and stay."""
    if not quiet:
        return run_training(cfg)
    with contextlib.redirect_stdout(io.StringIO()):
        return run_training(cfg)


def run_in_workers(
    runs: list[TrainConfig],
    workers: int,
    on_poll: Callable[[int], None] = lambda n: None,
    quiet: bool = False,
) -> None:
    """Train every config in ``runs``: ``workers`` at a time in spawned processes with one
    torch thread each, or one after another in this process when ``workers <= 1``.

    ``on_poll(number_finished)`` is called about once a second and whenever a run ends (for
    progress bars). The first run that fails cancels those not yet started and its exception
    is raised here. ``quiet``: the runs print nothing to stdout (``_train_one``).
    """
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 0:
        raise ValueError(
            f"workers: expected an integer ≥ 0 (0 or 1: one at a time), got {workers!r}"
        )
    if workers <= 1 or len(runs) <= 1:
        for finished, r in enumerate(runs, 1):
            _train_one(r, quiet)
            on_poll(finished)
        return
    context = mp.get_context("spawn")
    stop = context.Event()
    # The signals are forwarded until the pool has shut down (its exit waits for the runs in
    # progress to write their checkpoints; a second signal then stops them at once).
    with (
        _ForwardSignals(stop) as forward,
        ProcessPoolExecutor(
            workers, mp_context=context, initializer=_init_worker, initargs=(stop,)
        ) as pool,
    ):
        forward.pool = pool
        pending = {pool.submit(_worker, r, quiet) for r in runs}
        try:
            while pending:
                done, pending = wait(pending, timeout=1.0, return_when=FIRST_EXCEPTION)
                for future in done:
                    if future.exception() is not None:
                        raise future.exception()  # type: ignore[misc]
                on_poll(len(runs) - len(pending))
        except BaseException:
            # A failed run or Ctrl-C: runs not started yet never start (one started after
            # Ctrl-C would not see it; the executor may have handed it to a worker already,
            # hence the event); the running ones stop after a checkpoint on Ctrl-C.
            stop.set()
            for p in pending:
                p.cancel()
            raise


def compare(
    cfg: CompareConfig, explicit: frozenset[str] | None = None
) -> tuple[list[Path], Path, str]:
    """Run every (algorithm, seed); return the run directories, the figure and the table.

    ``explicit``: the fields the command line set (``presets.explicit_fields``), which the
    preset leaves alone; None: the fields that differ from their defaults."""
    preset = presets.get_preset(cfg.preset)
    cfg = presets.fill_defaults(cfg, preset.compare, explicit)
    train = presets.fill_defaults(cfg.train, preset.train, explicit, prefix="train.")
    cfg = dataclasses.replace(cfg, train=train)
    algos, seeds = cfg.algo_list(), cfg.seed_list()
    cfg.check()
    root = cfg.root
    # The warm-start cache follows --runs-dir (not the comparison's own folder), unless
    # --train.warmstart.runs-dir says where it is.
    ws = cfg.train.warmstart
    ws = dataclasses.replace(ws, runs_dir=ws.runs_dir if ws.runs_dir is not None else root.parent)
    runs = []
    for s in seeds:
        for a in algos:
            r = dataclasses.replace(
                cfg.train,
                algo=a,
                seed=s,
                runs_dir=root,
                name=f"{a}-s{s}",
                progress=False,
                warmstart=ws,
            )
            # --train.resume continues the runs that exist and starts the others.
            runs.append(dataclasses.replace(r, resume=r.resume and is_run_dir(r.run_dir)))
    for r in runs:  # fail fast, before anything is written or trained: flags, run directories
        try:
            preflight(r)
        except FileExistsError as err:
            if "damaged" in str(err):  # resuming it cannot work: say what can
                raise FileExistsError(
                    str(err).replace("--overwrite", "--train.overwrite")
                ) from None
            raise FileExistsError(
                f"{r.run_dir} exists: pass --train.resume or "
                f"--train.overwrite, or choose another --name"
            ) from None
        except ValueError as err:  # the run's flags are --train.* here
            message = str(err)
            if message.startswith("--"):
                raise type(err)("--train." + message[2:]) from None
            raise
    train_warmstart(run_warmstart(runs[0]), prefix="--train.warmstart.")

    workers = cfg.workers or min(4, os.cpu_count() or 1, len(runs))
    if workers <= 1:  # one run at a time in this process: show each run's own progress bar
        runs = [dataclasses.replace(r, progress=True) for r in runs]
    total = sum(r.steps for r in runs)
    start = time.perf_counter()
    with progress(total, f"compare {','.join(algos)}") as bar:

        def show_logged_steps(_finished: int) -> None:
            bar.update(max(0, sum(_logged_steps(r.run_dir) for r in runs) - bar.n))

        # The base model was announced above, once: the runs do not repeat it.
        run_in_workers(runs, workers, show_logged_steps, quiet=True)
    elapsed = time.perf_counter() - start
    dirs = [r.run_dir for r in runs]
    figure = plot_compare(dirs, root / "compare.png")
    table = format_table(summary_table(dirs, cfg.target), cfg.target)
    with open_no_follow(root / "summary.txt", "w") as f:
        f.write(table + f"\n\nwall time: {elapsed:.0f} s\n")
    return dirs, figure, table


def _logged_steps(run_dir: Path) -> int:
    """Training steps logged so far (one line per step after the step-0 evaluation)."""
    try:
        with warnings.catch_warnings():  # a line being written is not torn: read it next poll
            warnings.simplefilter("ignore")
            return max((r["step"] for r in read_metrics(run_dir, missing_ok=True)), default=0)
    except ValueError:
        return 0
