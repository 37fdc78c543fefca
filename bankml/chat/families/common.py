"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

What every hand-written handler of ``bankml.chat.families`` shares: the trigger kinds, the handlers' inputs
(``autoparser::generation_params``), ``Family`` (what a family module declares: its detection, message rewrites,
prompt fix and handler), the defaults of ``common_chat_params`` and ``finish``, which builds a handler's arena,
grammar and parser. Must not import ``bankml.chat.template`` or a family module.
"""

from dataclasses import dataclass
from typing import Any, Callable, Optional

from bankml.chat.chat_peg import build_chat_peg_parser
from bankml.chat.params import (
    CONTINUATION_CONTENT,
    ChatParser,
    forced_grammar,
    render_content,
    schema_error,
)
from bankml.errors import SchemaError

TRIGGER_TOKEN, TRIGGER_WORD, TRIGGER_PATTERN, TRIGGER_PATTERN_FULL = 0, 1, 2, 3


class Inputs:
    """autoparser::generation_params, the fields the handlers read: the request (``request``, a ``ChatInputs``
    with its defaults filled, whose ``enable_thinking``, ``reasoning_format``, ``parallel_tool_calls`` and
    ``tool_call_mode`` are read as they are) once ``bankml.chat.template`` prepared it: the handler and the
    template source, the response format's schema parsed (``json_schema``), the continuation and the continued
    message, the tools in llama.cpp's JSON form (only the functions a named ``tool_choice`` allows, in strict
    mode: ``tool_names``), the tool choice read (``"auto"``, ``"none"`` or ``"required"``) and the generation
    prompt flag after the continuation rules."""

    def __init__(
        self,
        request,
        handler,
        source,
        json_schema,
        continuation,
        continue_msg,
        tools=None,
        tool_choice="auto",
        add_generation_prompt=True,
        tool_names=None,
    ):
        self.request = request
        self.handler, self.source = handler, source
        self.enable_thinking, self.add_generation_prompt = request.enable_thinking, add_generation_prompt
        self.json_schema = json_schema
        self.reasoning_format = request.reasoning_format
        self.continuation, self.continue_msg = continuation, continue_msg
        self.tools = [t for t in (tools or []) if isinstance(t, dict)]
        if tool_names is not None:  # the functions a named tool_choice allows (strict mode): the grammar's
            self.tools = [t for t in self.tools if _name_of(t) in tool_names]
        self.tool_choice, self.parallel_tool_calls = tool_choice, request.parallel_tool_calls
        self.tool_call_mode = request.tool_call_mode
        self.continue_content = continuation == CONTINUATION_CONTENT
        self._render = render_content

    @property
    def has_tools(self):
        return bool(self.tools)

    @property
    def strict_tools(self):
        """Strict tool-call mode: the arguments exactly their schema, in the canonical style
        (``bankml.schema.tool_args``), whole calls once a call starts."""
        return self.tool_call_mode == "strict" and self.tool_calls_enabled

    @property
    def forced(self):
        """Strict mode with ``required`` (or a named function): the answer is the template's call syntax
        first (after its reasoning), no text before, between or after the calls, and exactly one call
        without ``parallel_tool_calls``."""
        return self.strict_tools and self.tool_choice == "required"

    def calls(self, p, call, separator=None):
        """The calls of an answer in strict mode: one, or with ``parallel_tool_calls`` one or more
        (``separator``, a parser or text, between them)."""
        if not self.parallel_tool_calls:
            return call
        more = call if separator is None else separator + call
        return call + p.zero_or_more(more)

    @property
    def tool_calls_enabled(self):
        return self.has_tools and self.tool_choice != "none"

    @property
    def has_response_format(self):
        return isinstance(self.json_schema, dict) and bool(self.json_schema)

    @property
    def extract_reasoning(self):
        return self.reasoning_format != "none"

    def has_continuation(self):
        return self.continue_msg is not None

    def reasoning_content(self):
        return self.continue_msg["reasoning_content"]

    def render_content(self):
        return self._render(self.continue_msg)


def _name_of(tool):
    fn = tool.get("function")
    return fn.get("name") if isinstance(fn, dict) else None


def keep_messages(messages, inp):
    """A family's ``rewrite`` when it renders the messages as the generic pipeline prepared them."""
    return messages, False, None


def keep_prompt(prompt, inp):
    """A family's ``fix_prompt`` when it keeps the rendered prompt."""
    return prompt


def no_prompt_key(prompt):
    """A family's ``prompt_key`` when its handler reads nothing of the rendered prompt."""
    return None


@dataclass(frozen=True)
class Family:
    """One model family's chat knowledge, as its module declares it (``FAMILY``):

    * ``names``: the handler names it gives (LFM2's module gives two);
    * ``detect(source)``: the handler name for a template source, or None (its branch of llama.cpp's
      ``common_chat_try_specialized_template``; ``bankml.chat.families.FAMILIES`` keeps their order);
    * ``rewrite(messages, inp)``: the messages (JSON form) rewritten before rendering, as the C++ handler
      does, ``(messages, override, context)``: ``override`` renders them as they are (the handler's
      ``messages_override``), ``context`` adds variables (or None);
    * ``fix_prompt(prompt, inp)``: the rendered prompt as the handler keeps it;
    * ``prompt_key(prompt)``: what of the rendered prompt ``apply`` reads (part of the cache key);
    * ``apply(out, inp)``: the handler (``common_chat_params_init_<name>``) completing the ``ChatPrompt``.

    Its mapper, when it has its own, is set on the parser by ``apply``."""

    names: tuple
    detect: Callable[[str], Optional[str]]
    apply: Callable[[Any, Inputs], None]
    rewrite: Callable[[list, Inputs], tuple] = keep_messages
    fix_prompt: Callable[[str, Inputs], str] = keep_prompt
    prompt_key: Callable[[str], Any] = no_prompt_key


def strict_triggers(triggers):
    """A lazy grammar's triggers in strict tool-call mode: a trigger word without the whitespace that ends it
    (``<tool_call>\n`` -> ``<tool_call>``), so that a call opened without that whitespace still starts the
    grammar, which then writes it (the grammar's call starts with the whole marker)."""
    out = []
    for kind, value in triggers:
        if kind == TRIGGER_WORD and value.rstrip() and value.rstrip() != value:
            value = value.rstrip()
        if [kind, value] not in out:
            out.append([kind, value])
    return out


def preserve_trigger_words(out):
    """Strict mode's trigger words among the preserved tokens: a trigger word that is one token of the model's
    vocabulary must be one (server-schema.cpp refuses the request otherwise), and strict mode's trimmed words
    (Llama 3.x's ``{``) are no handler's own."""
    words = [v for k, v in out.grammar_triggers or () if k == TRIGGER_WORD]
    preserved = list(out.preserved_tokens or [])
    out.preserved_tokens = preserved + [w for w in words if w not in preserved]


def finish(out, fn, include_grammar, lazy, triggers, head="", inp=None):
    """Builds the arena (``fn(builder)`` gives the root), and when ``include_grammar`` its grammar, as the
    handlers end: data.parser, data.grammar_lazy, data.grammar, data.grammar_triggers. The grammar's schemas
    are compiled in ``out.json_schema_mode`` (the tools' in ``out.tool_call_mode``)."""
    try:
        arena = build_chat_peg_parser(fn, inp is not None and inp.strict_tools)
        if isinstance(include_grammar, list):  # a flag the builder function may clear
            include_grammar = include_grammar[0]
        out.grammar, out.grammar_lazy, out.grammar_triggers = "", False, []
        if include_grammar:
            out.grammar_lazy = lazy
            out.grammar = forced_grammar(arena, out, inp)
            out.grammar_triggers = [list(t) for t in triggers]
            if lazy and out.tool_call_mode == "strict":
                out.grammar_triggers = strict_triggers(out.grammar_triggers)
                preserve_trigger_words(out)
    except SchemaError as e:
        raise schema_error(e, head) from None
    out.parser = ChatParser(arena, out.generation_prompt)
    return arena


def defaults(out):
    """common_chat_params' defaults for the fields a handler may leave."""
    out.format = "peg-native"
    out.supports_thinking = False
    out.thinking_start_tag, out.thinking_end_tags = "", []
    out.preserved_tokens, out.additional_stops, out.delimiters = [], [], []
