"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/minimax-m3.cpp: ``<mm:think>`` reasoning, ``]<]minimax[>[``-prefixed XML tool calls whose
argument values are expanded recursively (format ``peg-minimax-m3``, its own mapper)."""

import re

from bankml.chat.chat_peg import (
    TOOL,
    TOOL_ARG,
    TOOL_ARG_NAME,
    TOOL_ARG_STRING_VALUE,
    TOOL_ARG_VALUE,
    TOOL_NAME,
    ChatToolCall,
    TreeMapper,
    _dump,
    _txt,
    find_by_tag,
    tool_parameters,
)
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish
from bankml.errors import SchemaError
from bankml.schema import reader as s
from bankml.schema import tool_args
from bankml.schema.queries import may_be_string

NS, THINK_START, THINK_END = "]<]minimax[>[", "<mm:think>", "</mm:think>"
FC_START, FC_END, INVOKE_END = NS + "<tool_call>", NS + "</tool_call>", NS + "</invoke>"
_TYPE_ALTERNATIVE = re.compile(r"/type/[0-9]+$")
# the mapper's tags (common_chat_peg_minimax_m3_mapper's)
TOOL_ARG_OBJECT, TOOL_ARG_ARRAY, TOOL_ARG_ITEM = "tool-arg-object", "tool-arg-array", "tool-arg-item"


def detect(source):
    """The namespace token ``]<]minimax[>[`` collides with the auto-parser's markup delimiters."""
    has = source.__contains__
    return "minimax-m3" if has(NS) and has("<tool_call>") and has("<invoke name=") else None


def apply(out, inp):
    defaults(out)
    out.format = "peg-minimax-m3"
    out.supports_thinking = True
    out.thinking_start_tag, out.thinking_end_tags = THINK_START, [THINK_END]
    out.preserved_tokens = [NS, "<tool_call>", "</tool_call>", THINK_START, THINK_END]
    out.delimiters = [
        ["assistant", "]~b]ai"],
        ["user", "]~b]user"],
        ["tool", "]~b]tool"],
        ["system", "]~b]developer"],
        ["system", "]~b]system"],
    ]
    has_response_format = isinstance(inp.json_schema, dict)
    gen_prompt = out.generation_prompt
    if inp.has_continuation():
        out.generation_prompt = gen_prompt + THINK_START + inp.reasoning_content()
        if inp.continue_content:
            out.generation_prompt += THINK_END + inp.render_content()
        out.prompt += out.generation_prompt

    def fn(p):
        generation_prompt = p.prefix(gen_prompt, THINK_START)
        end = p.end()
        reasoning = p.eps()
        if inp.extract_reasoning:
            # GCC builds the right operand of + first
            if inp.enable_thinking:
                close = p.literal(THINK_END)
                inner = p.ac(p.reasoning(p.until(THINK_END)) + close, THINK_END)
                sp = p.space()
                block = p.literal(THINK_START) + sp + inner
            else:
                close = p.literal(THINK_END)
                inner = p.ac(p.until(THINK_END) + close, THINK_END)
                block = p.literal(THINK_START) + inner
            reasoning = p.optional(p.choice([block, p.literal(THINK_END)]))
        if has_response_format:
            fence = p.literal("```")
            sp = p.space()
            body = p.content(p.schema(p.json(), "response-format-schema", inp.json_schema))
            sp0 = p.space()
            response_format = p.rule("response-format", p.literal("```json") + sp0 + body + sp + fence)
            return generation_prompt + reasoning + response_format + end
        if not inp.tool_calls_enabled:
            return generation_prompt + reasoning + p.content(p.rest()) + end
        tool_choice = p.choice()
        for tool in inp.tools:
            fn_ = tool["function"]
            name = fn_["name"]
            params = tool_parameters(fn_)
            root = s.SchemaDocument(params).root

            def element_of(tag, node, rule_name):
                close = NS + "</" + tag + ">"
                value = value_of(node, rule_name, close)
                gt = p.literal(">")
                aname = p.tool_arg_name(p.literal(tag))
                return p.rule(rule_name, p.tool_arg(p.tool_arg_open(p.literal(NS + "<") + aname + gt) + value))

            def value_of(node, rule_name, close):
                close_tag = p.tool_arg_close(p.literal(close))
                if may_be_string(node):
                    return p.ac(p.tool_arg_string_value(p.until(close)) + close_tag, close)
                if node.kind == s.ANY_OF:
                    return p.choice(
                        [value_of(alt, "%s-%d" % (rule_name, i), close) for i, alt in enumerate(node.children)]
                    )
                if node.kind == s.OBJECT and node.properties:
                    sp = p.space()
                    return p.tag(TOOL_ARG_OBJECT, members_of(node, rule_name)) + sp + close_tag
                if node.kind == s.ARRAY:
                    item_close = NS + "</item>"
                    # GCC builds the right operand of + first
                    item_value = value_of(node.items, rule_name + "-item", item_close)
                    item = p.rule(rule_name + "-item", p.tag(TOOL_ARG_ITEM, p.literal(NS + "<item>") + item_value))
                    sp = p.space()
                    return p.tag(TOOL_ARG_ARRAY, p.repeat(p.space() + item, 0, -1)) + sp + close_tag
                # strict mode compiles the node at its place in the tool's parameters (the converter's path; an
                # alternative of a list of types is no schema of its own: its schema is the whole one)
                pointer = _TYPE_ALTERNATIVE.sub("", node.path)
                schema = p.schema(p.json(), rule_name + "-schema", None, node=node, source=(params, pointer))
                return p.tool_arg_json_value(schema) + close_tag

            def members_of(obj, prefix):
                required, optional = [], []
                for pname, node, is_required in obj.properties:
                    (required if is_required else optional).append(element_of(pname, node, prefix + "-" + pname))
                return p.required_then_optional(required, optional)

            invoke_body = p.eps()
            if inp.strict_tools:
                p.strict_params(fn_)  # an object of listed properties, or the tool's refusal
                invoke_body = _strict_members(p, fn_, "#", "tool-" + name + "-arg")
            elif root.kind == s.OBJECT:
                invoke_body = members_of(root, "tool-" + name + "-arg")
            close = p.tool_close(p.literal(INVOKE_END))
            sp2 = p.space()
            sp1 = p.space()
            q = p.literal('">')
            tname = p.tool_name(p.literal(name))
            open_ = p.tool_open(p.literal(NS + '<invoke name="') + tname + q)
            tool_choice = tool_choice | p.rule("tool-" + name, p.tool(open_ + sp1 + invoke_body + sp2 + close))
        tool_calls = p.eps()
        fc_close = p.literal(FC_END)
        sp2 = p.space()
        if inp.parallel_tool_calls:
            more = p.zero_or_more(p.space() + tool_choice)
            body = p.literal(FC_START) + p.space() + tool_choice + more + sp2 + fc_close
        else:
            body = p.literal(FC_START) + p.space() + tool_choice + sp2 + fc_close
        tool_calls = p.trigger_rule("tool-call", body)
        if inp.tool_choice != "required":
            tool_calls = p.optional(tool_calls)
        if inp.forced:  # strict mode: the calls right after the reasoning
            return generation_prompt + reasoning + p.space() + tool_calls + end
        content_before_tools = p.content(p.until(FC_START))
        return generation_prompt + reasoning + content_before_tools + tool_calls + end

    lazy = not (has_response_format or (inp.has_tools and inp.tool_choice == "required"))
    finish(out, fn, has_response_format or inp.tool_calls_enabled, lazy, [(TRIGGER_WORD, FC_START)], inp=inp)
    out.parser.format = "peg-minimax-m3"
    out.parser.mapper = MinimaxM3Mapper


def _shape(fn_, pointer):
    try:
        return tool_args.shape(tool_parameters(fn_), pointer)
    except SchemaError as e:
        raise tool_args.named(fn_["name"], e) from None


def _strict_members(p, fn_, pointer, prefix):
    """Strict tool-call mode: an object's members as elements in schema order (required ones present, optional
    ones skippable, each once)."""
    kind, props = _shape(fn_, pointer)
    if kind != "object":
        tool_args.params(tool_parameters(fn_), pointer)  # the refusal naming the keyword
    items = []
    for param in props:
        rule = prefix + "-" + param.name
        close = NS + "</" + param.name + ">"
        value = _strict_value(p, fn_, param.pointer, rule, close)
        aname = p.tool_arg_name(p.literal(param.name))
        element = p.tool_arg(p.tool_arg_open(p.literal(NS + "<") + aname + p.literal(">")) + value)
        items.append((p.rule(rule, element), param.required))
    return p.strict_sequence(items, p.space)


def _strict_value(p, fn_, pointer, rule, close):
    """Strict tool-call mode: one element's value up to its ``close`` tag: raw text for a string node, nested
    elements for an object or an array of listed items, canonical JSON for any other."""
    params = tool_parameters(fn_)
    close_tag = p.tool_arg_close(p.literal(close))
    kind, detail = _shape(fn_, pointer)
    source = (params, pointer)
    if kind == "string":
        text = p.tool_arg_string_value(p.until(close))
        return p.schema(text, rule + "-schema", None, source=source, style=tool_args.RawStyle(close)) + close_tag
    if kind == "object":
        return p.tag(TOOL_ARG_OBJECT, _strict_members(p, fn_, pointer, rule)) + p.space() + close_tag
    if kind == "array" and detail[0] is not None:
        items, lo, hi = detail
        item_close = NS + "</item>"
        item_value = _strict_value(p, fn_, items, rule + "-item", item_close)
        item = p.rule(rule + "-item", p.tag(TOOL_ARG_ITEM, p.literal(NS + "<item>") + item_value))
        repeated = p.repeat(p.space() + item, lo, -1 if hi is None else hi)
        return p.tag(TOOL_ARG_ARRAY, repeated) + p.space() + close_tag
    schema = p.schema(p.json(), rule + "-schema", None, source=source, style=tool_args.JsonStyle())
    return p.tool_arg_json_value(schema) + close_tag


class MinimaxM3Mapper(TreeMapper):
    """common_chat_peg_minimax_m3_mapper: arguments rebuilt as JSON from the XML-expanded values; reasoning is
    kept as parsed (this mapper does not drop whitespace-only reasoning)."""

    def _visit_other(self, node):
        if node.tag == TOOL:
            name = find_by_tag(self.ctx, node, TOOL_NAME)
            if name is not None:
                self.tool_calls.append(ChatToolCall(_txt(name.text), self._container(node, True, not node.is_partial)))
            return
        for cid in node.children:
            self._visit(self.ctx.ast[cid])

    def _collect(self, node, tag, out):
        for cid in node.children:
            child = self.ctx.ast[cid]
            if child.tag == tag:
                out.append(child)
            else:
                self._collect(child, tag, out)

    def _value_of(self, node):
        for cid in node.children:
            child = self.ctx.ast[cid]
            if child.tag in (TOOL_ARG_VALUE, TOOL_ARG_STRING_VALUE, TOOL_ARG_OBJECT, TOOL_ARG_ARRAY):
                return child
        return None

    def _member(self, node):
        name = find_by_tag(self.ctx, node, TOOL_ARG_NAME)
        if name is None:
            return ""
        return _dump(_txt(name.text)) + ":" + self._value(self._value_of(node), not node.is_partial)

    def _container(self, node, is_object, closed):
        entries = []
        self._collect(node, TOOL_ARG if is_object else TOOL_ARG_ITEM, entries)
        parts = []
        for entry in entries:
            text = self._member(entry) if is_object else self._value(self._value_of(entry), not entry.is_partial)
            if text:
                parts.append(text)
        result = ("{" if is_object else "[") + ",".join(parts)
        return result + (("}" if is_object else "]") if closed else "")

    def _value(self, node, closed):
        if node is None:
            return ""
        if node.tag == TOOL_ARG_OBJECT:
            return self._container(node, True, closed)
        if node.tag == TOOL_ARG_ARRAY:
            return self._container(node, False, closed)
        if node.tag == TOOL_ARG_STRING_VALUE:
            return '"' + _dump(_txt(node.text))[1:-1] + ('"' if closed else "")
        return _txt(node.text)


FAMILY = Family(("minimax-m3",), detect, apply)
