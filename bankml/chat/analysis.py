"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The differential template analysis of ``common/chat-diff-analyzer.cpp`` and its helpers
(``common/chat-auto-parser-helpers.cpp``): the template is rendered over pairs of requests that differ in one
thing (a reasoning block, ``enable_thinking``, a tool call) and the difference between the two outputs names
the template's markers. The shared diff helpers and probe messages are ``bankml.chat.diff``. This module holds
the reasoning and content analysis (the thinking tags and whether content is wrapped), the assistant/user start
markers and the preserved tokens they give; the tool-call analysis is ``bankml.chat.analysis_tools``. Private to
bankml; ``bankml.chat.template`` uses it.
"""

from bankml.chat.analysis_tools import JSON_NATIVE, Tools
from bankml.chat.diff import (
    _C_SPACE,
    ARG_FIRST,
    ARG_SECOND,
    ASSISTANT_MSG,
    CONTENT_ALWAYS_WRAPPED,
    CONTENT_PLAIN,
    CONTENT_WRAPPED_WITH_REASONING,
    FUN_FIRST,
    REASONING_NONE,
    REASONING_TAG_BASED,
    REASONING_TOOLS_ONLY,
    THINKING_CONTENT,
    TOOLS,
    USER_MSG,
    USER_MSG_TWO,
    _anywhere,
    _delimited_at,
    _literal,
    _space,
    _user,
    _wrapped_at,
    _wrapped_by_markers,
    build_tool_call,
    compare_variants,
    prune_whitespace_segments,
    segmentize_markers,
    trim_whitespace,
)

# -- reasoning ----------------------------------------------------------------------------------------------


class Reasoning:
    def __init__(self, template, supports_tools):
        self.mode, self.start, self.end = REASONING_NONE, "", ""
        self._presence(template)
        self._thinking_enabled(template)
        if supports_tools:
            self._scope(template)

    def _presence(self, template):
        v = compare_variants(
            template,
            dict(messages=[_user(), {"role": "assistant", "content": ASSISTANT_MSG}]),
            dict(
                messages=[
                    _user(),
                    {"role": "assistant", "content": ASSISTANT_MSG, "reasoning_content": THINKING_CONTENT},
                ]
            ),
        )
        if v is None:
            return
        if v.diff.right and THINKING_CONTENT in v.diff.right:
            res = _anywhere(v.output_b, lambda s, i: _wrapped_at(s, i, THINKING_CONTENT))
            if res is None:
                res = _anywhere(v.output_b, lambda s, i: _delimited_at(s, i, THINKING_CONTENT))
            if res is not None:
                pre, post = res
                if pre and post:
                    self.mode, self.start, self.end = REASONING_TAG_BASED, pre, post
                elif post:
                    self.mode, self.end = REASONING_TAG_BASED, post

    def _thinking_enabled(self, template):
        v = compare_variants(
            template,
            dict(messages=[_user()], add_generation_prompt=True, enable_thinking=False),
            dict(messages=[_user()], add_generation_prompt=True, enable_thinking=True),
        )
        if v is None:
            return
        d = v.diff
        lt, rt = trim_whitespace(d.left), trim_whitespace(d.right)
        if not lt and d.right:
            if rt and v.output_b.endswith(rt):
                if not self.start:
                    self.start, self.mode = d.right, REASONING_TAG_BASED
        elif not rt and d.left:
            if lt and v.output_a.endswith(lt):
                if not self.end:
                    seg = prune_whitespace_segments(segmentize_markers(v.output_a))
                    if len(seg) >= 2 and seg[-1].value == lt and seg[-2].marker:
                        self.start = seg[-2].value
                    self.end, self.mode = d.left, REASONING_TAG_BASED
        elif lt and rt:
            for direction in (0, 1):
                base, extended = (v.output_b, v.output_a) if direction == 0 else (v.output_a, v.output_b)
                n = min(len(base), 64)
                anchor = base[len(base) - n :]
                pos = extended.rfind(anchor)
                if pos < 0 or pos + n >= len(extended):
                    continue
                extra = trim_whitespace(extended[pos + n :])
                if not extra:
                    continue
                seg = prune_whitespace_segments(segmentize_markers(extra))
                if len(seg) == 2 and seg[0].marker and seg[1].marker:
                    if not self.start:
                        self.start = seg[0].value
                    if not self.end:
                        self.end = seg[1].value
                    self.mode = REASONING_TAG_BASED
                    break
        if self.mode == REASONING_NONE and not self.start and self.end:
            self.mode = REASONING_TAG_BASED

    def _scope(self, template):
        with_content = {"role": "assistant", "content": ASSISTANT_MSG, "reasoning_content": THINKING_CONTENT}
        with_tools = {
            "role": "assistant",
            "content": None,
            "reasoning_content": THINKING_CONTENT,
            "tool_calls": [build_tool_call(FUN_FIRST, {ARG_FIRST: "VVVV", ARG_SECOND: "XXXX"})],
        }
        v = compare_variants(
            template,
            dict(messages=[_user(), with_content], tools=TOOLS),
            dict(messages=[_user(), with_tools], tools=TOOLS),
        )
        if v is None:
            return
        if THINKING_CONTENT not in v.output_a and THINKING_CONTENT in v.output_b:
            self.mode = REASONING_TOOLS_ONLY

            res = _anywhere(v.output_b, _wrapped_by_markers(THINKING_CONTENT))
            if res is not None:
                self.start, self.end = res
            else:
                res = _anywhere(v.output_b, lambda s, i: _delimited_at(s, i, THINKING_CONTENT))
                if res is not None:
                    self.end = res[1]
                else:
                    self.mode = REASONING_NONE


# -- content ------------------------------------------------------------------------------------------------


class Content:
    def __init__(self, template, reasoning):
        self.mode, self.start, self.end = CONTENT_PLAIN, "", ""
        base = [_user()]
        content_only = dict(messages=base + [{"role": "assistant", "content": ASSISTANT_MSG}], tools=TOOLS)
        with_tools = dict(
            messages=base
            + [{"role": "assistant", "content": "", "tool_calls": [build_tool_call("test_func", {"arg1": "value1"})]}],
            tools=TOOLS,
        )
        with_reasoning = dict(
            messages=base + [{"role": "assistant", "content": "", "reasoning_content": THINKING_CONTENT}], tools=TOOLS
        )
        vt = compare_variants(template, content_only, with_tools)
        vr = compare_variants(template, content_only, with_reasoning)
        if vt is None or vr is None:
            return
        dt, dr = vt.diff, vr.diff
        response = ASSISTANT_MSG
        found_plain = False
        if trim_whitespace(dt.left) == response:
            left = dr.left
            # p.space() + left + p.space() + optional(marker) + p.space() + end, over left itself
            if not left or left[0] not in _C_SPACE:
                self.mode, found_plain = CONTENT_PLAIN, True
            elif reasoning.mode != REASONING_NONE and reasoning.end:

                def post(s, i):
                    after = _literal(s, i, reasoning.end)
                    if after is None:
                        return None
                    return () if _literal(s, _space(s, after), response) is not None else None

                if _anywhere(left, post) is not None:
                    self.mode, found_plain = CONTENT_PLAIN, True
        if not found_plain:
            rdiff = dr.left
            if reasoning.end and reasoning.end in rdiff:
                rdiff = rdiff[rdiff.index(reasoning.end) + len(reasoning.end) :]
            pure = rdiff if len(rdiff) > len(dt.left) else dt.left

            res = _anywhere(pure, _wrapped_by_markers(response))
            self.start, self.end = res if res is not None else ("", "")
        if self.start or self.end:
            self.mode = CONTENT_ALWAYS_WRAPPED

    def is_always_wrapped(self):
        return self.mode == CONTENT_ALWAYS_WRAPPED and bool(self.start) and bool(self.end)


# -- the whole analysis (autoparser::analyze_template) ------------------------------------------------------


class Analysis:
    """What the differential analysis finds in a template (autoparser::analyze_template): reasoning,
    content, tools (``bankml.chat.analysis_tools.Tools``), the message start markers, the preserved tokens and
    additional stops."""

    def __init__(self, template):
        caps = template.caps
        self.reasoning = Reasoning(template, caps.supports_tool_calls)
        self.content = Content(template, self.reasoning)
        self.tools = Tools(template, caps, self.reasoning) if caps.supports_tool_calls else Tools()
        self.assistant_start = self._assistant_start(template)
        self.user_start = self._user_start(template)
        self.preserved_tokens = []
        self.additional_stops = []
        own = [self.reasoning.start, self.reasoning.end, self.content.start, self.content.end]
        for tok in own + self.tools.tokens():
            self._add_token(tok)
        for fix in _WORKAROUNDS:
            fix(template.source, self)

    def _add_token(self, token):
        token = trim_whitespace(token)
        if token and token not in self.preserved_tokens:
            self.preserved_tokens.append(token)

    def _assistant_start(self, template):
        v = compare_variants(
            template,
            dict(messages=[_user()]),
            dict(messages=[_user(), {"role": "assistant", "content": ASSISTANT_MSG}]),
        )
        if v is None:
            return ""
        usermsg = v.diff.right
        idx = usermsg.find(ASSISTANT_MSG)
        prefix = usermsg if idx < 0 else usermsg[:idx]
        rs, re_ = trim_whitespace(self.reasoning.start), trim_whitespace(self.reasoning.end)
        if self.reasoning.start and rs in prefix:
            prefix = prefix[: prefix.index(rs)]
        if self.reasoning.end and re_ in prefix:
            prefix = prefix[: prefix.index(re_)]
        return trim_whitespace(prefix)

    def _user_start(self, template):
        user = _user()
        assistant = {"role": "assistant", "content": ASSISTANT_MSG}
        two = {"role": "user", "content": USER_MSG_TWO}
        v = compare_variants(template, dict(messages=[]), dict(messages=[user]))
        if v is None:
            v = compare_variants(template, dict(messages=[two, assistant]), dict(messages=[two, assistant, user]))
            if v is None:
                return ""
        usermsg = v.diff.right
        if ASSISTANT_MSG in usermsg:
            usermsg = usermsg[usermsg.index(ASSISTANT_MSG) + len(ASSISTANT_MSG) :]
        idx = usermsg.find(USER_MSG)
        candidate = usermsg if idx < 0 else usermsg[:idx]
        out, seen_marker = [], False
        for seg in segmentize_markers(candidate):
            lower = "".join(chr(ord(c) + 32) if "A" <= c <= "Z" else c for c in seg.value)
            if seg.marker and not seen_marker and ("end" in lower or "close" in lower):
                continue
            if not seg.marker and not seen_marker and not trim_whitespace(seg.value):
                continue
            seen_marker |= seg.marker
            out.append(seg.value)
        return trim_whitespace("".join(out))


def _old_qwen(src, a):
    if (
        "content.split('</think>')" in src
        and "reasoning_content" not in src
        and "<SPECIAL_12>" not in src
        and a.reasoning.mode == REASONING_NONE
    ):
        a.reasoning.mode, a.reasoning.start, a.reasoning.end = REASONING_TAG_BASED, "<think>", "</think>"
        a.preserved_tokens += ["<think>", "</think>"]


def _granite(src, a):
    if "Write your thoughts between <think></think> and write your response between <response></response>" in src:
        a.reasoning.mode, a.reasoning.start, a.reasoning.end = REASONING_TAG_BASED, "<think>", "</think>"
        a.preserved_tokens += ["<think>", "</think>"]
        a.content.mode, a.content.start, a.content.end = CONTENT_WRAPPED_WITH_REASONING, "<response>", "</response>"
        a.preserved_tokens += ["<response>", "</response>"]


def _command_r(src, a):
    if "<|CHATBOT_TOKEN|>" in src and "<|END_OF_TURN_TOKEN|>" in src and not a.content.start:
        a.content.mode, a.content.start, a.content.end = (
            CONTENT_ALWAYS_WRAPPED,
            "<|CHATBOT_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
        )
        a.preserved_tokens += ["<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"]
        a.user_start = "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>"


def _functionary(src, a):
    if (
        'set has_code_interpreter = tools | selectattr("type", "equalto", "code_interpreter") | list | length > 0'
        in src
    ):
        a.content.mode, a.content.end = CONTENT_PLAIN, ""
        t = a.tools
        t.function.name_prefix, t.format.section_start, t.format.section_end = "", "", ""
        t.format.per_call_start, t.format.per_call_end, t.function.close = "<function=", "</function>", ""
        a.preserved_tokens = ["<|eot_id|>", "<|eom_id|>", "<function=", ">", "</function>"]


def _deepseek_r1_distill(src, a):
    if (
        "{{'<\uff5cAssistant\uff5c><\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>'"
        " + tool['type'] + '<\uff5ctool\u2581sep\uff5c>'"
    ) in src:
        f, fn = a.tools.format, a.tools.function
        f.section_start = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
        f.section_end = "<\uff5ctool\u2581calls\u2581end\uff5c>"
        f.per_call_start = "<\uff5ctool\u2581call\u2581begin\uff5c>function"
        fn.name_prefix = "<\uff5ctool\u2581sep\uff5c>"
        f.per_call_end = "<\uff5ctool\u2581call\u2581end\uff5c>"
        fn.close = "```"


def _nemotron_v2(src, a):
    if "<SPECIAL_10>" in src and "<SPECIAL_11>" in src and "<SPECIAL_12>" in src and "<TOOL_RESPONSE>" in src:
        f = a.tools.format
        f.mode, f.section_start, f.section_end = JSON_NATIVE, "", ""
        f.per_call_start, f.per_call_end, f.tools_array_wrapped = "<TOOLCALL>", "</TOOLCALL>", True
        a.content.mode, a.content.start, a.content.end = CONTENT_PLAIN, "", ""
        a.reasoning.mode, a.reasoning.start, a.reasoning.end = REASONING_TAG_BASED, "<think>\n", "</think>"
        a.assistant_start, a.user_start = "<SPECIAL_11>Assistant", "<SPECIAL_11>User"
        a.preserved_tokens = ["<SPECIAL_11>", "</think>", "<TOOLCALL>", "</TOOLCALL>"]


def _fireworks(src, a):
    if (
        "{%- set system_prompt = '<|start_header_id|>' + 'system' + '<|end_header_id|>\\n\\n'"
        " + message['content'] | trim + '\\n' + system_prompt_suffix + '<|eot_id|>' -%}"
    ) in src:
        a.assistant_start = "<|start_header_id|>assistant<|end_header_id|>"
        a.user_start = "<|start_header_id|>user<|end_header_id|>"


def _solar(src, a):
    if "<|begin|>assistant<|think|><|end|>" in src:
        a.assistant_start = "<|begin|>assistant"


def _apriel(src, a):
    if "if not loop.last and '[BEGIN FINAL RESPONSE]' in asst_text" in src:
        a.user_start, a.assistant_start = "<|begin_user|>", "<|begin_assistant|>"


def _openai_wrapper(src, a):
    if 'Respond in the format {"name": function name' in src and "Do not use variables." in src:
        a.tools.format.openai_wrapper_trigger = True


def _laguna(src, a):
    if "laguna_glm_thinking" in src:
        a.reasoning.start = trim_whitespace(a.reasoning.start)
        a.reasoning.end = trim_whitespace(a.reasoning.end)
        args = a.tools.arguments
        args.value_prefix = trim_whitespace(args.value_prefix)
        args.value_suffix = trim_whitespace(args.value_suffix)
        args.separator = trim_whitespace(args.separator)
        args.tolerate_intertag_whitespace = True
        a.additional_stops.append("</assistant>")


def _bailing_v3(src, a):
    if "Bailing V3 chat template" in src:
        a.tools.arguments.value_suffix = trim_whitespace(a.tools.arguments.value_suffix)
        a.tools.arguments.tolerate_intertag_whitespace = True


# the workarounds of chat-diff-analyzer.cpp in their order
_WORKAROUNDS = [
    _old_qwen,
    _granite,
    _command_r,
    _functionary,
    _deepseek_r1_distill,
    _nemotron_v2,
    _fireworks,
    _solar,
    _apriel,
    _openai_wrapper,
    _laguna,
    _bailing_v3,
]
