"""Ports semantics of llama.cpp (https://github.com/ggml-org/llama.cpp), MIT License, Copyright (c) 2023-2026 The ggml authors.

What the chat template layer (``bankml.chat.template``) and the hand-written handlers (``bankml.chat.families``)
share, the parts of ``common_chat_params`` and its inputs both build: the request error, the continuation
modes of a prefilled assistant message, a message's rendered content, the chat parser (an arena run as
``common_chat_peg_parse`` runs it) and an arena's grammar. It must not import ``template`` or ``families``.
"""

from bankml.chat.chat_peg import Mapper, peg_parse
from bankml.errors import SchemaError
from bankml.schema.converter import build_grammar
from bankml.schema.grammar import StrictGrammarBuilder, check_mode

CONTINUATION_NONE, CONTINUATION_AUTO, CONTINUATION_REASONING, CONTINUATION_CONTENT = range(4)


class ChatRequestError(ValueError):
    """A request llama-server refuses before rendering (bad messages, tools, kwargs); llama.cpp's message."""


#: the tool choices llama.cpp knows (common_chat_tool_choice_parse_oaicompat)
TOOL_CHOICES = ("auto", "none", "required")


def check_tool_choice(tool_choice):
    """ChatRequestError with llama.cpp's message for a tool choice it does not know (a string other than
    TOOL_CHOICES); the one place the serve layer and the chat layer check it."""
    if isinstance(tool_choice, str) and tool_choice not in TOOL_CHOICES:
        raise ChatRequestError("Invalid tool_choice: " + tool_choice)


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


def arena_grammar(arena, lazy=False, json_schema_mode="llama.cpp"):
    """build_grammar(parser.build_grammar(builder, lazy)): the GBNF of an arena (SchemaError from the
    converter). ``json_schema_mode="strict"``: the arena's schemas (a response format's, tools' parameters)
    are compiled by strict mode (``bankml.schema.grammar.StrictGrammarBuilder``) inside the same wrapping."""
    if check_mode(json_schema_mode) == "strict":
        return build_grammar(lambda builder: arena.build_grammar(StrictGrammarBuilder(builder), lazy))
    return build_grammar(lambda builder: arena.build_grammar(builder, lazy))


def schema_error(e, head):
    message = str(e)
    if message.startswith("strict JSON schema conversion failed:"):
        # strict mode's refusal names the schema's keyword and pointer: the template is not the cause, so it
        # does not get llama-server's "Unable to generate parser for this template" head
        return e
    wrapped = "JSON schema conversion failed:\n"
    if message.startswith(wrapped) and message[len(wrapped) :].startswith(UNWRAPPED_SCHEMA_ERRORS):
        message = message[len(wrapped) :]
    return SchemaError(head + message, e.pointer, keyword=e.keyword)
