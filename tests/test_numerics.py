"""One numeric path (refimpl/runs/cpu_kernels.py): the kernel path torch would pick on this machine,
or the one the environment asks for, must not change a single weight.

The cross-path test is what would have caught issue 24: a warm start plus a few RL steps in
fresh processes, once on the machine's own kernels and once with the environment asking for
ATen's plain (no SIMD) kernels and MKL's SSE2 branch, must give the same metrics and the same
weights bit for bit. Without the pin the two runs round differently from the first matmul on.

Nothing here asserts what one vendor's library does (issue 30): MKL runs its AVX2 branch on
Intel and refuses it on AMD (``AUTO,STRICT``), and both are the pinned path. That the two
vendors compute other bits is a measured fact, recorded with its provenance in
tests/golden/cross_machine.json and quoted by docs/numerics.md (checked below).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from refimpl.runs import cpu_kernels
from refimpl.runs.cache import cache_dir
from refimpl.settings.warmstart_config import WarmstartConfig

ROOT = Path(__file__).resolve().parent.parent
X86_64 = platform.machine().lower() in ("x86_64", "amd64")

#: The two kernel paths: the machine's own (nothing set), and the slowest, most different
#: one the environment can ask for.
NATIVE_ENV: dict[str, str] = {}
PLAIN_ENV = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}

#: A short warm start (1 layer, d = 32: solves about a third of one-operation chains, so the
#: RL groups hold right and wrong answers and the gradient is not zero) and three RL steps.
TRAIN_ARGS = [
    "--task", "chain", "--task-args", "num_ops=1", "--algo", "grpo",
    "--steps", "3", "--prompts-per-step", "16", "--eval-every", "3", "--eval-problems", "40",
    "--eval-samples", "4", "--probe-every", "0", "--threads", "1", "--no-progress", "--no-plot",
    "--warmstart.steps", "150", "--warmstart.batch-size", "64", "--warmstart.eval-problems",
    "20", "--warmstart.model.n-layer", "1", "--warmstart.model.n-embd", "32",
    "--warmstart.model.n-head", "2",
]  # fmt: skip


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in cpu_kernels.PINNED_ENV}
    env.pop(cpu_kernels.MODE_VARIABLE, None)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _train(runs: Path, extra: dict[str, str]) -> tuple[list[dict], dict[str, str], dict]:
    """Run ``refimpl train`` in a fresh process; return its metrics (without timings), the
    hashes of its weight files (warm start and RL) and its config.json."""
    subprocess.run(
        [sys.executable, "-m", "refimpl.cli", "train", *TRAIN_ARGS, "--runs-dir", str(runs),
         "--warmstart.runs-dir", str(runs)],
        env=_env(extra), check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    (run_dir,) = [p for p in runs.iterdir() if p.name != "warmstart"]
    metrics = [
        {k: v for k, v in json.loads(line).items() if not k.startswith("time_")}
        for line in (run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    weights = {
        str(p.relative_to(runs).parent.parent if "warmstart" in p.parts else "rl"): hashlib.sha256(
            p.read_bytes()
        ).hexdigest()
        for p in sorted(runs.rglob("model.safetensors"))
    }
    return metrics, weights, json.loads((run_dir / "config.json").read_text())


@pytest.mark.skipif(not X86_64, reason="the pinned path is x86-64's (elsewhere: native)")
def test_warm_start_and_rl_are_bit_identical_on_two_kernel_paths(tmp_path):
    # Python's hash seed differs between the two processes too: nothing may depend on it.
    native = _train(tmp_path / "native", {**NATIVE_ENV, "PYTHONHASHSEED": "1"})
    plain = _train(tmp_path / "plain", {**PLAIN_ENV, "PYTHONHASHSEED": "2"})
    metrics, weights, config = native
    assert len(metrics) == 4 and any(m.get("grad_norm", 0) > 0 for m in metrics)
    assert len(weights) == 2  # the warm start's and the RL run's
    assert plain[0] == metrics
    assert plain[1] == weights
    for cfg in (config, plain[2]):
        assert cfg["numerics"]["path"] == "avx2"
        assert cfg["numerics"]["cpu_capability"] == cpu_kernels.PINNED_CAPABILITY
        assert cfg["numerics"]["env"] == cpu_kernels.PINNED_ENV
        # MKL took the pin's strict mode; its branch is the vendor's (AVX2 Intel, AUTO AMD).
        assert cpu_kernels._mkl_took_the_pin(cfg["numerics"]["mkl_branch"])
        assert cfg["numerics"]["cpu"] == cpu_kernels.cpu_name()


def _python(code: str, extra: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=_env(extra), capture_output=True, text=True, timeout=120
    )


DESCRIBE = (
    "import json; from refimpl.runs import cpu_kernels; print(json.dumps(cpu_kernels.describe()))"
)


@pytest.mark.skipif(not X86_64, reason="the pinned path is x86-64's (elsewhere: native)")
def test_pin_overrides_the_environment_and_native_opts_out():
    pinned = json.loads(_python("import refimpl, torch; " + DESCRIBE, PLAIN_ENV).stdout)
    assert pinned["path"] == "avx2" and pinned["cpu_capability"] == "AVX2"
    assert pinned["env"] == cpu_kernels.PINNED_ENV
    native = json.loads(
        _python(
            "import refimpl, torch; " + DESCRIBE, {**PLAIN_ENV, "REFIMPL_NUMERICS": "native"}
        ).stdout
    )
    # The opt-out leaves the environment's choice alone: here, ATen's plain kernels.
    assert native["path"] == "native" and native["cpu_capability"] == "DEFAULT"
    assert native["env"]["ATEN_CPU_CAPABILITY"] == "default"


@pytest.mark.skipif(not X86_64, reason="the pinned path is x86-64's (elsewhere: native)")
def test_torch_imported_but_unused_before_refimpl_is_still_pinned():
    # isort puts `import torch` above `import refimpl`; torch chooses its kernels at its
    # first operation, so this order is pinned too.
    result = _python("import torch, refimpl; " + DESCRIBE, {})
    described = json.loads(result.stdout)
    assert described["path"] == "avx2" and described["cpu_capability"] == "AVX2"
    assert cpu_kernels._mkl_took_the_pin(described["mkl_branch"])
    assert "RuntimeWarning" not in result.stderr


@pytest.mark.skipif(not X86_64, reason="the pinned path is x86-64's (elsewhere: native)")
def test_torch_run_before_refimpl_warns_and_records_the_native_path():
    ran = "import torch; torch.ones(8, 8) @ torch.ones(8, 8); import refimpl; "
    result = _python(ran + DESCRIBE, {})
    assert "import refimpl before using torch" in result.stderr
    described = json.loads(result.stdout)
    assert described["path"] == "native"
    # What ran chose torch's own kernels (AVX2 ones too, on a CPU without AVX-512) and MKL's
    # default branch, not the pin's strict mode.
    assert not (
        described["cpu_capability"] == "AVX2"
        and cpu_kernels._mkl_took_the_pin(described["mkl_branch"])
    )


def test_a_bad_mode_is_an_error_naming_the_variable(monkeypatch):
    monkeypatch.setenv("REFIMPL_NUMERICS", "fast")
    with pytest.raises(ValueError, match="REFIMPL_NUMERICS: expected one of avx2, native"):
        cpu_kernels.requested_mode()


def test_the_warm_start_cache_is_keyed_by_the_numeric_path(monkeypatch, tmp_path):
    cfg = WarmstartConfig(runs_dir=tmp_path)
    pinned = cache_dir(cfg)
    monkeypatch.setattr(cpu_kernels, "cache_tag", lambda: "native-x86_64-avx512")
    assert cache_dir(cfg) != pinned


@pytest.mark.parametrize("branch", ["AVX2,STRICT", "AUTO,STRICT", None])
def test_torch_imported_first_is_pinned_whatever_branch_the_vendor_gives(monkeypatch, branch):
    """MKL answers the pin's ``AVX2,STRICT`` with ``AUTO,STRICT`` on AMD (issue 30); that is the
    pinned path there, not torch having run first, so no warning and the mode is ``avx2``."""
    monkeypatch.setattr(cpu_kernels, "_state", {})
    monkeypatch.setattr(cpu_kernels, "requested_mode", lambda: "avx2")
    monkeypatch.setattr(cpu_kernels.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(cpu_kernels, "_capability", lambda: "AVX2")
    monkeypatch.setattr(cpu_kernels, "_mkl_branch", lambda: branch)
    monkeypatch.setattr(cpu_kernels.os, "environ", dict(os.environ))  # pin() sets variables
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cpu_kernels.pin() == "avx2"
    tag = cpu_kernels.cache_tag()
    # Intel's branch and AMD's train other models: they never share a cached warm start.
    assert tag == ("avx2-mkl-auto,strict" if branch == "AUTO,STRICT" else "avx2")


def test_mkl_default_branch_after_torch_ran_is_not_the_pin(monkeypatch):
    monkeypatch.setattr(cpu_kernels, "_state", {})
    monkeypatch.setattr(cpu_kernels, "requested_mode", lambda: "avx2")
    monkeypatch.setattr(cpu_kernels.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(cpu_kernels, "_capability", lambda: "AVX2")
    monkeypatch.setattr(cpu_kernels, "_mkl_branch", lambda: "off")  # MKL read no MKL_CBWR
    monkeypatch.setattr(cpu_kernels.os, "environ", dict(os.environ))
    with pytest.warns(RuntimeWarning, match="import refimpl before using torch"):
        assert cpu_kernels.pin() == "native"


# -- Two machines' record (issue 30) --------------------------------------------------------

RECORD = ROOT / "tests" / "golden" / "cross_machine.json"


def _record() -> list[dict]:
    return json.loads(RECORD.read_text())["measurements"]


def test_the_record_holds_two_vendors_with_their_provenance():
    rows = _record()
    assert {row["vendor"] for row in rows} == {"Intel", "AMD"}
    for row in rows:
        assert re.fullmatch(r"[0-9a-f]{64}", row["sha256"]), row
        assert row["cpu"] and row["source"] and row["date"] and row["torch"] == "2.13.0"
        assert row["scenario"] == "refimpl warmstart --task countdown --steps 50"


def test_no_kernel_setting_in_the_record_makes_the_two_vendors_agree():
    """Why refimpl claims one machine's digits only: for every kernel setting measured on both
    CPUs, the weights differ. (Should a setting ever agree, this fails, and the docs may then
    claim the same bits across vendors with this record as the evidence.)"""
    by_setting: dict[str, dict[str, str]] = {}
    for row in _record():
        by_setting.setdefault(row["setting"], {})[row["vendor"]] = row["sha256"]
    both = {s: v for s, v in by_setting.items() if len(v) == 2}
    assert len(both) >= 2
    for setting, sha in both.items():
        assert sha["Intel"] != sha["AMD"], setting


def test_the_docs_quote_the_record():
    page = (ROOT / "docs" / "numerics.md").read_text()
    for row in _record():
        assert row["sha256"][:16] in page, f"docs/numerics.md lacks {row['setting']} ({row['cpu']})"
