"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/muse-glimmer.cpp: ``<|start|>assistant to=<recipient><|message|>...`` messages ended by
``<|eom|>`` / ``<|eot|>``; reasoning to ``self``, the answer to ``user``, ATEM tool calls to a tool."""

from bankml.chat.chat_peg import function_parameters, parameter_source
from bankml.chat.families.common import TRIGGER_PATTERN, Family, defaults, finish
from bankml.schema.queries import may_be_string

TRIGGER = "(?:^|<\\|start\\|>assistant)( to=(?!self<\\|message\\|>)(?!user<\\|message\\|>)[^<]*?<\\|message\\|>)"


def detect(source):
    return "muse-glimmer" if "<atem:function_calls>" in source and "<|eom|>" in source else None


def apply(out, inp):
    defaults(out)
    out.generation_prompt = "<|start|>assistant"
    out.supports_thinking = True
    out.preserved_tokens = [
        "<|start|>",
        "<|message|>",
        "<|eom|>",
        "<|eot|>",
        "<atem:function_calls>",
        "<atem:invoke",
        "<atem:parameter",
        "</atem:parameter>",
        "</atem:invoke>",
        "</atem:function_calls>",
    ]
    out.delimiters = [
        ["assistant", "<|start|>assistant"],
        ["user", "<|start|>user"],
        ["system", "<|start|>system"],
        ["tool", "<|start|>tool"],
    ]
    if inp.has_continuation():
        out.generation_prompt = "<|start|>assistant to=self<|message|>" + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += "<|eom|><|start|>assistant to=user<|message|>" + inp.render_content()
        out.prompt += out.generation_prompt
    has_response_format = isinstance(inp.json_schema, dict)
    include_grammar = has_response_format or inp.tool_calls_enabled

    def fn(p):
        start = p.rule("start", p.literal("<|start|>assistant"))
        if not inp.extract_reasoning and not include_grammar:
            return start + p.content(p.rest())
        # GCC builds the right operand of + first
        eom = p.literal("<|eom|>")
        body = p.until("<|eom|>")
        body = p.reasoning(body) if inp.extract_reasoning else p.content(body)
        p.rule("analysis", p.literal(" to=self<|message|>") + body + eom)
        analysis = p.ref("analysis")
        recipient = p.optional(p.literal(" to=user"))
        final_text = p.content(p.until_one_of(["<|eot|>", "<|eom|>"]))
        final_msg = p.rule("final", recipient + p.literal("<|message|>") + final_text)
        if has_response_format:
            response_json = p.content(p.schema(p.json(), "response-format-schema", inp.json_schema))
            close = p.literal("```")
            sp = p.space()
            fenced = p.literal("```json") + p.space() + response_json + sp + close
            response_format = p.rule("response-format", recipient + p.literal("<|message|>") + (fenced | response_json))
            return p.zero_or_more(start + analysis) + start + response_format
        if inp.tool_calls_enabled:
            close = p.tool_arg_close(p.literal("</atem:parameter>"))
            string_value = p.ac(p.tool_arg_string_value(p.until("</atem:parameter>")) + close, "</atem:parameter>")
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
                        close = p.tool_arg_close(p.literal("</atem:parameter>"))
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
                            + close
                        )
                    end_ = p.literal('">')
                    aname = p.tool_arg_name(p.literal(pname))
                    arg_rules.append(
                        p.tool_arg(p.tool_arg_open(p.literal('<atem:parameter name="') + aname + end_) + value)
                    )
                args = p.eps()
                if arg_rules:
                    args = p.zero_or_more(p.choice(arg_rules) + p.space())
                if inp.strict_tools:
                    args = _strict_args(p, fn_)
                sp = p.space()
                q = p.literal('">')
                tname = p.tool_name(p.literal(name))
                inv = p.literal('<atem:invoke name="')
                sp0 = p.space()
                calls_lit = p.literal("<|message|><atem:function_calls>")
                until = p.literal(name) if inp.strict_tools else p.until("<|message|>")  # the recipient
                open_ = p.tool_open(p.literal(" to=") + until + calls_lit + sp0 + inv + tname + q + sp)
                head = open_ << p.tool_args(args)  # << is sequenced left to right
                fclose_tail = p.literal("</atem:function_calls>")
                fclose_sp = p.space()
                tool_parser = p.tool(head << p.tool_close(p.literal("</atem:invoke>") + fclose_sp + fclose_tail))
                tool_choice = tool_choice | p.rule("tool-" + name, tool_parser)
            if inp.parallel_tool_calls:
                more = p.zero_or_more(p.literal("<|eom|>") + start + tool_choice)
                tool_calls = p.trigger_rule("tool-call", tool_choice + more)
            else:
                tool_calls = p.trigger_rule("tool-call", tool_choice)
            if inp.tool_choice == "required":
                return p.zero_or_more(start + analysis) + start + tool_calls
            trailing = p.optional(p.literal("<|eom|>") + start + tool_calls)
            return p.zero_or_more(start + analysis) + start + (tool_calls | (final_msg + trailing))
        return p.zero_or_more(start + analysis) + start + final_msg

    lazy = not (has_response_format or (inp.has_tools and inp.tool_choice == "required"))
    finish(out, fn, include_grammar, lazy, [(TRIGGER_PATTERN, TRIGGER)], inp=inp)


def _strict_args(p, fn_):
    """Strict tool-call mode: ``<atem:parameter name="...">`` elements in schema order, a string node's value
    raw text, any other canonical JSON, each followed by whitespace."""
    items = []
    for param in p.strict_params(fn_):
        rule = "tool-%s-arg-%s" % (fn_["name"], param.name)
        string_value = p.tool_arg_string_value(p.until("</atem:parameter>"))
        value, _ = p.strict_value(fn_, param, rule + "-schema", string_value, "</atem:parameter>")
        close = p.tool_arg_close(p.literal("</atem:parameter>"))
        aname = p.tool_arg_name(p.literal(param.name))
        arg_open = p.tool_arg_open(p.literal('<atem:parameter name="') + aname + p.literal('">'))
        items.append((p.tool_arg(arg_open + value + close) + p.space(), param.required))
    return p.strict_sequence(items)


FAMILY = Family(("muse-glimmer",), detect, apply)
