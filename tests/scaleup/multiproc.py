"""Shared by the multi-process tests: a tiny Qwen2 on disk and a bounded two-process launch."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

import toy_envs

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
#: Wall-clock bound of one two-process run (the runs take about a minute on 2 busy cores).
TIMEOUT_S = 600


def save_tiny_qwen2(path: Path, seed: int = 0) -> Path:
    """The tiny Qwen2 of ``test_trl.py`` (one layer, width 32) and the toy character tokenizer,
    saved with ``save_pretrained`` so that other processes load the same weights offline."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from refimpl.scaleup.hf import char_tokenizer

    tokenizer = char_tokenizer(toy_envs.TOKENIZER)
    torch.manual_seed(seed)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a launched process: offline, one thread per process, this checkout
    first on the path."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }
    # pytest-xdist's worker variables would make a child think it is a test worker.
    for key in [k for k in env if k.startswith("PYTEST_")]:
        env.pop(key)
    return env


def launch(args: list[str], env: dict[str, str] | None = None) -> tuple[str, float]:
    """Run ``python args...`` with a bounded timeout; return its output and wall time, or fail
    the calling test with the tail of that output."""
    import pytest

    start = time.perf_counter()
    # A session of its own, so that a timeout ends the launcher *and* the ranks it started.
    proc = subprocess.Popen(
        [sys.executable, *args],
        cwd=ROOT,
        env=env or child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        text, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
        pytest.fail(f"{args[:4]} did not finish in {TIMEOUT_S} s:\n{text[-3000:]}")
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(args[:4])} exited {proc.returncode}:\n{text[-6000:]}")
    return text, wall


def run_once(tmp_path_factory, name: str, produce) -> Path:
    """``produce(folder)`` once per test session, even under pytest-xdist: a module fixture
    would run in every worker that receives one of the module's tests, and these launches are
    the expensive part. The workers share the session's base folder; a lock lets the first
    one produce and the others wait for it and read."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the session's folder, shared by the workers
    folder = base / f"shared-{name}"
    with FileLock(str(base / f"shared-{name}.lock")):
        if not (folder / "done").exists():
            folder.mkdir(parents=True, exist_ok=True)
            produce(folder)
            (folder / "done").touch()
    return folder


def torchrun(script: Path, *script_args: str, nproc: int = 2, env=None) -> tuple[str, float]:
    """``torch.distributed.run --standalone`` (a free rendezvous port on localhost)."""
    return launch(
        [
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            str(script),
            *script_args,
        ],
        env=env,
    )
