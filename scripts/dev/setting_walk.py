"""The walk of one setting from ``refimpl train``: how far a reader follows ``cfg`` through the
code, as counts that another clone can reproduce.

    python scripts/dev/setting_walk.py            # a new run, its resume, a new run whose
                                                  # base model is trained: the counts
    python scripts/dev/setting_walk.py --edges    # also every call edge, classified
    python scripts/dev/setting_walk.py --stops    # also the stops, entry to step, in order

Method
------
A tiny run (``refimpl train --task countdown`` at the default warm start, whose base model is
the shipped one, 2 steps; then ``--resume`` of it to 3 steps; then the same run with a 1-layer
warm start, which no shipped model matches, so its base model is trained first) runs under
``sys.setprofile``. A *call that carries the setting* is a call into a
function defined in ``refimpl/`` one of whose arguments is a settings object, or an object
that holds one (an attribute, a field of a named tuple, at most two levels down: a
``Trainer``, a resolved plan). The settings objects are the command's ``TrainConfig`` and
what is made of it: its warm start's settings (``WarmstartConfig``, ``ModelSize``) and the
algorithm's ``Config`` (a ``contract.AlgorithmConfig``). Its *caller* is the nearest frame up the stack
whose code is in ``refimpl/``; a *module* is the function's ``__name__`` module.

Values are followed by identity, except plain ones and the empty tuple (one object in the
interpreter, in a type hint's arguments as in a setting's ``()``: following it once made
the contract's type checks look like stops). Settings made from a record on the disk (a
shipped model's manifest entry, a cache's state.json: ``FROM_RECORD``) are that model's, not
the run's, and are not followed. A file's "entries" are the stops whose caller is a function
in another file: the calls that bring a reader into the file from elsewhere (a function's
calls to its own file's functions are not entries, and neither is a return to the caller).
"Entries, returns counted" also counts a stop whose previous stop is in another file: a
return to the file, to call another of its functions, is then an entry too (a stricter
count, printed beside the first; ``tests/test_setting_walk.py`` bounds both).

Each distinct edge (caller function → callee function) is counted once, at its first
occurrence, so that the counts do not grow with the number of steps, and is classified as

    stay     the callee's module is the caller's
    climb    the callee's module is above the caller in the call chain (on the stack of
             refimpl frames, the caller's own module excluded): a call back up
    return   the callee's module was visited earlier in the walk, but is not on the stack
    descent  a module seen for the first time

"modules" is the number of distinct modules the setting visits. "Stops" (the walk "from the
trainer's entry to the step") are the distinct functions the setting enters from
``refimpl.train.run_training`` up to and including the first ``Trainer.train_step``, in how many
files (modules, ``refimpl/train.py`` counted). Fewer climbs and returns is
a walk a reader can follow top to bottom. Each walk is also split at the first call of
``Trainer.train_step``: "setup" (from the command to the first step: checking and resolving
the settings, the warm start, the run directory) and "steps" (the edges first seen after it).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
from pathlib import Path

import refimpl

PACKAGE = str(Path(refimpl.__file__).resolve().parent)

#: A new run at the default warm start: its base model is the shipped one (a learner's first
#: ``refimpl train``), on the smallest batch that takes a step.
TINY = [
    "--task", "countdown", "--algo", "grpo", "--steps", "2", "--prompts-per-step", "2",
    "--group-size", "2", "--minibatches", "1", "--eval-problems", "4", "--eval-samples", "2",
    "--eval-every", "1", "--probe-every", "1", "--probe-prompts", "1", "--diag-every", "1",
    "--checkpoint-every", "1", "--threads", "1", "--no-progress", "--no-plot",
]  # fmt: skip

#: The same run with a warm start no shipped model matches: its base model is trained first
#: (a 1-layer model, 5 steps), so the walk goes through the base model's training too.
TRAINED_BASE = [
    "--warmstart.steps", "5", "--warmstart.eval-problems", "4",
    "--warmstart.model.n-layer", "1", "--warmstart.model.n-embd", "32",
    "--warmstart.model.n-head", "2",
]  # fmt: skip


#: The trainer's entry: the walk "from the trainer's entry to the step" starts at its call.
ENTRY = "refimpl.train.run_training"

SETTINGS = {"TrainConfig", "WarmstartConfig", "RunWarmstartConfig", "ModelSize"}

#: Functions that make settings objects from a record on the disk (a shipped model's manifest
#: entry, a cache's state.json): what they return is that model's settings, not the run's,
#: and the walk does not follow it (its identity is computed to be compared with the run's).
FROM_RECORD = {"refimpl.settings.warmstart_config.warmstart_from_record"}


def _is_setting(value) -> bool:
    names = {c.__name__ for c in type(value).__mro__}
    return bool(names & SETTINGS) or "AlgorithmConfig" in names


def _carries(value, depth: int = 2) -> bool:
    """``value`` is a settings object or holds one ``depth`` levels down."""
    if _is_setting(value):
        return True
    if depth == 0 or isinstance(value, (str, bytes, int, float, Path, type)) or value is None:
        return False
    try:
        inner = vars(value).values()
    except TypeError:
        inner = getattr(value, "_asdict", lambda: {})().values()
    return any(_carries(v, depth - 1) for v in inner)


def _in_package(code) -> bool:
    return code.co_filename.startswith(PACKAGE)


#: Values that are not followed by identity: interned or shared by unrelated code.
PLAIN = (str, bytes, int, float, bool, type(None), type)


def _plain(value) -> bool:
    """Not followed by identity: a plain value, or an empty tuple or frozenset (one object
    that every empty one is, in a type hint's arguments as in a setting's ``()``)."""
    empty = isinstance(value, (tuple, frozenset)) and not value
    return isinstance(value, PLAIN) or empty


def _is_record(value) -> bool:
    """A value a function hands on as data, which the walk follows when a stop returns it: a
    dict, list, tuple (named ones too), set, ``Path`` or dataclass instance; not a model, a
    tensor or an object with behaviour of its own (a task, an observer), where the design
    says a setting's path ends."""
    import dataclasses

    if isinstance(value, (dict, list, tuple, set, frozenset, Path)):
        return not any(type(v).__module__.startswith("torch") for v in _items(value))
    # a dataclass of ours (a task is toy_envs' object: the step's, not the settings')
    is_ours = type(value).__module__.startswith("refimpl")
    return is_ours and dataclasses.is_dataclass(value) and not isinstance(value, type)


def _is_torch(value) -> bool:
    """A model, a tensor, an optimizer, a device: what the settings are turned into, not
    a setting (the walk follows no value into them, whatever they hold)."""
    return any(c.__module__.startswith("torch") for c in type(value).__mro__)


def _items(value) -> list:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return list(value)
    return []


class Walk:
    def __init__(self) -> None:
        self.edges: dict[tuple[str, str], str] = {}
        self.visited: set[str] = set()
        self.root: str | None = None
        self.module_of: dict[str, str] = {}
        self.setup_edges: int | None = None  # edges seen before the first train_step
        self.entry_edges: int | None = None  # edges seen before the trainer's entry, train()
        # The walk followed value by value: every entry of a function into which a followed
        # value goes, from the trainer's entry to the first step, in order.
        self.path: list[tuple[str, str]] = []  # (module, qualname), every entry counted
        self.callers: list[str | None] = []  # the module of each path stop's caller
        self.following = False  # between the trainer's entry and the first step
        self.followed: dict[int, object] = {}  # id → the value (kept alive: ids stay unique)
        self.stop_frames: set[int] = set()  # frames of stops: their returns are followed
        self.seen: set[tuple[int, str]] = set()  # (caller frame, callee) already counted
        self.foreign: dict[int, object] = {}  # settings read from a record: not the run's
        self.record_frames: set[int] = set()  # frames of FROM_RECORD functions

    def _follow(self, value) -> None:
        if _plain(value) or id(value) in self.followed:
            return
        self.followed[id(value)] = value
        for v in _items(value):  # a record's parts are values too (a tuple of results)
            if _is_record(v):
                self._follow(v)

    def _carries_value(self, value, depth: int = 2) -> bool:
        """``value`` is a settings object, a followed value, or holds one ``depth`` levels
        down (an attribute, a named tuple's field, a record's item)."""
        if _plain(value) or _is_torch(value) or id(value) in self.foreign:
            # the walk ends at the model (its passes are the step's), and another model's
            # settings are not the run's
            return False
        if _is_setting(value):
            for v in vars(value).values():  # its fields are the setting's values
                self._follow(v)
            return True
        if id(value) in self.followed:
            return True
        if depth == 0:
            return False
        try:
            inner = list(vars(value).values())
        except TypeError:
            inner = list(getattr(value, "_asdict", lambda: {})().values()) or _items(value)
        return any(self._carries_value(v, depth - 1) for v in inner)

    def profile(self, frame, event, arg) -> None:
        if event == "return" and id(frame) in self.record_frames:
            self.record_frames.discard(id(frame))
            if _is_setting(arg):  # a warm start's settings, and its ModelSize
                for value in (arg, *vars(arg).values()):
                    if not _plain(value):
                        self.foreign[id(value)] = value
        if event == "return":
            if id(frame) in self.stop_frames:
                self.stop_frames.discard(id(frame))
                if self.following and _is_record(arg):
                    self._follow(arg)
            return
        if event != "call" or not _in_package(frame.f_code):
            return
        code = frame.f_code
        if self.setup_edges is None and code.co_name == "train_step":
            self.setup_edges = len(self.edges)
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        callee_mod = frame.f_globals.get("__name__", "?")
        callee = f"{callee_mod}.{code.co_qualname}"
        if callee == ENTRY and not self.path:
            self.following = True
        if callee in FROM_RECORD:
            self.record_frames.add(id(frame))
        if self.following:
            if any(self._carries_value(frame.f_locals.get(n)) for n in names):
                self.stop_frames.add(id(frame))
                caller = frame.f_back
                while caller is not None and (
                    not _in_package(caller.f_code) or caller.f_code.co_name.startswith("<")
                ):  # a comprehension is its function's
                    caller = caller.f_back
                # one entry per call site's activation: a recursion, or a loop calling the
                # same function again, is read once
                key = (id(caller), callee)
                if caller is None or (caller.f_code is not code and key not in self.seen):
                    self.seen.add(key)
                    self.path.append((callee_mod, code.co_qualname))
                    self.callers.append(None if caller is None else caller.f_globals["__name__"])
            if code.co_name == "train_step":
                self.following = False
        if not any(_carries(frame.f_locals.get(n)) for n in names):
            return
        stack = []  # (module, qualname) of the refimpl frames above, nearest first
        f = frame.f_back
        while f is not None:
            if _in_package(f.f_code):
                stack.append((f.f_globals.get("__name__", "?"), f.f_code.co_qualname))
            f = f.f_back
        if self.entry_edges is None and callee == ENTRY:
            self.entry_edges = len(self.edges)
        if not stack:  # the command itself: where the walk starts
            self.root = self.root or callee
            self.visited.add(callee_mod)
            return
        caller_mod, caller_name = stack[0]
        self.visited.add(caller_mod)
        key = (f"{caller_mod}.{caller_name}", callee)
        if key in self.edges:
            return
        above = {m for m, _ in stack[1:]} - {caller_mod}
        if callee_mod == caller_mod:
            kind = "stay"
        elif callee_mod in above:
            kind = "climb"
        elif callee_mod in self.visited:
            kind = "return"
        else:
            kind = "descent"
        self.visited.add(callee_mod)
        self.edges[key] = kind
        self.module_of[callee] = callee_mod

    def path_stops(self) -> list[str]:
        """The walk followed value by value: every entry of a function a followed value goes
        into, from the trainer's entry to the first ``Trainer.train_step``, in order."""
        return [f"{module}.{name}" for module, name in self.path]

    def entries(self) -> dict[str, int]:
        """How many times the value-by-value walk enters each file (module) from another: a
        stop whose caller is a function in another file (a file's own calls to its
        functions, and the returns to it, are not entries). Every file of the walk has at
        least one (the entry's file: its call from the command)."""
        out: dict[str, int] = {}
        for (module, _), caller in zip(self.path, self.callers):
            out.setdefault(module, 0)
            if caller != module:
                out[module] += 1
        return out

    def entries_with_returns(self) -> dict[str, int]:
        """The stricter count: a stop whose previous stop was in another file is an entry, so
        a return to a file, to call another of its functions, counts too."""
        out: dict[str, int] = {}
        previous = None
        for module, _ in self.path:
            if module != previous:
                out[module] = out.get(module, 0) + 1
            previous = module
        return out

    def stop_list(self) -> list[str]:
        """The stops from the trainer's entry to the step, in the order they are first entered."""
        edges = list(self.edges)[self.entry_edges : self.setup_edges + 1]
        return list(dict.fromkeys(callee for _, callee in edges))

    def stops(self) -> tuple[int, int]:
        """(stops, files) from the trainer's entry to the step: the distinct functions the
        setting enters from ``refimpl.train.run_training`` up to the first ``Trainer.train_step``
        (included), and the distinct modules they are in (``refimpl.train`` counted)."""
        callees = set(self.stop_list())
        modules = {self.module_of[c] for c in callees} | {ENTRY.rsplit(".", 1)[0]}
        return len(callees), len(modules)

    def counts(self, part: slice = slice(None)) -> dict[str, int]:
        out = {k: 0 for k in ("stay", "climb", "return", "descent")}
        for kind in list(self.edges.values())[part]:
            out[kind] += 1
        return out


def walk(argv: list[str]) -> Walk:
    from refimpl.cli import main

    w = Walk()
    sys.setprofile(w.profile)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            code = main(argv)
    finally:
        sys.setprofile(None)
    if code != 0:
        raise SystemExit(f"refimpl {' '.join(argv)} exited {code}")
    return w


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", action="store_true", help="list every edge")
    parser.add_argument("--stops", action="store_true", help="list the stops, entry to step")
    parser.add_argument("--path", action="store_true", help="list the value-by-value walk")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = ["--runs-dir", tmp, "--name", "walk"]
        new = walk(["train", *TINY, *runs])
        resumed = walk(["train", "--resume", "--steps", "3", "--no-progress", "--no-plot", *runs])
        trained = walk(["train", *TINY, *TRAINED_BASE, "--runs-dir", tmp, "--name", "trained"])
    walks = (("new run", new), ("resume", resumed), ("new run, its base model trained", trained))
    for label, w in walks:
        c = w.counts()
        print(
            f"{label:8s} {c['stay']} stays in {len(w.visited)} modules, {c['climb']} climbs, "
            f"{c['return']} returns, {c['descent']} descents ({len(w.edges)} edges)"
        )
        stops, files = w.stops()
        print(f"  entry → step  {stops} stops in {files} files ({ENTRY} to Trainer.train_step)")
        for part, where in (("setup", slice(w.setup_edges)), ("steps", slice(w.setup_edges, None))):
            c = w.counts(where)
            print(
                f"  {part:6s} {c['stay']} stays, {c['climb']} climbs, {c['return']} returns, "
                f"{c['descent']} descents"
            )
        path, entries = w.path_stops(), w.entries()
        print(
            f"  value by value  {len(path)} stops in {len(entries)} files, at most "
            f"{max(entries.values())} entries per file (calls from another file): "
            + ", ".join(f"{m} {n}" for m, n in sorted(entries.items(), key=lambda e: -e[1]))
        )
        returns = w.entries_with_returns()
        print(
            f"  entries, returns counted: at most {max(returns.values())} per file: "
            + ", ".join(f"{m} {n}" for m, n in sorted(returns.items(), key=lambda e: -e[1]))
        )
        if args.stops:
            for callee in w.stop_list():
                print(f"    {callee}")
        if args.path:
            for callee in path:
                print(f"    {callee}")
        if args.edges:
            for (caller, callee), kind in w.edges.items():
                print(f"    {kind:8s} {caller} -> {callee}")


if __name__ == "__main__":
    main()
