"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/kimi-k3.cpp: the XTML tagged format (``<|open|>t ...<|sep|>`` / ``<|close|>t<|sep|>``): think,
response and tools sections."""

from bankml.chat.chat_peg import tool_parameters
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish

SEP = "<|sep|>"
MSG_START = '<|open|>message role="assistant"<|sep|>'
THINK_START, THINK_END = "<|open|>think<|sep|>", "<|close|>think<|sep|>"
RESP_START, RESP_END = "<|open|>response<|sep|>", "<|close|>response<|sep|>"
TOOLS_START, TOOLS_END = "<|open|>tools<|sep|>", "<|close|>tools<|sep|>"
CALL_START, CALL_END = '<|open|>call tool="', "<|close|>call<|sep|>"
ARG_START, ARG_END = '<|open|>argument key="', "<|close|>argument<|sep|>"
MSG_END, EOM_TOKEN = "<|close|>message<|sep|>", "<|end_of_msg|>"


def detect(source):
    """The ``<|open|>`` / ``<|close|>`` / ``<|end_of_msg|>`` markers are Kimi K3's alone."""
    has = source.__contains__
    return "kimi-k3" if has("<|open|>") and has("<|close|>") and has(EOM_TOKEN) else None


def apply(out, inp):
    defaults(out)
    out.supports_thinking = True
    out.preserved_tokens = ["<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"]
    out.thinking_start_tag, out.thinking_end_tags = THINK_START, [THINK_END]
    out.delimiters = [
        ["assistant", '<|open|>message role="assistant"<|sep|>'],
        ["user", '<|open|>message role="user"<|sep|>'],
        ["tool", '<|open|>message role="tool"'],
        ["system", '<|open|>message role="system"'],
    ]
    if inp.has_continuation():
        out.generation_prompt = MSG_START + THINK_START + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += THINK_END + RESP_START + inp.render_content()
        out.prompt += out.generation_prompt

    def fn(p):
        end = p.end()
        start = p.optional(p.literal(MSG_START))
        body = p.until_one_of([THINK_END, RESP_START])
        think_body = p.reasoning(body) if inp.extract_reasoning else p.content(body)
        # GCC builds the right operand of + first
        think_close = p.optional(p.literal(THINK_END))
        reasoning = p.optional(p.optional(p.literal(THINK_START)) + think_body + think_close)
        resp_close = p.optional(p.literal(RESP_END))
        resp_body = p.content(p.until_one_of([RESP_END, TOOLS_START, MSG_END]))
        response = p.optional(p.literal(RESP_START)) + resp_body + resp_close
        eom = p.optional(p.literal(EOM_TOKEN))
        trailer = p.optional(p.literal(MSG_END)) + eom
        if not inp.tool_calls_enabled:
            return start + reasoning + response + trailer + end
        tool_choices = p.choice()
        for tool in inp.tools:
            fn_ = tool["function"]
            name, schema = fn_["name"], tool_parameters(fn_)
            args = p.eps()
            props = schema.get("properties") if isinstance(schema, dict) else None
            if props:
                arg_choices = p.choice()
                for key, prop in props.items():
                    type_ = prop["type"] if isinstance(prop, dict) and isinstance(prop.get("type"), str) else "string"
                    value = (
                        p.tool_arg_string_value(p.until(ARG_END))
                        if type_ == "string"
                        else p.tool_arg_value(p.until(ARG_END))
                    )
                    close = p.tool_arg_close(p.literal(ARG_END))
                    sep = p.literal(SEP)
                    skip = p.until(SEP)
                    quote = p.literal('"')
                    aname = p.tool_arg_name(p.literal(key))
                    arg = p.tool_arg(p.tool_arg_open(p.literal(ARG_START)) + aname + quote + skip + sep + value + close)
                    arg_choices = arg_choices | p.rule("kimi-k3-arg-%s-%s" % (name, key), arg)
                args = p.zero_or_more(arg_choices)
            close = p.tool_close(p.literal(CALL_END))
            targs = p.tool_args(args)
            sep = p.literal(SEP)
            skip = p.until(SEP)
            quote = p.literal('"')
            tname = p.tool_name(p.literal(name))
            call = p.tool(p.tool_open(p.literal(CALL_START) + tname + quote + skip + sep) + targs + close)
            tool_choices = tool_choices | p.rule("kimi-k3-tool-" + name, call)
        eom2 = p.optional(p.literal(EOM_TOKEN))
        msg_end = p.optional(p.literal(MSG_END))
        tools_end = p.literal(TOOLS_END)
        calls = p.one_or_more(tool_choices)
        section = p.trigger_rule("kimi-k3-tool-call", p.literal(TOOLS_START) + calls + tools_end + msg_end + eom2)
        tools = section if inp.tool_choice == "required" else p.optional(section)
        return start + reasoning + response + tools + trailer + end

    finish(out, fn, inp.tool_calls_enabled, inp.tool_choice != "required", [(TRIGGER_WORD, TOOLS_START)])


FAMILY = Family(("kimi-k3",), detect, apply)
