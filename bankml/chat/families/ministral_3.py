"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/ministral3.cpp (Ministral 3, Devstral): ``[THINK]...[/THINK]`` reasoning, fenced JSON,
``[TOOL_CALLS]name[ARGS]{...}`` calls (the messages' reasoning and text blocks are rewritten by bankml.chat.template)."""

from bankml.chat.chat_peg import tool_parameters
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish


def detect(source):
    """Ministral / Magistral Large 3 (Mistral Small 3.2, which has ``[CALL_ID]``, is not)."""
    has = source.__contains__
    if has("[SYSTEM_PROMPT]") and has("[TOOL_CALLS]") and has("[ARGS]") and not has("[CALL_ID]"):
        return "ministral-3"
    return None


def rewrite(messages, inp):
    """The messages rendered as they are, a system or assistant message's reasoning and content as content
    blocks (``{"type": "thinking"}`` first, then the text or the parts)."""
    override = []
    for m in messages:
        if m.get("role") not in ("system", "assistant"):
            override.append(m)
            continue
        blocks = []
        if isinstance(m.get("reasoning_content"), str):
            blocks.append({"type": "thinking", "thinking": m["reasoning_content"]})
        if "content" in m:
            if isinstance(m["content"], str):
                blocks.append({"type": "text", "text": m["content"]})
            elif isinstance(m["content"], list):
                blocks.extend(m["content"])
        m = dict(m, content=blocks)
        m.pop("reasoning_content", None)
        override.append(m)
    return override, True, None


def apply(out, inp):
    defaults(out)
    out.supports_thinking = True
    out.thinking_start_tag, out.thinking_end_tags = "[THINK]", ["[/THINK]"]
    out.preserved_tokens = ["[THINK]", "[/THINK]", "[TOOL_CALLS]", "[ARGS]"]
    if inp.has_continuation():
        out.generation_prompt = "[THINK]" + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += "[/THINK]" + inp.render_content()
        out.prompt += out.generation_prompt
    include_grammar = [True]

    def fn(p):
        generation_prompt = p.eps()
        reasoning = (
            p.optional("[THINK]" + p.reasoning(p.until("[/THINK]")) + "[/THINK]") if inp.extract_reasoning else p.eps()
        )
        if inp.has_response_format:
            return generation_prompt + (
                reasoning << "```json" << p.content(p.schema(p.json(), "response-format", inp.json_schema)) << "```"
            )
        if inp.tool_calls_enabled:
            tool_choice = p.choice()
            for tool in inp.tools:
                fn_ = tool["function"]
                name, schema = fn_["name"], tool_parameters(fn_)
                args = p.tool_args(p.schema(p.json(), "tool-" + name + "-schema", schema))
                tool_choice = tool_choice | p.rule(
                    "tool-" + name, p.tool_open(p.tool_name(p.literal(name)) + "[ARGS]") + args
                )
            min_calls = 1 if inp.tool_choice == "required" else 0
            max_calls = -1 if inp.parallel_tool_calls else 1
            tool_calls = p.trigger_rule("tool-call", p.repeat("[TOOL_CALLS]" + tool_choice, min_calls, max_calls))
            if inp.forced:  # strict mode: the calls right after the reasoning
                return generation_prompt + (reasoning << tool_calls)
            return generation_prompt + (reasoning << p.content(p.until("[TOOL_CALLS]")) << tool_calls)
        include_grammar[0] = False
        return generation_prompt + (reasoning << p.content(p.rest()))

    lazy = inp.has_tools and inp.tool_choice == "auto"
    finish(out, fn, include_grammar, lazy, [(TRIGGER_WORD, "[TOOL_CALLS]")], inp=inp)


FAMILY = Family(("ministral-3",), detect, apply, rewrite=rewrite)
