"""Group sampling for RL: ``G`` completions per prompt, with the rollout policy's records
(``logp_old``, ``entropy_old``), and the same two numbers for the policy being trained.

    groups        what a reader follows: Samples (what is recorded), sample_groups,
                  policy_logprobs; seeded streams and stacking of sample batches
    distribution  the distribution one token is drawn from (temperature, top-k / top-p) and
                  what is recorded of it; the entropy; the bounds of --temperature and --top-p
    checks        the arguments of sample_groups and policy_logprobs, checked first
    decoding      the machinery of speed: the decoding loop with its KV caches (prompts
                  prefilled once per group, the shared-prefix cache, finished rows left out)
                  and policy_logprobs's forward pass with each group's prompt run once
    monte_carlo_values  the credit oracle: the value of every prefix by K rollouts from it,
                  and so each token's true advantage (VinePPO's values, the loop's; the
                  credit study's measure)

This file imports nothing: callers import a name from the module that defines it.
"""
