"""JSON schemas to grammars.

Owns: ``converter`` (llama.cpp's JSON reading as nlohmann does it, its schema reader and its
``json_schema_to_grammar``, byte for byte; compiled by Cython as it is) and ``jsondepth`` (the nesting bound
checked on JSON text before any recursive decoder sees it).

Must not import: ``chat``, ``serve``, ``integrations`` or ``sampling``; from ``engine`` only the rules parser
(``json_schema_to_rules``).
"""

from bankml.schema.converter import (
    DEFAULT_LIMITS,
    MAX_JSON_DEPTH,
    SchemaLimits,
    gbnf_format_literal,
    json_schema_to_grammar,
    json_schema_to_rules,
    load_schema,
)

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_JSON_DEPTH",
    "SchemaLimits",
    "gbnf_format_literal",
    "json_schema_to_grammar",
    "json_schema_to_rules",
    "load_schema",
]
