"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The differential template analysis of ``common/chat-diff-analyzer.cpp`` and its helpers
(``common/chat-auto-parser-helpers.cpp``): the template is rendered over pairs of requests that differ in one
thing (a reasoning block, ``enable_thinking``, a tool call) and the difference between the two outputs names
the template's markers. This module holds the reasoning and content analysis (the thinking tags and whether
content is wrapped), the assistant/user start markers and the preserved tokens they give; the tool-call
analysis is ``bankml._analysis_tools``. Private to bankml; ``bankml.chat`` uses it.
"""
from ._jinja import TemplateError

USER_MSG = "U_USER_MSG Hello END_U"
USER_MSG_TWO = "V_USER_MSG Hello END_V"
ASSISTANT_MSG = "A_ASST_MSG I can help END_A"
THINKING_CONTENT = "REASON_PART I am thinking END_R"
FUN_FIRST = "FFF_FIRST_FUN_F"
FUN_SECOND = "SSS_SECOND_FUN_S"
ARG_FIRST = "AA_ARG_FST_AA"
ARG_SECOND = "BB_ARG_SND_BB"
CALL_ID_001 = "call00001"

_C_SPACE = " \t\n\v\f\r"

REASONING_NONE, REASONING_TAG_BASED, REASONING_TOOLS_ONLY = "NONE", "TAG_BASED", "TOOLS_ONLY"
CONTENT_PLAIN, CONTENT_ALWAYS_WRAPPED, CONTENT_WRAPPED_WITH_REASONING = "PLAIN", "ALWAYS_WRAPPED", "WRAPPED_WITH_REASONING"

_PARAMS_SCHEMA = {"type": "object",
                  "properties": {ARG_FIRST: {"type": "string", "description": "First argument"},
                                 ARG_SECOND: {"type": "string", "description": "Second argument"}},
                  "required": []}
TOOLS = [{"type": "function", "function": {"name": FUN_FIRST, "description": "Test function foo",
                                           "parameters": _PARAMS_SCHEMA}},
         {"type": "function", "function": {"name": FUN_SECOND, "description": "Test function bar",
                                           "parameters": _PARAMS_SCHEMA}}]


def build_tool_call(name, args, call_id=CALL_ID_001):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


# -- string helpers -----------------------------------------------------------------------------------------

def trim_whitespace(s):
    return s.strip(_C_SPACE)


class Segment:
    __slots__ = ("marker", "value")

    def __init__(self, marker, value):
        self.marker, self.value = marker, value

    def __eq__(self, other):
        return self.marker == other.marker and self.value == other.value


def segmentize_markers(text):
    """Text split into TEXT and MARKER (``<...>`` / ``[...]``) segments."""
    out, in_marker, opener, last = [], False, "", 0
    for pos, c in enumerate(text):
        if not in_marker and c in "<[":
            if last < pos:
                out.append(Segment(False, text[last:pos]))
            last, in_marker, opener = pos, True, c
        elif in_marker and ((opener == "<" and c == ">") or (opener == "[" and c == "]")):
            out.append(Segment(True, text[last:pos + 1]))
            last, in_marker, opener = pos + 1, False, ""
    if last < len(text):
        out.append(Segment(False, text[last:]))
    return out


def prune_whitespace_segments(segments):
    return [s for s in segments if trim_whitespace(s.value)]


def _common_prefix_len(a, b):
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[n] == b[n]:
        n += 1
    return n


def _common_suffix_len(a, b):
    n, limit = 0, min(len(a), len(b))
    while n < limit and a[len(a) - 1 - n] == b[len(b) - 1 - n]:
        n += 1
    return n


class DiffSplit:
    __slots__ = ("prefix", "suffix", "left", "right")

    def __init__(self):
        self.prefix = self.suffix = self.left = self.right = ""


def calculate_diff_split(left, right):
    """The two texts as prefix + (left | right) + suffix, cut on marker boundaries first."""
    result = DiffSplit()
    ls, rs = segmentize_markers(left), segmentize_markers(right)
    if not ls:
        result.right = right
        return result
    if not rs:
        result.left = left
        return result
    l0, l1, r0, r1 = 0, len(ls) - 1, 0, len(rs) - 1
    left_done = right_done = False
    while l0 != l1 and r0 != r1:
        advanced = False
        if ls[l0] == rs[r0]:
            result.prefix += ls[l0].value
            l0 += 1
            r0 += 1
            advanced = True
        if ls[l1] == rs[r1]:
            result.suffix = ls[l1].value + result.suffix
            if l0 != l1:
                l1 -= 1
            else:
                left_done = True
            if r0 != r1:
                r1 -= 1
            else:
                right_done = True
            advanced = True
        if not advanced:
            break
    if l0 == l1 and r0 != r1:
        if ls[l0] == rs[r1]:
            result.suffix = rs[r1].value + result.suffix
            r1 -= 1
            left_done = True
        elif ls[l0] == rs[r0]:
            result.prefix += rs[r0].value
            r0 += 1
            left_done = True
    elif r0 == r1 and l0 != l1:
        if ls[l1] == rs[r0]:
            result.suffix = ls[l1].value + result.suffix
            l1 -= 1
            right_done = True
        elif ls[l0] == rs[r0]:
            result.prefix += ls[l0].value
            l0 += 1
            right_done = True
    elif l0 == l1 and r0 == r1 and ls[l0] == rs[r0] and ls[l0].marker:
        result.prefix += rs[r0].value
        left_done = right_done = True

    can_text_suffix = not ls[l1].marker and not rs[r1].marker
    can_text_prefix = not rs[r0].marker and not ls[l0].marker
    rem_left = "".join(s.value for s in ls[l0:(l1 if left_done else l1 + 1)])
    rem_right = "".join(s.value for s in rs[r0:(r1 if right_done else r1 + 1)])
    suffix_len = _common_suffix_len(rem_left, rem_right) if can_text_suffix else 0
    prefix_len = (_common_prefix_len(rem_left[:len(rem_left) - suffix_len], rem_right[:len(rem_right) - suffix_len])
                  if can_text_prefix else 0)
    result.prefix += rem_left[:prefix_len]
    result.suffix = rem_left[len(rem_left) - suffix_len:] + result.suffix
    result.left = rem_left[prefix_len:len(rem_left) - suffix_len]
    result.right = rem_right[prefix_len:len(rem_right) - suffix_len]
    if result.left == "" and result.right == "":
        result.prefix, result.suffix = left, ""
    if not result.left and result.right and len(left) <= len(right) and right[:len(left)] == left:
        result.prefix, result.suffix, result.right = left, "", right[len(left):]
    return result


# -- the PEG pieces the analysis matches with (greedy, no backtracking, not lenient) ------------------------

def _space(s, pos):
    while pos < len(s) and s[pos] in _C_SPACE:
        pos += 1
    return pos


def _until(s, pos, delim):
    """common_peg_until_parser, not lenient: up to the delimiter, or to a partial one at the end, or the end."""
    while pos < len(s):
        if s.startswith(delim, pos) or delim.startswith(s[pos:]):
            return pos
        pos += 1
    return pos


def _marker(s, pos):
    for opener, closer in (("<", ">"), ("[", "]")):
        if s.startswith(opener, pos):
            end = _until(s, pos + 1, closer)
            if s.startswith(closer, end):
                return end + 1
    return None


def _literal(s, pos, lit):
    return pos + len(lit) if s.startswith(lit, pos) else None


def _wrapped_at(s, pos, literal, trailing_space_in_post=True):
    """tag(pre, marker + space) + literal + tag(post, space + marker + space) + rest."""
    m = _marker(s, pos)
    if m is None:
        return None
    pre_end = _space(s, m)
    after = _literal(s, pre_end, literal)
    if after is None:
        return None
    post_start = after
    m2 = _marker(s, _space(s, after))
    if m2 is None:
        return None
    return s[pos:pre_end], s[post_start:_space(s, m2)]



def _wrapped_by_markers(inner):
    """A matcher for _anywhere: a marker, ``inner`` (spaces around it), a marker; (the text up to ``inner``,
    the closing marker and its spaces)."""
    def wrapped(s, i):
        m = _marker(s, i)
        if m is None:
            return None
        pre_end = _space(s, m)
        after = _literal(s, pre_end, inner)
        if after is None:
            return None
        sp = _space(s, after)
        m2 = _marker(s, sp)
        if m2 is None:
            return None
        return s[i:pre_end], s[sp:_space(s, m2)]
    return wrapped

def _anywhere(s, fn):
    """parse_anywhere_and_extract: the first start position where the parser succeeds."""
    for i in range(len(s)):
        res = fn(s, i)
        if res is not None:
            return res
    return None


def _delimited_at(s, pos, literal):
    """literal + space + optional(tag(post, marker + space)) + rest."""
    after = _literal(s, pos, literal)
    if after is None:
        return None
    sp = _space(s, after)
    m = _marker(s, sp)
    return ("", s[sp:_space(s, m)]) if m is not None else ("", "")


# -- template application (autoparser::apply_template, compare_variants) -----------------------------------

class Variants:
    __slots__ = ("diff", "output_a", "output_b")


def apply_template(template, messages, tools=None, add_generation_prompt=False, enable_thinking=True):
    try:
        return template.render(template.normalize(messages), tools, add_generation_prompt, enable_thinking,
                               {"enable_thinking": enable_thinking}, now=None, strip_bos_eos=False)
    except TemplateError:
        return None


def compare_variants(template, a, b):
    """a, b: keyword dicts for apply_template. None when either render fails."""
    out_a = apply_template(template, **a)
    out_b = apply_template(template, **b)
    if out_a is None or out_b is None:
        return None
    v = Variants()
    v.diff, v.output_a, v.output_b = calculate_diff_split(out_a, out_b), out_a, out_b
    return v


def _user():
    return {"role": "user", "content": USER_MSG}


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
            dict(messages=[_user(), {"role": "assistant", "content": ASSISTANT_MSG,
                                     "reasoning_content": THINKING_CONTENT}]))
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
        v = compare_variants(template, dict(messages=[_user()], add_generation_prompt=True, enable_thinking=False),
                             dict(messages=[_user()], add_generation_prompt=True, enable_thinking=True))
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
                anchor = base[len(base) - n:]
                pos = extended.rfind(anchor)
                if pos < 0 or pos + n >= len(extended):
                    continue
                extra = trim_whitespace(extended[pos + n:])
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
        with_tools = {"role": "assistant", "content": None, "reasoning_content": THINKING_CONTENT,
                      "tool_calls": [build_tool_call(FUN_FIRST, {ARG_FIRST: "VVVV", ARG_SECOND: "XXXX"})]}
        v = compare_variants(template, dict(messages=[_user(), with_content], tools=TOOLS),
                             dict(messages=[_user(), with_tools], tools=TOOLS))
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
        with_tools = dict(messages=base + [{"role": "assistant", "content": "",
                                            "tool_calls": [build_tool_call("test_func", {"arg1": "value1"})]}],
                          tools=TOOLS)
        with_reasoning = dict(messages=base + [{"role": "assistant", "content": "",
                                                "reasoning_content": THINKING_CONTENT}], tools=TOOLS)
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
                rdiff = rdiff[rdiff.index(reasoning.end) + len(reasoning.end):]
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
    content, tools (``bankml._analysis_tools.Tools``), the message start markers, the preserved tokens and
    additional stops."""

    def __init__(self, template):
        from ._analysis_tools import Tools
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
        v = compare_variants(template, dict(messages=[_user()]),
                             dict(messages=[_user(), {"role": "assistant", "content": ASSISTANT_MSG}]))
        if v is None:
            return ""
        usermsg = v.diff.right
        idx = usermsg.find(ASSISTANT_MSG)
        prefix = usermsg if idx < 0 else usermsg[:idx]
        rs, re_ = trim_whitespace(self.reasoning.start), trim_whitespace(self.reasoning.end)
        if self.reasoning.start and rs in prefix:
            prefix = prefix[:prefix.index(rs)]
        if self.reasoning.end and re_ in prefix:
            prefix = prefix[:prefix.index(re_)]
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
            usermsg = usermsg[usermsg.index(ASSISTANT_MSG) + len(ASSISTANT_MSG):]
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
    if ("content.split('</think>')" in src and "reasoning_content" not in src and "<SPECIAL_12>" not in src
            and a.reasoning.mode == REASONING_NONE):
        a.reasoning.mode, a.reasoning.start, a.reasoning.end = REASONING_TAG_BASED, "<think>", "</think>"
        a.preserved_tokens += ["<think>", "</think>"]


def _granite(src, a):
    if ("Write your thoughts between <think></think> and write your response between <response></response>"
            in src):
        a.reasoning.mode, a.reasoning.start, a.reasoning.end = REASONING_TAG_BASED, "<think>", "</think>"
        a.preserved_tokens += ["<think>", "</think>"]
        a.content.mode, a.content.start, a.content.end = CONTENT_WRAPPED_WITH_REASONING, "<response>", "</response>"
        a.preserved_tokens += ["<response>", "</response>"]


def _command_r(src, a):
    if "<|CHATBOT_TOKEN|>" in src and "<|END_OF_TURN_TOKEN|>" in src and not a.content.start:
        a.content.mode, a.content.start, a.content.end = (CONTENT_ALWAYS_WRAPPED, "<|CHATBOT_TOKEN|>",
                                                          "<|END_OF_TURN_TOKEN|>")
        a.preserved_tokens += ["<|CHATBOT_TOKEN|>", "<|END_OF_TURN_TOKEN|>"]
        a.user_start = "<|START_OF_TURN_TOKEN|><|USER_TOKEN|>"


def _functionary(src, a):
    if ('set has_code_interpreter = tools | selectattr("type", "equalto", "code_interpreter") | list | length > 0'
            in src):
        a.content.mode, a.content.end = CONTENT_PLAIN, ""
        t = a.tools
        t.function.name_prefix, t.format.section_start, t.format.section_end = "", "", ""
        t.format.per_call_start, t.format.per_call_end, t.function.close = "<function=", "</function>", ""
        a.preserved_tokens = ["<|eot_id|>", "<|eom_id|>", "<function=", ">", "</function>"]


def _deepseek_r1_distill(src, a):
    if ("{{'<\uff5cAssistant\uff5c><\uff5ctool\u2581calls\u2581begin\uff5c><\uff5ctool\u2581call\u2581begin\uff5c>'"
            " + tool['type'] + '<\uff5ctool\u2581sep\uff5c>'") in src:
        f, fn = a.tools.format, a.tools.function
        f.section_start = "<\uff5ctool\u2581calls\u2581begin\uff5c>"
        f.section_end = "<\uff5ctool\u2581calls\u2581end\uff5c>"
        f.per_call_start = "<\uff5ctool\u2581call\u2581begin\uff5c>function"
        fn.name_prefix = "<\uff5ctool\u2581sep\uff5c>"
        f.per_call_end = "<\uff5ctool\u2581call\u2581end\uff5c>"
        fn.close = "```"


def _nemotron_v2(src, a):
    if "<SPECIAL_10>" in src and "<SPECIAL_11>" in src and "<SPECIAL_12>" in src and "<TOOL_RESPONSE>" in src:
        from ._analysis_tools import JSON_NATIVE
        f = a.tools.format
        f.mode, f.section_start, f.section_end = JSON_NATIVE, "", ""
        f.per_call_start, f.per_call_end, f.tools_array_wrapped = "<TOOLCALL>", "</TOOLCALL>", True
        a.content.mode, a.content.start, a.content.end = CONTENT_PLAIN, "", ""
        a.reasoning.mode, a.reasoning.start, a.reasoning.end = REASONING_TAG_BASED, "<think>\n", "</think>"
        a.assistant_start, a.user_start = "<SPECIAL_11>Assistant", "<SPECIAL_11>User"
        a.preserved_tokens = ["<SPECIAL_11>", "</think>", "<TOOLCALL>", "</TOOLCALL>"]


def _fireworks(src, a):
    if ("{%- set system_prompt = '<|start_header_id|>' + 'system' + '<|end_header_id|>\\n\\n'"
            " + message['content'] | trim + '\\n' + system_prompt_suffix + '<|eot_id|>' -%}") in src:
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
_WORKAROUNDS = [_old_qwen, _granite, _command_r, _functionary, _deepseek_r1_distill, _nemotron_v2, _fireworks,
                _solar, _apriel, _openai_wrapper, _laguna, _bailing_v3]
