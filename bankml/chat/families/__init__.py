"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

llama.cpp's hand-written chat handlers (``common/parsers/*.cpp``), one module each. A handler's ``apply(out,
inp)`` completes the ``ChatPrompt`` ``out`` (prompt and generation prompt rendered by ``bankml.chat.template``, with the
message rewrites the C++ does first) as ``common_chat_params_init_<name>`` does: the continuation prompt, the
format, thinking support and tags, preserved tokens, delimiters, the parser (one arena built with
``bankml.chat.chat_peg``) and its grammar (``build_grammar``), lazy flag and triggers. What they share is
``common``.
"""

from bankml.chat.families import (
    cohere2moe,
    deepseek_v3_2,
    functionary_v3_2,
    gemma4,
    gigachat_v3,
    gpt_oss,
    kimi_k2,
    kimi_k3,
    lfm2,
    ling3,
    minicpm5,
    minimax_m3,
    ministral_3,
    muse_glimmer,
    qwen3_coder,
)
from bankml.chat.families.common import (
    TRIGGER_PATTERN,
    TRIGGER_PATTERN_FULL,
    TRIGGER_TOKEN,
    TRIGGER_WORD,
    Inputs,
    defaults,
    finish,
)

__all__ = [
    "HANDLERS",
    "Inputs",
    "TRIGGER_PATTERN",
    "TRIGGER_PATTERN_FULL",
    "TRIGGER_TOKEN",
    "TRIGGER_WORD",
    "apply",
    "defaults",
    "finish",
    "ported",
    "prompt_key",
]

# handler name -> its module (the ported ones)
HANDLERS = {
    "gigachat-v3": gigachat_v3,
    "functionary-v3-2": functionary_v3_2,
    "lfm2": lfm2,
    "lfm2.5": lfm2,
    "ministral-3": ministral_3,
    "kimi-k2": kimi_k2,
    "cohere2moe": cohere2moe,
    "muse-glimmer": muse_glimmer,
    "minicpm5": minicpm5,
    "gpt-oss": gpt_oss,
    "kimi-k3": kimi_k3,
    "ling3": ling3,
    "deepseek-v3.2": deepseek_v3_2,
    "minimax-m3": minimax_m3,
    "gemma4": gemma4,
    "qwen3-coder": qwen3_coder,
}


def ported(handler):
    return handler in HANDLERS


def prompt_key(handler, prompt):
    """What of the rendered prompt a handler reads (``bankml.chat.template`` keys its cache of the handler's
    results on it): Gemma 4 whether the prompt ends a turn, the others nothing."""
    if handler == "gemma4":
        return prompt.endswith("<turn|>\n")
    return None


def apply(out, inp):
    HANDLERS[inp.handler].apply(out, inp)
