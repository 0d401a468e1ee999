"""``refimpl/loop.py``'s loop on a Hugging Face model, by hand (no TRL): the loop a reader
copies into their own code. Its stages are loop.py's, in the same order and with the same
names, so the two files read side by side:

    rollout     N prompts × G replies (``model.generate``) ─► rewards (``task.reward``) ─►
                ``hf.rollout_batch`` (logp_old and the full-vocabulary entropy_old in one
                forward pass) ─► dynamic sampling (``batch_stages.keep_groups``)
    prepare     ``batch_stages.prepare_update``: the overlong penalty added to the reward ─►
                ``algo.advantages`` ─► the overlong filter ─► the rollout's constants
    update      ``ppo_epochs`` × ``minibatches`` optimizer steps on whole groups
                (``batch_stages.split_groups``): ``algo.loss`` → backward → clip → Adam

Every switch of the algorithm's ``Config`` acts here as in ``loop.py``: dynamic sampling,
overlong shaping and filter, the generation budget (``Config.for_generation_budget``), the
frozen reference of a KL term, the entropy with gradient for a loss that trains it.

What ``loop.py`` does that this loop does not, and why:

* dynamic sampling drops the uninformative groups but does not resample: the problems are a
  list handed in, ``prompts_per_step`` per rollout, so a rollout trains on fewer groups (none:
  it is skipped) rather than drawing more;
* sampling draws from torch's global generator (``model.generate``), seeded once by the
  caller, not from one stream per step: a run is reproducible from its start, not resumable
  at a step (there are no checkpoints here anyway);
* no Monte-Carlo values of π_old: a Config whose ``values_needed()`` asks for them (VinePPO)
  is refused before anything is generated (``docs/scaleup.md``);
* nothing to set for float32 entropies: ``hf.token_logprobs_and_entropy`` computes the
  log-probs and entropies in float32 whatever dtype the model runs in.

``task`` is anything with ``prompt_text(tokenizer, problem) -> str`` and
``reward(problem, text) -> float`` (for example :class:`refimpl.scaleup.real_task.ChatTask`);
``scripts/experiments/real_model/run_hf_loop.py`` runs it on SmolLM2 and prints the same
before/after table as ``scripts/experiments/real_model/run_trl.py`` (TRL).
"""

from __future__ import annotations

import copy

import torch

from refimpl import algorithms, batch_stages, core
from refimpl.scaleup.hf import refuse_values_needed, rollout_batch, token_logprobs_and_entropy


def rollout(model, tok, task, chunk, algo_cfg, G: int, L_max: int, temperature: float, ref):
    """G replies to each problem of ``chunk`` and their rewards, as a ``RolloutBatch`` of the
    kept groups (with ``Config.dynamic_sampling``: 0 < #successful < G, DAPO Eq. 11), with
    what the update needs of them and the mean reward of every reply; None when no group is
    kept."""
    enc = tok([task.prompt_text(tok, p) for p in chunk], return_tensors="pt", padding=True)
    prompt_ids = enc.input_ids.repeat_interleave(G, dim=0)  # each prompt G times, in a row
    prompt_mask = enc.attention_mask.repeat_interleave(G, dim=0)
    eos = tok.eos_token_id
    model.eval()
    with torch.no_grad():  # no top-k/top-p: H_old is the sampling distribution's
        seqs = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask, do_sample=True,
                              temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=L_max,
                              eos_token_id=eos, pad_token_id=tok.pad_token_id)  # fmt: skip
    P = prompt_ids.shape[1]
    texts = tok.batch_decode(seqs[:, P:], skip_special_tokens=True)
    outcome = torch.tensor([task.reward(chunk[i // G], t) for i, t in enumerate(texts)])
    # logp_old and the full-vocabulary entropy_old of every reply token, in one pass.
    batch = rollout_batch(model, prompt_ids, prompt_mask, seqs, outcome, G, eos,
                          temperature=temperature, ref_model=ref)  # fmt: skip
    keep = batch_stages.keep_groups(batch.rewards, G, algo_cfg)  # [N] bool: all, unless asked
    if not keep.any():
        return None
    rows = keep.repeat_interleave(G)
    truncated = ~(seqs[:, P:] == eos).any(dim=1)  # no EOS within the budget L_max
    reward = float(outcome.mean())  # of every reply, kept or not
    return batch.select_groups(keep), seqs[rows], prompt_mask[rows], truncated[rows], P, reward


def update(model, optimizer, algo, prepared: batch_stages.Update, seqs, prompt_mask, forward_mask,
           P, ppo_epochs: int, minibatches: int, grad_clip: float, temperature: float):  # fmt: skip
    """``ppo_epochs`` passes over the batch, each in ``minibatches`` optimizer steps on whole
    groups; yields each optimizer step's metrics. ``forward_mask``: the replies' tokens (the
    loss mask ``prepared.batch.response_mask`` may have dropped truncated rows, the forward
    pass not)."""
    model.train()
    A, algo_cfg = prepared.advantages, prepared.cfg  # cfg: whole-rollout constants (STEER's |Ω|)
    for _epoch in range(ppo_epochs):
        for minibatch, rows in batch_stages.minibatches(prepared.batch, minibatches):
            attention = torch.cat([prompt_mask[rows], forward_mask[rows].long()], dim=1)
            logp, H = token_logprobs_and_entropy(model, seqs[rows], attention, P,
                                                 temperature=temperature)  # fmt: skip
            if not algo_cfg.differentiates_entropy():  # gradient only for an entropy bonus
                H = H.detach()
            loss, metrics = algo.loss(minibatch, logp, A[rows], algo_cfg, entropy=H)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            optimizer.step()
            entropy = float(core.masked_mean(H.detach(), minibatch.response_mask))
            yield {"loss": float(loss.detach()), "grad_norm": float(grad_norm),
                   "entropy": entropy, **metrics}  # fmt: skip
    model.eval()


def train_hf_loop(model, tok, task, problems, algorithm=algorithms.BASELINE, prompts_per_step=8,
                  group_size=8, rollouts=4, minibatches=4, max_new_tokens=12, lr=2e-5, cfg=None,
                  progress=False, *, ppo_epochs=1, grad_clip=1.0, temperature=1.0):  # fmt: skip
    """Train ``model`` in place on ``rollouts`` rollouts of ``prompts_per_step`` problems each;
    return one dict of metrics per optimizer step (``progress``: also print each one)."""
    G, L_max = group_size, max_new_tokens
    algo = algorithms.get(algorithm)
    algo_cfg = (cfg or algo.Config()).for_generation_budget(L_max)  # Dr. GRPO's L_max
    refuse_values_needed(algo_cfg, "cfg", "HF")  # VinePPO's values: not sampled here
    # π_ref of a KL term: the frozen starting policy.
    ref = copy.deepcopy(model).eval().requires_grad_(False) if algo_cfg.needs_reference() else None
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    log = []
    for r in range(rollouts):
        chunk = problems[r * prompts_per_step : (r + 1) * prompts_per_step]
        kept = rollout(model, tok, task, chunk, algo_cfg, G, L_max, temperature, ref)
        if kept is None:  # every group uninformative: nothing to train on
            continue
        batch, seqs, prompt_mask, truncated, P, reward = kept
        # loop.py's stages in its order: reward shaping (DAPO Eq. 13) when the Config asks,
        # success staying the outcome's ─► algo.advantages, [B, T], from the whole rollout ─►
        # DAPO's overlong filter (truncated rows leave the loss, after they counted in A) ─►
        # the whole rollout's constants.
        prepared = batch_stages.prepare_update(
            algo, batch, algo_cfg, max_len=L_max, truncated=truncated
        )
        for metrics in update(model, optimizer, algo, prepared, seqs, prompt_mask,
                              batch.response_mask, P, ppo_epochs, minibatches, grad_clip,
                              temperature):  # fmt: skip
            log.append({"rollout": r, "reward": reward, **metrics})
            if progress:
                print(f"rollout {r + 1}/{rollouts} step {len(log)}:",
                      {k: round(float(v), 4) for k, v in log[-1].items() if k != "rollout"},
                      flush=True)  # fmt: skip
    return log
