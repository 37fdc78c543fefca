"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

The chat layer of llama-server for any chat template: what ``common_chat_templates_init`` and
``common_chat_templates_apply`` (``common/chat.cpp``) make of a template and a request. This module owns the
template's capabilities (``jinja::caps_get``), the extra variables it gives the template (``datetime``,
``date_string``, ``chat_template_kwargs``, ``enable_thinking``, the reasoning-preservation and reasoning-effort
aliases), the prompt, and the generation prompt (the text the template adds for ``add_generation_prompt``, which
the grammar and the parser start with). The rendering itself is ``bankml.chat.jinja``'s; the OpenAI messages and
tools read as llama.cpp reads them (``common_chat_msgs_parse_oaicompat``, with the workarounds applied before
rendering) are ``bankml.chat.messages``'; the answer parsed back and streamed as deltas is
``bankml.chat.answers``'; what is cached between requests is ``bankml.chat.request_cache``'s.

It runs the generic pipeline; what is one model family's (the detection of its templates, the message rewrites
before rendering, the handler of ``common/parsers/`` and its mapper) is that family's module of
``bankml.chat.families``, and the differential analysis of ``common/chat-diff-analyzer.cpp`` is
``bankml.chat.analysis``; see ``docs/modules/chat.md``.

Typical use, without a model::

    tmpl = ChatTemplate(source, bos_token="<s>", eos_token="</s>")
    out = tmpl.apply(ChatInputs([{"role": "user", "content": "Hi"}], enable_thinking=False))
    out.prompt, out.generation_prompt

The request is one value, ``bankml.chat.inputs.ChatInputs`` (llama.cpp's ``common_chat_templates_inputs``); the
result one ``ChatPrompt`` (its ``common_chat_params``).
"""

import re
import time
from dataclasses import dataclass, field
from typing import Optional

from bankml.chat import cache, families
from bankml.chat.analysis import Analysis
from bankml.chat.analysis_tools import JSON_NATIVE, build_tool_parser
from bankml.chat.answers import msg_empty
from bankml.chat.chat_peg import build_chat_peg_parser
from bankml.chat.families import TRIGGER_PATTERN, TRIGGER_PATTERN_FULL, TRIGGER_TOKEN, TRIGGER_WORD, Inputs
from bankml.chat.inputs import ChatInputs
from bankml.chat.jinja import Program, TemplateError, caps_get, preserve_reasoning
from bankml.chat.messages import (
    as_text,
    common_prefix_length,
    msg_to_json,
    normalize_messages,
    parse_continuation,
    parse_messages,
    trim_spaces,
)
from bankml.chat.params import (
    CONTINUATION_AUTO,
    CONTINUATION_CONTENT,
    CONTINUATION_NONE,
    CONTINUATION_REASONING,
    ChatParser,
    ChatRequestError,
    forced_grammar,
    render_content,
    resolve_tool_choice,
    schema_error,
)
from bankml.chat.request_cache import UNCACHED, cached_tools, derived_fields, private_schema
from bankml.errors import SchemaError
from bankml.schema import jsondepth as _jsondepth
from bankml.schema.grammar import DEFAULT_STRICT_STYLE

__all__ = [
    "ChatInputs",
    "ChatTemplate",
    "ChatPrompt",
    "ChatRequestError",
    "TemplateError",
    "parse_messages",
    "CHATML_TEMPLATE",
]

CHATML_TEMPLATE = (
    "{%- for message in messages -%}\n"
    "  {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' -}}\n"
    "{%- endfor -%}\n"
    "{%- if add_generation_prompt -%}\n"
    "  {{- '<|im_start|>assistant\n' -}}\n"
    "{%- endif -%}"
)


@dataclass
class ChatPrompt:
    """What ``ChatTemplate.apply`` returns, with common_chat_params' field names: the prompt, the generation
    prompt (what the template adds for ``add_generation_prompt``; the grammar and the parser start with it),
    and what the template analysis gives (thinking tags, preserved tokens, stops, message delimiters).
    ``json_schema_mode`` is the mode the grammar's schemas were compiled in (``bankml.schema.MODES``), and
    ``strict_style`` the strict mode's style (``bankml.schema.grammar.STRICT_STYLES``);
    ``tool_call_mode`` how its tool calls are constrained (``"strict"`` only where the request has tools
    enabled: ``bankml.chat.params.TOOL_CALL_MODES``).
    ``handler`` names llama.cpp's hand-written handler when the template has one (those fields are then
    not derived yet and are None)."""

    prompt: str
    generation_prompt: str
    format: Optional[str] = None
    supports_thinking: Optional[bool] = None
    thinking_start_tag: Optional[str] = None
    thinking_end_tags: Optional[list] = None
    preserved_tokens: Optional[list] = None
    additional_stops: Optional[list] = None
    delimiters: Optional[list] = None
    handler: Optional[str] = None
    grammar: Optional[str] = None
    grammar_lazy: Optional[bool] = None
    grammar_triggers: Optional[list] = None
    parser: Optional["ChatParser"] = None
    caps: dict = field(default_factory=dict)
    json_schema_mode: str = "llama.cpp"
    strict_style: str = DEFAULT_STRICT_STYLE
    tool_call_mode: str = "llama.cpp"
    forced: bool = False  # strict tool-call mode forces the answer's calls (tool_choice required or named)


class ChatTemplate:
    """A chat template as ``common_chat_templates_init`` holds it: the source (with llama.cpp's source
    workarounds), the parsed program, bos/eos strings, whether the vocabulary adds bos/eos itself, and the
    capabilities probed once."""

    def __init__(self, source=None, bos_token="", eos_token="", add_bos=False, add_eos=False):
        if not source or source == "chatml":
            source = CHATML_TEMPLATE
        if "<|channel|>" in source and "in message.content or" in source:
            source = source.replace(
                '{%- if "<|channel|>analysis<|message|>" in message.content or '
                '"<|channel|>final<|message|>" in message.content %}',
                "{%- if false %}",
            )
        if "[TOOL_CALLS]" in source and "if (message['content'] is none or" in source:
            source = source.replace(
                "{%- if (message['content'] is none or message['content'] == '' or "
                "message['content']|length == 0) and (message['tool_calls'] is not defined or "
                "message['tool_calls'] is none or message['tool_calls']|length == 0) %}",
                "{%- if false %}",
            )
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        self.add_bos, self.add_eos = add_bos, add_eos
        self.program = Program(source)
        self.caps = caps_get(self.program)
        self.handler = families.detect(source)
        self._analysis = None
        # what the derived parameters depend on in the template (the analysis renders it with bos / eos)
        self._cache_key = (source, bos_token, eos_token, bool(add_bos), bool(add_eos))

    @property
    def analysis(self):
        """The differential analysis of the template (computed once)."""
        if self._analysis is None:
            self._analysis = Analysis(self)
        return self._analysis

    # -- rendering (common_chat_template_direct_apply_impl) ------------------------------------------------

    def normalize(self, messages):
        """messages_inp_normalizer with this template's capabilities."""
        return normalize_messages(messages, self.caps)

    def render(
        self,
        messages,
        tools=None,
        add_generation_prompt=False,
        enable_thinking=True,
        extra_context=None,
        now=None,
        strip_bos_eos=True,
        override=False,
    ):
        """The template rendered over already-prepared messages (JSON form): llama.cpp's direct apply
        (``override``: messages a handler built for this template, rendered as they are)."""
        variables = {
            "messages": messages if override else self.normalize(messages),
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "enable_thinking": enable_thinking,
        }
        if tools:
            variables["tools"] = tools
        if extra_context:
            variables.update(extra_context)
        if add_generation_prompt:
            variables["add_generation_prompt"] = True
        if isinstance(variables.get("preserve_reasoning"), bool):
            variables.update(preserve_reasoning(variables["preserve_reasoning"]))
        effort = variables.get("reasoning_effort")
        if isinstance(effort, str) and effort:
            variables["reasoning_effort"] = variables["reasoning_strength"] = effort
        result = self.program.render(variables, now=now)
        if strip_bos_eos and self.add_bos and result.startswith(self.bos_token):
            result = result[len(self.bos_token) :]
        if strip_bos_eos and self.add_eos and self.eos_token and result.endswith(self.eos_token):
            result = result[: len(result) - len(self.eos_token)]
        return result

    def generation_prompt(
        self, messages, tools=None, enable_thinking=True, extra_context=None, now=None, override=False
    ):
        """common_chat_template_generation_prompt: what add_generation_prompt appends, as the common-prefix
        difference of the two renders."""
        without = self.render(messages, tools, False, enable_thinking, extra_context, now, override=override)
        with_ = self.render(messages, tools, True, enable_thinking, extra_context, now, override=override)
        n = common_prefix_length(without, with_)
        return with_[n:]

    def prompt_and_generation_prompt(
        self, messages, tools, add_generation_prompt, enable_thinking=True, extra_context=None, now=None, override=False
    ):
        """``(render(..., add_generation_prompt), generation_prompt(...))`` from two renders, not three: the prompt
        is one of the two renders the generation prompt compares (both at the same ``now``)."""
        stamp = time.time() if now is None else now
        without = self.render(messages, tools, False, enable_thinking, extra_context, stamp, override=override)
        with_ = self.render(messages, tools, True, enable_thinking, extra_context, stamp, override=override)
        n = common_prefix_length(without, with_)
        return (with_ if add_generation_prompt else without), with_[n:]

    # -- the request (common_chat_templates_apply_jinja up to the parser generation) ------------------------

    def prepare(self, inputs):
        """The messages and variables llama.cpp renders for a request (a ``ChatInputs``): (messages_json,
        extra_context, add_generation_prompt, continuation, continue_msg)."""
        msgs = parse_messages(inputs.messages)
        add_generation_prompt = inputs.add_generation_prompt
        # the continued message is the request's own, untrimmed (common_chat_templates_apply_jinja trims a
        # copy of the messages for StepFun's rendering and takes continue_msg from inputs.messages)
        last = msgs[-1] if msgs else None
        if "You have access to the following functions in JSONSchema format" in self.source:
            if last is not None:
                last = dict(last, content_parts=[dict(p) for p in last["content_parts"]])
            for m in msgs:
                m["content"], m["reasoning_content"] = trim_spaces(m["content"]), trim_spaces(m["reasoning_content"])
                for p in m["content_parts"]:
                    if p["type"] == "text":
                        p["text"] = trim_spaces(p["text"])
        rendered = normalize_messages([msg_to_json(m) for m in msgs], self.caps)
        continuation = parse_continuation(inputs.continue_final_message)
        continue_msg = None
        if continuation != CONTINUATION_NONE:
            add_generation_prompt = False
            if msgs:
                continue_msg = last
                rendered = rendered[:-1]
            if continuation == CONTINUATION_AUTO and msgs:
                continuation = CONTINUATION_CONTENT
                if (
                    continue_msg["reasoning_content"]
                    and not continue_msg["content"]
                    and not continue_msg["content_parts"]
                ):
                    continuation = CONTINUATION_REASONING
        if "<|channel|>" not in self.source:
            for m in rendered:
                if m.get("role") == "developer":
                    m["role"] = "system"
        if not self.caps.supports_system_role and rendered and rendered[0].get("role") == "system":
            if len(rendered) > 1:
                first, second = rendered[0], dict(rendered[1])
                second["content"] = as_text(first.get("content")) + "\n" + as_text(second.get("content"))
                rendered = [second] + rendered[2:]
            else:
                rendered = rendered[1:]
        if self.caps.supports_tool_calls:
            for m in rendered:
                if "tool_calls" in m and "content" not in m:
                    m["content"] = ""
        if self.caps.supports_object_arguments:
            for m in rendered:
                for call in m.get("tool_calls", ()):
                    args = call.get("function", {}).get("arguments")
                    if isinstance(args, str):
                        try:
                            call["function"]["arguments"] = _jsondepth.loads(args)
                        except (ValueError, RecursionError) as e:
                            raise ChatRequestError("Failed to parse tool call arguments as JSON: %s" % e) from None
        stamp = time.time() if inputs.now is None else inputs.now
        extra = {
            "datetime": time.strftime("%b %d %Y", time.localtime(stamp)),
            "date_string": time.strftime("%d %b %Y", time.localtime(stamp)),
        }
        for key, text in (inputs.chat_template_kwargs or {}).items():
            try:
                extra[key] = _jsondepth.loads(text)
            except (ValueError, RecursionError) as e:
                raise ChatRequestError("chat_template_kwargs[%r] is not JSON: %s" % (key, e)) from None
        return rendered, extra, add_generation_prompt, continuation, continue_msg

    def apply(self, inputs):
        """What llama.cpp's common_chat_templates_apply gives for one request, a ``ChatInputs``
        (``bankml.chat.inputs``; a field left None takes llama.cpp's default): the ChatPrompt. ``now`` fixes the
        clock of ``strftime_now`` / ``datetime`` / ``date_string`` (default the wall clock);
        ``chat_template_kwargs`` maps names to JSON texts, as llama-server holds them; ``json_schema`` (the
        response format's schema, a dict or its JSON text) is rendered by some templates and gives the
        grammar; ``reasoning_format`` ``deepseek`` extracts the reasoning, ``none`` leaves it in the content.
        ``json_schema_mode="strict"`` compiles the grammar's schemas (the response format's, the tools'
        parameters') with bankml's strict compiler inside the same wrapping; the default is llama.cpp's.
        ``strict_style``: strict mode's style, ``"canonical"`` (None: the default, the language to generate in)
        or ``"exact"`` (every JSON text of each valid instance).

        ``tool_call_mode``: ``"llama.cpp"`` (the default: llama-server's grammars) or ``"strict"``: a
        ``tool_choice`` of ``"required"`` or naming a function (``{"type": "function", "function": {"name":
        X}}``, or OpenAI's ``allowed_tools``) makes the grammar the template's own call syntax from the first
        token (after the template's reasoning), with no text before, between or after the calls, exactly one
        call unless ``parallel_tool_calls``; under ``"auto"`` a call, once its trigger is written, is whole; in
        both the arguments are exactly each tool's ``parameters`` schema, in the canonical style of
        ``bankml.schema.tool_args`` (a schema it cannot write exactly is a SchemaError naming the tool, the
        keyword and the pointer). Without tools the mode changes nothing."""
        if not isinstance(inputs, ChatInputs):
            raise TypeError(
                "ChatTemplate.apply takes one bankml.chat.ChatInputs (ChatInputs(messages, tools=..., ...)), got "
                + type(inputs).__name__
            )
        inp, rendered, tools_render, extra, key = self._generation_params(inputs.with_defaults())
        if self.handler is not None:
            return self._apply_handler(inp, rendered, tools_render, extra, key)
        return self._apply_auto(inp, rendered, tools_render, extra, key)

    def _generation_params(self, inputs):
        """``(inp, rendered, tools_render, extra, key)`` for a request (a ``ChatInputs`` with its defaults): the
        handlers' ``Inputs``, the messages and the variables to render (``prepare``), the tools as the template
        sees them, and the key of the derived parameters in ``bankml.chat.cache.PARAMS`` (None: not cached)."""
        json_schema_mode, tool_call_mode = inputs.json_schema_mode, inputs.tool_call_mode
        tools = inputs.tools
        tool_choice, tool_names = resolve_tool_choice(inputs.tool_choice, tools, tool_call_mode)
        rendered, extra, add_gen, continuation, continue_msg = self.prepare(inputs)
        tools_json, tools_render, tools_key = cached_tools(tools)
        json_schema = inputs.json_schema
        if isinstance(json_schema, str):
            try:
                json_schema = _jsondepth.loads(json_schema) if json_schema else None
            except (ValueError, RecursionError) as e:
                raise ChatRequestError("json_schema is not JSON: %s" % e) from None
        has_continuation = (
            continuation != CONTINUATION_NONE and continue_msg is not None and not msg_empty(continue_msg)
        )
        # the derived parameters are cached unless they depend on a prefilled message or on values that are
        # not JSON; the cache keeps its own copy of the schema (the request's may change afterwards)
        schema_key = cache.object_key(json_schema)
        key = None
        if not has_continuation and tools_key is not UNCACHED and schema_key is not None:
            key = (
                self._cache_key,
                tools_key,
                schema_key,
                inputs.reasoning_format,
                tool_choice,
                inputs.parallel_tool_calls,
                inputs.enable_thinking,
                add_gen,
                continuation,
                json_schema_mode,
                inputs.strict_style,
                tool_call_mode,
                tool_names,
            )
            json_schema = private_schema(json_schema, schema_key)
        inp = Inputs(
            inputs,
            self.handler,
            self.source,
            json_schema,
            continuation,
            continue_msg if has_continuation else None,
            tools_json,
            tool_choice,
            add_gen,
            tool_names,
        )
        if tool_names is not None and not inp.tools:
            raise ChatRequestError("tool_choice names functions that are not function tools of the request")
        return inp, rendered, tools_render, extra, key

    def _apply_auto(self, inp, rendered, tools_render, extra, key):
        """The generic pipeline (no hand-written handler): the prompt and generation prompt, the continued
        message's prefill, the differential analysis' tags, tokens and stops, and the auto-parser's arena,
        grammar and parser (``_derive_auto``), cached under ``key``."""
        inputs, json_schema_mode, json_schema = inp.request, inp.request.json_schema_mode, inp.json_schema
        continuation, continue_msg = inp.continuation, inp.continue_msg
        prompt, gen = self.prompt_and_generation_prompt(
            rendered, tools_render, inp.add_generation_prompt, inputs.enable_thinking, extra, inputs.now
        )
        out = ChatPrompt(
            prompt,
            gen,
            handler=self.handler,
            caps=self.caps.to_dict(),
            json_schema_mode=json_schema_mode,
            strict_style=inputs.strict_style,
            tool_call_mode=_tool_call_mode(inp),
        )
        a = self.analysis
        parser_gen = gen
        if continue_msg is not None:  # a continued message that is not empty
            start = a.reasoning.start
            if start:
                cut = gen.find(start)
                gen = (gen if cut < 0 else gen[:cut]) + start + continue_msg["reasoning_content"]
                if continuation == CONTINUATION_CONTENT:
                    gen += a.reasoning.end
            if continuation == CONTINUATION_CONTENT:
                gen += render_content(continue_msg)
            out.prompt += gen
            out.generation_prompt = gen
        out.format = "peg-native"
        extracting = inputs.reasoning_format != "none" and a.reasoning.mode != "NONE"

        def derive(out):
            self._derive_auto(out, a, parser_gen, extracting, json_schema, inp, json_schema_mode)

        derived_fields(out, None if key is None else key + ("auto", parser_gen), derive)
        out.supports_thinking = a.reasoning.mode != "NONE"
        out.thinking_start_tag = trim_spaces(a.reasoning.start) if out.supports_thinking else ""
        end = trim_spaces(a.reasoning.end)
        out.thinking_end_tags = [end] if out.supports_thinking and end else []
        out.preserved_tokens = list(a.preserved_tokens)
        if out.grammar_lazy and out.tool_call_mode == "strict":
            families.preserve_trigger_words(out)
        out.additional_stops = list(a.additional_stops)
        out.delimiters = ([["assistant", a.assistant_start]] if a.assistant_start else []) + (
            [["user", a.user_start]] if a.user_start else []
        )
        return _check_forced(out, inp)

    def _derive_auto(self, out, a, parser_gen, extracting, json_schema, inp, json_schema_mode):
        """The auto-parser's part of apply that the messages do not change (given the generation prompt): the
        arena, its grammar, the lazy flag and triggers, and the parser."""
        json_mode = isinstance(json_schema, dict) and bool(json_schema)
        head = "Unable to generate parser for this template. Automatic parser generation failed: "
        tool_choice = inp.tool_choice
        tf = a.tools.format
        has_tools = tf.mode != "NONE" and inp.has_tools
        trigger = tf.section_start or tf.per_call_start
        if not trigger and has_tools and out.tool_call_mode == "strict" and tf.mode == JSON_NATIVE:
            # no trigger word (Llama 3.x's bare JSON calls): the parser reads a call from the first "{", so
            # strict mode starts the grammar there (llama.cpp leaves "auto" unconstrained)
            trigger = "{"
        include_grammar = json_mode or (
            has_tools and ((tool_choice == "auto" and bool(trigger)) or tool_choice == "required")
        )
        try:
            with_tools = inp.tool_calls_enabled and self.caps.supports_tool_calls
            arena = build_auto_parser(a, parser_gen, extracting, json_schema, inp if with_tools else None)
            if include_grammar:
                out.grammar_lazy = not json_mode and tool_choice == "auto"
                out.grammar = forced_grammar(arena, out, inp)
                out.grammar_triggers = []
                if out.grammar_lazy:
                    out.grammar_triggers = [[TRIGGER_WORD, trigger]]
                    if tf.openai_wrapper_trigger:
                        out.grammar_triggers.append([TRIGGER_WORD, '{"type": "function",'])
                    if out.tool_call_mode == "strict":
                        out.grammar_triggers = families.strict_triggers(out.grammar_triggers)
        except SchemaError as e:
            raise schema_error(e, head) from None
        out.parser = ChatParser(arena, out.generation_prompt)

    def _apply_handler(self, inp, rendered, tools_render, extra, key=None):
        """llama.cpp's hand-written handlers (common/parsers/*.cpp): the messages or context the family rewrites
        before rendering (``bankml.chat.families``), the prompt it fixes after, then its handler (continuation
        prompt, tags, tokens, parser, grammar), cached under ``key`` (None: not cached) with the generation
        prompt and what of the prompt the handler reads."""
        h = inp.handler
        msgs, is_override, context = families.rewrite(rendered, inp)
        ctx = dict(extra)
        if context:
            ctx.update(context)
        prompt, gen = self.prompt_and_generation_prompt(
            msgs,
            tools_render,
            inp.add_generation_prompt,
            inp.enable_thinking,
            ctx,
            inp.request.now,
            override=is_override,
        )
        prompt = families.fix_prompt(prompt, inp)
        out = ChatPrompt(
            prompt,
            gen,
            handler=h,
            caps=self.caps.to_dict(),
            json_schema_mode=inp.request.json_schema_mode,
            strict_style=inp.request.strict_style,
            tool_call_mode=_tool_call_mode(inp),
        )
        if key is not None:
            key = key + (h, gen, families.prompt_key(h, prompt))
        derived_fields(out, key, lambda out: families.apply(out, inp))
        return _check_forced(out, inp)


def _check_forced(out, inp):
    """``out``, unless strict mode is to force a call the template has no syntax for (llama.cpp finds no
    tool-call format in it: SmolLM3, Phi 3.5...): a ChatRequestError, not an answer that cannot be a call."""
    if inp.forced and not out.grammar and inp.json_schema is None:
        raise ChatRequestError(
            'strict tool-call mode cannot force a call (tool_choice "required" or naming a function): this chat '
            "template has no tool-call syntax llama.cpp's chat layer knows, so no answer would parse as a call"
        )
    out.forced = bool(inp.forced and out.grammar and not out.grammar_lazy)
    return out


def _tool_call_mode(inp):
    """The tool-call mode a ChatPrompt is built in: strict only where the request's tools are enabled (without
    them the grammar is llama.cpp's, byte for byte)."""
    return "strict" if inp.strict_tools else "llama.cpp"


def build_auto_parser(analysis, generation_prompt, extracting, json_schema, tool_inputs=None):
    """autoparser::build_parser (chat-auto-parser-generator.cpp): the arena; ``tool_inputs`` (the handlers'
    ``Inputs``) when the request's tools are to be parsed. C++ operands of ``+`` are built as GCC builds them
    (the right one first), which fixes the parser ids."""
    r, c = analysis.reasoning, analysis.content

    def fn(p):
        reasoning_parser = p.eps()  # parser_build_context's initial reasoning parser
        if extracting and r.mode in ("TAG_BASED", "TOOLS_ONLY") and r.end:
            tail = p.optspace(r.end)
            body = p.reasoning(p.until(trim_spaces(r.end)))
            if r.start:
                head = p.optspace(r.start)
                reasoning_parser = p.optional(head + body + tail)
            else:
                reasoning_parser = p.optional(body + tail)
        else:
            reasoning_parser = p.eps()  # analyze_reasoning::build_parser's epsilon
        p.eps()  # build_parser's initial parser
        pure_content = r.mode == "NONE"
        if isinstance(json_schema, dict) and json_schema:
            response_format = p.rule(
                "response-format", p.content(p.schema(p.json(), "response-format-schema", json_schema))
            )
            end = p.end()
            fenced_close = p.literal("```")
            sp = p.space()
            fenced = p.literal("```json") + p.space() + response_format + sp + fenced_close
            sp2 = p.space()
            bare = p.space() + response_format + sp2
            alternatives = p.choice([fenced, bare])
            parser = reasoning_parser + p.space() + alternatives + end
            pure_content = False
        elif tool_inputs is not None:
            parser = build_tool_parser(p, analysis.tools, tool_inputs, reasoning_parser, c)
            pure_content = False
        elif c.is_always_wrapped():
            end = p.end()
            if extracting:
                inner = p.content(p.until(c.end))
                parser = reasoning_parser + c.start + inner + c.end + end
            else:
                inner = p.content(p.until(c.end))
                parser = p.content(p.until(c.start)) + c.start + inner + c.end + end
        else:
            end = p.end()
            parser = reasoning_parser + p.content(p.rest()) + end
        prefix = p.prefix(generation_prompt, trim_spaces(r.start))
        return prefix + parser if pure_content else prefix << parser

    return build_chat_peg_parser(fn, tool_inputs is not None and tool_inputs.strict_tools)


def preserved_token_ids(preserved_tokens, tokenize):
    """The ids of a ChatPrompt's ``preserved_tokens`` that are one token of the vocabulary (llama-server's
    preserved_tokens field): a generated one is sent with its special text. ``tokenize(text)`` tokenizes with
    special tokens parsed and no BOS."""
    out = set()
    for text in preserved_tokens or ():
        ids = tokenize(text)
        if len(ids) == 1:
            out.add(ids[0])
    return out


def _regex_escape(text):
    # common.cpp's regex_escape
    return re.sub(r"[.^$|()*+?\[\]{}\\]", lambda m: "\\" + m.group(0), text)


def lazy_grammar_triggers(triggers, preserved_ids, tokenize):
    """``(trigger_tokens, trigger_patterns)`` for ``Grammar(..., lazy=True)`` from a ChatPrompt's
    ``grammar_triggers``, as llama-server reads them (server-schema.cpp's grammar_triggers) and
    common_sampler_init hands them to the grammar: a word that is one token becomes that token (it must be one
    of ``preserved_ids``), another word its escaped pattern, a full pattern anchored at both ends. ValueError
    with llama-server's message for a lazy grammar without triggers or a one-token word not preserved."""
    tokens, patterns = [], []
    for kind, value in triggers or ():
        if kind == TRIGGER_WORD:
            ids = tokenize(value)
            if len(ids) == 1:
                if ids[0] not in preserved_ids:
                    raise ValueError("Grammar trigger word should be marked as preserved token: " + value)
                tokens.append(ids[0])
            else:
                patterns.append(_regex_escape(value))
        elif kind == TRIGGER_PATTERN:
            patterns.append(value)
        elif kind == TRIGGER_PATTERN_FULL:
            anchored = "^$"
            if value:
                anchored = ("" if value[0] == "^" else "^") + value + ("" if value[-1] == "$" else "$")
            patterns.append(anchored)
        elif kind == TRIGGER_TOKEN:
            ids = tokenize(value)
            if len(ids) != 1:
                raise ValueError("Grammar trigger token is not one token of the vocabulary: " + value)
            tokens.append(ids[0])
        else:
            raise ValueError("unknown grammar trigger type: %r" % (kind,))
    if not tokens and not patterns:
        raise ValueError("Error: no triggers set for lazy grammar!")
    return tokens, patterns


class ChatJob:
    """What a runtime needs from the chat layer for one chat request (``for_constraint``): the prompt, the
    grammar text (None: unconstrained), the text the grammar is fed first (``prefill``), the parser of the
    answer (None when bankml does not build this template's parser yet: the content is the raw text), and
    the additional stop strings."""

    __slots__ = ("prompt", "grammar", "prefill", "parser", "stops", "chat")

    def __init__(self, prompt, grammar, prefill, parser, stops, chat):
        self.prompt, self.grammar, self.prefill, self.parser, self.stops, self.chat = (
            prompt,
            grammar,
            prefill,
            parser,
            stops,
            chat,
        )


def for_constraint(template, inputs, constraint, bare_schema_fallback=False):
    """llama-server's chat path for a ``bankml.chat.constraint.Constraint``: a response format (JSON mode, a schema
    object) gets the chat grammar prefilled with the generation prompt (common_grammar_needs_prefill); a GBNF
    grammar, a top-level schema that is not an object or no constraint get the constraint's own grammar, not
    prefilled, and the content parser. ``inputs`` is the request's ``ChatInputs``; its ``json_schema`` is the
    constraint's.

    A template whose handler builds no grammar for a response format (GigaChat 3, Functionary v3.2, Kimi K2 /
    K3, Ling 3: their chat grammar is empty) gets what llama-server samples with then: the request's own
    top-level ``json_schema`` or ``grammar`` (``constraint.fallback``), and no grammar for a response format
    alone. ``bare_schema_fallback=True`` (an opt-in that leaves llama-server's answers) constrains those
    templates with the schema's bare grammar instead."""
    schema = constraint.schema if constraint.is_json else None
    out = template.apply(inputs.replace(json_schema=schema))
    if out.parser is not None and schema is not None and out.grammar:
        return ChatJob(out.prompt, out.grammar, out.generation_prompt, out.parser, out.additional_stops, out)
    if schema is not None and not bare_schema_fallback:
        fallback = constraint.fallback
        grammar = fallback.to_grammar(None)[0] if fallback is not None else None
    else:
        grammar = constraint.to_grammar(None)[0]
    return ChatJob(out.prompt, grammar, None, out.parser, out.additional_stops or [], out)
