"""Run management: what a long run needs of the disk and the process that the RL loop
(``refimpl/loop.py``) does not. What a run computes, its settings and the plan resolved from
them, is ``refimpl.settings``'s, resolved before this package runs (``refimpl.train.preflight``);
this package checks the disk against that plan, reading it as values, and imports nothing of
``refimpl.settings`` (``tests/test_layout.py``). Which base model a warm start uses (shipped,
cached or trained) is chosen with its settings in ``refimpl.warmstart.choose_base``.

    rundir       the run directory, checked against the plan (check_run_dir), claimed under its lock,
                 opened (a new run's config.json, or a resumed run restored), saved
    paths        --runs-dir and --name: a directory, one printable name, no link
    lock         the run directory's OS lock: one process at a time
    resume       what a resumed run's logs and checkpoint must satisfy, checked first
    runlog       the run's files: metrics.jsonl, probes.jsonl, JSON read bounded, atomic writes
    checkpoint   atomic checkpoints with checksums, verified before a resume
    cache        the warm-start cache: its key, its directory, whether it can be written
    shipped      the shipped base models as they lie on the disk: the manifest, the weights
    stop         Ctrl-C / SIGTERM: stop after the step, with a checkpoint
    divergence   NaN/inf in a step stops the run, the last good checkpoint kept
    cpu_kernels  the pinned CPU kernel path (imported by ``refimpl/__init__.py`` before torch)
    progress     a progress bar on a terminal, a line every 10 % in a log

This file imports nothing: ``refimpl/__init__.py`` imports ``refimpl.runs.cpu_kernels`` before
any module loads torch.
"""
