"""Logs stay readable: with stderr a file or a pipe, progress is one plain line every 10 % or
so (``make demo > log`` once held thousands of carriage-return redraws of a bar)."""

from __future__ import annotations

import io
import sys

from refimpl.runs.progress import LineProgress, progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_log_gets_a_line_every_tenth_and_no_carriage_return(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    with progress(200, "grpo s0") as bar:
        assert isinstance(bar, LineProgress)
        for step in range(200):
            bar.set_postfix(reward=f"{step / 200:.2f}", refresh=False)
            bar.update(1)
    text = log.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert len(lines) == 10, lines
    assert lines[0] == "grpo s0: 20/200 steps (10 %), reward=0.10"
    assert lines[-1] == "grpo s0: 200/200 steps (100 %), reward=0.99"


def test_a_resumed_or_short_run_still_reports_its_end(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    bar = progress(7, "warm start chain", initial=3)
    for _ in range(4):
        bar.update(1)
    bar.close()
    assert log.getvalue().splitlines() == [
        "warm start chain: 4/7 steps (57 %)",
        "warm start chain: 5/7 steps (71 %)",
        "warm start chain: 6/7 steps (86 %)",
        "warm start chain: 7/7 steps (100 %)",
    ]


def test_a_terminal_gets_the_bar_and_disabled_progress_prints_nothing(monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    monkeypatch.delitem(sys.modules, "ipykernel", raising=False)
    assert not isinstance(progress(10, "x"), LineProgress)
    quiet = io.StringIO()
    monkeypatch.setattr(sys, "stderr", quiet)
    bar = progress(10, "x", disable=True)
    for _ in range(10):
        bar.update(1)
    bar.close()
    assert quiet.getvalue() == ""
