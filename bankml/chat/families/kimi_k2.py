"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/kimi-k2.cpp: ``<think>`` reasoning, ``<|tool_calls_section_begin|>`` sections of
``<|tool_call_begin|>functions.<name>:<n><|tool_call_argument_begin|>{...}<|tool_call_end|>`` calls."""

from bankml.chat.chat_peg import tool_parameters
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish

SECTION_BEGIN, SECTION_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
CALL_BEGIN, ARGS_BEGIN, CALL_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
THINK_START, THINK_END = "<think>", "</think>"
GEN_PROMPT = "<|im_assistant|>assistant<|im_middle|>"


def detect(source):
    return "kimi-k2" if SECTION_BEGIN in source and CALL_BEGIN in source else None


def apply(out, inp):
    defaults(out)
    out.supports_thinking = True
    out.preserved_tokens = [SECTION_BEGIN, SECTION_END, CALL_BEGIN, ARGS_BEGIN, CALL_END, THINK_START, THINK_END]
    out.thinking_start_tag, out.thinking_end_tags = THINK_START, [THINK_END]
    if inp.has_continuation():
        out.generation_prompt = GEN_PROMPT + THINK_START + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += THINK_END + inp.render_content()
        out.prompt += out.generation_prompt

    def fn(p):
        end = p.end()
        if not inp.extract_reasoning:
            reasoning = p.eps()
        else:
            # GCC builds the right operand of + first
            close = p.optional(p.literal(THINK_END))
            body = p.reasoning(p.until_one_of([THINK_END, SECTION_BEGIN, CALL_BEGIN]))
            reasoning = p.optional(THINK_START + body + close)
        generation_prompt = p.literal(GEN_PROMPT)
        if not inp.tool_calls_enabled:
            return generation_prompt + reasoning + p.content(p.rest()) + end
        tool_choice = p.choice()
        for tool in inp.tools:
            fn_ = tool["function"]
            name, schema = fn_["name"], tool_parameters(fn_)
            digits = p.chars("[0-9]", 1, 3 if inp.strict_tools else -1)  # strict: the call index, bounded
            colon = p.literal(":")
            tname = p.tool_name(p.literal(name))
            tool_id = p.tool_id(p.literal("functions.") + tname + colon + digits)
            close = p.tool_close(p.optional(p.literal(CALL_END)))
            args = p.tool_args(p.schema(p.json(), "tool-" + name + "-schema", schema))
            open_ = p.tool_open(tool_id + p.literal(ARGS_BEGIN))
            tool_choice = tool_choice | p.rule("tool-" + name, p.tool(open_ + args + close))
        min_calls = 1 if inp.tool_choice == "required" else 0
        max_calls = -1 if inp.parallel_tool_calls else 1
        section_end = p.optional(p.literal(SECTION_END))
        calls = p.trigger_rule("tool-call", p.repeat(CALL_BEGIN + tool_choice, min_calls, max_calls) + section_end)
        tool_calls = p.rule("tool-calls", p.optional(p.literal(SECTION_BEGIN)) + calls)
        if inp.forced:  # strict mode: the calls right after the reasoning
            return generation_prompt + reasoning + p.space() + tool_calls + end
        content_before_tools = p.content(p.until_one_of([SECTION_BEGIN, CALL_BEGIN]))
        return generation_prompt + reasoning + content_before_tools + tool_calls + end

    finish(out, fn, inp.tool_calls_enabled, inp.tool_choice == "auto", [(TRIGGER_WORD, CALL_BEGIN)], inp=inp)


FAMILY = Family(("kimi-k2",), detect, apply)
