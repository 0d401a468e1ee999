"""Shared pytest configuration.

Shape checks
------------
Before anything else imports ``refimpl``, this file wraps the public functions of
``refimpl.contract``, ``refimpl.core``, ``refimpl.loss_metrics`` and the algorithm files whose
signature fixes a tensor's rank (``Float[Tensor, "B T"]``, ``Float[Tensor, " B"]``, ...) in
``jaxtyped(typechecker=beartype)``, for the whole test session: a tensor whose shape or dtype
contradicts its annotation fails the call, and the dimension names (``B``, ``T``, ...) must
agree across the arguments of one call.
Outside the tests nothing is wrapped (``tests/spec/test_shapes.py`` checks both; see
docs/spec.md, "Shape-typed math").

What is checked, and why not everything: each checked call costs a signature bind and two
beartype passes (the arguments, then the arguments and the result), about 0.1 ms, which is
more than the math of a small test batch.

- Not jaxtyping's import hook: it wraps *every* function, method and dataclass of a module
  (``require``, ``validate``, the Configs, nested helpers); the spec suite then ran about
  1.5× as long.
- Not the shape-generic primitives, whose annotations fix no rank (``"*dims"``: ``masked``,
  ``masked_sum``, ``masked_mean``, ``clipped_surrogate``, ``kl_k3``; ``" B *rest"``:
  ``group_view``, ``masked_zscore``): they make four fifths of the checked calls of a
  training step (49 of 60 for GTPO) and only say "the same shape as the mask", which the
  fixed-rank functions around them already pin down.
- ``is_pep484_tower=True``: an ``int`` passes where ``float`` is annotated (``eps=1``), as
  PEP 484 reads it.
- A failed check raises :class:`ShapeCheckError`, jaxtyping's ``TypeCheckError`` that is also a
  ``ValueError``: the public functions' contract is "a bad argument raises ``ValueError``
  naming it", and the tests that pass a wrong-shaped tensor on purpose rely on it. jaxtyping's
  message names the argument ("... typechecking parameter 'logp'").

Hypothesis profiles
-------------------
``ci`` (derandomized, bounded examples, no deadline, so a slow CI core never turns into a
flaky failure) and ``thorough`` (1000 random examples per test; a failure prints the blob
that reproduces it). Select with ``HYPOTHESIS_PROFILE=thorough`` (``make test-thorough`` runs
the spec that way); the default is ``ci``.

Tiers
-----
``make test`` runs the first tier, ``make test-all`` both (``.ci/run`` runs ``make test-all``):
``SECOND_TIER`` below names the tests that wait for the second, and why. One torch thread per
test process (see "Threads" at the imports).
"""

import importlib
import inspect
import os
import sys
import typing

import beartype
import jaxtyping
import jaxtyping._decorator
import pytest

# One torch thread per test process, set before torch is first imported (below, through
# refimpl): `make test` runs one pytest-xdist worker per core (`-n auto`), and torch's default
# of one thread per core would put cores × cores threads on the machine, which spin against
# each other (docs/benchmarks.md, "The test suite", has the figures). Subprocesses the tests
# start inherit it. A test that needs another count sets it and puts it back.
# REFIMPL_TEST_THREADS=N changes it, to measure what the choice costs (docs/benchmarks.md).
TEST_THREADS = int(os.environ.get("REFIMPL_TEST_THREADS", "1"))
os.environ["OMP_NUM_THREADS"] = str(TEST_THREADS)
os.environ["MKL_NUM_THREADS"] = str(TEST_THREADS)


class ShapeCheckError(jaxtyping.TypeCheckError, ValueError):
    """A run-time shape/dtype check failed (a ``TypeError`` and a ``ValueError``)."""


def fixed_rank(hint: object) -> bool:
    """Whether a (resolved) annotation is or contains a jaxtyping array type of fixed rank
    (no ``*name`` or ``...`` dimension)."""
    if inspect.isclass(hint) and issubclass(hint, jaxtyping.AbstractArray):
        return "*" not in hint.dim_str and "..." not in hint.dim_str
    return any(fixed_rank(arg) for arg in typing.get_args(hint))


def shape_checked(fn: object) -> bool:
    """Whether the test session checks ``fn``: a function with a fixed-rank shape annotation."""
    return inspect.isfunction(fn) and any(
        fixed_rank(h) for h in typing.get_type_hints(fn, include_extras=True).values()
    )


def check_shapes(module) -> list[str]:
    """Wrap the module's public functions (and its classes' public methods) that
    :func:`shape_checked` selects; return their qualified names."""
    wrap = jaxtyping.jaxtyped(typechecker=SHAPE_CHECKER)
    wrapped = []
    for name, obj in list(vars(module).items()):
        if name.startswith("_") or getattr(obj, "__module__", None) != module.__name__:
            continue
        if shape_checked(obj):
            setattr(module, name, wrap(obj))
            wrapped.append(obj.__qualname__)
        elif inspect.isclass(obj):
            for attr, method in list(vars(obj).items()):
                if not attr.startswith("_") and shape_checked(method):
                    setattr(obj, attr, wrap(method))
                    wrapped.append(method.__qualname__)
    return wrapped


SHAPE_CHECKER = beartype.beartype(conf=beartype.BeartypeConf(is_pep484_tower=True))

assert not any(m == "refimpl" or m.startswith("refimpl.") for m in sys.modules), (
    "refimpl was imported before tests/conftest.py could install the shape checks"
)
# jaxtyping raises the class it finds under this name in its decorator module.
jaxtyping._decorator.TypeCheckError = ShapeCheckError
_algorithms = importlib.import_module("refimpl.algorithms")
importlib.import_module("torch").set_num_threads(TEST_THREADS)
#: Every function the test session checks, by module (tests/spec/test_shapes.py reads it).
SHAPE_CHECKED = {
    module.__name__: check_shapes(module)
    for module in [
        importlib.import_module("refimpl.contract"),
        importlib.import_module("refimpl.core"),
        importlib.import_module("refimpl.loss_metrics"),
        importlib.import_module("refimpl.batch_stages"),
    ]
    + [_algorithms.get(name) for name in _algorithms.NAMES]
}

from hypothesis import HealthCheck, settings  # noqa: E402

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    max_examples=1000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


#: The second tier: what ``make test`` leaves to ``make test-all`` (which ``.ci/run`` runs, with
#: the first tier, in one session). Each entry is a test id prefix, or ``fixture:NAME`` for every
#: test that uses the fixture, with why it waits: each loads a real model, starts processes, runs
#: notebooks or builds the docs site, and none is the specification of an algorithm (every slip
#: in ``scripts/dev/break_on_purpose.py`` is caught by the first tier).
SECOND_TIER: dict[str, str] = {
    "tests/scaleup/test_smollm2.py": "a real model: SmolLM2-135M loaded and rolled out",
    "tests/scaleup/test_trl_example.py": "a real model: the TRL example trained end to end",
    "tests/scaleup/test_trl_multiprocess.py": "multi-process: two gloo processes under TRL",
    "tests/scaleup/test_verl_launch.py": "multi-process: verl's launcher",
    "tests/scaleup/test_verl_worker.py": "multi-process: verl's actor worker in a subprocess",
    "tests/scaleup/test_verl_hooks.py": "multi-process: verl's hooks in a subprocess",
    "tests/scaleup/test_trl.py": (
        "a real-model stack: TRL imported, our losses run inside its GRPOTrainer on a "
        "Hugging Face GPT-2"
    ),
    "tests/scaleup/test_verl.py": (
        "a real-model stack: verl imported, our functions against its own and loaded through "
        "its external-modules hook"
    ),
    "tests/scaleup/test_verl_cov.py": "a real-model stack: verl imported, its Clip-Cov/KL-Cov",
    "tests/test_demo.py::test_the_base_model_line_prints_once_with_workers": (
        "multi-process: the demo's two worker processes"
    ),
    "tests/test_safety_lock.py::test_a_running_run_is_refused_to_a_second_process_and_freed_when_it_dies": (
        "multi-process: a second `refimpl train` against a running one"
    ),
    "tests/test_safety_lock.py::test_two_trains_started_together_one_trains_and_the_other_exits_2": (
        "multi-process: two `refimpl train` processes started together"
    ),
    "tests/test_safety_lock.py::test_a_signal_to_compare_s_process_alone_stops_its_workers": (
        "multi-process: a signal to `refimpl compare` and its worker processes"
    ),
    "tests/test_safety.py::test_sigterm_ends_a_step_of_4096_rollouts_within_seconds": (
        "multi-process: SIGTERM to a training process in a step of minutes"
    ),
    "tests/test_numerics.py::test_warm_start_and_rl_are_bit_identical_on_two_kernel_paths": (
        "multi-process: a warm start and RL steps in two fresh processes, compared bit for bit"
    ),
    "tests/test_safety.py::test_ctrl_c_writes_a_checkpoint_and_prints_how_to_resume": (
        "multi-process: a `refimpl train` process interrupted with SIGINT"
    ),
    "tests/test_cli.py::test_ctrl_c_while_starting_is_one_line_and_exit_130": (
        "multi-process: `refimpl` processes interrupted while they import"
    ),
    "tests/test_cli.py::test_a_listing_into_a_closed_pipe_ends_quietly": (
        "multi-process: `refimpl` processes writing into a pipe closed by the reader"
    ),
    "tests/test_safety_credit.py::test_issue_49_12_help_into_a_closed_pipe_is_quiet": (
        "multi-process: every command's --help into a closed pipe, one process each"
    ),
    "tests/test_safety_disk.py::test_a_fifo_or_a_device_as_a_run_file_is_refused_without_reading": (
        "multi-process: four `refimpl` processes facing a FIFO and /dev/zero (a hang is the bug)"
    ),
    "tests/test_numerics.py::test_pin_overrides_the_environment_and_native_opts_out": (
        "multi-process: fresh interpreters, each importing torch and refimpl"
    ),
    "tests/test_numerics.py::test_torch_imported_but_unused_before_refimpl_is_still_pinned": (
        "multi-process: a fresh interpreter importing torch before refimpl"
    ),
    "tests/test_numerics.py::test_torch_run_before_refimpl_warns_and_records_the_native_path": (
        "multi-process: a fresh interpreter running torch before refimpl"
    ),
    "tests/test_experiment_declarations.py::test_the_driver_runs_a_toy_experiment": (
        "multi-process: the experiment driver runs its arms as `refimpl` processes"
    ),
    "tests/test_notebooks.py::test_notebook_executes_and_draws": "the six notebooks, executed",
    "fixture:site": "the docs site, built with mkdocs --strict",
    "tests/test_adding_an_algorithm.py::test_the_page_followed_literally_passes_the_suite": (
        "the tutorial walked in a copy of the repository, the spec run over its new algorithm "
        "in a second pytest process"
    ),
    "tests/test_bench.py::test_quick_learning_benchmark_writes_its_report": (
        "a benchmark: `refimpl bench-learning --quick` trained end to end"
    ),
    "tests/test_bench.py::test_quick_speed_benchmark_writes_its_report": (
        "a benchmark: `refimpl bench-speed --quick`"
    ),
}


#: The longest tests, longest first (seconds at the last full measurement of ``make test-all``:
#: 942fe10 + 9376bca, 2 workers, a shared machine): each key as in ``SECOND_TIER``. They open the
#: run, in this order, before the other long tests (``pytest_collection_modifyitems``);
#: tests/test_tiers.py checks that each names a test that exists.
LONGEST: tuple[str, ...] = (
    "tests/test_adding_an_algorithm.py::test_the_page_followed_literally_passes_the_suite",  # 71
    "tests/scaleup/test_smollm2.py::test_a_real_rollout_has_nonzero_advantages_and_moves_the_weights",  # 63
    "tests/scaleup/test_trl_multiprocess.py",  # 31, the module's fixture
    "tests/test_notebooks.py::test_notebook_executes_and_draws",  # 6 notebooks, 12-26 each
    "tests/scaleup/test_verl_worker.py",  # 23, the module's fixture
    "tests/test_bench.py::test_quick_learning_benchmark_writes_its_report",  # 21
    "tests/test_safety_lock.py::test_a_signal_to_compare_s_process_alone_stops_its_workers",  # 3 x 14-18
    "tests/test_safety_disk.py::test_a_fifo_or_a_device_as_a_run_file_is_refused_without_reading",  # 18
    "tests/scaleup/test_verl_launch.py",  # 4 launches, 11-16 each
    "tests/test_numerics.py::test_warm_start_and_rl_are_bit_identical_on_two_kernel_paths",  # 15
    "fixture:site",  # 15, the docs site built once
    "tests/test_demo.py::test_the_base_model_line_prints_once_with_workers",  # 13
    "tests/scaleup/test_trl_example.py",  # 13
    "tests/scaleup/test_verl_hooks.py",  # 13, the module's fixture
    "tests/scaleup/test_verl.py",  # 9
    "tests/test_safety.py::test_sigterm_ends_a_step_of_4096_rollouts_within_seconds",  # 9
)


def matches(item, key: str) -> bool:
    """Whether ``item`` is what ``key`` names: a test id prefix (a file, a test, or a test with
    all its parameters), or ``fixture:NAME`` for every test that uses the fixture."""
    if key.startswith("fixture:"):
        return key.removeprefix("fixture:") in getattr(item, "fixturenames", ())
    nodeid = item.nodeid.replace("\\", "/")
    return nodeid == key or nodeid.startswith(key + "::") or nodeid.startswith(key + "[")


def second_tier_reason(item) -> str | None:
    """Why ``item`` is in the second tier (see ``SECOND_TIER``), or ``None``."""
    return next((reason for key, reason in SECOND_TIER.items() if matches(item, key)), None)


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "second_tier: run by `make test-all` and CI, not by `make test` (tests/conftest.py "
        "SECOND_TIER says why each is there)",
    )


def pytest_collection_modifyitems(config, items):
    """Mark the second tier (``SECOND_TIER``), then put the long tests first: ``LONGEST`` in
    its order, then the other ``slow``, ``multiprocess`` and second-tier tests, then the rest,
    each group in collection order. With ``pytest_xdist_make_scheduler`` below, the minute-long
    tests start at once and the short ones fill the workers around them, instead of one long
    test running alone at the end while the other worker idles (the suite's wall time, not what
    it tests)."""
    for item in items:
        if second_tier_reason(item) is not None:
            item.add_marker(pytest.mark.second_tier)

    def rank(item) -> int:
        first = next((i for i, key in enumerate(LONGEST) if matches(item, key)), None)
        if first is not None:
            return first
        long = any(item.get_closest_marker(m) for m in ("slow", "multiprocess", "second_tier"))
        return len(LONGEST) + (0 if long else 1)

    items.sort(key=rank)  # stable: collection order within each rank


def pytest_xdist_make_scheduler(config, log):
    """``pytest -n N`` without ``--dist`` (``make test``, ``make test-all``) schedules with
    pytest-xdist's ``worksteal``, not its default ``load``.

    ``load`` hands each worker a block of consecutive tests first (a quarter of its share:
    about 370 of ``make test-all``'s 2,967 tests on 2 workers), and the ordering above puts
    every long test in the first block, so one worker got all of them (about 700 s of the
    1,194 CPU-s) while the other ran the short ones and then waited. ``worksteal`` hands out
    halves and lets an idle worker take half of the other's queue, from its end, until none is
    left: the long tests at the front stay where they started, the short ones move. An explicit
    ``--dist`` (on the command line, in ``PYTEST_ADDOPTS`` or in ``addopts``) is kept.
    """
    given = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    given += config.getini("addopts")
    explicit = config.getoption("distload") or any(a.startswith("--dist") for a in given)
    if config.getoption("dist") != "load" or explicit:
        return None
    from xdist.scheduler import WorkStealingScheduling

    return WorkStealingScheduling(config, log)
