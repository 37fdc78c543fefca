"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/lfm2.cpp (LFM2 and LFM2.5): optional ``<think>`` reasoning, Python-style tool calls in
``<|tool_call_start|>[...]<|tool_call_end|>``."""

from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish

TOOL_CALL_START, TOOL_CALL_END = "<|tool_call_start|>", "<|tool_call_end|>"
TOOL_LIST_START, TOOL_LIST_END = "<|tool_list_start|>", "<|tool_list_end|>"
THINK_START, THINK_END = "<think>", "</think>"
GEN_PROMPT = "<|im_start|>assistant\n"


def detect(source):
    """LFM2 (is_lfm2_template: the tool-list tokens), then LFM2.5 (a plain ``List of tools: [`` without them)."""
    if TOOL_LIST_START in source and TOOL_LIST_END in source:
        return "lfm2"
    if "List of tools: [" in source and TOOL_LIST_START not in source:
        return "lfm2.5"
    return None


def rewrite(messages, inp):
    """The messages rendered as they are, each one's reasoning also as ``thinking``."""
    override = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("reasoning_content"), str):
            m["thinking"] = m["reasoning_content"]
        override.append(m)
    return override, True, None


def apply(out, inp):
    defaults(out)
    out.supports_thinking = True
    out.preserved_tokens = [TOOL_CALL_START, TOOL_CALL_END, THINK_START, THINK_END]
    if inp.handler == "lfm2":
        out.preserved_tokens += [TOOL_LIST_START, TOOL_LIST_END]
    out.thinking_start_tag, out.thinking_end_tags = THINK_START, [THINK_END]
    has_response_format = isinstance(inp.json_schema, dict)
    extract_reasoning = inp.extract_reasoning and THINK_START in inp.source
    include_grammar = has_response_format or inp.tool_calls_enabled
    if inp.has_continuation():
        out.generation_prompt = GEN_PROMPT + THINK_START + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += THINK_END + inp.render_content()
        out.prompt += out.generation_prompt

    def fn(p):
        generation_prompt = p.literal(GEN_PROMPT)
        end = p.end()
        reasoning = p.eps()
        if extract_reasoning:
            reasoning = p.optional(THINK_START + p.reasoning(p.until(THINK_END)) + THINK_END)
        if not inp.tool_calls_enabled:
            if has_response_format:
                response_format = p.content(p.schema(p.json(), "response-format-schema", inp.json_schema))
                return generation_prompt + reasoning + response_format + end
            content = p.content(p.rest())
            return generation_prompt + reasoning + content + end
        close = p.literal(TOOL_CALL_END)
        if inp.strict_tools:
            calls = p.strict_python_calls(inp.tools, inp.parallel_tool_calls)
        else:
            calls = p.python_style_tool_calls(inp.tools, inp.parallel_tool_calls, True)
        tool_calls = p.rule("tool-calls", p.trigger_rule("tool-call", p.literal(TOOL_CALL_START) + calls + close))
        if inp.forced:  # strict mode: the calls right after the reasoning
            return generation_prompt + reasoning + p.space() + tool_calls + end
        content = p.content(p.until(TOOL_CALL_START))
        return generation_prompt + reasoning + content + tool_calls + end

    lazy = not (has_response_format or (inp.has_tools and inp.tool_choice == "required"))
    finish(out, fn, include_grammar, lazy, [(TRIGGER_WORD, TOOL_CALL_START)], inp=inp)


FAMILY = Family(("lfm2", "lfm2.5"), detect, apply, rewrite=rewrite)
