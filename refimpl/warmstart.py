"""Supervised warm start: the base model every RL run starts from.

RL from random weights learns nothing on a sparse reward: a random policy almost never writes
a right answer, so every group has all-equal rewards and every advantage is zero. Published
toy GRPO work therefore starts from pretrained models of ≥ 135M parameters. Our stand-in is a
short supervised run on reference solutions of a *mix of easier instances* (for ``chain``:
1 to 4 operations instead of always 4), tuned so that RL on the default task starts with a
10–50 % success rate: low enough to have room to learn, high enough that most groups hold
both right and wrong answers (a group whose rewards are all equal carries no signal).

The result is deterministic per seed on a machine (on one torch thread, the default: see
``WarmstartConfig.threads``; refimpl's pinned kernel path, ``refimpl/runs/cpu_kernels.py``, makes it
independent of the CPU's instruction-set level, but an AMD CPU trains other bits than an Intel
one: docs/numerics.md) and cached under ``runs/warmstart/<task>-<hash>/``: the
hash covers every setting, so changing one trains a new model, and ``make demo``, the
notebooks and the benchmarks all reuse the same file.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
import torch.nn.functional as F
from filelock import FileLock

from refimpl.evaluate import success_rate
from refimpl.model import GPT
from refimpl.problem_streams import held_out_rng, warmstart_rng
from refimpl.runs import cpu_kernels, shipped
from refimpl.runs.cache import (
    cache_complete,
    cache_key,
    check_cache_writable,
    keys,
    settings_key,
)
from refimpl.runs.checkpoint import CheckpointError, load_model_weights, read_state, save_checkpoint
from refimpl.runs.progress import progress
from refimpl.settings.warmstart_config import (
    WARMSTART_MIX,
    WarmstartConfig,
    task_knobs,
    warmstart_from_record,
)
from refimpl.types.flags import flag
from toy_envs import TOKENIZER, get_task


def _training_batch(task, problems) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``<bos> prompt solution <eos>``, right-padded, with a loss mask on the solution."""
    seqs, loss_starts = [], []
    for p in problems:
        prompt = TOKENIZER.encode(p.prompt, add_bos=True)
        completion = TOKENIZER.encode(task.reference_solution(p), add_eos=True)
        seqs.append(prompt + completion)
        loss_starts.append(len(prompt))
    ids, mask = TOKENIZER.pad(seqs, side="right")
    ids_t, mask_t = torch.as_tensor(ids), torch.as_tensor(mask)
    # Predict token j+1 from tokens ≤ j; only solution tokens (and <eos>) carry loss, so the
    # model learns to answer, not to generate prompts.
    positions = torch.arange(ids_t.shape[1])[None, :]
    starts = torch.tensor(loss_starts)[:, None]
    target_mask = (positions >= starts) & mask_t.bool()
    return ids_t, mask_t, target_mask


def train_warmstart(cfg: WarmstartConfig, prefix: str = "--") -> GPT:
    """Train (or load from the cache) the base model for ``cfg.task``; print its success.

    A cached model is read without writing anything (a read-only cache works). Otherwise the
    lock file ``<cache>.lock`` makes two processes asking for the same model (a notebook and
    ``make demo``, say) train it once: the second waits, then loads the first one's cache.
    ``prefix``: how the flags are spelled in error messages (``--warmstart.`` for a run)."""
    cfg.check(prefix)
    return base_model(cfg, prefix)


# ---------------------------------------------------------------------------------------------
# The base model's one room: chosen once (shipped, cached or trained), then loaded or trained.
# ---------------------------------------------------------------------------------------------


class BaseChoice(NamedTuple):
    """Where the base model of a warm start comes from, decided once (``choose_base``)."""

    cfg: WarmstartConfig
    """the warm start's settings, checked"""
    identity: dict
    """``cfg.key_inputs()``, computed once: the cache's key and a shipped model's"""
    source: str
    """``shipped`` (from the package), ``cache`` (this machine's) or ``trained`` (here, now)"""
    shipped: shipped.ShippedModel | None
    """the shipped model of these settings, whether it is used or not"""
    cache: Path
    """this machine's cache directory of these settings"""
    prefix: str
    """how the flags are spelled in messages (``--warmstart.`` for a run)"""


def choose_base(cfg: WarmstartConfig, prefix: str = "--", identity: dict | None = None
                ) -> BaseChoice:  # fmt: skip
    """The choice of the base model, made here and nowhere else, before anything is trained or
    written: the shipped model when one was trained with these settings and ``cfg.shipped``
    is on and ``cfg.force`` off; else this machine's cached model (``cfg.force`` aside); else
    one trained now, and then its cache must be writable (``check_cache_writable``, a
    ``ValueError`` naming ``runs_dir``). Shipped weights that a damaged manifest hides from
    these settings are said, one warning each (``find_shipped``). ``identity``: the warm
    start's ``key_inputs()``, as a run's settings check computed it (None: computed here)."""
    identity = cfg.key_inputs() if identity is None else identity
    settings, _, cache = keys(identity, cfg.runs_dir)  # a shipped model's key, the cache
    found, unused = find_shipped(identity, settings)
    use_shipped = cfg.shipped and not cfg.force
    if found is not None and use_shipped:
        return BaseChoice(cfg, identity, "shipped", found, cache, prefix)
    for reason in unused if use_shipped else ():
        warnings.warn(f"shipped base model: {reason}", stacklevel=2)
    source = "cache" if cache_complete(cache) and not cfg.force else "trained"
    if source == "trained":  # not shipped, not cached: the cache must be writable
        check_cache_writable(cache, prefix)
    return BaseChoice(cfg, identity, source, found, cache, prefix)


def base_model(cfg: WarmstartConfig, prefix: str = "--", *, chosen: BaseChoice | None = None
               ) -> GPT:  # fmt: skip
    """The base model of the warm start ``cfg`` (settings already checked: an RL run's, by its
    preflight), as ``choose_base`` chose it (``chosen``: the choice a run's preflight made;
    None: made here), with its identity record ``base_record`` (``shipped.describe_base``:
    which model, its sha256; a run writes it into its config.json) and ``base_report`` (the
    success measured when it was trained, greedy and sampled, on the warm start's own check
    problems). The choice is said in one line."""
    choice = chosen if chosen is not None else choose_base(cfg, prefix)
    if choice.source == "shipped":  # its sha256 checked against the manifest
        model, entry = shipped.load(choice.shipped, choice.cfg, choice.prefix), choice.shipped
        print(f"warm start: the shipped base model {entry.name} (sha256 {entry.sha256[:12]}…, "
              f"trained on {model.base_record['trained_on']}; "
              f"{_format_report(model.base_report)}), as on every machine")  # fmt: skip
        return model
    if choice.source == "cache":
        return _load(choice)
    choice.cache.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(choice.cache) + ".lock"):
        if cache_complete(choice.cache) and not choice.cfg.force:  # trained meanwhile elsewhere
            return _load(choice)
        print(training_notice(choice.identity, force=choice.cfg.force,  # never in silence
                              shipped_used=choice.shipped is not None), flush=True)  # fmt: skip
        previous = torch.get_num_threads()
        if choice.cfg.threads:
            torch.set_num_threads(choice.cfg.threads)
        try:
            model = _train(choice.cfg, choice.cache)
        finally:
            torch.set_num_threads(previous)  # the caller's RL run keeps its own setting
    if choice.shipped is not None:  # trained although one is shipped: are the bits the same?
        print("warm start: trained here" + _compared(choice)(model.base_record["sha256"]))
    return model


def find_shipped(identity: dict, key: str | None = None
                 ) -> tuple[shipped.ShippedModel | None, list[str]]:  # fmt: skip
    """The shipped model trained with the settings ``identity`` (a warm start's
    ``key_inputs()``; ``key``: its ``settings_key``, when already computed), or None; and why
    shipped weights are not used for these settings, one line each: ``manifest.json`` missing
    while weights are there, weights that no entry lists (an entry deleted), an entry that
    cannot be read, and an entry of these settings (its recorded ``settings_key`` is theirs, or
    its recorded config says them) whose config no longer hashes to that key (edited: it is
    no model's). A run that finds no shipped model says these before it trains or reuses a
    cache (``choose_base``): a damaged manifest is otherwise a silent retraining on this
    machine, and other bits. An entry's identity is computed from its recorded config, never
    read from the manifest, and only for an entry of these settings' task or key."""
    path = shipped.MANIFEST
    weights = sorted(p.parent.name for p in path.parent.glob("*/model.safetensors"))
    fix = f"restore {path} (git checkout, or reinstall refimpl)"
    if not path.exists():
        return None, ([f"{path}: missing, so the shipped base models ({', '.join(weights)}) "
                       f"are not used; {fix}"] if weights else [])  # fmt: skip
    models = shipped.shipped_models(path)
    listed = {m.name for m in models}
    unused = [
        f"{path.parent / name / 'model.safetensors'}: not listed in {path.name} (its entry "
        f"deleted?), so it is not used; {fix}"
        for name in weights
        if name not in listed
    ]
    key = settings_key(identity) if key is None else key
    found, plain = None, _plain_settings(identity)
    for model in models:
        try:  # an entry that says other settings, and not their key, is not parsed further
            recorded, config = str(model.entry["settings_key"]), model.entry["config"]
            typed = warmstart_from_record(config)
            mine = recorded == key or _plain_settings(dataclasses.asdict(typed)) == plain
            inputs = typed.key_inputs() if mine else None
        except (KeyError, TypeError, ValueError, AttributeError) as err:
            unused.append(f"{path}: the entry {model.name} cannot be read ({type(err).__name__}: "
                          f"{err}), so it is not used; {fix}")  # fmt: skip
            continue  # said, whichever settings it had
        if inputs is None or (recorded != key and inputs != identity):
            continue  # another model's entry
        computed = settings_key(inputs)  # computed from its config, never read
        if computed != recorded:
            unused.append(
                f"{path}: the entry {model.name} has a config whose settings hash to {computed}, "
                f"not to the settings_key it records ({recorded}): edited?, so it is not used; "
                f"{fix}"
            )
        elif found is None and inputs == identity:
            found = model
    return found, unused


def _plain_settings(settings: dict) -> tuple:
    """The settings compared as typed, before ``key_inputs`` canonicalises the task's knobs
    (another entry's knobs are not parsed): the task, the model, the schedule, the steps, the
    batch, the lr, the seed."""
    steps = settings["steps"]
    return (settings["task"], settings["model"], steps, settings.get("schedule_steps") or steps,
            settings["batch_size"], settings["lr"], settings["seed"])  # fmt: skip


def _work(config: dict) -> float:
    """A warm start's training work, in units that its seconds are about proportional to: the
    tokens it trains on (steps × batch × block) times the weights of its blocks (12·L·d²)."""
    m = config["model"]
    return (
        config["steps"]
        * config["batch_size"]
        * m["block_size"]
        * 12
        * m["n_layer"]
        * m["n_embd"] ** 2
    )


def estimated_seconds(inputs: dict) -> tuple[float | None, str]:
    """About how long training the warm start ``inputs`` takes on one thread, scaled from the
    shipped models' own measured training seconds (None: none recorded), and the CPU they
    were measured on."""
    rates, cpus = [], set()
    for model in shipped.shipped_models():
        seconds = model.entry.get("report", {}).get("train_seconds")
        try:
            rates.append(float(seconds) / _work(model.entry["config"]))
        except (TypeError, KeyError, ValueError, ZeroDivisionError):
            continue
        cpus.add(str(model.entry.get("trained_on", {}).get("cpu", "unrecorded")))
    estimate = float(sorted(rates)[len(rates) // 2]) * _work(inputs) if rates else None
    return estimate, ", ".join(sorted(cpus)) or "unrecorded"


def training_notice(inputs: dict, *, force: bool, shipped_used: bool) -> str:
    """The line said before the warm start ``inputs`` (its identity, ``key_inputs``) is
    trained: why no shipped model is used, and what the training will cost."""
    why = ("retraining it (--force)" if force else "a shipped model has these settings, "
           "but this run trains its own (shipped models off)" if shipped_used else
           "no base model shipped with refimpl (refimpl/base_models/) has these settings")  # fmt: skip
    est, cpu = estimated_seconds(inputs)
    cost = (
        f"about {est / 60:.0f} min"
        if est and est >= 90
        else f"about {est:.0f} s"
        if est
        else "time unknown"
    )
    args = " ".join(inputs.get("task_args") or [])
    return (f"warm start: {why}; training one: {inputs['task']}{' ' + args if args else ''}, "
            f"{inputs['steps']} steps of {inputs['batch_size']}, {cost} on one thread at the shipped "
            f"models' speed ({cpu}; cached after that: later runs reuse it)")  # fmt: skip


def _compared(choice: BaseChoice):
    """What is said of a model trained or reused here when a model of its settings is shipped
    (``choice.shipped``): whether this machine's has the same bits (a function of its sha256,
    appended to the line that says the model; empty when none is shipped)."""
    entry = choice.shipped

    def said(mine: str) -> str:
        if entry is None:
            return ""
        same = mine == entry.sha256
        return (
            f"; the shipped model {entry.name} of these settings has sha256 "
            f"{entry.sha256[:12]}…: this machine's "
            + (
                "is the same model, bit for bit"
                if same
                else f"({mine[:12]}…) differs (another CPU rounds differently: docs/numerics.md); "
                "runs start from the shipped one unless --warmstart.no-shipped is given"
            )  # fmt: skip
        )

    return said


def _load(choice: BaseChoice) -> GPT:
    """The cached model of the choice, verified as a checkpoint is (``verify_cache``)."""
    cfg, cache = choice.cfg, choice.cache
    model = cfg.model.build()
    try:
        state = verify_cache(cfg, cache, choice.identity)
        load_model_weights(cache, model, state=state)  # its sha256, finite, fits the model
    except CheckpointError as err:
        raise CheckpointError(
            f"warm start cache: {err}; retrain it with {flag('force', choice.prefix)} (which "
            f"replaces {cache}), or delete that directory"
        ) from None
    sha = state["checksums"]["model.safetensors"]
    print(f"warm start: reusing {cache} ({_format_report(state.get('report', {}))})"
          + _compared(choice)(sha))  # fmt: skip
    model.base_record = shipped.describe_base(
        "cache", sha=sha, cache=cache,
        trained_on=str(state.get("numerics", {}).get("cpu", "unrecorded")),
    )  # fmt: skip
    model.base_report = dict(state.get("report", {}))
    return model.eval()


#: The settings of a warm start that its cache key hashes (the rest: its task's mix, the
#: vocabulary, the kernel path), in the order a mismatch is reported.
TRAINED_WITH = ("task", "task_args", "steps", "schedule_steps", "batch_size", "lr", "seed", "model")


def verify_cache(cfg: WarmstartConfig, cache: Path, identity: dict | None = None) -> dict:
    """The ``state.json`` of the cached model in ``cache``, after checking that it records the
    sha256 of ``model.safetensors`` (``load_model_weights`` compares it) and that the settings
    it was trained with are ``cfg``'s, those its cache key hashes (``identity``: ``cfg``'s
    ``key_inputs()`` when already computed): a model of another task, of another length or
    size, copied into this directory, is refused. ``CheckpointError`` naming the file."""
    state = read_state(cache)
    file = cache / "state.json"
    checksums = state.get("checksums")
    if not (isinstance(checksums, dict) and isinstance(checksums.get("model.safetensors"), str)):
        raise CheckpointError(
            f"{file}: records no sha256 of model.safetensors (damaged, or written by an older "
            "version?), so the cached model cannot be verified"
        )
    try:
        theirs = warmstart_from_record(state.get("config"), cfg.runs_dir).key_inputs()
    except Exception:  # not a dict, unknown fields, a task that does not exist, ...
        raise CheckpointError(
            f"{file}: records no settings of a warm start (damaged or edited?)"
        ) from None
    ours = identity if identity is not None else cfg.key_inputs()
    if cache_key(theirs) != cache_key(ours):
        diff = next((k for k in TRAINED_WITH if ours.get(k) != theirs.get(k)), None)
        # (a schedule as long as the steps is left out of the key: None here)
        what = (
            f" ({diff} {theirs.get(diff)!r}, this cache is for {ours.get(diff)!r})" if diff else ""
        )
        raise CheckpointError(
            f"{file}: the cached model was trained with other settings{what}: copied from "
            "another cache?"
        )
    return state


def _train(cfg: WarmstartConfig, cache: Path) -> GPT:

    torch.manual_seed(cfg.seed)
    model = cfg.model.build()  # re-built after seeding: weights depend on cfg.seed only
    knobs = task_knobs(cfg.task, cfg.task_args)
    mix_task = get_task(cfg.task, **{**knobs, **WARMSTART_MIX.get(cfg.task, {})})
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.01)
    horizon = cfg.schedule_steps or cfg.steps  # a longer schedule: stopped early
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * min(s / horizon, 1.0)))
    )
    model.train()
    start = time.perf_counter()
    bar = progress(cfg.steps, f"warm start {cfg.task}", disable=not cfg.progress)
    for step in range(cfg.steps):
        # Problems of step s come from a generator seeded by (seed, s): deterministic.
        problems = mix_task.sample(cfg.batch_size, warmstart_rng(cfg.seed, step))
        ids, mask, target_mask = _training_batch(mix_task, problems)
        logits = model(ids, attention_mask=mask)[:, :-1]
        targets, weights = ids[:, 1:], target_mask[:, 1:].float()
        nll = F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]).float(), targets.reshape(-1), reduction="none"
        ).view_as(weights)
        loss = (nll * weights).sum() / weights.sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss.item():.3f}")
        bar.update(1)
    bar.close()
    seconds = time.perf_counter() - start
    model.eval()
    task = get_task(cfg.task, **task_knobs(cfg.task, cfg.task_args))
    report = base_success(model, task, cfg.eval_problems)
    report["train_seconds"] = round(seconds, 1)
    state = {
        "config": dataclasses.asdict(cfg),
        "report": report,
        "numerics": cpu_kernels.describe(),
    }
    save_checkpoint(cache, model, None, state)
    model.base_record = shipped.describe_base(
        "trained",
        sha=read_state(cache)["checksums"]["model.safetensors"],
        cache=cache,
        trained_on=cpu_kernels.cpu_name(),
    )
    model.base_report = report
    print(f"warm start: trained {cfg.steps} steps in {seconds:.0f} s → {cache}")
    print(f"warm start: base model on {cfg.task}: {_format_report(report)}")
    return model


def base_success(model: GPT, task, n: int) -> dict[str, float]:
    """Greedy and sampled success of ``model`` on ``n`` held-out problems of the RL task."""
    problems = task.sample(n, held_out_rng())
    return {
        "greedy_success": success_rate(model, task, problems, greedy=True),
        "sampled_success": success_rate(model, task, problems, greedy=False, seed=1),
    }


def _format_report(report: dict) -> str:
    if not report:
        return "no report"
    return (
        f"greedy success {report.get('greedy_success', float('nan')):.2f}, "
        f"sampled success {report.get('sampled_success', float('nan')):.2f}"
    )
