"""One numeric path for CPU runs: torch's and MKL's kernels fixed at the AVX2 level.

torch picks its CPU kernels by the instruction set it finds: ATen's vectorised kernels
(softmax, layer norm, reductions, Adam) come in AVX-512, AVX2 and plain variants, and MKL's
matrix multiply (the only MKL routine these models call: ``MKL_VERBOSE=1`` lists nothing but
``SGEMM``) has one code branch per instruction set. Each variant rounds differently, and over a
600-step warm start at lr 3e-3 those last-bit differences grow into a different model
(countdown, one thread, one seed, one Xeon: greedy success 0.450 on AVX-512, 0.455 on AVX2,
0.430 with no SIMD). So before torch is first imported, ``pin()`` (called by
``refimpl/__init__.py``) sets

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's AVX2 kernels, whatever the CPU offers beyond AVX2;
- ``MKL_CBWR=AVX2,STRICT``: MKL's conditional numerical reproducibility on its AVX2 branch,
  in strict mode (gemm results independent of memory alignment);
- ``ONEDNN_MAX_CPU_ISA=AVX2``: the same cap for oneDNN, for the ops that reach it,

overriding whatever the environment says. What that buys, measured (docs/numerics.md has the
tables, ``scripts/costs/numeric_paths.py`` reruns them, ``tests/golden/cross_machine.json``
records two machines):

- **The same bits on one machine**, run after run, whatever kernels the environment asks for
  (ATen's plain or AVX-512 ones, any MKL branch): the pin overrides them.
- **Intel CPUs run the same code** on this path (ATen's AVX2 kernels, MKL's AVX2 branch), so
  one with AVX-512 and one without compute alike: checked on one Xeon by asking for each
  level, not on a second Intel machine.
- **An AMD CPU computes other bits.** MKL refuses its AVX2 branch on AMD and runs ``AUTO``
  (it reports ``AUTO,STRICT``), and a 50-step warm start's weights differ from the Xeon's;
  MKL's ``COMPATIBLE`` branch, meant to agree across vendors, did not make them agree either
  (issue 30). Digits are therefore one machine's; what holds on any machine is stated over
  seeds (docs/benchmarks.md § 0).

What stays machine-dependent besides: the thread count (a sum split across threads rounds
differently: the warm start uses one thread, ``refimpl compare`` one per worker, a single
``refimpl train`` torch's default, one per core), GPU runs (cuBLAS picks its kernels per
GPU), and CPUs that are not x86-64 (aarch64 has neither these ATen variants nor MKL; there
the native path is used and recorded as such).

``REFIMPL_NUMERICS=native`` opts out (torch's own choice, faster on AVX-512 machines: the pin
costs 1.3–1.4× there: docs/numerics.md § 4; other numbers); each run records the path it ran on in its ``config.json``
(``describe()``), and the warm-start cache is keyed by it (``cache_tag()``), so a model trained
on one path is never reused on another.

torch reads these variables once, at its first operation, so ``import refimpl`` must come
before anything runs on torch (``import torch`` above it is fine; in a notebook: in the first
cell). When torch has already run on another path, ``pin()`` warns and the process runs, and
records, the native path (the variables are still set, for the processes it starts).
"""

from __future__ import annotations

import os
import platform
import sys
import warnings
from pathlib import Path

#: The environment variable that chooses the path: ``avx2`` (the default) or ``native``.
MODE_VARIABLE = "REFIMPL_NUMERICS"
MODES = ("avx2", "native")

#: What the pinned path sets before torch loads.
PINNED_ENV = {
    "ATEN_CPU_CAPABILITY": "avx2",
    "MKL_CBWR": "AVX2,STRICT",
    "ONEDNN_MAX_CPU_ISA": "AVX2",
}
#: What ``torch.backends.cpu.get_cpu_capability()`` reports on the pinned path.
PINNED_CAPABILITY = "AVX2"

_X86_64 = ("x86_64", "amd64")

# Set once by pin(): "avx2" when the pin is in effect, else "native", and why.
_state: dict[str, str] = {}


def requested_mode() -> str:
    """The path ``REFIMPL_NUMERICS`` asks for (``avx2`` when it is unset or empty)."""
    mode = os.environ.get(MODE_VARIABLE, "").strip().lower() or "avx2"
    if mode not in MODES:
        raise ValueError(
            f"{MODE_VARIABLE}: expected one of {', '.join(MODES)}, "
            f"got {os.environ[MODE_VARIABLE]!r}"
        )
    return mode


def pin() -> str:
    """Put this process on the pinned path if it can; return the path it is on.

    Idempotent. Called by ``refimpl/__init__.py`` before any refimpl module imports torch."""
    if _state:
        return _state["mode"]
    mode = requested_mode()
    machine = platform.machine().lower()
    if mode == "native":
        _state.update(mode="native", reason=f"{MODE_VARIABLE}=native")
    elif machine not in _X86_64:
        _state.update(mode="native", reason=f"no pinned path on {machine or 'this CPU'}")
    else:
        os.environ.update(PINNED_ENV)
        if "torch" not in sys.modules:
            _state.update(mode="avx2", reason="pinned before torch was imported")
        elif _capability() == PINNED_CAPABILITY and _mkl_took_the_pin(_mkl_branch()):
            # torch reads both choices lazily, at its first operation: `import torch` above
            # `import refimpl` (isort's order) is fine as long as nothing ran in between.
            _state.update(mode="avx2", reason="pinned after torch was imported, before it ran")
        else:
            _state.update(mode="native", reason="torch ran before refimpl was imported")
            warnings.warn(
                f"refimpl: torch ran before refimpl was imported, on its {_capability()} "
                "kernels, so this process cannot use refimpl's pinned AVX2 path and its numbers "
                "can differ from other machines' (and from the README's); import refimpl "
                f"before using torch, or set {MODE_VARIABLE}=native to silence this",
                RuntimeWarning,
                stacklevel=3,
            )
    return _state["mode"]


def _capability() -> str:
    import torch

    return torch.backends.cpu.get_cpu_capability()


#: MKL's names of its conditional-reproducibility branches (mkl_cbwr.h), the strict flag.
_MKL_BRANCHES = {1: "off", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 8: "SSE4_2", 9: "AVX",
                 10: "AVX2", 12: "AVX512", 14: "AVX512_E1"}  # fmt: skip
_MKL_STRICT = 0x10000
MKL_PINNED_BRANCH = "AVX2,STRICT"


def _mkl_branch() -> str | None:
    """The branch MKL runs (``AVX2,STRICT`` on the pinned path on Intel, ``AUTO,STRICT`` on
    AMD, ``off`` by default), read
    from the MKL inside torch's CPU library; None where that cannot be asked (no MKL, not
    Linux). Asking makes MKL read ``MKL_CBWR`` if it had not yet."""
    import ctypes

    import torch

    try:
        lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
        get = lib.mkl_serv_cbwr_get
    except (OSError, AttributeError):
        return None
    get.restype, get.argtypes = ctypes.c_int, [ctypes.c_int]
    branch, everything = get(1), get(-1)  # MKL_CBWR_BRANCH, MKL_CBWR_ALL
    name = _MKL_BRANCHES.get(branch, str(branch))
    return name + (",STRICT" if everything & _MKL_STRICT else "")


def _mkl_took_the_pin(branch: str | None) -> bool:
    """Whether MKL runs in the pin's strict reproducibility mode. MKL reads ``MKL_CBWR`` once,
    at its first call, so ``STRICT`` shows that the pin came first. The branch itself is the
    vendor's business: ``AVX2`` on Intel, ``AUTO`` on AMD (MKL refuses its Intel branches
    there). None: no MKL to ask."""
    return branch is None or branch.endswith(",STRICT")


def cache_tag() -> str:
    """A short name of the path, for cache keys: ``avx2`` on the pinned path with MKL's AVX2
    branch (Intel), ``avx2-mkl-<branch>`` with another (AMD: ``auto,strict``), else
    ``native-<machine>-<capability>``."""
    mode = pin()
    if mode == "avx2":
        branch = _mkl_branch()
        return "avx2" if branch in (None, MKL_PINNED_BRANCH) else f"avx2-mkl-{branch.lower()}"
    return f"native-{platform.machine().lower()}-{_capability().lower()}"


#: What ``/proc/cpuinfo`` calls the CPU's model, by architecture: x86 (``model name``), Arm
#: boards (``Model``, ``Hardware``), MIPS (``cpu model``), POWER (``cpu``).
_CPUINFO_MODEL_KEYS = ("model name", "Model", "Hardware", "cpu model", "cpu")
#: Names that are an architecture, not a CPU model (``platform.machine()``'s answers).
ARCHITECTURES = frozenset({"x86_64", "amd64", "aarch64", "arm64", "i386", "i686", "x86", ""})
#: How a record says that it does not know the CPU's model.
UNRECORDED = "unrecorded"


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``; ``sysctl`` on macOS; ``platform.processor()``
    where it names more than the architecture), else ``"unrecorded (<architecture>)"``: never
    the architecture alone, which another reader would take for a CPU (issue 47)."""
    try:
        fields: dict[str, str] = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if sep and value.strip():
                fields.setdefault(key.strip(), value.strip())
        for key in _CPUINFO_MODEL_KEYS:
            if names_cpu_model(fields.get(key, "")):
                return fields[key]
    except OSError:
        pass
    if sys.platform == "darwin":
        import subprocess

        try:
            out = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"],
                                 capture_output=True, text=True, timeout=5).stdout.strip()  # fmt: skip
            if names_cpu_model(out):
                return out
        except (OSError, subprocess.SubprocessError):
            pass
    if names_cpu_model(platform.processor()):
        return platform.processor()
    return f"{UNRECORDED} ({platform.machine() or '?'})"


def names_cpu_model(cpu: object) -> bool:
    """Whether a recorded ``cpu`` names a CPU model: not empty, not an architecture
    (``x86_64``: what the claims ledger's first files record), not ``unrecorded``."""
    text = str(cpu or "").strip()
    return text.lower() not in ARCHITECTURES and not text.lower().startswith(UNRECORDED)


def describe() -> dict[str, object]:
    """The numeric path of this process, as recorded in config.json and the warm start's
    cache: the mode and why, what torch reports, the variables, the CPU and the threads."""
    import torch

    mode = pin()
    return {
        "path": mode,
        "reason": _state["reason"],
        "cpu_capability": _capability(),
        "mkl_branch": _mkl_branch(),
        "env": {k: os.environ.get(k) for k in PINNED_ENV},
        "machine": platform.machine(),
        "cpu": cpu_name(),
        "torch_threads": torch.get_num_threads(),
    }
