"""What a run computes: its settings, their checks, and the run resolved once from them.

    train_config      TrainConfig (every flag of ``refimpl train``), its checks, its JSON form
    warmstart_config  the warm start's settings (WarmstartConfig, ModelSize), --task-args
                      parsed once, and its identity (``key_inputs``)
    limits            the flags' spelling and the limits both runs check (learning rate,
                      seed, threads)
    memory            a size flag too large for the machine, refused before anything is
                      created
    plan              resolve → Plan: the algorithm and its Config, the task, L_max, the
                      device; the settings a resumed run may change
    overrides         FIELD=VALUE overrides (--algo-args, --task-args) typed by their
                      annotations
    record            a config.json's settings read back (train_config, algo_config),
                      checked by key
    presets           named regimes for compare and bench-learning

A value is checked against its annotation by ``refimpl.types.typecheck``, at the bottom of
the layers, where the algorithms' Configs read it too. Nothing here touches the disk or the process: the run directory, the warm-start cache, the
logs and checkpoints are ``refimpl.runs``'s, which checks them against the ``Plan``. This file
imports nothing.
"""
