"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

What the chat template layer (``bankml.chat.template``) and the hand-written handlers (``bankml.chat.families``)
share, the parts of ``common_chat_params`` and its inputs both build: the request error, the continuation
modes of a prefilled assistant message, a message's rendered content, the chat parser (an arena run as
``common_chat_peg_parse`` runs it) and an arena's grammar. It must not import ``template`` or ``families``.
"""

import json

from bankml.chat.chat_peg import REASONING, Mapper, peg_parse
from bankml.engine._grammar import Grammar, Rules
from bankml.engine.vocab import Vocab
from bankml.errors import GrammarError, SchemaError
from bankml.schema.converter import build_grammar
from bankml.schema.grammar import DEFAULT_STRICT_STYLE, StrictGrammarBuilder, check_mode
from bankml.schema.tool_args import ToolArgsBuilder

CONTINUATION_NONE, CONTINUATION_AUTO, CONTINUATION_REASONING, CONTINUATION_CONTENT = range(4)


class ChatRequestError(ValueError):
    """A request llama-server refuses before rendering (bad messages, tools, kwargs); llama.cpp's message."""


#: the tool choices llama.cpp knows (common_chat_tool_choice_parse_oaicompat)
TOOL_CHOICES = ("auto", "none", "required")

#: how the chat layer constrains tool calls: llama.cpp's grammars (the default, llama-server's answers byte for
#: byte), or strict mode (a forced call for "required" and a named function, the arguments exactly their schema)
TOOL_CALL_MODES = ("llama.cpp", "strict")


def check_tool_choice(tool_choice):
    """ChatRequestError with llama.cpp's message for a tool choice it does not know (a string other than
    TOOL_CHOICES); the one place the serve layer and the chat layer check it."""
    if isinstance(tool_choice, str) and tool_choice not in TOOL_CHOICES:
        raise ChatRequestError("Invalid tool_choice: " + tool_choice)


def check_tool_call_mode(mode):
    """``mode`` if it is one of TOOL_CALL_MODES; ValueError otherwise."""
    if mode not in TOOL_CALL_MODES:
        raise ValueError("tool_call_mode must be 'llama.cpp' or 'strict', not %r" % (mode,))
    return mode


def _dumps(value):
    return json.dumps(value, ensure_ascii=False)


def _function_name(entry, where):
    """The function name of a ``{"type": "function", "function": {"name": X}}`` (chat completions) or
    ``{"type": "function", "name": X}`` (Responses) entry."""
    if not isinstance(entry, dict) or entry.get("type") != "function":
        raise ChatRequestError(
            '%s: expected {"type": "function", "function": {"name": ...}}, got %s' % (where, _dumps(entry))
        )
    fn = entry.get("function")
    name = fn.get("name") if isinstance(fn, dict) else entry.get("name")
    if not isinstance(name, str) or not name:
        raise ChatRequestError("%s: the function's name must be a non-empty string, got %s" % (where, _dumps(entry)))
    return name


def read_tool_choice(tool_choice):
    """``(choice, names)`` of a request's ``tool_choice``: ``choice`` one of TOOL_CHOICES, ``names`` the
    functions the answer may call (None: every tool). Besides llama.cpp's strings, OpenAI's forms that name
    functions: ``{"type": "function", "function": {"name": X}}`` (X must be called: ``("required", (X,))``)
    and ``{"type": "allowed_tools", "allowed_tools": {"mode": "auto" | "required", "tools": [...]}}`` (also the
    Responses API's flat forms). ChatRequestError naming the field for anything else."""
    if tool_choice is None:
        return "auto", None
    if isinstance(tool_choice, str):
        check_tool_choice(tool_choice)
        return tool_choice, None
    if not isinstance(tool_choice, dict):
        raise ChatRequestError(
            'tool_choice: expected "auto", "none", "required" or an object naming a function, got '
            + _dumps(tool_choice)
        )
    kind = tool_choice.get("type")
    if kind == "function":
        return "required", (_function_name(tool_choice, "tool_choice"),)
    if kind == "allowed_tools":
        spec = tool_choice.get("allowed_tools", tool_choice)
        mode, tools = spec.get("mode"), spec.get("tools") if isinstance(spec, dict) else None
        if mode not in ("auto", "required"):
            raise ChatRequestError('tool_choice.allowed_tools.mode: expected "auto" or "required", got ' + _dumps(mode))
        if not isinstance(tools, list) or not tools:
            raise ChatRequestError("tool_choice.allowed_tools.tools: expected a non-empty array of functions")
        names = []
        for i, entry in enumerate(tools):
            name = _function_name(entry, "tool_choice.allowed_tools.tools[%d]" % i)
            if name not in names:
                names.append(name)
        return mode, tuple(names)
    raise ChatRequestError(
        'tool_choice: an object must have "type": "function" or "allowed_tools", got ' + _dumps(tool_choice)
    )


def resolve_tool_choice(tool_choice, tools, tool_call_mode):
    """``(choice, names)`` as ``read_tool_choice``, checked against the request's ``tools`` and the tool-call
    mode: a choice naming functions needs strict mode (llama-server reads it as "auto"), and each name must be
    one of the function tools."""
    choice, names = read_tool_choice(tool_choice)
    if names is None:
        return choice, None
    if tool_call_mode != "strict":
        raise ChatRequestError(
            "tool_choice naming a function is served in strict tool-call mode (bankml serve --tool-call-mode "
            'strict, tool_call_mode="strict"): llama-server reads it as "auto" and may answer with no call'
        )
    known = [
        t["function"].get("name")
        for t in tools or ()
        if isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)
    ]
    for name in names:
        if name not in known:
            raise ChatRequestError(
                "tool_choice names the function %s, which is not in tools (%s)"
                % (_dumps(name), ", ".join(_dumps(k) for k in known) or "none")
            )
    return choice, names


def render_content(msg):
    if msg["content"] and msg["content_parts"]:
        raise ChatRequestError("Cannot specify both content and content_parts")
    if msg["content"]:
        return msg["content"]
    return "\n\n".join(p["text"] for p in msg["content_parts"] if p["type"] == "text")


class ChatParser:
    """A chat parser as common_chat_peg_parse runs it: the arena built by the auto-parser or a handler, run
    leniently on the generation prompt followed by the answer, its AST mapped to the message."""

    def __init__(self, arena, generation_prompt, format_name="peg-native", mapper=None):
        self.arena = arena
        self.generation_prompt = generation_prompt
        self.format = format_name
        self.mapper = mapper or Mapper

    def parse(self, raw, partial=False):
        """The message for a raw answer (``partial``: a stream in progress). Raises ChatParseError with
        llama-server's message when a whole answer does not match."""
        return peg_parse(self.arena, self.generation_prompt, raw, partial, self.format, self.mapper)


UNWRAPPED_SCHEMA_ERRORS = ("JSON schema error at ", "At least one of min_value or max_value must be set")


def arena_grammar(
    arena,
    lazy=False,
    json_schema_mode="llama.cpp",
    tool_call_mode="llama.cpp",
    tools=(),
    blank_reasoning=False,
    strict_style=DEFAULT_STRICT_STYLE,
):
    """build_grammar(parser.build_grammar(builder, lazy)): the GBNF of an arena (SchemaError from the
    converter). ``json_schema_mode="strict"``: the arena's schemas (a response format's, tools' parameters)
    are compiled by strict mode (``bankml.schema.grammar.StrictGrammarBuilder``, in ``strict_style``) inside the
    same wrapping.
    ``tool_call_mode="strict"``: the tools' schemas are written in strict mode's canonical style for tool
    arguments (``bankml.schema.tool_args``), whatever ``json_schema_mode`` says of a response format's; a
    refusal names the tool of ``tools`` (the request's function tools) whose parameters it is.
    ``blank_reasoning``: the reasoning blocks' text is left out of the grammar (``Arena.build_grammar``'s
    ``blank_tags``): a block the template's grammar lets open closes at once."""
    strict_schemas = check_mode(json_schema_mode) == "strict"
    if check_tool_call_mode(tool_call_mode) == "strict":
        named = [
            (t["function"]["parameters"], t["function"].get("name"))
            for t in tools
            if isinstance(t.get("function"), dict) and isinstance(t["function"].get("parameters"), dict)
        ]

        def build(builder):
            inner = StrictGrammarBuilder(builder, style=strict_style) if strict_schemas else builder
            blank = frozenset({REASONING}) if blank_reasoning else frozenset()
            arena.build_grammar(ToolArgsBuilder(builder, inner, named), lazy, blank)

        return build_grammar(build)
    if strict_schemas:
        return build_grammar(
            lambda builder: arena.build_grammar(StrictGrammarBuilder(builder, style=strict_style), lazy)
        )
    return build_grammar(lambda builder: arena.build_grammar(builder, lazy))


def forced_grammar(arena, out, inp):
    """The grammar of a handler's or the auto-parser's arena (``arena_grammar`` in ``out``'s modes). Where
    strict mode forces the calls and the request turned thinking off, the reasoning blocks' text is left out
    (a template's grammar lets the model open one anyway, and a weak model then reasons to the end of its
    tokens), unless the generation prompt, which the grammar is fed first, needs it."""
    tools = inp.tools if inp is not None else ()
    lazy = bool(out.grammar_lazy)
    if inp is not None and inp.forced and not inp.enable_thinking:
        grammar = arena_grammar(arena, lazy, out.json_schema_mode, out.tool_call_mode, tools, True, out.strict_style)
        if _takes(grammar, out.generation_prompt):
            return grammar
    return arena_grammar(arena, lazy, out.json_schema_mode, out.tool_call_mode, tools, False, out.strict_style)


_BYTES = None


def _takes(grammar, text):
    """Whether a grammar takes ``text`` as the start of an answer (over a vocabulary of single bytes)."""
    global _BYTES
    if _BYTES is None:
        _BYTES = Vocab([bytes([c]) for c in range(256)] + [b"</s>"], eog_ids=[256])
    g = Grammar(Rules.parse(grammar, vocab=_BYTES), _BYTES)
    try:
        g.accept_bytes(text.encode("utf-8"))
    except GrammarError:
        return False
    return not g.is_dead()


def schema_error(e, head):
    """The SchemaError of a chat grammar's schema, with the chat layer's ``head`` (llama.cpp's message) before
    the converter's; a tool refused by strict tool-call mode keeps its own message, which names the tool."""
    message = str(e)
    if message.startswith(("tool ", "strict JSON schema conversion failed:")):
        # strict mode's refusal names the tool or the schema's keyword and pointer: the template is not the
        # cause, so it does not get llama-server's "Unable to generate parser for this template" head
        return e
    wrapped = "JSON schema conversion failed:\n"
    if message.startswith(wrapped) and message[len(wrapped) :].startswith(UNWRAPPED_SCHEMA_ERRORS):
        message = message[len(wrapped) :]
    return SchemaError(head + message, e.pointer, keyword=e.keyword)
