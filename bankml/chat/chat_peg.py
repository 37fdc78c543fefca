"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

``common/chat-peg-parser.cpp``: the chat builder (``common_chat_peg_builder``: reasoning / content / tool tags,
``prefix``, ``optspace``, ``permute``, the JSON, tagged and Python-style tool-call helpers) over
``bankml.chat.peg``'s arena, ``build_chat_peg_parser``, and the mapper (``common_chat_peg_mapper``) that turns the
AST of a parse into the message (content, reasoning, tool calls) as ``common_chat_peg_parse`` does.
"""

import json

from bankml.chat import peg
from bankml.chat.peg import Choice, Rule, Sequence
from bankml.chat.peg_builder import Builder, P, clean_rule_name
from bankml.errors import SchemaError
from bankml.schema import reader as s
from bankml.schema import tool_args
from bankml.schema.limits import _raise_recursion_limit, _restore_recursion_limit

REASONING_BLOCK, REASONING, CONTENT = "reasoning-block", "reasoning", "content"
TOOL, TOOL_OPEN, TOOL_CLOSE, TOOL_ID, TOOL_NAME, TOOL_ARGS = (
    "tool",
    "tool-open",
    "tool-close",
    "tool-id",
    "tool-name",
    "tool-args",
)
TOOL_ARG, TOOL_ARG_OPEN, TOOL_ARG_CLOSE, TOOL_ARG_NAME, TOOL_ARG_VALUE, TOOL_ARG_STRING_VALUE = (
    "tool-arg",
    "tool-arg-open",
    "tool-arg-close",
    "tool-arg-name",
    "tool-arg-value",
    "tool-arg-string-value",
)
MAX_PERMUTE = 6
_SPACE = b" \t\n\v\f\r"


class ChatToolCall:
    """common_chat_tool_call: name, arguments (a JSON text, possibly cut short while streaming), id."""

    __slots__ = ("name", "arguments", "id")

    def __init__(self, name="", arguments="", id=""):  # noqa: A002
        self.name, self.arguments, self.id = name, arguments, id

    def copy(self):
        return ChatToolCall(self.name, self.arguments, self.id)

    def __eq__(self, other):
        return isinstance(other, ChatToolCall) and (self.name, self.arguments, self.id) == (
            other.name,
            other.arguments,
            other.id,
        )

    def __repr__(self):
        return "ChatToolCall(name=%r, arguments=%r, id=%r)" % (self.name, self.arguments, self.id)


class ChatMessage:
    """What common_chat_parse returns: content, reasoning_content and tool_calls."""

    __slots__ = ("content", "reasoning_content", "tool_calls")

    def __init__(self, content="", reasoning_content="", tool_calls=None):
        self.content, self.reasoning_content = content, reasoning_content
        self.tool_calls = list(tool_calls or [])

    def __eq__(self, other):
        return (self.content, self.reasoning_content, self.tool_calls) == (
            other.content,
            other.reasoning_content,
            other.tool_calls,
        )

    def __repr__(self):
        return "ChatMessage(content=%r, reasoning_content=%r, tool_calls=%r)" % (
            self.content,
            self.reasoning_content,
            self.tool_calls,
        )

    def empty(self):
        return not self.content and not self.reasoning_content and not self.tool_calls


def tool_parameters(function):
    """common_chat_tool_parameters."""
    params = function.get("parameters")
    if params is not None and not (isinstance(params, dict) and not params):
        return params
    return {"type": "object", "properties": {}}


def function_tools(tools):
    """foreach_function: the function tools of an OpenAI-style tools array."""
    return [t for t in (tools or []) if isinstance(t, dict) and t.get("type") == "function" and "function" in t]


class ChatBuilder(Builder):
    """common_chat_peg_builder."""

    # -- strict tool-call mode (bankml's, beside llama.cpp's handlers) --------------------------------------

    def strict_params(self, function):
        """Strict tool-call mode: the parameters of a function whose template writes one element per
        parameter, ``[tool_args.Param]`` in schema order; a SchemaError naming the tool for an object such
        a syntax cannot carry exactly."""
        try:
            return tool_args.params(tool_parameters(function))
        except SchemaError as e:
            raise tool_args.named(function.get("name"), e) from None

    def strict_value(self, function, param, rule_name, string_value, delimiter, **raw):
        """``(parser, is_string)``: one parameter's value in strict mode. A node that takes strings only is
        the raw text ``string_value`` parses (its grammar ``tool_args.RawStyle(delimiter, **raw)``: the
        strings the parser gives back whole); any other is a JSON value, parsed as JSON and written in the
        canonical style."""
        params = tool_parameters(function)
        try:
            is_string = tool_args.kind(params, param.pointer) == "string"
        except SchemaError as e:
            raise tool_args.named(function.get("name"), e) from None
        source = (params, param.pointer)
        if is_string:
            style = tool_args.RawStyle(delimiter, **raw)
            return self.schema(string_value, rule_name, None, source=source, style=style), True
        json_value = self.schema(self.json(), rule_name, None, source=source, style=tool_args.JsonStyle())
        return self.tool_arg_json_value(json_value), False

    def strict_separated(self, rule_prefix, items, separator):
        """``items`` (``(parser, required)``) in order, the optional ones skippable, ``separator()`` (a parser
        that must not match nothing, such as ``","``) between two that are present: two rules per item, one
        for "none written yet" and one for "some written"."""
        none = some = None  # None: nothing is left (an empty alternative GBNF cannot write at a line's end)
        for i in range(len(items) - 1, -1, -1):
            item, required = items[i]
            with_none = item if some is None else item + some
            with_some = separator() + with_none
            if not required:
                with_none = self.optional(with_none) if none is None else with_none | none
                with_some = self.optional(with_some) if some is None else with_some | some
            none = self.rule("%s-%d-first" % (rule_prefix, i), with_none)
            some = self.rule("%s-%d-next" % (rule_prefix, i), with_some)
        return self.eps() if none is None else none

    def strict_python_calls(self, tools, parallel_tool_calls):
        """Strict tool-call mode's ``python_style_tool_calls`` (LFM2): ``[name(a='x', b=1)]``, the keyword
        arguments in schema order, ``", "`` between, each value canonical JSON with its strings in Python's
        single quotes, as the template writes them (``tool_args.PythonStyle``), which the Python-or-JSON value
        parser reads."""
        tool_choices = self.choice()
        for tool in function_tools(tools):
            fn = tool["function"]
            name, params = fn["name"], tool_parameters(fn)
            items = []
            for param in self.strict_params(fn):
                try:
                    is_string = tool_args.kind(params, param.pointer) == "string"
                except SchemaError as e:
                    raise tool_args.named(name, e) from None
                if is_string:
                    parse = self.literal("'") + self.string_content("'") + self.literal("'")
                else:
                    parse = self.python_or_json_value()
                rule = "tool-%s-arg-%s-schema" % (name, param.name)
                source = (params, param.pointer)
                style = tool_args.PythonStyle()
                value = self.tool_arg_value(self.schema(parse, rule, None, source=source, style=style))
                close = self.tool_arg_close(self.eps())
                open_ = self.tool_arg_open(self.tool_arg_name(self.literal(param.name)) + self.literal("="))
                items.append((self.tool_arg(open_ + value + close), param.required))
            args = self.strict_separated("tool-%s-args" % name, items, lambda: self.literal(", "))
            close = self.tool_close(self.literal(")"))
            open_ = self.tool_open(self.tool_name(self.literal(name)) + self.literal("("))
            tool_choices = tool_choices | self.rule("tool-" + name, self.tool(open_ + self.tool_args(args) + close))
        if parallel_tool_calls:
            return "[" + tool_choices + self.zero_or_more(", " + tool_choices) + "]"
        return "[" + tool_choices + "]"

    def strict_sequence(self, items, separator=None):
        """``items`` (``(parser, required)``) in order, the optional ones skippable, ``separator`` (a parser
        that may match nothing, such as ``space``, or None) before every one but the first."""
        seq = self.eps()
        for i, (item, required) in enumerate(items):
            if i and separator is not None:
                item = separator() + item
            seq = seq + (item if required else self.optional(item))
        return seq

    def required_then_optional(self, required, optional):
        """The required argument parsers in order, space between, then any optional one, repeated: the sequence
        the tagged-argument tool parsers build (the auto-parser's, DeepSeek V3.2's, MiniMax M3's), creating its
        parsers in their order, so the ids (and the grammar's rule numbers) are theirs."""
        seq = self.eps()
        for i, r in enumerate(required):
            if i > 0:
                seq = seq + self.space()
            seq = seq + r
        if optional:
            any_optional = self.choice()
            for o in optional:
                any_optional = any_optional | o
            seq = seq + self.repeat(self.space() + any_optional, 0, -1)
        return seq

    def reasoning_block(self, p):
        return self.tag(REASONING_BLOCK, p)

    def reasoning(self, p):
        return self.tag(REASONING, p)

    def content(self, p):
        return self.tag(CONTENT, p)

    def tool(self, p):
        return self.tag(TOOL, p)

    def tool_open(self, p):
        return self.atomic_tag(TOOL_OPEN, p)

    def tool_close(self, p):
        return self.atomic_tag(TOOL_CLOSE, p)

    def tool_id(self, p):
        return self.atomic_tag(TOOL_ID, p)

    def tool_name(self, p):
        return self.atomic_tag(TOOL_NAME, p)

    def tool_args(self, p):
        return self.tag(TOOL_ARGS, p)

    def tool_arg(self, p):
        return self.tag(TOOL_ARG, p)

    def tool_arg_open(self, p):
        return self.atomic_tag(TOOL_ARG_OPEN, p)

    def tool_arg_close(self, p):
        return self.atomic_tag(TOOL_ARG_CLOSE, p)

    def tool_arg_name(self, p):
        return self.atomic_tag(TOOL_ARG_NAME, p)

    def tool_arg_value(self, p):
        return self.tag(TOOL_ARG_VALUE, p)

    def tool_arg_string_value(self, p):
        return self.tag(TOOL_ARG_STRING_VALUE, p)

    def tool_arg_json_value(self, p):
        return self.tag(TOOL_ARG_VALUE, p)

    def tool_open_named(self, prefix, name, suffix):
        """``tool_open(prefix + tool_name(literal(name)) + suffix)``."""
        return self.atomic_tag_around(TOOL_OPEN, prefix, TOOL_NAME, name, suffix)

    def tool_arg_open_named(self, prefix, name, suffix):
        """``tool_arg_open(prefix + tool_arg_name(literal(name)) + suffix)``."""
        return self.atomic_tag_around(TOOL_ARG_OPEN, prefix, TOOL_ARG_NAME, name, suffix)

    def tag_with_safe_content(self, tag_name, marker, p):
        if not marker:
            return self.zero_or_more(self.choice([p, self.rule(tag_name, self.content(self.any()))]))
        until = self.until(marker)
        any_ = self.any()
        neg = self.negate(self.literal(marker))
        chunk = self.rule(tag_name, self.content(neg + any_ + until))  # GCC: right operands first
        return self.zero_or_more(self.choice([p, chunk]))

    def permute(self, rule_prefix, parsers):
        """common_chat_peg_builder::permute: every order of ``parsers`` (up to MAX_PERMUTE), a rule per set of
        the parsers left, ``alternatives | (p + rest)`` for each of them. The parsers are made here directly,
        the same ones in the same order as those operators make them (the ids, so the grammar, are llama.cpp's)."""
        if not parsers:
            return self.eps()
        if len(parsers) == 1 or len(parsers) > MAX_PERMUTE:
            return self.sequence(parsers)
        if any(p.__class__ is not P for p in parsers):
            return self._permute_text(rule_prefix, parsers)
        arena = self._parsers
        ids = [(1 << i, p.id) for i, p in enumerate(parsers)]
        # p + rest: rest (a rule or an epsilon) is no sequence, so the sequence is p's children or p, then rest
        heads = {pid: arena[pid].children if arena[pid].__class__ is Sequence else (pid,) for _, pid in ids}
        # when every parser is a rule, each rule's GBNF is known here: "a rest-a | b rest-b ..." (names only)
        names = [arena[pid].name if arena[pid].__class__ is Rule else None for _, pid in ids]
        known = None not in names
        order = [(bit, pid, name) for (bit, pid), name in zip(ids, names)]
        prefix = clean_rule_name(rule_prefix)  # cleaned once ("-" is kept as it is: "<prefix>-<n>" is clean)
        rules, rule_names = {}, {}
        epsilon = self._epsilon

        def remaining_of(remaining):
            if remaining == 0:
                arena.append(epsilon)
                return len(arena) - 1
            rid = rules.get(remaining)
            if rid is not None:
                return rid
            arena.append(Choice(()))
            alternatives, texts = (), []
            for bit, pid, name in order:
                if remaining & bit:
                    left = remaining & ~bit
                    rest = remaining_of(left)
                    arena.append(Sequence(heads[pid] + (rest,)))
                    alternatives = alternatives + (len(arena) - 1,)
                    arena.append(Choice(alternatives))
                    if known:
                        texts.append(name + " " + rule_names[left] if left else name)
            gbnf = None
            if known:
                text = " | ".join(texts)
                gbnf = (text, text.replace(" | ", " ").split(" "))
            rule_name = rule_names[remaining] = "%s-%d" % (prefix, remaining)
            rid = rules[remaining] = self.rule_id(rule_name, len(arena) - 1, gbnf=gbnf)
            return rid

        try:
            return P(remaining_of((1 << len(parsers)) - 1), self)
        finally:
            remaining_of = None  # a recursive closure is a cycle: freed now, not by the collector

    def _permute_text(self, rule_prefix, parsers):
        """permute with texts among the parsers (a literal made at each use, as ``+`` makes it)."""
        rules = {}

        def remaining_of(remaining):
            if remaining == 0:
                return self.eps()
            if remaining in rules:
                return rules[remaining]
            alternatives = self.choice()
            for i, p in enumerate(parsers):
                bit = 1 << i
                if remaining & bit:
                    rest = remaining_of(remaining & ~bit)
                    alternatives = alternatives | (p + rest)
            rules[remaining] = self.rule("%s-%d" % (rule_prefix, remaining), alternatives)
            return rules[remaining]

        return remaining_of((1 << len(parsers)) - 1)

    def prefix(self, s, delimiter=""):
        if not s:
            return self.eps()
        if not delimiter:
            return self.literal(s)
        cut = s.find(delimiter)
        return self.literal(s if cut < 0 else s[:cut])

    def optspace(self, tag):
        parser = self.eps()
        data = tag.encode("utf-8")
        end_prefix = start_suffix = len(data)
        for i, c in enumerate(data):
            if c not in _SPACE:
                end_prefix = i
                break
        for i in range(len(data), 0, -1):
            if data[i - 1] not in _SPACE:
                start_suffix = i
                break
        for i in range(end_prefix):
            parser = parser + self.optional(self.literal(data[i : i + 1]))
        parser = parser + self.literal(data[end_prefix:start_suffix] if end_prefix < start_suffix else b"")
        for i in range(start_suffix, len(data)):
            parser = parser + self.optional(self.literal(data[i : i + 1]))
        return parser

    # -- tool-call helpers (chat-peg-parser.cpp) -------------------------------------------------------------

    def standard_constructed_tools(self, markers, tools, parallel_tool_calls, force_tool_calls):
        if not tools:
            return self.eps()
        m = lambda key, default="": markers.get(key, default)  # noqa: E731
        section_start = m("tool_call_start_marker", "<tool_call>")
        section_end = m("tool_call_end_marker", "</tool_call>")
        func_opener = m("function_opener", "<function=")
        func_name_suffix = m("function_name_suffix", ">")
        func_closer = m("function_closer", "</function>")
        key_prefix, key_suffix = m("parameter_key_prefix", "<param="), m("parameter_key_suffix", ">")
        param_closer = m("parameter_closer", "</param>")
        tool_choices = self.choice()
        for tool in tools:
            if "function" not in tool:
                continue
            fn = tool["function"]
            name, params = fn["name"], tool_parameters(fn)
            args = self.eps()
            if isinstance(params, dict) and params.get("properties"):
                arg_choice = self.choice()
                for prop in params["properties"]:
                    names = self.choice([self.literal(prop), self.literal('"%s"' % prop), self.literal("'%s'" % prop)])
                    close = self.tool_arg_close(self.literal(param_closer))
                    value = self.tool_arg_value(self.until(param_closer))
                    suffix = self.literal(key_suffix)
                    arg_name = self.tool_arg_name(names)
                    open_ = self.tool_arg_open(self.literal(key_prefix))
                    arg_choice = arg_choice | self.tool_arg(open_ + arg_name + suffix + value + close)
                args = self.zero_or_more(arg_choice + self.space())
            close = self.tool_close(self.literal(func_closer))
            sp2 = self.space()
            targs = self.tool_args(args)
            sp1 = self.space()
            open_ = self.tool_open(
                self.literal(func_opener) + self.tool_name(self.literal(name)) + self.literal(func_name_suffix)
            )
            tool_choices = tool_choices | self.rule("tool-" + name, self.tool(open_ + sp1 + targs + sp2 + close))
        if parallel_tool_calls:
            section = self.trigger_rule(
                "tool-call",
                self.literal(section_start)
                + self.space()
                + self.one_or_more(tool_choices + self.space())
                + self.literal(section_end),
            )
        else:
            section = self.trigger_rule(
                "tool-call",
                self.literal(section_start) + self.space() + tool_choices + self.space() + self.literal(section_end),
            )
        return section if force_tool_calls else self.optional(section)

    def python_or_json_value(self):
        def build():
            ws = self.space()
            value = self.python_or_json_value()
            member = self.sequence([self.python_string(), ws, self.literal(":"), ws, value])
            members = self.sequence([member, self.zero_or_more(self.sequence([ws, self.literal(","), ws, member]))])
            dict_ = self.rule(
                "python-or-json-dict",
                lambda: self.sequence(
                    [
                        self.literal("{"),
                        ws,
                        self.choice([self.literal("}"), self.sequence([members, ws, self.literal("}")])]),
                        ws,
                    ]
                ),
            )
            elements = self.sequence([value, self.zero_or_more(self.sequence([self.literal(","), ws, value]))])
            array = self.rule(
                "python-or-json-array",
                lambda: self.sequence(
                    [
                        self.literal("["),
                        ws,
                        self.choice([self.literal("]"), self.sequence([elements, ws, self.literal("]")])]),
                        ws,
                    ]
                ),
            )
            return self.choice(
                [
                    dict_,
                    array,
                    self.python_string(),
                    self.python_number(),
                    self.python_bool(),
                    self.python_null(),
                    self.json_bool(),
                    self.json_null(),
                ]
            )

        return self.rule("python-or-json-value", build)

    def python_style_tool_calls(self, tools, parallel_tool_calls, allow_json_literals):
        if not tools:
            return self.eps()
        tool_choices = self.choice()
        for tool in tools:
            if "function" not in tool:
                continue
            fn = tool["function"]
            name, params = fn["name"], tool_parameters(fn)
            args = self.eps()
            if isinstance(params, dict) and params.get("properties"):
                arg_choice = self.choice()
                for prop, prop_def in params["properties"].items():
                    is_string = isinstance(prop_def, dict) and prop_def.get("type") == "string"
                    arg_name = self.literal(prop)
                    value = self.eps()
                    single = self.literal("'") + self.string_content("'") + self.literal("'")
                    double = self.literal('"') + self.string_content('"') + self.literal('"')
                    string_value = self.tool_arg_value(self.choice([double, single]))
                    if is_string:
                        value = string_value
                    else:
                        value = self.tool_arg_value(
                            self.python_or_json_value() if allow_json_literals else self.python_value()
                        )
                    close = self.tool_arg_close(self.eps())
                    open_ = self.tool_arg_open(self.tool_arg_name(arg_name) + self.literal("="))
                    arg_choice = arg_choice | self.tool_arg(open_ + value + close)
                more = self.zero_or_more("," + self.space() + arg_choice)
                args = arg_choice + more
            close = self.tool_close(self.literal(")"))
            sp2 = self.space()
            targs = self.tool_args(args)
            sp1 = self.space()
            open_ = self.tool_open(self.tool_name(self.literal(name)) + self.literal("("))
            tool_choices = tool_choices | self.rule("tool-" + name, self.tool(open_ + sp1 + targs + sp2 + close))
        if parallel_tool_calls:
            tail = self.space() + "]"
            more = self.zero_or_more("," + self.space() + tool_choices)
            return "[" + self.space() + tool_choices + more + tail
        tail = self.space() + "]"
        return "[" + self.space() + tool_choices + tail

    def standard_json_tools(
        self,
        section_start,
        section_end,
        tools,
        parallel_tool_calls,
        force_tool_calls,
        name_key="",
        args_key="",
        array_wrapped=False,
        function_is_key=False,
        call_id_key="",
        gen_call_id_key="",
        parameters_order=(),
        accept_openai_wrapper=False,
    ):
        if not tools:
            return self.eps()
        eff_name = name_key or "name"
        eff_args = args_key or "arguments"
        self.eps()  # the initial tool_choices
        if function_is_key:
            choices = self._json_tools_function_is_key(tools, args_key, eff_args, call_id_key, gen_call_id_key)
        elif "." in eff_name or "." in eff_args:
            choices = self._json_tools_nested(tools, eff_name, eff_args, call_id_key, gen_call_id_key)
        else:
            choices = self._json_tools_flat(
                tools, eff_name, eff_args, call_id_key, gen_call_id_key, list(parameters_order), accept_openai_wrapper
            )
        calls = choices
        if parallel_tool_calls:
            calls = calls + self.zero_or_more(self.space() + self.literal(",") + self.space() + choices)
        if array_wrapped:
            calls = self.literal("[") + self.space() + calls + self.space() + self.literal("]")
        section = self.trigger_rule(
            "tool-call", self.literal(section_start) + self.space() + calls + self.space() + self.literal(section_end)
        )
        return section if force_tool_calls else self.optional(section)

    def _id_field(self, key, number_too):
        alts = [self.literal('"') + self.tool_id(self.string_content('"')) + self.literal('"')]
        if number_too:
            alts.append(self.tool_id(self.json_number()))
        value = self.choice(alts) if number_too else alts[0]
        return self.atomic(self.literal('"%s"' % key) + self.space() + self.literal(":") + self.space() + value)

    def _json_tools_function_is_key(self, tools, args_key, eff_args, call_id_key, gen_call_id_key):
        choices = self.choice()
        for tool in tools:
            if "function" not in tool:
                continue
            fn = tool["function"]
            name, params = fn["name"], tool_parameters(fn)
            fields = []
            if call_id_key:
                idp = self._id_field(call_id_key, False)
                fields.append(self.optional(idp + self.space() + self.optional(self.literal(",") + self.space())))
            if gen_call_id_key:
                gp = self._id_field(gen_call_id_key, True)
                fields.append(self.optional(gp + self.space() + self.optional(self.literal(",") + self.space())))
            self.eps()  # C++'s initial args_parser
            if not args_key:
                argsp = self.tool_args(self.schema(self.json(), "tool-" + name + "-schema", params))
            else:
                argsp = (
                    self.literal('"%s"' % eff_args)
                    + self.space()
                    + self.literal(":")
                    + self.space()
                    + self.tool_args(self.schema(self.json(), "tool-" + name + "-schema", params))
                )
            fields.append(argsp)
            self.eps()  # C++'s initial inner_object
            if not args_key and len(fields) == 1:
                inner = fields[0]
            else:
                inner = self.literal("{") + self.space()
                for i, f in enumerate(fields):
                    inner = inner + f
                    if i < len(fields) - 1:
                        inner = inner + self.space()
                inner = inner + self.space() + self.literal("}")
            tp = self.tool(
                self.tool_open(self.literal("{"))
                + self.space()
                + self.literal('"')
                + self.tool_name(self.literal(name))
                + self.literal('"')
                + self.space()
                + self.literal(":")
                + self.space()
                + inner
                + self.space()
                + self.tool_close(self.literal("}"))
            )
            choices = choices | self.rule("tool-" + name, tp)
        return choices

    def _json_tools_nested(self, tools, eff_name, eff_args, call_id_key, gen_call_id_key):
        choices = self.choice()

        def spec(key):
            return key.split(".", 1) if "." in key else ["", key]

        name_spec, args_spec = spec(eff_name), spec(eff_args)
        prefix = name_spec[0] or args_spec[0]
        name_field = name_spec[1] if name_spec[0] else eff_name
        args_field = args_spec[1] if args_spec[0] else eff_args
        for tool in tools:
            if "function" not in tool:
                continue
            fn = tool["function"]
            name, params = fn["name"], tool_parameters(fn)
            nested_name = (
                self.literal('"%s"' % name_field)
                + self.space()
                + self.literal(":")
                + self.space()
                + self.atomic(self.literal('"') + self.tool_name(self.literal(name)) + self.literal('"'))
            )
            nested_args = (
                self.literal('"%s"' % args_field)
                + self.space()
                + self.literal(":")
                + self.space()
                + self.tool_args(self.schema(self.json(), "tool-" + name + "-schema", params))
            )
            obj = (
                self.literal("{")
                + self.space()
                + nested_name
                + self.space()
                + self.literal(",")
                + self.space()
                + nested_args
                + self.space()
                + self.literal("}")
            )
            body = self.tool_open(self.literal("{")) + self.space()
            if call_id_key and not spec(call_id_key)[0]:
                idp = self._id_field(call_id_key, False)
                body = body + self.optional(idp + self.space() + self.literal(",") + self.space())
            if gen_call_id_key and not spec(gen_call_id_key)[0]:
                gp = self._id_field(gen_call_id_key, True)
                body = body + self.optional(gp + self.space() + self.literal(",") + self.space())
            field = self.literal('"%s"' % prefix) + self.space() + self.literal(":") + self.space() + obj
            body = body + field + self.space() + self.tool_close(self.literal("}"))
            choices = choices | self.rule("tool-" + name, self.tool(body))
        return choices

    def _json_tools_flat(self, tools, eff_name, eff_args, call_id_key, gen_call_id_key, order, openai_wrapper):
        choices = self.choice()
        name_key_p = self.literal('"%s"' % eff_name)
        args_key_p = self.literal('"%s"' % eff_args)
        for tool in tools:
            if "function" not in tool:
                continue
            fn = tool["function"]
            name, params = fn["name"], tool_parameters(fn)
            tname = (
                name_key_p
                + self.space()
                + self.literal(":")
                + self.space()
                + self.atomic(self.literal('"') + self.tool_name(self.literal(name)) + self.literal('"'))
            )
            targs = (
                args_key_p
                + self.space()
                + self.literal(":")
                + self.space()
                + self.tool_args(self.schema(self.json(), "tool-" + name + "-schema", params))
            )
            idp = self.eps()  # C++ makes the epsilon first, then the id parser
            if call_id_key:
                idp = self._id_field(call_id_key, True)
            gp = self.eps()
            if gen_call_id_key:
                gp = self._id_field(gen_call_id_key, True)
            pairs = [(tname, eff_name), (targs, eff_args)]
            if call_id_key:
                pairs.append((self.optional(idp), call_id_key))
            if gen_call_id_key:
                pairs.append((self.optional(gp), gen_call_id_key))
            pairs.sort(key=lambda pk: order.index(pk[1]) if pk[1] in order else len(order))
            type_field = self.eps()
            if openai_wrapper:
                type_field = self.optional(
                    self.literal('"type"')
                    + self.space()
                    + self.literal(":")
                    + self.space()
                    + self.literal('"function"')
                    + self.space()
                    + self.literal(",")
                    + self.space()
                )
            body = self.tool_open(self.literal("{")) + self.space() + type_field
            if self.strict_tools:
                body = body + self._strict_pairs(name, pairs, call_id_key, gen_call_id_key)
                body = body + self.space() + self.tool_close(self.literal("}"))
                choices = choices | self.rule("tool-" + name, self.tool(body))
                continue
            for i, (p, _) in enumerate(pairs):
                body = body + p
                if i < len(pairs) - 1:
                    body = body + self.space() + self.literal(",") + self.space()
            body = body + self.space() + self.tool_close(self.literal("}"))
            choices = choices | self.rule("tool-" + name, self.tool(body))
        return choices

    def _strict_pairs(self, name, pairs, call_id_key, gen_call_id_key):
        """Strict tool-call mode: a JSON call's members in the format's order, a comma between two present
        ones (llama.cpp's parser wants the comma after an absent id: ``{, "name": ...}``), an id a plain token
        (the parser's id field takes any string, a raw line break included)."""
        items = []
        for p, key in pairs:
            if key in (call_id_key, gen_call_id_key):
                digits = self.tool_id(self.chars("[0-9]", 1, 9))
                token = self.literal('"') + self.tool_id(self.chars("[A-Za-z0-9_.:-]", 1, 64)) + self.literal('"')
                value = self.choice([token, digits])
                p = self.literal('"%s"' % key) + self.space() + self.literal(":") + self.space() + value
                items.append((p, False))
            else:
                items.append((p, True))
        sep = lambda: self.space() + self.literal(",") + self.space()  # noqa: E731
        return self.strict_separated("tool-%s-members" % name, items, sep)


def build_chat_peg_parser(fn, strict_tools=False):
    """The arena ``fn(builder)`` builds. ``strict_tools``: strict tool-call mode, where a tool's schema is
    not read by llama.cpp's reader (``bankml.schema.tool_args`` writes it from the JSON itself)."""
    b = ChatBuilder()
    b.strict_tools = strict_tools
    b.set_root(fn(b))
    return b.build()


# -- the mapper ----------------------------------------------------------------------------------------------


def _trim_trailing(b):
    return b.rstrip(_SPACE)


def _trim(b):
    if b[:1] and b[0] in _SPACE:
        b = b[1:]
    return b.rstrip(_SPACE)


def _brace_depth(s):
    depth, in_string, escaped = 0, False, False
    for c in s:
        if escaped:
            escaped = False
        elif c == "\\" and in_string:
            escaped = True
        elif c == '"':
            in_string = not in_string
        elif not in_string:
            depth += (c == "{") - (c == "}")
    return depth


def _dump(text):
    return json.dumps(text, ensure_ascii=False)


def normalize_quotes_to_json(s):
    """normalize_quotes_to_json: Python-style quoting and True/False/None to JSON."""
    out, i, n = [], 0, len(s)
    in_single = in_double = False

    def word(ch):
        return ch.isalnum() and ch.isascii() or ch == "_"

    while i < n:
        c = s[i]
        if c == "\\" and i + 1 < n:
            nxt = s[i + 1]
            if in_single:
                out.append("'" if nxt == "'" else '\\"' if nxt == '"' else c + nxt)
                i += 2
                continue
            if in_double:
                out.append(c + nxt)
                i += 2
                continue
            out.append(c)
            i += 1
            continue
        if c == '"':
            if in_single:
                out.append('\\"')
            else:
                in_double = not in_double
                out.append(c)
        elif c == "'":
            if in_double:
                out.append(c)
            else:
                in_single = not in_single
                out.append('"')
        elif not in_single and not in_double and c in "TFN" and (i == 0 or not word(s[i - 1])):
            k = 0
            while i + k < n and word(s[i + k]):
                k += 1
            token = s[i : i + k]
            for py, js in (("True", "true"), ("False", "false"), ("None", "null")):
                if py[:k] == token:
                    out.append(js[:k])
                    i += k - 1
                    break
            else:
                out.append(c)
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _txt(b):
    return b.decode("utf-8", "replace")


class Mapper:
    """common_chat_peg_mapper: visits the AST of a parse and fills ``result`` (content and reasoning as
    bytes until ``finish``)."""

    def __init__(self):
        self.content, self.reasoning, self.tool_calls = [], [], []
        self.pending = None
        self.current = None
        self.arg_count = 0
        self.closing_quote_pending = False
        self.args_buffer = ""

    def _target_get(self):
        return self.current.arguments if self.current is not None and self.current.name else self.args_buffer

    def _target_set(self, value):
        if self.current is not None and self.current.name:
            self.current.arguments = value
        else:
            self.args_buffer = value

    def normalize_container_value(self, text):
        return normalize_quotes_to_json(text)

    def from_ast(self, ctx, result):
        for node in ctx.visit(result.nodes):
            self.map(node)
        if self.pending is not None and self.pending.name:
            if self.args_buffer:
                self.pending.arguments = self.args_buffer
            if self.closing_quote_pending and self.pending.arguments:
                self.pending.arguments += '"'
            self.tool_calls.append(self.pending)
            self.pending = None

    def message(self):
        reasoning = b"".join(self.reasoning)
        if not reasoning.strip(b" \n\r\t"):
            reasoning = b""
        return ChatMessage(_txt(b"".join(self.content)), _txt(reasoning), [c.copy() for c in self.tool_calls])

    def map(self, node):
        tag = node.tag
        if tag == REASONING:
            self.reasoning.append(node.sanitized_text())
        elif tag == CONTENT:
            self.content.append(node.sanitized_text())
        elif tag == TOOL_OPEN:
            self.pending = self.current = ChatToolCall()
            self.arg_count = 0
            self.args_buffer = ""
            self.closing_quote_pending = False
        elif tag == TOOL_ID and self.current is not None:
            text = _trim_trailing(node.text)
            if len(text) >= 2 and text[:1] == b'"' and text[-1:] == b'"':
                text = text[1:-1]
            self.current.id = _txt(text)
        elif tag == TOOL_NAME and self.current is not None:
            self.current.name = _txt(_trim_trailing(node.text))
            if self.args_buffer:
                self.current.arguments = self.args_buffer
                self.args_buffer = ""
            elif not self.current.arguments:
                self.current.arguments = "{"
            if self.pending is not None:
                self.tool_calls.append(self.pending)
                self.current = self.pending
                self.pending = None
        elif tag == TOOL_ARGS and self.current is not None:
            text = _trim_trailing(node.text)
            if text[:1] == b"{":
                self._target_set(_txt(text))
        elif tag == TOOL_ARG_OPEN:
            self.closing_quote_pending = False
        elif tag == TOOL_ARG_NAME and self.current is not None:
            entry = "," if self.arg_count > 0 else ""
            entry += _dump(_txt(_trim(node.text))) + ":"
            self.arg_count += 1
            target = self._target_get() or "{"
            self._target_set(target + entry)
        elif tag in (TOOL_ARG_VALUE, TOOL_ARG_STRING_VALUE) and self.current is not None:
            value = _txt(node.text)
            add = ""
            if tag == TOOL_ARG_STRING_VALUE:
                if not value:
                    add, self.closing_quote_pending = '"', True
                else:
                    if not self.closing_quote_pending:
                        add, self.closing_quote_pending = '"', True
                    add += _dump(value)[1:-1]
            elif value:
                add = self.normalize_container_value(value)
            self._target_set(self._target_get() + add)
        elif tag == TOOL_ARG_CLOSE and self.current is not None:
            if self.closing_quote_pending:
                self._target_set(self._target_get() + '"')
                self.closing_quote_pending = False
        elif tag == TOOL_CLOSE and self.current is not None:
            cur = self.current
            if not cur.name and self.args_buffer:
                cur.arguments = self.args_buffer
                self.args_buffer = ""
            if self.closing_quote_pending:
                cur.arguments += '"'
                self.closing_quote_pending = False
            cur.arguments += "}" * max(0, _brace_depth(cur.arguments))
            if self.pending is not None:
                if cur.name:
                    self.tool_calls.append(self.pending)
                self.pending = None


class ChatParseError(ValueError):
    """The answer does not match the parser (llama-server's message), or a stream whose text shrank."""


def peg_parse(arena, generation_prompt, raw, partial, format_name="peg-native", mapper=Mapper):
    """common_chat_peg_parse: the generation prompt and the answer parsed leniently; a failed parse gives
    the partial message (``partial`` and something consumed) or ChatParseError."""
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogatepass")
    data = generation_prompt.encode("utf-8") + bytes(raw) if generation_prompt else bytes(raw)
    ctx = peg.Context(data, lenient=True)
    _raise_recursion_limit()
    try:
        result = arena.parse(ctx)
    except RecursionError:
        raise ChatParseError(
            "The model produced output that nests too deeply to parse as the expected %s format" % format_name
        ) from None
    finally:
        _restore_recursion_limit()
    if result.type == peg.FAIL and not (partial and result.end > 0):
        raise ChatParseError("The model produced output that does not match the expected %s format" % format_name)
    m = mapper()
    m.from_ast(ctx, result)
    return m.message()


def function_parameters(function):
    """foreach_parameter: [(name, node, required)] of a function tool's parameters (a bankml.schema.reader document's
    root object), empty when the parameters are not an object schema."""
    root = s.SchemaDocument(tool_parameters(function)).root
    if root.kind != s.OBJECT:
        return []
    return list(root.properties or [])


def parameter_source(function, name):
    """``(document, pointer)`` of a function tool's parameter ``name`` (one of ``function_parameters``): the
    tool's parameters schema and ``#/properties/<name>``, what strict mode compiles for the parameter's value
    (``bankml.chat.peg_builder``'s ``schema(..., node=node, source=...)``)."""
    return tool_parameters(function), "#/properties/" + name.replace("~", "~0").replace("/", "~1")


def find_by_tag(ctx, parent, tag, max_depth=3):
    """common_peg_ast_arena::find_by_tag: the first descendant (depth-first, ``max_depth`` levels) with ``tag``."""
    for cid in parent.children:
        child = ctx.ast[cid]
        if child.tag == tag:
            return child
        if max_depth > 1:
            found = find_by_tag(ctx, child, tag, max_depth - 1)
            if found is not None:
                return found
    return None


class TreeMapper(Mapper):
    """What the mappers that walk the AST themselves share (``common_chat_peg_minimax_m3_mapper``,
    ``common_chat_peg_gemma4_mapper``, each in its family's module of ``bankml.chat.families``): ``from_ast``
    visits each top node with ``_visit``, and the reasoning is kept as parsed (whitespace-only reasoning is
    not dropped)."""

    def from_ast(self, ctx, result):
        self.ctx = ctx
        for nid in result.nodes:
            self._visit(ctx.ast[nid])

    def message(self):
        return ChatMessage(
            _txt(b"".join(self.content)), _txt(b"".join(self.reasoning)), [c.copy() for c in self.tool_calls]
        )

    def _visit(self, node):
        """Reasoning and content text are kept as parsed; every other node goes to ``_visit_other``."""
        if node.tag == REASONING:
            self.reasoning.append(node.sanitized_text())
        elif node.tag == CONTENT:
            self.content.append(node.sanitized_text())
        else:
            self._visit_other(node)

    def _visit_other(self, node):
        raise NotImplementedError
