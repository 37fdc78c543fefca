"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

llama.cpp's hand-written chat handlers (``common/parsers/*.cpp``), one module per model family holding all that
family's chat knowledge (its ``FAMILY``, a ``common.Family``): the detection of its templates, the message rewrites
and prompt fix done before and after rendering, the handler, and its own mapper when it has one.

A handler's ``apply(out, inp)`` completes the ``ChatPrompt`` ``out`` (prompt and generation prompt rendered by
``bankml.chat.template`` over the messages the family's ``rewrite`` gave) as ``common_chat_params_init_<name>``
does: the continuation prompt, the format, thinking support and tags, preserved tokens, delimiters, the parser
(one arena built with ``bankml.chat.chat_peg``) and its grammar (``build_grammar``), lazy flag and triggers.
What they share is ``common``.

``FAMILIES`` keeps the order of llama.cpp's ``common_chat_try_specialized_template``: ``detect(source)`` is the
first family's answer. Must not import ``bankml.chat.template``.
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
    Family,
    Inputs,
    defaults,
    finish,
    preserve_trigger_words,
    strict_triggers,
)

__all__ = [
    "FAMILIES",
    "Family",
    "HANDLERS",
    "Inputs",
    "TRIGGER_PATTERN",
    "TRIGGER_PATTERN_FULL",
    "TRIGGER_TOKEN",
    "TRIGGER_WORD",
    "apply",
    "defaults",
    "detect",
    "finish",
    "fix_prompt",
    "ported",
    "prompt_key",
    "rewrite",
    "preserve_trigger_words",
    "strict_triggers",
]

# common_chat_try_specialized_template's order (the first match wins; LFM2's module detects LFM2, then LFM2.5)
FAMILIES = (
    ministral_3.FAMILY,
    gpt_oss.FAMILY,
    muse_glimmer.FAMILY,
    functionary_v3_2.FAMILY,
    kimi_k2.FAMILY,
    kimi_k3.FAMILY,
    ling3.FAMILY,
    cohere2moe.FAMILY,
    lfm2.FAMILY,
    gigachat_v3.FAMILY,
    minimax_m3.FAMILY,
    deepseek_v3_2.FAMILY,
    gemma4.FAMILY,
    minicpm5.FAMILY,
    qwen3_coder.FAMILY,
)

# handler name -> its family
HANDLERS = {name: family for family in FAMILIES for name in family.names}


def detect(source):
    """The name of the hand-written handler llama.cpp picks for this template source
    (common_chat_try_specialized_template), or None when the differential analysis builds the parser."""
    for family in FAMILIES:
        name = family.detect(source)
        if name is not None:
            return name
    return None


def ported(handler):
    return handler in HANDLERS


def rewrite(messages, inp):
    """``(messages, override, context)``: the messages (JSON form) the handler ``inp.handler`` renders, whether
    as they are (``override``), and the variables it adds (or None)."""
    return HANDLERS[inp.handler].rewrite(messages, inp)


def fix_prompt(prompt, inp):
    """The rendered prompt as the handler ``inp.handler`` keeps it."""
    return HANDLERS[inp.handler].fix_prompt(prompt, inp)


def prompt_key(handler, prompt):
    """What of the rendered prompt a handler reads (``bankml.chat.template`` keys its cache of the handler's
    results on it): Gemma 4 whether the prompt ends a turn, the others nothing."""
    return HANDLERS[handler].prompt_key(prompt)


def apply(out, inp):
    HANDLERS[inp.handler].apply(out, inp)
