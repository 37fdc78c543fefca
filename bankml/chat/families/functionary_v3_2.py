"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/functionary-v3-2.cpp: recipients ``>>>all\\n{content}`` / ``>>>name\\n{json arguments}``."""

from bankml.chat.chat_peg import tool_parameters
from bankml.chat.families.common import TRIGGER_PATTERN, Family, defaults, finish

GEN = "<|start_header_id|>assistant<|end_header_id|>\n\n>>>"


def detect(source):
    return "functionary-v3-2" if ">>>all" in source and ">>>${recipient}" in source else None


def apply(out, inp):
    defaults(out)
    out.preserved_tokens = [">>>all"]
    if inp.has_continuation():
        out.generation_prompt = GEN + "all\n" + inp.render_content()
        out.prompt += out.generation_prompt

    def fn(p):
        # GCC builds the right operand of + first
        body = p.content(p.until(">>>"))
        content_until_tool = p.literal("all\n") + body
        body = p.content(p.rest())
        content_until_end = p.literal("all\n") + body
        generation_prompt = p.literal(GEN)
        if not inp.tool_calls_enabled:
            end = p.end()
            return generation_prompt + content_until_end + end
        tool_choice = p.choice()
        for tool in inp.tools:
            fn_ = tool["function"]
            name, schema = fn_["name"], tool_parameters(fn_)
            args = p.tool_args(p.schema(p.json(), "tool-" + name + "-schema", schema))
            nl = p.literal("\n")
            tool_parser = p.tool(p.tool_open(p.tool_name(p.literal(name)) + nl) + args)
            tool_choice = tool_choice | p.rule("tool-" + name, tool_parser)
        content_only = content_until_end
        tools_only = p.trigger_rule("tools", p.one_or_more(tool_choice))
        content_and_tools = content_until_tool + tools_only
        end = p.end()
        if inp.forced:  # strict mode: calls only (one without parallel_tool_calls)
            ret = (tools_only if inp.parallel_tool_calls else p.trigger_rule("tools", tool_choice)) + end
        elif inp.tool_choice == "required":
            if inp.parallel_tool_calls:
                ret = p.choice([content_and_tools, tools_only]) + end
            else:
                ret = p.choice([content_until_tool + tool_choice, tools_only]) + end
        elif inp.parallel_tool_calls:
            ret = p.choice([content_and_tools, content_only, tools_only]) + end
        else:
            content_and_tool = content_until_tool + tool_choice
            ret = p.choice([content_and_tool, content_only, tool_choice]) + end
        return generation_prompt + ret

    # strict mode under "auto": the recipient framing is the grammar from the first token (``all\n`` and text, or
    # calls), so every answer parses; llama.cpp's lazy grammar leaves the model free until ``>>>name``, and text
    # without a recipient is refused by the parser (llama-server's HTTP 500)
    lazy = inp.tool_choice == "auto" and not inp.strict_tools
    finish(out, fn, inp.tool_calls_enabled, lazy, [(TRIGGER_PATTERN, ">>>(?!all)")], inp=inp)


FAMILY = Family(("functionary-v3-2",), detect, apply)
