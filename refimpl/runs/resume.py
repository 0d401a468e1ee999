"""What a resumed run's files must satisfy, read before anything is changed: the logs
readable and within the run, and the whole checkpoint checked against config.json (checksums
and finite weights, its step within the run and its logs, the algorithm and the settings it
was made with): ``verify_resume``. ``verify_run_checkpoint`` checks a finished run's
checkpoint the same way before it is scored. Each refusal names the file that is wrong and
says how to recover. (The run's config.json is read once, by
``refimpl.runs.rundir.read_saved_run``.)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from refimpl.runs.checkpoint import CheckpointError, find_checkpoint, read_state, verify_checkpoint
from refimpl.runs.runlog import read_metrics, read_probes, read_run_config
from refimpl.types.flags import flag, flatten, may_differ


def verify_resume(plan) -> None:
    """Read everything the resumed run ``plan`` depends on before it changes anything: the
    logs, and the whole checkpoint against ``config.json``: its files (checksums, finite
    weights), its step (within the run and the logs), its algorithm and settings.
    ``CheckpointError`` naming the file that is wrong. ``plan``: the run resolved from its
    settings (``refimpl.settings.plan.Plan``), read here as values: its ``defaults`` are
    the settings' defaults as dotted keys."""
    cfg, run_dir, saved = plan.cfg, plan.run_dir, plan.saved.config
    tc = saved["train_config"]
    metrics = _read_logs(run_dir)
    logged = max((r["step"] for r in metrics), default=0)
    checkpoint = find_checkpoint(run_dir / "checkpoint", warn=False)
    if checkpoint is None:
        every = tc.get("checkpoint_every", cfg.checkpoint_every)
        # Up to its first checkpoint's step, a run without one stopped before that save was
        # whole (a kill during it leaves at most checkpoint.tmp): it resumes from step 0,
        # the warm start, its last whole state (``restore_run`` says so). A log past that
        # step had a checkpoint, and lost it: restoring it is better than training again.
        if not isinstance(every, int) or logged > every:
            raise CheckpointError(
                f"{run_dir / 'checkpoint'}: missing, although the run logged step {logged}, "
                f"past its first checkpoint (a checkpoint every {every} steps): restore it, or "
                "--overwrite starts the run again"
            )
        # Nothing to check the settings against: each must be in config.json (the run starts
        # again from step 0 with them; a key removed would silently become its default).
        _check_no_setting_missing(plan.defaults, tc, run_dir, "its default is")
        _check_steps_within(metrics, tc.get("steps", plan.defaults["steps"]), run_dir)
        return
    state_file = checkpoint / "state.json"
    made_with = read_state(checkpoint).get("train_config")
    if isinstance(made_with, dict):  # first: a setting lost would make the rest look wrong
        _check_no_setting_missing(flatten(made_with), tc, run_dir, "the checkpoint was made with")
    with torch.device("meta"):  # the run's model, its shapes only: no memory, no random draw
        model = cfg.warmstart.model.build()
    state = verify_checkpoint(checkpoint, optimizer=not cfg.fresh_optimizer, model=model)
    step, tokens = state.get("step"), state.get("sampled_tokens")
    if not isinstance(step, int) or isinstance(step, bool):
        raise CheckpointError(f"{state_file}: damaged (no step)")
    if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
        raise CheckpointError(f"{state_file}: damaged (sampled_tokens {tokens!r})")
    made_with = state.get("train_config")
    made_with = made_with if isinstance(made_with, dict) else {}
    length = tc.get("steps", plan.defaults["steps"])  # absent: the default, as --resume reads it
    _check_checkpoint_step(step, state_file, tc, length, made_with, run_dir / "config.json")
    _check_log_reaches(run_dir / "metrics.jsonl", logged, step, tc)
    if cfg.steps < step:
        raise ValueError(f"--steps: the run is already at step {step}; expected ≥ {step}")
    check_made_with(state, saved, state_file, run_dir / "config.json")
    _check_steps_within(metrics, length, run_dir)


def verify_run_checkpoint(run_dir: Path, cfg, flag: str) -> tuple[Path, dict]:
    """The last checkpoint of the run ``run_dir`` (made with ``cfg``, its config.json's
    settings) and its state, checked as ``--resume`` checks it before anything else is
    loaded or trained: ``ValueError`` naming ``flag`` when there is none, ``CheckpointError``
    naming the file when it is damaged, does not fit the run's model, or was made with other
    settings than config.json's (another task: a checkpoint copied in from another run)."""
    run_dir = Path(run_dir)
    config_file = run_dir / "config.json"
    checkpoint = find_checkpoint(run_dir / "checkpoint", warn=False)
    if checkpoint is None:
        raise ValueError(f"{flag}: {run_dir} has no checkpoint (nothing to score)")
    saved = read_run_config(run_dir)
    state_file = checkpoint / "state.json"
    made_with = read_state(checkpoint).get("train_config")
    if isinstance(made_with, dict):
        _check_no_setting_missing(
            flatten(made_with), saved["train_config"], run_dir, "the checkpoint was made with"
        )
    with torch.device("meta"):  # shapes only: no memory, no random draw
        model = cfg.warmstart.model.build()
    state = verify_checkpoint(checkpoint, optimizer=False, model=model)
    check_made_with(state, saved, state_file, config_file)
    return checkpoint, state


def _read_logs(run_dir: Path) -> list[dict[str, Any]]:
    """The records of ``metrics.jsonl``, after reading both logs whole."""
    try:
        metrics = read_metrics(run_dir, missing_ok=True)
        read_probes(run_dir)
    except ValueError as err:  # garbage lines, steps out of order: the history is not readable
        raise CheckpointError(f"{err}; {_LOG_WAY_OUT}") from None
    return metrics


_LOG_WAY_OUT = (
    "the run cannot be resumed from it: repair or restore the file, or --overwrite starts "
    "the run again"
)


def _check_steps_within(metrics: list[dict[str, Any]], length: Any, run_dir: Path) -> None:
    """The logged steps lie within the run's ``0 … length`` (``steps_outside``)."""
    try:
        steps_outside(metrics, length, run_dir / "metrics.jsonl")
    except ValueError as err:
        raise CheckpointError(f"{err}; {_LOG_WAY_OUT}") from None


def steps_outside(records: list[dict[str, Any]], length: Any, path: Path) -> None:
    """``ValueError`` naming ``path`` and the record when a step of ``records`` lies outside
    the run's ``0 … length`` (a run logs step 0's evaluation and steps 1 … its ``--steps``;
    config.json records a resumed run's new length before it logs a step past the old one):
    such a line was edited or damaged, and a resume would drop it without a word."""
    if not isinstance(length, int) or isinstance(length, bool):
        return  # config.json's length is checked on its own (check_run_length)
    for n, record in enumerate(records, 1):
        step = record["step"]
        if not 0 <= step <= length:
            raise ValueError(
                f"{path}: record {n} has step {step}, outside the run's 0…{length} (edited or "
                "damaged?)"
            )


def _check_no_setting_missing(
    expected: dict[str, Any], tc: dict[str, Any], run_dir: Path, known: str
) -> None:
    """``CheckpointError`` naming config.json and the first key of ``expected`` (dotted) that
    its ``train_config`` lacks, among those a resumed run may not change: ``--resume`` would
    otherwise take that setting's default, silently. ``known``: what ``expected``'s values
    are, for the message."""
    now = flatten(tc)
    for key, value in expected.items():
        if not may_differ(key) and key not in now:
            raise CheckpointError(
                f"{run_dir / 'config.json'}: train_config.{key} is missing (removed by hand?); "
                f"restore it ({known} {value!r}), or --overwrite starts the run again"
            )


def _check_checkpoint_step(step: int, state_file: Path, tc: dict[str, Any], length: Any,
                           made_with: dict[str, Any], config_file: Path) -> None:  # fmt: skip
    """The checkpoint's step lies within the run (1 … its length). A length in config.json
    that is no positive integer, or shorter than a step the checkpoint (made by a run at
    least that long) reached, was edited: config.json is named, not the checkpoint."""
    check_run_length(tc, config_file, _made_with_steps(made_with))
    made_steps = made_with.get("steps")
    if not (isinstance(made_steps, int) and made_steps >= step):
        made_steps = length  # the checkpoint's own record of the length is missing or short
    if step < 1 or step > made_steps:
        raise CheckpointError(
            f"{state_file}: damaged (step {step}, outside the run's 1…{length}); "
            "--overwrite starts the run again"
        )
    if step > length:
        raise CheckpointError(
            f"{config_file}: train_config.steps is {length}, before the checkpoint's step "
            f"{step} (edited?); restore it{_made_with_steps(made_with)}"
        )


def check_run_length(tc: dict[str, Any], config_file: Path, hint: str = "") -> None:
    """``CheckpointError`` naming ``config_file`` and the field when the run's length
    (``train_config.steps``) is there but no positive integer: config.json was edited, and
    no flag is to blame (``hint``: what the checkpoint says)."""
    if "steps" not in tc:  # absent: the default, as --resume reads it
        return
    length = tc["steps"]
    if not (isinstance(length, int) and not isinstance(length, bool) and length >= 1):
        raise CheckpointError(
            f"{config_file}: train_config.steps is {json.dumps(length)}, expected a positive "
            f"integer (edited?); restore it{hint}"
        )


def _made_with_steps(made_with: dict[str, Any]) -> str:
    steps = made_with.get("steps")
    return f" (the checkpoint was saved by a run of {steps} steps)" if steps else ""


def _check_log_reaches(metrics: Path, logged: int, step: int, tc: dict[str, Any]) -> None:
    """``metrics.jsonl`` may end before the checkpoint's step by the lines a power cut can
    take (written since the previous checkpoint: at most ``checkpoint_every`` steps; the
    trainer warns which steps' lines were lost when it resumes). A log that ends earlier
    was cut short or replaced."""
    every = tc.get("checkpoint_every")
    lost_at_most = every if isinstance(every, int) and every >= 1 else 1
    if step - logged > lost_at_most:
        raise CheckpointError(
            f"{metrics}: ends at step {logged}, {step - logged} steps before the checkpoint's "
            f"step {step} (more than the {lost_at_most} since the previous checkpoint that a "
            "power cut can lose: cut short or replaced?); restore it, or --overwrite starts "
            "the run again"
        )


#: A key absent from a settings dict (``None`` is a value a setting can have).
_ABSENT = object()


def check_made_with(
    state: dict[str, Any], saved: dict[str, Any], state_file: Path, config_file: Path
) -> None:
    """The settings and the algorithm Config the checkpoint was made with are config.json's
    (those a resumed run may change aside); fills in a lost ``saved["algo_config"]``."""
    made_with = state.get("train_config")
    if isinstance(made_with, dict):
        now = flatten(saved["train_config"])
        for key, value in flatten(made_with).items():
            if not may_differ(key) and key in now and now[key] != value:
                raise CheckpointError(
                    f"{state_file}: the checkpoint was made with {flag(key)} {value!r}, but "
                    f"{config_file} says {now[key]!r} (edited?): restore config.json, or "
                    "start the run again with --overwrite"
                )
    algo_config = state.get("algo_config")
    if isinstance(algo_config, dict):
        if not isinstance(saved.get("algo_config"), dict):
            saved["algo_config"] = algo_config  # config.json lost it: the checkpoint's
        elif saved["algo_config"] != algo_config:
            key = next(
                k
                for k in sorted({*algo_config, *saved["algo_config"]})
                if algo_config.get(k, _ABSENT) != saved["algo_config"].get(k, _ABSENT)
            )
            if key not in saved["algo_config"]:  # a key removed: not a value to compare
                raise CheckpointError(
                    f"{config_file}: algo_config.{key} is missing (removed by hand?); restore "
                    f"it (the checkpoint was made with {key}={algo_config[key]!r}), or start "
                    "the run again with --overwrite"
                )
            raise CheckpointError(
                f"{state_file}: the checkpoint was made with the algorithm setting {key}="
                f"{algo_config.get(key)!r}, but {config_file} says "
                f"{saved['algo_config'].get(key)!r} (edited?): restore config.json, or start "
                "the run again with --overwrite"
            )
