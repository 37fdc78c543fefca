"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The tool-call analysis of ``common/chat-diff-analyzer.cpp`` (``analyze_tools``): the template is rendered with
an assistant turn that calls a tool against variants (no call, another function, another argument, another
value, two calls, another id) and the differences give the tool-call format (JSON native, tag with JSON
arguments, tag with tagged arguments), its section / per-call markers, the function name and argument markers
and the call-id markers. The small PEG parsers it matches with are built with ``bankml.chat.peg_builder`` and run as
llama.cpp's ``tagged_peg_parser`` (not lenient). Private to bankml; ``bankml.chat.analysis`` uses it.
"""

import json

from bankml.chat import peg
from bankml.chat.chat_peg import function_parameters, function_tools, parameter_source, tool_parameters
from bankml.chat.diff import (
    _C_SPACE,
    ARG_FIRST,
    ARG_SECOND,
    CALL_ID_001,
    FUN_FIRST,
    FUN_SECOND,
    TOOLS,
    build_tool_call,
    calculate_diff_split,
    compare_variants,
)
from bankml.chat.peg_builder import Builder
from bankml.schema.queries import may_be_string

TOOL_NONE, JSON_NATIVE, TAG_WITH_JSON, TAG_WITH_TAGGED = "NONE", "JSON_NATIVE", "TAG_WITH_JSON", "TAG_WITH_TAGGED"
ID_NONE, ID_PRE_FUNC_NAME, ID_BETWEEN_FUNC_AND_ARGS, ID_POST_ARGS = (
    "NONE",
    "PRE_FUNC_NAME",
    "BETWEEN_FUNC_AND_ARGS",
    "POST_ARGS",
)


def trim_leading_whitespace(s):
    return s.lstrip(_C_SPACE)


def _b(s):
    return s.encode("utf-8", "surrogateescape")


def _s(b):
    return b.decode("utf-8", "surrogateescape")


class Tagged:
    """tagged_peg_parser: an arena built by ``fn(builder)``; its parses give (success, {tag: text})."""

    def __init__(self, fn):
        b = Builder()
        b.set_root(fn(b))
        self.arena = b.build()

    def _run(self, data, start):
        ctx = peg.Context(data, lenient=False)
        res = self.arena.parse(ctx, start)
        tags = {}
        for node in ctx.visit(res.nodes):
            if node.tag:
                tags[node.tag] = _s(node.text)
        return res.type == peg.SUCCESS, tags

    def parse(self, text):
        return self._run(_b(text), 0)

    def parse_anywhere(self, text):
        data = _b(text)
        if not data:
            return self._run(data, 0)
        for i in range(len(data)):
            ok, tags = self._run(data, i)
            if ok or i == len(data) - 1:
                return ok, tags
        raise AssertionError("unreachable")


def until_common_prefix(full, left, right):
    n = 0
    while n < min(len(left), len(right)) and left[n] == right[n]:
        n += 1
    if n == 0:
        return ""
    pos = full.find(left[:n])
    return "" if pos < 0 else full[:pos]


def after_common_suffix(full, left, right):
    n = 0
    while n < min(len(left), len(right)) and left[len(left) - 1 - n] == right[len(right) - 1 - n]:
        n += 1
    if n == 0:
        return ""
    suffix = left[len(left) - n :]
    pos = full.rfind(suffix)
    return "" if pos < 0 else full[pos + len(suffix) :]


class ToolFormat:
    def __init__(self):
        self.mode = TOOL_NONE
        self.section_start = self.section_end = self.per_call_start = self.per_call_end = ""
        self.fun_name_is_key = self.tools_array_wrapped = self.openai_wrapper_trigger = False
        self.function_field, self.name_field, self.args_field = "function", "name", "arguments"
        self.id_field = self.gen_id_field = ""
        self.parameter_order = []


class ToolFunction:
    def __init__(self):
        self.name_prefix = self.name_suffix = self.args_separator = self.close = ""


class ToolArguments:
    def __init__(self):
        self.start = self.end = self.name_prefix = self.name_suffix = ""
        self.value_prefix = self.value_suffix = self.separator = ""
        self.tolerate_intertag_whitespace = False


class ToolCallId:
    def __init__(self):
        self.pos, self.prefix, self.suffix = ID_NONE, "", ""


def _last_marker_tail(p):
    return p.marker() + p.zero_or_more(p.negate(p.marker()) + p.any()) + p.end()


class Tools:
    """analyze_tools. ``Tools()`` is the empty analysis (a template without tool calls)."""

    def __init__(self, template=None, caps=None, reasoning=None):
        self.format, self.function = ToolFormat(), ToolFunction()
        self.arguments, self.call_id = ToolArguments(), ToolCallId()
        if template is None:
            return
        self._A = dict(
            ARG_FIRST=ARG_FIRST,
            ARG_SECOND=ARG_SECOND,
            FUN_FIRST=FUN_FIRST,
            FUN_SECOND=FUN_SECOND,
            CALL_ID_001=CALL_ID_001,
        )
        self.template, self.compare, self.tools = template, compare_variants, TOOLS
        user = {"role": "user", "content": "U_USER_MSG Hello END_U"}
        self.user = user
        self.calls = {
            "zero": build_tool_call(FUN_FIRST, {}, CALL_ID_001),
            "one": build_tool_call(FUN_FIRST, {ARG_FIRST: "XXXX"}, CALL_ID_001),
            "one_other_val": build_tool_call(FUN_FIRST, {ARG_FIRST: "YYYY"}, CALL_ID_001),
            "other_arg": build_tool_call(FUN_FIRST, {ARG_SECOND: "YYYY"}, CALL_ID_001),
            "first": build_tool_call(FUN_FIRST, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}, CALL_ID_001),
            "second": build_tool_call(FUN_SECOND, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}, "call00002"),
            "alt_id": build_tool_call(FUN_FIRST, {ARG_FIRST: "XXXX", ARG_SECOND: "YYYY"}, "call99999"),
        }
        self._analyze_tool_calls(reasoning, caps.supports_parallel_tool_calls)
        f = self.format
        if f.mode != TOOL_NONE and f.mode != JSON_NATIVE:
            if caps.supports_parallel_tool_calls:
                self._check_per_call_markers()
            self._extract_function_markers()
            if f.mode == TAG_WITH_TAGGED:
                self._extract_argument_name_markers()
                self._extract_argument_value_markers()
            self._extract_argument_separator()
            self._extract_args_markers()
            self._extract_call_id_markers()
        del self.template, self.compare

    # -- rendering helpers --
    def _assistant(self, *calls, content=""):
        m = {"role": "assistant", "content": content}
        if calls:
            m["tool_calls"] = [self.calls[c] for c in calls]
        return m

    def _cmp(self, a, b):
        return self.compare(
            self.template,
            dict(messages=[self.user, a], tools=self.tools),
            dict(messages=[self.user, b], tools=self.tools),
        )

    # -- analyze_tool_calls / analyze_tool_call_format --
    def _analyze_tool_calls(self, reasoning, parallel):
        v = self._cmp({"role": "assistant", "content": "A_ASST_MSG I can help END_A"}, self._assistant("first"))
        if v is None or not v.diff.right:
            return
        self._tool_call_format(v.diff.right, self._A["FUN_FIRST"], self._A["ARG_FIRST"], reasoning, parallel)

    def _tool_call_format(self, haystack, fun, arg, reasoning, parallel):
        if not fun or not arg or not haystack:
            return
        f = self.format

        def in_json(needle):
            t = Tagged(
                lambda p: (
                    p.choice([p.literal("{"), p.literal(":")])
                    << p.choice([p.tag("dq", p.literal('"') + p.literal(needle) + p.literal('"'))])
                )
            )
            return t.parse_anywhere(haystack)[0]

        fun_quote, arg_quote = in_json(fun), in_json(arg)
        f.mode = JSON_NATIVE if fun_quote else (TAG_WITH_JSON if arg_quote else TAG_WITH_TAGGED)
        clean = haystack
        if reasoning.start:
            pos = haystack.find(reasoning.start)
            if pos >= 0:
                clean = haystack[:pos] + haystack[pos + len(reasoning.start) :]
        if reasoning.end:
            pos = clean.find(reasoning.end)
            if pos >= 0:
                clean = clean[:pos] + clean[pos + len(reasoning.end) :]
        if f.mode == JSON_NATIVE:
            self._json_native(clean, fun, arg)
            if parallel:
                self._json_native_parallel()
        else:
            self._non_json(clean, fun)
        f.section_end = f.section_end.strip(_C_SPACE)
        f.per_call_end = f.per_call_end.strip(_C_SPACE)

    def _json_native_parallel(self):
        v = self._cmp(self._assistant("first"), self._assistant("first", "second"))
        if v is None:
            return
        f = self.format
        if f.section_start and f.section_start in v.diff.right:
            f.per_call_start, f.per_call_end = f.section_start, f.section_end
            f.section_start = f.section_end = ""

    def _json_native(self, clean, fun, arg):
        f = self.format
        bclean = _b(clean)
        json_start, json_end = bclean.find(b"{"), bclean.rfind(b"}")
        if json_start < 0:
            raise RuntimeError("basic_string::substr: __pos > this->size()")
        cut_b = bclean[json_start : json_end + 1] if json_end >= json_start else bclean[json_start:json_start]
        cut = _s(cut_b)
        call_struct = json.loads(cut)

        def dump(v):
            return json.dumps(v, ensure_ascii=False, separators=(",", ":"))

        def register(prefix, key, value):
            name = prefix + "." + key if prefix else key
            if isinstance(value, str) and "call0000" in value:
                f.id_field = name
            elif isinstance(value, str) and value == fun:
                f.name_field = name
            elif arg in dump(value):
                f.args_field = name
            elif "id" in key:
                f.gen_id_field = name

        if isinstance(call_struct, dict):
            for key, value in call_struct.items():
                if key == fun:
                    f.fun_name_is_key = True
                    f.name_field = f.args_field = ""
                else:
                    if isinstance(value, dict) and arg not in dump(value):
                        f.function_field = key
                        for k2, v2 in value.items():
                            register(key, k2, v2)
                    register("", key, value)
        ok, tags = Tagged(
            lambda p: (
                p.tag("pre", p.literal("[") + p.space()) + p.literal(cut) + p.tag("post", p.space() + p.literal("]"))
            )
        ).parse_anywhere(clean)
        if ok:
            f.tools_array_wrapped = True
            json_start -= len(_b(tags.get("pre", "")))
            json_end += len(_b(tags.get("post", "")))
        json_end += 1
        located = []
        for field in (f.name_field, f.args_field, f.id_field, f.gen_id_field):
            if field:
                pos = bclean.find(_b(field))
                located.append((pos if pos >= 0 else 1 << 64, field))
        located.sort()
        f.parameter_order += [name for _, name in located]
        f.section_start = trim_leading_whitespace(_s(bclean[:json_start]))
        f.section_end = _s(bclean[json_end:]).strip(_C_SPACE)
        if f.tools_array_wrapped and f.section_end == "]":
            f.section_end = ""

    def _non_json(self, clean, fun):
        f = self.format

        def fun_marker_fn(p):
            return p.tag(
                "fun_marker",
                p.choice(
                    [
                        p.tag("fun_pre", p.literal("<") + p.until_one_of([">", fun]))
                        + p.literal(fun)
                        + p.tag("fun_post", p.negate(p.space() + p.literal("<")) + p.until(">") + p.literal(">"))
                        + p.space(),
                        p.tag("fun_pre", p.literal("[") + p.until_one_of(["]", fun]))
                        + p.literal(fun)
                        + p.tag(
                            "fun_post", p.negate(p.space() + p.literal("[") + p.until("]") + p.literal("]")) + p.space()
                        ),
                    ]
                ),
            )

        fun_ok, fun_tags = Tagged(fun_marker_fn).parse_anywhere(clean)
        fun_marker = fun_tags.get("fun_marker", "") if fun_ok else fun

        ok, tags = Tagged(
            lambda p: (
                p.tag("sec_start", p.marker() + p.space())
                + p.tag("call_start", p.marker() + p.space())
                + p.tag("fun_pre", p.until(fun_marker))
                + fun_marker
                + p.tag("rest", p.rest())
            )
        ).parse_anywhere(clean)
        if ok:
            _, end_tags = Tagged(
                lambda p: p.tag("call_end", p.marker() + p.space()) + p.tag("sec_end", p.marker() + p.space()) + p.end()
            ).parse_anywhere(tags.get("rest", ""))
            self.function.name_prefix = fun_tags.get("fun_pre", "") + self.function.name_prefix
        else:
            ok, tags = Tagged(
                lambda p: p.tag("sec_start", p.marker() + p.space()) + fun_marker + p.tag("rest", p.rest())
            ).parse_anywhere(clean)
            _, end_tags = Tagged(lambda p: p.tag("sec_end", p.marker() + p.space()) + p.end()).parse_anywhere(
                tags.get("rest", "")
            )
        f.per_call_start = tags.get("call_start", "")
        f.per_call_end = end_tags.get("call_end", "")
        f.section_start = tags.get("sec_start", "")
        f.section_end = end_tags.get("sec_end", "")

    # -- check_per_call_markers --
    def _check_per_call_markers(self):
        v = self._cmp(self._assistant("first"), self._assistant("first", "second"))
        if v is None:
            return
        f = self.format
        filt = calculate_diff_split(v.diff.suffix, v.diff.right)
        second = trim_leading_whitespace(filt.right)
        if f.section_start and second.startswith(f.section_start):
            f.per_call_start, f.per_call_end = f.section_start, f.section_end
            f.section_start = f.section_end = ""
        if f.per_call_end:
            one, two = _count(v.output_a, f.per_call_end), _count(v.output_b, f.per_call_end)
            if one > 0 and one == two:
                f.section_end, f.per_call_end = f.per_call_end, ""

    # -- extract_function_markers --
    def _extract_function_markers(self):
        A = self._A
        v = self._cmp(self._assistant("first"), self._assistant("second"))
        if v is None:
            return
        d, f, fn = v.diff, self.format, self.function
        if not (A["FUN_FIRST"] in d.left and A["FUN_SECOND"] in d.right):
            return
        prefix_marker = f.per_call_start or f.section_start
        if prefix_marker and d.prefix.rfind(prefix_marker) >= 0:
            fn.name_prefix = d.prefix[d.prefix.rfind(prefix_marker) + len(prefix_marker) :]
        ok, tags = Tagged(
            lambda p: (
                p.tag("pre", p.until(A["FUN_FIRST"]))
                + p.literal(A["FUN_FIRST"])
                + p.tag("post", p.zero_or_more(p.negate(p.marker()) + p.any()))
            )
        ).parse(d.left)
        if ok:
            fn.name_prefix += tags.get("pre", "")
            fn.name_suffix = tags.get("post", "")
        if f.mode == TAG_WITH_JSON:

            def suffix_fn(p):
                non_json = p.marker() | (p.negate(p.literal("{")) + p.negate(p.literal("[")) + p.any())
                after_json = p.zero_or_more(p.negate(p.marker()) + p.any()) + p.marker()
                return p.tag("ext", p.zero_or_more(non_json)) + after_json

            ok, tags = Tagged(suffix_fn).parse(d.suffix)
            if ok:
                fn.name_suffix += tags.get("ext", "")
        else:
            ok, tags = Tagged(lambda p: p.tag("ext", p.zero_or_more(p.negate(p.marker()) + p.any()))).parse(d.suffix)
            if ok:
                ext = tags.get("ext", "")
                fn.name_suffix += ext

                def arg_start(p):
                    return p.marker() + p.space() + p.choice([p.literal(A["ARG_FIRST"]), p.literal(A["ARG_SECOND"])])

                ok2, tags2 = Tagged(
                    lambda p: p.tag("sep", p.zero_or_more(p.negate(arg_start(p)) + p.any())) + arg_start(p)
                ).parse(_s(_b(d.suffix)[len(_b(ext)) :]))
                if ok2:
                    fn.args_separator = tags2.get("sep", "").strip(_C_SPACE)
        suffix_marker = f.per_call_end or f.section_end
        closer = ""
        if not suffix_marker:
            nv = self._cmp(self._assistant("first"), {"role": "assistant", "content": "A_ASST_MSG I can help END_A"})
            if nv is not None:
                left = nv.diff.left
                pos = left.find("YYYY")
                closer = left[pos + 4 :] if pos >= 0 else left[3:]
        else:
            pos = d.suffix.find(suffix_marker)
            closer = d.suffix if pos < 0 else d.suffix[:pos]
        if closer:
            if f.mode == TAG_WITH_TAGGED:
                ok, tags = Tagged(
                    lambda p: (
                        p.until("YYYY")
                        + p.literal("YYYY")
                        + p.space()
                        + p.marker()
                        + p.space()
                        + p.tag("close", p.rest())
                    )
                ).parse(closer)
                if ok:
                    fn.close = tags.get("close", "")
            elif f.mode == TAG_WITH_JSON:
                ok, tags = Tagged(lambda p: p.until("YYYY") + p.literal("YYYY") + p.tag("post_val", p.rest())).parse(
                    closer
                )
                if ok:
                    post = tags.get("post_val", "")
                    pos = max(post.rfind("}"), post.rfind("]"))
                    if pos >= 0 and pos < len(post) - 1:
                        fn.close = trim_leading_whitespace(post[pos + 1 :])
        fn.close = trim_leading_whitespace(fn.close)

    # -- extract_argument_name_markers / extract_argument_value_markers --
    def _extract_argument_name_markers(self):
        A = self._A
        v = self._cmp(self._assistant("one"), self._assistant("other_arg"))
        if v is None:
            return
        d, a = v.diff, self.arguments
        if not d.left or not d.right:
            return
        ok_l, tl = Tagged(
            lambda p: (
                p.tag("pre", p.until(A["ARG_FIRST"]))
                + p.literal(A["ARG_FIRST"])
                + p.tag("suffix", p.until_one_of(['"', "X"]))
            )
        ).parse_anywhere(d.left)
        ok_r, tr = Tagged(
            lambda p: (
                p.tag("pre", p.until(A["ARG_SECOND"]))
                + p.literal(A["ARG_SECOND"])
                + p.tag("suffix", p.until_one_of(['"', "Y"]))
            )
        ).parse_anywhere(d.right)
        if (
            ok_l
            and ok_r
            and tl.get("pre", "")
            and tl.get("pre", "") == tr.get("pre", "")
            and tl.get("suffix", "") == tr.get("suffix", "")
        ):
            a.name_prefix, a.name_suffix = tl.get("pre", ""), tl.get("suffix", "")
        elif d.left.startswith(A["ARG_FIRST"]) and d.right.startswith(A["ARG_SECOND"]):
            ok, tags = Tagged(
                lambda p: (
                    p.zero_or_more(p.negate(_last_marker_tail(p)) + p.any())
                    + p.tag("name_prefix", _last_marker_tail(p))
                )
            ).parse(d.prefix)
            a.name_prefix = tags.get("name_prefix", "") if ok else d.prefix
            after_first = d.left[len(A["ARG_FIRST"]) :] + d.suffix
            ok, tags = Tagged(
                lambda p: p.tag("suffix", p.zero_or_more(p.negate(p.marker()) + p.any()) + p.marker() + p.space())
            ).parse_anywhere(after_first)
            if ok:
                a.name_suffix = tags.get("suffix", "")

    def _extract_argument_value_markers(self):
        A = self._A
        v = self._cmp(self._assistant("one"), self._assistant("one_other_val"))
        if v is None:
            return
        d, a, f = v.diff, self.arguments, self.format
        if not (d.left == "XXXX" and d.right == "YYYY"):
            return
        ending = A["ARG_FIRST"] + a.name_suffix
        prefix = d.prefix
        if prefix.rfind(ending) >= 0:
            prefix = prefix[prefix.rfind(ending) + len(ending) :]
        if prefix:
            ok, tags = Tagged(
                lambda p: (
                    p.zero_or_more(p.negate(_last_marker_tail(p)) + p.any()) + p.tag("val_prefix", _last_marker_tail(p))
                )
            ).parse(prefix)
            a.value_prefix = tags.get("val_prefix", "") if ok else prefix
        value_suffix = d.suffix
        if self.function.close:
            pos = value_suffix.find(self.function.close)
            if pos >= 0:
                value_suffix = value_suffix[:pos]
        elif f.per_call_end or f.section_end:
            end_marker = f.per_call_end or f.section_end
            pos = value_suffix.find(end_marker)
            if pos >= 0:
                value_suffix = value_suffix[:pos]
        if value_suffix.strip(_C_SPACE):
            a.value_suffix = value_suffix

    def _extract_argument_separator(self):
        A = self._A
        v = self._cmp(self._assistant("one"), self._assistant("first"))
        if v is None:
            return
        if v.diff.right:
            self.arguments.separator = until_common_prefix(v.diff.right, A["ARG_FIRST"], A["ARG_SECOND"])

    def _extract_args_markers(self):
        A = self._A
        v = self._cmp(self._assistant("zero"), self._assistant("one"))
        if v is None:
            return
        d, f = v.diff, self.format
        if f.mode != JSON_NATIVE:
            return
        # (unreachable in llama.cpp: analyze_tools only calls this for the non-JSON formats)
        prefix_marker = f.section_start or f.per_call_start
        suffix_marker = f.section_end or f.per_call_end
        prefix_pos = 0 if not prefix_marker else d.prefix.rfind(prefix_marker)
        suffix_pos = len(d.suffix) if not suffix_marker else d.suffix.find(suffix_marker)
        if prefix_pos < 0:
            prefix_pos = 0
        if suffix_pos < 0:
            suffix_pos = len(d.suffix)
        prefix_cut = d.prefix[prefix_pos + len(prefix_marker) :]
        suffix_cut = d.suffix[:suffix_pos]
        args_start = until_common_prefix(prefix_cut, "{}", '{"first":')
        args_end = after_common_suffix(suffix_cut, "{}", '"XXXX"}')
        if args_start or args_end:
            i = args_start.find(A["FUN_FIRST"])
            if i >= 0:
                args_start = args_start[i + len(A["FUN_FIRST"]) :]
            i = args_start.find(A["CALL_ID_001"])
            if i >= 0:
                args_start = args_start[i + len(A["CALL_ID_001"]) :]
            self.arguments.start, self.arguments.end = args_start, args_end

    # -- extract_call_id_markers --
    def _extract_call_id_markers(self):
        A = self._A
        v = self._cmp(self._assistant("first"), self._assistant("alt_id"))
        if v is None:
            return
        d, cid = v.diff, self.call_id
        if not d.left and not d.right:
            return
        id1, id2 = "call00001", "call99999"
        n = 0
        while n < min(len(id1), len(id2)) and id1[n] == id2[n]:
            n += 1
        common = id1[:n]
        func = A["FUN_FIRST"]
        in_prefix, in_suffix = d.prefix.rfind(func), d.suffix.find(func)

        def find_last_marker(s):
            ok, tags = Tagged(
                lambda p: p.zero_or_more(p.negate(_last_marker_tail(p)) + p.any()) + p.tag("m", p.marker())
            ).parse_anywhere(s)
            return tags.get("m", "") if ok else ""

        def find_first_marker(s):
            ok, tags = Tagged(lambda p: p.tag("m", p.marker())).parse_anywhere(s)
            return tags.get("m", "") if ok else ""

        if in_prefix >= 0 and in_suffix < 0:
            args_in_prefix = d.prefix.find("{", in_prefix)
            args_in_suffix = d.suffix.find("{")
            if args_in_suffix >= 0 and args_in_prefix < 0:
                cid.pos = ID_BETWEEN_FUNC_AND_ARGS
                after_func = d.prefix[in_prefix + len(func) :]
                ok, tags = Tagged(
                    lambda p: (
                        p.tag("prefix", p.marker())
                        + p.zero_or_more(p.negate(p.marker()) + p.negate(p.literal(common)) + p.any())
                        + p.literal(common)
                    )
                ).parse_anywhere(after_func)
                cid.prefix = tags.get("prefix", "") if ok else find_last_marker(after_func)
                ok, tags = Tagged(
                    lambda p: (
                        p.zero_or_more(p.negate(p.marker()) + p.negate(p.literal("{")) + p.any())
                        + p.tag("suffix", p.marker())
                    )
                ).parse_anywhere(d.suffix)
                if ok:
                    cid.suffix = tags.get("suffix", "")
            elif args_in_prefix >= 0:
                cid.pos = ID_POST_ARGS
                after_args = d.prefix[args_in_prefix:]
                brace = after_args.rfind("}")
                if brace >= 0:
                    cid.prefix = find_last_marker(after_args[brace + 1 :])
                cid.suffix = find_first_marker(d.suffix)
        elif in_suffix >= 0 and in_prefix < 0:
            cid.pos = ID_PRE_FUNC_NAME
            cid.prefix = find_last_marker(d.prefix)
            cid.suffix = find_first_marker(d.suffix[:in_suffix])
        if cid.prefix == self.arguments.end:
            cid.prefix = ""
        if cid.suffix == self.arguments.start:
            cid.suffix = ""
        if cid.pos != ID_NONE and cid.suffix and self.format.per_call_end.startswith(cid.suffix):
            self.format.per_call_end = ""

    def tokens(self):
        """The tool markers in collect_preserved_tokens' order."""
        f, fn, a, c = self.format, self.function, self.arguments, self.call_id
        return [
            f.section_start,
            f.section_end,
            f.per_call_start,
            f.per_call_end,
            fn.name_prefix,
            fn.name_suffix,
            fn.args_separator,
            fn.close,
            a.start,
            a.end,
            a.name_prefix,
            a.name_suffix,
            a.separator,
            a.value_prefix,
            a.value_suffix,
            c.prefix,
            c.suffix,
        ]


def _count(haystack, needle):
    n, pos = 0, haystack.find(needle)
    while pos >= 0:
        n += 1
        pos = haystack.find(needle, pos + len(needle))
    return n


# -- the auto-parser's tool branch (chat-auto-parser-generator.cpp) ----------------------------------------
# C++ builds the right operand of + and | first (GCC), which fixes the parser ids shown in the grammar: the
# code below creates the parsers in that order.


def _func_parser(p, t, name, call_id_section, have_call_id, args, atomic_peek):
    """analyze_tools::build_func_parser."""
    fn, f, a = t.function, t.format, t.arguments
    open_ = p.tool_open(fn.name_prefix + p.tool_name(p.literal(name)) + fn.name_suffix)
    matched_atomic = False
    func = p.eps()
    if fn.args_separator:
        sep = p.literal(fn.args_separator)
        open_ = open_ + p.space() + sep
    if fn.name_suffix:
        sp = p.space()
        func = open_ + call_id_section + sp + args
        matched_atomic = True
    elif have_call_id:
        sp = p.space()
        func = p.atomic(open_ + call_id_section) + sp + args
        matched_atomic = True
    elif atomic_peek is not None:
        sp = p.space()
        func = p.atomic(open_ + call_id_section + sp + atomic_peek) + args
        matched_atomic = True
    else:
        sp = p.space()
        func = open_ + call_id_section + sp + args
    if fn.close:
        close = p.tool_close(p.literal(fn.close))
        func = func + p.space() + close
    elif f.per_call_end:
        if a.tolerate_intertag_whitespace:
            lit = p.literal(f.per_call_end)
            close_peek = p.peek(p.space() + lit)
        else:
            close_peek = p.peek(p.literal(f.per_call_end))
        func = func + p.tool_close(close_peek)
    else:
        func = func + p.tool_close(p.space())
    if not matched_atomic:
        func = p.atomic(func)
    return func


def _call_id_section(p, t, with_suffix_inside):
    c, a = t.call_id, t.arguments
    section = p.eps()
    have = False
    if c.pos == ID_BETWEEN_FUNC_AND_ARGS and c.prefix and (c.suffix or a.start):
        have = True
        if c.suffix:
            if with_suffix_inside:
                section = p.optional(c.prefix + p.tool_id(p.until(c.suffix)) + c.suffix)
            else:
                section = p.optional(c.prefix + p.tool_id(p.until(c.suffix))) + c.suffix
        else:
            section = p.optional(c.prefix + p.tool_id(p.until(a.start)))
    return section, have


def _tail(p, reasoning_parser, f, tool_calls, inp):
    if inp.forced:  # strict mode: the calls right after the reasoning (and the whitespace the template writes)
        return reasoning_parser + p.space() + tool_calls + p.end()
    trigger = f.section_start or f.per_call_start
    before = p.eps() if not trigger else p.until(trigger)
    end = p.end()
    return reasoning_parser + p.optional(p.content(before)) + tool_calls + end


def _build_json_native(p, t, inp, reasoning_parser, content):
    f = t.format
    name_field, args_field = f.name_field, f.args_field
    if f.function_field and f.function_field != "function" and "." not in name_field:
        name_field = f.function_field + "." + name_field
        args_field = f.function_field + "." + args_field
    tools_parser = p.eps()
    required = inp.tool_choice == "required"
    tools = function_tools(inp.tools)
    if not f.section_start and f.per_call_start:
        single = p.standard_json_tools(
            f.per_call_start,
            f.per_call_end,
            tools,
            inp.parallel_tool_calls,
            required,
            name_field,
            args_field,
            f.tools_array_wrapped,
            f.fun_name_is_key,
            f.id_field,
            f.gen_id_field,
            f.parameter_order,
            f.openai_wrapper_trigger,
        )
        if inp.strict_tools and not inp.parallel_tool_calls:  # llama.cpp takes more calls regardless
            tools_parser = p.trigger_rule("tool-calls", single + p.space())
        else:
            tools_parser = p.trigger_rule("tool-calls", p.one_or_more(single + p.space()))
    else:
        tools_parser = p.standard_json_tools(
            f.section_start,
            f.section_end,
            tools,
            inp.parallel_tool_calls,
            required,
            name_field,
            args_field,
            f.tools_array_wrapped,
            f.fun_name_is_key,
            f.id_field,
            f.gen_id_field,
            f.parameter_order,
            f.openai_wrapper_trigger,
        )
    if inp.forced:  # strict mode: the calls right after the reasoning (and the whitespace the template writes)
        return reasoning_parser + p.space() + tools_parser + p.end()
    if content.is_always_wrapped():
        wrapped = p.optional(content.start + p.content(p.until(content.end)) + content.end)
        end = p.end()
        return reasoning_parser + wrapped + tools_parser + end
    tool_start = f.section_start or f.per_call_start or "{"
    end = p.end()
    return reasoning_parser + p.optional(p.content(p.until(tool_start))) + tools_parser + end


def _build_tag_json(p, t, inp, reasoning_parser):
    f, a = t.format, t.arguments
    tool_choice = p.choice()
    for tool in function_tools(inp.tools):
        func = tool["function"]
        name = func["name"]
        schema = tool_parameters(func)
        call_id_section, have_call_id = _call_id_section(p, t, False)
        args = p.tool_args(p.schema(p.json(), "tool-" + name + "-schema", schema))
        if a.start:
            args = p.literal(a.start) + args
        if a.end:
            args = args + p.literal(a.end)
        peek = p.peek(p.literal(a.start)) if a.start else None
        tool_choice = tool_choice | p.rule(
            "tool-" + name, _func_parser(p, t, name, call_id_section, have_call_id, args, peek)
        )
    tool_calls = p.eps()
    if f.per_call_start:
        wrapped = f.per_call_start + tool_choice + f.per_call_end
        if inp.parallel_tool_calls:
            more = p.zero_or_more(p.space() + wrapped)
            tool_calls = p.trigger_rule("tool-call", wrapped + more)
        else:
            tool_calls = p.trigger_rule("tool-call", wrapped)
        if f.section_start:
            last = p.end() if not f.section_end else p.literal(f.section_end)
            sp2 = p.space()
            sp1 = p.space()
            tool_calls = p.trigger_rule("tool-calls", p.literal(f.section_start) + sp1 + tool_calls + sp2 + last)
    else:
        if inp.parallel_tool_calls:
            more = p.zero_or_more(", " + tool_choice)
            tool_calls = p.trigger_rule("tool-call", f.section_start + tool_choice + more + f.section_end)
        else:
            tool_calls = p.trigger_rule("tool-call", f.section_start + tool_choice + f.section_end)
    if inp.tool_choice != "required":
        tool_calls = p.optional(tool_calls)
    return _tail(p, reasoning_parser, f, tool_calls, inp)


def _build_tag_tagged(p, t, inp, reasoning_parser):
    f, a = t.format, t.arguments
    until_suffix = p.rule("until-suffix", p.until(a.value_suffix))
    tool_choice = p.choice()
    for tool in function_tools(inp.tools):
        func = tool["function"]
        name = func["name"]
        required, optional = [], []
        if inp.strict_tools:
            args = _strict_tagged_args(p, a, func, until_suffix)
        for pname, node, is_required in () if inp.strict_tools else function_parameters(func):
            if may_be_string(node):
                close = p.tool_arg_close(p.literal(a.value_suffix))
                value = p.ac(p.tool_arg_string_value(until_suffix) + close, a.value_suffix)
            else:
                close = p.tool_arg_close(p.literal(a.value_suffix))
                value = (
                    p.tool_arg_json_value(
                        p.schema(
                            p.json(),
                            "tool-%s-arg-%s-schema" % (name, pname),
                            None,
                            node=node,
                            source=parameter_source(func, pname),
                        )
                    )
                    + close
                )
            open_ = p.tool_arg_open(a.name_prefix + p.tool_arg_name(p.literal(pname)) + a.name_suffix)
            arg = p.tool_arg(open_ + a.value_prefix + value)
            named = p.rule("tool-%s-arg-%s" % (name, pname), arg)
            (required if is_required else optional).append(named)
        if not inp.strict_tools:
            args = p.required_then_optional(required, optional)
        if a.start:
            args = p.literal(a.start) + args
        if a.end:
            args = args + p.literal(a.end)
        call_id_section, have_call_id = _call_id_section(p, t, True)
        peek = p.peek(p.literal(a.name_prefix)) if a.name_prefix and required else None
        tool_choice = tool_choice | p.rule(
            "tool-" + name, _func_parser(p, t, name, call_id_section, have_call_id, args, peek)
        )
    tool_calls = p.eps()
    if f.per_call_start:
        sp2 = p.space()
        if inp.strict_tools and f.per_call_end and not a.tolerate_intertag_whitespace:
            # the call's close is a peek at the end marker right after the arguments (_func_parser): the
            # parser takes no whitespace there, so strict mode's grammar does not either (llama.cpp's does)
            sp2 = p.eps()
        wrapped = f.per_call_start + p.space() + tool_choice + sp2 + f.per_call_end
        if inp.parallel_tool_calls:
            spa = p.space()
            more = p.zero_or_more(p.space() + wrapped)
            tool_calls = p.trigger_rule("tool-call", wrapped + more + spa)
        else:
            tool_calls = p.trigger_rule("tool-call", wrapped + p.space())
        if f.section_start:
            if not f.section_end:
                last = p.end()
            else:
                sp = p.space()
                last = p.literal(f.section_end) + sp
            sp2 = p.space()
            sp1 = p.space()
            tool_calls = p.trigger_rule("tool-calls", p.literal(f.section_start) + sp1 + tool_calls + sp2 + last)
    else:
        if inp.parallel_tool_calls:
            sp2 = p.space()
            more = p.zero_or_more(", " + tool_choice)
            tool_calls = p.trigger_rule(
                "tool-call", f.section_start + p.space() + tool_choice + more + sp2 + f.section_end
            )
        else:
            sp2 = p.space()
            tool_calls = p.trigger_rule("tool-call", f.section_start + p.space() + tool_choice + sp2 + f.section_end)
    if inp.tool_choice != "required":
        tool_calls = p.optional(tool_calls)
    return _tail(p, reasoning_parser, f, tool_calls, inp)


def _strict_tagged_args(p, a, func, until_suffix):
    """Strict tool-call mode: a function's tagged arguments in schema order (required ones present, optional
    ones skippable, each once), space between; a string node's value is raw text up to the value suffix, any
    other canonical JSON."""
    items = []
    for param in p.strict_params(func):
        rule = "tool-%s-arg-%s" % (func["name"], param.name)
        close = p.tool_arg_close(p.literal(a.value_suffix))
        value, _ = p.strict_value(func, param, rule + "-schema", p.tool_arg_string_value(until_suffix), a.value_suffix)
        open_ = p.tool_arg_open(a.name_prefix + p.tool_arg_name(p.literal(param.name)) + a.name_suffix)
        items.append((p.rule(rule, p.tool_arg(open_ + a.value_prefix + value + close)), param.required))
    return p.strict_sequence(items, p.space)


def build_tool_parser(p, tools, inp, reasoning_parser, content):
    """analyze_tools::build_parser: the tool-call parser of the analysed format (an epsilon when none was
    found, as llama.cpp, which logs an error then)."""
    mode = tools.format.mode
    if mode == JSON_NATIVE:
        return _build_json_native(p, tools, inp, reasoning_parser, content)
    if mode == TAG_WITH_JSON:
        return _build_tag_json(p, tools, inp, reasoning_parser)
    if mode == TAG_WITH_TAGGED:
        return _build_tag_tagged(p, tools, inp, reasoning_parser)
    return p.eps()
