"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/cohere2moe.cpp (Cohere2 MoE / North Code): a marker-wrapped turn, the thinking block, then
``<|START_TEXT|>`` content or ``<|START_ACTION|>[...]`` JSON tool calls."""

from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish

TURN_START, TURN_END = "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>"
CHATBOT, USER, SYSTEM = "<|CHATBOT_TOKEN|>", "<|USER_TOKEN|>", "<|SYSTEM_TOKEN|>"
THINK_START, THINK_END = "<|START_THINKING|>", "<|END_THINKING|>"
TEXT_START, TEXT_END = "<|START_TEXT|>", "<|END_TEXT|>"
ACTION_START, ACTION_END = "<|START_ACTION|>", "<|END_ACTION|>"
RESULT_START, RESULT_END = "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>"
GEN_PREFIX = TURN_START + CHATBOT


def detect(source):
    """``<|START_TEXT|>`` is this template's alone (the older Command-R templates use ``<|START_RESPONSE|>``)."""
    return "cohere2moe" if TEXT_START in source and ACTION_START in source else None


def apply(out, inp):
    defaults(out)
    out.supports_thinking = True
    out.thinking_start_tag, out.thinking_end_tags = THINK_START, [THINK_END]
    out.preserved_tokens = [
        TURN_START,
        TURN_END,
        CHATBOT,
        USER,
        SYSTEM,
        THINK_START,
        THINK_END,
        TEXT_START,
        TEXT_END,
        ACTION_START,
        ACTION_END,
        RESULT_START,
        RESULT_END,
    ]
    out.delimiters = [
        ["assistant", GEN_PREFIX],
        ["user", TURN_START + USER],
        ["tool", TURN_START + SYSTEM + RESULT_START],
        ["system", TURN_START + SYSTEM],
    ]
    include_grammar = inp.has_response_format or inp.tool_calls_enabled
    if inp.has_continuation():
        out.generation_prompt = GEN_PREFIX + THINK_START + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += THINK_END + TEXT_START + inp.render_content()
        out.prompt += out.generation_prompt

    def fn(p):
        generation_prompt = p.literal(GEN_PREFIX)
        end = p.end()
        reasoning = p.eps()
        # GCC builds the right operand of + first
        close = p.optional(p.literal(THINK_END))
        body = p.until_one_of([THINK_END, TEXT_START, ACTION_START])
        if inp.extract_reasoning:
            reasoning = p.optional(p.literal(THINK_START) + p.reasoning(body) + close)
        else:
            reasoning = p.optional(p.content(p.literal(THINK_START) + body + close))
        text_close = p.optional(p.literal(TEXT_END))
        if inp.has_response_format:
            text = p.content(p.schema(p.json(), "response-format-schema", inp.json_schema))
        else:
            text = p.content(p.until(TEXT_END))
        text_content = p.literal(TEXT_START) + text + text_close
        if not inp.tool_calls_enabled:
            turn_end = p.optional(p.literal(TURN_END))
            return generation_prompt + reasoning + text_content + turn_end + end
        tool_calls = p.standard_json_tools(
            ACTION_START,
            ACTION_END,
            inp.tools,
            inp.parallel_tool_calls,
            True,
            "tool_name",
            "parameters",
            True,
            False,
            "",
            "tool_call_id",
            ["tool_call_id", "tool_name", "parameters"],
        )
        body_ = tool_calls if inp.tool_choice == "required" else p.choice([tool_calls, text_content])
        turn_end = p.optional(p.literal(TURN_END))
        return generation_prompt + reasoning + body_ + turn_end + end

    lazy = not inp.has_response_format and inp.tool_choice == "auto"
    finish(out, fn, include_grammar, lazy, [(TRIGGER_WORD, ACTION_START)], inp=inp)


FAMILY = Family(("cohere2moe",), detect, apply)
