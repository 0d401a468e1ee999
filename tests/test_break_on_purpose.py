"""scripts/dev/break_on_purpose.py stays runnable: every slip's source text is still in its
file, exactly once (the script refuses to run a slip otherwise, so a refactor would silently
shrink the list of checked slips)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "break_on_purpose", ROOT / "scripts" / "dev" / "break_on_purpose.py"
)
bop = importlib.util.module_from_spec(_spec)
sys.modules["break_on_purpose"] = bop  # dataclasses look their module up there
_spec.loader.exec_module(bop)


@pytest.mark.parametrize("slip", bop.SLIPS, ids=[s.name for s in bop.SLIPS])
def test_slip_text_occurs_once_and_its_tests_exist(slip):
    source = (ROOT / slip.path).read_text()
    assert source.count(slip.old) == 1, f"{slip.name}: {slip.old!r} in {slip.path}"
    assert slip.new != slip.old
    for test in slip.tests:
        assert (ROOT / test).is_file(), test
