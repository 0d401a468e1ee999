"""The HF path by hand: generate → ``rollout_batch`` → advantages → loss → optimizer step.

No TRL: the training loop a reader copies into their own code. ``task`` is anything with
``prompt_text(tokenizer, problem) -> str`` and ``reward(problem, text) -> float`` (for example
:class:`refimpl.scaleup.real_task.ChatTask`); ``scripts/real_model_hf_loop.py`` runs it on SmolLM2 and
prints the same before/after table as ``scripts/real_model.py`` (TRL).
"""

from __future__ import annotations

import copy

import torch

from refimpl import algorithms, core, mechanisms
from refimpl.scaleup.hf import rollout_batch, token_logprobs_and_entropy


def train_hf_loop(model, tok, task, problems, algorithm="gtpo", prompts_per_step=8, group_size=8,
                  rollouts=4, minibatches=4, max_new_tokens=12, lr=2e-5, cfg=None,
                  progress=False):  # fmt: skip
    """Train ``model`` in place; return one dict of metrics per optimizer step (``progress``:
    also print each one)."""
    G = group_size  # G completions per prompt, prompts_per_step prompts per rollout
    algo = algorithms.get(algorithm)
    cfg = cfg or algo.Config()
    ref = copy.deepcopy(model).eval().requires_grad_(False) if cfg.needs_reference() else None
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    eos, log = tok.eos_token_id, []
    for r in range(rollouts):
        chunk = problems[r * prompts_per_step : (r + 1) * prompts_per_step]
        enc = tok([task.prompt_text(tok, p) for p in chunk], return_tensors="pt", padding=True)
        prompt_ids = enc.input_ids.repeat_interleave(G, dim=0)  # each prompt G times, in a row
        prompt_mask = enc.attention_mask.repeat_interleave(G, dim=0)
        model.eval()
        with torch.no_grad():  # T = 1, no top-k/top-p: H_old is the sampling distribution's
            seqs = model.generate(input_ids=prompt_ids, attention_mask=prompt_mask,
                                  do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                  max_new_tokens=max_new_tokens, eos_token_id=eos,
                                  pad_token_id=tok.pad_token_id)  # fmt: skip
        P = prompt_ids.shape[1]
        texts = tok.batch_decode(seqs[:, P:], skip_special_tokens=True)
        rewards = [task.reward(chunk[i // G], t) for i, t in enumerate(texts)]
        # logp_old and the full-vocabulary entropy_old of every reply token, in one pass.
        batch = rollout_batch(model, prompt_ids, prompt_mask, seqs, rewards, G, eos, ref_model=ref)
        keep = mechanisms.keep_groups(batch.rewards, G, cfg)  # DAPO's filter when the Config asks
        if not keep.any():
            continue
        batch, rows = batch.select_groups(keep), keep.repeat_interleave(G)
        seqs, prompt_mask = seqs[rows], prompt_mask[rows]
        adv = algo.advantages(batch, cfg)  # [B, T] token advantages, from the whole rollout
        update_cfg = cfg.for_update(batch, adv)  # whole-rollout constants a minibatch lacks
        model.train()
        # Several optimizer steps per rollout, each on some whole groups: after the first,
        # π_θ ≠ π_old, so the ratios move off 1 and the clip (and TEPO's mask) can act.
        for groups in torch.randperm(batch.num_groups).chunk(minibatches):
            sel = torch.zeros(batch.num_groups, dtype=torch.bool)
            sel[groups] = True
            mb, r_ = batch.select_groups(sel), sel.repeat_interleave(G)
            attn = torch.cat([prompt_mask[r_], mb.response_mask.long()], dim=1)
            logp, entropy = token_logprobs_and_entropy(model, seqs[r_], attn, P)
            if not cfg.differentiates_entropy():  # gradient only for an entropy bonus
                entropy = entropy.detach()
            loss, metrics = algo.loss(mb, logp, adv[r_], update_cfg, entropy=entropy)
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            log.append({"rollout": r, "reward": sum(rewards) / len(rewards),
                        "entropy": float(core.masked_mean(entropy.detach(), mb.response_mask)),
                        **metrics})  # fmt: skip
            if progress:
                print(f"rollout {r + 1}/{rollouts} step {len(log)}:",
                      {k: round(float(v), 4) for k, v in log[-1].items() if k != "rollout"},
                      flush=True)  # fmt: skip
    return log
