"""JSON schemas to grammars.

Owns: ``grammar`` (the public entry points, ``json_schema_to_grammar`` / ``json_schema_to_rules``, in llama.cpp's
mode or the strict one), ``converter`` (llama.cpp's JSON reading as nlohmann does it, its schema reader and its
``json_schema_to_grammar``, byte for byte; compiled by Cython as it is), ``strict`` (the strict compiler: exactly
what jsonschema accepts, or a refusal naming the keyword) with ``strict_lang`` (its regular languages of strings:
patterns, lengths, formats), ``queries`` (questions the chat layer asks of schema nodes) and ``jsondepth`` (the
nesting bound checked on JSON text before any recursive decoder sees it).

Must not import: ``chat``, ``serve``, ``integrations`` or ``sampling``; from ``engine`` only the rules parser
(``json_schema_to_rules``).
"""

from bankml.schema.converter import (
    DEFAULT_LIMITS,
    MAX_JSON_DEPTH,
    SchemaLimits,
    gbnf_format_literal,
    load_schema,
)
from bankml.schema.grammar import MODES, json_schema_to_grammar, json_schema_to_rules

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_JSON_DEPTH",
    "MODES",
    "SchemaLimits",
    "gbnf_format_literal",
    "json_schema_to_grammar",
    "json_schema_to_rules",
    "load_schema",
]
