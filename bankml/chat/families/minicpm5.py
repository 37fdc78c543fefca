"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/minicpm5.cpp: ``<think>`` reasoning, ``<function name="f"><param name="a">v</param></function>``
tool calls."""

from bankml.chat.chat_peg import function_parameters, parameter_source
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish
from bankml.schema.queries import may_be_string


def detect(source):
    has = source.__contains__
    return "minicpm5" if has("Tool usage guidelines:") and has('<function name="') and has('<param name="') else None


def apply(out, inp):
    defaults(out)
    out.supports_thinking = True
    out.preserved_tokens = ["<function", "<param", "</function>", "</param>", "<think>", "</think>"]
    out.thinking_start_tag, out.thinking_end_tags = "<think>", ["</think>"]
    out.delimiters = [
        ["assistant", "<|im_start|>assistant"],
        ["tool", "<|im_start|>user\n<tool_response>"],
        ["user", "<|im_start|>user"],
        ["system", "<|im_start|>system"],
    ]
    include_grammar = inp.has_response_format or inp.tool_calls_enabled
    if inp.has_continuation():
        out.generation_prompt = "<|im_start|>assistant\n<think>\n" + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += "\n</think>\n\n" + inp.render_content()
        out.prompt += out.generation_prompt

    def fn(p):
        generation_prompt = p.literal("<|im_start|>assistant\n")
        reasoning = p.eps()
        if inp.extract_reasoning:
            sp = p.space()  # GCC builds the right operand of + first
            reasoning = ("<think>" << p.reasoning(p.until("</think>")) << "</think>") + sp
        if inp.has_response_format:
            return generation_prompt + reasoning + p.content(p.schema(p.json(), "response-format", inp.json_schema))
        if inp.tool_calls_enabled:
            close = p.tool_arg_close(p.literal("</param>"))
            cdata_end = p.literal("]]>")
            cdata = p.ac(p.tool_arg_string_value(p.until("]]>")) + cdata_end, "]]>")
            first = p.literal("<![CDATA[") + cdata + close
            close2 = p.tool_arg_close(p.literal("</param>"))
            plain = p.ac(p.tool_arg_string_value(p.until("</param>")) + close2, "</param>")
            second = p.negate(p.literal("<![CDATA[")) + plain
            string_value = p.choice([first, second])
            tool_choice = p.choice()
            for tool in inp.tools:
                fn_ = tool["function"]
                name = fn_["name"]
                arg_rules = []
                for pname, node, _required in () if inp.strict_tools else function_parameters(fn_):
                    value = p.eps()
                    if may_be_string(node):
                        value = string_value
                    else:
                        c = p.tool_arg_close(p.literal("</param>"))
                        value = (
                            p.tool_arg_json_value(
                                p.schema(
                                    p.json(),
                                    "tool-%s-arg-%s-schema" % (name, pname),
                                    None,
                                    node=node,
                                    source=parameter_source(fn_, pname),
                                )
                            )
                            + c
                        )
                    q = p.literal('">')
                    aname = p.tool_arg_name(p.literal(pname))
                    arg_rules.append(p.tool_arg(p.tool_arg_open(p.literal('<param name="') + aname + q) + value))
                args = p.eps()
                if arg_rules:
                    args = p.zero_or_more(p.choice(arg_rules) + p.space())
                if inp.strict_tools:
                    args = _strict_args(p, fn_)
                q = p.literal('">')
                tname = p.tool_name(p.literal(name))
                open_ = p.tool_open(p.literal('<function name="') + tname + q)
                tool_parser = p.tool(open_ << p.tool_args(args) << p.tool_close(p.literal("</function>")))
                tool_choice = tool_choice | p.rule("tool-" + name, tool_parser)
            max_calls = -1 if inp.parallel_tool_calls else 1
            tool_calls = p.trigger_rule("tool-call", p.repeat(tool_choice + p.space(), 1, max_calls))
            if inp.forced:  # strict mode: the calls right after the reasoning
                return generation_prompt + reasoning + p.space() + tool_calls + p.end()
            content = p.content(p.until("<function"))
            end = p.end()
            return generation_prompt + reasoning + content + tool_calls + end
        end = p.end()
        content = p.content(p.rest())
        return generation_prompt + reasoning + content + end

    lazy = not (inp.has_response_format or (inp.has_tools and inp.tool_choice == "required"))
    finish(out, fn, include_grammar, lazy, [(TRIGGER_WORD, "<function")], inp=inp)


def _strict_args(p, fn_):
    """Strict tool-call mode: ``<param name="...">`` elements in schema order, a string node's value plain
    raw text (never a CDATA section), any other canonical JSON, each followed by whitespace."""
    items = []
    for param in p.strict_params(fn_):
        rule = "tool-%s-arg-%s" % (fn_["name"], param.name)
        string_value = p.tool_arg_string_value(p.until("</param>"))
        value, is_string = p.strict_value(
            fn_, param, rule + "-schema", string_value, "</param>", exclude_prefix="<![CDATA["
        )
        if is_string:
            value = p.negate(p.literal("<![CDATA[")) + value
        close = p.tool_arg_close(p.literal("</param>"))
        aname = p.tool_arg_name(p.literal(param.name))
        arg_open = p.tool_arg_open(p.literal('<param name="') + aname + p.literal('">'))
        items.append((p.tool_arg(arg_open + value + close) + p.space(), param.required))
    return p.strict_sequence(items)


FAMILY = Family(("minicpm5",), detect, apply)
