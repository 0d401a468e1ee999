"""Every committed result file names the CPU model it was computed on (issue 47, item 3), and
every writer of result files records it: ``refimpl.runs.cpu_kernels.cpu_name`` (read by
``cpu_kernels.describe`` and ``refimpl.bench.machine_info``) gives a model name or
"unrecorded (<architecture>)", never the architecture alone, which a reader takes for a CPU.

A committed file that records no CPU model is allowed only where the page that reads it says
"unrecorded" (the claims ledger's first-pass files: tests/test_claims.py checks the page)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from refimpl.runs import cpu_kernels
from refimpl.runs.cpu_kernels import names_cpu_model

ROOT = Path(__file__).resolve().parents[1]
RESULT_FILES = sorted(
    [*ROOT.glob("scripts/**/results/**/*.json"), ROOT / "notebooks" / "timings.json"]
)
#: Files the claims page shows as "unrecorded" (tests/test_claims.py checks it does).
CLAIMS_RESULTS = ROOT / "scripts" / "experiments" / "claims" / "results"
#: Committed files outside the claims ledger that record no CPU: the page that cites each says
#: "unrecorded" for it (docs/credit.md, its opening paragraph); a file that gains its record
#: fails the test below, and leaves this list.
UNRECORDED_ELSEWHERE = {"scripts/experiments/credit/results/regime_probes.json"}


def _cpus(record: object) -> list[str]:
    """Every ``cpu`` value in a JSON record (machine records, numeric records, per probe)."""
    if isinstance(record, dict):
        out = [str(record["cpu"])] if isinstance(record.get("cpu"), str) else []
        return out + [c for v in record.values() for c in _cpus(v)]
    if isinstance(record, list):
        return [c for v in record[:50] for c in _cpus(v)]
    return []


@pytest.mark.parametrize("path", RESULT_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_committed_result_file_names_its_cpu_model(path):
    rel = str(path.relative_to(ROOT))
    named = any(names_cpu_model(c) for c in _cpus(json.loads(path.read_text())))
    if path.is_relative_to(CLAIMS_RESULTS) and not named:
        return  # shown as "unrecorded" on docs/claims.md (tests/test_claims.py)
    assert named != (rel in UNRECORDED_ELSEWHERE), rel


def test_the_architecture_is_not_a_cpu_model():
    for cpu in ("x86_64", "AMD64", "aarch64", "arm64", "", None, "unrecorded (x86_64)"):
        assert not names_cpu_model(cpu), cpu
    for cpu in ("AMD EPYC", "Intel(R) Xeon(R) Processor", "Apple M2", "POWER9"):
        assert names_cpu_model(cpu), cpu


@pytest.mark.parametrize(
    ("cpuinfo", "expected"),
    [
        ("processor\t: 0\nmodel name\t: AMD EPYC 7B13\ncpu MHz\t: 2450\n", "AMD EPYC 7B13"),
        (
            "processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\nModel\t: Raspberry Pi 5\n",
            "Raspberry Pi 5",
        ),
        (
            "processor\t: 0\ncpu\t\t: POWER9 (architected)\nclock\t: 2200MHz\n",
            "POWER9 (architected)",
        ),
        ("processor\t: 0\nBogoMIPS\t: 50.00\nCPU part\t: 0xd0c\n", "unrecorded (aarch64)"),
    ],
)
def test_cpu_name_reads_the_model_or_says_unrecorded(tmp_path, monkeypatch, cpuinfo, expected):
    """``/proc/cpuinfo`` of x86, an Arm board, POWER, and an Arm server that names no model
    (where ``platform.processor()`` says only "aarch64")."""
    fake = tmp_path / "cpuinfo"
    fake.write_text(cpuinfo)
    monkeypatch.setattr(cpu_kernels, "Path", lambda _path: fake)
    monkeypatch.setattr(cpu_kernels.platform, "processor", lambda: "aarch64")
    monkeypatch.setattr(cpu_kernels.platform, "machine", lambda: "aarch64")
    monkeypatch.setattr(cpu_kernels.sys, "platform", "linux")
    assert cpu_kernels.cpu_name() == expected


def test_the_benchmarks_record_the_same_cpu_name():
    from refimpl.bench import machine_info

    assert machine_info()["cpu"] == cpu_kernels.cpu_name()


#: Every script that writes a result file, and the record it writes the machine with.
WRITERS = [
    "scripts/experiments/claims/run_real.py",
    "scripts/experiments/credit/regime_probes.py",
    "scripts/experiments/credit/real_model.py",
    "scripts/experiments/credit/calibrate.py",
    "scripts/experiments/ceiling/collect.py",
    "scripts/experiments/real_model/run_hf_loop.py",
    "scripts/experiments/real_model/run_trl.py",
    "scripts/costs/profile_rollouts.py",
    "scripts/dev/time_notebooks.py",
    "scripts/experiments/first_update/measure.py",
]


def test_every_writer_of_a_result_file_records_the_machine():
    """Each script under scripts/ that writes JSON to a file records ``machine_info()`` or
    ``cpu_kernels.describe()`` (both name the CPU model), and the list above is all of them."""
    writers = set()
    for path in [*ROOT.glob("scripts/**/*.py"), *ROOT.glob("scripts/**/*.sh")]:
        text = path.read_text()
        if "json.dumps(" in text and ("write_text" in text or "write_text_atomic" in text):
            writers.add(str(path.relative_to(ROOT)))
    # Not result files: fake log lines (log_fsync), pages (the report scripts), the manifest.
    # add_result_headers adds the header to files already written (from their own records);
    # the lab's driver, run_experiment.py, adds make_header's (this machine) to files its
    # commands wrote without one.
    writers -= {"scripts/costs/log_fsync.py", "scripts/dev/ship_base_model.py",
                "scripts/dev/add_result_headers.py", "scripts/experiments/run_experiment.py"}  # fmt: skip
    writers = {w for w in writers if not w.endswith("_page.py")}
    assert writers <= set(WRITERS), writers - set(WRITERS)
    for rel in WRITERS:
        text = (ROOT / rel).read_text()
        assert "machine_info()" in text or "cpu_kernels.describe()" in text, rel
