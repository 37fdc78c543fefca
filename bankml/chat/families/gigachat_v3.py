"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/gigachat-v3.cpp."""

from bankml.chat.chat_peg import tool_parameters
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish

TOOL_CALL_START_PREFIX = "<|message_sep|>\n\nfunction call<|role_sep|>\n"


def detect(source):
    has = source.__contains__
    return "gigachat-v3" if has("<|role_sep|>") and has("<|message_sep|>") and not has("<|function_call|>") else None


def apply(out, inp):
    defaults(out)
    out.preserved_tokens = ["<|message_sep|>\n\n", "<|role_sep|>\n"]
    if inp.has_continuation():
        out.generation_prompt = "assistant<|role_sep|>\n" + inp.render_content()
        out.prompt += out.generation_prompt
    include_grammar = [inp.tool_calls_enabled]

    def fn(p):
        ret = p.eps()
        if inp.tool_calls_enabled:
            tool_choice = p.choice()
            for tool in inp.tools:
                fn_ = tool["function"]
                name, schema = fn_["name"], tool_parameters(fn_)
                tool_name = p.json_member("name", '"' + p.tool_name(p.literal(name)) + '"')
                tool_args = p.json_member(
                    "arguments", p.tool_args(p.schema(p.json(), "tool-" + name + "-schema", schema))
                )
                tool_open = p.tool_open(p.literal("{") << tool_name)
                tool_choice = tool_choice | p.rule("tool-" + name, tool_open << "," << tool_args << "}")
            min_calls = 1 if inp.tool_choice == "required" else 0
            tool_call = p.rule("tool-call", p.literal(TOOL_CALL_START_PREFIX) + tool_choice)
            tool_calls = p.trigger_rule("tool-call-root", p.repeat(tool_call, min_calls, 1))
            if inp.forced:  # strict mode: the call right away
                ret = tool_calls
            else:
                ret = p.content(p.until("<|message_sep|>\n\n")) << tool_calls
        else:
            include_grammar[0] = False
            ret = p.content(p.rest())
        return p.literal("assistant<|role_sep|>\n") + ret

    lazy = inp.has_tools and inp.tool_choice == "auto"
    finish(out, fn, include_grammar, lazy, [(TRIGGER_WORD, TOOL_CALL_START_PREFIX)], inp=inp)


FAMILY = Family(("gigachat-v3",), detect, apply)
