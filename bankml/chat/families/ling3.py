"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/ling3.cpp (Ling 3.0 / Bailing V3): ``<role>X</role>`` sections, ``<think>`` reasoning that a
tool call may end, ``<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`` calls."""

from bankml.chat.chat_peg import function_parameters, parameter_source
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish
from bankml.schema.queries import TYPE_STRING, value_types

ROLE, THINK_START, THINK_END = "<role>ASSISTANT</role>", "<think>", "</think>"
CALL_START, CALL_END = "<tool_call>", "</tool_call>"
ARG_KEY, ARG_KEY_END, ARG_VAL, ARG_VAL_END = "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"
ROLE_END = "<|role_end|>"


def detect(source):
    """Ling 3.0 / Bailing V3: ``<role>`` sections are this family's alone among the tagged-argument templates."""
    return "ling3" if ROLE in source and ARG_KEY in source else None


def apply(out, inp):
    defaults(out)
    out.supports_thinking = True
    out.preserved_tokens = [
        THINK_START,
        THINK_END,
        CALL_START,
        CALL_END,
        ARG_KEY,
        ARG_KEY_END,
        ARG_VAL,
        ARG_VAL_END,
        ROLE_END,
    ]
    out.thinking_start_tag, out.thinking_end_tags = THINK_START, [THINK_END, CALL_START]
    out.delimiters = [
        ["assistant", "<role>ASSISTANT</role>"],
        ["user", "<role>HUMAN</role>"],
        ["tool", "<role>OBSERVATION</role>"],
        ["system", "<role>SYSTEM</role>"],
    ]
    out.additional_stops = [ROLE_END]
    if inp.has_continuation():
        out.generation_prompt = ROLE + "\n" + THINK_START + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += THINK_END + inp.render_content()
        out.prompt += out.generation_prompt
    if inp.has_continuation():
        think_open = not inp.continue_content
    else:
        last_open, last_close = out.generation_prompt.rfind(THINK_START), out.generation_prompt.rfind(THINK_END)
        think_open = last_open >= 0 and (last_close < 0 or last_open > last_close)

    def fn(p):
        end = p.end()
        opener = p.optional(p.literal(ROLE) + p.optional(p.space()))
        body_end = p.until_one_of([THINK_END, CALL_START]) if think_open else p.until_one_of([THINK_END])
        think_body = p.reasoning(body_end) if inp.extract_reasoning else p.content(body_end)
        # GCC builds the right operand of + first
        think_close = p.optional(p.literal(THINK_END))
        reasoning = p.optional(p.optional(p.literal(THINK_START)) + think_body + think_close)
        content = p.optional(p.content(p.until_one_of([CALL_START])))
        role_end = p.optional(p.literal(ROLE_END))
        tail = p.optional(p.content(p.until(ROLE_END))) + role_end
        if not inp.tool_calls_enabled:
            return opener + reasoning + tail + end
        tool_choices = p.choice()
        arg_close = p.tool_arg_close(p.literal(ARG_VAL_END))
        arg_string = p.rule("ling3-arg-string", p.tool_arg_string_value(p.until(ARG_VAL_END)) + arg_close)
        for tool in inp.tools:
            fn_ = tool["function"]
            name = fn_["name"]
            required, optional = [], []
            for pname, node, is_required in () if inp.strict_tools else function_parameters(fn_):
                rule_name = "ling3-arg-%s-%s" % (name, pname)
                types = value_types(node)
                value = p.eps()
                if TYPE_STRING not in types:
                    value = (
                        p.tool_arg_json_value(
                            p.schema(
                                p.json(), rule_name + "-schema", None, node=node, source=parameter_source(fn_, pname)
                            )
                        )
                        + arg_close
                    )
                elif types == {TYPE_STRING}:
                    value = arg_string
                else:
                    typed = p.atomic(
                        p.tool_arg_json_value(
                            p.schema(
                                p.json(), rule_name + "-schema", None, node=node, source=parameter_source(fn_, pname)
                            )
                        )
                        + arg_close
                    )
                    value = p.gbnf(typed | arg_string, "ling3-arg-string")
                lit_val = p.literal(ARG_VAL)
                sp = p.optional(p.space())
                key_end = p.literal(ARG_KEY_END)
                aname = p.tool_arg_name(p.literal(pname))
                arg_open = p.tool_arg_open(p.literal(ARG_KEY) + aname + key_end)
                targ = p.tool_arg(arg_open + sp + lit_val + value)
                arg = p.rule(rule_name, p.optional(p.space()) + targ)
                (required if is_required else optional).append(arg)
            args = p.permute("ling3-%s-args" % name, required)
            if optional:
                args = args + p.zero_or_more(p.choice(optional))
            if inp.strict_tools:
                args = _strict_args(p, fn_, arg_close)
            call_end = p.literal(CALL_END)
            close = p.tool_close(p.optional(p.space()) + call_end)
            targs = p.tool_args(args)
            sp = p.optional(p.space())
            tname = p.tool_name(p.literal(name))
            call = p.tool(p.tool_open(p.literal(CALL_START) + tname + sp) + targs + close)
            tool_choices = tool_choices | p.rule("ling3-tool-" + name, call)
        calls = tool_choices + p.zero_or_more(p.space() + tool_choices) if inp.parallel_tool_calls else tool_choices
        role_end2 = p.optional(p.literal(ROLE_END))
        trailing = p.optional(p.content(p.until(ROLE_END)))
        if inp.strict_tools:  # strict mode: no text after the calls
            section = p.trigger_rule("ling3-tool-call", calls + p.space() + role_end2)
        else:
            section = p.trigger_rule("ling3-tool-call", calls + p.space() + trailing + role_end2)
        tools = section if inp.tool_choice == "required" else p.optional(section)
        if inp.forced:  # strict mode: the calls right after the reasoning
            return opener + reasoning + p.space() + tools + end
        return opener + reasoning + content + tools + tail + end

    finish(out, fn, inp.tool_calls_enabled, inp.tool_choice != "required", [(TRIGGER_WORD, CALL_START)], inp=inp)


def _strict_args(p, fn_, arg_close):
    """Strict tool-call mode: ``<arg_key>`` / ``<arg_value>`` pairs in schema order, a string node's value
    raw text, any other canonical JSON."""
    items = []
    for param in p.strict_params(fn_):
        rule = "ling3-arg-%s-%s" % (fn_["name"], param.name)
        string_value = p.tool_arg_string_value(p.until(ARG_VAL_END))
        value, _ = p.strict_value(fn_, param, rule + "-schema", string_value, ARG_VAL_END)
        aname = p.tool_arg_name(p.literal(param.name))
        arg_open = p.tool_arg_open(p.literal(ARG_KEY) + aname + p.literal(ARG_KEY_END))
        targ = p.tool_arg(arg_open + p.optional(p.space()) + p.literal(ARG_VAL) + value + arg_close)
        items.append((p.rule(rule, p.optional(p.space()) + targ), param.required))
    return p.strict_sequence(items)


FAMILY = Family(("ling3",), detect, apply)
