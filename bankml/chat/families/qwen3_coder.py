"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/qwen3-coder.cpp (Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, StepFun 3.5): ``<think>`` reasoning that
a tool call may end, ``<tool_call><function=name><parameter=a>...`` XML calls."""

from bankml.chat.chat_peg import function_parameters, parameter_source
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish
from bankml.schema.queries import (
    TYPE_ARRAY,
    TYPE_BOOLEAN,
    TYPE_INTEGER,
    TYPE_NULL,
    TYPE_NUMBER,
    TYPE_OBJECT,
    TYPE_STRING,
    value_types,
)

GEN_PREFIX = "<|im_start|>assistant\n"
ARG_CLOSE = "\n</parameter>\n"


def detect(source):
    """Qwen3-Coder's XML calls (also Nemotron Nano 3, Qwen 3.5, StepFun 3.5 Flash), not the templates that put
    no newline between the tags."""
    has = source.__contains__
    if (
        has("<tool_call>")
        and has("<function=")
        and has("<parameter=")
        and not has("'<tool_call><function=' ~ tool_call.name ~ '>'")
    ):
        return "qwen3-coder"
    return None


def apply(out, inp):
    defaults(out)
    thinking = "<think>" in inp.source
    is_qwen3_coder = not thinking
    out.supports_thinking = thinking
    out.preserved_tokens = ["<tool_call>", "</tool_call>"]
    if thinking:
        out.thinking_start_tag = "<think>"
        out.thinking_end_tags = ["\n</think>", "</think>", "<tool_call>"]
        out.preserved_tokens += ["<think>", "</think>"]
    out.delimiters = [
        ["assistant", "<|im_start|>assistant"],
        ["tool", "<|im_start|>user\n<tool_response>"],
        ["tool", "<|im_start|>tool_response"],
        ["user", "<|im_start|>user"],
        ["system", "<|im_start|>system"],
    ]
    if inp.has_continuation():
        out.generation_prompt = GEN_PREFIX
        if thinking:
            out.generation_prompt += "<think>\n" + inp.reasoning_content()
            if inp.continue_content:
                out.generation_prompt += "\n</think>\n\n"
        if inp.continue_content:
            out.generation_prompt += inp.render_content()
        out.prompt += out.generation_prompt
    tool_call_starts = ["<tool_call>"]
    if is_qwen3_coder:
        tool_call_starts += ["<function=%s>" % t["function"]["name"] for t in inp.tools]

    def fn(p):
        generation_prompt = p.literal(GEN_PREFIX)
        reasoning = p.eps()
        if thinking and inp.extract_reasoning:
            # GCC builds the right operand of + and | first
            close = p.peek(p.literal("<tool_call>"))
            close = p.literal("</think>") | close
            body = p.reasoning(p.until_one_of(["</think>", "<tool_call>"]))
            reasoning = p.optional("<think>" + p.space() + body + close)
        if inp.has_response_format:
            return generation_prompt + (reasoning << p.content(p.schema(p.json(), "response-format", inp.json_schema)))
        if inp.tool_calls_enabled:
            arg_close = p.tool_arg_close(p.literal("\n</parameter>\n"))
            arg_string = p.rule(
                "xml-arg-string",
                p.ac(p.tool_arg_string_value(p.until("\n</parameter>\n")) + arg_close, "\n</parameter>\n"),
            )
            tool_choice = p.choice()
            for tool in inp.tools:
                fn_ = tool["function"]
                name = fn_["name"]
                if inp.strict_tools:
                    args = _strict_args(p, fn_, arg_close)
                    close = p.tool_close(p.literal("</function>\n"))
                    open_ = p.tool_open_named("<function=", name, ">\n")
                    tool_choice = tool_choice | p.rule("tool-" + name, p.tool(open_ + p.tool_args(args) + close))
                    continue
                required, optional = [], []
                for pname, node, is_required in function_parameters(fn_):
                    rule_name = "tool-%s-arg-%s" % (name, pname)
                    arg_open = p.tool_arg_open_named("<parameter=", pname, ">\n")
                    types = value_types(node)
                    value = p.eps()
                    if TYPE_STRING not in types:
                        value = (
                            p.tool_arg_json_value(
                                p.schema(
                                    p.json(),
                                    rule_name + "-schema",
                                    None,
                                    node=node,
                                    source=parameter_source(fn_, pname),
                                )
                            )
                            + arg_close
                        )
                    elif types == {TYPE_STRING}:
                        value = arg_string
                    else:
                        json_value = p.choice()
                        if TYPE_OBJECT in types:
                            json_value = json_value | p.json_object()
                        if TYPE_ARRAY in types:
                            json_value = json_value | p.json_array()
                        if TYPE_NUMBER in types or TYPE_INTEGER in types:
                            json_value = json_value | p.json_number()
                        if TYPE_BOOLEAN in types:
                            json_value = json_value | p.json_bool()
                        if TYPE_NULL in types:
                            json_value = json_value | p.json_null()
                        value = p.gbnf(
                            p.atomic(p.tool_arg_json_value(json_value) + arg_close) | arg_string, "xml-arg-string"
                        )
                    arg_rule = p.rule(rule_name, p.tool_arg(arg_open + value))
                    (required if is_required else optional).append(arg_rule)
                args = p.permute("tool-%s-args" % name, required)
                if optional:
                    args = args + p.zero_or_more(p.choice(optional))
                close = p.tool_close(p.literal("</function>\n"))
                targs = p.tool_args(args)
                open_ = p.tool_open_named("<function=", name, ">\n")
                tool_choice = tool_choice | p.rule("tool-" + name, p.tool(open_ + targs + close))
            min_calls = 1 if inp.tool_choice == "required" else 0
            sp = p.space()  # GCC builds the right operand of + first
            body = tool_choice + "</tool_call>" + sp
            tool_call = p.rule("tool-call", "<tool_call>\n" + body)
            first = (
                p.rule("tool-call-first", p.optional(p.literal("<tool_call>\n")) + body)
                if is_qwen3_coder
                else tool_call
            )
            calls = first + p.zero_or_more(tool_call) if inp.parallel_tool_calls else first
            tool_calls = p.trigger_rule("tool-call-root", p.repeat(calls, min_calls, 1))
            if inp.forced:  # strict mode: the calls right after the reasoning
                return generation_prompt + (reasoning << tool_calls)
            return generation_prompt + (reasoning << p.content(p.until_one_of(tool_call_starts)) << tool_calls)
        return generation_prompt + (reasoning << p.content(p.rest()))

    lazy = inp.has_tools and inp.tool_choice == "auto"
    finish(
        out,
        fn,
        inp.has_response_format or inp.tool_calls_enabled,
        lazy,
        [(TRIGGER_WORD, s) for s in tool_call_starts],
        inp=inp,
    )
    if not lazy:
        out.grammar_triggers = []


def _strict_args(p, fn_, arg_close):
    """Strict tool-call mode: the parameters in schema order, each ``<parameter=name>\n`` then its value (raw
    text for a string, canonical JSON otherwise) and ``\n</parameter>\n``."""
    items = []
    for param in p.strict_params(fn_):
        rule_name = "tool-%s-arg-%s" % (fn_["name"], param.name)
        string_value = p.tool_arg_string_value(p.until(ARG_CLOSE))
        value, _ = p.strict_value(fn_, param, rule_name + "-schema", string_value, ARG_CLOSE)
        arg_open = p.tool_arg_open_named("<parameter=", param.name, ">\n")
        items.append((p.rule(rule_name, p.tool_arg(arg_open + value + arg_close)), param.required))
    return p.strict_sequence(items)


FAMILY = Family(("qwen3-coder",), detect, apply)
