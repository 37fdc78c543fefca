"""JSON schemas to grammars.

Owns: ``grammar`` (the public entry points, ``json_schema_to_grammar`` / ``json_schema_to_rules``, in llama.cpp's
mode or the strict one), llama.cpp's conversion byte for byte in four modules, each compiled by Cython as it is:
``limits`` (``SchemaLimits``, the meter and budget of one conversion, the compiled depth bound and the plain-Python
rerun past it), ``jsontext`` (JSON read and dumped as nlohmann does, Grisu2 included), ``reader`` (the schema reader
of ``common/json-schema.cpp``: ``SchemaDocument`` and its nodes) and ``converter`` (``json_schema_to_grammar``,
``build_grammar``); ``strict`` (the strict compiler, a package of parts: exactly what jsonschema accepts, or a
refusal naming the keyword) with ``strict.lang`` (its regular languages of strings: patterns, lengths, formats),
``queries`` (questions the chat layer asks of schema nodes) and ``jsondepth`` (the nesting bound checked on JSON
text before any recursive decoder sees it).

Must not import: ``chat``, ``serve``, ``integrations`` or ``sampling``; from ``engine`` only the rules parser
(``json_schema_to_rules``).
"""

from bankml.schema.converter import gbnf_format_literal
from bankml.schema.grammar import MODES, json_schema_to_grammar, json_schema_to_rules
from bankml.schema.jsontext import MAX_JSON_DEPTH, load_schema
from bankml.schema.limits import DEFAULT_LIMITS, SchemaLimits

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
