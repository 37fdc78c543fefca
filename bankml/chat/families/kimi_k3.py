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
            if inp.strict_tools:
                args, props = _strict_args(p, fn_), None
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
            if inp.strict_tools:  # the call's index, as the template writes it
                skip = p.literal(' index="') + p.chars("[0-9]", 1, 3) + p.literal('"')
            quote = p.literal('"')
            tname = p.tool_name(p.literal(name))
            call = p.tool(p.tool_open(p.literal(CALL_START) + tname + quote + skip + sep) + targs + close)
            tool_choices = tool_choices | p.rule("kimi-k3-tool-" + name, call)
        eom2 = p.optional(p.literal(EOM_TOKEN))
        msg_end = p.optional(p.literal(MSG_END))
        tools_end = p.literal(TOOLS_END)
        calls = inp.calls(p, tool_choices) if inp.strict_tools else p.one_or_more(tool_choices)
        section = p.trigger_rule("kimi-k3-tool-call", p.literal(TOOLS_START) + calls + tools_end + msg_end + eom2)
        tools = section if inp.tool_choice == "required" else p.optional(section)
        if inp.forced:  # strict mode: no response text, the calls right after the reasoning
            empty_response = p.optional(p.literal(RESP_START) + p.literal(RESP_END))
            return start + reasoning + empty_response + p.space() + tools + end
        return start + reasoning + response + tools + trailer + end

    finish(out, fn, inp.tool_calls_enabled, inp.tool_choice != "required", [(TRIGGER_WORD, TOOLS_START)], inp=inp)


def _type_name(schema, is_string):
    """The ``type`` attribute the template writes for a parameter (integers as "number")."""
    if is_string:
        return "string"
    t = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(t, list):
        t = next((x for x in t if isinstance(x, str) and x != "null"), "null")
    if t == "integer":
        return "number"
    return t if t in ("number", "boolean", "array", "object", "null") else "object"


def _strict_args(p, fn_):
    """Strict tool-call mode: the arguments in schema order, each with its type attribute, a string node's
    value raw text, any other canonical JSON."""
    params = tool_parameters(fn_)
    props = params.get("properties") or {}
    items = []
    for param in p.strict_params(fn_):
        rule = "kimi-k3-arg-%s-%s" % (fn_["name"], param.name)
        string_value = p.tool_arg_string_value(p.until(ARG_END))
        value, is_string = p.strict_value(fn_, param, rule + "-schema", string_value, ARG_END)
        close = p.tool_arg_close(p.literal(ARG_END))
        attr = p.literal('" type="%s"' % _type_name(props.get(param.name), is_string) + SEP)
        aname = p.tool_arg_name(p.literal(param.name))
        arg = p.tool_arg(p.tool_arg_open(p.literal(ARG_START)) + aname + attr + value + close)
        items.append((p.rule(rule, arg), param.required))
    return p.strict_sequence(items)


FAMILY = Family(("kimi-k3",), detect, apply)
