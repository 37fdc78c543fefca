"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/gemma4.cpp: ``<|channel>thought ... <channel|>`` reasoning, ``<|tool_call>call:name{...}<tool_call|>``
calls in Gemma 4's value syntax (format ``peg-gemma4``, its own mapper)."""

from bankml.chat.chat_peg import (
    TOOL,
    TOOL_ARGS,
    TOOL_NAME,
    ChatToolCall,
    TreeMapper,
    _dump,
    _txt,
    find_by_tag,
    tool_parameters,
)
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish
from bankml.schema import jsondepth
from bankml.schema.tool_args import GemmaStyle


def detect(source):
    return "gemma4" if "'<|tool_call>call:'" in source else None


def rewrite(messages, inp):
    """The older Gemma 4 templates (without the "OpenAI Chat Completions" comment) get their tool results folded
    into the assistant messages (``_tool_responses``); the messages are then prepared as any."""
    if "{#- OpenAI Chat Completions:" not in inp.source:
        return _tool_responses(messages), False, None
    return messages, False, None


def prompt_key(prompt):
    """What of the rendered prompt ``apply`` reads: whether it ends a turn."""
    return prompt.endswith("<turn|>\n")


def _has_content(msg):
    content = msg.get("content")
    return isinstance(content, (str, list)) and bool(content)


def _has_tool_calls(msg):
    return isinstance(msg.get("tool_calls"), list) and bool(msg["tool_calls"])


def _strict_json(text):
    """nlohmann's json::parse: NaN and Infinity are not JSON."""

    def refuse(name):
        raise ValueError(name)

    return jsondepth.loads(text, parse_constant=refuse)


def _tool_responses(messages):
    """workaround::convert_tool_responses_gemma4 (common/parsers/gemma4.cpp), applied to the older Gemma 4
    templates: each assistant turn with tool calls, the tool results after it and a final assistant answer
    (text, no calls) become one assistant message with ``tool_responses`` (each ``{"name", "response"}``, the
    response parsed as JSON where it is JSON, the name taken from the call at the same position or else the
    ``tool_call_id``). The first assistant message's own content is not kept, as llama.cpp does."""
    out = []
    i, n = 0, len(messages)
    while i < n:
        msg = messages[i]
        if msg.get("role", "") != "assistant" or not _has_tool_calls(msg):
            out.append(msg)
            i += 1
            continue
        reasoning = msg["reasoning_content"] if isinstance(msg.get("reasoning_content"), str) else None
        calls = list(msg["tool_calls"])
        responses = []
        i += 1
        while i < n and messages[i].get("role", "") == "tool":
            cur = messages[i]
            response = None
            if "content" in cur:
                response = cur["content"]
                if isinstance(response, str):
                    try:
                        response = _strict_json(response)
                    except ValueError:
                        pass
            name = ""
            k = len(responses)
            if k < len(calls) and isinstance(calls[k], dict) and "function" in calls[k]:
                fn = calls[k]["function"]
                name = fn.get("name", "") if isinstance(fn, dict) else ""
            if not name:
                name = cur.get("tool_call_id", "")
            responses.append({"name": name, "response": response})
            i += 1
        content = None
        if i < n and messages[i].get("role", "") == "assistant":
            nxt = messages[i]
            if not _has_tool_calls(nxt) and _has_content(nxt):
                content = nxt["content"]
                i += 1
        built = {"role": "assistant", "tool_calls": calls}
        if responses:
            built["tool_responses"] = responses
        if content is not None:
            built["content"] = content
        if reasoning is not None:
            built["reasoning_content"] = reasoning
        out.append(built)
    return out


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
                args = p.ref("gemma4-dict")
                if inp.strict_tools:  # the arguments in Gemma 4's syntax, exactly the parameters' schema
                    fn_ = tool["function"]
                    p.strict_params(fn_)
                    source = (tool_parameters(fn_), "#")
                    args = p.schema(args, "tool-" + name + "-schema", None, source=source, style=GemmaStyle())
                tool_choice = tool_choice | p.rule("tool-" + name, p.tool(p.sequence([open_, p.tool_args(args)])))
            call = "<|tool_call>call:" + tool_choice + "<tool_call|>"
            tool_call = p.trigger_rule(
                "tool-call",
                p.repeat(call, 1 if inp.tool_choice == "required" else 0, -1 if inp.parallel_tool_calls else 1),
            )
            if inp.tool_choice == "required":  # (also strict mode's forced calls: no text)
                return start + thought + tool_call
            scan = p.rule("scan-to-toolcall", p.until("<|tool_call>"))
            content = p.rule("content", p.content(p.until_one_of(["<|channel>", "<channel|>", "<|tool_call>"])))
            message = p.rule("message", thought + content)
            return start + p.zero_or_more(message) + scan + tool_call
        content = p.rule("content", p.content(p.until_one_of(["<|channel>", "<channel|>"])))
        message = p.rule("message", thought + content)
        return start + p.one_or_more(message)

    lazy = not (has_response_format or (inp.has_tools and inp.tool_choice == "required"))
    finish(out, fn, has_response_format or inp.tool_calls_enabled, lazy, [(TRIGGER_WORD, "<|tool_call>")], inp=inp)
    out.parser.format = "peg-gemma4"
    out.parser.mapper = Gemma4Mapper


class Gemma4Mapper(TreeMapper):
    """common_chat_peg_gemma4_mapper: tool arguments from Gemma 4's own value syntax (rules ``gemma4-*``)."""

    def _visit_other(self, node):
        if node.tag == TOOL:
            name = find_by_tag(self.ctx, node, TOOL_NAME)
            args = find_by_tag(self.ctx, node, TOOL_ARGS)
            if name is not None and args is not None and not name.is_partial:
                arguments = self._json(self.ctx.ast[args.children[0]]) if args.children else ""
                self.tool_calls.append(ChatToolCall(_txt(name.text), arguments))
            return
        for cid in node.children:
            self._visit(self.ctx.ast[cid])

    def _json(self, node):
        if not node.text:
            return ""
        rule, kids = node.rule, [self.ctx.ast[c] for c in node.children]
        if rule in ("gemma4-number", "gemma4-bool", "gemma4-null", "gemma4-dict-key-name"):
            return _txt(node.text)
        if rule == "gemma4-string-content":
            return _dump(_txt(node.text))[1:-1]
        if rule == "gemma4-string":
            out = '"'
            if kids:
                out += self._json(kids[0]) + ("" if node.is_partial else '"')
            return out
        if rule in ("gemma4-array", "gemma4-dict"):
            open_, close = ("[", "]") if rule == "gemma4-array" else ("{", "}")
            return open_ + ",".join(self._json(k) for k in kids) + ("" if node.is_partial else close)
        if rule == "gemma4-dict-key":
            out = '"'
            if kids:
                out += _dump(self._json(kids[0]))[1:-1]
            return out + ("" if node.is_partial else '":')
        if rule == "gemma4-dict-kv":
            return "".join(self._json(k) for k in kids)
        if rule == "gemma4-value":
            return self._json(kids[0]) if kids else ""
        return ""


FAMILY = Family(("gemma4",), detect, apply, rewrite=rewrite, prompt_key=prompt_key)
