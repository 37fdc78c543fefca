"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/gpt-oss.cpp (harmony): ``<|start|>assistant<|channel|>analysis|commentary|final<|message|>...``
messages; tool calls ``to=functions.NAME`` in the role or the channel header (the message rewrite and the
``<|return|>`` fix before the handler, as gpt-oss.cpp does them)."""

from bankml.chat.chat_peg import tool_parameters
from bankml.chat.families.common import TRIGGER_PATTERN, Family, defaults, finish

TRIGGERS = [
    "^\\s+to$",
    "^<\\|channel\\|>(?:commentary|analysis)\\s+to=functions$",
    "<\\|start\\|>assistant(\\s+to)",
    "<\\|start\\|>assistant(<\\|channel\\|>(?:commentary|analysis)\\s+to)",
]


def detect(source):
    return "gpt-oss" if "<|channel|>" in source else None


def rewrite(messages, inp):
    """The messages rendered as they are, each one's reasoning also as ``thinking``; an assistant message with
    tool calls loses its content."""
    override = []
    for m in messages:
        m = dict(m)
        if isinstance(m.get("reasoning_content"), str):
            m["thinking"] = m["reasoning_content"]
            if isinstance(m.get("tool_calls"), list) and m["tool_calls"]:
                m.pop("content", None)
        override.append(m)
    return override, True, None


def fix_prompt(prompt, inp):
    """Without a generation prompt, the last ``<|return|>`` ends the turn as ``<|end|>``."""
    if not inp.add_generation_prompt:
        pos = prompt.rfind("<|return|>")
        if pos >= 0:
            prompt = prompt[:pos] + "<|end|>" + prompt[pos + len("<|return|>") :]
    return prompt


def apply(out, inp):
    defaults(out)
    out.delimiters = [
        ["assistant", "<|start|>assistant"],
        ["user", "<|start|>user"],
        ["system", "<|start|>developer"],
        ["system", "<|start|>system"],
        ["tool", "<|start|>functions"],
    ]
    out.supports_thinking = True
    out.thinking_start_tag, out.thinking_end_tags = "<|channel|>analysis<|message|>", ["<|end|>"]
    out.preserved_tokens = ["<|channel|>", "<|constrain|>", "<|message|>", "<|start|>", "<|end|>"]
    if inp.has_continuation():
        out.generation_prompt = "<|start|>assistant<|channel|>analysis<|message|>" + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += "<|end|><|start|>assistant<|channel|>final<|message|>" + inp.render_content()
        out.prompt += out.generation_prompt
    has_response_format = isinstance(inp.json_schema, dict)
    include_grammar = has_response_format or inp.tool_calls_enabled

    def fn(p):
        start = p.rule("start", p.literal("<|start|>assistant"))
        end = p.rule("end", p.literal("<|end|>"))
        content = p.rule("message-content", p.until("<|end|>"))
        alt = p.literal("commentary") | p.literal("analysis")
        channel = p.literal("<|channel|>") + alt
        constrain_type = p.chars("[A-Za-z0-9_-]", 1, -1)
        to_assistant = p.optional(p.literal(" to=assistant"))
        stray_commentary = p.optional(p.literal("<|channel|>commentary") + to_assistant)
        start_analysis = stray_commentary + p.literal("<|channel|>analysis<|message|>")
        if inp.extract_reasoning:
            p.rule("analysis", start_analysis + p.reasoning(content) + end)
        else:
            p.rule("analysis", p.content(start_analysis + content + end))
        analysis = p.ref("analysis")
        preamble_text = p.content(content)
        preamble = p.rule("preamble", p.literal("<|channel|>commentary<|message|>") + preamble_text + end)
        final_text = p.content(content)
        final_msg = p.rule("final", stray_commentary + p.literal("<|channel|>final<|message|>") + final_text)
        lit_to = p.literal(" to=")
        unsolicited = p.rule("unsolicited", p.atomic(p.optional(channel) + lit_to + content + end))
        any_ = p.rule("any", preamble | analysis)
        if has_response_format:
            constraint = p.optional(p.space() + p.optional(p.literal("<|constrain|>")) + constrain_type)
            body = p.content(p.schema(p.json(), "response-format-schema", inp.json_schema))
            msg = p.literal("<|message|>")
            response_format = p.rule("response-format", p.literal("<|channel|>final") + constraint + msg + body)
            return p.zero_or_more(start + analysis) + start + response_format
        if inp.tool_calls_enabled:
            tool_choice = p.choice()
            for tool in inp.tools:
                fn_ = tool["function"]
                name, params = fn_["name"], tool_parameters(fn_)
                func_name = p.literal(" to=functions.") + p.tool_name(p.literal(name))
                constraint = p.optional(p.space() + p.optional(p.literal("<|constrain|>")) + constrain_type)
                if inp.strict_tools:  # the content type as the template writes it, not free text after the name
                    constraint = p.optional(p.literal(" <|constrain|>json") | p.literal(" json"))
                args = p.tool_args(p.schema(p.json(), "tool-" + name + "-schema", params))
                in_role = p.tool(p.tool_open(func_name + channel + constraint + p.literal("<|message|>")) + args)
                in_channel = p.tool(p.tool_open(channel + func_name + constraint + p.literal("<|message|>")) + args)
                tool_choice = tool_choice | p.rule("tool-" + name, in_role | in_channel)
            tool_call = p.trigger_rule("tool-call", tool_choice)
            if inp.forced and not inp.enable_thinking:  # strict mode, thinking off: the call right away
                return start + tool_call
            if inp.forced:  # strict mode: reasoning (analysis) only, then the call
                return p.zero_or_more(start + analysis) + start + tool_call
            if inp.tool_choice == "required":
                return p.zero_or_more(start + any_) + start + tool_call
            return p.zero_or_more(start + any_) + start + (tool_call | final_msg)
        return p.zero_or_more(start + any_) + start + (final_msg | unsolicited)

    lazy = not (has_response_format or (inp.has_tools and inp.tool_choice == "required"))
    if inp.strict_tools and inp.tool_calls_enabled:
        # strict mode under "auto": the harmony framing is the grammar from the first token (channels, then a
        # final message or a call), so every answer parses; llama.cpp's lazy grammar leaves the model free
        # until a trigger, and text outside a channel is refused by the parser (llama-server's HTTP 500)
        lazy = False
    finish(out, fn, include_grammar, lazy, [(TRIGGER_PATTERN, t) for t in TRIGGERS], inp=inp)


FAMILY = Family(("gpt-oss",), detect, apply, rewrite=rewrite, fix_prompt=fix_prompt)
