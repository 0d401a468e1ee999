"""Ship a cached warm start: copy its weights into refimpl/base_models/ and describe it in the
manifest (refimpl/runs/shipped.py says what the entry holds and who reads it).

    python scripts/dev/ship_base_model.py runs/warmstart/countdown-da5d8f193d --name countdown-600 \
        --command "refimpl warmstart --task countdown" --used-by "the claims ledger's toy runs"

The cache is checked before anything is written: its state.json must record the sha256 of its
model.safetensors and the file must have it, and its recorded settings must be a warm start's
(their hash is the entry's settings_key). Nothing is trained. The trained-on record is the
cache's own (``numerics`` in state.json): the machine that trained it, not this one.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import refimpl  # noqa: E402,F401  (the numeric path is pinned before torch runs)
from refimpl.runs import shipped  # noqa: E402
from refimpl.runs.cache import settings_key  # noqa: E402
from refimpl.runs.checkpoint import read_state, sha256  # noqa: E402
from refimpl.settings.warmstart_config import WARMSTART_MIX, warmstart_from_record  # noqa: E402
from refimpl.warmstart import TRAINED_WITH  # noqa: E402


def entry_of(cache: Path, command: str, used_by: str, source: str) -> dict:
    """The manifest entry of the cache directory ``cache``; ``ValueError`` naming what is wrong."""
    state = read_state(cache)
    file = cache / "model.safetensors"
    recorded = (state.get("checksums") or {}).get("model.safetensors")
    if not recorded or sha256(file) != recorded:
        raise ValueError(f"{file}: its sha256 is not the one {cache}/state.json records")
    config = {k: state["config"][k] for k in TRAINED_WITH}
    cfg = warmstart_from_record(config)
    cfg.check()
    numerics = state.get("numerics", {})
    return {
        "sha256": recorded,
        "bytes": file.stat().st_size,
        "config": config,
        "settings_key": settings_key(cfg.key_inputs()),
        "mix": WARMSTART_MIX.get(cfg.task, {}),
        "threads": state["config"].get("threads"),
        "cache_key": cache.name.rsplit("-", 1)[-1],
        "command": command,
        "used_by": used_by,
        "source": source,
        "trained_on": {"cpu": numerics.get("cpu", "unrecorded"), "numerics": numerics},
        "report": state.get("report", {}),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cache", type=Path, help="runs/warmstart/<task>-<key> directory")
    parser.add_argument("--name", required=True, help="the shipped name (a folder name)")
    parser.add_argument("--command", required=True, help="the command that trains it")
    parser.add_argument("--used-by", required=True, help="what starts from it")
    parser.add_argument("--source", default="", help="where the cache came from (free text)")
    args = parser.parse_args(argv)
    if not args.name.replace("-", "").replace("_", "").isalnum():
        parser.error(f"--name: letters, digits, - and _ only, got {args.name!r}")
    try:
        entry = entry_of(args.cache, args.command, args.used_by, args.source)
    except (ValueError, OSError, KeyError) as err:
        print(f"ship_base_model: error: {err}", file=sys.stderr)
        return 2
    data = shipped.manifest()
    data.setdefault("models", {})[args.name] = entry
    data.setdefault("not_shipped", [])
    data["not_shipped"] = [n for n in data["not_shipped"] if n.get("name") != args.name]
    target = shipped.BASE_MODELS / args.name
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(args.cache / "model.safetensors", target / "model.safetensors")
    shipped.MANIFEST.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"shipped {args.name}: {entry['bytes']:,} bytes, sha256 {entry['sha256'][:12]}…")
    return 0


if __name__ == "__main__":
    sys.exit(main())
