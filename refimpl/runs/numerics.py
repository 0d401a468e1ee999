"""One numeric path for CPU runs: the same numbers on every x86-64 machine with AVX2.

torch picks its CPU kernels by the instruction set it finds: ATen's vectorised kernels
(softmax, layer norm, reductions, Adam) come in AVX-512, AVX2 and plain variants, and MKL's
matrix multiply has one code branch per instruction set. Each variant rounds differently, and
over a 600-step warm start at lr 3e-3 those last-bit differences grow into a different model
(countdown, one thread, one seed: greedy success 0.41 on the AVX2 path, 0.475 on AVX-512,
0.48 with no SIMD). So before torch is first imported, ``pin()`` (called by
``refimpl/__init__.py``) sets

- ``ATEN_CPU_CAPABILITY=avx2``: ATen's AVX2 kernels, whatever the CPU offers beyond AVX2;
- ``MKL_CBWR=AVX2,STRICT``: MKL's conditional numerical reproducibility on its AVX2 branch,
  in strict mode (gemm results independent of memory alignment);
- ``ONEDNN_MAX_CPU_ISA=AVX2``: the same cap for oneDNN, for the ops that reach it,

overriding whatever the environment says: ``ATEN_CPU_CAPABILITY=default`` in the shell
gives the same weights as no setting at all. AVX2 is the newest level every x86-64 CPU of the
last decade has (Intel since 2013, AMD since 2015), so it is the one path they can all run.
``scripts/numeric_paths.py`` measures what it costs against the native path.

What stays machine-dependent: the thread count (a sum split across threads rounds
differently: the warm start uses one thread, ``refimpl compare`` one per worker, a single
``refimpl train`` torch's default, one per core), GPU runs (cuBLAS picks its kernels per
GPU), and CPUs that are not x86-64 (aarch64 has neither these ATen variants nor MKL; there
the native path is used and recorded as such).

``REFIMPL_NUMERICS=native`` opts out (torch's own choice, faster on AVX-512 machines, other
numbers); each run records the path it ran on in its ``config.json`` (``describe()``), and the
warm-start cache is keyed by it (``cache_tag()``), so a model trained on one path is never
reused on another.

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
        elif _capability() == PINNED_CAPABILITY and _mkl_branch() in (None, MKL_PINNED_BRANCH):
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
    """The branch MKL runs (``AVX2,STRICT`` on the pinned path, ``off`` by default), read
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


def cache_tag() -> str:
    """A short name of the path, for cache keys: ``avx2`` on the pinned path, else
    ``native-<machine>-<capability>``."""
    mode = pin()
    if mode == "avx2":
        return "avx2"
    return f"native-{platform.machine().lower()}-{_capability().lower()}"


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
        "torch_threads": torch.get_num_threads(),
    }
