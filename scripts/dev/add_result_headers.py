"""Give every committed result file that has none the one header (``refimpl.bench.result_header``),
built only from what the file itself records; everything else reads "unrecorded".

A file written before the header existed recorded its machine as a short name ("AMD EPYC", or
only the architecture, "x86_64", on some), no ISA features, and no base model: those fields are
"unrecorded", never inferred (a base model's sha256 from the manifest, a machine from a date).
The rest of the file is kept as it was, key for key; only ``header`` is added in front.

    python scripts/dev/add_result_headers.py           # add the missing headers
    python scripts/dev/add_result_headers.py --check   # exit 1 when a file lacks one
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from refimpl.bench.result_header import (  # noqa: E402
    HEADER_FORMAT,
    NUMERIC_ISA,
    UNRECORDED,
    check_header,
)
from refimpl.runs.runlog import write_text_atomic  # noqa: E402

#: Where the committed result files are, and the kind each folder holds.
KINDS = {
    "scripts/experiments/ceiling/results": "ceiling",
    "scripts/experiments/claims/results/real/cross_machine": "claims real model, second machine",
    "scripts/experiments/claims/results/real": "claims real model",
    "scripts/experiments/claims/results/toy": "claims toy testbed",
    "scripts/experiments/claims/results/long_chain": "claims long chain",
    "scripts/experiments/credit/results": "credit",
    "scripts/experiments/first_update/results": "first update",
    "scripts/costs/results": "cost",
    "notebooks": "notebook timings",
    "tests/golden": "golden, another machine",
}


def result_files(root: Path = ROOT) -> list[Path]:
    """Every committed result file (the JSON files under KINDS' folders)."""
    out = subprocess.run(["git", "ls-files", "*.json"], cwd=root, capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    return [root / p for p in out if kind_of(Path(p)) is not None]


def kind_of(rel: Path) -> str | None:
    for folder, kind in KINDS.items():  # the longest folder first (cross_machine before real)
        if str(rel.parent) == folder or str(rel.parent).startswith(folder + "/"):
            return kind
    return None


def _machine_record(data: dict) -> dict:
    for candidate in (data.get("machine"), data.get("settings", {}).get("machine")
                      if isinstance(data.get("settings"), dict) else None):  # fmt: skip
        if isinstance(candidate, dict):
            return candidate
    return {}


def _cpu_model(m: dict) -> str:
    cpu = m.get("cpu")
    if not isinstance(cpu, str) or not cpu or cpu.startswith(UNRECORDED):
        return UNRECORDED
    return UNRECORDED if cpu in ("x86_64", "aarch64", "arm64", "i386", "AMD64") else cpu


def _seeds(data: dict) -> list[int] | str:
    if isinstance(data.get("seed"), int):
        return [data["seed"]]
    if isinstance(data.get("arms"), dict):
        return sorted({int(s) for seeds in data["arms"].values() for s in seeds})
    config = data.get("config")
    if isinstance(config, dict) and isinstance(config.get("seeds"), str):
        return [int(s) for s in config["seeds"].split(",") if s.strip()]
    settings = data.get("settings")
    if isinstance(settings, dict) and isinstance(settings.get("seed"), int):
        return [settings["seed"]]
    if isinstance(data.get("seeds"), list):
        return data["seeds"]
    return UNRECORDED


def _grid(data: dict, kind: str) -> dict | str:
    if isinstance(data.get("evals"), list):
        return {"steps": [e.get("step") for e in data["evals"] if isinstance(e, dict)]}
    if isinstance(data.get("arms"), dict):
        steps = {e["step"] for seeds in data["arms"].values() for r in seeds.values()
                 for e in r.get("evals", [])}  # fmt: skip
        return {"steps": sorted(steps)}
    config = data.get("config")
    if isinstance(config, dict) and "eval_every" in config:
        return {
            "eval_every_steps": config["eval_every"],
            "budget_steps": config.get("budget_steps"),
        }
    if kind in ("credit", "cost", "first update", "notebook timings"):
        return "none"  # a measurement of one batch or of time: nothing is evaluated over training
    return UNRECORDED


def header_from_record(data: Any, kind: str) -> dict:
    """The header of a file written before headers existed, from its own records only."""
    data = data if isinstance(data, dict) else {}
    m = _machine_record(data)
    numerics = m.get("numerics") if isinstance(m.get("numerics"), dict) else {}
    capability = numerics.get("cpu_capability")
    return {
        "format": HEADER_FORMAT,
        "kind": kind,
        "machine": {
            "cpu_model": _cpu_model(m),
            "cores": m["cores"] if isinstance(m.get("cores"), int) else UNRECORDED,
            "isa": [f for f in m["isa"] if f in NUMERIC_ISA]
            if isinstance(m.get("isa"), list)
            else UNRECORDED,
            "torch": m["torch"] if isinstance(m.get("torch"), str) else UNRECORDED,
            "torch_cpu_capability": capability if isinstance(capability, str) else UNRECORDED,
        },  # fmt: skip
        "commit": m["commit"] if isinstance(m.get("commit"), str) and m["commit"] else UNRECORDED,
        "command": data["command"] if isinstance(data.get("command"), str) else UNRECORDED,
        "seeds": _seeds(data),
        "base_models": UNRECORDED,
        "evaluation_grid": _grid(data, kind),
    }


def with_header(path: Path) -> str | None:
    """The file's text with a header added in front (None: it has one already)."""
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    if isinstance(data, dict) and "header" in data:
        return None
    header = header_from_record(data, kind_of(path.relative_to(ROOT)))
    new = {"header": header, **data} if isinstance(data, dict) else {"header": header, "data": data}
    check_header(new, path)
    indent = None if text.lstrip().startswith("{") and "\n" not in text.strip() else 1
    return json.dumps(new, indent=indent, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when a file lacks one")
    args = parser.parse_args(argv)
    missing = []
    for path in result_files():
        new = with_header(path)
        if new is None:
            continue
        missing.append(path)
        if not args.check:
            write_text_atomic(path, new)
    verb = "lack" if args.check else "got"
    print(f"{len(missing)} result files {verb} a header")
    return 1 if args.check and missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
