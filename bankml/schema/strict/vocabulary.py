# cython: boundscheck=True, wraparound=True, cdivision=False, annotation_typing=False
"""The JSON Schema vocabulary strict mode reads: each draft's validation keywords (as jsonschema's validators know
them), the type names (JSON's number split into ``int`` and ``frac``), the formats jsonschema's checker checks, the
keywords ``lenient`` may name; and ``Refuse``, the error of a schema strict mode refuses (a keyword, a pointer, a
reason).

Owns: those tables, the draft of a document (its ``$schema``), ``Refuse``. Imports nothing of the package.
"""

from __future__ import annotations

import re

LENIENT_KEYWORDS = frozenset({"format", "pattern", "uniqueItems", "multipleOf", "contains", "properties"})

ALL_TYPES = frozenset({"null", "boolean", "int", "frac", "string", "array", "object"})
TYPE_NAMES = {
    "null": {"null"},
    "boolean": {"boolean"},
    "integer": {"int"},
    "number": {"int", "frac"},
    "string": {"string"},
    "array": {"array"},
    "object": {"object"},
}

# formats jsonschema's Draft 2020-12 FORMAT_CHECKER checks (MaskBench validates every draft with it); any other
# format name is an annotation to jsonschema, so strict mode ignores it too
CHECKED_FORMATS = frozenset(
    {
        "date",
        "date-time",
        "duration",
        "email",
        "hostname",
        "idn-email",
        "idn-hostname",
        "ipv4",
        "ipv6",
        "iri",
        "iri-reference",
        "json-pointer",
        "regex",
        "relative-json-pointer",
        "time",
        "uri",
        "uri-reference",
        "uri-template",
        "uuid",
    }
)

_COMMON = {
    "type",
    "enum",
    "multipleOf",
    "maximum",
    "minimum",
    "maxLength",
    "minLength",
    "pattern",
    "format",
    "items",
    "additionalItems",
    "maxItems",
    "minItems",
    "uniqueItems",
    "maxProperties",
    "minProperties",
    "required",
    "properties",
    "patternProperties",
    "additionalProperties",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "$ref",
}
# the validation keywords of each draft, as jsonschema's validators know them (then/else, minContains and
# maxContains are read by "if" and "contains")
_DRAFT6 = {"const", "contains", "exclusiveMaximum", "exclusiveMinimum", "propertyNames"}  # added by draft 6
_DRAFT2019 = _DRAFT6 | {"if", "dependentRequired", "dependentSchemas", "unevaluatedItems", "unevaluatedProperties"}
VOCAB = {
    4: _COMMON | {"dependencies"},
    6: _COMMON | {"dependencies"} | _DRAFT6,
    7: _COMMON | {"dependencies", "if"} | _DRAFT6,
    # ``dependencies`` is no keyword of 2019-09 and 2020-12, which split it in two; the suite's
    # optional/dependencies-compatibility reads it there as before (jsonschema ignores it: docs/modules/strict.md)
    2019: _COMMON | _DRAFT2019 | {"$recursiveRef", "dependencies"},
    2020: (_COMMON - {"additionalItems"}) | _DRAFT2019 | {"prefixItems", "$dynamicRef", "dependencies"},
}
# where a schema's subschemas stand: keywords whose value is one schema, a list of schemas, an object of schemas
# ("items" is one or a list; a draft-4..7 "dependencies" value is a schema or a list of names)
SUBSCHEMA_ONE = frozenset(
    ("additionalProperties", "additionalItems", "items", "contains", "propertyNames", "not", "if", "then", "else")
    + ("unevaluatedItems", "unevaluatedProperties")
)
SUBSCHEMA_LIST = frozenset(("allOf", "anyOf", "oneOf", "prefixItems", "items"))
SUBSCHEMA_MAP = frozenset(
    ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")
)
# read through the annotations of a schema's in-place applicators (unevaluated.py)
UNEVALUATED = frozenset({"unevaluatedProperties", "unevaluatedItems"})


_DRAFT_URI = re.compile(r"https?://json-schema\.org/(?:draft-0([3467])|draft/(2019-09|2020-12))/")
_DRAFTS = {"3": 3, "4": 4, "6": 6, "7": 7, "2019-09": 2019, "2020-12": 2020}


def draft_of(schema, unknown=None):
    """The draft a document's ``$schema`` names (a json-schema.org draft URI; 2020-12 without one), ``unknown``
    for another URI (a custom metaschema, whose vocabularies are not read)."""
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if not isinstance(uri, str):
        return 2020
    m = _DRAFT_URI.match(uri)
    return _DRAFTS[m.group(1) or m.group(2)] if m else unknown


class Refuse(Exception):
    def __init__(self, keyword, pointer, reason):
        super().__init__(reason)
        self.keyword, self.pointer, self.reason = keyword, pointer, reason


def refuse(keyword, pointer, reason):
    """Raise the Refuse of ``keyword`` at ``pointer``."""
    raise Refuse(keyword, pointer, reason)


def check_schema(s, pointer):
    """Refuse ``s`` (at ``pointer``) unless it is a schema: an object or a boolean."""
    if isinstance(s, bool):
        return
    if not isinstance(s, dict):
        refuse("schema", pointer, "a schema must be an object or a boolean")
