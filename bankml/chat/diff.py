"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The helpers of the differential template analysis (``common/chat-auto-parser-helpers.cpp`` and the probe
messages of ``common/chat-diff-analyzer.cpp``): the probe texts and tools, the diff of two renderings split
into common prefix, differing middles and common suffix, marker segmentation and the small scanners the
reasoning, content and tool-call analyses share. ``bankml.chat.analysis`` and ``bankml.chat.analysis_tools``
build on it; it must not import either.
"""

from bankml.chat.jinja import TemplateError

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
CONTENT_PLAIN, CONTENT_ALWAYS_WRAPPED, CONTENT_WRAPPED_WITH_REASONING = (
    "PLAIN",
    "ALWAYS_WRAPPED",
    "WRAPPED_WITH_REASONING",
)

_PARAMS_SCHEMA = {
    "type": "object",
    "properties": {
        ARG_FIRST: {"type": "string", "description": "First argument"},
        ARG_SECOND: {"type": "string", "description": "Second argument"},
    },
    "required": [],
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": FUN_FIRST, "description": "Test function foo", "parameters": _PARAMS_SCHEMA},
    },
    {
        "type": "function",
        "function": {"name": FUN_SECOND, "description": "Test function bar", "parameters": _PARAMS_SCHEMA},
    },
]


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
            out.append(Segment(True, text[last : pos + 1]))
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
    rem_left = "".join(s.value for s in ls[l0 : (l1 if left_done else l1 + 1)])
    rem_right = "".join(s.value for s in rs[r0 : (r1 if right_done else r1 + 1)])
    suffix_len = _common_suffix_len(rem_left, rem_right) if can_text_suffix else 0
    prefix_len = (
        _common_prefix_len(rem_left[: len(rem_left) - suffix_len], rem_right[: len(rem_right) - suffix_len])
        if can_text_prefix
        else 0
    )
    result.prefix += rem_left[:prefix_len]
    result.suffix = rem_left[len(rem_left) - suffix_len :] + result.suffix
    result.left = rem_left[prefix_len : len(rem_left) - suffix_len]
    result.right = rem_right[prefix_len : len(rem_right) - suffix_len]
    if result.left == "" and result.right == "":
        result.prefix, result.suffix = left, ""
    if not result.left and result.right and len(left) <= len(right) and right[: len(left)] == left:
        result.prefix, result.suffix, result.right = left, "", right[len(left) :]
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
    return s[pos:pre_end], s[post_start : _space(s, m2)]


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
        return s[i:pre_end], s[sp : _space(s, m2)]

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
    return ("", s[sp : _space(s, m)]) if m is not None else ("", "")


# -- template application (autoparser::apply_template, compare_variants) -----------------------------------


class Variants:
    __slots__ = ("diff", "output_a", "output_b")


def apply_template(template, messages, tools=None, add_generation_prompt=False, enable_thinking=True):
    try:
        return template.render(
            template.normalize(messages),
            tools,
            add_generation_prompt,
            enable_thinking,
            {"enable_thinking": enable_thinking},
            now=None,
            strip_bos_eos=False,
        )
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
