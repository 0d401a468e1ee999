"""Run management: everything a long run needs that the RL loop (``refimpl/loop.py``) does not.

    config       TrainConfig (every flag of ``refimpl train``), its checks, resolve → Plan
    settings     the warm start's settings (WarmstartConfig, ModelConfig), --task-args parsed once
    overrides    FIELD=VALUE overrides (--algo-args, --task-args) typed like their defaults
    presets      named regimes for compare and bench-learning
    rundir       the run directory: preflight, the lock, --resume, --overwrite, config.json
    runlog       the run's files: metrics.jsonl, probes.jsonl, atomic writes, versions
    checkpoint   atomic checkpoints with checksums, verified before a resume
    stop         Ctrl-C / SIGTERM: stop after the step, with a checkpoint
    divergence   NaN/inf in a step stops the run, the last good checkpoint kept
    numerics     the pinned CPU kernel path (imported by ``refimpl/__init__.py`` before torch)
    compare      several runs in parallel, one figure and one table
    progress     a progress bar on a terminal, a line every 10 % in a log

This file imports nothing: ``refimpl/__init__.py`` imports ``refimpl.runs.numerics`` before
any module loads torch.
"""
