"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/gemma4.cpp: ``<|channel>thought ... <channel|>`` reasoning, ``<|tool_call>call:name{...}<tool_call|>``
calls in Gemma 4's value syntax (format ``peg-gemma4``, its own mapper)."""

from bankml.chat.chat_peg import Gemma4Mapper
from bankml.chat.families.common import TRIGGER_WORD, defaults, finish


def apply(out, inp):
    defaults(out)
    if inp.add_generation_prompt and out.prompt.endswith("<turn|>\n"):
        out.generation_prompt = "<|turn>model\n"
        out.prompt += out.generation_prompt
    out.delimiters = [["user", "<|turn>user"], ["assistant", "<|turn>model"]]
    out.format = "peg-gemma4"
    out.supports_thinking = True
    out.thinking_start_tag, out.thinking_end_tags = "<|channel>thought", ["<channel|>"]
    out.preserved_tokens = ["<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>", "<|turn>"]
    if inp.has_continuation():
        out.generation_prompt = "<|turn>model\n" if out.prompt.endswith("<turn|>\n") else ""
        out.generation_prompt += "<|channel>thought\n" + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += "<channel|>" + inp.render_content()
        out.prompt += out.generation_prompt
    has_response_format = isinstance(inp.json_schema, dict)

    def fn(p):
        start = p.rule("start", p.optional(p.literal("<|turn>model\n")))
        # GCC builds the right operand of + first
        close = p.literal("<channel|>")
        until = p.until("<channel|>")
        if inp.extract_reasoning:
            body = p.reasoning(until)
            sp = p.space()
            p.rule("thought", p.literal("<|channel>thought") + sp + body + close)
        else:
            sp = p.space()
            p.rule("thought", p.content(p.literal("<|channel>thought") + sp + until + close))
        not_thought = p.negate(p.literal("thought"))
        consume_empty_channels = p.gbnf(p.zero_or_more(p.literal("<|channel>") + not_thought), "")
        no_channel = p.negate(p.literal("<|channel>"))
        ref = p.ref("thought")
        thought = (p.peek(p.literal("<|channel>")) + consume_empty_channels + ref) | no_channel
        if has_response_format:
            response_format = (
                p.literal("```json")
                << p.content(p.schema(p.json(), "response-format-schema", inp.json_schema))
                << p.literal("```")
            )
            return start + p.optional(thought) + response_format
        if inp.tool_calls_enabled:
            p.rule("gemma4-string-content", p.until('<|"|>'))
            close_q = p.literal('<|"|>')
            ref_sc = p.ref("gemma4-string-content")
            p.rule("gemma4-string", p.literal('<|"|>') + ref_sc + close_q)
            p.rule("gemma4-bool", p.json_bool())
            p.rule("gemma4-null", p.json_null())
            p.rule("gemma4-number", p.json_number())
            colon = p.literal(":")
            p.rule("gemma4-dict-key", p.rule("gemma4-dict-key-name", p.chars("[^:}]", 1, -1)) + colon)
            value_ref = p.ref("gemma4-value")
            sp = p.space()
            p.rule("gemma4-dict-kv", p.ref("gemma4-dict-key") + sp + value_ref)

            def dict_():
                ws = p.space()
                member = p.ref("gemma4-dict-kv")
                members = p.sequence([member, p.zero_or_more(p.sequence([p.literal(","), ws, member]))])
                return p.sequence(
                    [p.literal("{"), ws, p.choice([p.literal("}"), p.sequence([members, ws, p.literal("}")])])]
                )

            p.rule("gemma4-dict", dict_)

            def array_():
                ws = p.space()
                value = p.ref("gemma4-value")
                elements = p.sequence([value, p.zero_or_more(p.sequence([p.literal(","), ws, value]))])
                return p.sequence(
                    [p.literal("["), ws, p.choice([p.literal("]"), p.sequence([elements, ws, p.literal("]")])])]
                )

            p.rule("gemma4-array", array_)
            p.rule(
                "gemma4-value",
                lambda: p.choice(
                    [
                        p.ref("gemma4-string"),
                        p.ref("gemma4-dict"),
                        p.ref("gemma4-array"),
                        p.ref("gemma4-number"),
                        p.ref("gemma4-bool"),
                        p.ref("gemma4-null"),
                    ]
                ),
            )
            tool_choice = p.choice()
            for tool in inp.tools:
                name = tool["function"]["name"]
                peek = p.peek(p.literal("{"))
                open_ = p.tool_open(p.tool_name(p.literal(name)) + peek)
                tool_choice = tool_choice | p.rule(
                    "tool-" + name, p.tool(p.sequence([open_, p.tool_args(p.ref("gemma4-dict"))]))
                )
            call = "<|tool_call>call:" + tool_choice + "<tool_call|>"
            tool_call = p.trigger_rule(
                "tool-call",
                p.repeat(call, 1 if inp.tool_choice == "required" else 0, -1 if inp.parallel_tool_calls else 1),
            )
            if inp.tool_choice == "required":
                return start + thought + tool_call
            scan = p.rule("scan-to-toolcall", p.until("<|tool_call>"))
            content = p.rule("content", p.content(p.until_one_of(["<|channel>", "<channel|>", "<|tool_call>"])))
            message = p.rule("message", thought + content)
            return start + p.zero_or_more(message) + scan + tool_call
        content = p.rule("content", p.content(p.until_one_of(["<|channel>", "<channel|>"])))
        message = p.rule("message", thought + content)
        return start + p.one_or_more(message)

    lazy = not (has_response_format or (inp.has_tools and inp.tool_choice == "required"))
    finish(out, fn, has_response_format or inp.tool_calls_enabled, lazy, [(TRIGGER_WORD, "<|tool_call>")])
    out.parser.format = "peg-gemma4"
    out.parser.mapper = Gemma4Mapper
