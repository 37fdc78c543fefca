"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

common/parsers/deepseek.cpp (DeepSeek V3.2 and V4): ``<think>`` reasoning, DSML tool calls
(``<｜DSML｜function_calls>`` / ``tool_calls`` in V4), the fenced response format; V4's messages are rendered with
the tool results in call order and the response format in the context."""

from bankml.chat.chat_peg import function_parameters, parameter_source
from bankml.chat.families.common import TRIGGER_WORD, Family, defaults, finish
from bankml.schema.queries import may_be_string

DSML, THINK_START, THINK_END = "｜DSML｜", "<think>", "</think>"
GEN_PROMPT, TC_SEPARATOR = "<｜Assistant｜>", "\n\n"


def detect(source):
    """The template assigns ``dsml_token`` (V3.2 names the call block ``function_calls``, V4 ``tool_calls``)."""
    has = source.__contains__
    if has("dsml_token") and has("DSML") and (has("function_calls") or has("tool_calls")):
        return "deepseek-v3.2"
    return None


def rewrite(messages, inp):
    """V4 (no ``function_calls`` in the template): the messages rendered as they are, each run of tool results
    in the order of the calls before it, and the response format's schema as ``response_format``."""
    if "function_calls" in inp.source:
        return messages, False, None
    context = {"response_format": inp.json_schema} if isinstance(inp.json_schema, dict) else None
    return _sort_tool_results(messages), True, context


def _sort_tool_results(messages):
    """DeepSeek V4 renders a run of tool results in the order of the preceding assistant's tool calls."""
    adjusted = [dict(m) for m in messages]
    call_order = {}
    i = 0
    while i < len(adjusted):
        msg = adjusted[i]
        role = msg.get("role", "")
        if role == "assistant" and isinstance(msg.get("tool_calls"), list) and msg["tool_calls"]:
            call_order = {}
            for idx, call in enumerate(msg["tool_calls"]):
                if call.get("id"):
                    call_order[call["id"]] = idx
            i += 1
            continue
        if role not in ("user", "tool"):
            i += 1
            continue
        positions, end = [], i
        while end < len(adjusted):
            r = adjusted[end].get("role", "")
            if r == "tool":
                positions.append(end)
            elif r != "user":
                break
            end += 1
        if len(positions) > 1 and call_order:
            results = sorted(
                (adjusted[p] for p in positions), key=lambda m: call_order.get(m.get("tool_call_id", ""), 0)
            )
            for k, p in enumerate(positions):
                adjusted[p] = results[k]
        i = end
    return adjusted


def apply(out, inp):
    defaults(out)
    is_v4 = "function_calls" not in inp.source
    tc_block = "tool_calls" if is_v4 else "function_calls"
    fc_start, fc_end = "<%s%s>" % (DSML, tc_block), "</%s%s>" % (DSML, tc_block)
    invoke_start, invoke_end = "<%sinvoke" % DSML, "</%sinvoke>" % DSML
    param_start, param_end = "<%sparameter" % DSML, "</%sparameter>" % DSML
    has_response_format = isinstance(inp.json_schema, dict)
    out.delimiters = [["assistant", GEN_PROMPT], ["user", "<｜User｜>"]]
    out.supports_thinking = True
    out.thinking_start_tag, out.thinking_end_tags = THINK_START, [THINK_END, fc_start]
    out.preserved_tokens = [DSML, THINK_START, THINK_END]
    if inp.has_continuation():
        if is_v4 and not inp.reasoning_content():
            out.generation_prompt = GEN_PROMPT + THINK_END + (inp.render_content() if inp.continue_content else "")
        else:
            out.generation_prompt = GEN_PROMPT + THINK_START + inp.reasoning_content()
            if inp.continue_content:
                out.generation_prompt += THINK_END + inp.render_content()
        out.prompt += out.generation_prompt
    require_tools = inp.tool_choice == "required"
    has_tool_calls = inp.tool_calls_enabled

    def fn(p):
        generation_prompt = p.literal(GEN_PROMPT)
        end = p.end()
        tool_choice = p.choice()
        if has_tool_calls:
            for tool in inp.tools:
                fn_ = tool["function"]
                name = fn_["name"]
                required, optional = [], []
                if inp.strict_tools:
                    args_seq = _strict_args(p, fn_, param_start, param_end)
                for pname, node, is_required in () if inp.strict_tools else function_parameters(fn_):
                    is_string = may_be_string(node)
                    # GCC builds the right operand of + first
                    close = p.tool_arg_close(p.literal(param_end))
                    if is_string:
                        value = p.tool_arg_string_value(p.until(param_end))
                    else:
                        value = p.tool_arg_json_value(
                            p.schema(
                                p.json(),
                                "tool-%s-arg-%s-schema" % (name, pname),
                                None,
                                node=node,
                                source=parameter_source(fn_, pname),
                            )
                        )
                    attr = p.literal('" string="%s">' % ("true" if is_string else "false"))
                    aname = p.tool_arg_name(p.literal(pname))
                    arg_open = p.tool_arg_open(p.literal(param_start + ' name="') + aname + attr)
                    arg = p.tool_arg(arg_open + value + close)
                    named = p.rule("tool-%s-arg-%s" % (name, pname), arg)
                    (required if is_required else optional).append(named)
                if not inp.strict_tools:
                    args_seq = p.required_then_optional(required, optional)
                close = p.tool_close(p.literal(invoke_end))
                sp = p.space()
                nl = p.literal('">\n')
                tname = p.tool_name(p.literal(name))
                func = p.tool(p.tool_open(p.literal(invoke_start + ' name="') + tname + nl) + args_seq + sp + close)
                tool_choice = tool_choice | p.rule("tool-" + name, func)
        tool_calls = p.eps()
        fc_close = p.literal(fc_end)
        sp2 = p.space()
        if inp.parallel_tool_calls:
            more = p.zero_or_more(p.space() + tool_choice)
            sp1 = p.space()
            body = p.literal(fc_start) + sp1 + tool_choice + more + sp2 + fc_close
        else:
            sp1 = p.space()
            body = p.literal(fc_start) + sp1 + tool_choice + sp2 + fc_close
        tool_calls = p.trigger_rule("tool-call", body)
        reasoning = p.eps()
        reasoning_with_tc = p.eps()
        obligatory = tool_calls
        allow_reasoning_with_tc = False
        if not require_tools:
            tool_calls = p.optional(tool_calls)
        if inp.extract_reasoning and inp.enable_thinking:
            reasoning = p.optional(THINK_START + p.reasoning(p.until(THINK_END)) + THINK_END)
            sp = p.space()
            body = p.reasoning(p.until_one_of([TC_SEPARATOR + fc_start, fc_start, THINK_END]))
            reasoning_with_tc = THINK_START + body + sp + obligatory
            allow_reasoning_with_tc = True
        elif inp.extract_reasoning:
            if is_v4:
                reasoning = p.optional(p.literal(THINK_END))
            else:
                close = p.literal(THINK_END)
                until = p.until(THINK_END)
                reasoning = p.optional(p.literal(THINK_START) + until + close)
        if has_response_format:
            fence = p.literal("```")
            sp = p.space()
            body = p.content(p.schema(p.json(), "response-format-schema", inp.json_schema))
            sp0 = p.space()
            response_format = p.rule("response-format", p.literal("```json") + sp0 + body + sp + fence)
            return generation_prompt + reasoning + response_format + end
        if not has_tool_calls:
            return generation_prompt + reasoning + p.content(p.rest()) + end
        if inp.forced:  # strict mode: the calls right after the reasoning (or ending it)
            if allow_reasoning_with_tc:
                return generation_prompt + (reasoning_with_tc | (reasoning + p.space() + tool_calls)) + end
            return generation_prompt + reasoning + p.space() + tool_calls + end
        sp = p.space()
        before = p.content(p.until_one_of([TC_SEPARATOR + fc_start, fc_start]))
        content_before_tools = p.negate(p.literal(THINK_START)) + before + sp
        if allow_reasoning_with_tc:
            return generation_prompt + (reasoning_with_tc | (reasoning + content_before_tools + tool_calls)) + end
        return generation_prompt + reasoning + content_before_tools + tool_calls + end

    finish(
        out,
        fn,
        has_response_format or has_tool_calls,
        inp.has_tools and not require_tools,
        [(TRIGGER_WORD, fc_start)],
        inp=inp,
    )


def _strict_args(p, fn_, param_start, param_end):
    """Strict tool-call mode: the parameters in schema order, ``string="true"`` and raw text for a string
    node, ``string="false"`` and canonical JSON for any other."""
    items = []
    for param in p.strict_params(fn_):
        rule = "tool-%s-arg-%s" % (fn_["name"], param.name)
        string_value = p.tool_arg_string_value(p.until(param_end))
        value, is_string = p.strict_value(fn_, param, rule + "-schema", string_value, param_end)
        close = p.tool_arg_close(p.literal(param_end))
        attr = p.literal('" string="%s">' % ("true" if is_string else "false"))
        aname = p.tool_arg_name(p.literal(param.name))
        arg_open = p.tool_arg_open(p.literal(param_start + ' name="') + aname + attr)
        items.append((p.rule(rule, p.tool_arg(arg_open + value + close)), param.required))
    return p.strict_sequence(items, p.space)


FAMILY = Family(("deepseek-v3.2",), detect, apply, rewrite=rewrite)
