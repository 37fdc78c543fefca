"""Strict tool arguments as a model writes them: the grammar of a tool's arguments in the syntax of the template
that carries them, every text it allows valid for the tool's ``parameters`` schema (``jsonschema``'s verdict,
the strict compiler's reading), in one canonical spelling.

bankml's strict compiler (``bankml.schema.strict``) accepts *every* JSON text a schema accepts: keys in any
order, every escape of every character, llama.cpp's whitespace anywhere. That is the language to judge texts
with, and a poor one to generate in: a small model spends its tokens on indentation and writes keys as
``"t\\u0061gs"``. Tool calls also come in syntaxes that are not JSON: Qwen3-Coder's and DeepSeek's XML
parameters with string values as raw text, Gemma 4's ``{key:<|"|>text<|"|>}``, LFM2's Python keyword
arguments. This module writes, for a schema node, a grammar that is a *subset* of the valid texts (never a
text the schema refuses), in the canonical style:

* objects: the listed properties in schema order, each once, required ones present, optional ones skippable,
  no other key; ``{"a": 1, "b": 2}`` (``json.dumps``'s separators);
* arrays: ``[1, 2]`` within ``minItems``/``maxItems``;
* strings: each character raw except those JSON must escape (``"``, ``\\``, U+0000-U+001F: one short or
  ``\\u00XX`` escape each) and, in a ``JsonStyle(forbid=...)``, the characters a template's parser scans
  for (written ``\\uXXXX``); the decoded string is in the language of the node's string keywords
  (``minLength``, ``maxLength``, ``pattern``, ``format``, ``enum``, ``const``, as the strict compiler reads
  them);
* anything else (numbers and their bounds, booleans, ``null``, ``anyOf``/``oneOf``/``allOf``, ``$ref``
  cycles, non-string enums...) is the strict compiler's exact grammar of that node, its trailing whitespace
  dropped: valid, if not canonical.

The styles:

* ``JsonStyle``: JSON text (the default for arguments that are JSON).
* ``RawStyle(delimiter, json_kinds, exclude_prefix)``: the value of one XML parameter whose parser reads the
  raw text up to ``delimiter`` as a string: the decoded strings of the node's string keywords, minus those the
  parser would read otherwise: a text holding the delimiter before its end, a text the parser tries first as
  JSON of ``json_kinds`` (``"null"``, ``"true"``, numbers, ``[``/``{``...), a text starting with
  ``exclude_prefix`` (MiniCPM 5's ``<![CDATA[``).
* ``GemmaStyle``: Gemma 4's value syntax (bare keys, ``<|"|>``-quoted raw strings, no spaces).
* ``PythonStyle``: canonical JSON with strings in Python's single quotes (LFM2's keyword arguments).

What cannot be written exactly in a non-JSON style (a node the syntax has no form for: an object with
``minProperties``, a string that may also be a number in a syntax without quotes, ...) is refused with a
SchemaError naming the keyword and the JSON pointer, as strict mode refuses what it cannot enforce.

``params(document)`` reads the top-level object of a tool whose template writes one element per parameter
(the XML syntaxes): the properties in schema order, or a SchemaError.

Owns the canonical style of tool arguments; must not import the chat layer.
"""

import json
import re
from dataclasses import dataclass

from bankml.errors import SchemaError
from bankml.schema.strict import strict_schema_rules
from bankml.schema.strict.gbnf import lit
from bankml.schema.strict.lang import Lang, LangError, intersect_all
from bankml.schema.strict.lang.automaton import finish
from bankml.schema.strict.lang.charsets import SUR_HI, SUR_LO, cs_diff, cs_has, cs_inter, norm, norm_sorted
from bankml.schema.strict.lang.gbnf import _RAW_OK, _gbnf_class
from bankml.schema.strict.patterns import cached_lang
from bankml.schema.strict.vocabulary import CHECKED_FORMATS, VOCAB, draft_of

__all__ = [
    "GemmaStyle",
    "JsonStyle",
    "Param",
    "PythonStyle",
    "RawStyle",
    "ToolArgsBuilder",
    "kind",
    "named",
    "params",
    "shape",
    "string_language",
    "write",
]


@dataclass(frozen=True)
class JsonStyle:
    """Canonical JSON; ``forbid``: characters a string writes as ``\\uXXXX`` (the first character of a
    delimiter the template's parser scans the value's text for, so that no JSON text holds it)."""

    forbid: str = ""


@dataclass(frozen=True)
class RawStyle:
    """A raw-text string value read up to ``delimiter`` (see the module docstring)."""

    delimiter: str
    json_kinds: frozenset = frozenset()
    exclude_prefix: str = ""


@dataclass(frozen=True)
class GemmaStyle:
    """Gemma 4's value syntax."""


@dataclass(frozen=True)
class PythonStyle:
    """JSON with every string (value or key) in Python's single quotes, as LFM2 writes its keyword arguments
    (``'Paris'``, ``'it\\'s'``): what a Python-or-JSON value parser reads."""


@dataclass(frozen=True)
class Param:
    """One parameter of a tool written one element each: its name, its node's pointer, whether required."""

    name: str
    pointer: str
    required: bool


#: keywords of no draft (and the structural ones this module reads itself) that change nothing here
_IGNORED = frozenset(
    {
        "$schema",
        "$id",
        "$anchor",
        "$comment",
        "$defs",
        "definitions",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
    }
)
_OBJECT_KEYS = frozenset({"type", "properties", "required", "additionalProperties"})
_ARRAY_KEYS = frozenset({"type", "items", "minItems", "maxItems", "uniqueItems"})
_STRING_KEYS = frozenset({"type", "minLength", "maxLength", "pattern", "format", "enum", "const"})
#: the longest array a repetition writes (the GBNF parser's bound on repetition counts is 2,000)
_MAX_ITEMS = 1000
_MAX_REF_CHAIN = 64
_MAX_DEPTH = 64
_RULE_NAME = re.compile(r"[^a-zA-Z0-9-]+")

# the JSON spellings of the characters a canonical string escapes
_SHORT = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
_MAXCP = 0x10FFFF


def _esc(name):
    return str(name).replace("~", "~0").replace("/", "~1")


class _Node:
    """A schema node read for the canonical style: ``kind`` is "object" (``props``: [Param]), "array"
    (``items``: a pointer or None for any value, ``lo``/``hi``), "string" (``lang``), "anyof" (``alts``:
    pointers), "values" (an enum's or a const's values, ``alts``) or "leaf" (the strict compiler writes it;
    ``why``: the keyword that made it one, for the styles that cannot take a leaf of that kind; ``types``: the
    JSON types it may take, or None)."""

    __slots__ = ("kind", "pointer", "props", "items", "lo", "hi", "lang", "alts", "why", "types", "extra")

    def __init__(self, kind, pointer, **fields):
        self.kind, self.pointer = kind, pointer
        self.props = self.items = self.lang = self.alts = self.why = self.types = self.extra = None
        self.lo, self.hi = 0, None
        for k, v in fields.items():
            setattr(self, k, v)


class _Document:
    """One ``parameters`` schema read for the canonical style: pointers resolved, nodes classified (cached
    per pointer for the document's lifetime, which is one grammar's)."""

    def __init__(self, document):
        self.document = document
        draft = draft_of(document, 2020)
        self.vocab = VOCAB.get(draft)
        self.draft = draft
        self._nodes = {}

    def at(self, pointer):
        """The schema at a JSON pointer of the document, or raises SchemaError."""
        if pointer in ("#", ""):
            return self.document
        if not pointer.startswith("#/"):
            raise SchemaError("strict tool arguments: unsupported reference %s" % pointer, pointer, keyword="$ref")
        node = self.document
        for part in pointer[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaError("strict tool arguments: %s points to nothing" % pointer, pointer, keyword="$ref")
        return node

    def resolve(self, pointer):
        """``(schema, pointer)`` with a ``$ref`` that stands alone followed (local references only)."""
        seen = set()
        schema = self.at(pointer)
        while isinstance(schema, dict) and "$ref" in schema:
            others = [k for k in schema if k != "$ref" and k in self.vocab]
            if others and self.draft >= 2019:
                return schema, pointer  # $ref beside other keywords: an allOf, the strict compiler's
            ref = schema["$ref"]
            if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
                return schema, pointer
            if ref in seen or len(seen) >= _MAX_REF_CHAIN:
                return schema, pointer
            seen.add(ref)
            pointer, schema = ref, self.at(ref)
        return schema, pointer

    def node(self, pointer):
        got = self._nodes.get(pointer)
        if got is None:
            got = self._nodes[pointer] = self._classify(pointer)
        return got

    def _classify(self, pointer):
        schema, where = self.resolve(pointer)
        if self.vocab is None:  # draft 3: the strict compiler's to judge (it refuses it)
            return _Node("leaf", where, why="$schema")
        if schema is True or (isinstance(schema, dict) and not self._keys(schema)):
            return _Node("leaf", where, why="type")
        if not isinstance(schema, dict):
            return _Node("leaf", where, why="not")
        keys = self._keys(schema)
        types = self._types(schema.get("type")) if "type" in keys else None
        if keys == {"anyOf"} and isinstance(schema["anyOf"], list) and schema["anyOf"]:
            n = len(schema["anyOf"])
            return _Node("anyof", where, alts=[where + "/anyOf/%d" % i for i in range(n)])
        if (types == {"object"} or (types is None and keys & {"properties", "required"})) and keys <= _OBJECT_KEYS:
            props = self._props(schema, where)
            if props is not None:
                return _Node("object", where, props=props, extra=self._extra(schema, where))
        if types == {"array"} and keys <= _ARRAY_KEYS and schema.get("uniqueItems", False) is False:
            got = self._array(schema, where)
            if got is not None:
                return got
        string_only = types == {"string"} or (
            types is None and ("enum" in keys or "const" in keys) and self._string_values(schema) is not None
        )
        if string_only and keys <= _STRING_KEYS:
            # the keyword an empty language is blamed on: the most constraining one given
            why = next(
                (k for k in ("enum", "const", "pattern", "format", "maxLength", "minLength") if k in keys), "type"
            )
            return _Node("string", where, lang=self._lang(schema, where), why=why)
        if keys in ({"enum"}, {"const"}, {"type", "enum"}, {"type", "const"}):
            values = schema.get("enum") if "enum" in keys else [schema.get("const")]
            if isinstance(values, list):
                kept = [v for v in values if types is None or _type_ok(v, types)]
                return _Node("values", where, alts=kept, why="enum" if "enum" in keys else "const")
        why = sorted(keys - {"type"})[0] if keys - {"type"} else "type"
        leaf_types = types
        if "enum" in keys or "const" in keys:
            values = schema.get("enum") if "enum" in keys else [schema.get("const")]
            if isinstance(values, list):
                got = {_json_kind(v) for v in values}
                leaf_types = got if leaf_types is None else leaf_types & (got | ({"number"} & leaf_types))
        return _Node("leaf", where, why=why, types=leaf_types)

    def _keys(self, schema):
        return {k for k in schema if k in self.vocab or (k.startswith("$") and k not in _IGNORED)} - _IGNORED

    @staticmethod
    def _types(value):
        """The JSON types of a ``type`` keyword ("integer" and "number" both "number"; None when malformed)."""
        names = value if isinstance(value, list) else [value]
        out = set()
        for t in names:
            if not isinstance(t, str):
                return None
            out.add("number" if t == "integer" else t)
        if "integer" in names and "number" not in names:
            out.add("integer-only")
        return out

    def _props(self, schema, where):
        properties = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(properties, dict) or not isinstance(required, list):
            return None
        if any(not isinstance(r, str) or r not in properties for r in required):
            return None  # a required name with no schema: the strict compiler's
        out = []
        for name, sub in properties.items():
            is_required = name in required
            if sub is False:
                if is_required:
                    return None
                continue
            out.append(Param(name, where + "/properties/" + _esc(name), is_required))
        return out

    @staticmethod
    def _extra(schema, where):
        """What an object's other keys may hold: None, "any", or the pointer of the ``additionalProperties``
        schema. The field's convention for generation (llama.cpp's converter, XGrammar's and OpenAI's strict
        modes): an object that lists properties takes no other key unless ``additionalProperties`` says so; one
        that lists none is any object of its ``additionalProperties``."""
        if "additionalProperties" not in schema and schema.get("properties"):
            return None
        extra = schema.get("additionalProperties", True)
        if extra is False:
            return None
        if extra is True or extra == {}:
            return "any"
        return where + "/additionalProperties"

    def _array(self, schema, where):
        items = schema.get("items", True)
        if isinstance(items, list):
            return None
        lo, hi = schema.get("minItems", 0), schema.get("maxItems")
        for v in (lo, hi):
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 0):
                return None
        lo, hi = int(lo), None if hi is None else int(hi)
        if (hi is not None and (hi > _MAX_ITEMS or hi < lo)) or lo > _MAX_ITEMS:
            return None
        if items is False:
            if lo > 0:
                return None
            hi = 0
        ptr = None if items is True or items == {} else where + "/items"
        return _Node("array", where, items=ptr, lo=lo, hi=hi)

    def _string_values(self, schema):
        values = schema.get("enum") if "enum" in schema else [schema.get("const")]
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return None
        return values

    def _lang(self, schema, where):
        """The decoded strings a string node takes, as the strict compiler reads its keywords."""
        parts = []
        try:
            lo, hi = self._count(schema, "minLength", where), self._count(schema, "maxLength", where)
            if lo or hi is not None:
                parts.append((Lang.length(lo or 0, hi), False))
            pattern = schema.get("pattern")
            if pattern is not None:
                if not isinstance(pattern, str):
                    raise SchemaError(_head(where, "pattern must be a string"), where + "/pattern", "pattern")
                parts.append((cached_lang("regex", pattern), False))
            fmt = schema.get("format")
            if isinstance(fmt, str) and fmt in CHECKED_FORMATS:
                parts.append((cached_lang("format", fmt), False))
            if "enum" in schema or "const" in schema:
                values = self._string_values(schema)
                if values is None:
                    values = [
                        v
                        for v in (schema.get("enum") if "enum" in schema else [schema.get("const")]) or []
                        if isinstance(v, str)
                    ]
                parts.append((Lang.literals(values), False))
            if not parts:
                return Lang.any_string()
            return intersect_all(parts)
        except LangError as e:
            keyword = getattr(e, "keyword", None) or "pattern"
            keyword = "pattern" if keyword == "allOf" else keyword
            raise SchemaError(_head(where, "%s: %s" % (keyword, getattr(e, "reason", e))), where, keyword) from None

    @staticmethod
    def _count(schema, key, where):
        v = schema.get(key)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v) or v < 0:
            raise SchemaError(_head(where, "%s must be a non-negative integer" % key), where + "/" + key, key)
        return int(v)


def _json_kind(v, integral=False):
    """The JSON type of a value (``integral``: the set of type names it satisfies, where an integral number is
    also an "integer" and every number a "number", as ``_types`` names them both "number")."""
    if v is None:
        kind = "null"
    elif isinstance(v, bool):
        kind = "boolean"
    elif isinstance(v, (int, float)):
        kind = "number"
    elif isinstance(v, str):
        kind = "string"
    else:
        kind = "array" if isinstance(v, list) else "object"
    return {kind} if integral else kind


def _type_ok(value, types):
    """Whether a value satisfies a ``type`` read by ``_Document._types`` (an integer type takes an integral
    number, 1.0 too, as jsonschema from draft 6 on)."""
    kind = _json_kind(value)
    if kind != "number":
        return kind in types
    if "number" not in types:
        return False
    return "integer-only" not in types or float(value).is_integer()


def _head(pointer, reason):
    return "strict tool arguments: %s (at %s)" % (reason, pointer)


def _refuse(node, style, reason):
    keyword = node.why or "type"
    message = "strict tool arguments: %s: %s (keyword %s at %s)" % (style, reason, keyword, node.pointer)
    raise SchemaError(message, node.pointer, keyword=keyword)


def params(document, pointer="#"):
    """The parameters of a tool written one element each (the XML syntaxes): ``[Param]`` in schema order, or a
    SchemaError naming the keyword such a syntax cannot carry (``minProperties``, ``patternProperties``...:
    the object's other keys are the elements themselves)."""
    doc = _Document(document)
    node = doc.node(pointer)
    if node.kind != "object":
        _refuse(node, "parameters written one element each", "only an object of listed properties can be written")
    return node.props


def kind(document, pointer):
    """What the canonical style makes of the node at ``pointer``: "string" (strings only: a raw-text value in
    an XML syntax), "object", "array", "anyof" or "leaf" (the strict compiler's grammar)."""
    return _Document(document).node(pointer).kind


def shape(document, pointer):
    """``(kind, detail)`` of the node at ``pointer`` for a syntax that nests its own elements (MiniMax M3's):
    kind "object" with its ``[Param]``, "array" with ``(items pointer or None, minItems, maxItems or None)``,
    "anyof" with the alternatives' pointers, "string" or "leaf" with None."""
    node = _Document(document).node(pointer)
    if node.kind == "object":
        return "object", node.props
    if node.kind == "array":
        return "array", (node.items, node.lo, node.hi)
    if node.kind == "anyof":
        return "anyof", node.alts
    return node.kind, None


def named(tool_name, error):
    """A SchemaError of a tool's schema, its message naming the tool (keyword and pointer kept)."""
    return SchemaError("tool %s: %s" % (json.dumps(tool_name, ensure_ascii=False), error), error.pointer, error.keyword)


def string_language(document, pointer):
    """The ``Lang`` of the decoded strings the node at ``pointer`` takes when it takes strings only, else
    a SchemaError."""
    node = _Document(document).node(pointer)
    if node.kind != "string":
        _refuse(node, "a string value", "the node does not take strings only")
    return node.lang


def _kmp_safe(delimiter):
    """The strings ``s`` such that the first occurrence of ``delimiter`` in ``s + delimiter`` is the last one:
    what a parser reading up to the delimiter gives back whole."""
    if not delimiter:
        return Lang.any_string()
    d = [ord(c) for c in delimiter]
    m = len(d)
    fail = [0] * (m + 1)
    k = 0
    for i in range(1, m):
        while k and d[i] != d[k]:
            k = fail[k]
        if d[i] == d[k]:
            k += 1
        fail[i + 1] = k

    def step(state, c):
        while state and (state == m or d[state] != c):
            state = fail[state]
        return state + 1 if d[state] == c else 0

    def early(state):
        for i, c in enumerate(d):
            state = step(state, c)
            if state == m and i < m - 1:
                return True
        return False

    alphabet = sorted(set(d))
    trans, acc = [], []
    for state in range(m):
        row, prev = [], 0
        for c in alphabet:
            if c > prev:
                row.append((prev, c - 1, 0))
            t = step(state, c)
            if t < m:
                row.append((c, c, t))
            prev = c + 1
        if prev <= _MAXCP:
            row.append((prev, _MAXCP, 0))
        trans.append(_no_surrogates(row))
        acc.append(not early(state))
    return finish(trans, acc, "pattern")


def _no_surrogates(row):
    out = []
    for lo, hi, t in row:
        if lo < SUR_LO <= hi:
            out.append((lo, SUR_LO - 1, t))
            lo = SUR_LO
        if lo <= SUR_HI < hi:
            out.append((SUR_HI + 1, hi, t))
            continue
        if SUR_LO <= lo and hi <= SUR_HI:
            continue
        out.append((lo, hi, t))
    return out


_NUMBER_TEXT = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?"


def _raw_lang(lang, style):
    """``lang`` less the strings a parser of ``style`` reads otherwise (see RawStyle)."""
    parts = [(lang, False), (_kmp_safe(style.delimiter), False)]
    kinds = style.json_kinds
    if "null" in kinds:
        parts.append((Lang.literal("null"), True))
    if "boolean" in kinds:
        parts.append((Lang.literals(["true", "false"]), True))
    if "number" in kinds:
        parts.append((cached_lang("regex", r"\A" + _NUMBER_TEXT + r"\Z"), True))
    if "array" in kinds or "object" in kinds:
        parts.append((cached_lang("regex", r"\A[\[{]"), True))
    if style.exclude_prefix:
        parts.append((cached_lang("regex", r"\A" + re.escape(style.exclude_prefix)), True))
    return intersect_all(parts)


class _Writer:
    """Writes one tool schema's rules into a grammar builder (``add_rule(name, body)``), rule names under
    ``prefix``."""

    def __init__(self, doc, prefix, add_rule, style):
        self.doc, self.prefix, self._add, self.style = doc, prefix, add_rule, style
        self.n = 0
        self._charsets = {}
        self._memo = {}

    def fresh(self, tag):
        name = "%s-%s%d" % (self.prefix, tag, self.n)
        self.n += 1
        return name

    def rule(self, body, tag="r"):
        name = self.fresh(tag)
        got = self._add(name, body)
        return got or name

    # -- values --------------------------------------------------------------------------------------------

    def value(self, pointer, depth=0):
        key = (pointer, self.style)
        got = self._memo.get(key)
        if got is not None:
            return got
        if depth > _MAX_DEPTH:
            raise SchemaError(_head(pointer, "nesting deeper than %d" % _MAX_DEPTH), pointer, keyword="$ref")
        node = self.doc.node(pointer)
        gemma = isinstance(self.style, GemmaStyle)
        if node.kind == "object":
            expr = self.gemma_object(node, depth) if gemma else self.json_object(node, depth)
        elif node.kind == "array":
            expr = self.array(node, depth)
        elif node.kind == "string":
            expr = self.gemma_string(node) if gemma else self.json_string(node)
        elif node.kind == "anyof":
            expr = "( " + " | ".join(self.value(p, depth + 1) for p in node.alts) + " )"
        elif node.kind == "values":
            expr = self.values(node)
        else:
            expr = self.leaf(node)
        # a node met again (a shared definition) names the rule written the first time
        if " " in expr and node.kind != "anyof":
            expr = self.rule(expr, "v")
        self._memo[key] = expr
        return expr

    def leaf(self, node):
        bare = isinstance(self.style, GemmaStyle) or (isinstance(self.style, JsonStyle) and self.style.forbid)
        if bare:
            # numbers, booleans and null are spelled alike in every style; strings, arrays and objects are not
            if node.types is None or node.types & {"string", "array", "object"}:
                _refuse(
                    node,
                    "this template's argument syntax",
                    "only an object, array, string, number, boolean or null node of its own keywords can be written",
                )
        name = self.fresh("x")
        rules = strict_schema_rules(self.doc.document, name, pointer=node.pointer)
        for rule, body in rules.items():
            if rule == name and body.endswith(" " + name + "-space"):
                body = body[: -len(" " + name + "-space")]
            self._add(rule, body)
        return name

    def values(self, node):
        """An enum's (or a const's) values as canonical JSON texts, or in Gemma 4's syntax."""
        if not node.alts:
            _refuse(node, "an enum", "no value of the enum satisfies the type")
        texts = []
        for v in node.alts:
            if isinstance(self.style, GemmaStyle):
                texts.append(self._gemma_value(v, node))
            elif isinstance(self.style, PythonStyle) and isinstance(v, str):
                texts.append(self.quoted(v))
            elif isinstance(self.style, PythonStyle) and isinstance(v, (list, dict)):
                _refuse(node, "LFM2's argument syntax", "an array or object value of an enum is written as a leaf")
            else:
                texts.append(self.json_text(json.dumps(v, ensure_ascii=False)))
        return texts[0] if len(texts) == 1 else "( " + " | ".join(texts) + " )"

    def _gemma_value(self, v, node):
        if isinstance(v, str):
            if '<|"|>' in v:
                _refuse(node, "Gemma 4's argument syntax", 'a string holding <|"|> cannot be written')
            return lit('<|"|>' + v + '<|"|>')
        if isinstance(v, (list, dict)):
            _refuse(node, "Gemma 4's argument syntax", "an array or object value of an enum cannot be written")
        return lit(json.dumps(v))

    def json_object(self, node, depth):
        members = []
        for prop in node.props:
            key = self.quoted(prop.name)
            members.append((key + ' ": " ' + self.value(prop.pointer, depth + 1), prop.required))
        extra = self.extra_member(node, depth)
        return '"{" ' + self.members(members, '", "', extra) + ' "}"'

    def gemma_object(self, node, depth):
        members = []
        for prop in node.props:
            if not prop.name or any(c in prop.name for c in ":}{,<>") or prop.name.strip() != prop.name:
                _refuse(node, "Gemma 4's argument syntax", "the key %r cannot be written bare" % prop.name)
            members.append((lit(prop.name + ":") + " " + self.value(prop.pointer, depth + 1), prop.required))
        return '"{" ' + self.members(members, '","') + ' "}"'

    def extra_member(self, node, depth):
        """One member of an object's other keys (after the listed ones, as the object allows them): a key that
        is none of the listed names, in the style's quotes, and a value of ``additionalProperties``; None
        where there is none (or the style writes none: a parser scanning for a delimiter)."""
        if node.extra is None or (isinstance(self.style, JsonStyle) and self.style.forbid):
            return None
        names = Lang.literals([p.name for p in node.props]).complement()
        forbid = set()
        quote = "'" if isinstance(self.style, PythonStyle) else '"'
        quote_lit = lit(quote)
        key = quote_lit + " " + self.dfa(names, lambda cs: self.json_chars(cs, forbid, quote), quote_lit)
        value = self._any_value() if node.extra == "any" else self.value(node.extra, depth + 1)
        return self.rule(key + ' ": " ' + value, "e")

    def members(self, members, sep, extra=None):
        """The members in order, required ones present, optional ones skippable, ``sep`` between, then any
        number of ``extra`` members (None: none): two rules per member (no member written yet / some
        written)."""
        # from the end: after[i] = (rule for members i.. when none written, ... when some written)
        none_rule, some_rule = '""', '""'
        if extra is not None:
            some_rule = self.rule("( " + sep + " " + extra + " )*", "m")
            none_rule = self.rule("( " + extra + " " + some_rule + " )?", "m")
        if not members:
            return none_rule
        for text, required in reversed(members):
            tail = "" if some_rule == '""' else " " + some_rule
            with_none = text + tail
            with_some = sep + " " + text + tail
            if not required:
                with_none += " | " + none_rule
                with_some += " | " + some_rule
            none_rule = self.rule(with_none, "m")
            some_rule = self.rule(with_some, "m")
        return none_rule

    def array(self, node, depth):
        gemma = isinstance(self.style, GemmaStyle)
        sep = '","' if gemma else '", "'
        if node.items is None:
            if gemma or (isinstance(self.style, JsonStyle) and self.style.forbid):
                _refuse(node, "this template's argument syntax", "an array of any items cannot be written")
            item = self._any_value()
        else:
            item = self.value(node.items, depth + 1)
        lo, hi = node.lo, node.hi
        if hi == 0:
            return '"[]"'
        more_lo = max(lo - 1, 0)
        more = "(" + sep + " " + item + ")"
        if hi is None:
            rest = more + ("{%d,}" % more_lo if more_lo else "*")
        else:
            rest = more + "{%d,%d}" % (more_lo, hi - 1) if hi - 1 > 0 else ""
        body = item + (" " + rest if rest else "")
        inner = body if lo > 0 else "( " + body + " )?"
        return '"[" ' + inner + ' "]"'

    def _any_value(self):
        """Any JSON value in the canonical style: objects and arrays with ``json.dumps``'s separators, strings
        with only the escapes their quotes require, numbers as integers or decimals of at most four places
        and fifteen digits (each is ``json.dumps`` of the value it reads as), ``true``, ``false``, ``null``."""
        got = self._memo.get("any")
        if got is None:
            got = self._memo["any"] = name = self.fresh("any")
            string = self.fresh("str")
            quote = "'" if isinstance(self.style, PythonStyle) else '"'
            q = lit(quote)
            char = self.json_chars(((0, 0xD7FF), (0xE000, _MAXCP)), set(), quote)
            self._add(string, "%s ( %s )* %s" % (q, char, q))
            number = self.rule('"-"? [1-9] [0-9]* | "0" | "-"? ( [1-9] [0-9]{0,8} | "0" ) "." [0-9]{0,3} [1-9]', "num")
            member = '%s ": " %s' % (string, name)
            obj = '"{" ( %s ( ", " %s )* )? "}"' % (member, member)
            arr = '"[" ( %s ( ", " %s )* )? "]"' % (name, name)
            self._add(name, '%s | %s | %s | %s | "true" | "false" | "null"' % (obj, arr, string, number))
        return got

    # -- strings -------------------------------------------------------------------------------------------

    def quoted(self, text):
        """A string literal in the style's quotes (JSON's, or Python's single quotes), as a GBNF literal."""
        if isinstance(self.style, PythonStyle):
            out = []
            for ch in text:
                o = ord(ch)
                if ch in "'\\":
                    out.append("\\" + ch)
                elif o in _SHORT and o != 0x22:
                    out.append(_SHORT[o])
                elif o < 0x20:
                    out.append("\\u%04x" % o)
                else:
                    out.append(ch)
            return lit("'" + "".join(out) + "'")
        return self.json_text(json.dumps(text, ensure_ascii=False))

    def json_text(self, text):
        """A JSON text as a GBNF literal, the forbidden characters inside its strings escaped."""
        forbid = self.style.forbid if isinstance(self.style, JsonStyle) else ""
        for c in forbid:
            text = text.replace(c, "\\u%04x" % ord(c))
        return lit(text)

    def json_string(self, node):
        if node.lang.is_empty():
            _refuse(node, "a string", "no string satisfies the keywords")
        forbid = {ord(c) for c in (self.style.forbid if isinstance(self.style, JsonStyle) else "")}
        quote = "'" if isinstance(self.style, PythonStyle) else '"'
        quote_lit = lit(quote)
        return quote_lit + " " + self.dfa(node.lang, lambda cs: self.json_chars(cs, forbid, quote), quote_lit)

    def gemma_string(self, node):
        lang = _raw_lang(node.lang, RawStyle('<|"|>'))
        if lang.is_empty():
            _refuse(node, "a string", "no string satisfies the keywords")
        quote = lit('<|"|>')
        return quote + " " + self.dfa(lang, self.raw_chars, quote)

    def raw_string(self, node, style):
        if node.kind != "string":
            _refuse(node, "a raw-text string value", "the node does not take strings only")
        lang = _raw_lang(node.lang, style)
        if lang.is_empty():
            _refuse(node, "a string", "no string the template's parser reads back satisfies the keywords")
        return self.dfa(lang, self.raw_chars, '""')

    def raw_chars(self, cs):
        key = ("raw", cs)
        got = self._charsets.get(key)
        if got is None:
            got = self._charsets[key] = _gbnf_class(cs, admit_surrogates=True)
        return got

    def json_chars(self, cs, forbid, quote='"'):
        """One character of ``cs`` in a string in ``quote``s: raw, or the one escape the quotes require."""
        key = ("json", cs, tuple(sorted(forbid)), quote)
        got = self._charsets.get(key)
        if got is None:
            q = ord(quote)
            raw = cs_diff(cs_inter(cs, _RAW_OK), ((q, q),))
            if quote != '"':  # a double quote is plain text in single quotes
                raw = norm(list(raw) + ([(0x22, 0x22)] if cs_has(cs, 0x22) else []))
            for c in forbid:
                raw = cs_diff(raw, ((c, c),))
            alts = [_gbnf_class(raw, admit_surrogates=True)] if raw else []
            if quote != '"' and cs_has(cs, q):
                alts.append(lit("\\" + quote))
            for c in sorted(_SHORT):
                if cs_has(cs, c) and c not in forbid and not (c == 0x22 and quote != '"'):
                    alts.append(lit(_SHORT[c]))
            for lo, hi in cs_inter(cs, ((0, 0x1F),)):
                for c in range(lo, hi + 1):
                    if c not in _SHORT:
                        alts.append(lit("\\u%04x" % c))
            for c in sorted(forbid):
                if cs_has(cs, c):
                    alts.append(lit("\\u%04x" % c))
            body = alts[0] if len(alts) == 1 else " | ".join(alts)
            got = self.rule(body, "c") if len(alts) > 1 else body
            self._charsets[key] = got
        return got

    def dfa(self, lang, chars, close):
        """The rules of a Lang's DFA, one per state, each edge's characters by ``chars(charset)``; an accepting
        state may end with ``close``. Returns the start state's rule."""
        names = {}

        def name(s):
            if s not in names:
                names[s] = self.fresh("s")
            return names[s]

        start = name(0)
        todo, done = [0], set()
        while todo:
            s = todo.pop()
            if s in done:
                continue
            done.add(s)
            by_target, order = {}, []
            for lo, hi, t in lang._trans[s]:
                if t not in by_target:
                    by_target[t] = []
                    order.append(t)
                by_target[t].append((lo, hi))
            alts = []
            for t in order:
                alts.append(chars(norm_sorted(by_target[t])) + " " + name(t))
                todo.append(t)
            if lang._acc[s]:
                alts.append(close)
            self._add(names[s], " | ".join(alts))
        return start


def write(document, pointer, name, add_rule, style=None):
    """Adds the rules of the node at ``pointer`` of ``document`` in ``style`` (default ``JsonStyle()``) under
    names ``name-...`` with ``add_rule(name, body)``, and the rule ``name`` itself; returns ``name``."""
    style = JsonStyle() if style is None else style
    prefix = _RULE_NAME.sub("-", name) or "args"
    writer = _Writer(_Document(document), prefix, add_rule, style)
    if isinstance(style, RawStyle):
        expr = writer.raw_string(writer.doc.node(pointer), style)
    else:
        expr = writer.value(pointer)
    add_rule(prefix, expr)
    return prefix


class ToolArgsBuilder:
    """A grammar builder for the chat layer's grammars in strict tool-call mode: the tools' schemas (every
    schema but a response format's, ``response-format...``) are written in the canonical style, in the style
    their schema parser asks for; the response format's goes to ``inner`` (the converter's builder, or a
    ``StrictGrammarBuilder`` in strict JSON schema mode)."""

    strict = True

    def __init__(self, builder, inner=None, tools=()):
        self._builder = builder
        self._inner = inner if inner is not None else builder
        self._written = {}  # (id of the document dict, pointer, style) -> rule name; the documents kept alive
        # the request's tools by their parameters' document, to name the tool in a refusal
        self._tools = {id(doc): (doc, name) for doc, name in tools}

    def add_rule(self, name, rule):
        return self._builder.add_rule(name, rule)

    def add_schema(self, name, node=None, source=None, style=None):
        if name.startswith("response-format"):
            if getattr(self._inner, "strict", False):
                return self._inner.add_schema(name, node, source)
            return self._inner.add_schema(name, node)
        if source is None:
            source = (node, "#")
        document, pointer = source
        key = (id(document), pointer, style)
        hit = self._written.get(key)
        if hit is not None and hit[0] is document:
            return hit[1]
        base = _RULE_NAME.sub("-", name) or "args"
        rule_name, i = base, 0
        taken = {n for _, n in self._written.values()}
        while rule_name in taken:
            rule_name, i = base + str(i), i + 1
        try:
            got = write(document, pointer, rule_name, self._builder.add_rule, style)
        except SchemaError as e:
            known = self._tools.get(id(document))
            if known is not None and known[0] is document:
                raise named(known[1], e) from None
            raise
        self._written[key] = (document, got)
        return got
